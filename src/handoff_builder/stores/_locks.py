"""Waiting for a conversation lock: the one loop every store uses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from handoff_builder.exceptions import ConversationBusyError

_FIRST_POLL = 0.005
_MAX_POLL = 0.1


async def acquire(
    try_acquire: Callable[[], Awaitable[bool]],
    conversation_id: str,
    *,
    wait: bool,
    timeout: float,
) -> None:
    """Call ``try_acquire`` until it succeeds; without ``wait``, fail at once.

    Raises:
        ConversationBusyError: the lock is held (and, with ``wait``, stayed held for ``timeout``).
    """
    if await try_acquire():
        return
    if not wait:
        raise ConversationBusyError(conversation_id)
    started = time.monotonic()
    delay = _FIRST_POLL
    while time.monotonic() - started < timeout:
        await asyncio.sleep(delay)
        if await try_acquire():
            return
        delay = min(delay * 2, _MAX_POLL)
    raise ConversationBusyError(conversation_id, waited=time.monotonic() - started)
