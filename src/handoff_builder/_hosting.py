"""Hosted conversations: many conversations, one store, several workers, restarts survived."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from agent_framework import Content, Message, Workflow, WorkflowEvent

from ._builder import HandoffWorkflowBuilder
from ._events import HANDOFF_TURN_EVENT, HandoffTurnResult
from ._host import GroupChatHost, ReissueRequests, ResumeTurn, UserTurn
from ._state import HostState, decode_host_state
from .exceptions import (
    CorruptConversationError,
    CorruptStateError,
    HandoffBuilderError,
    PendingRequestsError,
)
from .stores import ConversationRecord, ConversationStore

__all__ = ["DEFAULT_IDLE_TIMEOUT", "ConversationHost"]

logger = logging.getLogger("handoff_builder")

DEFAULT_IDLE_TIMEOUT = timedelta(minutes=30)

UserInput = str | Message | Sequence[Message]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


class _StoreJournal:
    """Writes a hosted turn's progress: the new messages and the state row, in one write."""

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: str,
        *,
        version: int,
        saved: int,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._conversation_id = conversation_id
        self.version = version
        self.saved = saved
        self._clock = clock
        self.last_activity: str | None = None

    async def record(self, host: GroupChatHost) -> None:
        history = host.history
        new = [message.to_dict() for message in history[self.saved :]]
        self.last_activity = self._clock().isoformat()
        state = {"host": host.snapshot(), "last_activity": self.last_activity}
        self.version = await self._store.append(
            self._conversation_id,
            start=self.saved,
            messages=new,
            state=state,
            expected_version=self.version,
        )
        self.saved = len(history)


