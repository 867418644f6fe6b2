"""The store contract shared by every backend, and the JSON encoding of records."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from typing_extensions import Self

from handoff_builder.exceptions import CorruptConversationError, SchemaVersionError

RECORD_SCHEMA_VERSION = 1
"""Schema version of the records our stores write (the state row and the message log)."""


@dataclass(frozen=True)
class ConversationRecord:
    """One conversation as stored: its message log and its small state row.

    ``messages`` are ``agent_framework.Message.to_dict()`` dictionaries in order; ``state`` is the
    host's snapshot; ``version`` counts the writes (optimistic concurrency).
    """

    conversation_id: str
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    version: int


@dataclass(frozen=True)
class Lease:
    """A worker's hold on one conversation's turn, as the store granted it.

    ``owner`` is unique to this acquisition; ``token`` is the conversation's fencing token, which
    grows by one with every acquisition, so a worker whose lease was taken over cannot write;
    ``version`` is the conversation's stored version when the lease was taken (0: no record yet).
    """

    conversation_id: str
    owner: str
    token: int
    version: int


@runtime_checkable
class ConversationStore(Protocol):
    """Where hosted conversations live. One contract, several backends.

    * :meth:`load` returns the record, or ``None`` for a conversation nothing was written to.
    * :meth:`append` adds messages to the log (the log is append-only: a write never rewrites
      earlier messages) and replaces the state row, atomically, only if the stored version is
      still ``expected_version`` and the write is fenced by the current lease; it returns the
      new version.
    * :meth:`acquire`, :meth:`renew` and :meth:`release` manage the lease on a conversation's
      turn: owner, token and expiry kept in the conversation's row, each taken or changed with
      one statement (no connection or file stays held in between). :func:`hold` holds one for a
      block of code.
    """

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        """The stored conversation, or ``None`` if there is none."""
        ...

    async def version(self, conversation_id: str) -> int | None:
        """The stored version counter alone (cheap), or ``None`` for no conversation."""
        ...

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
        """Append ``messages`` at position ``start`` and replace the state; the new version.

        With ``lease``, the write happens only while that lease is the conversation's current
        one (:class:`~handoff_builder.LeaseLostError` otherwise), and ``release`` gives it back
        in the same statement (a turn's last write); without it, only while no unexpired lease
        is held (:class:`~handoff_builder.ConversationBusyError` otherwise).
        """
        ...

    async def acquire(self, conversation_id: str, *, owner: str, ttl: float) -> Lease | None:
        """Take the conversation's lease for ``ttl`` seconds, if it is free or expired.

        ``None`` when another owner holds an unexpired lease.
        """
        ...

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
        """Take the lease and write, in one statement: the first write of a turn.

        Only for a stored conversation (``expected_version`` >= 1) whose lease is free or expired
        and whose version is still ``expected_version``; ``release`` gives the lease back in the
        same statement (a turn with one write). Returns the lease (``version`` is the new one);
        ``None`` when another owner holds an unexpired lease (nothing was written).

        Raises:
            ConversationConflictError: the version moved (nothing was written).
        """
        ...

    async def renew(self, lease: Lease, *, ttl: float) -> bool:
        """Extend the lease to ``ttl`` seconds from now; ``False`` if it is no longer held."""
        ...

    async def release(self, conversation_id: str, owner: str) -> None:
        """Give the lease back (a no-op when ``owner`` does not hold it)."""
        ...

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""
        ...

    async def conversation_ids(self, *, after: str = "", limit: int = 100) -> list[str]:
        """Ids of the stored conversations after ``after``, in order, at most ``limit``."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class ClosingStore:
    """``async with store:`` closes it at the end of the block (a store's connections, files)."""

    async def close(self) -> None:
        """Release connections (the store overrides it)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


MAX_CONVERSATION_ID_LENGTH = 256
"""The longest conversation id, in characters (see :func:`check_conversation_id`)."""


def check_conversation_id(conversation_id: object) -> str:
    r"""``conversation_id`` if it is a valid id; a :class:`ValueError` naming the problem if not.

    An id is a string of 1 to :data:`MAX_CONVERSATION_ID_LENGTH` characters, not only
    whitespace, with no control character (``\x00``-``\x1f``, ``\x7f``-``\x9f``: NUL, tab,
    newline, ...) and no lone surrogate. Every store keeps it as given, as a key of its own.
    """
    if not isinstance(conversation_id, str):
        raise ValueError(f"conversation_id must be a string, got {type(conversation_id).__name__}.")
    if not conversation_id.strip():
        raise ValueError(f"conversation_id must not be empty or blank, got {conversation_id!r}.")
    if len(conversation_id) > MAX_CONVERSATION_ID_LENGTH:
        raise ValueError(
            f"conversation_id is {len(conversation_id)} characters long; the limit is "
            f"{MAX_CONVERSATION_ID_LENGTH}."
        )
    bad = _BAD_ID_CHARACTER.search(conversation_id)
    if bad is not None:
        raise ValueError(
            f"conversation_id {conversation_id!r} has the character {bad.group()!r} at "
            f"position {bad.start()}: control characters and lone surrogates are not allowed."
        )
    return conversation_id


_BAD_ID_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
# The decoder's C scanner: parses one value at an offset and says where it ended.
_SCAN: Callable[[str, int], tuple[Any, int]] = cast(Any, json.JSONDecoder()).scan_once


def encode(value: Any) -> str:
    r"""Compact JSON (never pickle), non-ASCII kept: one shared encoder, not one per call.

    Text that is not valid Unicode (a lone surrogate from a model or a user) cannot be stored as
    UTF-8: such a value is written with ``\u`` escapes instead, which read back to the same text.
    """
    text = _ENCODER.encode(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _ASCII_ENCODER.encode(value)
    return text


def decode_state(
    conversation_id: str, schema_version: int, raw: str | bytes | None
) -> dict[str, Any]:
    """The state row, checked: refuses newer schemas and reports corrupt rows clearly."""
    if schema_version > RECORD_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"Conversation {conversation_id!r}", schema_version, RECORD_SCHEMA_VERSION
        )
    state = _decode(conversation_id, "the state row", raw)
    if not isinstance(state, dict):
        raise CorruptConversationError(conversation_id, "the state row is not a JSON object")
    return state  # pyright: ignore[reportUnknownVariableType]


def record_from_rows(
    conversation_id: str,
    schema_version: int,
    version: int,
    raw_state: str | bytes | None,
    rows: Sequence[tuple[int, str | bytes | None]],
) -> ConversationRecord:
    """A checked record from a backend's state row and its ``(position, body)`` message rows."""
    schema, counter = (
        _integer(conversation_id, "schema_version", schema_version),
        _integer(conversation_id, "version", version),
    )
    state = decode_state(conversation_id, schema, raw_state)
    positions = [_integer(conversation_id, "a message position", p) for p, _ in rows]
    check_positions(conversation_id, positions)
    return ConversationRecord(
        conversation_id, decode_messages(conversation_id, rows), state, counter
    )


def _integer(conversation_id: str, what: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise CorruptConversationError(conversation_id, f"{what} is {value!r}, not an integer")


def decode_messages(
    conversation_id: str, rows: Sequence[tuple[Any, str | bytes | None]]
) -> list[dict[str, Any]]:
    """The message log, checked: each row must be exactly one JSON object with a ``role``.

    Every row is parsed on its own (the C scanner, called directly: as fast as one parse of the
    whole log joined together, and no row's content can move into a neighbour), and must end
    where the row ends.
    """
    messages: list[dict[str, Any]] = []
    for position, (_, body) in enumerate(rows):  # positions were checked: 0, 1, 2, ...
        messages.append(_decode_message(conversation_id, position, body))
    return messages


def _decode_message(conversation_id: str, position: int, body: str | bytes | None) -> Any:
    what = f"message #{position}"
    if isinstance(body, str):
        text = body.strip()
        message: Any = None
        end = -1
        with contextlib.suppress(StopIteration, ValueError, RecursionError):
            message, end = _SCAN(text, 0)
        if end != len(text):  # not JSON, or more than one value: say why, precisely
            message = _decode(conversation_id, what, body, position)
    else:
        message = _decode(conversation_id, what, body, position)
    if not isinstance(message, dict) or "role" not in message:
        raise CorruptConversationError(conversation_id, f"{what} is not a message", position)
    return message  # pyright: ignore[reportUnknownVariableType]


def check_positions(conversation_id: str, positions: Sequence[int]) -> None:
    """The log must be 0, 1, 2, ... with no gap (a gap means a lost write)."""
    for expected, position in enumerate(positions):
        if position != expected:
            raise CorruptConversationError(
                conversation_id,
                f"the message log has a gap at #{expected} (found #{position})",
                expected,
            )


def _decode(
    conversation_id: str, what: str, raw: str | bytes | None, position: int | None = None
) -> Any:
    if raw is None:
        raise CorruptConversationError(conversation_id, f"{what} is empty", position)
    try:
        return json.loads(raw)
    except UnicodeDecodeError as error:
        raise CorruptConversationError(
            conversation_id, f"{what} is not valid UTF-8 ({error})", position
        ) from error
    except (ValueError, RecursionError) as error:
        raise CorruptConversationError(
            conversation_id, f"{what} is not valid JSON ({error})", position
        ) from error


@dataclass(frozen=True)
class ChainedMessage:
    """One message of a conversation's chained log: a history read by reference.

    ``digest`` names the history that ends with this message (its ``position`` is its index in
    it), ``previous`` the history before it (``""``: none). Whoever writes the log computes the
    digests (the Temporal workflow: ``temporal.chain_digest``); a store keeps each entry once
    and reads a history back by following ``previous`` from its last digest. Entries of
    histories nobody reads any more (a turn that was run again) are harmless: nothing points
    at them.
    """

    digest: str
    previous: str
    position: int
    body: Mapping[str, Any]


@runtime_checkable
class MessageLog(Protocol):
    """Where a conversation's messages live when its agent calls carry a reference to them.

    The workers of a Temporal task queue share one (``conversation_worker(..., messages=...)``):
    each agent call stores the messages the log does not have yet, then reads the history it
    runs on by its last digest. Both are idempotent: a retried call writes the same entries.
    :class:`InMemoryConversationStore` (one process) and
    :class:`PostgresConversationStore` (several workers) are message logs.
    """

    async def put_chain(self, conversation_id: str, entries: Sequence[ChainedMessage]) -> None:
        """Store ``entries`` (each once: one stored already is left as it is)."""
        ...

    async def read_chain(
        self, conversation_id: str, head: str, length: int, *, start: int = 0
    ) -> list[ChainedMessage]:
        """Messages ``start`` to ``length - 1`` of the history whose last digest is ``head``.

        In order, as they were stored: the first one's ``previous`` names the history before
        them (the ``head`` to read the messages before ``start`` by).

        Raises:
            CorruptConversationError: the log lacks one of them (named by its position).
        """
        ...

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation, its log entries included."""
        ...


def follow_chain(
    conversation_id: str,
    entries: Mapping[str, ChainedMessage],
    head: str,
    length: int,
    start: int = 0,
) -> list[ChainedMessage]:
    """Messages ``start`` to ``length - 1`` of the history ending at ``head``, checked, in order.

    ``entries`` are the log's entries by digest.

    Raises:
        CorruptConversationError: an entry is missing or not where the chain says it is.
    """
    start = min(max(start, 0), length)
    found: list[ChainedMessage] = []
    digest = head
    for position in range(length - 1, start - 1, -1):
        entry = entries.get(digest)
        if entry is None or entry.position != position:
            raise CorruptConversationError(
                conversation_id,
                f"its message log has no message {position} of the history the agent call "
                f"names ({digest[:12] or 'none'}); was it deleted, or do the workers share "
                "another log?",
                position,
            )
        found.append(entry)
        digest = entry.previous
    if start == 0 and digest:
        raise CorruptConversationError(
            conversation_id, f"its history {head[:12]} has more than {length} messages"
        )
    found.reverse()
    return found
