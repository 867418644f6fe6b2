"""The one table of caps: what each limit reads, counts and says.

Every difference between the caps a turn can run into (which setting holds its limit, which
counter of the turn it compares, the tool result of a call that trips it, and what a safe agent is
told when the cap passes it the conversation) is a column of :data:`CAPS`. The handoff manager
and the host read the table instead of branching on the cap's name, as the edges read
:data:`~handoff_builder._routes.EDGE_KINDS`.

Two rows are not counts: ``blocked_handoff`` (the first blocked handoff takes the outcome) and
``tool_limit`` (agent_framework's function-invocation limit, not one of this workflow's). Their
limit reads as 0, and a routing step shows none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._events import EscalationReason
from ._manager import ManagerSettings
from ._state import HandoffState, TurnState

__all__ = ["CAPS", "HOP_CAPS", "HUMAN_TAKES_OVER", "CapKind"]

HUMAN_TAKES_OVER = "A human colleague will take over the conversation."
"""How a cap's tool result ends when the cap escalates (its default outcome)."""


@dataclass(frozen=True)
class CapKind:
    """One cap: where its limit is set, what counts towards it, and what the agents are told."""

    name: EscalationReason
    limit: Callable[[ManagerSettings], int] | None
    """The cap's limit in the compiled settings (``None``: not a count)."""
    counter: Callable[[HandoffState], int] | None
    """How far the open turn got, in the handoff manager's counters (``None``: not counted)."""
    turn_counter: Callable[[TurnState], int] | None
    """How far the open turn got, as the host counts it for any manager (``None``: it does not)."""
    result: str | None
    """The tool result of a handoff call that tripped the cap (``{limit}``), ending with
    :data:`HUMAN_TAKES_OVER`; ``None`` for a cap no call trips."""
    safe_agent_reason: str
    """Why a safe agent was given the conversation (``{limit}``), in its note."""

    def limit_in(self, settings: ManagerSettings) -> int:
        """The cap's limit under ``settings``; 0 when it is not a count."""
        return 0 if self.limit is None else self.limit(settings)

    def step_limit(self, settings: ManagerSettings) -> int | None:
        """The limit a routing step shows: ``None`` when the cap is not a count."""
        return None if self.limit is None else self.limit(settings)

    def count_in(self, state: HandoffState) -> int | None:
        """How far the turn of ``state`` got towards the cap (``None``: not counted)."""
        return None if self.counter is None else self.counter(state)

    def turn_count(self, turn: TurnState) -> int | None:
        """How far ``turn`` got towards the cap, as the host counts it (``None``: not counted)."""
        return None if self.turn_counter is None else self.turn_counter(turn)

    def reached(self, settings: ManagerSettings, state: HandoffState) -> bool:
        """True when the turn of ``state`` has used up the cap."""
        count = self.count_in(state)
        return count is not None and count >= self.limit_in(settings)


HANDOFF_CAP = CapKind(
    name="handoff_cap",
    limit=lambda settings: settings.max_handoffs_per_turn,
    counter=lambda state: state.handoffs,
    turn_counter=lambda turn: len(turn.handoffs),
    result=(
        "Not transferred: the limit of {limit} handoffs for this user message was reached. "
        + HUMAN_TAKES_OVER
    ),
    safe_agent_reason="the limit of {limit} handoffs for this user message was reached",
)

MAX_ITERATIONS = CapKind(
    name="max_iterations",
    limit=lambda settings: settings.max_iterations,
    counter=lambda state: state.invocations,
    turn_counter=lambda turn: turn.invocations,
    result=(
        "Not transferred: this user message used all {limit} agent invocations it is allowed. "
        + HUMAN_TAKES_OVER
    ),
    safe_agent_reason="this user message used all {limit} agent invocations it is allowed",
)

REJECTED_HANDOFFS = CapKind(
    name="rejected_handoffs",
    limit=lambda settings: settings.max_rejected_handoffs,
    counter=lambda state: state.rejected,
    turn_counter=None,
    result=(
        "Not transferred: {limit} handoff attempts were already refused for this user message. "
        + HUMAN_TAKES_OVER
    ),
    safe_agent_reason="{limit} handoff attempts were refused for this user message",
)

BLOCKED_HANDOFF = CapKind(
    name="blocked_handoff",
    limit=None,
    counter=None,
    turn_counter=None,
    result=None,
    safe_agent_reason="a handoff was refused",
)

TOOL_LIMIT = CapKind(
    name="tool_limit",
    limit=None,
    counter=None,
    turn_counter=None,
    result=None,
    safe_agent_reason="the agent before you reached its limit of tool calls without an answer",
)

CAPS: Mapping[str, CapKind] = {
    cap.name: cap
    for cap in (HANDOFF_CAP, MAX_ITERATIONS, REJECTED_HANDOFFS, BLOCKED_HANDOFF, TOOL_LIMIT)
}
"""Every cap that takes an outcome (see :class:`~handoff_builder.CapOutcome`), by name."""

HOP_CAPS: tuple[CapKind, ...] = (HANDOFF_CAP, MAX_ITERATIONS)
"""The caps every hop to another agent counts towards, in the order they are checked."""
