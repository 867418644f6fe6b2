"""Token streaming from Temporal workers: the Redis relay of ``TemporalConversationHost.stream()``.

Against the Temporal dev server (``HANDOFF_BUILDER_TEMPORAL_ADDRESS``) and a Redis server
(``HANDOFF_BUILDER_REDIS_URL``), both set by ``.ci/with_servers.py``; without them the tests skip,
saying which variable to set (in CI they must run). Each test has its own task queue,
conversations and relay key prefix, so that runs side by side do not meet.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from agent_framework import Agent, AgentResponseUpdate, Content, WorkflowEvent, tool

from handoff_builder import (
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_DELEGATION_EVENT,
    HANDOFF_ESCALATED_EVENT,
    HANDOFF_EVENT,
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_LIMIT_EVENT,
    HANDOFF_TIMEOUT_EVENT,
    HANDOFF_TURN_ABANDONED_EVENT,
    HANDOFF_TURN_EVENT,
    CapOutcome,
    ConversationHost,
    DelegationEvent,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffEvent,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    handoff_to,
    reply,
    respond,
    scripted_agent,
)

temporalio = pytest.importorskip("temporalio")
redis_asyncio = pytest.importorskip("redis.asyncio")

from temporalio import activity  # noqa: E402
from temporalio.client import Client  # noqa: E402

from handoff_builder.temporal import (  # noqa: E402
    HANDOFF_RETRY_EVENT,
    HANDOFF_STREAM_INCOMPLETE_EVENT,
    AgentCallOptions,
    AgentCallRetriedEvent,
    RedisRelay,
    StreamIncompleteEvent,
    TemporalConversationHost,
    conversation_worker,
)
from handoff_builder.temporal._live import LiveTurn  # noqa: E402
from handoff_builder.temporal._relay import AttemptEntry, UpdateEntry  # noqa: E402
from tests.stores import server_address  # noqa: E402
from tests.test_temporal import (  # noqa: E402
    Workers,
    cid,
    replays,
    retrying,
    stopped,
    wait_for,
    worker_command,
)

REDIS_VARIABLE = "HANDOFF_BUILDER_REDIS_URL"

LIFECYCLE = {
    "started",
    "status",
    "superstep_started",
    "superstep_completed",
    "executor_invoked",
    "executor_completed",
}
"""agent_framework's own events of a run, which ``ConversationHost.stream()`` passes on; a
conversation on Temporal runs no agent_framework workflow in the client, and yields none."""

STREAMED = {
    "output",
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_EVENT,
    HANDOFF_DELEGATION_EVENT,
    HANDOFF_ESCALATED_EVENT,
    HANDOFF_TIMEOUT_EVENT,
    HANDOFF_TURN_ABANDONED_EVENT,
    HANDOFF_TURN_EVENT,
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_LIMIT_EVENT,
    "warning",
}
"""What both hosts yield of a turn."""


def redis_url() -> str:
    """The Redis server's URL (see :func:`tests.stores.server_address`)."""
    return server_address(REDIS_VARIABLE, "relay tests against a Redis server")


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


@asynccontextmanager
async def serving(
    client: Client,
    builder: HandoffWorkflowBuilder,
    queue: str,
    relay: RedisRelay | None,
    *,
    worker_relay: RedisRelay | str | None = "same",
    agent_calls: AgentCallOptions | None = None,
    **kwargs: Any,
) -> AsyncGenerator[TemporalConversationHost, None]:
    """A worker (publishing to ``worker_relay``, by default ``relay``) and a host reading
    ``relay``."""
    published = relay if worker_relay == "same" else worker_relay
    async with conversation_worker(
        client, builder, task_queue=queue, agent_calls=agent_calls, relay=published
    ):
        yield TemporalConversationHost(client, task_queue=queue, relay=relay, **kwargs)


