"""The store failing under a turn: a network that goes silent, connections the server cuts, a
platform without ``fcntl``. Every failure is a typed error, and nothing runs twice."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from handoff_builder import ConversationHost, HandoffWorkflowBuilder, StoreUnavailableError
from handoff_builder.stores import PostgresConversationStore
from handoff_builder.testing import ModelCall, Step, client_of, handoff_to, reply, scripted_agent
from tests.stores import (
    connections_named,
    elsewhere,
    postgres_dsn,
    terminate_connections,
    unique_prefix,
    until,
    with_application_name,
)

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.postgres


class FreezableProxy:
    """A TCP proxy on 127.0.0.1 in front of PostgreSQL that can stop forwarding (a partition)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.frozen = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> FreezableProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        self.frozen.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if self.frozen.is_set():  # hold everything back, forever
                    await asyncio.Event().wait()
                writer.write(data)
                await writer.drain()
        writer.close()


def through(dsn: str, port: int) -> str:
    parts = urlsplit(dsn)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[FreezableProxy, PostgresConversationStore]]:
    dsn = postgres_dsn()
    parts = urlsplit(dsn)
    async with FreezableProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
        store = PostgresConversationStore(
            through(dsn, proxy.port), table_prefix=unique_prefix(), statement_timeout=1.0
        )
        yield proxy, store
        proxy.frozen.clear()
        cleanup = PostgresConversationStore(
            dsn, table_prefix=store.tables[0][: -len("conversations")]
        )
        await cleanup.drop_tables()
        await cleanup.close()
        await asyncio.wait_for(store.close(), 10)


async def test_a_network_partition_mid_turn_is_a_typed_error_not_a_hang(
    proxied: tuple[FreezableProxy, PostgresConversationStore],
) -> None:
    proxy, store = proxied

    def partition(call: ModelCall) -> Step:
        del call
        proxy.frozen.set()  # the network goes silent while billing thinks
        return reply("Refunded.")

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing", partition)
    host = ConversationHost(HandoffWorkflowBuilder(triage).with_handoff(triage, billing), store)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await asyncio.wait_for(host.send("c", "refund me"), 30)
    # bounded by the statement limit (1 s here, + 1 s in the client) and the release's wait for a
    # connection (1 s), not by TCP's minutes
    assert time.monotonic() - started < 8
    assert caught.value.__cause__ is not None


async def test_cutting_a_silent_connection_leaves_the_other_connections_alone(
    proxied: tuple[FreezableProxy, PostgresConversationStore],
) -> None:
    """The client-side limit ends a statement the network swallowed without closing its socket
    under the event loop, which still watches it for that statement: a socket the process
    opened meanwhile could get its number, and be mistaken for it (``connection socket
    closed``, or a wait that never ends). Connections opened all along keep working."""
    proxy, store = proxied
    assert await store.acquire("c", owner="a", ttl=30) is not None
    proxy.frozen.set()
    stuck = asyncio.create_task(store.version("c"))
    opened = 0
    while not stuck.done():  # new connections, one after the other, until the cut
        async with await psycopg.AsyncConnection.connect(postgres_dsn()) as other:
            assert await (await other.execute("SELECT 1")).fetchone() == (1,)
        opened += 1
    with pytest.raises(StoreUnavailableError) as caught:
        await stuck
    assert str(caught.value) == (
        "The PostgreSQL conversation store is unavailable: no answer from the server within 2 s "
        "(the connection was closed)"
    )
    assert opened > 0


async def test_connections_dropped_while_idle_are_replaced_before_the_next_send() -> None:
    """A restart, a failover or a proxy's idle kill ends the pooled connections between sends.

    Six of them, all dead at once (the pool's pause after each failed check would add up to
    more than the wait for a connection, 10 s), then the store's connections again while billing
    runs (idle, between two statements of one turn). Every send works: a connection found dead
    before a statement is replaced, and nothing ran twice.
    """
    name = f"hb{unique_prefix()}"
    store = PostgresConversationStore(
        with_application_name(postgres_dsn(), name), table_prefix=unique_prefix(), min_size=6
    )

    def cut(call: ModelCall) -> Step:
        del call
        assert terminate_connections(name) >= 1
        return reply("Refunded.")

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."), reply("Hello."))
    billing = scripted_agent("billing", reply("Back to triage?"), cut)
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = ConversationHost(builder, store)
    try:
        assert (await host.send("c", "refund me")).text == "Back to triage?"
        # the pool opens them in the background
        await until(lambda: connections_named(name) >= 6, "six connections")
        assert terminate_connections(name) >= 6

        turn = await host.send("c", "the refund, please")  # billing, who cuts them again
        assert (turn.text, turn.active_agent) == ("Refunded.", "billing")
        assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (1, 2)
        record = await store.load("c")
        assert record is not None
        texts = [m["contents"][0].get("text") for m in record.messages]
        assert texts.count("Refunded.") == 1
        assert texts[-2:] == ["the refund, please", "Refunded."]
    finally:
        try:
            await store.drop_tables()
        finally:
            await store.close()


