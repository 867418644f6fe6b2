"""One contract, every store: in-memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql
from typing_extensions import override

from handoff_builder import (
    ConversationBusyError,
    ConversationConflictError,
    CorruptConversationError,
    LeaseLostError,
    SchemaVersionError,
    StoreUnavailableError,
)
from handoff_builder.stores import (
    ConversationStore,
    InMemoryConversationStore,
    Lease,
    PostgresConversationStore,
    PostgresStoreSettings,
    SqliteConversationStore,
    hold,
)
from handoff_builder.stores._base import record_from_rows
from tests.stores import connection_failures, elsewhere, postgres_dsn, unique_prefix


def msg(text: str, role: str = "user") -> dict[str, object]:
    return {"type": "message", "role": role, "contents": [{"type": "text", "text": text}]}


async def test_new_conversation_is_none(store: ConversationStore) -> None:
    assert await store.load("nobody") is None


async def test_append_then_load(store: ConversationStore) -> None:
    version = await store.append(
        "c1",
        start=0,
        messages=[msg("hi"), msg("hello", "assistant")],
        state={"a": 1},
        expected_version=0,
    )
    assert version == 1
    version = await store.append(
        "c1", start=2, messages=[msg("more")], state={"a": 2}, expected_version=1
    )
    assert version == 2
    record = await store.load("c1")
    assert record is not None
    assert [m["contents"][0]["text"] for m in record.messages] == ["hi", "hello", "more"]
    assert record.state == {"a": 2}
    assert record.version == 2


async def test_state_only_write_keeps_the_log(store: ConversationStore) -> None:
    await store.append("c1", start=0, messages=[msg("hi")], state={"n": 1}, expected_version=0)
    await store.append("c1", start=1, messages=[], state={"n": 2}, expected_version=1)
    record = await store.load("c1")
    assert record is not None
    assert len(record.messages) == 1
    assert record.state == {"n": 2}


async def test_conversations_do_not_leak(store: ConversationStore) -> None:
    await store.append(
        "a", start=0, messages=[msg("for a")], state={"who": "a"}, expected_version=0
    )
    await store.append(
        "b", start=0, messages=[msg("for b")], state={"who": "b"}, expected_version=0
    )
    a, b = await store.load("a"), await store.load("b")
    assert a is not None
    assert b is not None
    assert (a.state, len(a.messages), b.state, len(b.messages)) == (
        {"who": "a"},
        1,
        {"who": "b"},
        1,
    )


@pytest.mark.parametrize(("start", "expected_version"), [(0, 0), (1, 0), (2, 1)])
async def test_stale_writes_conflict_and_write_nothing(
    store: ConversationStore, start: int, expected_version: int
) -> None:
    await store.append("c1", start=0, messages=[msg("hi")], state={"n": 1}, expected_version=0)
    with pytest.raises(ConversationConflictError, match="'c1' changed under this turn"):
        await store.append(
            "c1",
            start=start,
            messages=[msg("forked")],
            state={"n": 99},
            expected_version=expected_version,
        )
    record = await store.load("c1")
    assert record is not None
    assert (len(record.messages), record.state, record.version) == (1, {"n": 1}, 1)


async def test_lease_is_exclusive_and_released(store: ConversationStore) -> None:
    async with hold(store, "c1") as held:
        assert (held.lease.conversation_id, held.lease.version) == ("c1", 0)
        with pytest.raises(ConversationBusyError, match="'c1' is busy with another turn"):
            async with hold(store, "c1"):
                pass
        async with hold(store, "other"):  # other conversations are not blocked
            pass
    async with hold(store, "c1"):
        pass


async def test_lease_waits_when_asked(store: ConversationStore) -> None:
    order: list[str] = []
    held = asyncio.Event()  # the second asks once the first holds it, however slow the store

    async def first() -> None:
        async with hold(store, "c1"):
            order.append("first in")
            held.set()
            await asyncio.sleep(0.1)
            order.append("first out")

    async def second() -> None:
        await held.wait()
        async with hold(store, "c1", wait=True, timeout=5):
            order.append("second in")

    await asyncio.gather(first(), second())
    assert order == ["first in", "first out", "second in"]


async def test_lease_wait_times_out(store: ConversationStore) -> None:
    async with hold(store, "c1"):
        with pytest.raises(ConversationBusyError, match=r"waited 0\.\d s"):
            async with hold(store, "c1", wait=True, timeout=0.2):
                pass


async def until_acquired(store: ConversationStore, conversation_id: str, *, owner: str) -> Lease:
    """Acquire the lease as soon as the one that holds it has expired (30 s at most)."""
    deadline = time.monotonic() + 30
    while (lease := await store.acquire(conversation_id, owner=owner, ttl=30)) is None:
        assert time.monotonic() < deadline, "the lease did not expire"
        await asyncio.sleep(0.01)
    return lease


async def test_writes_are_fenced_by_the_lease(store: ConversationStore) -> None:
    """A worker whose lease expired and was taken over can write nothing; the new holder can."""
    old = await store.acquire("c1", owner="worker-a", ttl=30)
    assert old is not None
    version = await store.append(
        "c1", start=0, messages=[msg("hi")], state={"by": "a"}, expected_version=0, lease=old
    )
    assert version == 1
    assert await store.acquire("c1", owner="worker-b", ttl=30) is None  # a's lease still runs
    assert await store.renew(old, ttl=0.001)  # ... and then runs out (worker a froze)
    new = await until_acquired(store, "c1", owner="worker-b")
    assert (new.token, new.version) == (old.token + 1, 1)
    with pytest.raises(LeaseLostError, match="'worker-a' was lost"):
        await store.append(
            "c1", start=1, messages=[msg("late")], state={"by": "a"}, expected_version=1, lease=old
        )
    assert not await store.renew(old, ttl=30)
    with pytest.raises(ConversationBusyError):  # nobody writes around a held lease
        await store.append("c1", start=1, messages=[msg("x")], state={}, expected_version=1)
    await store.append(
        "c1", start=1, messages=[msg("b")], state={"by": "b"}, expected_version=1, lease=new
    )
    await store.release("c1", "worker-a")  # not a's any more: a no-op
    assert await store.renew(new, ttl=30)
    await store.release("c1", "worker-b")
    record = await store.load("c1")
    assert record is not None
    assert [m["contents"][0]["text"] for m in record.messages] == ["hi", "b"]
    assert (record.state, record.version) == ({"by": "b"}, 2)
    again = await store.acquire("c1", owner="worker-c", ttl=30)
    assert again is not None
    assert again.token == new.token + 1


async def test_asking_for_an_unknown_conversation_leaves_nothing(store: ConversationStore) -> None:
    async with hold(store, "nobody") as held:
        assert held.lease.version == 0
        assert await store.load("nobody") is None
    assert await store.load("nobody") is None
    assert await store.version("nobody") is None
    assert await store.acquire("nobody", owner="x", ttl=30) is not None


async def test_a_cancelled_lease_attempt_leaves_nothing_held(store: ConversationStore) -> None:
    """Cancelled while asking (even after the store granted it): the lease is given back."""
    for delay in (0, 0.0005, 0.001, 0.002, 0.005):
        task = asyncio.ensure_future(_hold_forever(store))
        await asyncio.sleep(delay)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with hold(store, "c1"):  # free at once, not after the lease's 30 s
            pass


async def _hold_forever(store: ConversationStore) -> None:
    async with hold(store, "c1"):
        await asyncio.Event().wait()


async def test_leases_are_renewed_while_held(store: ConversationStore) -> None:
    async with hold(store, "c1", ttl=0.15):
        await asyncio.sleep(0.4)  # well past the ttl: renewed every 0.05 s
        assert await store.acquire("c1", owner="other", ttl=30) is None


async def test_ids_that_collide_in_a_32_bit_hash_are_distinct(store: ConversationStore) -> None:
    """``hashtext('user-255858') = hashtext('user-299228')`` in PostgreSQL: keys of their own."""
    async with hold(store, "user-255858"), hold(store, "user-299228"):
        pass


async def test_delete(store: ConversationStore) -> None:
    await store.append("c1", start=0, messages=[msg("hi")], state={}, expected_version=0)
    await store.delete("c1")
    assert await store.load("c1") is None


# -- backend specifics: corruption, newer schemas, unreachable servers ----------------------------


async def test_sqlite_corrupt_record_names_the_conversation(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = SqliteConversationStore(path)
    await store.append("good", start=0, messages=[msg("ok")], state={}, expected_version=0)
    await store.append("bad", start=0, messages=[msg("ok")], state={}, expected_version=0)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE handoff_messages SET body = '{not json' WHERE conversation_id = 'bad'")
    with pytest.raises(
        CorruptConversationError, match=r"Conversation 'bad' is corrupt: message #0"
    ):
        await store.load("bad")
    assert await store.load("good") is not None
    await store.close()


async def test_sqlite_newer_schema_is_refused_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = SqliteConversationStore(path)
    await store.append("c1", start=0, messages=[msg("ok")], state={"n": 1}, expected_version=0)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE handoff_conversations SET schema_version = 7")
    with pytest.raises(SchemaVersionError, match="Conversation 'c1' has schema version 7"):
        await store.load("c1")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT schema_version, state FROM handoff_conversations").fetchone() == (
            7,
            '{"n":1}',
        )
    await store.close()


async def test_sqlite_unreachable_path(tmp_path: Path) -> None:
    store = SqliteConversationStore(tmp_path / "missing-dir" / "c.db")
    with pytest.raises(StoreUnavailableError, match="The SQLite conversation store is unavailable"):
        await store.load("c1")


@pytest.mark.postgres
@pytest.mark.parametrize(("wrong", "reason"), connection_failures())
async def test_postgres_connection_failures_name_the_reason_at_once(
    wrong: dict[str, Any], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong database, user or port: the server's (or the OS's) own words, from the first
    connection, not the pool's "initialization incomplete" after its wait."""
    dsn = elsewhere(postgres_dsn(), **wrong)
    parts = urlsplit(dsn)
    store = PostgresConversationStore(dsn, table_prefix="unused_")
    with pytest.raises(StoreUnavailableError) as caught:
        await store.load("c1")
    await store.close()
    assert str(caught.value) == (
        "The PostgreSQL conversation store is unavailable: connection failed: connection to "
        f'server at "{parts.hostname}", port {parts.port} failed: {reason}'
    )
    assert caught.value.detail in str(caught.value)
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    # the pool never tried (and retried) to connect: the first connection said why at once
    assert not [record for record in caplog.records if record.name.startswith("psycopg")]