def seen(event: WorkflowEvent[Any]) -> tuple[Any, ...]:
    """What a user sees of an event: its type, who wrote or decided it, and what it says."""
    data = event.data
    if isinstance(data, AgentResponseUpdate):
        return (event.type, data.author_name, data.text, tuple(c.type for c in data.contents))
    if isinstance(data, HandoffEvent):
        return (event.type, data.source, data.target, data.goal)
    if isinstance(data, DelegationEvent):
        return (event.type, data.caller, data.expert, data.result)
    if isinstance(data, EscalationEvent):
        return (event.type, data.reason, data.agent)
    if isinstance(data, HandoffBlockedEvent):  # its call id is the scripted client's
        return (event.type, data.source, data.tool_name, data.reason, data.target)
    if isinstance(data, AgentCallRetriedEvent):
        return (event.type, data.agent, data.attempt)
    if isinstance(data, StreamIncompleteEvent):
        return (event.type,)
    if isinstance(data, HandoffTurnResult):
        return (event.type, data.text, data.active_agent, data.status)
    return (event.type, repr(data))


def texts(events: list[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """The (author, text) of each update with text."""
    return [(e[1], e[2]) for e in events if e[0] == "output" and e[2]]


async def streamed(events: AsyncIterator[WorkflowEvent[Any]]) -> list[tuple[Any, ...]]:
    return [seen(event) async for event in events if event.type not in LIFECYCLE]


# -- the same turns through ConversationHost and through Temporal ------------------------------


def delegating_desk() -> HandoffWorkflowBuilder:
    """triage writes and hands over to billing, which asks policy (an expert that writes) and
    writes its answer; the next message, billing writes again."""
    triage = scripted_agent("triage", respond("One ", "moment. ", handoff_to("billing", "Refund.")))
    billing = scripted_agent(
        "billing",
        call_tool("ask_policy", task="May I refund?"),
        respond("Refund ", "issued."),
        respond("You're ", "welcome."),
        description="charges",
    )
    policy = scripted_agent("policy", respond("Policy ", "says yes."), description="refunds")
    return (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_delegate(billing, policy)
    )


def designated_desk() -> HandoffWorkflowBuilder:
    """triage's updates are intermediate, refunds' are not streamed; billing's are output."""
    triage = scripted_agent("triage", respond("Passing ", "you on. ", handoff_to("billing")))
    billing = scripted_agent(
        "billing", respond("Refunds ", "will do it. ", handoff_to("refunds")), description="bills"
    )
    refunds = scripted_agent("refunds", respond("Done", "."), description="refunds")
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds)
        .with_output_from(billing)
        .with_intermediate_output_from(triage)
    )


def escalating_desk() -> HandoffWorkflowBuilder:
    """billing's handoff to refunds trips the cap of one handoff per message: an apology."""
    triage = scripted_agent("triage", respond("One ", "moment. ", handoff_to("billing")))
    billing = scripted_agent(
        "billing", respond("Let me ", "pass you on. ", handoff_to("refunds")), description="bills"
    )
    refunds = scripted_agent("refunds", reply("unused"), description="refunds")
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds)
        .with_max_handoffs_per_turn(1)
    )


def refusing_desk() -> HandoffWorkflowBuilder:
    """triage first calls billing's handoff to refunds (refused: it has no such edge), then hands
    over to billing; billing's second handoff of the message trips the cap of two, which returns
    the turn to the user (a limit, not an escalation)."""
    triage = scripted_agent(
        "triage",
        respond("Let me ", "see. ", handoff_to("refunds")),
        respond("Billing ", "it is. ", handoff_to("billing")),
    )
    billing = scripted_agent(
        "billing",
        respond("Refunds ", "next. ", handoff_to("refunds")),
        respond("I will ", "do it myself."),
        description="bills",
    )
    refunds = scripted_agent("refunds", reply("unused"), description="refunds")
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds)
        .with_max_handoffs_per_turn(1, outcome=CapOutcome.RETURN_TO_USER)
    )


MESSAGES = {
    "delegation": (delegating_desk, ["I was charged twice", "thanks"]),
    "designations": (designated_desk, ["I was charged twice"]),
    "escalation": (escalating_desk, ["I was charged twice"]),
    "refusal": (refusing_desk, ["I was charged twice"]),
}


