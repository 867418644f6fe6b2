"""Hosted conversations: many conversations, one store, several workers, restarts survived."""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, cast

from agent_framework import Content, Message, Workflow, WorkflowEvent

from ._builder import HandoffWorkflowBuilder
from ._events import (
    HANDOFF_TURN_ABANDONED_EVENT,
    HANDOFF_TURN_EVENT,
    HandoffTurnResult,
    TurnAbandonedEvent,
)
from ._host import GroupChatHost, KeptConversation, ReissueRequests, UserTurn
from ._journal import HostedState, StoreJournal, decode_hosted
from ._lifecycle import (
    DEFAULT_MAX_TURN_RETRIES,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    UserInput,
    answers_by_request,
    check_idempotency_key,
    finish_interrupted,
    turn_result,
    user_messages,
)
from ._records import stored_history, stored_host_state
from .exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    CorruptConversationError,
    CorruptStateError,
    HandoffBuilderError,
    LeaseLostError,
    MessageNotStoredError,
    MessageTooLargeError,
    PendingRequestsError,
    SchemaVersionError,
    StoreUnavailableError,
)
from .stores import (
    DEFAULT_LEASE_TTL,
    ConversationStore,
    LeaseHold,
    check_conversation_id,
    hold,
    new_owner,
)

if TYPE_CHECKING:
    from ._hosted_agent import HostedConversationAgent

__all__ = [
    "ABANDONED_TURN_PROPERTY",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_TURN_RETRIES",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "ConversationHost",
]

logger = logging.getLogger("handoff_builder")

DEFAULT_IDLE_TIMEOUT = timedelta(minutes=30)
DEFAULT_MAX_INPUT_BYTES = 4 * 1024 * 1024
"""The largest user input one turn takes (or answers one call gives), in bytes of UTF-8 JSON.

A few MB of text, or an image of a few MB as a data URI; a larger input is refused before
anything is stored or sent to a model."""
ABANDONED_TURN_PROPERTY = "handoff_builder_abandoned_turn"
"""In :meth:`ConversationHost.history`, a message's ``additional_properties`` key, set to
``True`` on the messages of an abandoned turn: they stay in the history, in no agent's view."""
# Errors that are not the turn's fault: the store, the lease or the caller. They are raised as
# they are and never count as a failed attempt of the turn.
_NOT_THE_TURNS_FAULT = (
    StoreUnavailableError,
    LeaseLostError,
    ConversationConflictError,
    ConversationBusyError,
    CorruptStateError,
    SchemaVersionError,
    PendingRequestsError,
)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


_FREE_WORKFLOWS = 8
"""How many built workflows a ConversationHost keeps between conversations (more are built when
that many conversations run at once)."""


@dataclass(frozen=True)
class _Parked:
    """A conversation kept live between turns: as its host released it, and its journal."""

    kept: KeptConversation
    journal: StoreJournal


class _Opened:
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
        reopen: Callable[[], Awaitable[_Opened]],
    ) -> None:
        self.conversation_id = conversation_id
        self.workflow = workflow
        self.host = host
        self._reopen = reopen

    @property
    def journal(self) -> StoreJournal:
        return cast(StoreJournal, self.host.journal)

    @property
    def failures(self) -> int:
        return self.journal.failures

    @property
    def last_error(self) -> str | None:
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
        if isinstance(error, _NOT_THE_TURNS_FAULT):
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