@pytest.mark.postgres
async def test_a_host_on_an_unreachable_store_warns_of_no_lease_it_never_took(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """send() on a closed port: StoreUnavailableError, and no warning about releasing a lease
    that the failed attempt never took."""
    from handoff_builder import ConversationHost, HandoffWorkflowBuilder
    from handoff_builder.testing import scripted_agent

    store = PostgresConversationStore(elsewhere(postgres_dsn(), port=1), table_prefix="unused_")
    host = ConversationHost(HandoffWorkflowBuilder(scripted_agent("triage")), store)
    with (
        caplog.at_level(logging.DEBUG, logger="handoff_builder"),
        pytest.raises(StoreUnavailableError),
    ):
        await host.send("c1", "hello")
    await store.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [w for w in warnings if "lease" in w] == []
    assert any("would have taken lease" in r.getMessage() for r in caplog.records)


def test_postgres_table_prefix_is_checked() -> None:
    with pytest.raises(ValueError, match="table_prefix must match"):
        PostgresConversationStore("postgresql://x", table_prefix="bad; drop")


async def test_version_alone(store: ConversationStore) -> None:
    assert await store.version("c1") is None
    await store.append("c1", start=0, messages=[msg("hi")], state={}, expected_version=0)
    await store.append("c1", start=1, messages=[], state={}, expected_version=1)
    assert await store.version("c1") == 2


# -- SQLite: durability setting, writes on the event loop, waiting for other writers ---------------


def count_thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """From now on, every ``asyncio.to_thread`` call is recorded in the returned list."""
    threads: list[object] = []
    real_to_thread = asyncio.to_thread

    async def counting_to_thread(work: Any, /, *args: Any) -> Any:
        threads.append(work)
        return await real_to_thread(work, *args)

    monkeypatch.setattr(asyncio, "to_thread", counting_to_thread)
    return threads


def sqlite_pragma(store: SqliteConversationStore, name: str) -> object:
    db = store._db  # pyright: ignore[reportPrivateUsage]
    assert db is not None
    return db.execute(f"PRAGMA {name}").fetchone()[0]


@pytest.mark.parametrize(("synchronous", "level"), [("normal", 1), ("full", 2), ("FULL", 2)])
async def test_sqlite_synchronous_setting_is_applied(
    tmp_path: Path, synchronous: str, level: int
) -> None:
    store = SqliteConversationStore(tmp_path / "c.db", synchronous=synchronous)  # type: ignore[arg-type]
    assert store.synchronous == synchronous.lower()
    await store.append("c1", start=0, messages=[msg("hi")], state={}, expected_version=0)
    assert sqlite_pragma(store, "journal_mode") == "wal"
    assert sqlite_pragma(store, "synchronous") == level
    await store.close()


def test_sqlite_synchronous_default_is_normal(tmp_path: Path) -> None:
    assert SqliteConversationStore(tmp_path / "c.db").synchronous == "normal"


@pytest.mark.parametrize("synchronous", ["off", "extra", "", None, 1])
def test_sqlite_bad_synchronous_is_refused(tmp_path: Path, synchronous: object) -> None:
    with pytest.raises(ValueError, match=r"synchronous must be 'normal' or 'full', got "):
        SqliteConversationStore(tmp_path / "c.db", synchronous=synchronous)  # type: ignore[arg-type]


@pytest.mark.parametrize(("synchronous", "hops"), [("normal", 0), ("full", 5)])
async def test_sqlite_small_writes_run_on_the_event_loop_only_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synchronous: str, hops: int
) -> None:
    store = SqliteConversationStore(tmp_path / "c.db", synchronous=synchronous)  # type: ignore[arg-type]
    assert await store.load("c1") is None  # connects (in a worker thread)
    threads = count_thread_hops(monkeypatch)
    version = 0
    for position in range(2):
        version = await store.append(
            "c1",
            start=position,
            messages=[msg("hi")],
            state={"n": position},
            expected_version=version,
        )
        assert await store.version("c1") == version
    with pytest.raises(ConversationConflictError):
        await store.append("c1", start=2, messages=[], state={}, expected_version=1)
    assert len(threads) == hops
    await store.close()


