"""The turn engine: a user turn as a sequence of steps, each one a value.

:class:`TurnEngine` holds one conversation in its :class:`~handoff_builder._ledger.Ledger` (the
shared, append-only history and its small state: the open turn, who spoke last, who runs next,
the requests it waits for), with its manager (and its counters), and carries out the manager's
decisions. It runs no agent, does no I/O and never calls
back into whoever drives it: each of its methods takes what happened (the user's input, an
agent's run, an answer, a deadline that passed) and returns the next :data:`Step`:

* :class:`Hop`: the next agent is decided; save, then start it with :meth:`TurnEngine.hop`;
* :class:`RunAgent`: run this :class:`AgentCall` and hand its run to :meth:`TurnEngine.proceed`
  (or tell :meth:`TurnEngine.cut_short` that its deadline passed, :meth:`TurnEngine.failed` that
  it raised);
* :class:`Wait`: the turn waits for these requests (approvals, external calls), answered one by
  one with :meth:`TurnEngine.answer` (the answers so far saved from
  :meth:`TurnEngine.answered_so_far`), then carried on with :meth:`TurnEngine.after_answers`;
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
    HandoffCall,
    NextAgent,
    ReviewVerdict,
    TurnStart,
)
from ._delegation import Suspension, settle_waiting, settlement, waiting_apart
from ._events import (
    HandoffTurnResult,
    TurnAbandonedEvent,
    TurnTimeoutEvent,
)
from ._ledger import HostSnapshot, Ledger, Trail
from ._reply import (
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
    TurnState,
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
    "RunAgent",
    "Step",
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
    chains: tuple[tuple[DelegationFrame, ...], ...] = ()  # carry_on: the delegations


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
        self.ledger = Ledger(rules.reviewed, model_calls)
        """The conversation and its state, and the open turn's books (:class:`Ledger`)."""
        self.deadline: float | None = None  # the open turn's, on the driver's clock
        self.saves = False
        """Whether steps carry a snapshot: on while a journal persists them (each snapshot
        builds the state, a few microseconds a step)."""
        self._in_flight: _InFlight | None = None

    # -- what the driver reads -------------------------------------------------------------------

    def state(self) -> HostState:
        """Everything but the history (which is append-only)."""
        return self.ledger.state(self.manager.save_state())

    def snapshot(self) -> HostSnapshot:
        """The conversation and the state as they stand, for persistence."""
        return self.ledger.snapshot(self.manager.save_state())

    def _saved(self) -> HostSnapshot | None:
        """A step's snapshot, when something saves it (``saves``)."""
        return self.snapshot() if self.saves else None

    # -- the steps -------------------------------------------------------------------------------

    def refusal(self, messages: Sequence[Message]) -> Exception | None:
        """Why a turn cannot start with ``messages`` now (``None``: it can)."""
        if not messages:
            return ValueError("A turn needs at least one input message; got an empty list.")
        if self.ledger.turn is not None:
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
        ledger = self.ledger
        ledger.start_turn(messages)
        self.deadline = None
        start = TurnStart(ledger.speaker, return_to_previous)
        return self._carry_out(await self.manager.start_turn(ledger.history, start), now)

    def hop(self, agent: str, now: float, *, no_handoffs: bool = False) -> Step:
        """Start the call of ``agent``, decided in a :class:`Hop`."""
        return self._call(agent, now, no_handoffs=no_handoffs)

    def resume(self, now: float) -> Step | None:
        """Run the agent the open turn was about to call (``None``: there is none)."""
        ledger = self.ledger
        if ledger.turn is None or ledger.next is None or ledger.pending.requests:
            return None
        ledger.trail = []
        return self._call(ledger.next, now, no_handoffs=ledger.next_no_handoffs)

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
        self.ledger.extend_after_wait(settlement(requests, flight.chains, name, "timed out"))
        self.ledger.pending = PendingRequests()
        return self._carry_out(self._timed_out(flight.limit, name), now)

    def failed(self) -> None:
        """The last call raised: answers it was carrying out wait again, to be answered again."""
        flight, self._in_flight = self._in_flight, None
        if flight is not None and flight.call.kind != "run":
            self.ledger.pending = PendingRequests.from_state(flight.saved)
            self.ledger.pending.answers = {}

    def answer(self, request_id: str, response: Content) -> bool:
        """Record one answer; True once every request is answered.

        Raises:
            TypeError, ValueError: ``response`` does not answer the request (it stays pending).
        """
        return self.ledger.pending.answer(request_id, response)

    def answered_so_far(self) -> HostSnapshot | None:
        """Some requests are answered, not all: the snapshot that keeps those answers.

        Saved, an answer given in one call survives a restart and is carried out with the
        others once they come. ``None`` when nothing saves snapshots (``saves``).
        """
        return self._saved()

    def after_answers(self, now: float) -> RunAgent:
        """Every request is answered: carry them out (or let the waiting expert carry on)."""
        ledger = self.ledger
        pending = ledger.pending
        ledger.trail = []
        limit, seconds = self._time_left(now)
        kind: CallKind = "carry_on" if pending.frames else "resolve"
        call = AgentCall(str(pending.agent), kind, seconds=seconds)
        self._in_flight = _InFlight(call, limit, pending.to_state(), pending.chains)
        return RunAgent(call, ledger.take_trail())

    def abandon(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        """Close the open turn without running anything more (``GroupChatHost.abandon_turn``)."""
        ledger = self.ledger
        turn = ledger.open_turn()
        requests = list(ledger.pending.requests.values())
        if requests:
            agent = str(ledger.pending.agent or ledger.speaker or self.rules.author)
            chains = ledger.pending.chains
            ledger.extend_after_wait(settlement(requests, chains, agent, "abandoned"))
        ledger.pending = PendingRequests()
        ledger.leave_out(turn)
        self._in_flight = None
        self.deadline = None
        return ledger.close(turn, "abandoned", abandoned=event)

    # -- after a call ----------------------------------------------------------------------------

    async def _after_run(self, name: str, run: AgentRun, now: float) -> Step:
        ledger = self.ledger
        delta = list(run.response.messages)
        for message in delta:
            if message.author_name is None:
                message.author_name = name
        ledger.history.extend(delta)
        dangling = dangling_calls(delta)
        if dangling:
            ledger.history.append(settle(dangling, name))
        requests = requests_in(delta)
        waiting = ledger.add_delegations(run)
        if waiting is not None:
            beside, requests = waiting_apart(waiting, requests, name)
            ledger.history.extend(beside)
        reply = AgentReply(
            name, tuple(delta), run.calls, unfinished=bool(requests), disabled=run.disabled,
            verdict=run.verdict, tool_limit=run.tool_limit,
        )  # fmt: skip
        decision = unless_cut_short(reply, await self.manager.decide(ledger.history, reply))
        if requests and isinstance(decision, NextAgent):
            return self._wait_for(name, requests, decision, waiting)
        if requests:
            chains = [chain.frames for chain in waiting.chains] if waiting is not None else []
            ledger.history.extend(settlement(requests, chains, name, status_of(decision)))
        return self._carry_out(decision, now, source=name)

    async def _after_resolve(
        self, name: str, then: Continuation, run: AgentRun, now: float
    ) -> Step:
        ledger = self.ledger
        ledger.pending = PendingRequests()  # answered
        messages, calls, verdict = list(run.response.messages), run.calls, run.verdict
        waiting = ledger.add_delegations(run)
        if waiting is None:
            return await self._go_on(name, then, messages, calls, verdict, now)
        # An approved delegation waits in turn: what the batch decided is decided now, and
        # carried out once the delegation is answered.
        ledger.extend_after_wait(messages)
        decision, decides = await self._answered(name, then, messages, calls, verdict)
        if isinstance(decision, NextAgent):
            requests = list(waiting.requests)
            return self._wait_for(name, requests, decision, waiting, traced=not decides)
        # the turn ends now: the waiting delegations' calls are closed
        chains = [chain.frames for chain in waiting.chains]
        ledger.history.extend(settle_waiting(chains, status_of(decision)))
        return self._carry_out(decision, now, source=name)

    async def _after_carry_on(
        self, caller: str, then: Continuation, run: AgentRun, now: float
    ) -> Step:
        """The waiting experts carried on: their caller's delegate calls have their results.

        Or some wait again (an expert waits for answers in turn): the results of the others
        join the history, and the turn waits for those.
        """
        ledger = self.ledger
        waiting = ledger.add_delegations(run)
        ledger.pending = PendingRequests()
        if waiting is not None:
            if run.response.messages:
                ledger.extend_after_wait(list(run.response.messages))
            ledger.pending.open(caller, list(waiting.requests), then, waiting)
            self.deadline = None
            return Wait(tuple(waiting.requests), ledger.take_trail(), self._saved())
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
        self.ledger.extend_after_wait(messages)
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
            return await self.manager.decide(self.ledger.history, reply), True
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
        ledger = self.ledger
        if isinstance(decision, NextAgent):
            turn = ledger.open_turn()
            if decision.handoff is not None:
                turn = turn.with_handoff(decision.handoff)
            steps = [] if traced else steps_of(decision, source, turn, self._manager_name)
            if carrying_on:  # its refused calls, and a step its manager named
                steps = [s for s in steps if s.kind == "blocked" or s is decision.step]
            turn = ledger.with_steps(turn, steps)
            capped = turn.invocations >= self.manager.max_iterations and not decision.no_handoffs
            if carrying_on or not capped:
                if not carrying_on:  # a new invocation: its own messages start after its input
                    since = len(ledger.history) + len(decision.input)
                    turn = replace(turn, invocations=turn.invocations + 1, since=since)
                ledger.turn = turn
                ledger.history.extend(decision.input)
                ledger.next, ledger.next_no_handoffs = (
                    decision.agent,
                    decision.no_handoffs,
                )
                ledger.trail.extend(decision.events)
                no_handoffs = decision.no_handoffs
                return Hop(decision.agent, no_handoffs, ledger.take_trail(), self._saved())
            ledger.turn = turn
            ledger.trail.extend(decision.events)
            cap = self.manager.max_iterations
            decision = past_invocation_cap(decision, ledger.speaker or decision.agent, cap)
        return self._conclude(decision, source)

    def _call(self, agent: str, now: float, *, no_handoffs: bool) -> Step:
        """The call of ``agent``; the turn's end instead when it is unknown or out of time."""
        if agent not in self.rules.agents:
            warning = f"The manager selected unknown agent {agent!r}."
            return self._conclude(EndTurn(events=(warning,)), agent)
        self.ledger.speaker = agent
        limit, seconds = self._time_left(now)
        if seconds is not None and seconds <= 0:
            return self._conclude(self._timed_out(limit, agent), agent)
        call = AgentCall(agent, "run", no_handoffs, seconds)
        self._in_flight = _InFlight(call, limit)
        return RunAgent(call, self.ledger.take_trail())

    def _wait_for(
        self,
        name: str,
        requests: list[Content],
        then: NextAgent,
        waiting: Suspension | None = None,
        *,
        traced: bool = False,
    ) -> Wait:
        """The turn waits for ``name``'s requests; ``then`` is carried out once all are answered.

        A handoff made in the same response stands. ``waiting``: the requests are experts', in
        delegations of ``name`` that wait. ``traced``: ``then`` was traced already (the
        turn waited before, and waits again).
        """
        traced_by = None if traced else self._manager_name
        self.ledger.wait(name, requests, then, waiting, traced_by)
        self.deadline = None  # a person may take long: the turn's deadline starts again after
        return Wait(tuple(requests), self.ledger.take_trail(), self._saved())

    def _conclude(self, decision: EndTurn | Escalate, source: str | None) -> Done:
        """The turn ends: its last steps and events, then its result."""
        ledger = self.ledger
        turn = ledger.open_turn()
        turn = ledger.with_steps(turn, steps_of(decision, source, turn, self._manager_name))
        ledger.trail.extend(decision.events)
        self.deadline = None
        if isinstance(decision, Escalate):
            escalation = decision.escalation
            text = self.rules.apologies.get(escalation.reason, self.rules.apology)
            apology = Message(role="assistant", contents=[text], author_name=self.rules.author)
            ledger.history.append(apology)
            result = ledger.close(turn, decision.status, escalation=escalation)
            return Done(result, ledger.take_trail(), self._saved(), apology)
        timeout = next((e for e in decision.events if isinstance(e, TurnTimeoutEvent)), None)
        result = ledger.close(turn, decision.status, timeout=timeout)
        return Done(result, ledger.take_trail(), self._saved())

    # -- pieces ----------------------------------------------------------------------------------

    @property
    def _manager_name(self) -> str:
        return type(self.manager).__name__

    def _land(self) -> _InFlight:
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            raise RuntimeError("No agent call is in flight: nothing was asked to run.")
        return flight

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
        turn = _loaded_turn(state.turn, self.rules, strict=strict)  # before anything changes
        try:
            self.manager.restore_state(state.manager)
        except CorruptStateError:
            if strict:
                raise
            self.manager.restore_state({})
        self.ledger.load(history, state, turn)
        self.deadline, self._in_flight = None, None


def _loaded_turn(turn: TurnState | None, rules: TurnRules, *, strict: bool) -> TurnState | None:
    """A saved open turn with its handoff payloads read into their models.

    ``strict``: one that no longer fits its model is refused; otherwise it stays as saved (JSON).

    Raises:
        CorruptStateError: (``strict``) a payload does not fit its model.
    """
    if turn is None:
        return None
    where = f"The open turn saved by executor {rules.author!r}"
    if strict:
        return turn.with_payloads(rules.payload_models, where)
    with contextlib.suppress(CorruptStateError):
        return turn.with_payloads(rules.payload_models, where)
    return turn


def _decided(then: Continuation, *, handoff: bool = True) -> NextAgent:
    """The hop decided with the requests a turn waited for (``handoff``: with its handoff)."""
    carried = tuple(Message.from_dict(item) for item in then.input)
    made = then.handoff if handoff else None
    return NextAgent(then.agent, made, carried, no_handoffs=then.no_handoffs)
