"""The group-chat host: one executor that owns the shared history and runs the turn loop.

No ``from __future__ import annotations`` here: agent_framework reads handler annotations.
"""

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, cast

from agent_framework import (
    AgentResponseUpdate,
    Content,
    Executor,
    Message,
    WorkflowContext,
    WorkflowEvent,
    handler,
    register_checkpoint_type,
    response_handler,
)
from typing_extensions import override

from ._events import (
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_ESCALATED_EVENT,
    HANDOFF_EVENT,
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_TURN_EVENT,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffEvent,
    HandoffTurnResult,
)
from ._filtering import AgentView, HandoffToolCallFiltering
from ._group_chat import GroupChatManager
from ._participant import Participant
from ._requests import PendingRequests, requests_in
from ._workflow import MessageBatch
from .exceptions import SchemaVersionError

__all__ = ["DEFAULT_ESCALATION_MESSAGE", "GroupChatHost", "Participant", "TurnJournal"]

logger = logging.getLogger("handoff_builder")

STATE_SCHEMA_VERSION = 1
HOST_ID = "handoff_host"
DEFAULT_ESCALATION_MESSAGE = (
    "I'm sorry, I wasn't able to get your request to the right place. I'm passing this "
    "conversation to a human colleague, who will get back to you."
)


@dataclass(frozen=True)
class _Hop:
    """Self-addressed message: run ``agent`` next (one superstep, so one checkpoint, per hop)."""

    agent: str


register_checkpoint_type(_Hop)


@dataclass(frozen=True)
class _Reissue:
    """Ask again for the answers a restored host still waits for (hosted conversations)."""


register_checkpoint_type(_Reissue)

HostContext = WorkflowContext[_Hop, HandoffTurnResult | AgentResponseUpdate]


@dataclass
class _Turn:
    start: int
    handoffs: list[HandoffEvent] = field(default_factory=list[HandoffEvent])


def _event_type(event: HandoffEvent | HandoffBlockedEvent | EscalationEvent) -> str:
    if isinstance(event, HandoffEvent):
        return HANDOFF_EVENT
    if isinstance(event, HandoffBlockedEvent):
        return HANDOFF_BLOCKED_EVENT
    return HANDOFF_ESCALATED_EVENT


def _log(event: HandoffEvent | HandoffBlockedEvent | EscalationEvent) -> None:
    if isinstance(event, HandoffEvent):
        logger.info("handoff %s -> %s: %s", event.source, event.target, event.goal)
    elif isinstance(event, HandoffBlockedEvent):
        logger.warning(
            "blocked handoff from %s via %s (%s)", event.source, event.tool_name, event.reason
        )
    else:
        logger.warning(
            "escalated to a human: %s at %s (limit %d)", event.reason, event.agent, event.limit
        )


def _same(a: Message, b: Message) -> bool:
    return a is b or (
        a.role == b.role
        and a.author_name == b.author_name
        and [(c.type, c.call_id, c.text) for c in a.contents]
        == [(c.type, c.call_id, c.text) for c in b.contents]
    )


def _known_prefix(history: Sequence[Message], messages: Sequence[Message]) -> int:
    """How many leading ``messages`` repeat the whole history (``workflow.as_agent()`` resends it).

    0 unless ``messages`` starts with every message of ``history``, in order.
    """
    if not history or len(messages) <= len(history):
        return 0
    return len(history) if all(map(_same, history, messages)) else 0


class TurnJournal(Protocol):
    """Saves a host's progress; called after the user's input and before every agent call."""

    async def record(self, host: "GroupChatHost") -> None:
        """Persist what changed: the new messages of ``host.history`` and ``host.snapshot()``."""
        ...