async def test_sqlite_write_waits_for_another_writer_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    store = SqliteConversationStore(path)
    await store.append("c1", start=0, messages=[msg("hi")], state={"n": 1}, expected_version=0)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    other.execute("UPDATE handoff_conversations SET updated_at = 'x'")
    write = asyncio.create_task(
        store.append("c1", start=1, messages=[msg("more")], state={"n": 2}, expected_version=1)
    )
    ticks = 0
    for _ in range(10):  # the event loop keeps running while the write waits
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 10
    assert not write.done()
    other.execute("COMMIT")
    other.close()
    assert await asyncio.wait_for(write, timeout=5) == 2
    record = await store.load("c1")
    assert record is not None
    assert (len(record.messages), record.state, record.version) == (2, {"n": 2}, 2)
    await store.close()


async def test_sqlite_checkpoints_the_wal_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("handoff_builder.stores._sqlite._CHECKPOINT_EVERY", 5)
    path = tmp_path / "c.db"
    store = SqliteConversationStore(path)
    await store.append("c1", start=0, messages=[], state={}, expected_version=0)
    assert sqlite_pragma(store, "wal_autocheckpoint") == 0  # commits never checkpoint inline
    for version in range(1, 5):
        await store.append(
            "c1", start=version - 1, messages=[msg("x" * 2000)], state={}, expected_version=version
        )
    before = path.stat().st_size  # the database file itself: nothing copied from the WAL yet
    threads = count_thread_hops(monkeypatch)
    await store.append("c1", start=4, messages=[msg("x" * 2000)], state={}, expected_version=5)
    assert path.stat().st_size > before  # the sixth write checkpointed first,
    assert len(threads) == 1  # in a worker thread
    record = await store.load("c1")
    assert record is not None
    assert (len(record.messages), record.version) == (5, 6)
    await store.close()


