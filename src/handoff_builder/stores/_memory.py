"""An in-process store: for tests and single-process prototypes."""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from handoff_builder.exceptions import ConversationConflictError

from ._base import ConversationRecord
from ._locks import acquire


class InMemoryConversationStore:
    """Keeps conversations in this process's memory; locks are per process."""

    def __init__(self) -> None:
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._states: dict[str, tuple[int, dict[str, Any]]] = {}
        self._held: set[str] = set()

    async def load(self, conversation_id: str) -> ConversationRecord | None:
        """The stored conversation (copies), or ``None``."""
        if conversation_id not in self._states:
            return None
        version, state = self._states[conversation_id]
        messages = list(self._messages.get(conversation_id, []))
        return ConversationRecord(conversation_id, messages, copy.deepcopy(state), version)

    async def version(self, conversation_id: str) -> int | None:
        """The stored version, or ``None``."""
        found = self._states.get(conversation_id)
        return None if found is None else found[0]

    async def append(
        self,
        conversation_id: str,
        *,
        start: int,
        messages: Sequence[Mapping[str, Any]],
        state: Mapping[str, Any],
        expected_version: int,
    ) -> int:
        """Append and replace the state if the version still matches."""
        found = self._states.get(conversation_id, (0, {}))[0]
        log = self._messages.setdefault(conversation_id, [])
        if found != expected_version or len(log) != start:
            raise ConversationConflictError(conversation_id, expected_version, found)
        log.extend(dict(message) for message in messages)
        self._states[conversation_id] = (found + 1, copy.deepcopy(dict(state)))
        return found + 1

    @asynccontextmanager
    async def lock(
        self, conversation_id: str, *, wait: bool = False, timeout: float = 30.0
    ) -> AsyncGenerator[None, None]:
        """Hold the conversation within this process."""

        async def try_acquire() -> bool:
            if conversation_id in self._held:
                return False
            self._held.add(conversation_id)
            return True

        await acquire(try_acquire, conversation_id, wait=wait, timeout=timeout)
        try:
            yield
        finally:
            self._held.discard(conversation_id)

    async def delete(self, conversation_id: str) -> None:
        """Forget the conversation."""
        self._messages.pop(conversation_id, None)
        self._states.pop(conversation_id, None)

    async def close(self) -> None:
        """Nothing to release."""
