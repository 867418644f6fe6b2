"""The embedded default store: one SQLite file (standard library), locks that span processes."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import sqlite3
import threading
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from handoff_builder.exceptions import ConversationConflictError, StoreUnavailableError

from ._base import (
    RECORD_SCHEMA_VERSION,
    ConversationRecord,
    encode,
    record_from_rows,
)
from ._locks import acquire

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS handoff_conversations (
    conversation_id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS handoff_messages (
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
"""


class SqliteConversationStore:
    """Conversations in one SQLite file; several processes on one machine may share it.

    Writes are transactions (a turn's new messages and its state row together, or nothing).
    The per-conversation lock is an OS file lock next to the database, released by the
    operating system if the process dies, so a crashed worker never blocks a conversation.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open (or create) the database at ``path``; its lock files go in ``<path>.locks/``."""
        self.path = Path(path)
        self._lock_dir = self.path.with_name(self.path.name + ".locks")
        self._db: sqlite3.Connection | None = None
        self._guard = threading.Lock()

    # -- plumbing ---------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA busy_timeout=5000")
                db.executescript(_SCHEMA)
            except sqlite3.Error as error:
                raise StoreUnavailableError("SQLite", f"{self.path}: {error}") from error
            self._db = db
        return self._db

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def locked() -> T:
            with self._guard:
                return work(self._connect())

        try:
            return await asyncio.to_thread(locked)
        except sqlite3.OperationalError as error:
            raise StoreUnavailableError("SQLite", f"{self.path}: {error}") from error

    # -- the contract -----------------------------------------------------------------------------

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        """The stored conversation, checked, or ``None``."""

        def read(db: sqlite3.Connection) -> tuple[Any, list[tuple[int, str]]] | None:
            row = db.execute(
                "SELECT schema_version, version, state FROM handoff_conversations "
                "WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if row is None:
                return None
            messages = db.execute(
                "SELECT position, body FROM handoff_messages WHERE conversation_id = ? "
                "ORDER BY position",
                (conversation_id,),
            ).fetchall()
            return row, messages

        found = await self._run(read)
        if found is None:
            return None
        (schema_version, version, raw_state), rows = found
        return record_from_rows(conversation_id, schema_version, version, raw_state, rows)

    async def version(self, conversation_id: str) -> int | None:
        """The stored version, or ``None``."""

        def read(db: sqlite3.Connection) -> int | None:
            row = db.execute(
                "SELECT version FROM handoff_conversations WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            return None if row is None else int(row[0])

        return await self._run(read)

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
        bodies = [(conversation_id, start + i, encode(m)) for i, m in enumerate(messages)]
        state_json = encode(dict(state))

        def write(db: sqlite3.Connection) -> int:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT version FROM handoff_conversations WHERE conversation_id = ?",
                    (conversation_id,),
                ).fetchone()
                found = 0 if row is None else int(row[0])
                (count,) = db.execute(
                    "SELECT COUNT(*) FROM handoff_messages WHERE conversation_id = ?",
                    (conversation_id,),
                ).fetchone()
                if found != expected_version or count != start:
                    raise ConversationConflictError(conversation_id, expected_version, found)
                db.executemany("INSERT INTO handoff_messages VALUES (?, ?, ?)", bodies)
                db.execute(
                    "INSERT INTO handoff_conversations (conversation_id, schema_version, version, "
                    "state) VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id) DO UPDATE SET "
                    "schema_version = excluded.schema_version, version = excluded.version, "
                    "state = excluded.state, "
                    "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
                    (conversation_id, RECORD_SCHEMA_VERSION, found + 1, state_json),
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return found + 1

        return await self._run(write)

    @asynccontextmanager
    async def lock(
        self, conversation_id: str, *, wait: bool = False, timeout: float = 30.0
    ) -> AsyncGenerator[None, None]:
        """Hold the conversation across processes with an OS file lock."""
        try:
            self._lock_dir.mkdir(exist_ok=True)  # in the database's own directory, which must exist
            digest = hashlib.sha256(conversation_id.encode()).hexdigest()[:32]
            handle = (self._lock_dir / f"{digest}.lock").open("a+b")
        except OSError as error:
            raise StoreUnavailableError(
                "SQLite", f"lock directory {self._lock_dir}: {error}"
            ) from error

        async def try_acquire() -> bool:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        try:
            await acquire(try_acquire, conversation_id, wait=wait, timeout=timeout)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        finally:
            handle.close()

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""

        def remove(db: sqlite3.Connection) -> None:
            with contextlib.closing(db.cursor()) as cursor:
                cursor.execute("BEGIN IMMEDIATE")
                cursor.execute(
                    "DELETE FROM handoff_messages WHERE conversation_id = ?", (conversation_id,)
                )
                cursor.execute(
                    "DELETE FROM handoff_conversations WHERE conversation_id = ?",
                    (conversation_id,),
                )
                cursor.execute("COMMIT")

        await self._run(remove)

    async def close(self) -> None:
        """Close the database connection."""
        with self._guard:
            if self._db is not None:
                self._db.close()
                self._db = None