async def test_sqlite_retries_soon_a_checkpoint_that_a_reader_held_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("handoff_builder.stores._sqlite._CHECKPOINT_EVERY", 5)
    monkeypatch.setattr("handoff_builder.stores._sqlite._CHECKPOINT_RETRY", 3)
    path = tmp_path / "c.db"
    store = SqliteConversationStore(path)
    await store.append("c1", start=0, messages=[], state={}, expected_version=0)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM handoff_messages").fetchone()  # holds an old snapshot
    version = 1
    for _ in range(5):  # the fifth write checkpoints first; the reader keeps later frames in
        await store.append(
            "c1", start=version - 1, messages=[msg("x")], state={}, expected_version=version
        )
        version += 1
    assert store._writes == 2  # pyright: ignore[reportPrivateUsage]  # retried after 3 writes
    reader.execute("COMMIT")
    reader.close()
    for _ in range(4):  # three writes, then the fourth checkpoints again
        await store.append(
            "c1", start=version - 1, messages=[msg("x")], state={}, expected_version=version
        )
        version += 1
    assert store._writes == 0  # pyright: ignore[reportPrivateUsage]  # this time it completed
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM handoff_messages").fetchone() == (9,)
    await store.close()


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('{"role":"user"},{"role":"assistant"}', "message #1 is not valid JSON"),
        ("3", "message #1 is not a message"),
        ('{"contents":[]}', "message #1 is not a message"),
        ("", "message #1 is not valid JSON"),
        (None, "message #1 is empty"),
    ],
    ids=["two-in-one-row", "a-number", "no-role", "empty", "null"],
)
def test_a_bad_row_among_good_ones_is_named(body: str | None, problem: str) -> None:
    """The log is parsed in one go; a bad row still gets its own, precise error."""
    good = '{"role":"user","contents":[{"type":"text","text":"hi"}]}'
    rows = [(0, good), (1, body), (2, good)]
    with pytest.raises(CorruptConversationError, match=rf"'c1' is corrupt: {problem}"):
        record_from_rows("c1", 1, 3, "{}", rows)


