"""The embedded default store: one SQLite file (standard library), leases that span processes."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from typing_extensions import override

from handoff_builder.exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    CorruptConversationError,
    LeaseLostError,
    StoreUnavailableError,
)

from ._base import (
    RECORD_SCHEMA_VERSION,
    ClosingStore,
    ConversationRecord,
    Lease,
    encode,
    record_from_rows,
)

T = TypeVar("T")

Synchronous = Literal["normal", "full"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS handoff_conversations (
    conversation_id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    lease_owner TEXT,
    lease_token INTEGER NOT NULL DEFAULT 0,
    lease_expires REAL
);
CREATE TABLE IF NOT EXISTS handoff_messages (
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
);
"""
# Columns added since the first release: a database written by it gets them on first use.
_LEASE_COLUMNS = {
    "lease_owner": "TEXT",
    "lease_token": "INTEGER NOT NULL DEFAULT 0",
    "lease_expires": "REAL",
}

_VERSION = "SELECT version FROM handoff_conversations WHERE conversation_id = ?"
# A write is fenced: with a lease (?6 owner, ?7 token) only while it is the current one; without
# one only while no unexpired lease is held (?8 is the time now).
_FENCE = (
    "((?6 IS NULL AND (lease_owner IS NULL OR lease_expires < ?8)) "
    "OR (lease_owner = ?6 AND lease_token = ?7))"
)
# Every write: only if the version is still the expected one and the log ends at `start`
# (MAX(position) is one primary-key lookup; the log is 0, 1, 2, ... so this is its length). The
# first write of a conversation nobody holds inserts its row.
_WRITE = (
    "INSERT INTO handoff_conversations (conversation_id, schema_version, version, state) "  # noqa: S608 - constants only
    "SELECT ?1, ?2, 1, ?3 WHERE ?4 = 0 "
    "ON CONFLICT (conversation_id) DO UPDATE SET schema_version = ?2, version = version + 1, "
    "state = ?3, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
    f"WHERE version = ?5 AND {_FENCE} AND ?4 = "
    "(SELECT COALESCE(MAX(position) + 1, 0) FROM handoff_messages WHERE conversation_id = ?1)"
)
_UPDATE = (
    "UPDATE handoff_conversations SET schema_version = ?2, version = version + 1, state = ?3, "  # noqa: S608 - constants only
    "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), "
    # ?9: the turn's last write gives the lease back
    "lease_owner = CASE WHEN ?9 THEN NULL ELSE lease_owner END, "
    "lease_expires = CASE WHEN ?9 THEN NULL ELSE lease_expires END "
    f"WHERE conversation_id = ?1 AND version = ?5 AND {_FENCE} AND ?4 = "
    "(SELECT COALESCE(MAX(position) + 1, 0) FROM handoff_messages WHERE conversation_id = ?1)"
)
# The first write of a turn takes the lease with it (?6 owner, ?8 now, ?10 ttl; ?9 releases it
# again: a turn with one write), if the lease is free or expired and the version still matches.
_ACQUIRE_AND_UPDATE = (
    "UPDATE handoff_conversations SET schema_version = ?2, version = version + 1, state = ?3, "
    "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), lease_token = lease_token + 1, "
    "lease_owner = CASE WHEN ?9 THEN NULL ELSE ?6 END, "
    "lease_expires = CASE WHEN ?9 THEN NULL ELSE ?8 + ?10 END "
    "WHERE conversation_id = ?1 AND version = ?5 AND ?5 > 0 AND ?7 IS NULL "
    "AND (lease_owner IS NULL OR lease_expires < ?8) AND ?4 = "
    "(SELECT COALESCE(MAX(position) + 1, 0) FROM handoff_messages WHERE conversation_id = ?1) "
    "RETURNING lease_token"
)
_INSERT = "INSERT INTO handoff_messages VALUES (?, ?, ?)"
_WHY_NOT = (
    "SELECT version, lease_owner, lease_token, lease_expires FROM handoff_conversations "
    "WHERE conversation_id = ?"
)
# Take the lease (creating the conversation's row) if nobody holds an unexpired one.
_ACQUIRE = (
    "INSERT INTO handoff_conversations (conversation_id, schema_version, version, state, "
    "lease_owner, lease_token, lease_expires) VALUES (?1, ?2, 0, '{}', ?3, 1, ?4 + ?5) "
    "ON CONFLICT (conversation_id) DO UPDATE SET lease_owner = ?3, "
    "lease_token = lease_token + 1, lease_expires = ?4 + ?5 "
    "WHERE lease_owner IS NULL OR lease_expires < ?4 "
    "RETURNING lease_token, version"
)
_RENEW = (
    "UPDATE handoff_conversations SET lease_expires = ?4 + ?5 "
    "WHERE conversation_id = ?1 AND lease_owner = ?2 AND lease_token = ?3"
)
# Releasing a conversation nothing was written to forgets it: asking leaves nothing behind.
_FORGET_UNWRITTEN = (
    "DELETE FROM handoff_conversations WHERE conversation_id = ? AND lease_owner = ? "
    "AND version = 0"
)
_RELEASE = (
    "UPDATE handoff_conversations SET lease_owner = NULL, lease_expires = NULL "
    "WHERE conversation_id = ? AND lease_owner = ?"
)

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