@pytest.mark.parametrize(
    ("desk", "local"),
    [
        ("delegation", False),
        ("designations", False),
        ("escalation", False),
        ("refusal", False),
        ("delegation", True),
    ],
    ids=["delegation", "designations", "escalation", "refusal", "delegation-local_activities"],
)
async def test_stream_yields_what_conversation_host_streams(
    client: Client, queue: str, relay: RedisRelay, desk: str, local: bool
) -> None:
    """The same scripted desk through ``ConversationHost.stream()`` and through Temporal with a
    relay: the same events, in the same order, with the same authors and texts."""
    make, messages = MESSAGES[desk]
    local_host = ConversationHost(make(), InMemoryConversationStore())
    expected: list[list[tuple[Any, ...]]] = []
    for message in messages:
        events = [e async for e in local_host.stream("c", message)]
        assert {e.type for e in events} - STREAMED <= LIFECYCLE  # nothing else to compare
        expected.append([seen(e) for e in events if e.type in STREAMED])
    conversation = cid()
    async with serving(client, make(), queue, relay, local_activities=local) as host:
        got = [await streamed(host.stream(conversation, message)) for message in messages]
        await replays(client, conversation)
    assert got == expected
    assert all(len(texts(turn)) > 1 for turn in got)  # several updates: tokens, not replies


def waiting_desk(released: asyncio.Event) -> tuple[HandoffWorkflowBuilder, Agent]:
    """billing writes, then looks the charge up: ``look_up`` returns once ``released`` is set."""

    @tool
    async def look_up() -> str:
        """Look the charge up."""
        await released.wait()
        return "a double charge"

    def billing_answer(call: ModelCall) -> Step:
        if call.messages[-1].role == "tool":
            return respond("Found ", str(call.messages[-1].contents[0].result), ".")
        return respond("Checking ", "your charges. ", call_tool("look_up"))

    triage = scripted_agent("triage", respond("Let me ", "see. ", handoff_to("billing")))
    billing = scripted_agent(
        "billing", respond_with=billing_answer, description="charges", tools=[look_up]
    )
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing), billing


WAITING_TURN = [
    ("output", "triage", "Let me ", ("text",)),
    ("output", "triage", "see. ", ("text",)),
    ("output", "triage", "", ("function_call",)),
    ("output", "triage", "", ("function_result",)),
    (HANDOFF_EVENT, "triage", "billing", "Help the user."),
    ("output", "billing", "Checking ", ("text",)),
    ("output", "billing", "your charges. ", ("text",)),
    ("output", "billing", "", ("function_call",)),
    ("output", "billing", "", ("function_result",)),
    ("output", "billing", "Found ", ("text",)),
    ("output", "billing", "a double charge", ("text",)),
    ("output", "billing", ".", ("text",)),
    (
        HANDOFF_TURN_EVENT,
        "Let me see. Checking your charges. Found a double charge.",
        "billing",
        "completed",
    ),
]


def is_text(event: WorkflowEvent[Any], text: str) -> bool:
    return isinstance(event.data, AgentResponseUpdate) and event.data.text == text


