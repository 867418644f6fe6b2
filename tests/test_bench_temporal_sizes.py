"""``benchmarks/bench_temporal_sizes.py`` reads a turn's bytes from a real event history.

The benchmark itself is not run here at its sizes (see docs/performance.md); its measuring paths
are, on conversations of a few messages against the dev server and the PostgreSQL server
``.ci/with_servers.py`` reaches: inline, by reference (a PostgreSQL message log), a run that reads
its conversation back after continue-as-new, a conversation larger than a payload, and the whole
benchmark with its worker processes. Without ``HANDOFF_BUILDER_TEMPORAL_ADDRESS`` and
``HANDOFF_BUILDER_POSTGRES_DSN`` the tests skip, saying so; in CI they must run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

pytest.importorskip("temporalio")

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.stores import PostgresConversationStore
from handoff_builder.temporal import TemporalConversationHost, conversation_worker
from handoff_builder.testing import handoff_to, reply, scripted_agent

from .stores import postgres_dsn, temporal_address

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_temporal_sizes.py"
REPLY = "Refund issued."


@pytest.fixture
def sizes(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The benchmark's module (it puts benchmarks/ on ``sys.path``; both undone after the test)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("bench_temporal_sizes", BENCHMARK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def log() -> AsyncIterator[PostgresConversationStore]:
    """A PostgreSQL message log of the test's own tables, dropped at its end."""
    store = PostgresConversationStore(postgres_dsn(), table_prefix=f"t{uuid.uuid4().hex[:10]}_")
    yield store
    await store.drop_tables()
    await store.close()


def desk() -> HandoffWorkflowBuilder:
    """The benchmark's desk: triage hands off to billing, which answers every message."""
    triage = scripted_agent(
        "triage", respond_with=lambda _call: handoff_to("billing", goal="Refund a double charge.")
    )
    billing = scripted_agent("billing", respond_with=lambda _call: reply(REPLY))
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_hand_back(triage)


def json_bytes(messages: list[Any]) -> int:
    return sum(len(json.dumps(message.to_dict(), separators=(",", ":"))) for message in messages)


async def side_of(sizes: ModuleType, client: Any, queue: str, log: Any = None) -> Any:
    """The benchmark's side of the workers of ``queue`` (by reference with ``log``)."""
    side = sizes.Side(
        sizes.BY_REFERENCE if log is not None else sizes.INLINE,
        TemporalConversationHost(client, task_queue=queue, messages=log),
        TemporalConversationHost(client, task_queue=queue, messages=log, turns_per_run=1),
    )
    side.growth = await sizes.turn_growth(side.host)
    return side


async def test_a_turns_bytes_are_read_from_its_events(
    sizes: ModuleType, client: Any, queue: str
) -> None:
    """One continuing turn: one activity, whose input is the conversation so far with the new
    message (and the host's state), whose result is the reply; the history holds both and more.
    A conversation longer by 32 messages makes an input larger by about their size."""
    async with conversation_worker(client, desk(), task_queue=queue):
        side = await side_of(sizes, client, queue)
        assert side.growth == sizes.Growth(4, 2)  # the user's message, the handoff's call and
        # result, the reply; then the user's message and the reply
        short = await sizes.measure(side, 8, 200)
        long = await sizes.measure(side, 40, 200)

    added = side.growth.first
    for measured, length in ((short, 8), (long, 40)):
        turn = measured.sizes
        assert measured.error is None
        assert measured.seeded_in == 1
        assert measured.turn_ms > 0
        assert turn.activities == 1
        carried = json_bytes(
            [*sizes.prior(length - added, 200), *[sizes.user_message()] * (added + 1)]
        )  # a lower bound: the calls also carry the handoff's messages and the host's state
        assert carried < turn.activity_input_bytes < carried + 8_000, (length, turn)
        assert len(REPLY) < turn.activity_result_bytes < 2_000
        assert turn.history_bytes > turn.activity_input_bytes + turn.activity_result_bytes
        assert turn.events >= 8  # workflow tasks, the Update, the activity, the idle timer
        assert measured.start.reads == 0  # the conversation's first run
    grown = long.sizes.activity_input_bytes - short.sizes.activity_input_bytes
    expected = json_bytes(sizes.prior(40 - added, 200)) - json_bytes(sizes.prior(8 - added, 200))
    assert abs(grown - expected) < 0.1 * expected, (grown, expected)
    # the history holds the input; the rest of it (ids, times, the other events) does not grow
    # with the conversation, but its fields' lengths vary by a few bytes from turn to turn
    rest = [m.sizes.history_bytes - m.sizes.activity_input_bytes for m in (short, long)]
    assert abs(rest[1] - rest[0]) < 500, rest


async def test_by_reference_a_turn_carries_what_it_adds_whatever_the_length(
    sizes: ModuleType, client: Any, queue: str, log: Any
) -> None:
    """With the workers' PostgreSQL log, a continuing turn's activity input is the reference and
    the two messages the log lacks (the last reply, the new message): the same bytes at 8 and at
    200 messages, far less than the conversation. A conversation sent in turns of at most 60
    messages gets there too (each continuing turn adds a reply)."""
    async with conversation_worker(client, desk(), task_queue=queue, messages=log):
        side = await side_of(sizes, client, queue, log)
        assert side.by_reference
        assert side.growth == sizes.Growth(4, 2)
        short = await sizes.measure(side, 8, 200)
        long = await sizes.measure(side, 200, 200, most=60)

    assert (short.seeded_in, long.seeded_in) == (1, 4)  # 197 messages sent: 50, 49, 49, 49
    for measured in (short, long):
        assert measured.error is None
        assert measured.sizes.activities == 1
        assert len(REPLY) < measured.sizes.activity_result_bytes < 2_000
        assert measured.sizes.activity_input_bytes < 3_000
    assert abs(long.sizes.activity_input_bytes - short.sizes.activity_input_bytes) < 50
    assert abs(long.sizes.history_bytes - short.sizes.history_bytes) < 500
    assert long.sizes.activity_input_bytes < json_bytes(sizes.prior(200, 200)) / 20