class GroupChatHost(Executor):
    """Runs a group chat: keeps the shared, append-only history and asks a manager who speaks.

    A user message (``str``, ``Message`` or ``list[Message]``) starts a turn. Each agent
    invocation is one superstep (so one checkpoint); the turn ends when the manager returns
    ``None`` or asks to terminate, and yields a :class:`HandoffTurnResult`. In streaming runs
    every agent update is yielded as it arrives, with the agent's name as ``author_name``.

    Each agent reads its own view of the history (see :class:`HandoffToolCallFiltering`):
    ``filtering`` picks which of the other agents' tool calls it sees, and ``handoff_tools``
    names the tools that count as handoffs.
    """

    def __init__(
        self,
        *,
        participants: Mapping[str, Participant],
        manager: GroupChatManager,
        apology: str = DEFAULT_ESCALATION_MESSAGE,
        filtering: HandoffToolCallFiltering = HandoffToolCallFiltering.HANDOFF_ONLY,
        handoff_tools: frozenset[str] = frozenset(),
        output_agents: frozenset[str] | None = None,
        intermediate_agents: frozenset[str] = frozenset(),
        id: str = HOST_ID,  # noqa: A002 - the Executor API's name
    ) -> None:
        super().__init__(id)
        self._participants = participants
        self._manager = manager
        self._apology = apology
        self._history: list[Message] = []
        self._saved: list[dict[str, Any]] = []  # to_dict() of history[: len(_saved)], reused
        self._turn: _Turn | None = None
        self._speaker: str | None = None
        self._filtering = filtering
        self._handoff_tools = handoff_tools
        self._views: dict[str, AgentView] = {}
        self._pending = PendingRequests()
        self._output_agents = output_agents
        self._intermediate_agents = intermediate_agents
        self._next: str | None = None
        self.journal: TurnJournal | None = None

    def _new_view(self, name: str) -> AgentView:
        view = self._views[name] = AgentView(name, self._filtering, self._handoff_tools)
        return view

    @property
    def history(self) -> Sequence[Message]:
        """The shared conversation so far (read-only view)."""
        return self._history

    @property
    def manager(self) -> GroupChatManager:
        """The manager that picks speakers."""
        return self._manager

    # -- handlers ---------------------------------------------------------------------------------

    @handler
    async def handle_text(self, message: str, ctx: HostContext) -> None:
        """A user message as plain text."""
        await self._begin_turn([Message(role="user", contents=[message])], ctx)

    @handler
    async def handle_message(self, message: Message, ctx: HostContext) -> None:
        """One user message."""
        await self._begin_turn([message], ctx)

    @handler
    async def handle_messages(self, messages: list[Message], ctx: HostContext) -> None:
        """Several input messages (e.g. prior history plus the new user message)."""
        await self._begin_turn(messages, ctx)

    @handler
    async def handle_batch(self, message: MessageBatch, ctx: HostContext) -> None:
        """Several input messages, as :class:`HandoffWorkflow` passes a list.

        Found before ``handle_messages``: its type check is one ``isinstance``, not one per message.
        """
        await self._begin_turn(message, ctx)

    @handler
    async def handle_hop(self, hop: _Hop, ctx: HostContext) -> None:
        """Run the next speaker of the current turn."""
        await self._run_agent(hop.agent, ctx)

    @handler
    async def handle_reissue(self, message: _Reissue, ctx: HostContext) -> None:
        """Emit the pending requests again, under their ids, so that they can be answered."""
        del message
        for request_id, request in self._pending.requests.items():
            if request_id not in self._pending.answers:
                await ctx.request_info(request, Content, request_id=request_id)

    @property
    def pending_requests(self) -> list[Content]:
        """The requests (approvals, external calls) the open turn waits for."""
        return [
            request
            for request_id, request in self._pending.requests.items()
            if request_id not in self._pending.answers
        ]

    # -- the turn loop ----------------------------------------------------------------------------

    async def _begin_turn(self, messages: Sequence[Message], ctx: HostContext) -> None:
        if not messages:
            raise ValueError("A turn needs at least one input message; got an empty list.")
        if self._turn is not None:
            raise RuntimeError(
                "A turn is already in progress in this workflow; wait for its output before "
                "sending the next message."
            )
        self._history.extend(messages[_known_prefix(self._history, messages) :])
        self._turn = _Turn(start=len(self._history))
        self._manager.begin_turn()
        first = await self._manager.select_next_agent(self._history, None)
        self._next = first
        await self._record()
        await self._emit_events(ctx)
        if first is None:
            await self._end_turn(ctx)
        else:
            await self._run_agent(first, ctx)

    async def _run_agent(self, name: str, ctx: HostContext) -> None:
        participant = self._participants.get(name)
        if participant is None:
            await ctx.add_event(
                WorkflowEvent.warning(f"The manager selected unknown agent {name!r}.")
            )
            await self._end_turn(ctx)
            return
        if await self._manager.should_terminate(self._history):
            await self._emit_events(ctx)
            await self._end_turn(ctx)
            return
        self._manager.record_invocation()
        self._speaker = name
        on_update = self._update_sink(name, ctx)
        view = self._views.get(name) or self._new_view(name)
        response = await participant.run(view.update(self._history), on_update)
        delta = self._manager.update_history(name, list(response.messages))
        for message in delta:
            if message.author_name is None:
                message.author_name = name
        self._history.extend(delta)
        requests = requests_in(delta)
        if requests:
            await self._wait_for(name, requests, ctx)
            return
        following = await self._manager.select_next_agent(self._history, name)
        self._history.extend(self._manager.take_input())
        self._next = following
        if following is not None:
            await self._record()  # the next agent is saved before it is called
        await self._emit_events(ctx)
        if following is None:
            await self._end_turn(ctx)
        else:
            await ctx.send_message(_Hop(following))

    def _update_sink(
        self, name: str, ctx: HostContext
    ) -> Callable[[AgentResponseUpdate], Awaitable[None]] | None:
        """Where a streaming run sends an agent's updates (``None``: run it without streaming)."""
        if not ctx.is_streaming():
            return None
        if name in self._intermediate_agents:

            async def as_event(update: AgentResponseUpdate) -> None:
                await ctx.add_event(
                    WorkflowEvent(cast(Any, HANDOFF_INTERMEDIATE_EVENT), data=update)
                )

            return as_event
        if self._output_agents is None or name in self._output_agents:
            return ctx.yield_output
        return None

    async def _wait_for(self, name: str, requests: list[Content], ctx: HostContext) -> None:
        """Surface the agent's requests; the turn stays open until all are answered."""
        self._pending.open(name, requests)
        self._next = None
        await self._record()
        await self._emit_events(ctx)
        for request in requests:
            await ctx.request_info(request, Content, request_id=str(request.id))

    @response_handler
    async def handle_response(
        self, original_request: Content, response: Content, ctx: HostContext
    ) -> None:
        """An answer to a tool approval or an external function call; resumes the asking agent.

        A wrong answer (the wrong content type) is reported as an ``error`` event and the request
        stays pending under the same id, so nothing is lost: answer it again.
        """
        request_id = str(original_request.id)
        try:
            complete = self._pending.answer(request_id, response)
        except (TypeError, ValueError) as error:
            logger.warning("rejected an answer to request %s: %s", request_id, error)
            await ctx.add_event(WorkflowEvent.error(error))
            if request_id in self._pending.requests:
                await ctx.request_info(original_request, Content, request_id=request_id)
            return
        if not complete:
            return
        name = str(self._pending.agent)
        participant = self._participants[name]
        self._history.extend(await self._pending.resolve(participant.agent))
        await self._run_agent(name, ctx)

    async def _emit_events(self, ctx: HostContext) -> None:
        for event in self._manager.take_events():
            if isinstance(event, str):
                await ctx.add_event(WorkflowEvent.warning(event))
                continue
            _log(event)
            if isinstance(event, HandoffEvent) and self._turn is not None:
                self._turn.handoffs.append(event)
            await ctx.add_event(WorkflowEvent(cast(Any, _event_type(event)), data=event))

    async def _end_turn(self, ctx: HostContext) -> None:
        """Yield the turn's result; in streaming runs the messages went out as updates already."""
        turn = self._turn or _Turn(start=len(self._history))
        escalation: EscalationEvent | None = self._manager.escalation
        if escalation is not None:
            apology = Message(role="assistant", contents=[self._apology], author_name=self.id)
            self._history.append(apology)
            if ctx.is_streaming():
                await ctx.yield_output(
                    AgentResponseUpdate(
                        role="assistant", contents=list(apology.contents), author_name=self.id
                    )
                )
        result = HandoffTurnResult(
            messages=self._history[turn.start :],
            active_agent=self._speaker or "",
            handoffs=turn.handoffs,
            escalation=escalation,
            conversation=self._history,
        )
        self._turn = None
        self._next = None
        await self._record()
        await ctx.add_event(WorkflowEvent(cast(Any, HANDOFF_TURN_EVENT), data=result))
        if not ctx.is_streaming():
            await ctx.yield_output(result)

    # -- state: checkpoints and hosted conversations ---------------------------------------------

    @property
    def next_agent(self) -> str | None:
        """The agent that runs next in the open turn (``None`` between turns)."""
        return self._next

    @property
    def turn_open(self) -> bool:
        """True while a user turn has started and not yet ended."""
        return self._turn is not None

    def snapshot(self) -> dict[str, Any]:
        """The host's small state as JSON: everything but the history (which is append-only)."""
        turn = self._turn
        return {
            "schema_version": STATE_SCHEMA_VERSION,
            "manager": self._manager.save_state(),
            "speaker": self._speaker,
            "next": self._next,
            "pending": self._pending.to_state(),
            "turn": None
            if turn is None
            else {"start": turn.start, "handoffs": [asdict(h) for h in turn.handoffs]},
        }

    def load(self, history: Sequence[Message], state: Mapping[str, Any]) -> None:
        """Replace the host's conversation and state with saved ones (see :meth:`snapshot`).

        Raises:
            SchemaVersionError: the state was written by a newer version of handoff_builder.
        """
        version = int(state.get("schema_version", 0))
        if version > STATE_SCHEMA_VERSION:
            raise SchemaVersionError(
                f"Saved state of executor {self.id!r}", version, STATE_SCHEMA_VERSION
            )
        self._history = list(history)
        self._saved = []
        self._views.clear()  # rebuilt from the restored history on each agent's next run
        self._manager.restore_state(state.get("manager", {}))
        self._speaker = state.get("speaker")
        self._next = state.get("next")
        self._pending = PendingRequests.from_state(state.get("pending"))
        turn = state.get("turn")
        self._turn = (
            None
            if turn is None
            else _Turn(
                start=int(turn["start"]),
                handoffs=[HandoffEvent(**h) for h in turn.get("handoffs", [])],
            )
        )

    async def _record(self) -> None:
        """Let the journal (a hosted conversation's store) save what changed, if there is one."""
        if self.journal is not None:
            await self.journal.record(self)

    @override
    async def on_checkpoint_save(self) -> dict[str, Any]:
        """History (each message serialised once) and :meth:`snapshot`, as JSON."""
        self._saved.extend(message.to_dict() for message in self._history[len(self._saved) :])
        return {**self.snapshot(), "history": list(self._saved)}

    @override
    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`on_checkpoint_save` wrote."""
        saved = list(state.get("history", []))
        self.load([Message.from_dict(item) for item in saved], state)
        self._saved = saved
