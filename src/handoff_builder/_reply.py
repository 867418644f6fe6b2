"""Routing steps and what a turn's reply leaves out: pure functions of the turn's values.

Every decision becomes routing steps in the turn's trace (:func:`steps_of`); some steps mark a
range of the conversation that the turn's reply leaves out (:func:`hidden_after`: a draft under
review, a review, the run of an agent whose blocked handoff forced a safe agent). The host calls
them; they read no host and change nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from ._caps import CAPS
from ._decision import AgentReply, Decision, EndTurn, Escalate, NextAgent
from ._events import (
    EscalationEvent,
    HandoffBlockedEvent,
    LimitReachedEvent,
    RoutingStep,
    StepKind,
    TurnStatus,
    TurnTimeoutEvent,
)
from ._state import Continuation, TurnState


def steps_of(
    decision: Decision, source: str | None, turn: TurnState, manager: str
) -> list[RoutingStep]:
    """The routing steps a decision makes: its refused calls, then the decision itself.

    A manager may say who decided (``decision.step``); otherwise the step is named from the
    decision: a handoff is the model's; ending after a reply is the model's (it answered); the
    rest is code, named after the ``manager`` (its class name).
    """
    steps = [
        RoutingStep("blocked", "code", event.reason, event.source, event.target)
        for event in decision.events
        if isinstance(event, HandoffBlockedEvent)
    ]
    if decision.step is not None:
        steps.append(decision.step)
    elif isinstance(decision, NextAgent):
        handoff = decision.handoff
        if handoff is not None:
            steps.append(
                RoutingStep(handoff.kind, handoff.decided_by, handoff.tool_name,
                            handoff.source, handoff.target)
            )  # fmt: skip
        else:  # a manager's own choice: the first agent, the same one again, or another
            kind: StepKind = "start" if source is None else "continue"
            if source is not None and decision.agent != source:
                kind = "route"
            steps.append(RoutingStep(kind, "code", manager, source, decision.agent))
    elif isinstance(decision, Escalate):
        escalation = decision.escalation
        cap = CAPS.get(escalation.reason)
        count = cap.turn_count(turn) if cap is not None else None
        steps.append(
            RoutingStep("escalate", "code", escalation.reason, source or escalation.agent,
                        None, escalation.limit, count)
        )  # fmt: skip
    else:
        steps.append(end_step(decision, source, manager))
    return steps


def hidden_after(
    turn: TurnState, step: RoutingStep, end: int, reviewed: frozenset[str]
) -> tuple[TurnState, str | None]:
    """What ``step`` leaves out of the turn's reply, and who speaks again after it.

    Returns the turn with ``step``'s hidden range (:attr:`TurnState.hidden`; the conversation
    is ``end`` messages long), and the producer that is the active agent again when ``step``
    closes its review (``None`` otherwise).

    A reply given to its reviewer is held; approved, only the review is left out; closed any
    other way (changes requested, the review cap, another cap, a deadline, a handoff of the
    reviewer) the reply is left out too: a reply that was not approved never reaches the user.
    A reply of a ``reviewed`` producer that a cap or a deadline kept from its review is left
    out too. A blocked handoff that forced a safe agent (or an escalation) leaves out the
    blocked agent's run.
    """
    if step.kind == "review" and step.by == "review":
        return replace(turn, review=(min(turn.since, end), end, str(step.source))), None
    if turn.review is not None and step.kind not in ("blocked", "delegate"):
        draft, review, producer = turn.review
        start = review if step.by == "approve" else draft
        return replace(turn, review=None, hidden=(*turn.hidden, (start, end))), producer
    if (
        turn.review is None
        and step.source in reviewed
        and step.kind in ("escalate", "limit", "route", "end", "timeout")
    ):  # a reviewed producer's reply that a cap or a deadline kept from its review
        return replace(turn, hidden=(*turn.hidden, (min(turn.since, end), end))), None
    if step.by == "blocked_handoff" and step.kind in ("route", "escalate"):
        # The run that tried to leave the graph is not the answer: the safe agent's is.
        return replace(turn, hidden=(*turn.hidden, (min(turn.since, end), end))), None
    return turn, None


def end_step(decision: EndTurn, source: str | None, manager: str) -> RoutingStep:
    """The step of an :class:`EndTurn` no manager described: a deadline, a limit, its own end."""
    timeout = next((e for e in decision.events if isinstance(e, TurnTimeoutEvent)), None)
    if timeout is not None:
        return RoutingStep("timeout", "code", timeout.limit, source or timeout.agent)
    limit = next((e for e in decision.events if isinstance(e, LimitReachedEvent)), None)
    if limit is not None:
        return RoutingStep("limit", "code", limit.kind, source or limit.agent, None, limit.limit)
    return RoutingStep("end", "code", manager, source)


def undecided(then: Continuation, agent: str) -> bool:
    """True when the turn that waited had not decided where it goes (``agent`` carries on).

    Only then may its answered calls (an approved handoff, a verdict) decide it; a handoff, a
    route or a safe agent decided with the requests stands.
    """
    return then.handoff is None and then.agent == agent


def unless_cut_short(reply: AgentReply, decision: Decision) -> Decision:
    """The manager's decision, or the escalation that replaces it.

    A turn does not end as completed after a reply that has no answer (its tool loop stopped at
    agent_framework's limit), whatever the manager: it escalates (``"tool_limit"``).
    """
    if not reply.tool_limit or not isinstance(decision, EndTurn) or decision.status != "completed":
        return decision
    escalation = EscalationEvent("tool_limit", reply.agent, 0)
    return Escalate(escalation, events=(*decision.events, escalation))


def status_of(decision: Decision) -> TurnStatus:
    """The status a turn ends with after ``decision`` (``completed`` when it goes on)."""
    return "completed" if isinstance(decision, NextAgent) else decision.status


__all__ = [
    "end_step",
    "hidden_after",
    "past_invocation_cap",
    "status_of",
    "steps_of",
    "timed_out",
    "undecided",
    "unless_cut_short",
]


def timed_out(limit: Literal["agent_call", "turn"], agent: str, seconds: float | None) -> EndTurn:
    """The turn ends at a deadline: ``agent`` was about to run, or ran, past ``limit``."""
    event = TurnTimeoutEvent(limit, agent, float(seconds or 0.0))
    status: TurnStatus = "agent_timeout" if limit == "agent_call" else "turn_timeout"
    return EndTurn(status, events=(event,))


def past_invocation_cap(decision: NextAgent, source: str, cap: int) -> Escalate:
    """The turn escalates: ``decision`` would be one agent invocation past ``cap``.

    ``source``: the agent whose reply led to it.
    """
    handoff = decision.handoff
    goal = handoff.goal if handoff is not None else None
    escalation = EscalationEvent("max_iterations", source, cap, decision.agent, goal)
    return Escalate(escalation, events=(escalation,))
