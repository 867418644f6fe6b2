"""The topology lint: graphs that build, but will not behave as meant."""

from __future__ import annotations

import logging

import pytest
from agent_framework import tool

from handoff_builder import (
    HandoffConfigurationError,
    HandoffManager,
    HandoffWorkflowBuilder,
    LintFinding,
)
from handoff_builder.testing import reply, scripted_agent


def test_a_clean_graph_has_no_findings() -> None:
    triage, billing, tech = (scripted_agent(n, description=f"{n} help") for n in ("t", "b", "x"))
    builder = HandoffWorkflowBuilder(triage).with_handoffs(triage, [billing, tech])
    builder.with_hand_back(triage)
    assert builder.lint() == []


def test_an_agent_no_handoff_leads_to_is_an_error_that_strict_builds_refuse(
    caplog: pytest.LogCaptureFixture,
) -> None:
    triage, billing, orphan = (scripted_agent(n) for n in ("triage", "billing", "orphan"))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    builder.with_handoff(orphan, billing).add_participants(orphan)
    [finding] = builder.lint()
    assert (finding.severity, finding.code, finding.agents) == (
        "error",
        "unreachable-agent",
        ("orphan",),
    )
    assert "with_handoff(triage, orphan)" in finding.message

    with caplog.at_level(logging.WARNING, logger="handoff_builder"):
        builder.build()
        builder.build()  # logged once per builder, not on every build
    lines = [r.getMessage() for r in caplog.records if "lint" in r.getMessage()]
    assert lines == [f"handoff workflow lint: {finding}"]

    with pytest.raises(HandoffConfigurationError, match=r"unreachable-agent.*'orphan'"):
        builder.build(strict=True)


def test_a_manager_of_its_own_may_reach_any_agent() -> None:
    triage, billing, other = (scripted_agent(n) for n in ("triage", "billing", "other"))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    builder.with_handoff(other, billing).with_manager(HandoffManager)
    assert builder.lint() == []
    builder.build(strict=True)


def test_a_specialist_with_no_way_back_in_a_hand_back_workflow() -> None:
    triage, billing, tech = (scripted_agent(n) for n in ("triage", "billing", "tech"))
    builder = HandoffWorkflowBuilder(triage).with_handoffs(triage, [billing, tech])
    builder.with_hand_back(triage, [billing])  # tech was forgotten
    [finding] = builder.lint()
    assert (finding.severity, finding.code, finding.agents) == ("warning", "no-way-back", ("tech",))
    assert "with_hand_back(triage, [tech])" in finding.message
    builder.build(strict=True)  # a warning does not fail a strict build


def test_a_handoff_without_hand_backs_may_end_at_a_specialist() -> None:
    triage, billing = scripted_agent("triage"), scripted_agent("billing")
    assert HandoffWorkflowBuilder(triage).with_handoff(triage, billing).lint() == []


def test_tools_of_one_agent_with_the_same_description() -> None:
    @tool
    def look_up(order: str) -> str:
        """Billing questions."""
        return order

    triage = scripted_agent("triage", tools=[look_up])
    billing, refunds = scripted_agent("billing"), scripted_agent("refunds")
    builder = HandoffWorkflowBuilder(triage)
    builder.with_handoff(triage, billing, "Billing questions.")
    builder.with_handoff(triage, refunds, "billing  QUESTIONS.")  # the same, to a model
    [finding] = builder.lint()
    assert (finding.code, finding.agents) == ("same-tool-description", ("triage",))
    assert "3 tools with the same description" in finding.message
    assert "look_up, handoff_to_billing, handoff_to_refunds" in finding.message


def test_findings_read_as_sentences() -> None:
    finding = LintFinding("warning", "no-way-back", ("tech",), "Agent 'tech' keeps it.")
    assert str(finding) == "warning [no-way-back] Agent 'tech' keeps it."


def test_lint_reports_every_problem_at_once_and_never_raises() -> None:
    """What build() refuses is an error finding among the others; build() raises it all."""
    a, b, orphan = scripted_agent("a", reply("hi")), scripted_agent("b"), scripted_agent("orphan")
    builder = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_handoff(a, a)
        .with_delegate(a, b, "b knows")
        .with_delegate(b, a, "a knows")
        .add_participants(orphan)
    )

    findings = builder.lint()

    assert [(f.severity, f.code, f.agents) for f in findings] == [
        ("error", "self-handoff", ("a",)),
        ("error", "delegate-cycle", ("a", "b")),
        ("error", "unreachable-agent", ("orphan",)),
        ("warning", "handoff-and-delegate", ("a", "b")),
    ]
    assert [str(f) for f in findings[:2]] == [
        "error [self-handoff] Agent 'a' cannot hand off to itself; remove that handoff.",
        "error [delegate-cycle] Delegates form a cycle ('a' -> 'b' -> 'a'): an expert would ask "
        "its own caller, without end. Remove one of these delegates, or make it a handoff.",
    ]
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert failure.value.problems == (findings[0].message, findings[1].message)