async def test_a_connection_cut_during_a_statement_is_a_typed_error_and_nothing_runs_twice() -> (
    None
):
    """The server ends the store's connection while the write after billing's reply runs.

    That write may or may not have happened, so it is never retried: the send fails with
    StoreUnavailableError and the turn stops there (billing's reply is not stored). The lease
    lives in the row, not on a connection, so nobody else got in meanwhile; the next send
    finishes the turn (billing again, triage never).
    """
    dsn = postgres_dsn()
    name = f"hb{unique_prefix()}"
    store = PostgresConversationStore(
        with_application_name(dsn, name), table_prefix=unique_prefix(), max_size=2
    )
    locker = psycopg.connect(dsn)  # a transaction of its own, left open while the write waits

    def lock_the_row(call: ModelCall) -> Step:
        del call  # the write after this reply waits for the row, until its connection is cut
        locker.execute(
            sql.SQL("SELECT 1 FROM {} WHERE conversation_id = 'c' FOR UPDATE").format(
                sql.Identifier(store.tables[0])
            )
        )
        return reply("Refunded, but never stored.")

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent(
        "billing", lock_the_row, reply("Refunded on the retry."), reply("Anything else?")
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    try:
        send = asyncio.create_task(ConversationHost(builder, store, lease_ttl=1).send("c", "hi"))
        await until(lambda: send.done() or waiting_for_a_lock(name), "waiting for the row")
        assert not send.done(), send
        assert terminate_connections(name) >= 1  # the one in the middle of the write, too
        locker.rollback()
        with pytest.raises(StoreUnavailableError) as caught:
            await send
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        record = await store.load("c")
        assert record is not None
        assert record.state["host"]["next"] == "billing"
        assert "Refunded, but never stored." not in str(record.messages)

        result = await ConversationHost(builder, store).send("c", "hello?", wait=True)
        assert result.recovered is not None
        assert result.recovered.text == "Refunded on the retry."
        assert len(client_of(triage).calls) == 1
        assert len(client_of(billing).calls) == 3  # the cut call, the retry, the new message
        record = await store.load("c")
        assert record is not None
        texts = [m["contents"][0].get("text") for m in record.messages]
        assert texts.count("Refunded on the retry.") == 1
    finally:
        locker.close()
        try:
            await store.drop_tables()
        finally:
            await store.close()


async def test_a_database_dropped_under_the_store_is_named_when_no_connection_comes() -> None:
    """The store ran, then its database went away (its connections ended with it).

    The pool cannot replace them; the wait for a connection ends with the server's reason, not
    only psycopg_pool's "couldn't get a connection after 1.00 sec".
    """
    database = f"hb_gone_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    dsn = elsewhere(postgres_dsn(), database=database)
    store = PostgresConversationStore(dsn, table_prefix="t_", statement_timeout=1.0)
    try:
        assert await store.acquire("c", owner="a", ttl=30) is not None
        with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database)))
        with pytest.raises(StoreUnavailableError) as caught:
            await store.version("c")
    finally:
        await store.close()
        with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(database)
            ))  # fmt: skip
    parts = urlsplit(dsn)
    assert str(caught.value) == (
        "The PostgreSQL conversation store is unavailable: no connection within 1 s: connection "
        f'failed: connection to server at "{parts.hostname}", port {parts.port} failed: FATAL: '
        f'database "{database}" does not exist'
    )
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)


def waiting_for_a_lock(application_name: str) -> bool:
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        found = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock'",
            (application_name,),
        ).fetchone()
    return found is not None and found[0] > 0


def test_hosting_works_without_fcntl(tmp_path: Path) -> None:
    """Windows has no ``fcntl``: hosting on SQLite imports and runs without it."""
    script = f"""
import asyncio, sys
sys.modules["fcntl"] = None  # importing it now raises ImportError, as on Windows
from handoff_builder import ConversationHost, HandoffWorkflowBuilder
from handoff_builder.stores import SqliteConversationStore
from handoff_builder.testing import reply, scripted_agent

async def main():
    triage = scripted_agent("triage", reply("hello from triage"))
    store = SqliteConversationStore({str(tmp_path / "c.db")!r})
    print((await ConversationHost(HandoffWorkflowBuilder(triage), store).send("c", "hi")).text)
    await store.close()

asyncio.run(main())
"""
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hello from triage"
    assert list(tmp_path.iterdir()) == [tmp_path / "c.db"] or all(
        p.name.startswith("c.db") for p in tmp_path.iterdir()
    )  # the database and its WAL files, no lock directory


async def test_a_read_only_database_is_store_unavailable() -> None:
    """A failover to a read-only standby: the write fails as StoreUnavailableError, typed."""
    dsn = postgres_dsn()
    prefix = unique_prefix()
    writable = PostgresConversationStore(dsn, table_prefix=prefix)
    await writable.acquire("warm", owner="x", ttl=0.01)  # creates the tables
    separator = "&" if "?" in dsn else "?"
    read_only = PostgresConversationStore(
        f"{dsn}{separator}options=-c%20default_transaction_read_only%3Don", table_prefix=prefix
    )
    try:
        with pytest.raises(StoreUnavailableError, match="read-only") as caught:
            await read_only.acquire("c", owner="y", ttl=30)
        assert isinstance(caught.value.__cause__, psycopg.errors.ReadOnlySqlTransaction)
    finally:
        await read_only.close()
        await writable.drop_tables()
        await writable.close()