def test_a_plan_makes_the_conversation_its_length(sizes: ModuleType) -> None:
    growth = sizes.Growth(4, 2)
    assert sizes.plan(10, growth, 100) == [7]
    for length, most in ((200, 60), (10_000, 3_900), (9, 2)):
        turns = sizes.plan(length, growth, most)
        assert max(turns) <= most
        assert sum(turns) + (growth.first - 1) + (len(turns) - 1) * (growth.next - 1) == length
        assert max(turns) - min(turns) <= 1


async def test_continue_as_new_is_read_by_the_run_that_follows(
    sizes: ModuleType, client: Any, queue: str, log: Any
) -> None:
    """Inline, the run after the last turn is given the conversation; by reference, a reference
    (the messages the log holds) and the last reply, and it reads the rest back in one page."""
    inline_queue = f"{queue}-inline"
    async with (
        conversation_worker(client, desk(), task_queue=queue, messages=log),
        conversation_worker(client, desk(), task_queue=inline_queue),
    ):
        by_reference = await sizes.measure_carry(await side_of(sizes, client, queue, log), 60, 200)
        inline = await sizes.measure_carry(await side_of(sizes, client, inline_queue), 60, 200)

    prior = json_bytes(sizes.prior(60 - 4, 200))  # and the 4 messages of the first turn
    given = inline.start
    assert (given.by_reference, given.carried, given.reads) == (0, 60, 0)
    assert prior < given.input_bytes < prior + 8_000
    start = by_reference.start
    assert (start.by_reference, start.carried, start.reads) == (59, 1, 1)
    assert start.input_bytes < 2_000
    assert start.read_input_bytes < 1_000
    # the same messages but the last reply, where the inline run was given them all
    assert prior < start.read_result_bytes < given.input_bytes
    assert start.history_bytes > start.read_result_bytes
    assert start.read_ms > 0
    assert 0 < start.workflow_task_ms < start.read_ms


async def test_a_conversation_larger_than_a_payload_by_reference(
    sizes: ModuleType, client: Any, queue: str, log: Any
) -> None:
    """Seven messages of 300,000 characters (2.1 MB, more than a payload holds) are sent in two
    turns; one more turn carries a few KB."""
    async with conversation_worker(client, desk(), task_queue=queue, messages=log):
        side = await side_of(sizes, client, queue, log)
        large = await sizes.measure_large(side, 7, 300_000)

    assert (large.turns, large.messages) == (2, 7 + 3 + 1)
    assert large.conversation_bytes > 2 * 1024 * 1024
    assert large.sizes.activities == 1
    assert large.sizes.activity_input_bytes < 3_000
    assert large.sizes.history_bytes < 8_000
    assert large.runs >= 1
    if large.runs > 1:  # continued as new: the run read the conversation back, in pages
        assert large.start.reads >= 3
        assert large.start.read_result_bytes > 2 * 1024 * 1024


async def test_the_benchmark_runs_both_ways_and_drops_its_tables(sizes: ModuleType) -> None:
    """The whole benchmark, small: its worker processes (one with the PostgreSQL log), both
    ways, continue-as-new, a large conversation; its tables are gone at its end."""
    dsn = postgres_dsn()
    args = argparse.Namespace(
        temporal=temporal_address(), messages="both", dsn=dsn, lengths="10,60",
        carry_lengths="60", large="3x300000", message_bytes=200, repeat=1, json=None,
        timeout=300,
    )  # fmt: skip
    result = await sizes.main(args)

    rows = {(row["side"], row["length"]): row for row in result["rows"]}
    assert set(rows) == {(side, n) for side in (sizes.INLINE, sizes.BY_REFERENCE) for n in (10, 60)}
    assert all(row["error"] is None for row in rows.values())
    assert rows[sizes.INLINE, 60]["activity_input_bytes"] > 15_000
    assert rows[sizes.BY_REFERENCE, 60]["activity_input_bytes"] < 3_000
    assert all(0 < row["workflow_task_ms"] < row["turn_ms"] for row in rows.values())
    carries = {row["side"]: row for row in result["carries"]}
    assert carries[sizes.BY_REFERENCE]["reads"] == 1
    assert carries[sizes.INLINE]["reads"] == 0
    assert result["large"]["messages"] == 3 + 3
    text = sizes.report(result)
    assert "| 60 | by reference (PostgreSQL log) |" in text
    assert "continue-as-new after the last turn" in text
    assert "large, by reference: 3 messages of 300,000 characters" in text
    tables = [f"{result['table_prefix']}{name}" for name in ("conversations", "messages")]
    async with await psycopg.AsyncConnection.connect(dsn) as db:
        found = await db.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE %s",
            (f"{result['table_prefix']}%",),
        )
        row = await found.fetchone()
    assert row is not None
    assert row[0] == 0, f"the benchmark's tables ({tables}...) were not dropped"