class SqliteConversationStore(ClosingStore):
    """Conversations in one SQLite file; several processes on one machine may share it.

    Writes are transactions (a turn's new messages and its state row together, or nothing).
    A conversation's turn is held by a lease in its row (owner, fencing token, expiry), taken and
    released with one statement each: no file or connection stays locked, so a crashed worker
    holds a conversation only until its lease expires.

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
        """Open (or create) the database at ``path`` (its directory must exist)."""
        mode = str(synchronous).lower()
        if mode not in ("normal", "full"):
            raise ValueError(f"synchronous must be 'normal' or 'full', got {synchronous!r}.")
        self.path = Path(path)
        self.synchronous: Synchronous = mode
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
                    journal = _wal_mode(db)
                    db.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
                    db.executescript(_SCHEMA)
                    _add_lease_columns(db)
                    inline = str(journal).lower() == "wal" and self.synchronous == "normal"
                    if inline:
                        # Commits run on the event loop: checkpoints (which flush to the disk)
                        # must not, so this store runs them itself, in a worker thread.
                        db.execute("PRAGMA wal_autocheckpoint=0")
                        db.execute("PRAGMA busy_timeout=0")  # no lock waits on the event loop
                except BaseException:
                    db.close()
                    raise
            except sqlite3.OperationalError as error:
                raise StoreUnavailableError("SQLite", f"{self.path}: {error}") from error
            self._db, self._inline = db, inline
        return self._db

    async def _run(
        self, conversation_id: str, work: Callable[[sqlite3.Connection], T], *, inline: bool = False
    ) -> T:
        """Run ``work`` with the connection, in a worker thread (which waits for locks up to 5 s).

        With ``inline``, first try it on the event loop without waiting for a lock (a lock held
        elsewhere sends it to the thread); a cold page read from the disk still blocks briefly.
        """
        if inline and self._inline:
            done = self._run_inline(conversation_id, work)
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
        except sqlite3.Error as error:
            raise self._failure(conversation_id, error) from error

    def _failure(self, conversation_id: str, error: sqlite3.Error) -> Exception:
        """The SDK's error for a failed statement: unavailable, or a damaged database file."""
        if isinstance(error, sqlite3.OperationalError):
            return StoreUnavailableError("SQLite", f"{self.path}: {error}")
        if isinstance(error, sqlite3.DatabaseError) and not isinstance(
            error, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError
        ):
            return CorruptConversationError(
                conversation_id, f"the SQLite database {self.path} is damaged ({error})"
            )
        return StoreUnavailableError("SQLite", f"{self.path}: {error}")

    def _run_inline(
        self, conversation_id: str, work: Callable[[sqlite3.Connection], T]
    ) -> T | _Missed:
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
            raise self._failure(conversation_id, error) from error
        except sqlite3.Error as error:
            raise self._failure(conversation_id, error) from error
        finally:
            self._guard.release()

    # -- the contract -----------------------------------------------------------------------------

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        """The stored conversation, checked, or ``None``."""

        def read(db: sqlite3.Connection) -> tuple[Any, list[tuple[int, bytes]]] | None:
            db.text_factory = bytes  # decoded and checked row by row: invalid UTF-8 is named
            try:
                row = db.execute(
                    "SELECT schema_version, version, state FROM handoff_conversations "
                    "WHERE conversation_id = ? AND version > 0",
                    (conversation_id,),
                ).fetchone()
                if row is None:
                    return None
                messages = db.execute(
                    "SELECT position, body FROM handoff_messages WHERE conversation_id = ? "
                    "ORDER BY position",
                    (conversation_id,),
                ).fetchall()
            finally:
                db.text_factory = str
            return row, [(position, body) for position, body in messages]

        found = await self._run(conversation_id, read)
        if found is None:
            return None
        (schema_version, version, raw_state), rows = found
        texts = [(position, _text(body)) for position, body in rows]
        return record_from_rows(conversation_id, schema_version, version, raw_state, texts)

    async def version(self, conversation_id: str) -> int | None:
        """The stored version, or ``None``."""

        def read(db: sqlite3.Connection) -> int | None:
            row = db.execute(_VERSION, (conversation_id,)).fetchone()
            return None if row is None or not row[0] else int(row[0])

        return await self._run(conversation_id, read, inline=True)

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
        """Append and replace the state in one transaction, if the version and lease allow it."""
        bodies = [(conversation_id, start + i, encode(m)) for i, m in enumerate(messages)]
        state_json = encode(dict(state))
        checkpoint = self._inline and self._writes >= _CHECKPOINT_EVERY
        owner, token = (lease.owner, lease.token) if lease is not None else (None, None)
        params = (
            conversation_id, RECORD_SCHEMA_VERSION, state_json, start, expected_version,
            owner, token, time.time(), release and lease is not None,
        )  # fmt: skip
        statement, params = (
            (_WRITE, params[:8]) if expected_version == 0 and lease is None else (_UPDATE, params)
        )

        def fenced(db: sqlite3.Connection) -> None:
            if db.execute(statement, params).rowcount != 1:
                found = db.execute(_WHY_NOT, (conversation_id,)).fetchone()
                raise _refusal(conversation_id, expected_version, lease, found, params[7])
            db.executemany(_INSERT, bodies)

        def write(db: sqlite3.Connection) -> tuple[int, bool]:
            """The new version, and whether a checkpoint ran first and emptied the WAL."""
            # In a worker thread (a checkpoint is never inline): it flushes the database file.
            checkpointed = checkpoint and _checkpoint_wal(db)
            _transaction(db, fenced)
            return expected_version + 1, checkpointed

        inline = not checkpoint and len(bodies) <= _INLINE_MESSAGES
        version, checkpointed = await self._run(conversation_id, write, inline=inline)
        if not checkpoint:  # a failed write raised above and counts nothing
            self._writes += 1
        elif checkpointed:
            self._writes = 0
        else:  # readers in other processes held part of the WAL back: try again soon
            self._writes = _CHECKPOINT_EVERY - _CHECKPOINT_RETRY
        return version

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
        """Take the lease and write in one transaction (``None``: another owner holds it)."""
        bodies = [(conversation_id, start + i, encode(m)) for i, m in enumerate(messages)]
        params = (
            conversation_id, RECORD_SCHEMA_VERSION, encode(dict(state)), start, expected_version,
            owner, None, time.time(), release, ttl,
        )  # fmt: skip

        def take(db: sqlite3.Connection) -> Lease | None:
            taken = db.execute(_ACQUIRE_AND_UPDATE, params).fetchall()
            if not taken:  # nothing was written
                found = db.execute(_WHY_NOT, (conversation_id,)).fetchone()
                version, holder, _, expires = found or (0, None, 0, None)
                if holder is not None and expires is not None and expires >= params[7]:
                    return None
                raise ConversationConflictError(conversation_id, expected_version, version)
            db.executemany(_INSERT, bodies)
            return Lease(conversation_id, owner, int(taken[0][0]), expected_version + 1)

        def write(db: sqlite3.Connection) -> Lease | None:
            return _transaction(db, take)

        inline = self._inline and len(bodies) <= _INLINE_MESSAGES
        lease = await self._run(conversation_id, write, inline=inline)
        self._writes += 1
        return lease

    async def acquire(self, conversation_id: str, *, owner: str, ttl: float) -> Lease | None:
        """Take the lease with one statement, if it is free or expired."""
        params = (conversation_id, RECORD_SCHEMA_VERSION, owner, time.time(), ttl)

        def take(db: sqlite3.Connection) -> Lease | None:
            rows = db.execute(_ACQUIRE, params).fetchall()
            if not rows:
                return None
            (token, version), *_ = rows
            return Lease(conversation_id, owner, int(token), int(version))

        return await self._run(conversation_id, take, inline=True)

    async def renew(self, lease: Lease, *, ttl: float) -> bool:
        """Extend the lease if it is still held."""
        params = (lease.conversation_id, lease.owner, lease.token, time.time(), ttl)

        def extend(db: sqlite3.Connection) -> bool:
            return db.execute(_RENEW, params).rowcount == 1

        return await self._run(lease.conversation_id, extend, inline=True)

    async def release(self, conversation_id: str, owner: str) -> None:
        """Give the lease back; a conversation nothing was written to is forgotten."""

        def give_back(db: sqlite3.Connection) -> None:
            if not db.execute(_FORGET_UNWRITTEN, (conversation_id, owner)).rowcount:
                db.execute(_RELEASE, (conversation_id, owner))

        await self._run(conversation_id, give_back, inline=True)

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""

        def forget(db: sqlite3.Connection) -> None:
            for table in ("handoff_messages", "handoff_conversations"):
                db.execute(f"DELETE FROM {table} WHERE conversation_id = ?", (conversation_id,))  # noqa: S608 - our table names

        await self._run(conversation_id, lambda db: _transaction(db, forget))

    async def conversation_ids(self, *, after: str = "", limit: int = 100) -> list[str]:
        """Ids of the stored conversations after ``after``, in order, at most ``limit``."""

        def read(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(_IDS, (after, max(limit, 0))).fetchall()
            return [str(row[0]) for row in rows]

        return await self._run(after, read)

    @override
    async def close(self) -> None:
        """Close the database connection (in a worker thread: closing may checkpoint the WAL)."""

        def close() -> None:
            with self._guard:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        await asyncio.to_thread(close)


def _wal_mode(db: sqlite3.Connection) -> str:
    """Switch the file to WAL mode: the journal mode it is in after that.

    The switch needs the write lock while it already holds a read lock, and SQLite then answers
    "busy" at once instead of waiting (its deadlock rule): several processes opening a new file
    together must ask again. This runs in a worker thread, so it may sleep.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            (journal,) = db.execute("PRAGMA journal_mode=WAL").fetchone()
            return str(journal)
        except sqlite3.OperationalError as error:
            if not _is_busy(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _add_lease_columns(db: sqlite3.Connection) -> None:
    """Give a database from the first release the lease columns (a no-op once they exist).

    Checked and altered in one write transaction: processes opening the file together add each
    column once.
    """

    def add(db: sqlite3.Connection) -> None:
        present = {row[1] for row in db.execute("PRAGMA table_info(handoff_conversations)")}
        for name, declaration in _LEASE_COLUMNS.items():
            if name not in present:
                db.execute(f"ALTER TABLE handoff_conversations ADD COLUMN {name} {declaration}")

    _transaction(db, add)


_IDS = (
    "SELECT conversation_id FROM handoff_conversations WHERE version > 0 AND conversation_id > ? "
    "ORDER BY conversation_id LIMIT ?"
)


def _transaction(db: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """``work`` in one write transaction (``BEGIN IMMEDIATE``): committed, or rolled back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        done = work(db)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return done


def _text(body: bytes | str | None) -> str | bytes | None:
    """A row's body as text; invalid UTF-8 stays bytes, for the decoder to name the row."""
    if isinstance(body, bytes):
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            return body
    return body


def _refusal(
    conversation_id: str,
    expected_version: int,
    lease: Lease | None,
    found: tuple[Any, ...] | None,
    now: float,
) -> Exception:
    """Why a fenced write changed nothing: the lease, another holder, or the version moved."""
    version, owner, token, expires = found if found is not None else (0, None, 0, None)
    if lease is not None and (owner != lease.owner or token != lease.token):
        return LeaseLostError(conversation_id, lease.owner)
    if lease is None and owner is not None and expires is not None and expires >= now:
        return ConversationBusyError(conversation_id)
    return ConversationConflictError(conversation_id, expected_version, int(version))
