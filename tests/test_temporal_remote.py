"""Remote (A2A) agents in a conversation on Temporal, against the dev server and real A2A servers.

Each agent call runs in an activity with the local runner, so a remote expert and a remote
handoff target run there as in one process: their A2A context and task travel with the
conversation (its history, through the workflow's payloads), so the next message, in a later
activity, continues the remote specialist's task. Without ``HANDOFF_BUILDER_TEMPORAL_ADDRESS`` the
tests skip, saying so; in CI they must run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver
from agent_framework import AgentResponseUpdate
from agent_framework_a2a import A2AAgent

from handoff_builder import (
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    PendingRequestsError,
    RemoteQuestion,
)
from handoff_builder.testing import call_tool, handoff_to, received, reply, scripted_agent
from tests.a2a_servers import A2AServer, Answer, answers

pytest.importorskip("temporalio")
redis_asyncio = pytest.importorskip("redis.asyncio")

from temporalio.client import Client  # noqa: E402

from handoff_builder.temporal import (  # noqa: E402
    RedisRelay,
    TemporalConversationHost,
    conversation_worker,
)
from tests.test_temporal import cid, replays, serving  # noqa: E402
from tests.test_temporal_relay import redis_url  # noqa: E402

TASK = "What is the refund window for a damaged parcel?"
ANSWER = "Damaged parcels can be refunded within 30 days."
USER = "My parcel arrived broken, can I get my money back?"


def texts(message: dict[str, Any]) -> list[str]:
    """The text parts of an A2A message as it went over the wire."""
    return [part["text"] for part in message["parts"] if "text" in part]


@pytest.mark.parametrize("local", [False, True], ids=["activities", "local_activities"])
async def test_a_remote_expert_and_a_remote_specialist_on_temporal(
    client: Client, queue: str, local: bool
) -> None:
    """triage asks the remote ``policy``, then hands the conversation to the remote ``returns``,
    whose question is the turn's pending request: its answer, in a later activity, continues its
    A2A task, which completes and hands back to triage."""
    returns_script = answers(
        Answer("Which order is it?", "input_required"),
        Answer("Refund of A-17 started.", "completed"),
    )
    async with (
        A2AServer(answers(ANSWER)) as policy_server,
        A2AServer(returns_script, name="returns") as returns_server,
    ):
        triage = scripted_agent(
            "triage",
            call_tool("ask_policy", task=TASK),
            handoff_to("returns", "Refund a broken parcel."),
            reply("Your refund is on its way. Anything else?"),
        )
        policy = A2AAgent(url=policy_server.url, name="policy")
        returns = A2AAgent(url=returns_server.url, name="returns")
        builder = (
            HandoffWorkflowBuilder(triage)
            .with_delegate(triage, policy, "refund policy questions")
            .with_handoff(triage, returns, "returns and refunds")
            .with_hand_back(triage, [returns])
        )
        conversation = cid()
        async with serving(client, builder, queue, local_activities=local) as host:
            with pytest.raises(PendingRequestsError) as waiting:
                await host.send(conversation, USER)
            [pending] = await host.pending(conversation)
            answered = {str(pending.id): RemoteQuestion.answer("It is order A-17.")}
            second = await host.respond(conversation, answered)
            history = await host.history(conversation)
            await replays(client, conversation)

    # The remote expert answered triage's task, in a context of its own.
    [asked] = policy_server.sent
    assert texts(asked) == [TASK]
    assert [(d.expert, d.outcome, d.result) for d in second.delegations] == [
        ("policy", "answered", ANSWER)
    ]
    assert received(triage, 1).sees(ANSWER)
    # The remote specialist asked: the turn waits for its question, as for any request.
    [asked] = waiting.value.requests
    question = RemoteQuestion.of(asked)
    assert question is not None
    assert (question.agent, question.text) == ("returns", "Which order is it?")
    assert pending.to_dict() == asked.to_dict()
    # The answer continued its A2A task, in the same context.
    opened, continued = returns_server.received
    assert (continued.text, continued.continued) == ("It is order A-17.", True)
    assert returns_server.sent[1]["contextId"] == opened.context_id
    assert returns_server.sent[1]["taskId"] == opened.task_id
    # Its task completed: the conversation went back to triage, with its answer as the summary.
    assert [(h.source, h.target) for h in second.handoffs] == [
        ("triage", "returns"),
        ("returns", "triage"),
    ]  # one turn, which waited for the answer
    assert received(triage, 2).rendered.endswith(
        "Hand-back from returns to you (triage). Summary: Refund of A-17 started."
    )
    assert second.active_agent == "triage"
    assert [(m.author_name, m.text) for m in second.messages if m.text] == [
        ("returns", "Which order is it?"),
        (None, "It is order A-17."),
        ("returns", "Refund of A-17 started."),
        ("triage", "Your refund is on its way. Anything else?"),
    ]
    said = [(m.author_name, m.text) for m in history if m.role == "assistant" and m.text]
    assert ("returns", "Which order is it?") in said
    assert ("returns", "Refund of A-17 started.") in said


@pytest.mark.parametrize("how", ["send", "stream"])
async def test_the_next_message_answers_a_remote_question_on_temporal(
    client: Client, queue: str, how: str
) -> None:
    """As with a ``ConversationHost``: while the turn waits for the remote specialist's question
    alone, the next message is its answer, sent in the same A2A context and task, and the
    waiting turn goes on to its end (the task completes and hands the conversation back)."""
    returns_script = answers(
        Answer("Which order is it?", "input_required"),
        Answer("Refund of A-17 started.", "completed"),
    )
    async with A2AServer(returns_script, name="returns") as returns_server:
        triage = scripted_agent(
            "triage",
            handoff_to("returns", "Refund a broken parcel."),
            reply("Your refund is on its way. Anything else?"),
        )
        returns = A2AAgent(url=returns_server.url, name="returns")
        builder = (
            HandoffWorkflowBuilder(triage)
            .with_handoff(triage, returns, "returns and refunds")
            .with_hand_back(triage, [returns])
        )
        conversation = cid()
        async with serving(client, builder, queue) as host:
            with pytest.raises(PendingRequestsError) as waiting:
                await host.send(conversation, USER)
            if how == "send":
                second = await host.send(conversation, "It is order A-17.")
            else:
                streamed = [e async for e in host.stream(conversation, "It is order A-17.")]
                [second] = [e.data for e in streamed if isinstance(e.data, HandoffTurnResult)]
            left = await host.pending(conversation)
            history = await host.history(conversation)
            await replays(client, conversation)

    [asked] = waiting.value.requests
    assert getattr(RemoteQuestion.of(asked), "text", None) == "Which order is it?"
    # The message went to the remote agent as the answer, in its waiting task.
    opened, continued = returns_server.received
    assert (continued.text, continued.continued) == ("It is order A-17.", True)
    assert texts(returns_server.sent[1]) == ["It is order A-17."]
    assert returns_server.sent[1]["contextId"] == opened.context_id
    assert returns_server.sent[1]["taskId"] == opened.task_id
    # The waiting turn went on: the task completed and handed back to triage, which answered.
    assert second.status == "completed"
    assert [(h.source, h.target) for h in second.handoffs] == [
        ("triage", "returns"),
        ("returns", "triage"),
    ]
    assert received(triage, 1).rendered.endswith(
        "Hand-back from returns to you (triage). Summary: Refund of A-17 started."
    )
    assert second.active_agent == "triage"
    assert [(m.author_name, m.text) for m in second.messages if m.text] == [
        ("returns", "Which order is it?"),
        (None, "It is order A-17."),
        ("returns", "Refund of A-17 started."),
        ("triage", "Your refund is on its way. Anything else?"),
    ]  # one turn, which waited for the answer
    assert left == []
    assert [m.text for m in history if m.role == "user"] == [USER, "It is order A-17."]


async def card_of(server: A2AServer, *, name: str) -> A2AAgent:
    """An ``A2AAgent`` made from ``server``'s agent card (which says it streams)."""
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
    return A2AAgent(agent_card=card, name=name)


