"""Remote agents (agent_framework's ``A2AAgent``) as participants, against real A2A servers.

Each test starts an a2a-sdk server on 127.0.0.1 (:mod:`tests.a2a_servers`) whose agent answers
from a script, and checks what went over the wire (the A2A messages the server received, their
context and task ids) as well as what the local models received. Sections: a remote delegate's
expert, its failures, a remote handoff target, the builder's and the lint's refusals, and what
of its agent card reaches a prompt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest
from agent_framework import Message
from agent_framework_a2a import A2AAgent
from pydantic import BaseModel

from handoff_builder import (
    HandoffWorkflowBuilder,
    RemoteAgentToolsError,
)
from handoff_builder.testing import (
    call_tool,
    client_of,
    received,
    reply,
    scripted_agent,
)
from tests.a2a_servers import A2AServer, Answer, answers, closed_port_url
from tests.helpers import run_turn

TASK = "What is the refund window for a damaged parcel?"
ANSWER = "Damaged parcels can be refunded within 30 days."
USER = "My parcel arrived broken, can I get my money back?"


def results_in(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """Every function result in ``messages`` as (call id, result)."""
    return [
        (str(c.call_id), str(c.result))
        for m in messages
        for c in m.contents
        if c.type == "function_result"
    ]


def texts(message: dict[str, Any]) -> list[str]:
    """The text parts of an A2A message as it went over the wire."""
    return [part["text"] for part in message["parts"] if "text" in part]


def remote(server: A2AServer, *, name: str = "policy", **options: Any) -> A2AAgent:
    """An ``A2AAgent`` for ``server``'s JSON-RPC address."""
    return A2AAgent(url=server.url, name=name, **options)


# -- 1. a remote delegate's expert ----------------------------------------------------------------


async def test_a_remote_expert_gets_the_task_and_its_answer_is_the_tool_result() -> None:
    async with A2AServer(answers(ANSWER)) as server:
        ask = call_tool("ask_policy", task=TASK)
        triage = scripted_agent("triage", ask, reply("You can get a refund within 30 days."))
        workflow = (
            HandoffWorkflowBuilder(triage)
            .with_delegate(triage, remote(server), "refund policy")
            .build()
        )
        turn = await run_turn(workflow, USER)

    # Over the wire: one SendMessage, the task alone, in a new context.
    [sent] = server.sent
    assert texts(sent) == [TASK]
    assert sent["role"] == "ROLE_USER"
    assert "contextId" not in sent
    assert "taskId" not in sent
    # The caller's second model call reads the remote answer as the call's result.
    call_id = str(ask.contents[0].call_id)
    assert results_in(received(triage, 1).messages) == [(call_id, ANSWER)]
    assert turn.result.text == "You can get a refund within 30 days."
    [delegation] = turn.result.delegations
    assert (delegation.expert, delegation.outcome, delegation.result) == (
        "policy",
        "answered",
        ANSWER,
    )
    client_of(triage).assert_complete()


class Refund(BaseModel):
    """What the expert is asked about."""

    order: str
    damaged: bool


async def test_a_remote_expert_receives_the_edges_typed_payload_as_json() -> None:
    async with A2AServer(answers(ANSWER)) as server:
        ask = call_tool("ask_policy", order="A-17", damaged=True)
        triage = scripted_agent("triage", ask, reply("Refundable."))
        workflow = (
            HandoffWorkflowBuilder(triage)
            .with_delegate(triage, remote(server), "refund policy", payload=Refund)
            .build()
        )
        await run_turn(workflow, USER)

    [sent] = server.sent
    assert texts(sent) == ['Refund: {"order":"A-17","damaged":true}']
    assert results_in(received(triage, 1).messages)[0][1] == ANSWER


