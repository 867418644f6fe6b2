"""The steps of a :class:`~handoff_builder.ConversationHost` call, with the host's policy.

:class:`HostedTurns` holds what every call of a hosted conversation does around its turn: the
input refused when it is too large (before any I/O), a repeated call answered from its receipt,
an interrupted turn finished before a new message, the turn started at the remembered agent
(unless the conversation was idle too long), and the fast path of a conversation kept live,
whose lease its first write takes. The steps themselves are :mod:`._lifecycle`'s; the
conversations are :class:`~handoff_builder._live_conversations.LiveConversations`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agent_framework import Message

from ._events import HandoffTurnResult
from ._host import UserTurn
from ._hosting_settings import HostingSettings
from ._lifecycle import finish_interrupted, turn_result
from ._live_conversations import NOT_THE_TURNS_FAULT, LiveConversations, Opened
from .exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    MessageNotStoredError,
    MessageTooLargeError,
)

__all__ = ["HostedTurns"]

logger = logging.getLogger("handoff_builder")


class HostedTurns:
    """Runs the turns of a host's conversations as its settings say."""

    def __init__(self, conversations: LiveConversations, settings: HostingSettings) -> None:
        self._conversations = conversations
        self._settings = settings

    def check_size(
        self, conversation_id: str, items: Sequence[Mapping[str, Any]], what: str
    ) -> None:
        """Refuse an input larger than ``max_input_bytes``, before any I/O.

        Raises:
            MessageTooLargeError: ``items``, as UTF-8 JSON, are larger than the limit.
        """
        limit = self._settings.max_input_bytes
        if limit is None:
            return
        size = len(json.dumps(items, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > limit:
            raise MessageTooLargeError(conversation_id, what, size, limit)

    @staticmethod
    def last_step(opened: Opened, key: str | None) -> None:
        """What the call runs next is its last turn: its key, and its last write releases."""
        journal = opened.journal
        journal.key = key
        journal.release_when_done = True

    def user_turn(self, opened: Opened, messages: list[Message]) -> UserTurn:
        """The turn to run, with this host's policy: remember the active agent, unless idle."""
        settings = self._settings
        last, host = opened.journal.last_activity, opened.host
        if last is not None and host.speaker is not None:
            idle = settings.clock() - last
            if idle > settings.idle_timeout:
                logger.info(
                    "conversation %s was idle for %s; starting again at the initial agent "
                    "instead of %r",
                    opened.conversation_id, idle, host.speaker,
                )  # fmt: skip
                return UserTurn(messages, return_to_previous=False)
        remember = True if settings.remember_active_agent else None
        return UserTurn(messages, return_to_previous=remember)

    async def finish(self, opened: Opened) -> HandoffTurnResult | None:
        """Finish the turn a crash interrupted, as the call's last; ``None``: none is open."""
        self.last_step(opened, None)
        result = await finish_interrupted(opened, self._settings.max_turn_retries)
        if result is not None:
            self._conversations.keep(opened)
        return result

    async def repeated(self, opened: Opened, key: str) -> HandoffTurnResult | None:
        """The turn an earlier call with ``key`` ran, finished if need be; ``None``: a new call."""
        journal = opened.journal
        receipt = journal.receipt(key)
        if receipt is not None:
            return receipt.result(opened.host.history)
        if opened.host.turn_open and key in journal.turn_keys:
            journal.release_when_done = True  # the call ends with this turn
            result = await finish_interrupted(opened, self._settings.max_turn_retries)
            if result is not None:
                self._conversations.keep(opened)
                return result
        return None

    async def before_message(self, opened: Opened) -> HandoffTurnResult | None:
        """Finish the interrupted turn before a new message; if it fails, the message is refused.

        Raises:
            MessageNotStoredError: the interrupted turn failed again (its error is the cause).
        """
        retries = self._settings.max_turn_retries
        try:
            return await finish_interrupted(opened, retries)
        except Exception as error:
            if isinstance(error, NOT_THE_TURNS_FAULT):
                raise
            reason = (
                f"its interrupted turn was retried first and failed again "
                f"({type(error).__name__}: {error}); the next message retries it (retry "
                f"{opened.failures} of {retries}; after the last, the turn is abandoned and the "
                f"message runs), or abandon() it now"
            )
            raise MessageNotStoredError(opened.conversation_id, reason) from error

    async def send_live(
        self,
        conversation_id: str,
        messages: list[Message],
        wait: bool,  # noqa: FBT001
        key: str | None,
    ) -> HandoffTurnResult | None:
        """A turn of a conversation this worker keeps live, its lease taken with its first write.

        Nothing runs before that write (the first agent is called after it), so when the write
        finds the conversation busy or changed since (another worker wrote), the turn is given
        up unseen and ``None`` returned: the caller runs it the usual way (lease first, reload).
        ``None`` too when the conversation is not kept live.
        """
        conversations = self._conversations
        parked = conversations.take(conversation_id)
        if parked is None or parked.kept.state.turn is not None:  # not kept that way: reload
            return None
        if key is not None:
            receipt = parked.journal.receipt(key)  # receipts only ever grow: a found one holds
            if receipt is not None:
                conversations.put_back(conversation_id, parked)
                return receipt.result(parked.kept.history)
        held = conversations.lease(conversation_id)
        opened = conversations.unpark(conversation_id, parked, held)
        self.last_step(opened, key)
        try:
            events = await opened.attempt(self.user_turn(opened, messages))
        except (ConversationBusyError, ConversationConflictError) as error:
            if held.taken or (isinstance(error, ConversationBusyError) and not wait):
                raise
            return None  # not written, nothing called: run it the usual way
        finally:
            await held.close()
        result = turn_result(conversation_id, opened.host, events)
        conversations.keep(opened)
        return result
