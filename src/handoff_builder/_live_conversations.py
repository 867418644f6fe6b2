"""The conversations a :class:`~handoff_builder.ConversationHost` worker has open or keeps live.

:class:`LiveConversations` opens a conversation for a call (:class:`Opened`: its workflow and
host, loaded as stored, and a :class:`~handoff_builder._journal.StoreJournal` that writes to the
store), and between turns keeps the latest ones live (:class:`Parked`: as the host released
them, and their journal), so that the next message to one runs without reloading it. Built
workflows are not kept with a conversation: they go back to a small pool, for the next turn of
any conversation.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import Workflow, WorkflowEvent

from ._builder import HandoffWorkflowBuilder
from ._events import HandoffTurnResult, TurnAbandonedEvent
from ._host import GroupChatHost, KeptConversation
from ._hosting_settings import HostingSettings
from ._journal import StoreJournal
from ._records import stored_history, stored_host_state
from .exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    CorruptConversationError,
    CorruptStateError,
    HandoffBuilderError,
    LeaseLostError,
    PendingRequestsError,
    SchemaVersionError,
    StoreUnavailableError,
)
from .stores import ConversationStore, LeaseHold, hold, new_owner

__all__ = ["FREE_WORKFLOWS", "NOT_THE_TURNS_FAULT", "LiveConversations", "Opened", "Parked"]

logger = logging.getLogger("handoff_builder")

NOT_THE_TURNS_FAULT = (
    StoreUnavailableError,
    LeaseLostError,
    ConversationConflictError,
    ConversationBusyError,
    CorruptStateError,
    SchemaVersionError,
    PendingRequestsError,
)
"""Errors that are not the turn's fault: the store, the lease or the caller. They are raised as
they are and never count as a failed attempt of the turn."""

FREE_WORKFLOWS = 8
"""How many built workflows a ConversationHost keeps between conversations (more are built when
that many conversations run at once)."""


@dataclass(frozen=True, slots=True)
class Parked:
    """A conversation kept live between turns: as its host released it, and its journal."""

    kept: KeptConversation
    journal: StoreJournal


class Opened:
    """A conversation this worker opened for a call: the lifecycle's backend on a store.

    ``workflow`` and ``host`` are the conversation's compiled workflow and its host, loaded as
    stored (or kept live from this worker's last turn of it); its journal writes to the store.
    """

    __slots__ = ("_reopen", "conversation_id", "host", "workflow")

    def __init__(
        self,
        conversation_id: str,
        workflow: Workflow,
        host: GroupChatHost,
        reopen: Callable[[], Awaitable[Opened]],
    ) -> None:
        self.conversation_id = conversation_id
        self.workflow = workflow
        self.host = host
        self._reopen = reopen

    @property
    def journal(self) -> StoreJournal:
        """The journal that writes this conversation to the store."""
        return cast(StoreJournal, self.host.journal)

    @property
    def failures(self) -> int:
        """The failed attempts of the open turn."""
        return self.journal.failures

    @property
    def last_error(self) -> str | None:
        """What failed last in the open turn."""
        return self.journal.last_error

    async def attempt(self, *args: Any, **kwargs: Any) -> list[WorkflowEvent[Any]]:
        """Run the workflow; a failure of the turn itself is counted before it is raised."""
        try:
            return list(await self.workflow.run(*args, **kwargs))
        except Exception as error:
            await self.count_failure(error)
            raise

    async def count_failure(self, error: Exception) -> bool:
        """Count ``error`` against the open turn, as stored; False when it is not counted."""
        if isinstance(error, NOT_THE_TURNS_FAULT):
            return False
        try:
            return await self.journal.record_failure(error)
        except HandoffBuilderError as unrecorded:  # the store or the lease: say so, keep `error`
            logger.warning("could not record the failed attempt: %s", unrecorded)
            return False

    async def restore(self) -> bool:
        """The conversation as stored, after a failed attempt changed it in memory."""
        release = self.journal.release_when_done
        stored = await self._reopen()
        self.workflow, self.host = stored.workflow, stored.host
        self.journal.release_when_done = release
        return True

    async def give_up(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        """Abandon the open turn and store it so."""
        result = self.host.abandon_turn(event)
        await self.journal.record(self.host.progress())
        return result


class LiveConversations:
    """Opens this worker's conversations for its calls, and keeps the latest ones live.

    At most ``settings.live_conversations`` are kept (the least recently used go first), and at
    most :data:`FREE_WORKFLOWS` built workflows between conversations.
    """

    def __init__(
        self, builder: HandoffWorkflowBuilder, store: ConversationStore, settings: HostingSettings
    ) -> None:
        self._builder = builder
        self._store = store
        self._settings = settings
        self._live: OrderedDict[str, Parked] = OrderedDict()
        self._free: list[tuple[Workflow, GroupChatHost]] = []  # built, between conversations

    def hold(
        self,
        conversation_id: str,
        wait: bool,  # noqa: FBT001
    ) -> AbstractAsyncContextManager[LeaseHold]:
        """The conversation's lease, held while the block runs (see :func:`hold`)."""
        settings = self._settings
        return hold(
            self._store,
            conversation_id,
            ttl=settings.lease_ttl,
            wait=wait,
            timeout=settings.lock_timeout,
            owner=new_owner(settings.worker_id),
        )

    def lease(self, conversation_id: str) -> LeaseHold:
        """The conversation's lease, not taken yet: a turn's first write takes it."""
        settings = self._settings
        owner = new_owner(settings.worker_id)
        return LeaseHold(self._store, conversation_id, owner, settings.lease_ttl)

    def take(self, conversation_id: str) -> Parked | None:
        """The conversation as kept live (no longer kept); ``None``: it is not."""
        return self._live.pop(conversation_id, None)

    def put_back(self, conversation_id: str, parked: Parked) -> None:
        """Keep again a conversation :meth:`take` took and nothing changed."""
        self._live[conversation_id] = parked

    async def open(
        self, conversation_id: str, held: LeaseHold, *, reuse: bool = True, strict: bool = True
    ) -> Opened:
        """The conversation for a call holding its lease: as kept live, or loaded as stored.

        The one kept from this worker's last turn is reused if nobody wrote since (and
        ``reuse``). ``strict=False`` loads a turn whose stored payloads no longer fit.

        Raises:
            CorruptConversationError: the stored host state does not load.
        """
        live = self._live.pop(conversation_id, None)
        if live is not None and reuse and held.lease.version == live.journal.version:
            return self.unpark(conversation_id, live, held)
        record = await self._store.load(conversation_id)  # errors surface before any model call
        workflow, host = self._built()
        version, saved, written = 0, 0, {}
        if record is not None:
            history = stored_history(record)
            state = stored_host_state(record)
            written = record.state
            try:
                host.load(history, state, strict=strict)
            except CorruptStateError as error:  # the manager's own state
                detail = f"{error.where}: {error.detail}"
                raise CorruptConversationError(conversation_id, detail) from error
            except (ValueError, TypeError, KeyError, AttributeError) as error:  # pending requests
                detail = f"the host state does not load ({type(error).__name__}: {error})"
                raise CorruptConversationError(conversation_id, detail) from error
            version, saved = record.version, len(history)
        journal = StoreJournal(
            self._store, conversation_id, version=version, saved=saved,
            clock=self._settings.clock, written=written,
        )  # fmt: skip
        return self._opened(conversation_id, workflow, host, journal, held, strict=strict)

    def unpark(self, conversation_id: str, parked: Parked, held: LeaseHold) -> Opened:
        """A conversation kept live, in a built workflow again (its state as it was kept)."""
        workflow, host = self._built()
        host.take(parked.kept)
        return self._opened(conversation_id, workflow, host, parked.journal, held)

    def keep(self, opened: Opened) -> None:
        """Keep a conversation that ended its turn cleanly, for this worker's next turn of it.

        What is kept is the conversation (its history, its state, its journal); the built
        workflow goes back to the free ones, for the next conversation.
        """
        host = opened.host
        journal = host.journal
        limit = self._settings.live_conversations
        if limit < 1 or not isinstance(journal, StoreJournal):
            return
        journal.key, journal.release_when_done, journal.held = None, False, None
        self._live[opened.conversation_id] = Parked(host.release(), journal)
        while len(self._live) > limit:
            self._live.popitem(last=False)
        if len(self._free) < FREE_WORKFLOWS:
            self._free.append((opened.workflow, host))

    def _opened(
        self,
        conversation_id: str,
        workflow: Workflow,
        host: GroupChatHost,
        journal: StoreJournal,
        held: LeaseHold,
        *,
        strict: bool = True,
    ) -> Opened:
        journal.held = held
        host.journal = journal
        host.conversation_id = conversation_id

        def stored() -> Awaitable[Opened]:
            return self.open(conversation_id, held, reuse=False, strict=strict)

        return Opened(conversation_id, workflow, host, stored)

    def _built(self) -> tuple[Workflow, GroupChatHost]:
        """A built workflow and its host, free for one conversation: one kept, or a new one."""
        if self._free:
            return self._free.pop()
        workflow = self._builder.build()
        host = workflow.get_start_executor()
        if not isinstance(host, GroupChatHost):  # pragma: no cover - build() always makes one
            raise TypeError("ConversationHost needs a workflow built by HandoffWorkflowBuilder.")
        return workflow, host