def idle_timeout_of(value: timedelta | float) -> timedelta:
    """``value`` as an idle timeout: a positive timedelta (seconds for a number).

    Raises:
        ValueError: not positive, not finite, or too large for a timedelta.
    """
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise ValueError(f"idle_timeout must be positive, got {value}.")
        return value
    problem = f"idle_timeout must be a positive, finite number of seconds, got {value}."
    if not math.isfinite(value) or value <= 0:
        raise ValueError(problem)
    try:
        timeout = timedelta(seconds=value)
    except OverflowError:
        raise ValueError(problem) from None
    if timeout <= timedelta(0):  # below a microsecond
        raise ValueError(problem)
    return timeout


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
    * one turn at a time per conversation, across processes and machines: a turn holds the
      conversation's lease (in the store, renewed while it runs, every write fenced by it); a
      second concurrent turn raises :class:`~handoff_builder.ConversationBusyError`, or waits
      when ``wait=True``; a dead worker's lease expires after ``lease_ttl`` seconds;
    * a turn that fails (a model or tool error) is retried by the next messages, at most
      ``max_turn_retries`` times, then abandoned (closed, status ``"abandoned"``) so that the new
      message runs; :meth:`abandon` gives a turn up on demand;
    * a call retried with the same ``idempotency_key`` runs once: it returns the turn's result
      (finishing the turn first if a crash interrupted it) and never stores the message twice.

    Deadlines for agent calls and turns are the builder's
    (:meth:`HandoffWorkflowBuilder.with_timeouts`).

    Args:
        builder: The workflow every conversation runs (built anew for each turn).
        store: Where conversations live (see :mod:`handoff_builder.stores`).
        idle_timeout: Idle time after which a conversation starts again at the initial agent.
        remember_active_agent: Start each message at the stored agent (default ``True``); with
            ``False`` the builder's ``enable_return_to_previous`` setting decides.
        lock_timeout: How long ``wait=True`` waits for a busy conversation, in seconds.
        clock: Returns the current time (UTC-aware); injectable for tests.
        live_conversations: How many conversations this worker keeps live between turns.
        lease_ttl: Seconds a turn's lease lasts unless renewed (every ``lease_ttl / 3``).
        worker_id: Names this worker in lease owners (default: host name and process id).
        max_turn_retries: How many times a failed turn is retried before it is abandoned.
        max_input_bytes: The largest input one turn takes (or answers one call gives), in bytes
            of UTF-8 JSON (``None``: no limit); a larger one raises
            :class:`~handoff_builder.MessageTooLargeError` and nothing is stored.
    """

    def __init__(
        self,
        builder: HandoffWorkflowBuilder,
        store: ConversationStore,
        *,
        idle_timeout: timedelta | float = DEFAULT_IDLE_TIMEOUT,
        remember_active_agent: bool = True,
        lock_timeout: float = 60.0,
        clock: Callable[[], datetime] = _utcnow,
        live_conversations: int = 256,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        worker_id: str | None = None,
        max_turn_retries: int = DEFAULT_MAX_TURN_RETRIES,
        max_input_bytes: int | None = DEFAULT_MAX_INPUT_BYTES,
    ) -> None:
        self.builder = builder
        self.store = store
        self.idle_timeout = idle_timeout_of(idle_timeout)
        if lease_ttl <= 0:
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {lease_ttl}.")
        if max_turn_retries < 0:
            raise ValueError(f"max_turn_retries must be 0 or more, got {max_turn_retries}.")
        if max_input_bytes is not None and max_input_bytes < 1:
            raise ValueError(f"max_input_bytes must be positive or None, got {max_input_bytes}.")
        self.max_input_bytes = max_input_bytes
        self.remember_active_agent = remember_active_agent
        self.lock_timeout = lock_timeout
        self._clock = clock
        self.live_conversations = live_conversations
        self.lease_ttl = lease_ttl
        self.worker_id = worker_id
        self.max_turn_retries = max_turn_retries
        self._live: OrderedDict[str, _Parked] = OrderedDict()
        self._free: list[tuple[Workflow, GroupChatHost]] = []  # built, between conversations

    async def send(
        self,
        conversation_id: str,
        message: UserInput,
        *,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> HandoffTurnResult:
        """Run one user turn of the conversation and return its result.

        An interrupted earlier turn (a crash mid-turn) is finished first, and a failed one
        retried (or abandoned, past ``max_turn_retries``); its result is the new result's
        ``recovered``. With ``idempotency_key``, a call that repeats an earlier one (a client
        retrying after a timeout or a crash) returns that call's turn instead of running the
        message again.

        Raises:
            ValueError: the conversation id or the idempotency key is not valid (no I/O done).
            MessageTooLargeError: the message is larger than ``max_input_bytes`` (no I/O done).
            ConversationBusyError: another turn of this conversation is running.
            PendingRequestsError: the conversation waits for answers (:meth:`respond`).
            MessageNotStoredError: the earlier turn, retried first, failed again; the message
                was not stored.
            StoreUnavailableError: the store cannot be reached (before any model call).
            CorruptConversationError / SchemaVersionError: the stored record cannot be used.
            LeaseLostError: this worker's lease was taken over mid-turn; nothing more was written.
        """
        check_conversation_id(conversation_id)
        check_idempotency_key(idempotency_key)
        messages = user_messages(message)
        self._check_size(conversation_id, [m.to_dict() for m in messages], "message")
        if conversation_id in self._live:
            done = await self._send_live(conversation_id, messages, wait, idempotency_key)
            if done is not None:
                return done
        async with self._hold(conversation_id, wait) as held:
            opened = await self._open(conversation_id, held)
            if idempotency_key is not None:
                done = await self._repeated(opened, idempotency_key)
                if done is not None:
                    return done
            recovered = await self._before_message(opened)
            self._last_step(opened, idempotency_key)
            events = await opened.attempt(self._user_turn(opened, messages))
            result = turn_result(conversation_id, opened.host, events)
            result.recovered = recovered
            self._keep(opened)
            return result

    async def _send_live(
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
        """
        parked = self._live.pop(conversation_id)
        journal = parked.journal
        if parked.kept.state.turn is not None:  # not kept that way; reload to be sure
            return None
        if key is not None:
            receipt = journal.receipt(key)  # receipts only ever grow: a found one holds
            if receipt is not None:
                self._live[conversation_id] = parked
                return receipt.result(parked.kept.history)
        held = LeaseHold(self.store, conversation_id, new_owner(self.worker_id), self.lease_ttl)
        opened = self._unpark(conversation_id, parked, held)
        self._last_step(opened, key)
        try:
            events = await opened.attempt(self._user_turn(opened, messages))
        except (ConversationBusyError, ConversationConflictError) as error:
            if held.taken or (isinstance(error, ConversationBusyError) and not wait):
                raise
            return None  # not written, nothing called: run it the usual way
        finally:
            await held.close()
        result = turn_result(conversation_id, opened.host, events)
        self._keep(opened)
        return result

    async def respond(
        self,
        conversation_id: str,
        answers: Mapping[str, Content],
        *,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> HandoffTurnResult:
        """Answer the requests a hosted turn waits for; the asking agent carries on.

        ``answers`` maps each request's id to its answer: ``request.to_function_approval_response
        (approved=...)`` for an approval, a ``function_result`` Content for an external call.
        With ``idempotency_key``, a repeated call returns the turn it ran (finishing it first if
        a crash interrupted it) instead of failing because nothing waits for answers any more.
        """
        check_conversation_id(conversation_id)
        check_idempotency_key(idempotency_key)
        self._check_size(conversation_id, [a.to_dict() for a in answers.values()], "answers")
        async with self._hold(conversation_id, wait) as held:
            opened = await self._open(conversation_id, held)
            if idempotency_key is not None:
                done = await self._repeated(opened, idempotency_key)
                if done is not None:
                    return done
            # the caller's mistake, not the turn's: refused before anything runs, not counted
            responses = answers_by_request(conversation_id, answers, opened.host.pending_requests)
            self._last_step(opened, idempotency_key)
            await opened.workflow.run(ReissueRequests())
            events = await opened.attempt(responses=responses)
            result = turn_result(conversation_id, opened.host, events)
            self._keep(opened)
            return result

    async def stream(
        self,
        conversation_id: str,
        message: UserInput,
        *,
        wait: bool = False,
        idempotency_key: str | None = None,
    ) -> AsyncIterator[WorkflowEvent[Any]]:
        """Run one user turn as a stream of workflow events (agent updates, handoffs, the end).

        A repeated call (same ``idempotency_key``) yields only the ``handoff_turn_completed``
        event of the turn it ran. A turn abandoned first yields ``handoff_turn_abandoned``.
        """
        check_conversation_id(conversation_id)
        check_idempotency_key(idempotency_key)
        messages = user_messages(message)
        self._check_size(conversation_id, [m.to_dict() for m in messages], "message")
        async with self._hold(conversation_id, wait) as held:
            opened = await self._open(conversation_id, held)
            if idempotency_key is not None:
                done = await self._repeated(opened, idempotency_key)
                if done is not None:
                    yield WorkflowEvent(cast(Any, HANDOFF_TURN_EVENT), data=done)
                    return
            recovered = await self._before_message(opened)
            if recovered is not None and recovered.abandoned is not None:
                yield WorkflowEvent(
                    cast(Any, HANDOFF_TURN_ABANDONED_EVENT), data=recovered.abandoned
                )
            self._last_step(opened, idempotency_key)
            turn = self._user_turn(opened, messages)
            try:
                async for event in opened.workflow.run(turn, stream=True):
                    if event.type == HANDOFF_TURN_EVENT and isinstance(
                        event.data, HandoffTurnResult
                    ):
                        event.data.recovered = recovered
                    yield event
            except Exception as error:
                await opened.count_failure(error)
                raise
            if not opened.host.turn_open:
                self._keep(opened)

    async def pending(self, conversation_id: str) -> list[Content]:
        """The requests the conversation waits for (approvals, external calls), in order.

        Empty when it waits for nothing; answer them with :meth:`respond`.
        """
        check_conversation_id(conversation_id)
        record = await self.store.load(conversation_id)
        if record is None:
            return []
        pending = stored_host_state(record).pending
        if pending is None:
            return []
        answered = set(pending.answers)
        requests = [Content.from_dict(item) for item in pending.requests]
        return [request for request in requests if str(request.id) not in answered]

    async def history(self, conversation_id: str) -> list[Message]:
        """The stored conversation, every message in order (empty for an unknown id).

        The messages of an abandoned turn are there, marked: their ``additional_properties``
        hold :data:`ABANDONED_TURN_PROPERTY` (``True``). No agent reads them any more.

        Raises:
            ValueError: the conversation id is not valid (no I/O done).
            CorruptConversationError: a stored message cannot be read.
        """
        check_conversation_id(conversation_id)
        record = await self.store.load(conversation_id)
        if record is None:
            return []
        history = stored_history(record)
        for low, high in stored_host_state(record).left_out:
            for index in range(low, min(high, len(history))):
                history[index] = _marked(history[index])
        return history

    async def conversations(self, *, after: str = "", limit: int = 100) -> list[str]:
        """Ids of the stored conversations after ``after``, in order, at most ``limit``.

        Page through them by passing the last id of a page as ``after``.
        """
        return await self.store.conversation_ids(after=after, limit=limit)

    async def delete(self, conversation_id: str, *, wait: bool = False) -> None:
        """Forget the conversation: its history and its state (its next message starts afresh).

        A turn that runs holds the conversation: ``ConversationBusyError``, or with
        ``wait=True`` the deletion waits for it.
        """
        check_conversation_id(conversation_id)
        async with self._hold(conversation_id, wait):
            self._live.pop(conversation_id, None)
            await self.store.delete(conversation_id)

    def as_agent(
        self, *, name: str = "handoff", description: str | None = None
    ) -> HostedConversationAgent:
        """These conversations as an agent_framework agent, one conversation per session.

        The session id is the conversation id: ``agent.run(text, session=agent.create_session(
        session_id="alice"))`` continues Alice's stored conversation at her remembered agent.
        agent_framework's hosting (DevUI, the AG-UI endpoint) keeps one session per
        conversation, so it serves these conversations isolated, each at its active agent. Serve
        it as ``devui_agent(agent)`` to DevUI and ``agui_agent(agent)`` to AG-UI, so that they
        show which agent answered and each handoff; see ``docs/serving.md``.
        """
        from ._hosted_agent import HostedConversationAgent

        return HostedConversationAgent(self, name=name, description=description)

    async def resume(self, conversation_id: str, *, wait: bool = False) -> HandoffTurnResult | None:
        """Finish a turn that a crash interrupted; ``None`` when there is nothing to finish.

        A turn that failed is retried like the next :meth:`send` would (and abandoned once it has
        failed more than ``max_turn_retries`` times).
        """
        check_conversation_id(conversation_id)
        async with self._hold(conversation_id, wait) as held:
            opened = await self._open(conversation_id, held)
            self._last_step(opened, None)
            result = await finish_interrupted(opened, self.max_turn_retries)
            if result is not None:
                self._keep(opened)
            return result

    async def replay(
        self, conversation_id: str, idempotency_key: str, *, wait: bool = False
    ) -> HandoffTurnResult | None:
        """The turn an earlier call with ``idempotency_key`` ran; nothing new is ever run.

        A finished turn is read back from the store (no model is called); a turn a crash or a
        dropped connection interrupted is finished first, as :meth:`send` would with that key.
        ``None`` when no call with that key is remembered (the keys of the last turns are).

        Raises:
            PendingRequestsError: that turn waits for answers (:meth:`respond`).
        """
        check_conversation_id(conversation_id)
        check_idempotency_key(idempotency_key)
        async with self._hold(conversation_id, wait) as held:
            return await self._repeated(await self._open(conversation_id, held), idempotency_key)

    async def abandon(
        self, conversation_id: str, *, wait: bool = False
    ) -> HandoffTurnResult | None:
        """Give up the conversation's open turn: close it without running anything more.

        Requests it waited for are answered as not answered and its status is ``"abandoned"``
        (a :class:`~handoff_builder.TurnAbandonedEvent` with ``reason="on_demand"``); the next
        message starts a new turn. The turn stays in the history, in no agent's view. A turn that
        no longer loads (a stored handoff payload that does not fit its model any more) is
        abandoned too. ``None`` when no turn is open.
        """
        check_conversation_id(conversation_id)
        async with self._hold(conversation_id, wait) as held:
            try:
                opened = await self._open(conversation_id, held)
            except CorruptConversationError:  # a turn whose payloads no longer fit, say
                opened = await self._open(conversation_id, held, reuse=False, strict=False)
            host = opened.host
            if not host.turn_open:
                return None
            opened.journal.release_when_done = True
            event = TurnAbandonedEvent(
                "on_demand", host.next_agent or host.speaker, opened.failures, opened.last_error
            )
            result = await opened.give_up(event)
            self._keep(opened)
            return result

    async def active_agent(self, conversation_id: str) -> str | None:
        """The agent the conversation is with (``None``: no conversation).

        In an open turn, the agent it goes on with: the one about to run or running (it is
        stored before it is called, so a turn a crash interrupted resumes there, and another
        process reads it while the agent runs), or the one whose requests the turn waits for.
        Between turns, the agent that ended the last turn: the next message starts there,
        unless the conversation has been idle for longer than ``idle_timeout``
        (:meth:`last_activity`) or the agent is gone from the workflow; then it starts at the
        initial agent.
        """
        check_conversation_id(conversation_id)
        record = await self.store.load(conversation_id)
        if record is None:
            return None
        return stored_host_state(record).active_agent

    async def last_activity(self, conversation_id: str) -> datetime | None:
        """When the conversation last changed (a message, a step of a turn); ``None``: never.

        A conversation whose last activity is older than ``idle_timeout`` starts its next message
        again at the initial agent.
        """
        check_conversation_id(conversation_id)
        record = await self.store.load(conversation_id)
        if record is None:
            return None
        hosted: HostedState = decode_hosted(HostedState, record.state, conversation_id)
        return hosted.last_activity

    # -- internals --------------------------------------------------------------------------------

    def _hold(self, conversation_id: str, wait: bool) -> Any:  # noqa: FBT001
        return hold(
            self.store,
            conversation_id,
            ttl=self.lease_ttl,
            wait=wait,
            timeout=self.lock_timeout,
            owner=new_owner(self.worker_id),
        )

    def _last_step(self, opened: _Opened, key: str | None) -> None:
        """What the call runs next is its last turn: its key, and its last write releases."""
        journal = opened.journal
        journal.key = key
        journal.release_when_done = True

    async def _open(
        self, conversation_id: str, held: LeaseHold, *, reuse: bool = True, strict: bool = True
    ) -> _Opened:
        live = self._live.pop(conversation_id, None)
        # Reuse the conversation kept from this worker's last turn if nobody wrote since.
        if live is not None and reuse and held.lease.version == live.journal.version:
            return self._unpark(conversation_id, live, held)
        record = await self.store.load(conversation_id)  # errors surface before any model call
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
            self.store, conversation_id, version=version, saved=saved, clock=self._clock,
            written=written,
        )  # fmt: skip
        return self._opened(conversation_id, workflow, host, journal, held, strict=strict)

    def _opened(
        self,
        conversation_id: str,
        workflow: Workflow,
        host: GroupChatHost,
        journal: StoreJournal,
        held: LeaseHold,
        *,
        strict: bool = True,
    ) -> _Opened:
        journal.held = held
        host.journal = journal
        host.conversation_id = conversation_id

        def stored() -> Awaitable[_Opened]:
            return self._open(conversation_id, held, reuse=False, strict=strict)

        return _Opened(conversation_id, workflow, host, stored)

    def _built(self) -> tuple[Workflow, GroupChatHost]:
        """A built workflow and its host, free for one conversation: one kept, or a new one."""
        if self._free:
            return self._free.pop()
        workflow = self.builder.build()
        host = workflow.get_start_executor()
        if not isinstance(host, GroupChatHost):  # pragma: no cover - build() always makes one
            raise TypeError("ConversationHost needs a workflow built by HandoffWorkflowBuilder.")
        return workflow, host

    def _unpark(self, conversation_id: str, parked: _Parked, held: LeaseHold) -> _Opened:
        """A conversation kept live, in a built workflow again (its state as it was kept)."""
        workflow, host = self._built()
        host.take(parked.kept)
        return self._opened(conversation_id, workflow, host, parked.journal, held)

    def _keep(self, opened: _Opened) -> None:
        """Keep a conversation that ended its turn cleanly, for this worker's next turn of it.

        What is kept is the conversation (its history, its state, its journal); the built
        workflow goes back to this host's free ones, for the next conversation.
        """
        host = opened.host
        journal = host.journal
        if self.live_conversations < 1 or not isinstance(journal, StoreJournal):
            return
        journal.key, journal.release_when_done, journal.held = None, False, None
        self._live[opened.conversation_id] = _Parked(host.release(), journal)
        while len(self._live) > self.live_conversations:
            self._live.popitem(last=False)
        if len(self._free) < _FREE_WORKFLOWS:
            self._free.append((opened.workflow, host))

    def _user_turn(self, opened: _Opened, messages: list[Message]) -> UserTurn:
        """The turn to run, with this host's policy: remember the active agent, unless idle."""
        last, host = opened.journal.last_activity, opened.host
        if last is not None and host.speaker is not None:
            idle = self._clock() - last
            if idle > self.idle_timeout:
                logger.info(
                    "conversation %s was idle for %s; starting again at the initial agent "
                    "instead of %r",
                    opened.conversation_id, idle, host.speaker,
                )  # fmt: skip
                return UserTurn(messages, return_to_previous=False)
        return UserTurn(messages, return_to_previous=True if self.remember_active_agent else None)

    async def _repeated(self, opened: _Opened, key: str) -> HandoffTurnResult | None:
        """The turn an earlier call with ``key`` ran, finished if need be; ``None``: a new call."""
        journal = opened.journal
        receipt = journal.receipt(key)
        if receipt is not None:
            return receipt.result(opened.host.history)
        if opened.host.turn_open and key in journal.turn_keys:
            journal.release_when_done = True  # the call ends with this turn
            result = await finish_interrupted(opened, self.max_turn_retries)
            if result is not None:
                self._keep(opened)
                return result
        return None

    def _check_size(
        self, conversation_id: str, items: Sequence[Mapping[str, Any]], what: str
    ) -> None:
        """Refuse an input larger than ``max_input_bytes``, before any I/O."""
        limit = self.max_input_bytes
        if limit is None:
            return
        size = len(json.dumps(items, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > limit:
            raise MessageTooLargeError(conversation_id, what, size, limit)

    async def _before_message(self, opened: _Opened) -> HandoffTurnResult | None:
        """Finish the interrupted turn before a new message; if it fails, the message is refused.

        Raises:
            MessageNotStoredError: the interrupted turn failed again (its error is the cause).
        """
        try:
            return await finish_interrupted(opened, self.max_turn_retries)
        except Exception as error:
            if isinstance(error, _NOT_THE_TURNS_FAULT):
                raise
            failures, retries = opened.failures, self.max_turn_retries
            reason = (
                f"its interrupted turn was retried first and failed again "
                f"({type(error).__name__}: {error}); the next message retries it (retry "
                f"{failures} of {retries}; after the last, the turn is abandoned and the message "
                f"runs), or abandon() it now"
            )
            raise MessageNotStoredError(opened.conversation_id, reason) from error


def _marked(message: Message) -> Message:
    """A copy of ``message`` marked as part of an abandoned turn."""
    properties = {**(message.additional_properties or {}), ABANDONED_TURN_PROPERTY: True}
    return Message(
        role=message.role,
        contents=list(message.contents),
        author_name=message.author_name,
        message_id=message.message_id,
        additional_properties=properties,
    )