async def test_tokens_arrive_while_the_agent_writes(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """billing's first words reach the client while billing still runs: its tool waits for the
    client to have read them (a stream that came only at the end would never finish)."""
    released = asyncio.Event()
    builder, _ = waiting_desk(released)
    got: list[tuple[Any, ...]] = []
    async with serving(client, builder, queue, relay) as host:

        async def read() -> None:
            async for event in host.stream(cid(), "why was I charged twice?"):
                got.append(seen(event))
                if is_text(event, "your charges. "):
                    released.set()

        await asyncio.wait_for(read(), timeout=60)
    assert got == WAITING_TURN


async def test_a_client_that_reconnects_reads_the_turn_from_its_start(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """A client goes away in the middle of a turn; with the same idempotency key, another reads
    the turn from its start while it runs, and a third, once it is over, reads it whole again.
    The turn runs once."""
    released = asyncio.Event()
    builder, billing = waiting_desk(released)
    conversation, key = cid(), f"k-{uuid.uuid4().hex[:8]}"
    async with serving(client, builder, queue, relay) as host:
        first = cast(
            AsyncGenerator[WorkflowEvent[Any], None],
            host.stream(conversation, "why was I charged twice?", idempotency_key=key),
        )
        partial: list[tuple[Any, ...]] = []
        async for event in first:
            partial.append(seen(event))
            if is_text(event, "your charges. "):
                break
        await first.aclose()  # gone, the turn still waiting for look_up

        async def reconnect() -> list[tuple[Any, ...]]:
            again: list[tuple[Any, ...]] = []
            async for event in host.stream(conversation, "unused", idempotency_key=key):
                again.append(seen(event))
                if is_text(event, "your charges. "):
                    released.set()
            return again

        again = await asyncio.wait_for(reconnect(), timeout=60)
        later = await streamed(host.stream(conversation, "unused", idempotency_key=key))
    assert partial == WAITING_TURN[:7]
    assert again == WAITING_TURN
    assert later == WAITING_TURN
    assert len(client_of(billing).calls) == 2  # once, with its tool


async def test_a_turn_that_was_sent_streams_its_replies_whole(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """A stream with the idempotency key of a turn sent without streaming: nothing was relayed,
    which the stream says, then the turn's replies whole, from its result."""
    builder = delegating_desk()
    conversation, key = cid(), "k-sent"
    async with serving(client, builder, queue, relay) as host:
        sent = await host.send(conversation, "I was charged twice", idempotency_key=key)
        got = await streamed(host.stream(conversation, "unused", idempotency_key=key))
    assert got == [
        (HANDOFF_STREAM_INCOMPLETE_EVENT,),
        ("output", "triage", "One moment. ", ("text", "text", "function_call")),
        (HANDOFF_EVENT, "triage", "billing", "Refund."),
        ("output", "billing", "Refund issued.", ("text", "text")),
        (
            HANDOFF_DELEGATION_EVENT,
            "billing",
            "policy",
            "Policy  says yes.",
        ),  # joined, not streamed
        (HANDOFF_TURN_EVENT, sent.text, "billing", "completed"),
    ]


async def test_without_a_relay_stream_yields_whole_replies_at_the_end(
    client: Client, queue: str
) -> None:
    """No relay: each reply whole, with the handoffs and delegations in their places."""
    async with serving(client, escalating_desk(), queue, None) as host:
        got = await streamed(host.stream(cid(), "I was charged twice"))
    apology = got[-2]
    assert got[:-2] == [
        ("output", "triage", "One moment. ", ("text", "text", "function_call")),
        (HANDOFF_EVENT, "triage", "billing", "Help the user."),
        ("output", "billing", "Let me pass you on. ", ("text", "text", "function_call")),
        (HANDOFF_ESCALATED_EVENT, "handoff_cap", "billing"),
    ]
    assert apology[:2] == ("output", "handoff_host")
    assert got[-1][0] == HANDOFF_TURN_EVENT
    assert got[-1][3] == "handoff_cap"


async def test_without_a_relay_refusals_and_limits_come_with_the_result(
    client: Client, queue: str
) -> None:
    """No relay: the refused handoff and the limit are yielded at the end of the turn too, in
    the order ``ConversationHost.stream()`` yields them among the handoffs."""
    local_host = ConversationHost(refusing_desk(), InMemoryConversationStore())
    local = [seen(e) async for e in local_host.stream("c", "I was charged twice")]
    decided = {HANDOFF_EVENT, HANDOFF_BLOCKED_EVENT, HANDOFF_LIMIT_EVENT}
    async with serving(client, refusing_desk(), queue, None) as host:
        got = await streamed(host.stream(cid(), "I was charged twice"))
    assert [e for e in got if e[0] in decided] == [e for e in local if e[0] in decided]
    assert [e[0] for e in got if e[0] in decided] == [
        HANDOFF_BLOCKED_EVENT,
        HANDOFF_EVENT,
        HANDOFF_LIMIT_EVENT,
    ]
    assert got[-1][0] == HANDOFF_TURN_EVENT


# -- faults ---------------------------------------------------------------------------------------


async def test_redis_down_loses_the_updates_not_the_turn(
    client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing answers at the relay's address: the stream says the live updates are lost, the
    replies follow whole, the turn is right, and the worker and the client warn."""
    down = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    relay = RedisRelay(down, timeout=0.5)
    caplog.set_level(logging.WARNING, logger="handoff_builder.temporal.relay")
    async with serving(client, delegating_desk(), queue, relay) as host:
        events = [e async for e in host.stream(cid(), "I was charged twice")]
    got = [seen(e) for e in events]
    assert got[0] == (HANDOFF_STREAM_INCOMPLETE_EVENT,)
    assert events[0].data.reason.startswith(f"the relay did not answer (relay {down}: ")
    assert texts(got) == [("triage", "One moment. "), ("billing", "Refund issued.")]
    assert got[-1] == (HANDOFF_TURN_EVENT, "One moment. Refund issued.", "billing", "completed")
    said = [record.getMessage() for record in caplog.records]
    assert any(
        f"relay {down} is unreachable" in line
        and "the turns and their results are not affected" in line
        for line in said
    ), said  # the worker's, once
    assert any("the live updates of its turn are incomplete" in line for line in said), said


async def test_a_redis_that_hangs_is_tried_once_and_the_turn_goes_on(
    client: Client, queue: str, relay: RedisRelay, caplog: pytest.LogCaptureFixture
) -> None:
    """The workers' Redis accepts connections and never answers: the first write gives up after
    ``timeout``, the next ones are dropped at once for a while (a call does not wait for it
    again), and the turn goes on, its replies whole."""
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read()  # never answers; returns once the relay hangs up

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    hung = RedisRelay(f"redis://127.0.0.1:{port}/0", timeout=0.5)
    caplog.set_level(logging.WARNING, logger="handoff_builder.temporal.relay")
    async with serving(client, delegating_desk(), queue, relay, worker_relay=hung) as host:
        events = [e async for e in host.stream(cid(), "I was charged twice")]
    await hung.aclose()
    for writer in accepted:
        writer.close()
    server.close()
    await server.wait_closed()
    got = [seen(e) for e in events]
    assert texts(got) == [("triage", "One moment. "), ("billing", "Refund issued.")]
    assert got[-1] == (HANDOFF_TURN_EVENT, "One moment. Refund issued.", "billing", "completed")
    assert len(accepted) == 1  # tried by triage's call; billing's updates were dropped at once
    said = [record.getMessage() for record in caplog.records]
    assert any(f"relay redis://127.0.0.1:{port}/0 is unreachable (Timeout" in s for s in said)


async def test_a_worker_without_the_relay_is_named(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """The client reads a relay its worker does not publish to: nothing arrives, which the stream
    says once the turn is over (naming the first call it missed), then the replies whole."""
    async with serving(client, delegating_desk(), queue, relay, worker_relay=None) as host:
        events = [e async for e in host.stream(cid(), "I was charged twice")]
    incomplete = [e.data for e in events if isinstance(e.data, StreamIncompleteEvent)]
    assert [i.reason for i in incomplete] == [
        "the relay has no update of agent call 1:invoke:triage (attempt 1): it expired, was "
        "trimmed, or its worker has no relay"
    ]
    assert texts([seen(e) for e in events]) == [
        ("triage", "One moment. "),
        ("billing", "Refund issued."),
    ]


async def test_a_late_reader_of_a_trimmed_stream_gets_the_replies_whole(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """A turn's stream keeps about ``max_entries`` entries and expires ``ttl`` s after its last:
    a reader that comes once part of it is gone is told so and reads the replies whole."""
    words = [f"w{n} " for n in range(300)]
    triage = scripted_agent("triage", respond(*words))
    trimming = RedisRelay(redis_url(), prefix=relay.prefix, ttl=30, max_entries=10)
    conversation, key = cid(), "k-long"
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, scripted_agent("billing"))
    async with serving(client, builder, queue, relay, worker_relay=trimming) as host:
        first = [e async for e in host.stream(conversation, "talk", idempotency_key=key)]
        server = redis_asyncio.Redis.from_url(redis_url())
        stream_key = relay.key(conversation, f"key:{key}")
        length, ttl = await server.xlen(stream_key), await server.ttl(stream_key)
        await server.aclose()
        later = [e async for e in host.stream(conversation, "talk", idempotency_key=key)]
    await trimming.aclose()
    assert length < 300  # trimmed
    assert 0 < ttl <= 30
    whole = "".join(words)
    assert first[-1].data.text == whole
    incomplete = [e.data.reason for e in later if isinstance(e.data, StreamIncompleteEvent)]
    assert incomplete == ["the relay misses the start of agent call 1:invoke:triage (attempt 1)"]
    assert seen(later[0]) == (HANDOFF_STREAM_INCOMPLETE_EVENT,)  # no half reply first
    assert texts([seen(e) for e in later]) == [("triage", whole)]


async def test_a_model_error_and_its_retry_are_announced(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """billing's model fails once: the retry is announced, with the failure, before the updates
    of billing's second attempt."""
    failures = [1]

    def billing_answer(call: ModelCall) -> Step:
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("the model is down")
        return respond("Refund ", "issued.")

    triage = scripted_agent("triage", respond("One ", "moment. ", handoff_to("billing")))
    billing = scripted_agent("billing", respond_with=billing_answer, description="charges")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    async with serving(client, builder, queue, relay, agent_calls=retrying()) as host:
        events = [e async for e in host.stream(cid(), "I was charged twice")]
    got = [seen(e) for e in events]
    assert got[4:] == [
        (HANDOFF_EVENT, "triage", "billing", "Help the user."),
        (HANDOFF_RETRY_EVENT, "billing", 2),
        ("output", "billing", "Refund ", ("text",)),
        ("output", "billing", "issued.", ("text",)),
        (HANDOFF_TURN_EVENT, "One moment. Refund issued.", "billing", "completed"),
    ]
    retried = events[5].data
    assert retried.call == "2:invoke:billing"
    assert retried.error is not None
    assert "the model is down" in retried.error


async def test_a_stalled_attempt_that_writes_on_after_its_retry_began_is_not_shown(
    client: Client, queue: str, relay: RedisRelay
) -> None:
    """billing's first attempt stalls its worker past the heartbeat timeout, then writes on: the
    retry has begun by then, and what the first attempt writes after that is not yielded."""

    @tool
    async def stall() -> str:
        """Look something up."""
        if activity.info().attempt == 1:
            time.sleep(5)  # noqa: ASYNC251 - the point: the worker's event loop stalls
        return "found"

    def billing_answer(call: ModelCall) -> Step:
        attempt = activity.info().attempt
        if call.messages[-1].role == "tool":
            return respond(f"done-{attempt} ", "now.")
        return respond(f"start-{attempt} ", call_tool("stall"))

    triage = scripted_agent("triage", respond("One ", "moment. ", handoff_to("billing")))
    billing = scripted_agent(
        "billing", respond_with=billing_answer, description="charges", tools=[stall]
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    options = AgentCallOptions(heartbeat=timedelta(seconds=2), retry=retrying(first_ms=50).retry)
    async with serving(client, builder, queue, relay, agent_calls=options) as host:
        events = [e async for e in host.stream(cid(), "I was charged twice")]
    shown, attempts = 1, [1]
    for event in events:  # after a retry, only the updates of the new attempt
        if isinstance(event.data, AgentCallRetriedEvent):
            shown = event.data.attempt
            attempts.append(shown)
        elif is_text(event, f"start-{shown} ") or is_text(event, f"done-{shown} "):
            continue
        else:
            assert not (isinstance(event.data, AgentResponseUpdate) and "-" in event.data.text)
    # The first attempt was taken for dead and retried; the retries shown only go forward (under
    # load attempts 2 and 3 can both wait on the stalled worker and begin in either order).
    assert len(attempts) >= 2
    assert attempts == sorted(set(attempts))
    result = events[-1].data
    assert isinstance(result, HandoffTurnResult)
    assert result.text.endswith(f"start-{shown} done-{shown} now.")  # the last attempt's


def test_an_attempt_whose_retry_began_first_is_void() -> None:
    """A worker whose event loop stalled past two heartbeat timeouts starts the second and the
    third attempt of a call at once, and the relay may take the third's entries first: the
    second's are then void, its start as its updates (no retry event that goes back)."""
    live = LiveTurn("c-1")

    def entry(**fields: Any) -> bytes:
        kind = UpdateEntry if "update" in fields else AttemptEntry
        return kind(call="2:invoke:billing", **fields).model_dump_json().encode()

    def said(text: str) -> dict[str, Any]:
        return AgentResponseUpdate(contents=[Content.from_text(text)], role="assistant").to_dict()

    [third] = live.events(entry(agent="billing", attempt=3))
    assert isinstance(third.data, AgentCallRetriedEvent)
    assert third.data.attempt == 3
    assert live.events(entry(agent="billing", attempt=2)) == []
    assert live.events(entry(attempt=2, n=0, sink="output", update=said("start-2 "))) == []
    [update] = live.events(entry(attempt=3, n=0, sink="output", update=said("start-3 ")))
    assert is_text(update, "start-3 ")


def test_refusals_limits_and_warnings_come_between_the_handoffs_they_came_between() -> None:
    """An attempt's entry carries the turn's handoffs and its events that travelled, each with
    the number of handoffs before it: the reader yields each event before the first handoff
    that came after it, and nothing twice."""
    live = LiveTurn("c-1")
    handoffs = [
        {"source": "triage", "target": "billing", "tool_name": "handoff_to_billing",
         "goal": "Bills.", "call_id": "c1"},
        {"source": "billing", "target": "refunds", "tool_name": "handoff_to_refunds",
         "goal": "Refund.", "call_id": "c2"},
    ]  # fmt: skip
    blocked = {"source": "triage", "tool_name": "handoff_to_refunds", "reason": "not_granted",
               "call_id": "c0", "target": "refunds"}  # fmt: skip
    events = [
        {"type": HANDOFF_BLOCKED_EVENT, "data": blocked, "after": 0},
        {"type": "warning", "data": "between the two", "after": 1},
        {"type": "warning", "data": "after both", "after": 2},
    ]

    def entry(attempt: int, handed: int, travelled: int) -> bytes:
        return AttemptEntry(
            call=f"{attempt}:invoke:refunds", agent="refunds", attempt=1,
            handoffs=handoffs[:handed], events=events[:travelled],
        ).model_dump_json().encode()  # fmt: skip

    def shown(got: list[WorkflowEvent[Any]]) -> list[str]:
        return [
            e.data if isinstance(e.data, str) else f"{e.type} {getattr(e.data, 'target', '')}"
            for e in got
        ]

    assert shown(live.events(entry(1, 1, 1))) == [
        f"{HANDOFF_BLOCKED_EVENT} refunds",
        f"{HANDOFF_EVENT} billing",
    ]
    assert shown(live.events(entry(2, 2, 3))) == [
        "between the two",
        f"{HANDOFF_EVENT} refunds",
        "after both",
    ]
    assert live.events(entry(3, 2, 3)) == []


@pytest.fixture
def workers(queue: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(queue, tmp_path / "calls.jsonl")
    yield started
    for process in started.processes:
        process.kill()
        process.wait(timeout=30)


async def test_a_worker_killed_mid_stream_and_the_retry_are_visible(
    client: Client, relay: RedisRelay, workers: Workers
) -> None:
    """SIGKILL while billing runs, after it wrote its first words: the stream says billing's
    call runs again, then the new attempt writes from the start; the turn's result is right."""
    streaming = {"TEMPORAL_WORKER_DESK": "streaming", "TEMPORAL_WORKER_RELAY": redis_url()}
    first = await asyncio.to_thread(workers.start, **streaming, TEMPORAL_WORKER_HANG="look_up")
    host = TemporalConversationHost(client, task_queue=workers.queue, relay=relay)
    second = None
    got: list[tuple[Any, ...]] = []
    retried: list[AgentCallRetriedEvent] = []

    def looked_up() -> bool:
        return any(call.get("tool") == "look_up" for call in workers.calls())

    async def read() -> None:
        nonlocal second
        async for event in host.stream(cid(), "why was I charged twice?"):
            got.append(seen(event))
            if isinstance(event.data, AgentCallRetriedEvent):
                retried.append(event.data)
            if second is None and is_text(event, "your charges. "):
                await wait_for(looked_up)  # billing's call waits in look_up
                first.send_signal(signal.SIGKILL)
                await asyncio.to_thread(first.wait, 30)
                second = await asyncio.to_thread(workers.start, **streaming)

    await asyncio.wait_for(read(), timeout=120)  # the heartbeat timeout (20 s), and more
    billing_writes = [
        ("output", "billing", "Checking ", ("text",)),
        ("output", "billing", "your charges. ", ("text",)),
        ("output", "billing", "", ("function_call",)),
    ]
    assert second is not None
    assert got == [
        ("output", "triage", "Let me ", ("text",)),
        ("output", "triage", "get billing. ", ("text",)),
        ("output", "triage", "", ("function_call",)),
        ("output", "triage", "", ("function_result",)),
        (HANDOFF_EVENT, "triage", "billing", "Billing."),
        *billing_writes,  # killed in look_up
        (HANDOFF_RETRY_EVENT, "billing", 2),
        *billing_writes,
        ("output", "billing", "", ("function_result",)),
        ("output", "billing", "billing: ", ("text",)),
        ("output", "billing", "found ", ("text",)),
        ("output", "billing", "a double charge", ("text",)),
        (
            HANDOFF_TURN_EVENT,
            "Let me get billing. Checking your charges. billing: found a double charge",
            "billing",
            "completed",
        ),
    ]
    assert retried == [AgentCallRetriedEvent("billing", 2, "2:invoke:billing", None)]
    calls = [(c["pid"], c.get("agent", c.get("tool"))) for c in workers.calls()]
    assert calls == [
        (first.pid, "triage"),
        (first.pid, "billing"),
        (first.pid, "look_up"),  # killed in here
        (second.pid, "billing"),  # billing's call again, elsewhere; triage's stands
        (second.pid, "look_up"),
        (second.pid, "billing"),
    ]


# -- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ttl": 0}, "RedisRelay's ttl must be more than 0, got 0."),
        ({"max_entries": 0}, "RedisRelay's max_entries must be more than 0, got 0."),
        ({"timeout": -1.0}, "RedisRelay's timeout must be more than 0, got -1.0."),
    ],
)
def test_a_relay_setting_out_of_range_is_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as raised:  # noqa: PT011 - the message is checked below
        RedisRelay(**settings)
    assert str(raised.value) == message


def test_a_relay_url_that_is_not_redis_is_refused() -> None:
    with pytest.raises(ValueError, match="Redis URL must specify one of the following schemes"):
        RedisRelay("http://127.0.0.1:6379")


async def test_the_relay_key_names_the_conversation_and_the_turn() -> None:
    relay = RedisRelay(prefix="desk:")
    assert relay.key("customer-42", "key:abc") == "desk:customer-42:key:abc"
    assert repr(relay) == "RedisRelay('redis://127.0.0.1:6379/0', prefix='desk:')"
    await relay.aclose()


async def test_the_worker_command_streams_through_the_relay_it_is_given(
    client: Client, relay: RedisRelay, queue: str, tmp_path: Path
) -> None:
    """``handoff-builder worker --relay URL``: a client with the same relay reads the agents'
    words as they write them, not whole replies at the end."""
    process = worker_command(
        queue, tmp_path / "calls.jsonl", "--relay", redis_url(), TEMPORAL_WORKER_DESK="streaming"
    )
    try:
        host = TemporalConversationHost(client, task_queue=queue, relay=relay)
        got = [seen(event) async for event in host.stream(cid(), "why was I charged twice?")]
        process.send_signal(signal.SIGINT)
    finally:
        code, _, err = stopped(process, timeout=60)
    assert (code, err) == (0, "")
    assert got[:3] == [
        ("output", "triage", "Let me ", ("text",)),
        ("output", "triage", "get billing. ", ("text",)),
        ("output", "triage", "", ("function_call",)),
    ]
