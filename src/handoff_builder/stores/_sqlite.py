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
from typing import Any, Literal, TypeVar

from handoff_builder.exceptions import ConversationConflictError, StoreUnavailableError

from ._base import (
    RECORD_SCHEMA_VERSION,
    ConversationRecord,
    encode,
    record_from_rows,
)
from ._locks import acquire

T = TypeVar("T")

Synchronous = Literal["normal", "full"]

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

_VERSION = "SELECT version FROM handoff_conversations WHERE conversation_id = ?"
# The first write of a conversation: only if it has no state row and no message yet.
_CREATE = (
    "INSERT INTO handoff_conversations (conversation_id, schema_version, version, state) "
    "SELECT ?1, ?2, 1, ?3 WHERE ?4 = 0 AND NOT EXISTS "
    "(SELECT 1 FROM handoff_messages WHERE conversation_id = ?1) "
    "ON CONFLICT (conversation_id) DO NOTHING"
)
# Every later write: only if the version is still the expected one and the log ends at `start`
# (MAX(position) is one primary-key lookup; the log is 0, 1, 2, ... so this is its length).
_UPDATE = (
    "UPDATE handoff_conversations SET schema_version = ?2, version = version + 1, state = ?3, "
    "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
    "WHERE conversation_id = ?1 AND version = ?5 AND ?4 = "
    "(SELECT COALESCE(MAX(position) + 1, 0) FROM handoff_messages WHERE conversation_id = ?1)"
)
_INSERT = "INSERT INTO handoff_messages VALUES (?, ?, ?)"

_BUSY_TIMEOUT_MS = 5000
# A write of at most this many messages may run on the event loop (see SqliteConversationStore).
_INLINE_MESSAGES = 64
# With inline writes the WAL is checkpointed by a worker thread, every this many writes.
_CHECKPOINT_EVERY = 256
# ... and this many writes after a checkpoint that could not copy the whole WAL.
_CHECKPOINT_RETRY = 16


_SQLITE_BUSY, _SQLITE_LOCKED = 5, 6  # result codes (sqlite3.SQLITE_BUSY is 3.11+)


class _Missed:
    """The inline attempt could not run without waiting; run the work in a thread instead."""


_MISSED = _Missed()


def _checkpoint_wal(db: sqlite3.Connection) -> bool:
    """Copy the WAL into the database file (PASSIVE: never waits); whether all of it was copied."""
    try:
        busy, log_frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    except sqlite3.OperationalError:
        return False
    return busy == 0 and copied >= log_frames


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)  # Python 3.11+
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)  # extended codes: the low byte
    return "locked" in str(error)  # pragma: no cover - Python 3.10


