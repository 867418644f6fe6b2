"""The hand-back pattern: specialists return the conversation to the coordinator with a summary."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from agent_framework import Agent

from handoff_builder import HandoffConfigurationError, HandoffWorkflowBuilder
from handoff_builder.testing import (
    ScriptStep,
    Step,
    assert_received,
    call_tool,
    client_of,
    handoff_to,
    reply,
    respond,
    scripted_agent,
)
from tests.helpers import run_turn


def hand_back(summary: str) -> Step:
    return call_tool("transfer_back_to_triage", summary=summary)


def desk(
    triage: Sequence[ScriptStep], billing: Sequence[ScriptStep], tech: Sequence[ScriptStep]
) -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    agents = {
        "triage": scripted_agent("triage", *triage),
        "billing": scripted_agent("billing", *billing, description="charges, invoices, plans"),
        "tech": scripted_agent("tech", *tech, description="errors, bugs, how-to questions"),
    }
    builder = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoffs(agents["triage"], [agents["billing"], agents["tech"]])
        .with_hand_back(agents["triage"])  # with hand-backs the cap is 4 by default
    )
    return builder, agents


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_hand_back_seed(stream: bool) -> None:
    """The seed: triage -> billing, billing hands back 'refund done; crash still open' -> tech."""
    builder, agents = desk(
        [
            handoff_to("billing", goal="Refund the double charge and fix the app crash."),
            handoff_to("tech", goal="Fix the app crash."),
        ],
        [respond("Your refund is on its way.", hand_back("refund done; crash still open"))],
        [reply("Update the app to 4.2; the crash is fixed there.")],
    )
    turn = await run_turn(
        builder.build(), "Refund my double charge, and the app crashes.", stream=stream
    )

    pointer = ["triage"] + [h.target for h in turn.result.handoffs]
    assert pointer == ["triage", "billing", "triage", "tech"]
    assert [(h.kind, h.source, h.target) for h in turn.result.handoffs] == [
        ("handoff", "triage", "billing"),
        ("hand_back", "billing", "triage"),
        ("handoff", "triage", "tech"),
    ]
    assert turn.result.handoffs[1].goal == "refund done; crash still open"
    assert turn.result.active_agent == "tech"
    # Billing's message to the user went out, then the hand-back was followed.
    texts = [m.text for m in turn.result.messages if m.role == "assistant" and m.text]
    assert texts == [
        "Your refund is on its way.",
        "Update the app to 4.2; the crash is fixed there.",
    ]
    # Each agent's model received what it was handed: billing the goal, triage the summary (and
    # billing's words to the user), tech the open part.
    assert_received(
        agents["billing"],
        "Goal: Refund the double charge and fix the app crash.",
    )
    assert_received(
        agents["triage"],
        "user[billing]: Your refund is on its way.",
        "Hand-back from billing to you (triage). Summary: refund done; crash still open",
        call=1,
    )
    seen_by_tech = assert_received(agents["tech"], "Goal: Fix the app crash.")
    assert seen_by_tech.messages[-1].text == ("Goal: Fix the app crash.")
    billing_tools = client_of(agents["billing"]).calls[0].options["tools"]
    [back] = [t for t in billing_tools if t.name == "transfer_back_to_triage"]
    assert back.parameters()["required"] == ["summary"]


async def test_empty_summary_is_a_tool_error() -> None:
    builder, agents = desk(
        [handoff_to("billing", goal="Invoice.")],
        [hand_back("  "), reply("Sorry, here is your invoice.")],
        [],
    )
    turn = await run_turn(builder.build(), "invoice")
    assert turn.result.active_agent == "billing"
    [blocked] = turn.blocked
    assert (blocked.reason, blocked.tool_name) == ("empty_summary", "transfer_back_to_triage")
    retry = client_of(agents["billing"]).calls[1]
    [error] = [c for m in retry.messages for c in m.contents if c.type == "function_result"]
    assert str(error.result) == (
        "Error: the hand-back was not performed because the summary is empty. Say what you did "
        "and what is still open in the `summary` argument and call transfer_back_to_triage again."
    )


async def test_no_ping_pong_before_a_new_user_message() -> None:
    builder, agents = desk(
        [
            handoff_to("billing", goal="Invoice."),
            handoff_to("billing", goal="Invoice again."),  # refused: billing just handed back
            reply("Anything else I can do?"),
            handoff_to("billing", goal="New question about a plan."),  # next message: allowed
        ],
        [hand_back("invoice sent; nothing open"), reply("Plans: basic and pro.")],
        [],
    )
    workflow = builder.build()
    first = await run_turn(workflow, "invoice")
    assert first.result.active_agent == "triage"
    assert first.result.text.endswith("Anything else I can do?")
    [blocked] = first.blocked
    assert (blocked.reason, blocked.source, blocked.target) == ("ping_pong", "triage", "billing")
    refused = client_of(agents["triage"]).calls[2]
    [error] = [c for m in refused.messages[-1:] for c in m.contents if c.type == "function_result"]
    assert str(error.result).startswith("Error: billing just handed the conversation back to you")
    second = await run_turn(workflow, "what plans are there?")
    assert second.result.active_agent == "billing"
    assert second.result.text == "Plans: basic and pro."


async def test_hand_backs_count_toward_the_cap() -> None:
    builder, _ = desk(
        [handoff_to("billing"), handoff_to("tech")],
        [hand_back("done; tech part open")],
        [hand_back("done; nothing open")],
    )
    turn = await run_turn(builder.with_max_handoffs_per_turn(3).build(), "two things")
    assert len(turn.result.handoffs) == 3
    assert turn.result.escalated
    assert turn.result.escalation is not None
    assert turn.result.escalation.requested_target == "triage"


async def test_explicit_specialists_and_custom_tool_name() -> None:
    triage = scripted_agent("triage", handoff_to("billing"), reply("anything else?"))
    billing = scripted_agent("billing", call_tool("back_to_desk", summary="done"))
    tech = scripted_agent("tech")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoffs(triage, [billing, tech])
        .with_hand_back(triage, [billing], "Return when done", tool_name="back_to_desk")
        .build()
    )
    turn = await run_turn(workflow, "hi")
    assert [h.kind for h in turn.result.handoffs] == ["handoff", "hand_back"]
    tools = {t.name: t for t in client_of(billing).calls[0].options["tools"]}
    assert set(tools) == {"back_to_desk"}
    assert tools["back_to_desk"].description == "Return when done"


def test_hand_back_to_itself_and_twice_are_build_errors() -> None:
    triage, billing = scripted_agent("triage"), scripted_agent("billing")
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_hand_back(triage, [triage, billing])
        .with_hand_back(triage, billing)
    )
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert failure.value.problems == (
        "Agent 'triage' cannot hand back to itself; remove that hand-back.",
        "The hand-back from 'billing' to 'triage' is declared twice; keep one declaration.",
    )
