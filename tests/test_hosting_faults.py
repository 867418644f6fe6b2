"""Hosted conversations under faults: real worker processes killed, frozen and racing.

Every worker is a real process (``tests/fault_worker.py``) sharing one SQLite file or one
PostgreSQL database with this test. Workers are killed with SIGKILL (nothing runs after it: no
``finally``, no lease release) or frozen with SIGSTOP; their leases last ``LEASE_TTL`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from handoff_builder import ConversationBusyError, ConversationHost, HandoffWorkflowBuilder
from handoff_builder.stores import (
    ConversationRecord,
    ConversationStore,
    PostgresConversationStore,
    hold,
)
from handoff_builder.testing import client_of, handoff_to, reply, scripted_agent
from tests.fault_worker import (
    DELEGATED_REPLY,
    FIRST,
    GOAL,
    LATE,
    POLICY_ANSWER,
    POLICY_TASK,
    REFUNDED,
    REFUSED,
    THANKS,
    WELCOME,
)
from tests.stores import postgres_dsn, unique_prefix

ROOT = Path(__file__).resolve().parent.parent
LEASE_TTL = 1.0
NOTE = f"Goal: {GOAL}"
HANDOFF_CALL = f"-> handoff_to_billing({json.dumps({'goal': GOAL})})"
# The conversation every kill test must end with, whatever the point the first worker died at.
EXPECTED_LOG = [
    ("user", None, FIRST),
    ("assistant", "triage", HANDOFF_CALL),
    ("tool", "triage", "<- Transferred."),
    ("assistant", "billing", REFUNDED),
    ("user", None, THANKS),
    ("assistant", "billing", WELCOME),
]

Spawn = Callable[..., "subprocess.Popen[str]"]


# -- fixtures and helpers -------------------------------------------------------------------------


@pytest.fixture
async def shared_postgres() -> AsyncIterator[tuple[str, PostgresConversationStore]]:
    prefix = unique_prefix()
    store = PostgresConversationStore(postgres_dsn(), table_prefix=prefix)
    yield f"postgres:{prefix}", store
    await store.drop_tables()
    await store.close()


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start worker processes; any still running at the end is killed (SIGKILL) and reaped."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, ttl: float = LEASE_TTL) -> subprocess.Popen[str]:
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "FAULT_WORKER_LEASE_TTL": str(ttl)}
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "tests.fault_worker", *args],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)  # also ends a stopped (SIGSTOP) process
            process.communicate(timeout=30)


async def reached(marker: Path, process: subprocess.Popen[str], timeout: float = 30) -> None:
    """Wait until the worker writes ``marker`` (it then blocks there)."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(marker.exists):
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the worker ended before {marker.name}: {out}\n{err}")
        assert time.monotonic() < deadline, f"the worker never reached {marker.name}"
        await asyncio.sleep(0.02)


async def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    await asyncio.to_thread(process.wait, 10)
    assert process.returncode == -signal.SIGKILL


async def finished(process: subprocess.Popen[str], status: int = 0) -> dict[str, Any]:
    """The worker's JSON report, once it exited with ``status``."""
    out, err = await asyncio.to_thread(process.communicate, None, 60)
    assert process.returncode == status, f"exit status {process.returncode}: {out}\n{err}"
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def _shown(content: dict[str, Any]) -> str:
    if content["type"] == "text":
        return str(content["text"])
    if content["type"] == "function_call":
        return f"-> {content['name']}({content['arguments']})"
    if content["type"] == "function_result":
        return f"<- {content['result']}"
    return f"({content['type']})"


def transcript(record: ConversationRecord | None) -> list[tuple[str, str | None, str]]:
    """The stored log as (role, author, contents) rows."""
    assert record is not None
    return [
        (m["role"], m.get("author_name"), " | ".join(_shown(c) for c in m["contents"]))
        for m in record.messages
    ]


def assert_valid_history(record: ConversationRecord | None) -> None:
    """Every function call has exactly one result after it, and every result has its call."""
    assert record is not None
    calls: list[str] = []
    results: list[str] = []
    for message in record.messages:
        for content in message["contents"]:
            if content["type"] == "function_call":
                calls.append(content["call_id"])
            elif content["type"] == "function_result":
                assert content["call_id"] in calls, f"a result before its call: {content}"
                results.append(content["call_id"])
    assert len(set(calls)) == len(calls), f"a call stored twice: {calls}"
    assert sorted(results) == sorted(calls), f"calls {calls} vs results {results}"


async def lease_is_held(store: ConversationStore, conversation_id: str) -> bool:
    """Whether someone holds an unexpired lease (asking frees it again if it was free)."""
    probe = await store.acquire(conversation_id, owner="probe", ttl=60)
    if probe is None:
        return True
    await store.release(conversation_id, "probe")
    return False