def test_two_damaged_rows_that_would_join_into_valid_json_are_refused() -> None:
    """Each row must be one message on its own: content may not move from one row to another."""
    rows = [
        (0, '{"role":"user","contents":[{"type":"text","text":"a"}'),
        (1, '{"type":"text","text":"b"}]},{"role":"assistant","contents":[]}'),
    ]
    with pytest.raises(CorruptConversationError, match="message #0 is not valid JSON"):
        record_from_rows("c1", 1, 3, "{}", rows)


def test_a_row_with_surrounding_whitespace_is_still_a_message() -> None:
    record = record_from_rows("c1", 1, 1, "{}", [(0, ' {"role": "user", "contents": []}\n')])
    assert record.messages == [{"role": "user", "contents": []}]


def test_a_good_log_decodes_in_order() -> None:
    rows = [(i, json.dumps({"role": "user", "contents": [], "n": i})) for i in range(50)]
    record = record_from_rows("c1", 1, 3, '{"k":1}', rows)
    assert [m["n"] for m in record.messages] == list(range(50))
    assert record.state == {"k": 1}


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("query", "shown"), [("", "handoff_builder"), ("application_name=my_service", "my_service")]
)
async def test_postgres_connections_are_named_for_the_server(query: str, shown: str) -> None:
    """``pg_stat_activity`` shows whose connections these are: ours, unless the DSN says."""
    dsn = postgres_dsn()
    if query:
        dsn += f"{'&' if '?' in dsn else '?'}{query}"
    store = PostgresConversationStore(dsn, table_prefix=unique_prefix())

    async def name(db: Any) -> tuple[Any, ...] | None:
        return await (await db.execute("SELECT current_setting('application_name')")).fetchone()

    try:
        assert await store._run(name) == (shown,)  # pyright: ignore[reportPrivateUsage]
    finally:
        await store.drop_tables()
        await store.close()


