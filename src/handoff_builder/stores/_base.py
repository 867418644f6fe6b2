"""The store contract shared by every backend, and the JSON encoding of records."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

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


@runtime_checkable
class ConversationStore(Protocol):
    """Where hosted conversations live. One contract, several backends.

    * :meth:`load` returns the record, or ``None`` for a new conversation.
    * :meth:`append` adds messages to the log (the log is append-only: a write never rewrites
      earlier messages) and replaces the state row, atomically, only if the stored version is
      still ``expected_version``; it returns the new version.
    * :meth:`lock` holds the conversation for one turn, across processes for shared backends.
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
    ) -> int:
        """Append ``messages`` at position ``start`` and replace the state; the new version."""
        ...

    def lock(
        self, conversation_id: str, *, wait: bool = False, timeout: float = 30.0
    ) -> AbstractAsyncContextManager[None]:
        """Hold the conversation for one turn; ``ConversationBusyError`` when it is held."""
        ...

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode(value: Any) -> str:
    """Compact JSON (never pickle), non-ASCII kept: one shared encoder, not one per call."""
    return _ENCODER.encode(value)


def decode_state(
    conversation_id: str, schema_version: int, raw: str | bytes | None
) -> dict[str, Any]:
    """The state row, checked: refuses newer schemas and reports corrupt rows clearly."""
    if schema_version > RECORD_SCHEMA_VERSION:
        raise SchemaVersionError(
            f"Conversation {conversation_id!r}", schema_version, RECORD_SCHEMA_VERSION
        )
    state = _decode(conversation_id, "state", raw)
    if not isinstance(state, dict):
        raise CorruptConversationError(conversation_id, "the state row is not a JSON object")
    return state  # pyright: ignore[reportUnknownVariableType]


def decode_message(conversation_id: str, position: int, raw: str | bytes | None) -> dict[str, Any]:
    """One message of the log, checked."""
    message = _decode(conversation_id, f"message #{position}", raw)
    if not isinstance(message, dict) or "role" not in message:
        raise CorruptConversationError(conversation_id, f"message #{position} is not a message")
    return message  # pyright: ignore[reportUnknownVariableType]


def record_from_rows(
    conversation_id: str,
    schema_version: int,
    version: int,
    raw_state: str | bytes | None,
    rows: Sequence[tuple[int, str | bytes | None]],
) -> ConversationRecord:
    """A checked record from a backend's state row and its ``(position, body)`` message rows."""
    state = decode_state(conversation_id, int(schema_version), raw_state)
    check_positions(conversation_id, [int(position) for position, _ in rows])
    return ConversationRecord(
        conversation_id, decode_messages(conversation_id, rows), state, int(version)
    )


def decode_messages(
    conversation_id: str, rows: Sequence[tuple[int, str | bytes | None]]
) -> list[dict[str, Any]]:
    """The message log, checked.

    The bodies are parsed with one JSON call, each wrapped in its own array (``[[b0],[b1],...]``),
    which is over twice as fast as a call per row on a long log. The result must be one
    single-element array per row, holding an object with a ``role``: a damaged row either breaks
    the parse or shifts a boundary and changes that shape. Then every row is parsed alone, so
    that the error names the bad one.
    """
    bodies = [body for _, body in rows]
    if all(isinstance(body, str) for body in bodies):
        try:
            parsed: Any = json.loads("[[" + "],[".join(cast(list[str], bodies)) + "]]")
        except (ValueError, RecursionError):
            parsed = None
        if (
            rows
            and isinstance(parsed, list)
            and len(cast(list[Any], parsed)) == len(rows)
            and all(
                isinstance(one, list)
                and len(cast(list[Any], one)) == 1
                and isinstance(one[0], dict)
                and "role" in one[0]
                for one in cast(list[Any], parsed)
            )
        ):
            return [one[0] for one in cast(list[list[dict[str, Any]]], parsed)]
    return [decode_message(conversation_id, int(p), body) for p, body in rows]


def check_positions(conversation_id: str, positions: Sequence[int]) -> None:
    """The log must be 0, 1, 2, ... with no gap (a gap means a lost write)."""
    for expected, position in enumerate(positions):
        if position != expected:
            raise CorruptConversationError(
                conversation_id, f"the message log has a gap at #{expected} (found #{position})"
            )


def _decode(conversation_id: str, what: str, raw: str | bytes | None) -> Any:
    if raw is None:
        raise CorruptConversationError(conversation_id, f"{what} is empty")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptConversationError(
            conversation_id, f"{what} is not valid JSON ({error})"
        ) from error
