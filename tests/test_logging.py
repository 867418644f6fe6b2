"""Handoff log lines: source, target and argument, the argument cut to a documented length."""

from __future__ import annotations

import logging

import pytest

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder._logging import DEFAULT_LOGGED_ARGUMENT_LENGTH
from handoff_builder.testing import call_tool, handoff_to, reply, scripted_agent
from tests.helpers import run_turn

HUGE = "x" * 2_000_000


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "handoff_builder"]


async def test_a_long_goal_is_cut_in_the_log_line_and_kept_in_the_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    triage = scripted_agent("triage", handoff_to("billing", goal=HUGE))
    billing = scripted_agent("billing", reply("ok"))
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()

    with caplog.at_level(logging.INFO, logger="handoff_builder"):
        turn = await run_turn(workflow, "hi")

    [line] = lines(caplog)
    assert DEFAULT_LOGGED_ARGUMENT_LENGTH == 200
    assert line == "handoff triage -> billing: " + "x" * 200 + "... [cut: 2000000 characters]"
    assert turn.handoffs[0].goal == HUGE


async def test_arguments_can_be_left_out_of_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    personal = "Customer Jane Roe, card ending 4242, was charged twice."
    triage = scripted_agent(
        "triage",
        handoff_to("billing", goal=""),
        handoff_to("billing", goal=personal),
        reply("Anything else?"),
    )
    billing = scripted_agent("billing", call_tool("transfer_back_to_triage", summary=personal))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_hand_back(triage)
        .with_argument_logging(include=False)
        .build()
    )

    with caplog.at_level(logging.INFO, logger="handoff_builder"):
        turn = await run_turn(workflow, "hi")

    assert lines(caplog) == [
        "blocked handoff from triage via handoff_to_billing (empty_goal): (argument not logged)",
        "handoff triage -> billing: (argument not logged)",
        "hand-back billing -> triage: (argument not logged)",
    ]
    assert "4242" not in caplog.text
    assert [h.goal for h in turn.handoffs] == [personal, personal]


async def test_the_cut_length_is_a_setting(caplog: pytest.LogCaptureFixture) -> None:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund the March charge."))
    billing = scripted_agent("billing", reply("ok"))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_argument_logging(max_length=6)
        .build()
    )
    with caplog.at_level(logging.INFO, logger="handoff_builder"):
        await run_turn(workflow, "hi")
    assert lines(caplog) == ["handoff triage -> billing: Refund... [cut: 24 characters]"]


def test_the_cut_length_is_at_least_one() -> None:
    builder = HandoffWorkflowBuilder(scripted_agent("a"))
    with pytest.raises(ValueError, match=r"max_length must be at least 1, got 0\."):
        builder.with_argument_logging(max_length=0)