class SqliteConversationStore:
    """Conversations in one SQLite file; several processes on one machine may share it.

    Writes are transactions (a turn's new messages and its state row together, or nothing).
    The per-conversation lock is an OS file lock next to the database, released by the
    operating system if the process dies, so a crashed worker never blocks a conversation.

    The database runs in WAL mode. ``synchronous`` picks the durability of a committed write:

    * ``"normal"`` (the default): a commit survives the process crashing at any point; on a power
      loss or an operating-system crash the last commits before it may be lost (the database
      stays consistent: a turn then resumes from an earlier state row). Commits do not wait for
      the disk, so small reads and writes run directly on the event loop when the database is
      free (tens of microseconds, cheaper than a thread hop); anything that would wait — a write
      lock held by another process, loading a conversation, checkpointing the WAL — runs in a
      worker thread.
    * ``"full"``: every commit is also flushed to the disk (``fsync``) before it returns, so it
      survives a power loss too; every statement runs in a worker thread.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: Synchronous = "normal"
    ) -> None:
        """Open (or create) the database at ``path``; its lock files go in ``<path>.locks/``."""
        mode = str(synchronous).lower()
        if mode not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', got {synchronous!r}.")
        self.path = Path(path)
        self.synchronous: Synchronous = mode
        self._lock_dir = self.path.with_name(self.path.name + ".locks")
        self._db: sqlite3.Connection | None = None
        self._guard = threading.Lock()
        self._inline = False  # set on connecting: WAL mode and synchronous=NORMAL
        self._writes = 0  # writes since this store last checkpointed the WAL

    # -- plumbing ---------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                db = sqlite3.connect(
                    self.path,
                    check_same_thread=False,
                    isolation_level=None,
                    timeout=_BUSY_TIMEOUT_MS / 1000,
                )
                try:
                    (journal,) = db.execute("PRAGMA journal_mode=WAL").fetchone()
                    db.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
                    db.executescript(_SCHEMA)
                    inline = str(journal).lower() == "wal" and self.synchronous == "normal"
                    if inline:
                        # Commits run on the event loop: checkpoints (which flush to the disk)
                        # must not, so this store runs them itself, in a worker thread.
                        db.execute("PRAGMA wal_autocheckpoint=0")
                        db.execute("PRAGMA busy_timeout=0")  # no lock waits on the event loop
                except BaseException:
                    db.close()
                    raise
            except sqlite3.Error as error:
                raise StoreUnavailableError("SQLite", f"{self.path}: {error}") from error
            self._db, self._inline = db, inline
        return self._db

    async def _run(self, work: Callable[[sqlite3.Connection], T], *, inline: bool = False) -> T:
        """Run ``work`` with the connection, in a worker thread (which waits for locks up to 5 s).

        With ``inline``, first try it on the event loop without waiting for a lock (a lock held
        elsewhere sends it to the thread); a cold page read from the disk still blocks briefly.
        """
        if inline and self._inline:
            done = self._run_inline(work)
            if not isinstance(done, _Missed):
                return done

        def in_thread() -> T:
            with self._guard:
                db = self._connect()
                if not self._inline:
                    return work(db)
                db.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
                try:
                    return work(db)
                finally:
                    db.execute("PRAGMA busy_timeout=0")

        try:
            return await asyncio.to_thread(in_thread)
        except sqlite3.OperationalError as error:
            raise StoreUnavailableError("SQLite", f"{self.path}: {error}") from error

    def _run_inline(self, work: Callable[[sqlite3.Connection], T]) -> T | _Missed:
        if not self._guard.acquire(blocking=False):  # a worker thread has the connection
            return _MISSED
        try:
            db = self._db
            if db is None:  # connecting runs in a thread
                return _MISSED
            return work(db)
        except sqlite3.OperationalError as error:
            if _is_busy(error):  # another process writes: wait for it in a thread
                return _MISSED
            raise StoreUnavailableError("SQLite", f"{self.path}: {error}") from error
        finally:
            self._guard.release()

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
            row = db.execute(_VERSION, (conversation_id,)).fetchone()
            return None if row is None else int(row[0])

        return await self._run(read, inline=True)

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
        checkpoint = self._inline and self._writes >= _CHECKPOINT_EVERY
        params = (conversation_id, RECORD_SCHEMA_VERSION, state_json, start, expected_version)

        def write(db: sqlite3.Connection) -> tuple[int, bool]:
            """The new version, and whether a checkpoint ran first and emptied the WAL."""
            # In a worker thread (a checkpoint is never inline): it flushes the database file.
            checkpointed = checkpoint and _checkpoint_wal(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                if expected_version == 0:
                    written = db.execute(_CREATE, params[:4]).rowcount
                else:
                    written = db.execute(_UPDATE, params).rowcount
                if written != 1:
                    row = db.execute(_VERSION, (conversation_id,)).fetchone()
                    found = 0 if row is None else int(row[0])
                    raise ConversationConflictError(conversation_id, expected_version, found)
                db.executemany(_INSERT, bodies)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return expected_version + 1, checkpointed

        inline = not checkpoint and len(bodies) <= _INLINE_MESSAGES
        version, checkpointed = await self._run(write, inline=inline)  # failed: counts nothing
        if not checkpoint:
            self._writes += 1
        elif checkpointed:
            self._writes = 0
        else:  # readers in other processes held part of the WAL back: try again soon
            self._writes = _CHECKPOINT_EVERY - _CHECKPOINT_RETRY
        return version

    @asynccontextmanager
    async def lock(
        self, conversation_id: str, *, wait: bool = False, timeout: float = 30.0
    ) -> AsyncGenerator[None, None]:
        """Hold the conversation across processes with an OS file lock."""
        digest = hashlib.sha256(conversation_id.encode()).hexdigest()[:32]
        lock_file = os.path.join(self._lock_dir, f"{digest}.lock")
        flags = os.O_RDWR | os.O_CREAT
        try:
            try:
                fd = os.open(lock_file, flags, 0o666)
            except FileNotFoundError:  # the directory, next to the database (which must exist)
                self._lock_dir.mkdir(exist_ok=True)
                fd = os.open(lock_file, flags, 0o666)
        except OSError as error:
            raise StoreUnavailableError(
                "SQLite", f"lock directory {self._lock_dir}: {error}"
            ) from error

        async def try_acquire() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        try:
            await acquire(try_acquire, conversation_id, wait=wait, timeout=timeout)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""

        def remove(db: sqlite3.Connection) -> None:
            with contextlib.closing(db.cursor()) as cursor:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    cursor.execute(
                        "DELETE FROM handoff_messages WHERE conversation_id = ?", (conversation_id,)
                    )
                    cursor.execute(
                        "DELETE FROM handoff_conversations WHERE conversation_id = ?",
                        (conversation_id,),
                    )
                    cursor.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        cursor.execute("ROLLBACK")
                    raise

        await self._run(remove)

    async def close(self) -> None:
        """Close the database connection (in a worker thread: closing may checkpoint the WAL)."""

        def close() -> None:
            with self._guard:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        await asyncio.to_thread(close)
