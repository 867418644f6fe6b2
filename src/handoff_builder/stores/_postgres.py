"""PostgreSQL store: several workers on several machines (psycopg 3, async, pooled).

Install with ``pip install 'handoff-builder[postgres]'``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, TypeVar

from typing_extensions import Unpack, override

from handoff_builder._options import settings_with
from handoff_builder._timeouts import DeadlinePassedError, within
from handoff_builder.exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    CorruptConversationError,
    LeaseLostError,
    StoreUnavailableError,
)

from ._base import (
    RECORD_SCHEMA_VERSION,
    ChainedMessage,
    ClosingStore,
    ConversationRecord,
    Lease,
    encode,
    follow_chain,
    record_from_rows,
)

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "PostgresConversationStore needs psycopg 3 and psycopg-pool: "
        "pip install 'handoff-builder[postgres]'"
    ) from missing

from ._postgres_connections import (
    UNAVAILABLE,
    Connection,
    Pool,
    bounded,
    connection_settings,
    new_pool,
    spoke_while_idle,
    unavailable,
)
from ._postgres_settings import PostgresStoreOptions, PostgresStoreSettings

T = TypeVar("T")

# Namespace of the advisory lock that serialises creating the tables (first use only).
_LOCK_NAMESPACE = 0x48424C  # "HBL"


class PostgresConversationStore(ClosingStore):
    """Conversations in PostgreSQL, shared by every worker that points at the database.

    Every operation is one statement on a connection borrowed from the pool for that statement
    alone: a turn's lease lives in the conversation's row (owner, fencing token, expiry on the
    server's clock), so no connection is held across a turn and any pool size serves any number
    of concurrent conversations (they queue for a connection). Each statement has a time limit
    on the server (``statement_timeout``, ``lock_timeout``) and in the client, and dead
    connections are noticed by TCP keepalives: a store that stops answering raises
    :class:`~handoff_builder.StoreUnavailableError` instead of hanging.

    A pooled connection the server ended while it was idle (a restart, a failover, a proxy's
    idle timeout) is replaced before a statement is sent on it; a connection lost while a
    statement runs is an error, never a retry (the statement may have run). A connection that
    cannot be made is reported in the server's (or the system's) own words: the first one at
    once, without waiting for the pool.
    """

    def __init__(
        self,
        dsn: str,
        *,
        settings: PostgresStoreSettings | None = None,
        **options: Unpack[PostgresStoreOptions],
    ) -> None:
        """Connect lazily to ``dsn``; tables are ``<table_prefix>conversations``/``messages``.

        ``settings`` (:class:`~handoff_builder.stores.PostgresStoreSettings`: the table prefix,
        the pool's sizes, the time limits, ``synchronous_commit``) says how the store uses the
        database; its fields may also be given as keywords (``max_size=20``), in place of the
        ones of ``settings``.

        Raises:
            ValueError: an option out of range, named in the message.
            TypeError: an option that is not a field of ``PostgresStoreSettings``.
        """
        self.settings = settings_with(
            PostgresStoreSettings, settings, options, "PostgresConversationStore"
        )
        """How the store uses its database (:class:`PostgresStoreSettings`)."""
        self.dsn = dsn
        self.tables = self.settings.tables
        """The store's two tables: conversations (the state rows) and messages (the log)."""
        chain = self.settings.chain_table
        names = (*self.tables, chain, f"{chain}_by_position")
        self._q = _queries(*(sql.Identifier(name) for name in names))
        self._statement_timeout = self.settings.statement_timeout
        self.synchronous_commit = self.settings.synchronous_commit
        self._sizes = (self.settings.min_size, self.settings.max_size)
        self._connection_settings = connection_settings(
            dsn,
            connect_timeout=self.settings.connect_timeout,
            statement_timeout=self.settings.statement_timeout,
            synchronous_commit=self.settings.synchronous_commit,
        )
        self._pool = self._new_pool()
        self._ready = False
        self._opening = asyncio.Lock()

    async def _open(self) -> Pool:
        if self._ready:
            return self._pool
        async with self._opening:  # concurrent first calls open the pool once
            if not self._ready:
                await self._create()
        return self._pool

    def _new_pool(self) -> Pool:
        return new_pool(
            self.dsn,
            self._connection_settings,
            sizes=self._sizes,
            timeout=self._statement_timeout,
            check=self._check,
        )

    async def _connect(self) -> Connection:
        """A connection of the store's own, outside the pool (closed by the caller)."""
        return await psycopg.AsyncConnection.connect(self.dsn, **self._connection_settings)

    async def _create(self) -> None:
        """Create the tables on a first connection of our own, then open the pool.

        The pool would retry a connection that fails in the background and only say, when its
        wait ran out, that it is not ready ("pool initialization incomplete after 5.0 sec"); a
        connection of our own fails at once, in the server's words (a database or a user that
        does not exist, a refused port).
        """
        try:
            db = await self._connect()
            async with db, db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_NAMESPACE,))
                for name in (
                    "create_conversations", "create_messages", "add_lease_columns",
                    "create_chain", "index_chain",
                ):  # fmt: skip
                    await db.execute(self._q[name])
            try:  # the pool's min_size connections, which will most likely work now too
                await self._pool.open(wait=True, timeout=self._statement_timeout)
            except PoolTimeout as error:
                await self._no_connection(error)
        except BaseException as error:  # unreachable, or cancelled midway: start afresh later
            pool, self._pool = self._pool, self._new_pool()
            await asyncio.shield(pool.close())  # stops its reconnect attempts
            if isinstance(error, (*UNAVAILABLE, psycopg.Error)):
                raise unavailable(error) from error
            raise
        self._ready = True

    async def _check(self, db: Connection) -> None:
        """The pool's check of each connection it is about to lend, before any statement.

        A connection the server ended while it sat in the pool (a restart, a failover, a
        proxy's idle timeout, ``pg_terminate_backend``) must not be lent: the statement would
        fail, although the server is up again. Only a connection that died *before* the call
        began may be replaced: a statement that was sent may have run (a fenced append), so a
        failure after that is never retried, it is the caller's error.

        Finding out costs no round trip: a pooled connection the server has nothing to say to
        stays silent, one it closed has its goodbye (or the end of the stream) waiting to be
        read (:func:`spoke_while_idle`, one ``poll(2)``). Only then is there a round trip (an
        empty query, psycopg_pool's own check) to tell a dead connection from a stray notice.
        A dead one fails the check: the pool discards it and lends another. And since its
        neighbours most likely died with it, the pool is drained at once (every idle connection
        closed and replaced, those in use replaced when they come back): psycopg_pool pauses
        about a second after each failed check, so a full pool checked one by one would
        outlast the wait for a connection.
        """
        if not spoke_while_idle(db):
            return
        try:
            await AsyncConnectionPool.check_connection(db)
        except psycopg.Error:
            await self._pool.drain()
            raise

    async def _run(self, work: Callable[[Connection], Awaitable[T]]) -> T:
        """``work`` on a connection borrowed for it alone, bounded in time; failures typed.

        The server's limits apply first; one second later the client cuts the connection
        (:func:`bounded`), which the pool then replaces.
        """
        pool = await self._open()
        limit = self._statement_timeout + 1.0
        try:
            async with pool.connection() as db:
                return await bounded(work(db), db, limit)
        except DeadlinePassedError as error:
            raise StoreUnavailableError(
                "PostgreSQL", f"no answer from the server within {limit:g} s (the connection "
                "was closed)"
            ) from error  # fmt: skip
        except PoolTimeout as error:
            await self._no_connection(error)
        except psycopg.errors.UniqueViolation:  # a write's own business (the log moved on)
            raise
        except (*UNAVAILABLE, psycopg.Error) as error:  # a read-only standby, dropped tables...
            raise unavailable(error) from error

    async def _no_connection(self, error: PoolTimeout) -> NoReturn:
        """The pool had no connection in time: say why, from one connection of our own.

        psycopg_pool only logs why its connections fail; a new one, tried now, fails for the
        same reason (the server is down, the database is gone) and says so. If it works, the
        pool's connections were all in use (or the server just came back).
        """
        waited = f"no connection within {self._statement_timeout:g} s: "
        try:
            db = await within(self._statement_timeout, self._connect())
        except DeadlinePassedError:
            raise StoreUnavailableError(
                "PostgreSQL", f"{waited}a new connection got no answer within "
                f"{self._statement_timeout:g} s either"
            ) from error  # fmt: skip
        except psycopg.Error as failed:
            raise unavailable(failed, waited) from failed
        await db.close()
        raise StoreUnavailableError(
            "PostgreSQL", f"{waited}the {self._sizes[1]} pooled connections were all in use or "
            "being replaced (a new one can be made now: raise max_size if this lasts)"
        ) from error  # fmt: skip

    async def _one(self, name: str, params: Any) -> tuple[Any, ...] | None:
        async def one(db: psycopg.AsyncConnection[Any]) -> tuple[Any, ...] | None:
            return await (await db.execute(self._q[name], params)).fetchone()

        return await self._run(one)

    async def _execute(self, name: str, params: Any) -> None:
        async def execute(db: psycopg.AsyncConnection[Any]) -> None:
            await db.execute(self._q[name], params)

        await self._run(execute)

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        """The stored conversation, checked, or ``None``."""

        async def read(db: psycopg.AsyncConnection[Any]) -> tuple[Any, list[Any]] | None:
            row = await (await db.execute(self._q["select_state"], (conversation_id,))).fetchone()
            if row is None:
                return None
            rows = await (
                await db.execute(self._q["select_messages"], (conversation_id,))
            ).fetchall()
            return row, rows

        found = await self._run(read)
        if found is None:
            return None
        (schema_version, version, raw_state), rows = found
        return record_from_rows(conversation_id, schema_version, version, raw_state, rows)

    async def version(self, conversation_id: str) -> int | None:
        """The stored version, or ``None``."""
        row = await self._one("select_version", (conversation_id,))
        return None if row is None else int(row[0])

    async def append(
        self,
        conversation_id: str,
        *,
        start: int,
        messages: Sequence[Mapping[str, Any]],
        state: Mapping[str, Any],
        expected_version: int,
        lease: Lease | None = None,
        release: bool = False,
    ) -> int:
        """Append and replace the state with one statement, if the version and lease allow it."""
        name = "write_new" if expected_version == 0 and lease is None else "write"
        row, found = await self._write(
            name, conversation_id, start, messages, state, expected_version,
            owner=lease.owner if lease is not None else None,
            token=lease.token if lease is not None else None,
            release=release and lease is not None,
        )  # fmt: skip
        if row is not None:
            return int(row[0])
        version, held_by, held_token, alive = found
        if lease is not None and (held_by != lease.owner or held_token != lease.token):
            raise LeaseLostError(conversation_id, lease.owner)
        if lease is None and held_by is not None and alive:
            raise ConversationBusyError(conversation_id)
        raise ConversationConflictError(conversation_id, expected_version, int(version))

    async def acquire_and_append(
        self,
        conversation_id: str,
        *,
        owner: str,
        ttl: float,
        start: int,
        messages: Sequence[Mapping[str, Any]],
        state: Mapping[str, Any],
        expected_version: int,
        release: bool = False,
    ) -> Lease | None:
        """Take the lease and write with one statement (``None``: another owner holds it)."""
        row, found = await self._write(
            "acquire_and_write", conversation_id, start, messages, state, expected_version,
            owner=owner, ttl=ttl, release=release,
        )  # fmt: skip
        if row is not None:
            return Lease(conversation_id, owner, int(row[1]), int(row[0]))
        version, held_by, _, alive = found
        if held_by is not None and alive:
            return None
        raise ConversationConflictError(conversation_id, expected_version, int(version))

    async def _write(
        self,
        name: str,
        conversation_id: str,
        start: int,
        messages: Sequence[Mapping[str, Any]],
        state: Mapping[str, Any],
        expected_version: int,
        **fence: Any,
    ) -> tuple[tuple[Any, ...] | None, tuple[Any, ...]]:
        """Run a write statement: its row when it wrote, else why it did not.

        Why not is (version, lease owner, lease token, whether the lease is alive), read right
        after the statement.
        """
        params = {
            "id": conversation_id,
            "schema": RECORD_SCHEMA_VERSION,
            "state": encode(dict(state)),
            "start": start,
            "expected": expected_version,
            "bodies": encode(list(messages)),  # one JSON array: PostgreSQL splits it
            **fence,
        }
        try:
            row = await self._one(name, params)
        except psycopg.errors.UniqueViolation:  # the log had moved on: a message at `start`
            row = None
        if row is not None and row[0] is not None:
            return row, ()
        found = await self._one("why_not", (conversation_id,))
        return None, found if found is not None else (0, None, 0, False)

    async def acquire(self, conversation_id: str, *, owner: str, ttl: float) -> Lease | None:
        """Take the lease with one statement, if it is free or expired (the server's clock)."""
        row = await self._one("acquire", (conversation_id, RECORD_SCHEMA_VERSION, owner, ttl))
        return None if row is None else Lease(conversation_id, owner, int(row[0]), int(row[1]))

    async def renew(self, lease: Lease, *, ttl: float) -> bool:
        """Extend the lease if it is still held."""
        params = (ttl, lease.conversation_id, lease.owner, lease.token)
        return await self._one("renew", params) is not None

    async def release(self, conversation_id: str, owner: str) -> None:
        """Give the lease back; a conversation nothing was written to is forgotten."""
        await self._execute("release", {"id": conversation_id, "owner": owner})

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""
        await self._execute("delete", {"id": conversation_id})

    async def put_chain(self, conversation_id: str, entries: Sequence[ChainedMessage]) -> None:
        """Store ``entries`` in one statement (one stored already is left as it is)."""
        if not entries:
            return
        columns = (
            [e.digest for e in entries],
            [e.previous for e in entries],
            [e.position for e in entries],
            [encode(e.body) for e in entries],  # stored as text: PostgreSQL parses no JSON
        )
        await self._execute("put_chain", (conversation_id, *columns))

    async def read_chain(
        self, conversation_id: str, head: str, length: int, *, start: int = 0
    ) -> list[ChainedMessage]:
        """Messages ``start`` on of the history ending at ``head``, in order.

        Read with one statement, of the entries at those positions only.
        """

        async def read(db: psycopg.AsyncConnection[Any]) -> list[Any]:
            found = await db.execute(self._q["read_chain"], (conversation_id, start, length))
            return await found.fetchall()

        entries: dict[str, ChainedMessage] = {}
        for digest, previous, position, body in await self._run(read):
            try:
                decoded = json.loads(body)
            except ValueError as error:
                raise CorruptConversationError(
                    conversation_id, f"message {position} of its log is not JSON: {error}", position
                ) from error
            entries[digest] = ChainedMessage(digest, previous, position, decoded)
        return follow_chain(conversation_id, entries, head, length, start)

    async def conversation_ids(self, *, after: str = "", limit: int = 100) -> list[str]:
        """Ids of the stored conversations after ``after``, in order, at most ``limit``."""

        async def read(db: psycopg.AsyncConnection[Any]) -> list[str]:
            found = await db.execute(self._q["ids"], {"after": after, "limit": max(limit, 0)})
            return [str(row[0]) for row in await found.fetchall()]

        return await self._run(read)

    async def drop_tables(self) -> None:
        """Drop this store's tables (tests and tear-down)."""
        await self._execute("drop", None)
        self._ready = False

    @override
    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()