# -- 1. kill -9 at each point of a turn -----------------------------------------------------------

# point -> (stored log when killed, host.next then, the turn still open, the stored version)
AT_THE_KILL: dict[str, tuple[int, str | None, bool, int]] = {
    "triage": (1, "triage", True, 1),  # the user's message, written before triage's call
    "billing": (3, "billing", True, 2),  # + the handoff, written before billing's call
    "final": (4, None, False, 3),  # + billing's reply: the turn is closed, send never returned
}


@pytest.mark.parametrize("point", list(AT_THE_KILL))
async def test_killed_at_each_point_of_a_turn_is_finished_by_the_next_worker(
    shared_store: tuple[str, ConversationStore], markers: Path, spawn: Spawn, point: str
) -> None:
    """SIGKILL in triage's call, in billing's, or after the final write; a new worker goes on."""
    spec, store = shared_store
    crashing = spawn("crash", spec, "conv", str(markers), point)
    await reached(markers / point, crashing)
    await kill(crashing)

    stored, following, still_open, version = AT_THE_KILL[point]
    record = await store.load("conv")
    assert record is not None
    assert transcript(record) == EXPECTED_LOG[:stored]
    assert record.state["host"]["next"] == following
    assert (record.state["host"]["turn"] is not None) == still_open
    assert record.version == version
    if still_open:  # the dead worker's lease lives on until it expires
        assert await lease_is_held(store, "conv")

    report = await finished(spawn("resume", spec, "conv", str(markers), "thanks"))
    if point == "final":  # nothing to finish: the reply was stored, only `send` never returned
        assert (report["resumed"], report["resumed_agent"]) == (None, None)
    else:
        assert (report["resumed"], report["resumed_agent"]) == (REFUNDED, "billing")
    assert (report["following"], report["following_agent"]) == (WELCOME, "billing")
    # Triage is called again only if it had not answered; billing once per unanswered message.
    assert report["triage_calls"] == ([[FIRST]] if point == "triage" else [])
    billing_calls = [[FIRST, NOTE], [FIRST, NOTE, REFUNDED, THANKS]]
    assert report["billing_calls"] == (billing_calls[1:] if point == "final" else billing_calls)

    record = await store.load("conv")
    assert transcript(record) == EXPECTED_LOG  # each message once, in order
    assert_valid_history(record)
    assert record is not None
    assert record.version == 5  # 3 writes for the first turn, 2 for "Thanks": none lost, none twice
    assert record.state["host"]["turn"] is None
    assert record.state["host"]["speaker"] == "billing"
    assert not await lease_is_held(store, "conv")


async def test_killed_while_an_expert_answers_a_delegation_the_callers_call_runs_again(
    shared_store: tuple[str, ConversationStore], markers: Path, spawn: Spawn
) -> None:
    """SIGKILL in the expert's model call: nothing of the caller's call was stored, so the next
    worker runs it again (its delegation included), and every message is stored once."""
    spec, store = shared_store
    crashing = spawn("delegate-crash", spec, "conv", str(markers))
    await reached(markers / "expert", crashing)
    await kill(crashing)

    record = await store.load("conv")
    assert transcript(record) == [("user", None, FIRST)]  # the caller's call is not stored yet
    assert record is not None
    assert record.state["host"]["next"] == "triage"

    report = await finished(spawn("delegate-resume", spec, "conv", str(markers)))
    assert (report["resumed"], report["agent"]) == (DELEGATED_REPLY, "triage")
    assert report["delegations"] == [["policy", POLICY_TASK, POLICY_ANSWER, "answered"]]
    assert report["policy_calls"] == [[POLICY_TASK]]  # the expert, asked again, read its task
    assert len(report["triage_calls"]) == 2  # the call again, then the answer

    record = await store.load("conv")
    ask = f"-> ask_policy({json.dumps({'task': POLICY_TASK})})"
    assert transcript(record) == [
        ("user", None, FIRST),
        ("assistant", "triage", ask),
        ("tool", "triage", f"<- {POLICY_ANSWER}"),
        ("assistant", "triage", DELEGATED_REPLY),
    ]  # the expert's own messages are not in the shared log
    assert_valid_history(record)
    assert record is not None
    assert record.state["host"]["turn"] is None
    assert not await lease_is_held(store, "conv")


# -- 2. a frozen worker whose lease expires -------------------------------------------------------


