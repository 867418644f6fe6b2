"""A conversation as the turn engine keeps it: the history, the small state, the open turn's books.

A :class:`Ledger` holds what :class:`~handoff_builder._engine.TurnEngine` reads and writes
between its steps: the shared, append-only history, who spoke last and who runs next, the
requests the turn waits for, the open turn (its trace, handoffs, delegations, what its reply
leaves out) and the trail of routing steps and events since the last step. It keeps these books
straight (a step's trace, a finished delegation, answers added after a wait, a turn closed into
its result) and decides nothing: the engine, with its manager, does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agent_framework import Content, Message

from ._decision import Event, NextAgent
from ._events import (
    EscalationEvent,
    HandoffTurnResult,
    RoutingStep,
    TurnAbandonedEvent,
    TurnStatus,
    TurnTimeoutEvent,
)
from ._reply import hidden_after, steps_of
from ._requests import PendingRequests
from ._state import Continuation, HostState, TurnRecord, TurnState, active_agent

if TYPE_CHECKING:
    from ._delegation import Suspension
    from ._model_inputs import ModelCallLog
    from ._participant import AgentRun

__all__ = ["HostSnapshot", "Ledger", "Trail"]

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


class Ledger:
    """One conversation's history and state, and the books of its open turn.

    ``reviewed``: the agents whose replies a reviewer must approve (their drafts may be left out
    of a turn's reply). ``model_calls``: where the participants' recorders write what each model
    received; a turn's result takes them.
    """

    def __init__(
        self, reviewed: frozenset[str] = frozenset(), model_calls: ModelCallLog | None = None
    ) -> None:
        self.reviewed = reviewed
        self.model_calls = model_calls
        self.conversation_id: str | None = None
        self.history: list[Message] = []
        self.left_out: tuple[tuple[int, int], ...] = ()  # abandoned turns: in no agent's view
        self.turn: TurnState | None = None
        self.speaker: str | None = None
        self.next: str | None = None
        self.next_no_handoffs = False  # the next agent runs with no handoff tools
        self.pending = PendingRequests()
        self.last_result: HandoffTurnResult | None = None
        self.epoch = 0
        """Counts the times the history was replaced or a turn left every view: a reader's
        cached views of an earlier epoch are stale."""
        self.trail: list[Trail] = []

    # -- reading ---------------------------------------------------------------------------------

    @property
    def active_agent(self) -> str | None:
        """Where the open turn goes on, or the next starts (see ``GroupChatHost.active_agent``)."""
        waiting = None if self.pending.agent is None else str(self.pending.agent)
        return active_agent(self.speaker, self.next, waiting, turn_open=self.turn is not None)

    def state(self, manager: dict[str, object]) -> HostState:
        """Everything but the history (which is append-only), with the manager's ``manager``."""
        return HostState(
            speaker=self.speaker,
            next=self.next,
            next_no_handoffs=self.next_no_handoffs,
            turn=self.turn,
            pending=self.pending.to_state(),
            manager=manager,
            left_out=self.left_out,
        )

    def snapshot(self, manager: dict[str, object]) -> HostSnapshot:
        """The conversation and the state as they stand, for persistence."""
        return HostSnapshot(self.history, self.state(manager), self.last_result)

    # -- the open turn's books -------------------------------------------------------------------

    def open_turn(self) -> TurnState:
        """The open turn (a new one from here, if none is open)."""
        return self.turn or TurnState(start=len(self.history))

    def take_trail(self) -> tuple[Trail, ...]:
        """The trail since the last step; it starts again."""
        trail, self.trail = tuple(self.trail), []
        return trail

    def with_steps(self, turn: TurnState, steps: Sequence[RoutingStep]) -> TurnState:
        """The turn with these steps in its trace (and in the trail).

        Some steps also mark what the turn's reply leaves out: a draft a reviewer sent back (or
        that escalated) and the review itself (an approved reply stays, its review does not);
        the run of an agent whose blocked handoff forced a safe agent or an escalation.
        """
        for step in steps:
            self.trail.append(step)
            end = len(self.history)
            turn, producer = hidden_after(turn.with_step(step), step, end, self.reviewed)
            if producer is not None:  # its review is closed: the producer is the active agent
                self.speaker = producer
        return turn

    def start_turn(self, messages: Sequence[Message]) -> None:
        """A user turn opens with ``messages`` (those that repeat the history are dropped)."""
        input_start = len(self.history)
        if self.model_calls is not None:
            self.model_calls.clear()
        self.history.extend(messages[_known_prefix(self.history, messages) :])
        self.turn = TurnState(start=len(self.history), input_start=input_start)
        self.trail = []

    def wait(
        self,
        name: str,
        requests: list[Content],
        then: NextAgent,
        waiting: Suspension | None,
        traced_by: str | None,
    ) -> None:
        """The turn waits for ``name``'s requests; ``then`` is carried out once all are answered.

        A handoff made in the same response stands. ``waiting``: the requests are experts', in
        delegations of ``name`` that wait. ``traced_by``: the manager whose steps ``then``
        adds to the trace (``None``: it was traced already, when the turn waited before).
        """
        carried = tuple(message.to_dict() for message in then.input)
        continuation = Continuation(then.agent, then.handoff, carried, then.no_handoffs)
        self.pending.open(name, requests, continuation, waiting)
        if self.turn is not None and traced_by is not None:
            steps = steps_of(then, name, self.turn, traced_by)
            if then.handoff is None and then.step is None and then.agent == name:
                steps = [step for step in steps if step.kind == "blocked"]  # no hop: it waits
            self.turn = self.with_steps(self.turn, steps)
            if then.handoff is not None:
                self.turn = self.turn.with_handoff(then.handoff)
        self.next = None
        self.trail.extend(then.events)

    def add_delegations(self, run: AgentRun) -> Suspension | None:
        """The run's finished delegations: into the turn (with their steps) and the trail.

        Returns the delegation that waits, if one does.
        """
        records = list(run.delegations)
        if records:
            turn = self.open_turn()
            turn = replace(turn, delegations=(*turn.delegations, *records))
            steps = [
                RoutingStep("delegate", "model", record.tool_name, record.caller, record.expert)
                for record in records
                if record.outcome != "refused"
            ]
            self.turn = self.with_steps(turn, steps)
            self.trail.extend(records)
        return run.suspension

    def extend_after_wait(self, messages: Sequence[Message]) -> None:
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

    def leave_out(self, turn: TurnState) -> None:
        """``turn``, from the user's input on, leaves every agent's view (an abandoned turn)."""
        self.left_out = (*self.left_out, (turn.input_from(self.history), len(self.history)))
        self.epoch += 1  # every view is rebuilt without the turn

    def close(
        self,
        turn: TurnState,
        status: TurnStatus,
        *,
        escalation: EscalationEvent | None = None,
        timeout: TurnTimeoutEvent | None = None,
        abandoned: TurnAbandonedEvent | None = None,
    ) -> HandoffTurnResult:
        """The turn is over: its result, and the books between turns again."""
        if turn.review is not None:  # closed with a review open (abandoned): the draft stays out
            draft, _, producer = turn.review
            turn = replace(turn, hidden=(*turn.hidden, (draft, len(self.history))))
            self.speaker = producer
        elif abandoned is not None and self.speaker in self.reviewed:  # never reviewed
            turn = replace(turn, hidden=(*turn.hidden, (turn.since, len(self.history))))
        record = TurnRecord(
            turn.start, len(self.history), status, self.speaker or "", turn.handoffs,
            escalation, timeout, abandoned, turn.steps, turn.delegations, turn.hidden,
        )  # fmt: skip
        calls = self.model_calls.take() if self.model_calls is not None else ()
        result = record.result(self.history, model_calls=calls)
        self.turn, self.next, self.next_no_handoffs = None, None, False
        self.last_result = result
        return result

    # -- replacing -------------------------------------------------------------------------------

    def load(self, history: Sequence[Message], state: HostState, turn: TurnState | None) -> None:
        """Replace the conversation and the state with saved ones.

        ``turn``: the saved open turn, its payloads read (``state.turn`` as they were saved).
        """
        self.history = list(history)
        if self.model_calls is not None:
            self.model_calls.clear()  # calls of the turn the engine had before
        self.left_out = state.left_out
        self.epoch += 1
        self.speaker = state.speaker
        self.next, self.next_no_handoffs = state.next, state.next_no_handoffs
        self.pending = PendingRequests.from_state(state.pending)
        self.turn = turn
        self.trail = []


def _same(a: Message, b: Message) -> bool:
    return a is b or (
        a.role == b.role
        and a.author_name == b.author_name
        and [(c.type, c.call_id, c.text) for c in a.contents]
        == [(c.type, c.call_id, c.text) for c in b.contents]
    )


def _known_prefix(history: Sequence[Message], messages: Sequence[Message]) -> int:
    """How many leading ``messages`` repeat the history (``workflow.as_agent()`` resends it).

    They repeat it when they are the history's messages in order, some of those a caller is not
    shown possibly left out: agent_framework's ``WorkflowAgent`` (1.26; 1.23 kept them) gives its
    caller, and keeps in its session, only the assistant messages that carry no tool call, so the
    tool calls, their results and the messages of no assistant it did not show are not resent.
    Every other message of the history must be there. 0 unless something follows the history.
    """
    if not history or len(messages) <= 1:
        return 0
    repeated = 0
    for message in history:
        if repeated < len(messages) and _same(message, messages[repeated]):
            repeated += 1
        elif not _maybe_unshown(message):
            return 0
    return repeated if repeated < len(messages) else 0


def _maybe_unshown(message: Message) -> bool:
    """True when ``workflow.as_agent()``'s caller may not have been shown ``message``."""
    return message.role != "assistant" or any(
        c.type in ("function_call", "function_approval_response") for c in message.contents
    )
