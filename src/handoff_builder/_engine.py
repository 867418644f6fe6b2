"""The turn engine: a user turn as a sequence of steps, each one a value.

:class:`TurnEngine` holds one conversation (the shared, append-only history) and its small state
(the open turn, who spoke last, who runs next, the requests it waits for, its manager's
counters) and carries out its manager's decisions. It runs no agent, does no I/O and never calls
back into whoever drives it: each of its methods takes what happened (the user's input, an
agent's run, an answer, a deadline that passed) and returns the next :data:`Step`:

* :class:`Hop`: the next agent is decided; save, then start it with :meth:`TurnEngine.hop`;
* :class:`RunAgent`: run this :class:`AgentCall` and hand its run to :meth:`TurnEngine.proceed`
  (or tell :meth:`TurnEngine.cut_short` that its deadline passed, :meth:`TurnEngine.failed` that
  it raised);
* :class:`Wait`: the turn waits for these requests (approvals, external calls), answered one by
  one with :meth:`TurnEngine.answer`, then carried on with :meth:`TurnEngine.after_answers`;
* :class:`Done`: the turn is over, with its result.

Each step carries its ``trail``: the routing steps and events since the step before, in the order
they happened. The only thing the engine awaits is its own manager. The driver
(:class:`~handoff_builder.GroupChatHost`, in agent_framework) saves a :class:`HostSnapshot`,
emits the trail and carries the step out. See docs/architecture.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from agent_framework import Content, Message

from ._calls import (
    dangling_calls,
    requests_in,
    settle,
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
from ._delegation import Suspension, settle_waiting, settlement, waiting_apart
from ._events import (
    EscalationEvent,
    HandoffTurnResult,
    RoutingStep,
    TurnAbandonedEvent,
    TurnStatus,
    TurnTimeoutEvent,
)
from ._reply import (
    hidden_after,
    past_invocation_cap,
    status_of,
    steps_of,
    timed_out,
    undecided,
    unless_cut_short,
)
from ._requests import PendingRequests
from ._settings import (
    DEFAULT_AGENT_TIMEOUT,
    DEFAULT_ESCALATION_MESSAGE,
    DEFAULT_REVIEW_ESCALATION_MESSAGE,
    DEFAULT_TURN_TIMEOUT,
)
from ._state import (
    Continuation,
    DelegationFrame,
    HostState,
    PendingState,
    TurnRecord,
    TurnState,
    active_agent,
)
from .exceptions import CorruptStateError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ._manager import GroupChatManager
    from ._model_inputs import ModelCallLog
    from ._participant import AgentRun

__all__ = [
    "DEFAULT_AGENT_TIMEOUT",
    "DEFAULT_ESCALATION_MESSAGE",
    "DEFAULT_REVIEW_ESCALATION_MESSAGE",
    "DEFAULT_TURN_TIMEOUT",
    "HOST_ID",
    "AgentCall",
    "CallKind",
    "Done",
    "Hop",
    "HostSnapshot",
    "RunAgent",
    "Step",
    "Trail",
    "TurnEngine",
    "TurnRules",
    "Wait",
]

HOST_ID = "handoff_host"
CallKind = Literal["run", "resolve", "carry_on"]
"""What an agent call does: ``run`` the agent; ``resolve`` the requests its run waited for,
now answered (approved tools run, declined ones refused); ``carry_on`` a delegation whose
expert waited for answers."""

Limit = Literal["agent_call", "turn"]


@dataclass(frozen=True)
class AgentCall:
    """One agent call, as a value: which agent, what it does, with what, within how long.

    ``no_handoffs``: it runs with no handoff tools (a safe agent the manager forced). ``seconds``:
    the call's deadline (``None``: none); past it the call raises ``DeadlinePassedError``.
    """

    agent: str
    kind: CallKind = "run"
    no_handoffs: bool = False
    seconds: float | None = None


Trail = RoutingStep | Event
"""What a step went through: a routing step (for the turn's trace) or an event (to emit)."""


@dataclass(frozen=True)
class HostSnapshot:
    """What persistence is handed: the conversation and the state, as a step left them.

    ``history`` is the engine's own list, read-only to the reader, which writes what it has not
    written yet.
    """

    history: Sequence[Message]
    state: HostState
    last_result: HandoffTurnResult | None

    @property
    def turn_open(self) -> bool:
        """True while the turn goes on."""
        return self.state.turn is not None


@dataclass(frozen=True)
class Hop:
    """``agent`` runs next: save ``snapshot``, then start it with :meth:`TurnEngine.hop`.

    Now, or in a later superstep: a driver that checkpoints every hop saves the turn between
    the decision and the call.
    """

    agent: str
    no_handoffs: bool
    trail: tuple[Trail, ...]
    snapshot: HostSnapshot | None


@dataclass(frozen=True)
class RunAgent:
    """Run ``call``, then hand its run to :meth:`TurnEngine.proceed`."""

    call: AgentCall
    trail: tuple[Trail, ...] = ()


@dataclass(frozen=True)
class Wait:
    """The turn waits for ``requests`` (approvals, external calls) to be answered."""

    requests: tuple[Content, ...]
    trail: tuple[Trail, ...]
    snapshot: HostSnapshot | None


@dataclass(frozen=True)
class Done:
    """The turn is over. ``apology``: the message an escalation added for the user."""

    result: HandoffTurnResult
    trail: tuple[Trail, ...]
    snapshot: HostSnapshot | None
    apology: Message | None = None


Step = Hop | RunAgent | Wait | Done
"""What the driver does next. ``Hop``, ``Wait`` and ``Done`` carry the snapshot to save first
(``None`` when the engine's ``saves`` is off: nothing persists it)."""


@dataclass(frozen=True)
class TurnRules:
    """What an engine is told once: its agents, what ends a turn, what the user reads then.

    ``reviewed``: the agents whose replies a reviewer must approve. ``apologies``: the message
    of an escalation by its reason, where it is not ``apology``. ``payload_models``: the typed
    payload of each edge that has one, by source and tool name. ``author``: the name an apology
    is written under.
    """

    agents: frozenset[str]
    reviewed: frozenset[str] = frozenset()
    apology: str = DEFAULT_ESCALATION_MESSAGE
    apologies: Mapping[str, str] = field(default_factory=dict[str, str])
    payload_models: Mapping[tuple[str, str], type[BaseModel]] = field(
        default_factory=dict[tuple[str, str], "type[BaseModel]"]
    )
    author: str = HOST_ID


@dataclass(frozen=True)
class _InFlight:
    """The call the engine waits to hear back about, with what going back needs."""

    call: AgentCall
    limit: Limit
    saved: PendingState | None = None  # resolve / carry_on: the requests as they waited
    frames: tuple[DelegationFrame, ...] = ()


class TurnEngine:
    """One conversation's turns, as steps. See the module docstring."""

    def __init__(
        self,
        manager: GroupChatManager,
        rules: TurnRules,
        *,
        agent_timeout: float | None = DEFAULT_AGENT_TIMEOUT,
        turn_timeout: float | None = DEFAULT_TURN_TIMEOUT,
        model_calls: ModelCallLog | None = None,
    ) -> None:
        self.manager = manager
        self.rules = rules
        self.agent_timeout = agent_timeout
        self.turn_timeout = turn_timeout
        self.model_calls = model_calls
        self.conversation_id: str | None = None
        self.history: list[Message] = []
        self.left_out: tuple[tuple[int, int], ...] = ()  # abandoned turns: in no agent's view
        self.turn: TurnState | None = None
        self.speaker: str | None = None
        self.next: str | None = None
        self.next_no_handoffs = False  # the next agent runs with no handoff tools
        self.pending = PendingRequests()
        self.deadline: float | None = None  # the open turn's, on the driver's clock
        self.last_result: HandoffTurnResult | None = None
        self.saves = False
        """Whether steps carry a snapshot: on while a journal persists them (each snapshot
        builds the state, a few microseconds a step)."""
        self.epoch = 0
        """Counts the times the history was replaced or a turn left every view: a reader's
        cached views of an earlier epoch are stale."""
        self._in_flight: _InFlight | None = None
        self._trail: list[Trail] = []

    # -- what the driver reads -------------------------------------------------------------------

    @property
    def active_agent(self) -> str | None:
        """Where the open turn goes on, or the next starts (see ``GroupChatHost.active_agent``)."""
        waiting = None if self.pending.agent is None else str(self.pending.agent)
        return active_agent(self.speaker, self.next, waiting, turn_open=self.turn is not None)

    def state(self) -> HostState:
        """Everything but the history (which is append-only)."""
        return HostState(
            speaker=self.speaker,
            next=self.next,
            next_no_handoffs=self.next_no_handoffs,
            turn=self.turn,
            pending=self.pending.to_state(),
            manager=self.manager.save_state(),
            left_out=self.left_out,
        )

    def snapshot(self) -> HostSnapshot:
        """The conversation and the state as they stand, for persistence."""
        return HostSnapshot(self.history, self.state(), self.last_result)

    def _saved(self) -> HostSnapshot | None:
        """A step's snapshot, when something saves it (``saves``)."""
        return self.snapshot() if self.saves else None

    # -- the steps -------------------------------------------------------------------------------

    def refusal(self, messages: Sequence[Message]) -> Exception | None:
        """Why a turn cannot start with ``messages`` now (``None``: it can)."""
        if not messages:
            return ValueError("A turn needs at least one input message; got an empty list.")
        if self.turn is not None:
            return RuntimeError(
                "A turn is already in progress in this workflow; wait for its output before "
                "sending the next message."
            )
        return None

    async def begin(
        self,
        messages: Sequence[Message],
        return_to_previous: bool | None,  # noqa: FBT001 - a tri-state, passed through
        now: float,
    ) -> Step:
        """A user turn starts with ``messages`` (those that repeat the history are dropped).

        Raises:
            ValueError, RuntimeError: the input is refused (see :meth:`refusal`).
        """
        refusal = self.refusal(messages)
        if refusal is not None:
            raise refusal
        input_start = len(self.history)
        if self.model_calls is not None:
            self.model_calls.clear()
        self.history.extend(messages[_known_prefix(self.history, messages) :])
        self.turn = TurnState(start=len(self.history), input_start=input_start)
        self.deadline = None
        self._trail = []
        start = TurnStart(self.speaker, return_to_previous)
        return self._carry_out(await self.manager.start_turn(self.history, start), now)

    def hop(self, agent: str, now: float, *, no_handoffs: bool = False) -> Step:
        """Start the call of ``agent``, decided in a :class:`Hop`."""
        return self._call(agent, now, no_handoffs=no_handoffs)

    def resume(self, now: float) -> Step | None:
        """Run the agent the open turn was about to call (``None``: there is none)."""
        if self.turn is None or self.next is None or self.pending.requests:
            return None
        self._trail = []
        return self._call(self.next, now, no_handoffs=self.next_no_handoffs)

    async def proceed(self, run: AgentRun, now: float) -> Step:
        """The run of the call the last :class:`RunAgent` asked for."""
        flight = self._land()
        if flight.call.kind == "run":
            return await self._after_run(flight.call.agent, run, now)
        name = flight.call.agent
        saved = flight.saved
        then = (saved.then if saved is not None else None) or Continuation(name)
        if flight.call.kind == "resolve":
            return await self._after_resolve(name, then, run, now)
        return await self._after_carry_on(name, then, run, now)

    def cut_short(self, now: float) -> Step:
        """The last call's deadline passed: the turn ends, whatever it waited for settled."""
        flight = self._land()
        name = flight.call.agent
        if flight.call.kind == "run":
            return self._carry_out(self._timed_out(flight.limit, name), now, source=name)
        saved = flight.saved
        requests = [Content.from_dict(item) for item in saved.requests] if saved else []
        self._extend_after_wait(settlement(requests, flight.frames, name, "timed out"))
        self.pending = PendingRequests()
        return self._carry_out(self._timed_out(flight.limit, name), now)

    def failed(self) -> None:
        """The last call raised: answers it was carrying out wait again, to be answered again."""
        flight, self._in_flight = self._in_flight, None
        if flight is not None and flight.call.kind != "run":
            self.pending = PendingRequests.from_state(flight.saved)
            self.pending.answers = {}

    def answer(self, request_id: str, response: Content) -> bool:
        """Record one answer; True once every request is answered.

        Raises:
            TypeError, ValueError: ``response`` does not answer the request (it stays pending).
        """
        return self.pending.answer(request_id, response)

    def after_answers(self, now: float) -> RunAgent:
        """Every request is answered: carry them out (or let the waiting expert carry on)."""
        pending = self.pending
        self._trail = []
        limit, seconds = self._time_left(now)
        kind: CallKind = "carry_on" if pending.frames else "resolve"
        call = AgentCall(str(pending.agent), kind, seconds=seconds)
        self._in_flight = _InFlight(call, limit, pending.to_state(), pending.frames)
        return RunAgent(call, self._take_trail())

    def abandon(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        """Close the open turn without running anything more (``GroupChatHost.abandon_turn``)."""
        turn = self._open_turn()
        requests = list(self.pending.requests.values())
        if requests:
            agent = str(self.pending.agent or self.speaker or self.rules.author)
            frames = self.pending.frames
            self._extend_after_wait(settlement(requests, frames, agent, "abandoned"))
        self.pending = PendingRequests()
        self.left_out = (*self.left_out, (turn.input_from(self.history), len(self.history)))
        self.epoch += 1  # every view is rebuilt without the turn
        self._in_flight = None
        return self._close(turn, "abandoned", abandoned=event)

    # -- after a call ----------------------------------------------------------------------------

    async def _after_run(self, name: str, run: AgentRun, now: float) -> Step:
        delta = list(run.response.messages)
        for message in delta:
            if message.author_name is None:
                message.author_name = name
        self.history.extend(delta)
        dangling = dangling_calls(delta)
        if dangling:
            self.history.append(settle(dangling, name))
        requests = requests_in(delta)
        waiting = self._add_delegations(run)
        if waiting is not None:
            beside, requests = waiting_apart(waiting, requests, name)
            self.history.extend(beside)
        reply = AgentReply(
            name, tuple(delta), run.calls, unfinished=bool(requests), disabled=run.disabled,
            verdict=run.verdict, tool_limit=run.tool_limit,
        )  # fmt: skip
        decision = unless_cut_short(reply, await self.manager.decide(self.history, reply))
        frames = waiting.frames if waiting is not None else ()
        if requests and isinstance(decision, NextAgent):
            return self._wait_for(name, requests, decision, frames)
        if requests:
            self.history.extend(settlement(requests, frames, name, status_of(decision)))
        return self._carry_out(decision, now, source=name)

    async def _after_resolve(
        self, name: str, then: Continuation, run: AgentRun, now: float
    ) -> Step:
        self.pending = PendingRequests()  # answered
        messages, calls, verdict = list(run.response.messages), run.calls, run.verdict
        waiting = self._add_delegations(run)
        if waiting is None:
            return await self._go_on(name, then, messages, calls, verdict, now)
        # An approved delegation waits in turn: what the batch decided is decided now, and
        # carried out once the delegation is answered.
        self._extend_after_wait(messages)
        decision, decides = await self._answered(name, then, messages, calls, verdict)
        if isinstance(decision, NextAgent):
            requests = list(waiting.requests)
            return self._wait_for(name, requests, decision, waiting.frames, traced=not decides)
        # the turn ends now: the waiting delegation's call is closed
        self.history.extend(settle_waiting(waiting.frames, status_of(decision)))
        return self._carry_out(decision, now, source=name)

    async def _after_carry_on(
        self, caller: str, then: Continuation, run: AgentRun, now: float
    ) -> Step:
        """The waiting expert carried on: its caller's delegate call has its result.

        Or it waits again (no message: an expert waits for answers in turn).
        """
        waiting = self._add_delegations(run)
        self.pending = PendingRequests()
        if waiting is not None and not run.response.messages:
            self.pending.open(caller, list(waiting.requests), then, waiting.frames)
            self.deadline = None
            return Wait(tuple(waiting.requests), self._take_trail(), self._saved())
        return await self._go_on(caller, then, list(run.response.messages), (), None, now)

    async def _go_on(
        self,
        name: str,
        then: Continuation,
        messages: list[Message],
        calls: tuple[HandoffCall, ...],
        verdict: ReviewVerdict | None,
        now: float,
    ) -> Step:
        """The answers are in the history; what was decided with the requests is carried out.

        Approved handoff calls, or a verdict, make the manager decide again.
        """
        self._extend_after_wait(messages)
        # the hop's handoff is in the turn already: it was added when the turn began to wait
        decision, decides = await self._answered(
            name, then, messages, calls, verdict, handoff=False
        )
        carrying_on = (
            isinstance(decision, NextAgent)
            and decision.agent == name
            and decision.handoff is None
            and then.handoff is None
        )
        # The hop decided with the requests was traced when the turn began to wait.
        traced = not decides and not carrying_on
        return self._carry_out(decision, now, carrying_on=carrying_on, traced=traced, source=name)

    async def _answered(
        self,
        name: str,
        then: Continuation,
        messages: list[Message],
        calls: tuple[HandoffCall, ...],
        verdict: ReviewVerdict | None,
        *,
        handoff: bool = True,
    ) -> tuple[Decision, bool]:
        """The decision once ``name``'s requests are answered, and whether it was made now.

        Approved handoff calls, or a verdict, make the manager decide again (unless the waiting
        turn had decided already); otherwise the hop decided with the requests stands
        (``handoff``: with its handoff).
        """
        if bool(calls or verdict) and undecided(then, name):
            reply = AgentReply(name, tuple(messages), calls, unfinished=True, verdict=verdict)
            return await self.manager.decide(self.history, reply), True
        return _decided(then, handoff=handoff), False

    # -- carrying out a decision -----------------------------------------------------------------

    def _carry_out(
        self,
        decision: Decision,
        now: float,
        *,
        carrying_on: bool = False,
        traced: bool = False,
        source: str | None = None,
    ) -> Step:
        """The step a decision leads to: the next agent's call, or the turn's end.

        A :class:`NextAgent` counts one agent invocation (unless it only lets an agent carry on
        after its requests were answered: ``carrying_on``) and adds its input; one past the
        manager's ``max_iterations`` ends the turn with an escalation instead, whatever the
        manager. Its routing steps go into the trail unless it was traced already (``traced``);
        an agent that carries on adds only its refused calls. ``source``: the agent whose reply
        led to the decision.
        """
        if isinstance(decision, NextAgent):
            turn = self._open_turn()
            if decision.handoff is not None:
                turn = turn.with_handoff(decision.handoff)
            steps = [] if traced else steps_of(decision, source, turn, self._manager_name)
            if carrying_on:  # its refused calls, and a step its manager named
                steps = [s for s in steps if s.kind == "blocked" or s is decision.step]
            turn = self._with_steps(turn, steps)
            capped = turn.invocations >= self.manager.max_iterations and not decision.no_handoffs
            if carrying_on or not capped:
                if not carrying_on:  # a new invocation: its own messages start after its input
                    since = len(self.history) + len(decision.input)
                    turn = replace(turn, invocations=turn.invocations + 1, since=since)
                self.turn = turn
                self.history.extend(decision.input)
                self.next, self.next_no_handoffs = decision.agent, decision.no_handoffs
                self._trail.extend(decision.events)
                no_handoffs = decision.no_handoffs
                return Hop(decision.agent, no_handoffs, self._take_trail(), self._saved())
            self.turn = turn
            self._trail.extend(decision.events)
            cap = self.manager.max_iterations
            decision = past_invocation_cap(decision, self.speaker or decision.agent, cap)
        return self._conclude(decision, source)

    def _call(self, agent: str, now: float, *, no_handoffs: bool) -> Step:
        """The call of ``agent``; the turn's end instead when it is unknown or out of time."""
        if agent not in self.rules.agents:
            warning = f"The manager selected unknown agent {agent!r}."
            return self._conclude(EndTurn(events=(warning,)), agent)
        self.speaker = agent
        limit, seconds = self._time_left(now)
        if seconds is not None and seconds <= 0:
            return self._conclude(self._timed_out(limit, agent), agent)
        call = AgentCall(agent, "run", no_handoffs, seconds)
        self._in_flight = _InFlight(call, limit)
        return RunAgent(call, self._take_trail())

    def _wait_for(
        self,
        name: str,
        requests: list[Content],
        then: NextAgent,
        frames: Sequence[DelegationFrame] = (),
        *,
        traced: bool = False,
    ) -> Wait:
        """The turn waits for ``name``'s requests; ``then`` is carried out once all are answered.

        A handoff made in the same response stands. ``frames``: the requests are an expert's,
        in a delegation of ``name`` that waits. ``traced``: ``then`` was traced already (the
        turn waited before, and waits again).
        """
        carried = tuple(message.to_dict() for message in then.input)
        waiting = Continuation(then.agent, then.handoff, carried, then.no_handoffs)
        self.pending.open(name, requests, waiting, tuple(frames))
        if self.turn is not None and not traced:
            steps = steps_of(then, name, self.turn, self._manager_name)
            if then.handoff is None and then.step is None and then.agent == name:
                steps = [step for step in steps if step.kind == "blocked"]  # no hop: it waits
            self.turn = self._with_steps(self.turn, steps)
            if then.handoff is not None:
                self.turn = self.turn.with_handoff(then.handoff)
        self.next = None
        self.deadline = None  # a person may take long: the turn's deadline starts again after
        self._trail.extend(then.events)
        return Wait(tuple(requests), self._take_trail(), self._saved())

    def _conclude(self, decision: EndTurn | Escalate, source: str | None) -> Done:
        """The turn ends: its last steps and events, then its result."""
        turn = self._open_turn()
        turn = self._with_steps(turn, steps_of(decision, source, turn, self._manager_name))
        self._trail.extend(decision.events)
        if isinstance(decision, Escalate):
            escalation = decision.escalation
            text = self.rules.apologies.get(escalation.reason, self.rules.apology)
            apology = Message(role="assistant", contents=[text], author_name=self.rules.author)
            self.history.append(apology)
            result = self._close(turn, decision.status, escalation=escalation)
            return Done(result, self._take_trail(), self._saved(), apology)
        timeout = next((e for e in decision.events if isinstance(e, TurnTimeoutEvent)), None)
        result = self._close(turn, decision.status, timeout=timeout)
        return Done(result, self._take_trail(), self._saved())

    def _close(
        self,
        turn: TurnState,
        status: TurnStatus,
        *,
        escalation: EscalationEvent | None = None,
        timeout: TurnTimeoutEvent | None = None,
        abandoned: TurnAbandonedEvent | None = None,
    ) -> HandoffTurnResult:
        """The turn is over: its result, and the engine between turns again."""
        if turn.review is not None:  # closed with a review open (abandoned): the draft stays out
            draft, _, producer = turn.review
            turn = replace(turn, hidden=(*turn.hidden, (draft, len(self.history))))
            self.speaker = producer
        elif abandoned is not None and self.speaker in self.rules.reviewed:  # never reviewed
            turn = replace(turn, hidden=(*turn.hidden, (turn.since, len(self.history))))
        record = TurnRecord(
            turn.start, len(self.history), status, self.speaker or "", turn.handoffs,
            escalation, timeout, abandoned, turn.steps, turn.delegations, turn.hidden,
        )  # fmt: skip
        calls = self.model_calls.take() if self.model_calls is not None else ()
        result = record.result(self.history, model_calls=calls)
        self.turn, self.next, self.next_no_handoffs, self.deadline = None, None, False, None
        self.last_result = result
        return result

    # -- pieces ----------------------------------------------------------------------------------

    @property
    def _manager_name(self) -> str:
        return type(self.manager).__name__

    def _open_turn(self) -> TurnState:
        return self.turn or TurnState(start=len(self.history))

    def _take_trail(self) -> tuple[Trail, ...]:
        trail, self._trail = tuple(self._trail), []
        return trail

    def _land(self) -> _InFlight:
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            raise RuntimeError("No agent call is in flight: nothing was asked to run.")
        return flight

    def _with_steps(self, turn: TurnState, steps: Sequence[RoutingStep]) -> TurnState:
        """The turn with these steps in its trace (and in the trail).

        Some steps also mark what the turn's reply leaves out: a draft a reviewer sent back (or
        that escalated) and the review itself (an approved reply stays, its review does not);
        the run of an agent whose blocked handoff forced a safe agent or an escalation.
        """
        for step in steps:
            self._trail.append(step)
            end = len(self.history)
            turn, producer = hidden_after(turn.with_step(step), step, end, self.rules.reviewed)
            if producer is not None:  # its review is closed: the producer is the active agent
                self.speaker = producer
        return turn

    def _add_delegations(self, run: AgentRun) -> Suspension | None:
        """The run's finished delegations: into the turn (with their steps) and the trail.

        Returns the delegation that waits, if one does.
        """
        records = list(run.delegations)
        if records:
            turn = self._open_turn()
            turn = replace(turn, delegations=(*turn.delegations, *records))
            steps = [
                RoutingStep("delegate", "model", record.tool_name, record.caller, record.expert)
                for record in records
                if record.outcome != "refused"
            ]
            self.turn = self._with_steps(turn, steps)
            self._trail.extend(records)
        return run.suspension

    def _extend_after_wait(self, messages: Sequence[Message]) -> None:
        """Add the answers of a run that waited.

        When that run is left out of the turn's reply (a hidden range ends where the history
        does), so are its answers.
        """
        turn = self.turn
        end = len(self.history)
        self.history.extend(messages)
        if turn is not None and turn.hidden and turn.hidden[-1][1] == end:
            start = turn.hidden[-1][0]
            self.turn = replace(turn, hidden=(*turn.hidden[:-1], (start, len(self.history))))

    def _timed_out(self, limit: Limit, agent: str) -> EndTurn:
        seconds = self.agent_timeout if limit == "agent_call" else self.turn_timeout
        return timed_out(limit, agent, seconds)

    def _time_left(self, now: float) -> tuple[Limit, float | None]:
        """Which deadline the next agent call runs against, and its seconds (``None``: none)."""
        if self.deadline is None and self.turn_timeout is not None:
            self.deadline = now + self.turn_timeout  # the turn started or resumed
        left = None if self.deadline is None else self.deadline - now
        if left is not None and (self.agent_timeout is None or left < self.agent_timeout):
            return "turn", left
        return "agent_call", self.agent_timeout

    # -- loading ---------------------------------------------------------------------------------

    def load(self, history: Sequence[Message], state: HostState, *, strict: bool = True) -> None:
        """Replace the conversation and the state with saved ones (``GroupChatHost.load``)."""
        turn = state.turn
        models, where = (
            self.rules.payload_models,
            f"The open turn saved by executor {self.rules.author!r}",
        )
        if turn is not None and strict:
            turn = turn.with_payloads(models, where)  # before anything changes: it may be refused
        elif turn is not None:
            with contextlib.suppress(CorruptStateError):
                turn = turn.with_payloads(models, where)
        try:
            self.manager.restore_state(state.manager)
        except CorruptStateError:
            if strict:
                raise
            self.manager.restore_state({})
        self.history = list(history)
        if self.model_calls is not None:
            self.model_calls.clear()  # calls of the turn the engine had before
        self.left_out = state.left_out
        self.epoch += 1
        self.speaker = state.speaker
        self.next, self.next_no_handoffs = state.next, state.next_no_handoffs
        self.pending = PendingRequests.from_state(state.pending)
        self.turn = turn
        self.deadline, self._in_flight, self._trail = None, None, []


def _decided(then: Continuation, *, handoff: bool = True) -> NextAgent:
    """The hop decided with the requests a turn waited for (``handoff``: with its handoff)."""
    carried = tuple(Message.from_dict(item) for item in then.input)
    made = then.handoff if handoff else None
    return NextAgent(then.agent, made, carried, no_handoffs=then.no_handoffs)


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