def test_agents_that_cannot_be_told_apart_leave_only_the_problems() -> None:
    a, twin1, twin2 = scripted_agent("a"), scripted_agent("twin"), scripted_agent("twin")
    builder = HandoffWorkflowBuilder(a).with_handoffs(a, [twin1, twin2])
    assert [(f.severity, f.code, f.agents) for f in builder.lint()] == [
        ("error", "duplicate-name", ("twin",)),
        ("error", "tool-name-collision", ("a", "twin", "twin")),
    ]


def test_a_safe_agents_edges_lead_somewhere() -> None:
    """The next message may start at a safe agent (a remembered active agent): its handoffs
    reach agents nothing else leads to."""
    a, b, safe, x = (scripted_agent(n) for n in ("a", "b", "safe", "x"))
    builder = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_handoff(safe, x)
        .with_blocked_handoff_outcome(safe)
    )
    assert builder.lint() == []
    builder.with_blocked_handoff_outcome(None)  # the safe agent stays a participant: now x is not
    assert [f.agents for f in builder.lint()] == [("safe",), ("x",)]


def test_a_handoff_declared_disabled_leads_nowhere() -> None:
    triage, old, new = (scripted_agent(n) for n in ("triage", "old", "new"))
    flagged = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, old, tool_name="transfer_to_billing", is_enabled=False)
        .with_handoff(triage, new, tool_name="transfer_to_billing")
    )
    [finding] = flagged.lint()
    assert (finding.severity, finding.code, finding.agents) == (
        "error",
        "unreachable-agent",
        ("old",),
    )
    alone = HandoffWorkflowBuilder(triage).with_handoff(triage, old, is_enabled=False)
    assert [(f.code, f.agents) for f in alone.lint()] == [("unreachable-agent", ("old",))]
    # A predicate may say yes: its target can be reached.
    asked = HandoffWorkflowBuilder(triage).with_handoff(triage, old, is_enabled=lambda c: False)
    assert asked.lint() == []


def test_a_sanitised_tool_name_is_a_warning_that_says_what_it_became(
    caplog: pytest.LogCaptureFixture,
) -> None:
    triage, tech = scripted_agent("triage"), scripted_agent("tech")
    desk = scripted_agent("Billing Desk!")
    long_name = "refunds_" + "x" * 60
    refunds = scripted_agent(long_name)
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoffs([triage, tech], desk)
        .with_handoff(triage, refunds)
        .with_handoff(triage, tech, tool_name="transfer_to_tech")  # named: nothing to say
        .with_handoff(tech, triage)
        .with_delegate(triage, scripted_agent("policy expert"), "refund policy")
    )

    with caplog.at_level(logging.WARNING, logger="handoff_builder"):
        builder.build()

    lines = [r.getMessage() for r in caplog.records if r.name == "handoff_builder"]
    assert lines == [
        "handoff workflow lint: warning [sanitised-tool-name] The handoff tool "
        "'handoff_to_Billing Desk!' of 'triage', 'tech' has characters outside [A-Za-z0-9_-]: it "
        "is named 'handoff_to_Billing_Desk_'. Pass tool_name= to name it yourself, or rename the "
        "agent.",
        f"handoff workflow lint: warning [sanitised-tool-name] The handoff tool "
        f"'handoff_to_{long_name}' of 'triage' is longer than 64 characters: it is named "
        f"'handoff_to_{long_name[:53]}'. Pass tool_name= to name it yourself, or rename the "
        "agent.",
        "handoff workflow lint: warning [sanitised-tool-name] The delegate tool 'ask_policy "
        "expert' of 'triage' has characters outside [A-Za-z0-9_-]: it is named "
        "'ask_policy_expert'. Pass tool_name= to name it yourself, or rename the agent.",
    ]
    assert [f.agents for f in builder.lint()] == [("triage", "tech"), ("triage",), ("triage",)]