@pytest.mark.postgres
async def test_postgres_connection_settings_keep_the_dsns_own_options() -> None:
    dsn = postgres_dsn()
    separator = "&" if "?" in dsn else "?"
    store = PostgresConversationStore(
        f"{dsn}{separator}options=-c%20application_name%3Dfrom_the_dsn",
        table_prefix=unique_prefix(),
        statement_timeout=3.0,
        synchronous_commit=False,
    )

    async def settings(db: Any) -> tuple[Any, ...] | None:
        return await (
            await db.execute(
                "SELECT current_setting('application_name'), current_setting('statement_timeout'),"
                " current_setting('synchronous_commit')"
            )
        ).fetchone()

    try:
        found = await store._run(settings)  # pyright: ignore[reportPrivateUsage]
        assert found == ("from_the_dsn", "3s", "off")
    finally:
        await store.drop_tables()
        await store.close()


@pytest.mark.postgres
async def test_postgres_settings_and_keywords_together() -> None:
    """The keywords replace the fields of ``settings``; the store works by the result."""
    prefix = unique_prefix()
    settings = PostgresStoreSettings(table_prefix=prefix, statement_timeout=3.0, max_size=2)
    store = PostgresConversationStore(postgres_dsn(), settings=settings, synchronous_commit=False)

    async def settings_on_the_server(db: Any) -> tuple[Any, ...] | None:
        return await (
            await db.execute(
                "SELECT current_setting('statement_timeout'), current_setting('synchronous_commit')"
            )
        ).fetchone()

    async def messages_stored(db: Any) -> tuple[Any, ...] | None:
        query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(f"{prefix}messages"))
        return await (await db.execute(query)).fetchone()

    try:
        assert store.settings == PostgresStoreSettings(
            table_prefix=prefix, statement_timeout=3.0, max_size=2, synchronous_commit=False
        )
        assert settings.synchronous_commit is True  # the value given is not changed
        assert (store.tables, store.synchronous_commit) == (settings.tables, False)
        await store.append("c1", start=0, messages=[msg("hi")], state={}, expected_version=0)
        found = await store._run(settings_on_the_server)  # pyright: ignore[reportPrivateUsage]
        assert found == ("3s", "off")
        assert await store._run(messages_stored) == (1,)  # pyright: ignore[reportPrivateUsage]
    finally:
        await store.drop_tables()
        await store.close()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            {"table_prefix": "Bad"},
            "table_prefix must match ^[a-z_][a-z0-9_]{0,40}$ (lower-case letters, digits, "
            "underscores), got 'Bad'.",
        ),
        (
            {"min_size": 3, "max_size": 2},
            "need 0 <= min_size <= max_size and max_size >= 1, got min_size=3, max_size=2.",
        ),
        ({"max_size": 0}, "need 0 <= min_size <= max_size and max_size >= 1, got min_size=1, "
         "max_size=0."),
        ({"connect_timeout": 0}, "connect_timeout and statement_timeout must be positive."),
        ({"statement_timeout": -1.0}, "connect_timeout and statement_timeout must be positive."),
    ],
)  # fmt: skip
def test_postgres_settings_are_checked_as_keywords_are(
    option: dict[str, Any], message: str
) -> None:
    exactly = f"^{re.escape(message)}$"
    with pytest.raises(ValueError, match=exactly):
        PostgresStoreSettings(**option)
    with pytest.raises(ValueError, match=exactly):
        PostgresConversationStore("postgresql://x", **option)
    with pytest.raises(ValueError, match=exactly):  # over valid settings too
        PostgresConversationStore("postgresql://x", settings=PostgresStoreSettings(), **option)