@pytest.fixture
async def relay() -> AsyncIterator[RedisRelay]:
    """A relay of this test's own (its key prefix); its streams are deleted after the test."""
    made = RedisRelay(redis_url(), prefix=f"test-{uuid.uuid4().hex[:10]}:")
    yield made
    await made.aclose()
    server = redis_asyncio.Redis.from_url(redis_url())
    keys = [key async for key in server.scan_iter(match=f"{made.prefix}*")]
    if keys:
        await server.delete(*keys)
    await server.aclose()


async def test_a_remote_specialist_streams_through_the_relay(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """``TemporalConversationHost.stream()``: the worker's activity streams the remote agent's
    chunks to the relay as its server writes them."""
    chunks = ("Our refund policy: ", "damaged parcels ", "within 30 days.")
    written = Answer(chunks=chunks, chunk_delay=0.4)
    async with A2AServer(answers(written), name="returns") as server:
        returns = await card_of(server, name="returns")
        triage = scripted_agent("triage", handoff_to("returns", "Refund a broken parcel."))
        builder = HandoffWorkflowBuilder(triage).with_handoff(triage, returns)
        arrived: list[tuple[AgentResponseUpdate, float]] = []
        result: HandoffTurnResult | None = None
        async with conversation_worker(client, builder, task_queue=queue, relay=relay):
            host = TemporalConversationHost(client, task_queue=queue, relay=relay)
            async for event in host.stream(cid(), USER):
                if event.type == "output" and isinstance(event.data, AgentResponseUpdate):
                    arrived.append((event.data, time.monotonic()))
                if isinstance(event.data, HandoffTurnResult):
                    result = event.data

    streamed = [(u, at) for u, at in arrived if u.author_name == "returns" and u.text]
    assert [u.text for u, _ in streamed] == list(chunks)
    assert streamed[0][1] < server.written[-1][1]  # it came while the server was still writing
    assert result is not None
    assert (result.text, result.active_agent) == ("".join(chunks), "returns")


async def test_a_remote_call_cut_at_its_deadline_on_temporal_cancels_its_task(
    client: Client, queue: str
) -> None:
    script = answers(Answer("Too late.", delay=5), Answer("Which order is it?", "input_required"))
    async with A2AServer(script, name="returns") as server:
        returns = await card_of(server, name="returns")
        triage = scripted_agent("triage", handoff_to("returns", "Refund a broken parcel."))
        builder = (
            HandoffWorkflowBuilder(triage)
            .with_handoff(triage, returns)
            .with_timeouts(agent_call=0.5)
        )
        conversation = cid()
        async with serving(client, builder, queue) as host:
            started = time.monotonic()
            late = await host.send(conversation, USER)
            took = time.monotonic() - started
            with pytest.raises(PendingRequestsError) as again:
                await host.send(conversation, "Are you there?")

    assert late.status == "agent_timeout"
    assert took < 4
    cut, _ = server.received
    assert server.cancelled == [cut.task_id]
    [asked] = again.value.requests
    assert (asked.text, getattr(RemoteQuestion.of(asked), "agent", None)) == (
        "Which order is it?",
        "returns",
    )
