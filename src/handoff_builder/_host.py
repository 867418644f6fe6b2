"""The group-chat host: one executor that owns the shared history and carries out decisions.

The host decides nothing itself (its manager does) and runs no agent itself: each agent call goes
out as an :class:`AgentCall` to its :class:`AgentRunner` and comes back as an ``AgentRun``
(:class:`LocalAgentRunner` runs it here, with :meth:`GroupChatHost.run_here`; a durable engine
runs it elsewhere). See docs/architecture.md.

No ``from __future__ import annotations`` here: agent_framework reads handler annotations.
"""

import asyncio
import contextlib
import copy
import json
import logging
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from agent_framework import (
    AgentResponse,
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
from typing_extensions import Self, override

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

from ._calls import (
    BESIDE_WAITING_RESULT,
    call_id_of,
    dangling_calls,
    delegate_result,
    requests_in,
    settle,
    unanswered,
)
from ._decision import (
    AgentReply,
    Decision,
    EndTurn,
    Escalate,
    Event,
    HandoffCall,
    NextAgent,
    ReviewVerdict,
    TurnStart,
)
from ._delegation import (
    DEFAULT_MAX_DELEGATION_DEPTH,
    Delegations,
    DelegationScope,
    HistoryMode,
    Suspension,
    delegate_key,
    settle_waiting,
)
from ._events import (
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_TURN_EVENT,
    EscalationEvent,
    HandoffEvent,
    HandoffTurnResult,
    RoutingStep,
    TurnAbandonedEvent,
    TurnStatus,
    TurnTimeoutEvent,
)
from ._hooks import DEFAULT_HOOK_TIMEOUT, HandoffGate
from ._input_filters import HandoffInput, filtered_input
from ._logging import ArgumentLogging, log_event
from ._manager import GroupChatManager
from ._model_inputs import ModelCallLog
from ._participant import AgentRun, Participant
from ._payloads import validate_arguments
from ._reply import hidden_after, status_of, steps_of, undecided, unless_cut_short
from ._requests import PendingRequests
from ._routes import HandoffRoute
from ._state import (
    Continuation,
    DelegationFrame,
    HostState,
    TurnRecord,
    TurnState,
    active_agent,
)
from ._telemetry import TurnTrace
from ._timeouts import DeadlinePassedError, within
from ._views import AgentView, HandoffToolCallFiltering
from ._workflow import MessageBatch
from .exceptions import CorruptStateError

__all__ = [
    "DEFAULT_AGENT_TIMEOUT",
    "DEFAULT_ESCALATION_MESSAGE",
    "DEFAULT_REVIEW_ESCALATION_MESSAGE",
    "DEFAULT_TURN_TIMEOUT",
    "GroupChatHost",
    "Participant",
    "ReissueRequests",
    "ResumeTurn",
    "TurnJournal",
    "UserTurn",
]

logger = logging.getLogger("handoff_builder")

HOST_ID = "handoff_host"
DEFAULT_AGENT_TIMEOUT = 120.0
"""Seconds one agent call may take, its own tool calls included, before the turn is cut short."""
DEFAULT_TURN_TIMEOUT = 600.0
"""Seconds one user turn may take, every agent call and handoff included."""
DEFAULT_REVIEW_ESCALATION_MESSAGE = (
    "I'm sorry, I couldn't get an answer ready that passed its review. I'm passing this "
    "conversation to a human colleague, who will get back to you."
)
"""What the user reads when a review escalates (unless ``escalation_message`` was given)."""
DEFAULT_ESCALATION_MESSAGE = (
    "I'm sorry, I wasn't able to get your request to the right place. I'm passing this "
    "conversation to a human colleague, who will get back to you."
)


class _Command:
    """A frozen message to the host; agent_framework's copy of it for its events is itself."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # ``copy.deepcopy`` hands the root object an empty memo (agent_framework's
        # executor_invoked event); inside something larger (a checkpoint) copy it field by field.
        if not memo:
            return self
        fields = {name: copy.deepcopy(value, memo) for name, value in vars(self).items()}
        return type(self)(**fields)


@dataclass(frozen=True)
class UserTurn(_Command):
    """A user turn, with the caller's instruction for where it starts.

    ``return_to_previous``: ``True`` starts at the agent that ended the last turn, ``False`` at
    the initial agent, ``None`` leaves it to the workflow's setting. Hosted conversations send
    their messages this way. The host never changes the messages.
    """

    messages: list[Message]
    return_to_previous: bool | None = None


@dataclass(frozen=True)
class ResumeTurn(_Command):
    """Finish an interrupted turn: run the agent that was about to answer (a no-op otherwise)."""


@dataclass(frozen=True)
class ReissueRequests(_Command):
    """Emit the requests the open turn waits for again, under their ids, so they can be answered."""


@dataclass(frozen=True)
class _Hop(_Command):
    """Self-addressed message: run ``agent`` next (one superstep, so one checkpoint, per hop)."""

    agent: str
    no_handoffs: bool = False  # run it with no handoff tools (a safe agent)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into checkpoints under the flag's earlier name, which earlier releases read.
        return {"agent": self.agent, "closed": self.no_handoffs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        flag = state.get("no_handoffs", state.get("closed", False))
        object.__setattr__(self, "agent", state["agent"])
        object.__setattr__(self, "no_handoffs", flag)


for _command in (UserTurn, ResumeTurn, ReissueRequests, _Hop):
    register_checkpoint_type(_command)

HostContext = WorkflowContext[_Hop, HandoffTurnResult | AgentResponseUpdate]


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


CallKind = Literal["run", "resolve", "carry_on"]
"""What an agent call does: ``run`` the agent; ``resolve`` the requests its run waited for,
now answered (approved tools run, declined ones refused); ``carry_on`` a delegation whose
expert waited for answers."""

Sink = Callable[[AgentResponseUpdate], Awaitable[None]]
"""Where a streaming run sends an agent's updates as they come."""


@dataclass(frozen=True)
class AgentCall:
    """One agent call, as a value: which agent, what it does, with what, within how long.

    ``no_handoffs``: it runs with no handoff tools (a safe agent the manager forced). ``seconds``:
    the call's deadline (``None``: none); past it the call raises :class:`DeadlinePassedError`.
    """

    agent: str
    kind: CallKind = "run"
    no_handoffs: bool = False
    seconds: float | None = None


class Streams(Protocol):
    """Where a streaming run's updates go, by who writes them (``None``: not streamed)."""

    def agent(self, name: str) -> Sink | None:
        """The sink of participant ``name``'s updates."""
        ...

    def expert(self, name: str) -> Sink | None:
        """The sink of expert ``name``'s updates, in a delegation."""
        ...


class AgentRunner(Protocol):
    """Where a host's agents run: the one seam between deciding and running.

    The host sends each agent call out as an :class:`AgentCall` and reads its run back as an
    :class:`AgentRun`; it never runs an agent itself. :class:`LocalAgentRunner`, the default,
    runs the call in this process (:meth:`GroupChatHost.run_here`); the Temporal workflow's
    runner sends it to an activity, where a host loaded with the same conversation runs it here.
    """

    async def run(self, call: AgentCall, streams: Streams | None) -> AgentRun:
        """Run ``call`` on the conversation as it stands (the host's history and state)."""
        ...


class LocalAgentRunner:
    """Runs a host's agent calls here, in this process, on the host's own views and gates."""

    def __init__(self, host: "GroupChatHost") -> None:
        self._host = host

    async def run(self, call: AgentCall, streams: Streams | None) -> AgentRun:
        """:meth:`GroupChatHost.run_here`."""
        return await self._host.run_here(call, streams)


class TurnJournal(Protocol):
    """Saves a host's progress; called after the user's input and before every agent call."""

    async def record(self, host: "GroupChatHost") -> None:
        """Persist what changed: the new messages of ``host.history`` and ``host.snapshot()``."""
        ...


class GroupChatHost(Executor):
    """Runs a group chat: keeps the shared, append-only history and carries out decisions.

    A user message (``str``, ``Message``, ``list[Message]`` or a :class:`UserTurn`) starts a turn.
    With ``superstep_per_hop`` each agent invocation is one superstep (so one checkpoint); without
    it the turn runs in one superstep. After each agent reply the
    manager returns one decision; the host adds the decision's input to the conversation,
    emits its events, and runs the next agent, or ends the turn and yields a
    :class:`HandoffTurnResult`. In streaming runs every agent update is yielded as it arrives,
    with the agent's name as ``author_name``.

    Each agent reads its own view of the history (see :class:`HandoffToolCallFiltering`):
    ``filtering`` picks which of the other agents' tool calls it sees, and ``handoff_tools``
    names the tools that count as handoffs. Every handoff is shown to the agents that did not
    make it as a note with its goal.
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
        argument_logging: ArgumentLogging | None = None,
        workflow_name: str = "handoff",
        agent_timeout: float | None = DEFAULT_AGENT_TIMEOUT,
        turn_timeout: float | None = DEFAULT_TURN_TIMEOUT,
        hook_timeout: float | None = DEFAULT_HOOK_TIMEOUT,
        experts: Mapping[str, Participant] | None = None,
        max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH,
        reviewed: frozenset[str] = frozenset(),
        apologies: Mapping[str, str] | None = None,
        model_calls: ModelCallLog | None = None,
        id: str = HOST_ID,  # noqa: A002 - the Executor API's name
    ) -> None:
        super().__init__(id)
        self.model_calls = model_calls
        """What each model received in the open turn, when the workflow records it
        (``with_model_inputs``): its participants' recorders write here, each turn's result
        takes the calls. ``None``: nothing is recorded."""
        self._experts = experts or {}
        """Agents as they answer delegated tasks (no handoff tools), by name."""
        self.max_delegation_depth = max_delegation_depth
        self._reviewed = reviewed  # producers whose replies a reviewer must approve
        self._expert_views: dict[tuple[str, HandoffToolCallFiltering], AgentView] = {}
        self.agent_timeout = agent_timeout
        """Seconds one agent call may take (``None``: no limit); past it the turn ends."""
        self.turn_timeout = turn_timeout
        """Seconds a turn may take (``None``: no limit), from its start or from where it
        resumed (after a restore, or once its requests were answered)."""
        self.hook_timeout = hook_timeout
        """Seconds an edge's hook may take to answer (``None``: no limit of its own)."""
        self._deadline: float | None = None  # the open turn's, on the event loop's clock
        self.last_result: HandoffTurnResult | None = None
        """The result of the last turn that ended in this host."""
        self._participants = participants
        self._manager = manager
        self._apology = apology
        self._apologies = dict(apologies or {})  # by escalation reason, where not the default
        self._history: list[Message] = []
        self._left_out: tuple[tuple[int, int], ...] = ()  # abandoned turns: in no agent's view
        self._saved: list[dict[str, Any]] = []  # to_dict() of history[: len(_saved)], reused
        self._turn: TurnState | None = None
        self._speaker: str | None = None
        self._filtering = filtering
        self._handoff_tools = handoff_tools
        self._views: dict[str, AgentView] = {}
        self._pending = PendingRequests()
        self._output_agents = output_agents
        self._intermediate_agents = intermediate_agents
        self._logging = argument_logging or ArgumentLogging()
        self._next: str | None = None
        self._next_no_handoffs = False  # the next agent runs with no handoff tools
        self.journal: TurnJournal | None = None
        self._workflow_name = workflow_name
        self._trace: TurnTrace | None = None
        self._paused: SpanContext | None = None  # the span of the run that waits for answers
        self.conversation_id: str | None = None
        """The hosted conversation's id, given to handoff hooks (``ConversationHost`` sets it)."""
        self._payload_models = {
            (route.source, name): route.payload
            for participant in participants.values()
            for name, route in participant.routes.items()
            if route.payload is not None
        }  # by source and tool: two sources may name their tools to one target alike
        self._input_filters = {
            (participant.name, name): (participant.routes[name].target, policy.input_filter)
            for participant in participants.values()
            for name, policy in participant.policies.items()
            if policy.input_filter is not None
        }  # by source and tool: the target and the filter of each edge that has one
        self.runner: AgentRunner = LocalAgentRunner(self)
        """Where the agents run (:class:`AgentRunner`): here by default. A durable engine runs
        each agent call as an activity instead (:meth:`run_here` on a host loaded with this one's
        history and state, in a worker); the decisions are still made here."""
        self.superstep_per_hop = True
        """Run each agent in its own superstep, so that a checkpoint is taken after every hop.

        :class:`HandoffWorkflow` sets it for each run: on when the run checkpoints, off otherwise
        (the whole turn then runs in one superstep, which saves agent_framework's superstep
        machinery, about 0.2 ms per hop). A host in a workflow of your own keeps it on.
        """

    def _view(self, name: str) -> AgentView:
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = self._new_view(name, self._filtering, filtered=True)
        return view

    def _new_view(
        self, name: str, mode: HandoffToolCallFiltering, *, filtered: bool = False
    ) -> AgentView:
        """A view of the history for ``name``, without the abandoned turns.

        ``filtered``: it stops at the handoffs into ``name`` whose edge has an input filter
        (an agent's own view; :meth:`_agent_view` runs the filters).
        """
        stops = (
            frozenset(edge for edge, (target, _) in self._input_filters.items() if target == name)
            if filtered
            else frozenset[tuple[str, str]]()
        )
        return AgentView(
            name, mode, self._handoff_tools, self.id, left_out=self._left_out, stops=stops
        )

    async def _agent_view(self, name: str) -> list[Message]:
        """What agent ``name`` reads when it runs now: its view, with its edges' input filters."""
        view = self._view(name)
        messages = view.update(self._history)
        while view.due is not None:
            due = view.due
            handoff = due.handoff.handoff
            _, function = self._input_filters[(handoff.source, handoff.tool_name)]
            model = self._payload_models.get((handoff.source, handoff.tool_name))
            if model is not None:
                payload, _ = validate_arguments(model, json.loads(handoff.goal or "{}"))
                handoff = replace(handoff, payload=payload)
            data = HandoffInput(due.messages, handoff, due.call, due.result, due.note)
            view.apply(await filtered_input(function, data))
            messages = view.update(self._history)
        return messages

    @property
    def history(self) -> Sequence[Message]:
        """The shared conversation so far (read-only view)."""
        return self._history

    @property
    def manager(self) -> GroupChatManager:
        """The manager that decides who speaks."""
        return self._manager

    def view_of(self, agent: str) -> list[Message]:
        """What ``agent`` would receive if it ran now: its view of the conversation.

        Without its edges' input filters, which run (they may wait) when the agent runs.
        """
        return list(self._new_view(agent, self._filtering).update(self._history))

    # -- handlers ---------------------------------------------------------------------------------

    @handler
    async def handle_text(self, message: str, ctx: HostContext) -> None:
        """A user message as plain text."""
        await self._begin_turn([Message(role="user", contents=[message])], None, ctx)

    @handler
    async def handle_message(self, message: Message, ctx: HostContext) -> None:
        """One user message."""
        await self._begin_turn([message], None, ctx)

    @handler
    async def handle_messages(self, messages: list[Message], ctx: HostContext) -> None:
        """Several input messages (e.g. prior history plus the new user message)."""
        await self._begin_turn(messages, None, ctx)

    @handler
    async def handle_batch(self, message: MessageBatch, ctx: HostContext) -> None:
        """Several input messages, as :class:`HandoffWorkflow` passes a list.

        Found before ``handle_messages``: its type check is one ``isinstance``, not one per message.
        """
        await self._begin_turn(message, None, ctx)

    @handler
    async def handle_user_turn(self, turn: UserTurn, ctx: HostContext) -> None:
        """A user turn with the caller's instruction for where it starts."""
        await self._begin_turn(turn.messages, turn.return_to_previous, ctx)

    @handler
    async def handle_hop(self, hop: _Hop, ctx: HostContext) -> None:
        """Run the next speaker of the current turn."""
        with self._failing_turn():
            decision = await self._run_agent(hop.agent, ctx, no_handoffs=hop.no_handoffs)
            await self._carry_out(decision, ctx, ran_agent=True)

    @handler
    async def handle_resume(self, message: ResumeTurn, ctx: HostContext) -> None:
        """Run the agent the open turn was about to call, if there is one."""
        del message
        if self._turn is not None and self._next is not None and not self._pending.requests:
            with self._failing_turn():
                decision = await self._run_agent(
                    self._next, ctx, no_handoffs=self._next_no_handoffs
                )
                await self._carry_out(decision, ctx, ran_agent=True)

    @handler
    async def handle_reissue(self, message: ReissueRequests, ctx: HostContext) -> None:
        """Emit the pending requests again, under their ids, so that they can be answered."""
        del message
        for request in self._pending.unanswered:
            await ctx.request_info(request, Content, request_id=str(request.id))

    @property
    def pending_agent(self) -> str | None:
        """The agent whose requests the open turn waits for (``None``: it waits for none)."""
        return None if self._pending.agent is None else str(self._pending.agent)

    @property
    def pending_requests(self) -> list[Content]:
        """The requests (approvals, external calls) the open turn waits for."""
        return self._pending.unanswered

    # -- the turn loop ----------------------------------------------------------------------------

    async def _begin_turn(
        self,
        messages: Sequence[Message],
        return_to_previous: bool | None,  # noqa: FBT001 - a tri-state, passed through
        ctx: HostContext,
    ) -> None:
        if not messages:
            raise ValueError("A turn needs at least one input message; got an empty list.")
        if self._turn is not None:
            raise RuntimeError(
                "A turn is already in progress in this workflow; wait for its output before "
                "sending the next message."
            )
        input_start = len(self._history)
        if self.model_calls is not None:
            self.model_calls.clear()
        self._history.extend(messages[_known_prefix(self._history, messages) :])
        self._turn = TurnState(start=len(self._history), input_start=input_start)
        self._trace = TurnTrace(self._workflow_name, self.conversation_id)
        self._deadline = None
        with self._failing_turn():
            start = TurnStart(self._speaker, return_to_previous)
            decision = await self._manager.start_turn(self._history, start)
            await self._carry_out(decision, ctx)

    @contextmanager
    def _failing_turn(self) -> Generator[None, None, None]:
        """End the turn's span with the error that escapes a step of the turn."""
        try:
            yield
        except BaseException as error:
            if self._trace is not None:
                self._trace.fail(error)
                self._trace = None
            raise

    async def _run_agent(
        self, name: str, ctx: HostContext, *, no_handoffs: bool = False
    ) -> Decision | None:
        """Run one agent and return the manager's decision (``None``: the turn waits).

        ``no_handoffs``: it runs with no handoff tools (a safe agent the manager forced).
        """
        participant = self._participants.get(name)
        if participant is None:
            warning = f"The manager selected unknown agent {name!r}."
            return EndTurn(events=(warning,))
        self._speaker = name
        limit, seconds = self._time_left()
        if seconds is not None and seconds <= 0:
            return self._timed_out(limit, name)
        call = AgentCall(name, "run", no_handoffs, seconds)
        try:
            with self._turn_trace().active():
                run = await self.runner.run(call, self._streams(ctx))
        except DeadlinePassedError:  # not a TimeoutError of the agent's own: that one is raised
            return self._timed_out(limit, name)
        delta = list(run.response.messages)
        for message in delta:
            if message.author_name is None:
                message.author_name = name
        self._history.extend(delta)
        dangling = dangling_calls(delta)
        if dangling:
            self._history.append(settle(dangling, name))
        requests = requests_in(delta)
        waiting = await self._add_delegations(run, ctx)
        if waiting is not None:
            requests = self._delegation_waits(waiting, requests, name)
        reply = AgentReply(
            name, tuple(delta), run.calls, unfinished=bool(requests), disabled=run.disabled,
            verdict=run.verdict, tool_limit=run.tool_limit,
        )  # fmt: skip
        decision = unless_cut_short(reply, await self._manager.decide(self._history, reply))
        frames = waiting.frames if waiting is not None else ()
        if requests and isinstance(decision, NextAgent):
            await self._wait_for(name, requests, decision, ctx, frames)
            return None
        if requests:
            self._history.extend(self._settlement(requests, frames, name, status_of(decision)))
        return decision

    def routes_of(self, name: str) -> Mapping[str, HandoffRoute]:
        """Agent ``name``'s handoff routes, by tool name."""
        return self._participants[name].routes

    def route_of(self, name: str, tool_name: str) -> HandoffRoute:
        """The route a call of agent ``name`` to ``tool_name`` reads as.

        One of its handoff routes, or, for a handoff it does not have, the route it would be.
        """
        return self._participants[name].route_of(tool_name)

    async def run_here(self, call: AgentCall, streams: Streams | None = None) -> AgentRun:
        """Run ``call`` here, on the conversation as it stands, within ``call.seconds``.

        What :class:`LocalAgentRunner` does, and a worker does for a durable engine: the agent
        gets its view, its handoff calls are vetted by this host's manager (with its saved
        counters) and admitted by its gate, its delegations run its experts. The conversation is
        not changed: the host that sent the call takes the run and decides.
        """
        if call.kind == "run":
            work = self._invoke_here(call, streams)
        elif call.kind == "resolve":
            work = self._resolve_here(streams)
        else:
            work = self._carry_on_here(streams)
        return await within(call.seconds, work)

    async def _invoke_here(self, call: AgentCall, streams: Streams | None) -> AgentRun:
        participant = self._participants.get(call.agent)
        if participant is None:
            raise ValueError(f"No agent named {call.agent!r} in this workflow.")
        delegations = self._delegations(streams) if participant.delegates else None
        run = await participant.run(
            await self._agent_view(call.agent),
            None if streams is None else streams.agent(call.agent),
            self._manager.vet_handoff,
            self._gate_for(participant, no_handoffs=call.no_handoffs),
            delegations,
        )
        return _with_delegations(run, delegations)

    async def _resolve_here(self, streams: Streams | None) -> AgentRun:
        """The waiting agent's answered requests carried out.

        Its run: the messages that settle them (approved tools run, declined ones refused), its
        answered handoff calls, vetted, a reviewer's verdict among them, and the delegations
        that approved delegate calls made.
        """
        pending = self._pending
        name = str(pending.agent)
        then = pending.then or Continuation(name)
        participant = self._participants[name]
        gate = self._gate_for(participant, no_handoffs=then.no_handoffs and then.agent == name)
        delegations = None
        if participant.delegates:  # an expert reads the history as it was before the calls
            start = self._message_with(list(pending.requests.values()))
            delegations = self._delegations(streams, history_end=start)
        verdicts: list[ReviewVerdict] = []
        messages, calls = await pending.resolve(
            participant, self._manager.vet_handoff, gate, delegations=delegations, verdicts=verdicts
        )
        verdict = verdicts[0] if verdicts else None
        run = AgentRun(AgentResponse(messages=messages), calls, frozenset(), verdict)
        return _with_delegations(run, delegations)

    async def _carry_on_here(self, streams: Streams | None) -> AgentRun:
        """The answers are an expert's, in a delegation that waited: the expert carries on.

        Its answer goes out through the frames above it. The run's one message is the result of
        the caller's delegate call for the shared history; none when an expert waits again
        (``suspension``).
        """
        pending = self._pending
        frames = pending.frames
        inner = frames[-1]
        delegations = self._delegations(streams, frames, history_end=frames[0].history_end)
        result: str | None = None
        if not inner.started:  # the delegate call itself waited for approval
            answer = next(iter(pending.answers.values()))
            if answer.approved:
                result = await delegations.run(replace(inner, started=True))
            else:
                result = delegations.decline(inner)
            result = await delegations.carry_on(frames, result)
        else:
            expert = self._experts[inner.expert]
            nested = Delegations(delegations.scope, inner.depth, delegations.records)
            resolved, _ = await pending.resolve(
                expert, self._manager.vet_handoff, self._gate_for(expert), delegations=nested
            )
            moved = replace(inner, messages=(*inner.messages, *resolved))
            if nested.suspension is not None:  # an approved delegate of the expert waits in turn
                inside = nested.suspension
                delegations.suspension = Suspension(
                    (*frames[:-1], moved, *inside.frames), inside.requests
                )
            else:
                result = await delegations.carry_on(frames, await delegations.run(moved))
        outer = frames[0]
        waits = result is None and delegations.suspension is not None
        messages = [] if waits else [delegate_result(outer.call_id, str(result), outer.caller)]
        run = AgentRun(AgentResponse(messages=messages), (), frozenset())
        return _with_delegations(run, delegations)

    def _delegation_waits(
        self, waiting: Suspension, requests: Sequence[Content], name: str
    ) -> list[Content]:
        """The caller's call waits with its expert: the expert's requests, the rest settled."""
        held = waiting.frames[0].call_id
        others = [r for r in requests if call_id_of(r) != held]
        if others:
            text = BESIDE_WAITING_RESULT.format(tool=waiting.frames[0].tool_name)
            self._history.extend(unanswered(others, name, "waiting", text=text))
        return list(waiting.requests)

    def _delegations(
        self,
        streams: Streams | None,
        waiting: Sequence[DelegationFrame] = (),
        *,
        history_end: int | None = None,
    ) -> Delegations:
        """What one run's delegations need, with this turn's calls of each delegate counted.

        ``waiting``: the frames of a delegation that carries on; their calls count too.
        ``history_end``: experts read the shared history up to there, not to its end (the
        caller's response that made the calls is in the history by then).
        """
        used: dict[str, int] = {}
        finished = self._turn.delegations if self._turn is not None else ()
        calls = [(r.caller, r.tool_name) for r in finished if r.outcome != "refused"]
        calls += [(frame.caller, frame.tool_name) for frame in waiting]
        for caller, tool_name in calls:
            key = delegate_key(caller, tool_name)
            used[key] = used.get(key, 0) + 1

        def on_update(expert: str) -> Sink | None:
            return None if streams is None else streams.expert(expert)

        scope = DelegationScope(
            experts=self._experts,
            inputs=self._expert_input,
            history_length=(
                (lambda: len(self._history)) if history_end is None else (lambda: history_end)
            ),
            on_update=on_update,
            max_depth=self.max_delegation_depth,
            used=used,
        )
        return Delegations(scope)

    def _expert_input(self, expert: str, history: HistoryMode, end: int) -> list[Message]:
        """What ``expert`` reads of the first ``end`` shared messages before its task."""
        if history == "none":
            return []
        if end < len(self._history):  # a delegation carried on later: read that prefix afresh
            mode = self._filtering if history == "filtered" else HandoffToolCallFiltering.NONE
            return self._new_view(expert, mode).update(self._history[:end])
        mode = self._filtering if history == "filtered" else HandoffToolCallFiltering.NONE
        view = self._expert_views.get((expert, mode))
        if view is None:
            view = self._expert_views[expert, mode] = self._new_view(expert, mode)
        return list(view.update(self._history))

    async def _add_delegations(self, run: AgentRun, ctx: HostContext) -> Suspension | None:
        """The run's finished delegations: into the turn (with their steps), then their events.

        Returns the delegation that waits, if one does.
        """
        records = list(run.delegations)
        if not records:
            return run.suspension
        turn = self._turn or TurnState(start=len(self._history))
        turn = replace(turn, delegations=(*turn.delegations, *records))
        steps = [
            RoutingStep("delegate", "model", record.tool_name, record.caller, record.expert)
            for record in records
            if record.outcome != "refused"
        ]
        self._turn = self._with_steps(turn, steps)
        await self._emit(records, ctx)
        return run.suspension

    def _settlement(
        self, requests: Sequence[Content], frames: Sequence[Any], agent: str, status: str
    ) -> list[Message]:
        """Results for requests the turn ends without: the waiting delegate call, or each one."""
        if frames:
            return settle_waiting(frames, status)
        return unanswered(requests, agent, status)

    async def _carry_out(
        self,
        decision: Decision | None,
        ctx: HostContext,
        *,
        ran_agent: bool = False,
        carrying_on: bool = False,
        traced: bool = False,
        source: str | None = None,
    ) -> None:
        """Apply decisions until the turn ends or waits.

        Each :class:`NextAgent` counts one agent invocation (unless the first one only lets an
        agent carry on after its requests were answered: ``carrying_on``), adds its input and
        emits its events, then its agent runs: in this superstep, or, when every hop is its own
        superstep (``superstep_per_hop``) and an agent already ran in this one (``ran_agent``), in
        the next. A :class:`NextAgent` past the manager's ``max_iterations`` ends the turn with an
        escalation instead, whatever the manager. Each decision's routing steps go into the
        turn's trace, except for the first one when it was traced already (``traced``: the hop a
        turn that waited for answers now makes); an agent that carries on adds only its refused
        calls. ``source`` is the agent whose reply led to the first decision.
        """
        if source is None and (ran_agent or carrying_on):
            source = self._speaker
        while isinstance(decision, NextAgent):
            turn = self._turn or TurnState(start=len(self._history))
            if decision.handoff is not None:
                turn = turn.with_handoff(decision.handoff)
            steps = [] if traced else steps_of(decision, source, turn, type(self._manager).__name__)
            if carrying_on:  # its refused calls, and a step its manager named
                steps = [s for s in steps if s.kind == "blocked" or s is decision.step]
            turn = self._with_steps(turn, steps)
            traced = False
            if not carrying_on:
                if turn.invocations >= self._manager.max_iterations and not decision.no_handoffs:
                    self._turn = turn
                    await self._emit(decision.events, ctx)
                    decision = self._past_invocation_cap(decision)
                    break
                # A new invocation: its own messages start after its input.
                since = len(self._history) + len(decision.input)
                turn = replace(turn, invocations=turn.invocations + 1, since=since)
            carrying_on = False
            self._turn = turn
            if decision.input:
                self._history.extend(decision.input)
            self._next, self._next_no_handoffs = decision.agent, decision.no_handoffs
            await self._record()  # the next agent is saved before it is called
            await self._emit(decision.events, ctx)
            if self.superstep_per_hop and ran_agent:
                await ctx.send_message(_Hop(decision.agent, decision.no_handoffs))
                return
            ran_agent = True
            source = decision.agent
            decision = await self._run_agent(decision.agent, ctx, no_handoffs=decision.no_handoffs)
        if decision is not None:
            await self._conclude(decision, source, ctx)

    async def _conclude(
        self, decision: EndTurn | Escalate, source: str | None, ctx: HostContext
    ) -> None:
        """The turn ends: its last steps and events, then its result."""
        turn = self._turn or TurnState(start=len(self._history))
        self._turn = self._with_steps(
            turn, steps_of(decision, source, turn, type(self._manager).__name__)
        )
        await self._emit(decision.events, ctx)
        if isinstance(decision, Escalate):
            await self._end_turn(ctx, decision.status, decision.escalation)
        else:
            timeout = next((e for e in decision.events if isinstance(e, TurnTimeoutEvent)), None)
            await self._end_turn(ctx, decision.status, timeout=timeout)

    def _with_steps(self, turn: TurnState, steps: Sequence[RoutingStep]) -> TurnState:
        """The turn with these steps in its trace (and as span events of the turn).

        Some steps also mark what the turn's reply leaves out: a draft a reviewer sent back (or
        that escalated) and the review itself (an approved reply stays, its review does not);
        the run of an agent whose blocked handoff forced a safe agent or an escalation.
        """
        trace = self._turn_trace()
        for step in steps:
            trace.step(step)
            end = len(self._history)
            turn, producer = hidden_after(turn.with_step(step), step, end, self._reviewed)
            if producer is not None:  # its review is closed: the producer is the active agent
                self._speaker = producer
        return turn

    def _time_left(self) -> tuple[Literal["agent_call", "turn"], float | None]:
        """Which deadline the next agent call runs against, and its seconds (``None``: none)."""
        loop = asyncio.get_running_loop()
        if self._deadline is None and self.turn_timeout is not None:
            self._deadline = loop.time() + self.turn_timeout  # the turn started or resumed
        left = None if self._deadline is None else self._deadline - loop.time()
        if left is not None and (self.agent_timeout is None or left < self.agent_timeout):
            return "turn", left
        return "agent_call", self.agent_timeout

    def _timed_out(self, limit: Literal["agent_call", "turn"], agent: str) -> EndTurn:
        seconds = self.agent_timeout if limit == "agent_call" else self.turn_timeout
        event = TurnTimeoutEvent(limit, agent, float(seconds or 0.0))
        status: TurnStatus = "agent_timeout" if limit == "agent_call" else "turn_timeout"
        return EndTurn(status, events=(event,))

    def abandon_turn(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        """Close the open turn without running anything more; its result (status ``abandoned``).

        Requests it waited for get a "not answered" result, so that no call is left without one
        and the history stays valid for every provider. The turn, from the user's input on,
        stays in the history but leaves every agent's view: whatever made it fail (a message
        a provider refuses, say) does not reach a model again. Used by ``ConversationHost`` for
        a turn that keeps failing, and by ``ConversationHost.abandon``.
        """
        turn = self._turn or TurnState(start=len(self._history))
        requests = list(self._pending.requests.values())
        if requests:
            agent = str(self._pending.agent or self._speaker or self.id)
            frames = self._pending.frames
            self._extend_after_wait(self._settlement(requests, frames, agent, "abandoned"))
        self._pending = PendingRequests()
        self._left_out = (*self._left_out, (turn.input_from(self._history), len(self._history)))
        self._views.clear()  # rebuilt without the turn on each agent's next run
        self._expert_views.clear()
        log_event(f"turn abandoned ({event.reason}, {event.attempts} failed attempt(s)): "
                  f"{event.error or 'no error'}", self._logging)  # fmt: skip
        return self._close_turn(turn, "abandoned", abandoned=event)

    def _past_invocation_cap(self, decision: NextAgent) -> Escalate:
        """The host's own cap: the manager asked for one invocation too many."""
        handoff = decision.handoff
        escalation = EscalationEvent(
            "max_iterations",
            self._speaker or decision.agent,
            self._manager.max_iterations,
            decision.agent,
            handoff.goal if handoff is not None else None,
        )
        return Escalate(escalation, events=(escalation,))

    def update_sink(self, name: str, ctx: HostContext) -> Sink | None:
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

    async def _wait_for(
        self,
        name: str,
        requests: list[Content],
        then: NextAgent,
        ctx: HostContext,
        frames: Sequence[DelegationFrame] = (),
        *,
        traced: bool = False,
    ) -> None:
        """Surface the agent's requests; the turn stays open until all are answered.

        ``then`` is carried out once they are: a handoff made in the same response stands.
        ``frames``: the requests are an expert's, in a delegation of ``name`` that waits.
        ``traced``: ``then`` was traced already (the turn waited before, and waits again).
        """
        carried = tuple(message.to_dict() for message in then.input)
        waiting = Continuation(then.agent, then.handoff, carried, then.no_handoffs)
        self._pending.open(name, requests, waiting, tuple(frames))
        if self._turn is not None and not traced:
            steps = steps_of(then, name, self._turn, type(self._manager).__name__)
            if then.handoff is None and then.step is None and then.agent == name:
                steps = [step for step in steps if step.kind == "blocked"]  # no hop: it waits
            self._turn = self._with_steps(self._turn, steps)
        if then.handoff is not None and self._turn is not None and not traced:
            self._turn = self._turn.with_handoff(then.handoff)
        self._next = None
        self._deadline = None  # a person may take long: the turn's deadline starts again after
        await self._record()
        await self._emit(then.events, ctx)
        self._paused = self._turn_trace().pause()
        self._trace = None
        for request in requests:
            await ctx.request_info(request, Content, request_id=str(request.id))

    @response_handler
    async def handle_response(
        self, original_request: Content, response: Content, ctx: HostContext
    ) -> None:
        """An answer to a tool approval or an external function call; the turn goes on.

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
        if complete:
            with self._failing_turn():
                await self._resume_after_answers(ctx)

    async def _resume_after_answers(self, ctx: HostContext) -> None:
        name = str(self._pending.agent)
        then = self._pending.then or Continuation(name)
        frames = self._pending.frames
        saved = self._pending.to_state()
        limit, seconds = self._time_left()
        calls: tuple[HandoffCall, ...] = ()
        verdict: ReviewVerdict | None = None
        try:
            with self._turn_trace().active():  # approved handoffs' spans are the turn's
                if frames:
                    answered = await self._carry_on_delegation(seconds, ctx)
                    if answered is None:
                        return  # an expert waits again
                    messages = answered
                else:
                    resolved = await self._resolve_answers(seconds, ctx)
                    if resolved is None:
                        return  # an approved delegation waits for a person in turn
                    messages, calls, verdict = resolved
        except DeadlinePassedError:  # an approved tool that hangs: the turn ends, its calls settled
            requests = [Content.from_dict(item) for item in saved.requests] if saved else []
            self._extend_after_wait(self._settlement(requests, frames, name, "timed out"))
            self._pending = PendingRequests()
            await self._carry_out(self._timed_out(limit, name), ctx)
            return
        except BaseException:
            # Not applied (a hook raised): the requests wait again, to be reissued and answered.
            self._pending = PendingRequests.from_state(saved)
            self._pending.answers = {}
            raise
        self._extend_after_wait(messages)
        carried = tuple(Message.from_dict(item) for item in then.input)
        decision: Decision = NextAgent(
            then.agent, input=carried, no_handoffs=then.no_handoffs
        )  # decided then
        decides = bool(calls or verdict) and undecided(then, name)
        if decides:  # approved handoff calls, or a verdict: the manager decides again
            reply = AgentReply(name, tuple(messages), calls, unfinished=True, verdict=verdict)
            decision = await self._manager.decide(self._history, reply)
        carrying_on = (
            isinstance(decision, NextAgent)
            and decision.agent == name
            and decision.handoff is None
            and then.handoff is None
        )
        # The hop decided with the requests was traced when the turn began to wait.
        traced = not decides and not carrying_on
        await self._carry_out(decision, ctx, carrying_on=carrying_on, traced=traced, source=name)

    async def _resolve_answers(
        self, seconds: float | None, ctx: HostContext
    ) -> tuple[list[Message], tuple[HandoffCall, ...], ReviewVerdict | None] | None:
        """The answers applied, by the runner, within ``seconds``.

        Returns the messages that settle the requests, the answered handoff calls and a
        reviewer's verdict; ``None`` when an approved delegation waits for a person in turn.
        """
        pending = self._pending
        name = str(pending.agent)
        then = pending.then or Continuation(name)
        run = await self.runner.run(AgentCall(name, "resolve", seconds=seconds), self._streams(ctx))
        pending.requests, pending.answers, pending.agent = {}, {}, None  # answered
        messages, calls, verdict = list(run.response.messages), run.calls, run.verdict
        waiting = await self._add_delegations(run, ctx)
        if waiting is None:
            return messages, calls, verdict
        # An approved delegation waits in turn: what the batch decided is decided now, and
        # carried out once the delegation is answered.
        self._extend_after_wait(messages)
        self._pending = PendingRequests()
        carried = tuple(Message.from_dict(item) for item in then.input)
        decision: Decision = NextAgent(
            then.agent, then.handoff, carried, no_handoffs=then.no_handoffs
        )
        decides = bool(calls or verdict) and undecided(then, name)
        if decides:
            reply = AgentReply(name, tuple(messages), calls, unfinished=True, verdict=verdict)
            decision = await self._manager.decide(self._history, reply)
        if isinstance(decision, NextAgent):
            requests = list(waiting.requests)
            await self._wait_for(name, requests, decision, ctx, waiting.frames, traced=not decides)
        else:  # the turn ends now: the waiting delegation's call is closed
            self._history.extend(settle_waiting(waiting.frames, status_of(decision)))
            await self._carry_out(decision, ctx, source=name)
        return None

    def _extend_after_wait(self, messages: Sequence[Message]) -> None:
        """Add the answers of a run that waited.

        When that run is left out of the turn's reply (a hidden range ends where the history
        does), so are its answers.
        """
        turn = self._turn
        end = len(self._history)
        self._history.extend(messages)
        if turn is not None and turn.hidden and turn.hidden[-1][1] == end:
            start = turn.hidden[-1][0]
            hidden = (*turn.hidden[:-1], (start, len(self._history)))
            self._turn = replace(turn, hidden=hidden)

    def _message_with(self, requests: Sequence[Content]) -> int:
        """The index of the first history message holding a call one of ``requests`` is about.

        The end of the history if none does.
        """
        wanted = {call_id_of(request) for request in requests}
        for index, message in enumerate(self._history):
            if any(c.type == "function_call" and c.call_id in wanted for c in message.contents):
                return index
        return len(self._history)

    async def _wait_again(self, requests: Sequence[Content], ctx: HostContext) -> None:
        """The open turn waits for more answers (the pending requests are set): save, ask."""
        self._deadline = None
        await self._record()
        self._paused = self._turn_trace().pause()
        self._trace = None
        for request in requests:
            await ctx.request_info(request, Content, request_id=str(request.id))

    async def _carry_on_delegation(
        self, seconds: float | None, ctx: HostContext
    ) -> list[Message] | None:
        """The answers are an expert's: it carries on, by the runner, within ``seconds``.

        Returns the result of the caller's delegate call for the shared history, or ``None``
        when an expert waits again.
        """
        pending = self._pending
        caller = str(pending.agent)
        then = pending.then or Continuation(caller)
        call = AgentCall(caller, "carry_on", seconds=seconds)
        run = await self.runner.run(call, self._streams(ctx))
        waiting = await self._add_delegations(run, ctx)
        self._pending = PendingRequests()
        if waiting is not None and not run.response.messages:
            self._pending.open(caller, list(waiting.requests), then, waiting.frames)
            await self._wait_again(waiting.requests, ctx)
            return None
        return list(run.response.messages)

    def _streams(self, ctx: HostContext) -> Streams | None:
        """Where this run's updates go: the run's output and events (``None``: not streamed)."""
        return _ContextStreams(self, ctx) if ctx.is_streaming() else None

    def _gate_for(self, participant: Participant, *, no_handoffs: bool = False) -> HandoffGate:
        """What the participant's edges allow in this run, asked with the conversation so far."""
        return HandoffGate(
            participant.policies,
            self._history,
            self.conversation_id,
            no_handoffs=no_handoffs,
            timeout=self.hook_timeout,
        )

    def _turn_trace(self) -> TurnTrace:
        """The open turn's trace (a turn restored from a checkpoint or a store starts a new one)."""
        if self._trace is None:
            self._trace = TurnTrace(self._workflow_name, self.conversation_id, self._paused)
            self._paused = None
        return self._trace

    async def _emit(self, events: Sequence[Event], ctx: HostContext) -> None:
        trace = self._turn_trace() if events else None
        for event in events:
            log_event(event, self._logging)
            if trace is not None:
                trace.record(event)
            if isinstance(event, str):
                await ctx.add_event(WorkflowEvent.warning(event))
                continue
            await ctx.add_event(WorkflowEvent(cast(Any, event.event_type), data=event))

    async def _end_turn(
        self,
        ctx: HostContext,
        status: TurnStatus,
        escalation: EscalationEvent | None = None,
        *,
        timeout: TurnTimeoutEvent | None = None,
    ) -> None:
        """Yield the turn's result; in streaming runs the messages went out as updates already."""
        turn = self._turn or TurnState(start=len(self._history))
        if escalation is not None:
            text = self._apologies.get(escalation.reason, self._apology)
            apology = Message(role="assistant", contents=[text], author_name=self.id)
            self._history.append(apology)
            if ctx.is_streaming():
                await ctx.yield_output(
                    AgentResponseUpdate(
                        role="assistant", contents=list(apology.contents), author_name=self.id
                    )
                )
        self._turn_trace().end(status, len(turn.handoffs))
        self._trace = None
        result = self._close_turn(turn, status, escalation=escalation, timeout=timeout)
        await self._record()
        await ctx.add_event(WorkflowEvent(cast(Any, HANDOFF_TURN_EVENT), data=result))
        if not ctx.is_streaming():
            await ctx.yield_output(result)

    def _close_turn(
        self,
        turn: TurnState,
        status: TurnStatus,
        *,
        escalation: EscalationEvent | None = None,
        timeout: TurnTimeoutEvent | None = None,
        abandoned: TurnAbandonedEvent | None = None,
    ) -> HandoffTurnResult:
        """The turn is over: its result, and the host between turns again."""
        if turn.review is not None:  # closed with a review open (abandoned): the draft stays out
            draft, _, producer = turn.review
            turn = replace(turn, hidden=(*turn.hidden, (draft, len(self._history))))
            self._speaker = producer
        elif abandoned is not None and self._speaker in self._reviewed:  # never reviewed
            turn = replace(turn, hidden=(*turn.hidden, (turn.since, len(self._history))))
        record = TurnRecord(
            turn.start, len(self._history), status, self._speaker or "", turn.handoffs,
            escalation, timeout, abandoned, turn.steps, turn.delegations, turn.hidden,
        )  # fmt: skip
        calls = self.model_calls.take() if self.model_calls is not None else ()
        result = record.result(self._history, model_calls=calls)
        self._turn, self._next, self._next_no_handoffs, self._deadline = None, None, False, None
        self.last_result = result
        return result

    # -- state: checkpoints and hosted conversations ---------------------------------------------

    @property
    def next_agent(self) -> str | None:
        """The agent that runs next in the open turn (``None`` between turns)."""
        return self._next

    @property
    def turn_open(self) -> bool:
        """True while a user turn has started and not yet ended."""
        return self._turn is not None

    @property
    def speaker(self) -> str | None:
        """The agent that ran last (it ended the last turn, between turns)."""
        return self._speaker

    @property
    def active_agent(self) -> str | None:
        """The agent the conversation is with: where the open turn goes on, or the next starts.

        In an open turn, the agent whose requests it waits for, else the one about to run (saved
        before it is called); between turns, the agent that ended the last one.
        """
        waiting = self.pending_agent
        return active_agent(self._speaker, self._next, waiting, turn_open=self._turn is not None)

    def state(self) -> HostState:
        """The host's small state: everything but the history (which is append-only)."""
        return HostState(
            speaker=self._speaker,
            next=self._next,
            next_no_handoffs=self._next_no_handoffs,
            turn=self._turn,
            pending=self._pending.to_state(),
            manager=self._manager.save_state(),
            left_out=self._left_out,
        )

    def snapshot(self) -> dict[str, Any]:
        """:meth:`state` as JSON."""
        from ._state import encode_host_state

        return encode_host_state(self.state())

    def load(self, history: Sequence[Message], state: HostState, *, strict: bool = True) -> None:
        """Replace the host's conversation and state with saved ones (see :meth:`state`).

        With ``strict=False`` an open turn whose handoff payloads no longer fit their models keeps
        them as saved (JSON), and a manager state that no longer loads starts afresh: enough to
        abandon that turn (the manager's state is reset at every new turn anyway).

        Raises:
            CorruptStateError: (``strict``) a payload or the manager's state does not load.
        """
        turn = state.turn
        if strict or turn is None:
            turn = self._with_payloads(turn)  # before anything changes: it may be refused
        else:
            with contextlib.suppress(CorruptStateError):
                turn = self._with_payloads(turn)
        try:
            self._manager.restore_state(state.manager)
        except CorruptStateError:
            if strict:
                raise
            self._manager.restore_state({})
        self._history = list(history)
        if self.model_calls is not None:
            self.model_calls.clear()  # calls of the turn the host had before
        self._left_out = state.left_out
        self._saved = []
        self._views.clear()  # rebuilt from the restored history on each agent's next run
        self._expert_views.clear()
        self._speaker = state.speaker
        self._next, self._next_no_handoffs = state.next, state.next_no_handoffs
        self._pending = PendingRequests.from_state(state.pending)
        self._turn = turn

    def _with_payloads(self, turn: TurnState | None) -> TurnState | None:
        """The turn with its handoffs' payloads read back into their models (stored as JSON).

        Raises:
            CorruptStateError: a stored payload does not fit its edge's model (it changed since).
        """
        if turn is None or not any(isinstance(h.payload, dict) for h in turn.handoffs):
            return turn
        handoffs: list[HandoffEvent] = []
        for handoff in turn.handoffs:
            model = self._payload_models.get((handoff.source, handoff.tool_name))
            if isinstance(handoff.payload, dict) and model is not None:
                # our own record of a validated payload: read back as it was written
                payload, problem = validate_arguments(model, handoff.payload, strict=False)
                if problem is not None:
                    raise CorruptStateError(
                        f"The open turn saved by executor {self.id!r}",
                        f"the payload of the handoff from {handoff.source} to {handoff.target} "
                        f"({handoff.tool_name}) does not fit {model.__name__}: {problem}",
                    )
                handoff = replace(handoff, payload=payload)
            handoffs.append(handoff)
        return replace(turn, handoffs=tuple(handoffs))

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
        """Restore what :meth:`on_checkpoint_save` wrote.

        Raises:
            SchemaVersionError: the state was written by a newer version of handoff_builder.
            CorruptStateError: the state is not valid.
        """
        from ._state import decode_host_state

        saved = list(state.get("history", []))
        where = f"Saved state of executor {self.id!r}"
        host_state = decode_host_state({k: v for k, v in state.items() if k != "history"}, where)
        self.load([Message.from_dict(item) for item in saved], host_state)
        self._saved = saved


class _ContextStreams:
    """A streaming run's sinks, on its workflow context.

    A participant's updates go where the host streams them (its output, an intermediate event,
    or nowhere); an expert's are intermediate events under its name.
    """

    def __init__(self, host: GroupChatHost, ctx: HostContext) -> None:
        self._host = host
        self._ctx = ctx

    def agent(self, name: str) -> Sink | None:
        return self._host.update_sink(name, self._ctx)

    def expert(self, name: str) -> Sink | None:
        ctx = self._ctx

        async def as_event(update: AgentResponseUpdate) -> None:
            if update.author_name is None:
                update.author_name = name
            await ctx.add_event(WorkflowEvent(cast(Any, HANDOFF_INTERMEDIATE_EVENT), data=update))

        return as_event


def _with_delegations(run: AgentRun, delegations: Delegations | None) -> AgentRun:
    """``run`` with what ``delegations`` did in it: its finished delegations and one that waits."""
    if delegations is None:
        return run
    return run._replace(delegations=tuple(delegations.records), suspension=delegations.suspension)