def test_postgres_store_an_unknown_keyword_names_the_settings_fields() -> None:
    options: dict[str, Any] = {"max_sise": 3}
    with pytest.raises(
        TypeError,
        match=r"^PostgresConversationStore\(\) got an unexpected keyword argument 'max_sise'; "
        r"its options are the fields of PostgresStoreSettings: connect_timeout, max_size, ",
    ):
        PostgresConversationStore("postgresql://x", **options)


class FlakyRenewals(InMemoryConversationStore):
    """A store whose renewals fail a given number of times, then work; records when."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.renewals: list[float] = []

    @override
    async def renew(self, lease: Lease, *, ttl: float) -> bool:
        self.renewals.append(asyncio.get_running_loop().time())
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("test", "renewal refused")
        return await super().renew(lease, ttl=ttl)


async def test_a_failed_renewal_is_tried_again_soon_and_the_lease_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FlakyRenewals(failures=2)
    started = asyncio.get_running_loop().time()
    async with hold(store, "c1", ttl=3.0):  # renewals every 1 s; after a failure in 0.3 s
        await asyncio.sleep(1.9)
        assert await store.acquire("c1", owner="other", ttl=30) is None  # still held
    first, second, third = store.renewals[:3]
    assert 0.9 <= first - started < 1.5  # the first renewal comes after ttl / 3
    assert second - first < 0.5  # a failed one is tried again soon, not after another ttl / 3
    assert third - second < 0.5
    assert sum("could not renew lease" in r.getMessage() for r in caplog.records) == 2


async def test_a_lost_lease_is_logged_and_not_renewed_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryConversationStore()
    async with hold(store, "c1", ttl=0.3) as held:
        await store.release("c1", held.lease.owner)  # taken away under it
        assert await store.acquire("c1", owner="thief", ttl=30) is not None
        await asyncio.sleep(0.35)
    assert any("was lost" in r.getMessage() for r in caplog.records)
    assert await store.acquire("c1", owner="third", ttl=30) is None  # the thief still holds it


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_async_with_closes_the_store(kind: str, tmp_path: Path) -> None:
    from handoff_builder.stores import (
        InMemoryConversationStore,
        PostgresConversationStore,
        SqliteConversationStore,
    )
    from tests.stores import postgres_dsn, unique_prefix

    closed: list[bool] = []
    if kind == "memory":
        made: Any = InMemoryConversationStore()
    elif kind == "sqlite":
        made = SqliteConversationStore(tmp_path / "c.db")
    else:
        made = PostgresConversationStore(postgres_dsn(), table_prefix=unique_prefix())
    real_close = made.close

    async def close() -> None:
        closed.append(True)
        await real_close()

    made.close = close
    async with made as store:
        assert store is made
        await store.append(
            "c", start=0, messages=[{"role": "user", "contents": []}], state={}, expected_version=0
        )
        assert (await store.load("c")) is not None
        if kind == "postgres":
            await store.drop_tables()
    assert closed == [True]


async def test_conversation_ids_in_pages(store: ConversationStore) -> None:
    for name in ("c", "a", "b", "d"):
        await store.append(
            name, start=0, messages=[{"role": "user", "contents": []}], state={}, expected_version=0
        )
    asked = await store.acquire("e-only-asked", owner="w", ttl=30)  # nothing written: not listed
    assert asked is not None
    assert await store.conversation_ids() == ["a", "b", "c", "d"]
    assert await store.conversation_ids(limit=2) == ["a", "b"]
    assert await store.conversation_ids(after="b", limit=2) == ["c", "d"]
    assert await store.conversation_ids(after="d") == []
    await store.delete("b")
    assert await store.conversation_ids() == ["a", "c", "d"]