async def test_frozen_worker_is_taken_over_and_its_late_write_refused(
    shared_store: tuple[str, ConversationStore], markers: Path, spawn: Spawn
) -> None:
    """A is frozen (SIGSTOP) in billing's call; B finishes the turn; A thawed writes nothing."""
    spec, store = shared_store
    frozen = spawn("freeze", spec, "conv", str(markers))
    await reached(markers / "billing", frozen)
    frozen.send_signal(signal.SIGSTOP)
    try:
        record = await store.load("conv")
        assert record is not None
        assert record.state["host"]["next"] == "billing"
        assert record.version == 2

        taking_over = await finished(spawn("resume", spec, "conv", str(markers), "-"))
        assert (taking_over["resumed"], taking_over["resumed_agent"]) == (REFUNDED, "billing")
        assert taking_over["triage_calls"] == []
        assert taking_over["billing_calls"] == [[FIRST, NOTE]]
        record = await store.load("conv")
        assert transcript(record) == EXPECTED_LOG[:4]
        assert record is not None
        assert record.version == 3
    finally:
        (markers / "thaw").write_text("go on", encoding="utf-8")
        frozen.send_signal(signal.SIGCONT)

    late = await finished(frozen, REFUSED)
    assert late["error"] == "LeaseLostError"
    assert "the lease of" in late["message"]
    assert late["billing_calls"] == [[FIRST, NOTE]]  # A's billing did answer, too late

    record = await store.load("conv")
    assert transcript(record) == EXPECTED_LOG[:4]  # exactly B's messages: nothing of A's
    assert all(LATE not in text for _, _, text in transcript(record))
    assert_valid_history(record)
    assert record is not None
    assert record.version == 3
    assert record.state["host"]["turn"] is None
    assert not await lease_is_held(store, "conv")


# -- 3. a pool of 2 connections, 50 concurrent conversations --------------------------------------


@pytest.mark.postgres
async def test_fifty_concurrent_conversations_on_a_pool_of_two() -> None:
    """50 conversations, 3 turns each, all at once on 2 connections: no error, no lost write."""
    store = PostgresConversationStore(postgres_dsn(), table_prefix=unique_prefix(), max_size=2)
    triage = scripted_agent("triage", respond_with=lambda call: handoff_to("billing", goal="g"))
    billing = scripted_agent("billing", respond_with=lambda call: reply(f"re: {call.user_text}"))
    host = ConversationHost(HandoffWorkflowBuilder(triage).with_handoff(triage, billing), store)
    conversations, turns = 50, 3

    async def talk(number: int) -> list[str]:
        return [
            (await host.send(f"conv-{number}", f"conv-{number} message {turn}")).text
            for turn in range(turns)
        ]

    try:
        results = await asyncio.gather(
            *(talk(number) for number in range(conversations)), return_exceptions=True
        )
        errors = [result for result in results if isinstance(result, BaseException)]
        assert errors == []
        assert results == [
            [f"re: conv-{n} message {t}" for t in range(turns)] for n in range(conversations)
        ]
        assert len(client_of(triage).calls) == conversations  # first message of each only
        assert len(client_of(billing).calls) == conversations * turns
        for number in range(conversations):
            record = await store.load(f"conv-{number}")
            said = [f"conv-{number} message {turn}" for turn in range(turns)]
            expected = [
                ("user", None, said[0]),
                ("assistant", "triage", '-> handoff_to_billing({"goal": "g"})'),
                ("tool", "triage", "<- Transferred."),
                ("assistant", "billing", f"re: {said[0]}"),
            ]
            for text in said[1:]:
                expected += [("user", None, text), ("assistant", "billing", f"re: {text}")]
            assert transcript(record) == expected
            assert_valid_history(record)
            assert record is not None
            assert record.version == 3 + 2 * (turns - 1)
    finally:
        await store.drop_tables()
        await store.close()


# -- 4. ids whose 32-bit hashes collide -----------------------------------------------------------

COLLIDING = ("user-255858", "user-299228")


@pytest.mark.postgres
async def test_ids_with_colliding_hashtext_run_concurrently(
    shared_postgres: tuple[str, PostgresConversationStore], markers: Path, spawn: Spawn
) -> None:
    """Two ids with one ``hashtext`` hold their turns at the same time (no shared lock key)."""
    spec, store = shared_postgres
    async with await psycopg.AsyncConnection.connect(postgres_dsn(), autocommit=True) as db:
        cursor = await db.execute("SELECT hashtext(%s), hashtext(%s)", COLLIDING)
        hashes = await cursor.fetchone()
    assert hashes is not None
    assert hashes[0] == hashes[1]  # the premise: one 32-bit advisory-lock key for both ids

    one, other = COLLIDING
    # Each worker's triage waits, inside its turn, for the other's turn to start (wait=False).
    meeting = [
        spawn("meet", spec, one, str(markers), other, ttl=10),
        spawn("meet", spec, other, str(markers), one, ttl=10),
    ]
    reports = [await finished(process) for process in meeting]
    assert [r["text"] for r in reports] == [f"{one} met {other}", f"{other} met {one}"]

    # In this process too: holding one id's lease leaves the other free.
    triage = scripted_agent("triage", reply("first"), reply("second"))
    host = ConversationHost(
        HandoffWorkflowBuilder(triage).with_handoff(triage, scripted_agent("billing")), store
    )
    for held, sent in (COLLIDING, COLLIDING[::-1]):
        async with hold(store, held):
            await host.send(sent, "again")  # wait=False: a collision would raise at once
            with pytest.raises(ConversationBusyError):
                await host.send(held, "busy")
    for conversation_id in COLLIDING:
        record = await store.load(conversation_id)
        assert [row[0] for row in transcript(record)] == ["user", "assistant"] * 2
        assert record is not None
        assert record.version == 4


