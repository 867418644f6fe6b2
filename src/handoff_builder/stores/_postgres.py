"""PostgreSQL store: several workers on several machines (psycopg 3, async, pooled).

Install with ``pip install 'handoff-builder[postgres]'``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from handoff_builder.exceptions import ConversationConflictError, StoreUnavailableError

from ._base import (
    RECORD_SCHEMA_VERSION,
    ConversationRecord,
    encode,
    record_from_rows,
)
from ._locks import acquire

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool, PoolTimeout
except ImportError as missing:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "PostgresConversationStore needs psycopg 3 and psycopg-pool: "
        "pip install 'handoff-builder[postgres]'"
    ) from missing

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
# Namespace for the advisory-lock keys of this package (the first argument of the two-int form).
_LOCK_NAMESPACE = 0x48424C  # "HBL"


class PostgresConversationStore:
    """Conversations in PostgreSQL, shared by every worker that points at the database.

    Writes are transactions that lock the conversation's row; the per-conversation turn lock is
    a session-level advisory lock held on a dedicated pooled connection, which PostgreSQL
    releases by itself if the worker dies.
    """

    def __init__(
        self,
        dsn: str,
        *,
        table_prefix: str = "handoff_",
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 5.0,
    ) -> None:
        """Connect lazily to ``dsn``; tables are ``<table_prefix>conversations``/``messages``."""
        if not _NAME.match(table_prefix):
            raise ValueError(
                f"table_prefix must match {_NAME.pattern} (lower-case letters, digits, "
                f"underscores), got {table_prefix!r}."
            )
        self.dsn = dsn
        self.tables = (f"{table_prefix}conversations", f"{table_prefix}messages")
        """The store's two tables: conversations (the state rows) and messages (the log)."""
        self._q = _queries(*(sql.Identifier(name) for name in self.tables))
        self._timeout = connect_timeout
        self._sizes = (min_size, max_size)
        self._pool = self._new_pool()
        self._ready = False
        self._opening = asyncio.Lock()

    async def _open(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        if self._ready:
            return self._pool
        async with self._opening:  # concurrent first calls open the pool once
            if not self._ready:
                await self._create()
        return self._pool

    def _new_pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        min_size, max_size = self._sizes
        return AsyncConnectionPool(
            self.dsn, min_size=min_size, max_size=max_size, open=False, timeout=self._timeout
        )

    async def _create(self) -> None:
        try:
            await self._pool.open(wait=True, timeout=self._timeout)
            async with self._pool.connection() as db, db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_NAMESPACE,))
                await db.execute(self._q["create_conversations"])
                await db.execute(self._q["create_messages"])
        except (psycopg.OperationalError, PoolTimeout) as error:
            await self._pool.close()  # stop its reconnect attempts; a later call starts afresh
            self._pool = self._new_pool()
            raise StoreUnavailableError("PostgreSQL", str(error).strip()) from error
        self._ready = True

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        """The stored conversation, checked, or ``None``."""
        pool = await self._open()
        try:
            async with pool.connection() as db:
                row = await (
                    await db.execute(self._q["select_state"], (conversation_id,))
                ).fetchone()
                if row is None:
                    return None
                rows = await (
                    await db.execute(self._q["select_messages"], (conversation_id,))
                ).fetchall()
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise StoreUnavailableError("PostgreSQL", str(error).strip()) from error
        schema_version, version, raw_state = row
        return record_from_rows(conversation_id, schema_version, version, raw_state, rows)

    async def version(self, conversation_id: str) -> int | None:
        """The stored version, or ``None``."""
        pool = await self._open()
        try:
            async with pool.connection() as db:
                row = await (
                    await db.execute(self._q["select_version"], (conversation_id,))
                ).fetchone()
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise StoreUnavailableError("PostgreSQL", str(error).strip()) from error
        return None if row is None else int(row[0])

    async def append(
        self,
        conversation_id: str,
        *,
        start: int,
        messages: Sequence[Mapping[str, Any]],
        state: Mapping[str, Any],
        expected_version: int,
    ) -> int:
        """Append and replace the state in one transaction, if the version still matches."""
        pool = await self._open()
        bodies = [(conversation_id, start + i, encode(m)) for i, m in enumerate(messages)]
        try:
            async with pool.connection() as db, db.transaction():
                await db.execute(self._q["insert_state"], (conversation_id, RECORD_SCHEMA_VERSION))
                row = await (await db.execute(self._q["lock_state"], (conversation_id,))).fetchone()
                found = int(row[0]) if row else 0
                count_row = await (
                    await db.execute(self._q["count_messages"], (conversation_id,))
                ).fetchone()
                count = int(count_row[0]) if count_row else 0
                if found != expected_version or count != start:
                    raise ConversationConflictError(conversation_id, expected_version, found)
                if bodies:
                    async with db.cursor() as cursor:
                        await cursor.executemany(self._q["insert_message"], bodies)
                await db.execute(
                    self._q["update_state"],
                    (found + 1, encode(dict(state)), RECORD_SCHEMA_VERSION, conversation_id),
                )
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise StoreUnavailableError("PostgreSQL", str(error).strip()) from error
        return found + 1

    @asynccontextmanager
    async def lock(
        self, conversation_id: str, *, wait: bool = False, timeout: float = 30.0
    ) -> AsyncGenerator[None, None]:
        """Hold the conversation with an advisory lock on a dedicated connection."""
        pool = await self._open()
        try:
            connection = await pool.getconn()
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise StoreUnavailableError("PostgreSQL", str(error).strip()) from error
        await connection.set_autocommit(True)
        key = (_LOCK_NAMESPACE + 1, conversation_id)

        async def try_acquire() -> bool:
            row = await (
                await connection.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", key)
            ).fetchone()
            return bool(row and row[0])

        try:
            await acquire(try_acquire, conversation_id, wait=wait, timeout=timeout)
            try:
                yield
            finally:
                await connection.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", key)
        finally:
            await pool.putconn(connection)

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""
        pool = await self._open()
        async with pool.connection() as db, db.transaction():
            await db.execute(self._q["delete_messages"], (conversation_id,))
            await db.execute(self._q["delete_state"], (conversation_id,))

    async def drop_tables(self) -> None:
        """Drop this store's tables (tests and tear-down)."""
        pool = await self._open()
        async with pool.connection() as db:
            await db.execute(self._q["drop"])
        self._ready = False

    async def close(self) -> None:
        """Close the pool."""
        await self._pool.close()