async def test_a_remote_expert_with_history_reads_the_conversation_then_its_task() -> None:
    async with A2AServer(answers(ANSWER)) as server:
        triage = scripted_agent("triage", call_tool("ask_policy", task=TASK), reply("Yes."))
        workflow = (
            HandoffWorkflowBuilder(triage)
            .with_delegate(triage, remote(server), "refund policy", history="full")
            .build()
        )
        await run_turn(workflow, USER)

    [sent] = server.sent
    assert texts(sent) == [f"[user] {USER}\n\n[triage] {TASK}"]


async def test_each_delegation_starts_a_new_context() -> None:
    async with A2AServer(answers(ANSWER, "Within 14 days.")) as server:
        triage = scripted_agent(
            "triage",
            call_tool("ask_policy", task=TASK),
            reply("30 days."),
            call_tool("ask_policy", task="And for a late parcel?"),
            reply("14 days."),
        )
        workflow = (
            HandoffWorkflowBuilder(triage)
            .with_delegate(triage, remote(server), "refund policy")
            .build()
        )
        await run_turn(workflow, USER)
        await run_turn(workflow, "And if it was late?")

    assert [texts(sent) for sent in server.sent] == [[TASK], ["And for a late parcel?"]]
    assert all("contextId" not in sent for sent in server.sent)
    first, second = server.received
    assert first.context_id != second.context_id


# -- 1b. when the remote expert fails --------------------------------------------------------------


async def failed_delegation(expert: A2AAgent) -> str:
    """Run a turn in which triage asks ``expert``; the result triage's model read."""
    ask = call_tool("ask_policy", task=TASK)
    triage = scripted_agent("triage", ask, reply("I could not check the policy."))
    workflow = HandoffWorkflowBuilder(triage).with_delegate(triage, expert, "refund policy").build()
    turn = await run_turn(workflow, USER)
    assert turn.result.status == "completed"
    assert turn.result.text == "I could not check the policy."
    [(_, result)] = results_in(received(triage, 1).messages)
    [delegation] = turn.result.delegations
    assert (delegation.outcome, delegation.result) == ("failed", result)
    return result


async def test_a_server_error_is_the_callers_tool_error() -> None:
    async with A2AServer(answers(), fail_with=500) as server:
        result = await failed_delegation(remote(server))
        assert len(server.requests) == 1  # it reached the server, which answered 500

    assert result.startswith("Error: policy could not answer (RemoteAgentError: Remote agent ")
    assert "answered with an HTTP error" in result
    assert "500" in result
    assert result.endswith("Carry on without its answer.")


async def test_a_server_that_is_not_there_is_the_callers_tool_error() -> None:
    url = closed_port_url()
    result = await failed_delegation(A2AAgent(url=url, name="policy"))

    assert "RemoteAgentError: Remote agent 'policy'" in result
    assert "could not be reached" in result
    assert url.rstrip("/") in result


async def test_a_remote_expert_that_does_not_answer_in_time_is_a_tool_error() -> None:
    async with A2AServer(answers(Answer(ANSWER, delay=5))) as server:
        started = time.monotonic()
        result = await failed_delegation(remote(server, timeout=0.5))
        took = time.monotonic() - started

    assert "did not answer in time" in result
    assert took < 4  # the client's timeout, not the server's delay
    assert texts(server.sent[0]) == [TASK]


async def test_a_failed_remote_task_is_a_tool_error_with_its_words() -> None:
    async with A2AServer(answers(Answer("No such policy here.", "failed"))) as server:
        result = await failed_delegation(remote(server))

    assert "could not do its task" in result
    assert "TASK_STATE_FAILED: No such policy here." in result


async def test_an_agent_framework_a2a_agent_is_refused_where_it_would_need_tools() -> None:
    expert = A2AAgent(url="http://127.0.0.1:9/", name="policy")  # nothing is sent at build
    triage = scripted_agent("triage")
    with pytest.raises(RemoteAgentToolsError, match="'policy' is a remote A2A agent") as caught:
        HandoffWorkflowBuilder(triage).with_delegate(expert, triage)  # pyright: ignore[reportArgumentType]
    assert (caught.value.argument, caught.value.agent) == ("caller", "policy")
    assert "the caller of a delegate" in str(caught.value)