# The fence of every write: with a lease, only while it is the current one; without, only while
# no unexpired lease is held.
_FENCE = (
    "((%(token)s::bigint IS NULL AND (c.lease_owner IS NULL OR c.lease_expires < now())) "
    "OR (c.lease_owner = %(owner)s AND c.lease_token = %(token)s::bigint))"
)
_LOG_ENDS_AT_START = (
    "%(start)s = (SELECT COALESCE(MAX(position) + 1, 0) FROM {m} WHERE conversation_id = %(id)s)"
)
# The messages of a write go in with its state row, in the same statement (so, atomically).
_WITH_MESSAGES = (
    ", ins AS (INSERT INTO {m} (conversation_id, position, body) "
    "SELECT %(id)s, %(start)s + o - 1, b::text FROM w, "
    "json_array_elements(%(bodies)s::json) WITH ORDINALITY AS t(b, o) "
    "RETURNING 1) SELECT (SELECT version FROM w), (SELECT COUNT(*) FROM ins)"
)


def _queries(
    conversations: sql.Identifier,
    messages: sql.Identifier,
    chain: sql.Identifier,
    chain_index: sql.Identifier,
) -> dict[str, bytes]:
    """Every statement of the store, with its table names quoted as identifiers.

    Rendered to bytes once (psycopg would compose them again on every execute).
    """
    texts = {
        "create_conversations": "CREATE TABLE IF NOT EXISTS {c} (conversation_id TEXT PRIMARY KEY, "
        "schema_version INTEGER NOT NULL, version BIGINT NOT NULL, state TEXT NOT NULL, "
        "updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), lease_owner TEXT, "
        "lease_token BIGINT NOT NULL DEFAULT 0, lease_expires TIMESTAMPTZ)",
        "create_messages": "CREATE TABLE IF NOT EXISTS {m} (conversation_id TEXT NOT NULL, "
        "position INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (conversation_id, position))",
        "create_chain": "CREATE TABLE IF NOT EXISTS {h} (conversation_id TEXT NOT NULL, "
        "digest TEXT NOT NULL, previous TEXT NOT NULL, position INTEGER NOT NULL, "
        "body TEXT NOT NULL, PRIMARY KEY (conversation_id, digest))",
        # A history is read by position ranges: a page read back, the tail a worker lacks.
        "index_chain": "CREATE INDEX IF NOT EXISTS {i} ON {h} (conversation_id, position)",
        "put_chain": "INSERT INTO {h} (conversation_id, digest, previous, position, body) "
        "SELECT %s, d, p, n, b FROM unnest(%s::text[], %s::text[], %s::integer[], %s::text[]) "
        "AS e(d, p, n, b) ON CONFLICT DO NOTHING",
        "read_chain": "SELECT digest, previous, position, body FROM {h} "
        "WHERE conversation_id = %s AND position >= %s AND position < %s",
        # Tables made by the first release get the lease columns.
        "add_lease_columns": "ALTER TABLE {c} ADD COLUMN IF NOT EXISTS lease_owner TEXT, "
        "ADD COLUMN IF NOT EXISTS lease_token BIGINT NOT NULL DEFAULT 0, "
        "ADD COLUMN IF NOT EXISTS lease_expires TIMESTAMPTZ",
        "select_state": "SELECT schema_version, version, state FROM {c} "
        "WHERE conversation_id = %s AND version > 0",
        "select_messages": "SELECT position, body FROM {m} WHERE conversation_id = %s "
        "ORDER BY position",
        "select_version": "SELECT version FROM {c} WHERE conversation_id = %s AND version > 0",
        "write": "WITH w AS (UPDATE {c} c SET version = c.version + 1, state = %(state)s, "  # noqa: S608
        "schema_version = %(schema)s, updated_at = now(), "
        "lease_owner = CASE WHEN %(release)s THEN NULL ELSE c.lease_owner END, "
        "lease_expires = CASE WHEN %(release)s THEN NULL ELSE c.lease_expires END "
        "WHERE c.conversation_id = %(id)s "
        f"AND c.version = %(expected)s AND {_FENCE} AND {_LOG_ENDS_AT_START} RETURNING c.version)"
        + _WITH_MESSAGES,
        "write_new": "WITH w AS (INSERT INTO {c} AS c (conversation_id, schema_version, version, "  # noqa: S608
        "state) VALUES (%(id)s, %(schema)s, 1, %(state)s) ON CONFLICT (conversation_id) DO "
        "UPDATE SET version = c.version + 1, state = EXCLUDED.state, schema_version = "
        f"EXCLUDED.schema_version, updated_at = now() WHERE c.version = 0 AND {_FENCE} AND "
        f"{_LOG_ENDS_AT_START} RETURNING c.version)" + _WITH_MESSAGES,
        "acquire_and_write": "WITH w AS (UPDATE {c} c SET version = c.version + 1, "  # noqa: S608
        "state = %(state)s, schema_version = %(schema)s, updated_at = now(), "
        "lease_token = c.lease_token + 1, "
        "lease_owner = CASE WHEN %(release)s THEN NULL ELSE %(owner)s END, "
        "lease_expires = CASE WHEN %(release)s THEN NULL "
        "ELSE now() + make_interval(secs => %(ttl)s) END "
        "WHERE c.conversation_id = %(id)s AND c.version = %(expected)s AND c.version > 0 "
        f"AND (c.lease_owner IS NULL OR c.lease_expires < now()) AND {_LOG_ENDS_AT_START} "
        "RETURNING c.version, c.lease_token), ins AS (INSERT INTO {m} (conversation_id, position, "
        "body) SELECT %(id)s, %(start)s + o - 1, b::text FROM w, "
        "json_array_elements(%(bodies)s::json) WITH ORDINALITY AS t(b, o) RETURNING 1) "
        "SELECT (SELECT version FROM w), (SELECT lease_token FROM w), "
        "(SELECT COUNT(*) FROM ins)",
        "why_not": "SELECT version, lease_owner, lease_token, lease_expires >= now() FROM {c} "
        "WHERE conversation_id = %s",
        "acquire": "INSERT INTO {c} AS c (conversation_id, schema_version, version, state, "
        "lease_owner, lease_token, lease_expires) VALUES (%s, %s, 0, '{{}}', %s, 1, "
        "now() + make_interval(secs => %s)) ON CONFLICT (conversation_id) DO UPDATE SET "
        "lease_owner = EXCLUDED.lease_owner, lease_token = c.lease_token + 1, "
        "lease_expires = EXCLUDED.lease_expires "
        "WHERE c.lease_owner IS NULL OR c.lease_expires < now() "
        "RETURNING c.lease_token, c.version",
        "renew": "UPDATE {c} SET lease_expires = now() + make_interval(secs => %s) "
        "WHERE conversation_id = %s AND lease_owner = %s AND lease_token = %s RETURNING 1",
        # Releasing a conversation nothing was written to forgets it: asking leaves nothing.
        "release": "WITH gone AS (DELETE FROM {c} WHERE conversation_id = %(id)s AND "
        "lease_owner = %(owner)s AND version = 0 RETURNING 1) UPDATE {c} SET lease_owner = NULL, "
        "lease_expires = NULL WHERE conversation_id = %(id)s AND lease_owner = %(owner)s "
        "AND version > 0",
        "delete": "WITH gone AS (DELETE FROM {m} WHERE conversation_id = %(id)s), "
        "unchained AS (DELETE FROM {h} WHERE conversation_id = %(id)s) "
        "DELETE FROM {c} WHERE conversation_id = %(id)s",
        "drop": "DROP TABLE IF EXISTS {m}, {c}, {h}",
        "ids": "SELECT conversation_id FROM {c} WHERE version > 0 AND conversation_id > %(after)s "
        "ORDER BY conversation_id LIMIT %(limit)s",
    }
    tables = {"c": conversations, "m": messages, "h": chain, "i": chain_index}
    return {
        name: sql.SQL(text).format(**tables).as_bytes(None)  # pyright: ignore[reportArgumentType]
        for name, text in texts.items()
    }