def _queries(conversations: sql.Identifier, messages: sql.Identifier) -> dict[str, sql.Composed]:
    """Every statement of the store, with its table names quoted as identifiers."""
    texts = {
        "create_conversations": "CREATE TABLE IF NOT EXISTS {c} (conversation_id TEXT PRIMARY KEY, "
        "schema_version INTEGER NOT NULL, version BIGINT NOT NULL, state TEXT NOT NULL, "
        "updated_at TIMESTAMPTZ NOT NULL DEFAULT now())",
        "create_messages": "CREATE TABLE IF NOT EXISTS {m} (conversation_id TEXT NOT NULL, "
        "position INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (conversation_id, position))",
        "select_state": "SELECT schema_version, version, state FROM {c} WHERE conversation_id = %s",
        "select_messages": "SELECT position, body FROM {m} WHERE conversation_id = %s "
        "ORDER BY position",
        "insert_state": "INSERT INTO {c} (conversation_id, schema_version, version, state) "
        "VALUES (%s, %s, 0, '{{}}') ON CONFLICT (conversation_id) DO NOTHING",
        "select_version": "SELECT version FROM {c} WHERE conversation_id = %s",
        "lock_state": "SELECT version FROM {c} WHERE conversation_id = %s FOR UPDATE",
        "count_messages": "SELECT COUNT(*) FROM {m} WHERE conversation_id = %s",
        "insert_message": "INSERT INTO {m} VALUES (%s, %s, %s)",
        "update_state": "UPDATE {c} SET version = %s, state = %s, schema_version = %s, "
        "updated_at = now() WHERE conversation_id = %s",
        "delete_messages": "DELETE FROM {m} WHERE conversation_id = %s",
        "delete_state": "DELETE FROM {c} WHERE conversation_id = %s",
        "drop": "DROP TABLE IF EXISTS {m}, {c}",
    }
    return {
        name: sql.SQL(text).format(c=conversations, m=messages)  # pyright: ignore[reportArgumentType]
        for name, text in texts.items()
    }
