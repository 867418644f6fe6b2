"""Hosted conversations: many conversations, one store, several workers, restarts survived.

:class:`ConversationHost` is the public face: it checks each call's input and runs the call's
steps. Its collaborators do the rest: ``LiveConversations`` (``_live_conversations``) opens
conversations and keeps the latest ones live between turns, ``HostedTurns`` (``_hosted_turns``)
runs the steps around a turn with the host's policy, and :class:`HostingSettings`
(``_hosting_settings``) says how the host serves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from agent_framework import Content, Message, WorkflowEvent
from typing_extensions import Unpack

from ._builder import HandoffWorkflowBuilder
from ._events import (
    HANDOFF_TURN_ABANDONED_EVENT,
    HANDOFF_TURN_EVENT,
    HandoffTurnResult,
    TurnAbandonedEvent,
)
from ._host import ReissueRequests
from ._hosted_turns import HostedTurns
from ._hosting_settings import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_INPUT_BYTES,
    HostingOptions,
    HostingSettings,
    idle_timeout_of,
)
from ._journal import HostedState, decode_hosted
from ._lifecycle import (
    DEFAULT_MAX_TURN_RETRIES,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    UserInput,
    answers_by_request,
    check_idempotency_key,
    turn_result,
    user_messages,
)
from ._live_conversations import LiveConversations, Opened
from ._options import settings_with
from ._records import stored_history, stored_host_state
from ._remote_input import message_answers
from .exceptions import CorruptConversationError
from .stores import ConversationStore, check_conversation_id

if TYPE_CHECKING:
    from datetime import timedelta

    from ._hosted_agent import HostedConversationAgent

# The defaults and idle_timeout_of are imported from here by the CLI and the Temporal host too.
__all__ = [
    "ABANDONED_TURN_PROPERTY",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_TURN_RETRIES",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "ConversationHost",
    "idle_timeout_of",
]

ABANDONED_TURN_PROPERTY = "handoff_builder_abandoned_turn"
"""In :meth:`ConversationHost.history`, a message's ``additional_properties`` key, set to
``True`` on the messages of an abandoned turn: they stay in the history, in no agent's view."""


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
        settings: How the host serves (:class:`~handoff_builder.HostingSettings`: the idle
            timeout, leases, live conversations, retries, the input limit...).
        **options: The same fields as keywords (``idle_timeout=``, ``lease_ttl=``...), in place
            of the ones of ``settings``; each is also an attribute of the host (read-only).

    Raises:
        ValueError: an option out of range (``idle_timeout``, ``lease_ttl``,
            ``max_turn_retries``, ``max_input_bytes``), named in the message.
        TypeError: an option that is not a field of :class:`~handoff_builder.HostingSettings`.
    """

    def __init__(
        self,
        builder: HandoffWorkflowBuilder,
        store: ConversationStore,
        *,
        settings: HostingSettings | None = None,
        **options: Unpack[HostingOptions],
    ) -> None:
        self.builder = builder
        self.store = store
        self.settings = settings_with(HostingSettings, settings, options, "ConversationHost")
        """How this host serves (:class:`~handoff_builder.HostingSettings`)."""
        self._live = LiveConversations(builder, store, self.settings)
        self._turns = HostedTurns(self._live, self.settings)

    @property
    def idle_timeout(self) -> timedelta:
        """Idle time after which a conversation starts again at the initial agent."""
        return self.settings.idle_timeout

    @property
    def remember_active_agent(self) -> bool:
        """Whether each message starts at the stored agent."""
        return self.settings.remember_active_agent

    @property
    def lock_timeout(self) -> float:
        """How long ``wait=True`` waits for a busy conversation, in seconds."""
        return self.settings.lock_timeout

    @property
    def live_conversations(self) -> int:
        """How many conversations this worker keeps live between self._turns."""
        return self.settings.live_conversations

    @property
    def lease_ttl(self) -> float:
        """Seconds a turn's lease lasts unless renewed."""
        return self.settings.lease_ttl

    @property
    def worker_id(self) -> str | None:
        """Names this worker in lease owners (``None``: host name and process id)."""
        return self.settings.worker_id

    @property
    def max_turn_retries(self) -> int:
        """How many times a failed turn is retried before it is abandoned."""
        return self.settings.max_turn_retries

    @property
    def max_input_bytes(self) -> int | None:
        """The largest input one turn takes, in bytes of UTF-8 JSON (``None``: no limit)."""
        return self.settings.max_input_bytes

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
        message again. When the conversation waits for a remote agent's question alone (a
        :class:`~handoff_builder.RemoteQuestion`), the message is its answer: the waiting turn
        goes on, as :meth:`respond` would.

        Raises:
            ValueError: the conversation id or the idempotency key is not valid (no I/O done).
            MessageTooLargeError: the message is larger than ``max_input_bytes`` (no I/O done).
            ConversationBusyError: another turn of this conversation is running.
            PendingRequestsError: the conversation waits for answers (:meth:`respond`), or the
                turn waits for them now (a remote agent's question among them).
            MessageNotStoredError: the earlier turn, retried first, failed again; the message
                was not stored.
            StoreUnavailableError: the store cannot be reached (before any model call).
            CorruptConversationError / SchemaVersionError: the stored record cannot be used.
            LeaseLostError: this worker's lease was taken over mid-turn; nothing more was written.
        """
        check_conversation_id(conversation_id)
        check_idempotency_key(idempotency_key)
        messages = user_messages(message)
        self._turns.check_size(conversation_id, [m.to_dict() for m in messages], "message")
        done = await self._turns.send_live(conversation_id, messages, wait, idempotency_key)
        if done is not None:
            return done
        async with self._live.hold(conversation_id, wait) as held:
            opened = await self._live.open(conversation_id, held)
            if idempotency_key is not None:
                done = await self._turns.repeated(opened, idempotency_key)
                if done is not None:
                    return done
            answers = message_answers(opened.host.pending_requests, messages)
            if answers is not None:  # a remote agent's question: the message answers it
                return await self._respond(opened, answers, idempotency_key)
            recovered = await self._turns.before_message(opened)
            self._turns.last_step(opened, idempotency_key)
            events = await opened.attempt(self._turns.user_turn(opened, messages))
            result = turn_result(conversation_id, opened.host, events)
            result.recovered = recovered
            self._live.keep(opened)
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
        self._turns.check_size(conversation_id, [a.to_dict() for a in answers.values()], "answers")
        async with self._live.hold(conversation_id, wait) as held:
            opened = await self._live.open(conversation_id, held)
            if idempotency_key is not None:
                done = await self._turns.repeated(opened, idempotency_key)
                if done is not None:
                    return done
            # the caller's mistake, not the turn's: refused before anything runs, not counted
            responses = answers_by_request(conversation_id, answers, opened.host.pending_requests)
            return await self._respond(opened, responses, idempotency_key)

    async def _respond(
        self, opened: Opened, responses: dict[str, Content], idempotency_key: str | None
    ) -> HandoffTurnResult:
        """Carry the waiting turn on with ``responses``, by request id; its result."""
        self._turns.last_step(opened, idempotency_key)
        await opened.workflow.run(ReissueRequests())
        events = await opened.attempt(responses=responses)
        result = turn_result(opened.conversation_id, opened.host, events)
        self._live.keep(opened)
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
        event of the turn it ran. A turn abandoned first yields ``handoff_turn_abandoned``. A
        message that answers a remote agent's question (see :meth:`send`) streams the turn it
        carries on.
        """
        check_conversation_id(conversation_id)
        check_idempotency_key(idempotency_key)
        messages = user_messages(message)
        self._turns.check_size(conversation_id, [m.to_dict() for m in messages], "message")
        async with self._live.hold(conversation_id, wait) as held:
            opened = await self._live.open(conversation_id, held)
            if idempotency_key is not None:
                done = await self._turns.repeated(opened, idempotency_key)
                if done is not None:
                    yield WorkflowEvent(cast(Any, HANDOFF_TURN_EVENT), data=done)
                    return
            answers = message_answers(opened.host.pending_requests, messages)
            if answers is not None:  # a remote agent's question: the message answers it
                self._turns.last_step(opened, idempotency_key)
                await opened.workflow.run(ReissueRequests())
                async for event in self._streamed(opened, None, responses=answers):
                    yield event
                return
            recovered = await self._turns.before_message(opened)
            if recovered is not None and recovered.abandoned is not None:
                yield WorkflowEvent(
                    cast(Any, HANDOFF_TURN_ABANDONED_EVENT), data=recovered.abandoned
                )
            self._turns.last_step(opened, idempotency_key)
            turn = self._turns.user_turn(opened, messages)
            async for event in self._streamed(opened, recovered, turn):
                yield event

    async def _streamed(
        self,
        opened: Opened,
        recovered: HandoffTurnResult | None,
        command: object = None,
        responses: dict[str, Content] | None = None,
    ) -> AsyncIterator[WorkflowEvent[Any]]:
        """The events of ``opened``'s workflow run with ``command`` (or ``responses``), streamed.

        The turn's result gets ``recovered``; a failure of the turn is counted, then raised.
        """
        try:
            async for event in opened.workflow.run(command, stream=True, responses=responses):
                if event.type == HANDOFF_TURN_EVENT and isinstance(event.data, HandoffTurnResult):
                    event.data.recovered = recovered
                yield event
        except Exception as error:
            await opened.count_failure(error)
            raise
        if not opened.host.turn_open:
            self._live.keep(opened)

    async def pending(self, conversation_id: str) -> list[Content]:
        """The requests the conversation waits for (approvals, external calls, questions), in order.

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
        async with self._live.hold(conversation_id, wait):
            self._live.take(conversation_id)
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
        async with self._live.hold(conversation_id, wait) as held:
            return await self._turns.finish(await self._live.open(conversation_id, held))

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
        async with self._live.hold(conversation_id, wait) as held:
            return await self._turns.repeated(
                await self._live.open(conversation_id, held), idempotency_key
            )

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
        async with self._live.hold(conversation_id, wait) as held:
            try:
                opened = await self._live.open(conversation_id, held)
            except CorruptConversationError:  # a turn whose payloads no longer fit, say
                opened = await self._live.open(conversation_id, held, reuse=False, strict=False)
            host = opened.host
            if not host.turn_open:
                return None
            opened.journal.release_when_done = True
            event = TurnAbandonedEvent(
                "on_demand", host.next_agent or host.speaker, opened.failures, opened.last_error
            )
            result = await opened.give_up(event)
            self._live.keep(opened)
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
