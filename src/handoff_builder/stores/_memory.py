"""An in-process store: for tests and single-process prototypes."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from typing_extensions import override

from handoff_builder.exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    LeaseLostError,
)

from ._base import ChainedMessage, ClosingStore, ConversationRecord, Lease, follow_chain


@dataclass
class _Row:
    version: int = 0
    state: dict[str, Any] | None = None
    owner: str | None = None
    token: int = 0
    expires: float = 0.0


class InMemoryConversationStore(ClosingStore):
    """Keeps conversations in this process's memory; leases are per process.

    It is a :class:`~handoff_builder.stores.MessageLog` too, for the workers of one process.
    """

    def __init__(self) -> None:
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._rows: dict[str, _Row] = {}
        self._chains: dict[str, dict[str, ChainedMessage]] = {}

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        """The stored conversation (copies), or ``None``."""
        row = self._rows.get(conversation_id)
        if row is None or row.version == 0:
            return None
        messages = list(self._messages.get(conversation_id, []))
        return ConversationRecord(
            conversation_id, messages, copy.deepcopy(row.state or {}), row.version
        )

    async def version(self, conversation_id: str) -> int | None:
        """The stored version, or ``None``."""
        row = self._rows.get(conversation_id)
        return None if row is None or row.version == 0 else row.version

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
        """Append and replace the state if the version still matches and the lease allows it."""
        row = self._rows.get(conversation_id) or _Row()
        if lease is not None and (row.owner != lease.owner or row.token != lease.token):
            raise LeaseLostError(conversation_id, lease.owner)
        if lease is None and row.owner is not None and row.expires > time.monotonic():
            raise ConversationBusyError(conversation_id)
        log = self._messages.get(conversation_id, [])
        if row.version != expected_version or len(log) != start:
            raise ConversationConflictError(conversation_id, expected_version, row.version)
        self._messages[conversation_id] = [*log, *(dict(message) for message in messages)]
        row.version += 1
        row.state = copy.deepcopy(dict(state))
        if release and lease is not None:
            row.owner, row.expires = None, 0.0
        self._rows[conversation_id] = row
        return row.version

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
        """Take the lease and write, if the lease is free and the version still matches."""
        row = self._rows.get(conversation_id)
        if row is not None and row.owner is not None and row.expires > time.monotonic():
            return None
        found = 0 if row is None else row.version
        log = self._messages.get(conversation_id, [])
        if row is None or found != expected_version or found == 0 or len(log) != start:
            raise ConversationConflictError(conversation_id, expected_version, found)
        row.owner, row.token, row.expires = owner, row.token + 1, time.monotonic() + ttl
        lease = Lease(conversation_id, owner, row.token, row.version)
        version = await self.append(
            conversation_id, start=start, messages=messages, state=state,
            expected_version=expected_version, lease=lease, release=release,
        )  # fmt: skip
        return Lease(conversation_id, owner, row.token, version)

    async def acquire(self, conversation_id: str, *, owner: str, ttl: float) -> Lease | None:
        """Take the lease if it is free or expired."""
        now = time.monotonic()
        row = self._rows.setdefault(conversation_id, _Row())
        if row.owner is not None and row.expires > now:
            return None
        row.owner, row.token, row.expires = owner, row.token + 1, now + ttl
        return Lease(conversation_id, owner, row.token, row.version)

    async def renew(self, lease: Lease, *, ttl: float) -> bool:
        """Extend the lease if it is still held."""
        row = self._rows.get(lease.conversation_id)
        if row is None or row.owner != lease.owner or row.token != lease.token:
            return False
        row.expires = time.monotonic() + ttl
        return True

    async def release(self, conversation_id: str, owner: str) -> None:
        """Give the lease back; a conversation nothing was written to is forgotten."""
        row = self._rows.get(conversation_id)
        if row is None or row.owner != owner:
            return
        if row.version == 0:
            del self._rows[conversation_id]
        else:
            row.owner, row.expires = None, 0.0

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""
        self._messages.pop(conversation_id, None)
        self._rows.pop(conversation_id, None)
        self._chains.pop(conversation_id, None)

    async def put_chain(self, conversation_id: str, entries: Sequence[ChainedMessage]) -> None:
        """Keep ``entries`` (copies; one kept already is left as it is)."""
        chain = self._chains.setdefault(conversation_id, {})
        for entry in entries:
            if entry.digest not in chain:
                chain[entry.digest] = ChainedMessage(
                    entry.digest, entry.previous, entry.position, copy.deepcopy(dict(entry.body))
                )

    async def read_chain(
        self, conversation_id: str, head: str, length: int, *, start: int = 0
    ) -> list[ChainedMessage]:
        """Messages ``start`` on of the history ending at ``head`` (copies), in order."""
        chain = self._chains.get(conversation_id, {})
        found = follow_chain(conversation_id, chain, head, length, start)
        return [
            ChainedMessage(e.digest, e.previous, e.position, copy.deepcopy(dict(e.body)))
            for e in found
        ]

    async def conversation_ids(self, *, after: str = "", limit: int = 100) -> list[str]:
        """Ids of the stored conversations after ``after``, in order, at most ``limit``."""
        found = sorted(cid for cid, row in self._rows.items() if row.version > 0 and cid > after)
        return found[: max(limit, 0)]

    @override
    async def close(self) -> None:
        """Nothing to release."""
