"""Routing steps and what a turn's reply leaves out, from plain values: no host, no model."""

from __future__ import annotations

from handoff_builder import RoutingStep
from handoff_builder._decision import AgentReply, EndTurn, Escalate, NextAgent
from handoff_builder._events import EscalationEvent, TurnTimeoutEvent
from handoff_builder._reply import hidden_after, status_of, steps_of, unless_cut_short
from handoff_builder._state import TurnState

TURN = TurnState(start=1, since=1)  # the producer ran from message 1 on


def test_a_managers_own_choice_is_codes_step_named_after_the_manager() -> None:
    assert steps_of(NextAgent("triage"), None, TURN, "HandoffManager") == [
        RoutingStep("start", "code", "HandoffManager", None, "triage")
    ]
    assert steps_of(NextAgent("billing"), "triage", TURN, "RoundRobin") == [
        RoutingStep("route", "code", "RoundRobin", "triage", "billing")
    ]
    assert steps_of(NextAgent("triage"), "triage", TURN, "RoundRobin") == [
        RoutingStep("continue", "code", "RoundRobin", "triage", "triage")
    ]


def test_an_escalation_and_a_deadline_are_named_by_what_stopped_the_turn() -> None:
    escalation = EscalationEvent("handoff_cap", "billing", 3)
    [step] = steps_of(Escalate(escalation), "billing", TURN, "HandoffManager")
    assert (step.kind, step.by, step.source, step.limit) == (
        "escalate",
        "handoff_cap",
        "billing",
        3,
    )
    timeout = TurnTimeoutEvent("turn", "billing", 60.0)
    ended = EndTurn("turn_timeout", events=(timeout,))
    assert steps_of(ended, "billing", TURN, "HandoffManager") == [
        RoutingStep("timeout", "code", "turn", "billing")
    ]
    assert status_of(ended) == "turn_timeout"
    assert status_of(NextAgent("billing")) == "completed"


def test_a_review_holds_the_draft_and_approval_leaves_out_only_the_review() -> None:
    review = RoutingStep("review", "code", "review", "writer", "reviewer")
    held, producer = hidden_after(TURN.with_step(review), review, 3, frozenset({"writer"}))
    assert (held.review, held.hidden, producer) == ((1, 3, "writer"), (), None)
    approve = RoutingStep("end", "model", "approve", "reviewer")
    approved, producer = hidden_after(held, approve, 5, frozenset({"writer"}))
    assert (approved.review, approved.hidden, producer) == (None, ((3, 5),), "writer")
    changes = RoutingStep("route", "model", "request_changes", "reviewer", "writer")
    sent_back, producer = hidden_after(held, changes, 5, frozenset({"writer"}))
    assert (sent_back.hidden, producer) == (((1, 5),), "writer")  # the draft goes too


def test_a_reply_cut_short_by_the_tool_limit_escalates_instead_of_completing() -> None:
    cut_short = AgentReply("billing", (), tool_limit=True)
    decision = unless_cut_short(cut_short, EndTurn())
    assert isinstance(decision, Escalate)
    assert decision.escalation == EscalationEvent("tool_limit", "billing", 0)
    answered = AgentReply("billing", ())
    assert unless_cut_short(answered, EndTurn()) == EndTurn()