class ConversationHost:
    """Serves many conversations of one handoff workflow, each remembered in a store.

    ``await host.send(conversation_id, message)`` runs one user turn and returns its
    :class:`HandoffTurnResult`. Each conversation id has its own history and state:

    * each message starts at the agent the conversation was left with (the stored active agent);
      a stored agent that no longer exists falls back to the initial agent (logged), and a
      conversation idle for longer than ``idle_timeout`` starts again at the initial agent;
    * the store is written after the user's message and before every agent call, so a turn
      interrupted by a crash resumes with the right agent (:meth:`resume`, or the next
      :meth:`send`), without calling the earlier agents again or duplicating a message;
    * one turn at a time per conversation, across processes and machines (the store's lock): a
      second concurrent turn raises :class:`~handoff_builder.ConversationBusyError`, or waits
      when ``wait=True``.

    Args:
        builder: The workflow every conversation runs (built anew for each turn).
        store: Where conversations live (see :mod:`handoff_builder.stores`).
        idle_timeout: Idle time after which a conversation starts again at the initial agent.
        remember_active_agent: Start each message at the stored agent (default ``True``); with
            ``False`` the builder's ``enable_return_to_previous`` setting decides.
        lock_timeout: How long ``wait=True`` waits for a busy conversation, in seconds.
        clock: Returns the current time (UTC-aware); injectable for tests.
    """

    def __init__(
        self,
        builder: HandoffWorkflowBuilder,
        store: ConversationStore,
        *,
        idle_timeout: timedelta | float = DEFAULT_IDLE_TIMEOUT,
        remember_active_agent: bool = True,
        lock_timeout: float = 30.0,
        clock: Callable[[], datetime] = _utcnow,
        live_conversations: int = 256,
    ) -> None:
        self.builder = builder
        self.store = store
        self.idle_timeout = (
            idle_timeout if isinstance(idle_timeout, timedelta) else timedelta(seconds=idle_timeout)
        )
        if self.idle_timeout <= timedelta(0):
            raise ValueError(f"idle_timeout must be positive, got {self.idle_timeout}.")
        self.remember_active_agent = remember_active_agent
        self.lock_timeout = lock_timeout
        self._clock = clock
        self.live_conversations = live_conversations
        self._live: OrderedDict[str, tuple[Workflow, GroupChatHost, _StoreJournal]] = OrderedDict()

    async def send(
        self, conversation_id: str, message: UserInput, *, wait: bool = False
    ) -> HandoffTurnResult:
        """Run one user turn of the conversation and return its result.

        An interrupted earlier turn (a crash mid-turn) is finished first.

        Raises:
            ConversationBusyError: another turn of this conversation is running.
            StoreUnavailableError: the store cannot be reached (before any model call).
            CorruptConversationError / SchemaVersionError: the stored record cannot be used.
        """
        _check_id(conversation_id)
        async with self.store.lock(conversation_id, wait=wait, timeout=self.lock_timeout):
            workflow, host = await self._open(conversation_id)
            await self._finish_interrupted(conversation_id, workflow, host)
            turn = self._user_turn(conversation_id, host, message)
            result = _turn_result(conversation_id, host, list(await workflow.run(turn)))
            self._keep(conversation_id, workflow, host)
            return result

    async def respond(
        self, conversation_id: str, answers: Mapping[str, Content], *, wait: bool = False
    ) -> HandoffTurnResult:
        """Answer the requests a hosted turn waits for; the asking agent carries on.

        ``answers`` maps each request's id to its answer: ``request.to_function_approval_response
        (approved=...)`` for an approval, a ``function_result`` Content for an external call.
        """
        _check_id(conversation_id)
        async with self.store.lock(conversation_id, wait=wait, timeout=self.lock_timeout):
            workflow, host = await self._open(conversation_id)
            if not host.pending_requests:
                raise HandoffBuilderError(
                    f"Conversation {conversation_id!r} waits for no answers; use send()."
                )
            await workflow.run(ReissueRequests())
            events = list(await workflow.run(responses=dict(answers)))
            result = _turn_result(conversation_id, host, events)
            self._keep(conversation_id, workflow, host)
            return result

    async def stream(
        self, conversation_id: str, message: UserInput, *, wait: bool = False
    ) -> AsyncIterator[WorkflowEvent[Any]]:
        """Run one user turn as a stream of workflow events (agent updates, handoffs, the end)."""
        _check_id(conversation_id)
        async with self.store.lock(conversation_id, wait=wait, timeout=self.lock_timeout):
            workflow, host = await self._open(conversation_id)
            await self._finish_interrupted(conversation_id, workflow, host)
            turn = self._user_turn(conversation_id, host, message)
            async for event in workflow.run(turn, stream=True):
                yield event
            if not host.turn_open:
                self._keep(conversation_id, workflow, host)

    async def resume(self, conversation_id: str, *, wait: bool = False) -> HandoffTurnResult | None:
        """Finish a turn that a crash interrupted; ``None`` when there is nothing to finish."""
        _check_id(conversation_id)
        async with self.store.lock(conversation_id, wait=wait, timeout=self.lock_timeout):
            workflow, host = await self._open(conversation_id)
            return await self._finish_interrupted(conversation_id, workflow, host)

    async def active_agent(self, conversation_id: str) -> str | None:
        """The agent that ran last in the conversation (``None``: no conversation).

        Between turns that is the agent that ended the last turn; with ``remember_active_agent``
        (the default) the next message starts there, unless the conversation has been idle for
        longer than ``idle_timeout`` or the agent is gone. In a turn a crash interrupted, it is the
        agent that ran before the interruption, not the one the turn resumes with.
        """
        record = await self.store.load(conversation_id)
        if record is None:
            return None
        return _host_state(record).speaker

    # -- internals --------------------------------------------------------------------------------

    async def _open(self, conversation_id: str) -> tuple[Workflow, GroupChatHost]:
        live = self._live.pop(conversation_id, None)
        if live is not None:
            workflow, host, journal = live
            # Reuse the conversation kept from this worker's last turn if nobody wrote since.
            if await self.store.version(conversation_id) == journal.version:
                return workflow, host
        record = await self.store.load(conversation_id)  # errors surface before any model call
        workflow = self.builder.build()
        host = workflow.get_start_executor()
        if not isinstance(host, GroupChatHost):  # pragma: no cover - build() always makes one
            raise TypeError("ConversationHost needs a workflow built by HandoffWorkflowBuilder.")
        version, saved = 0, 0
        if record is not None:
            history = [Message.from_dict(item) for item in record.messages]
            state = _host_state(record)
            try:
                host.load(history, state)
            except CorruptStateError as error:  # the manager's own state
                detail = f"{error.where}: {error.detail}"
                raise CorruptConversationError(conversation_id, detail) from error
            version, saved = record.version, len(history)
        journal = _StoreJournal(
            self.store, conversation_id, version=version, saved=saved, clock=self._clock
        )
        if record is not None:
            journal.last_activity = record.state.get("last_activity")
        host.journal = journal
        host.conversation_id = conversation_id
        return workflow, host

    def _keep(self, conversation_id: str, workflow: Workflow, host: GroupChatHost) -> None:
        """Keep a conversation that ended its turn cleanly, for this worker's next turn of it."""
        journal = host.journal
        if self.live_conversations < 1 or not isinstance(journal, _StoreJournal):
            return
        self._live[conversation_id] = (workflow, host, journal)
        while len(self._live) > self.live_conversations:
            self._live.popitem(last=False)

    def _user_turn(self, conversation_id: str, host: GroupChatHost, message: UserInput) -> UserTurn:
        """The turn to run, with this host's policy: remember the active agent, unless idle."""
        messages = _messages(message)
        journal = host.journal
        last = journal.last_activity if isinstance(journal, _StoreJournal) else None
        if isinstance(last, str) and host.speaker is not None:
            idle = self._clock() - datetime.fromisoformat(last)
            if idle > self.idle_timeout:
                logger.info(
                    "conversation %s was idle for %s; starting again at the initial agent "
                    "instead of %r",
                    conversation_id, idle, host.speaker,
                )  # fmt: skip
                return UserTurn(messages, return_to_previous=False)
        return UserTurn(messages, return_to_previous=True if self.remember_active_agent else None)

    async def _finish_interrupted(
        self, conversation_id: str, workflow: Workflow, host: GroupChatHost
    ) -> HandoffTurnResult | None:
        if host.pending_requests:
            raise PendingRequestsError(conversation_id, host.pending_requests)
        following = host.next_agent
        if not host.turn_open or following is None:
            return None
        logger.warning(
            "conversation %s: finishing a turn interrupted before %r answered",
            conversation_id, following,
        )  # fmt: skip
        return _turn_result(conversation_id, host, list(await workflow.run(ResumeTurn())))


def _check_id(conversation_id: str) -> None:
    if not isinstance(conversation_id, str) or not conversation_id.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"conversation_id must be a non-empty string, got {conversation_id!r}.")


def _messages(message: UserInput) -> list[Message]:
    if isinstance(message, str):
        return [Message(role="user", contents=[message])]
    if isinstance(message, Message):
        return [message]
    return list(message)


def _host_state(record: ConversationRecord) -> HostState:
    """The stored host state, checked; a bad one is a CorruptConversationError."""
    where = f"Conversation {record.conversation_id!r}"
    try:
        return decode_host_state(record.state.get("host", {}), where)
    except CorruptStateError as error:
        raise CorruptConversationError(record.conversation_id, error.detail) from error


def _turn_result(
    conversation_id: str, host: GroupChatHost, events: list[WorkflowEvent[Any]]
) -> HandoffTurnResult:
    for event in reversed(events):
        if event.type == HANDOFF_TURN_EVENT and isinstance(event.data, HandoffTurnResult):
            return event.data
    if host.pending_requests:
        raise PendingRequestsError(conversation_id, host.pending_requests)
    raise HandoffBuilderError(f"The turn of conversation {conversation_id!r} produced no result.")