# -- 5. two processes racing on one conversation --------------------------------------------------


async def test_two_processes_sending_many_times_to_one_conversation(
    shared_store: tuple[str, ConversationStore], markers: Path, spawn: Spawn
) -> None:
    """Two workers send 20 messages each to one conversation, waiting for each other's turns."""
    spec, store = shared_store
    count = 20
    # This process makes the database first (two workers making a new SQLite file at the same
    # moment is the next test's subject).
    assert await store.version("conv") is None
    racing = {
        name: spawn("many", spec, "conv", str(markers), f"{name}:{count}", ttl=5)
        for name in ("a", "b")
    }
    for name, process in racing.items():
        await reached(markers / f"ready-{name}", process)
    (markers / "go").write_text("go", encoding="utf-8")  # both start sending at once
    busy = 0
    for name, process in racing.items():
        report = await finished(process)
        assert report["answers"] == [f"re: {name} {number}" for number in range(count)]
        assert report["triage_calls"] == count
        busy += report["busy"]
    assert busy > 0, "the workers never contended for the conversation"

    record = await store.load("conv")
    log = transcript(record)
    assert len(log) == 2 * 2 * count
    users, answers = log[0::2], log[1::2]
    assert all(row[:2] == ("user", None) for row in users)
    assert all(row[:2] == ("assistant", "triage") for row in answers)
    for (_, _, said), (_, _, answer) in zip(users, answers, strict=True):
        assert answer == f"re: {said}"  # each turn whole: no message of the other in between
    said = [text for _, _, text in users]
    for name in ("a", "b"):  # every message once, each worker's in its own order
        assert [text for text in said if text.startswith(f"{name} ")] == [
            f"{name} {number}" for number in range(count)
        ]
    assert record is not None
    assert record.version == 2 * 2 * count  # two writes per turn: none lost, none forked
    assert record.state["host"]["turn"] is None
    assert not await lease_is_held(store, "conv")


# -- 6. workers starting on a new SQLite file, or on one of the first release ---------------------

# The tables as the first release made them (in WAL mode): before the lease columns.
FIRST_RELEASE_SCHEMA = """
CREATE TABLE handoff_conversations (
    conversation_id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE handoff_messages (
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
"""


def first_release_database(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(FIRST_RELEASE_SCHEMA)


@pytest.mark.parametrize("database", ["new", "first_release"])
async def test_workers_opening_one_sqlite_file_at_the_same_moment(
    tmp_path: Path, spawn: Spawn, database: str
) -> None:
    """Three workers open one SQLite file at once: a new one, or one the first release made.

    Each round is another file, opened by the three (long-lived) workers at the same moment; each
    sends one message to a conversation of its own, so no lease is contended: only the store's
    opening (switching a new file to WAL, adding the lease columns to an old one) is.
    """
    opening = [spawn("open", "-", f"conv-{number}", str(tmp_path)) for number in range(3)]

    async def tell_all(line: str) -> list[dict[str, Any]]:
        """Write ``line`` to every worker, then read one JSON line back from each."""
        for process in opening:
            assert process.stdin is not None
            process.stdin.write(f"{line}\n")
            process.stdin.flush()
        answers: list[dict[str, Any]] = []
        for process in opening:
            assert process.stdout is not None
            answer = await asyncio.to_thread(process.stdout.readline)
            assert answer, f"a worker ended: {process.communicate()}"
            answers.append(json.loads(answer))
        return answers

    failures: list[str] = []
    rounds = 60
    for round_number in range(rounds):
        path = tmp_path / f"{database}-{round_number}.db"
        if database == "first_release":
            first_release_database(path)
        assert await tell_all(str(path)) == [{"ready": str(path)}] * len(opening)
        for number, answer in enumerate(await tell_all("go")):
            if answer != {"text": "hello"}:
                failures.append(f"round {round_number}, worker {number}: {answer}")
    for process in opening:  # no more files: the workers end
        await asyncio.to_thread(process.communicate, "", 30)
        assert process.returncode == 0
    total = len(opening) * rounds
    assert failures == [], f"{len(failures)} of {total} first turns failed:\n" + "\n".join(failures)
