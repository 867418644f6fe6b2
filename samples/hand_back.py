"""Hand back: a request that spans two specialists, coordinated by triage.

Run with: python samples/hand_back.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

The seed's "Hand back" pattern: billing does its part and hands back with a summary ("refund done;
crash still open"), then triage hands the open part to tech. At most 4 handoffs per message,
hand-backs included.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_framework import Agent

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import call_tool, handoff_to, reply, respond

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import (
    SPECIALIST_HAND_BACK,
    TRIAGE_HAND_BACK,
    render,
    run_sample,
    run_turn,
    sample_client,
    sample_options,
    show,
)

COMPANY = "Contoso"
QUESTION = "Please refund last month's double charge. Also, the app crashes when I open my bill."


async def main(provider: str = "scripted") -> HandoffTurnResult:
    options = sample_options()  # a cap on output tokens
    triage = Agent(
        client=sample_client(
            provider,
            "triage",
            handoff_to(
                "billing",
                goal="Refund the double charge; the app also crashes.",
                tool_name="transfer_to_billing",
            ),
            handoff_to(
                "tech",
                goal="The app crashes when the user opens a bill.",
                tool_name="transfer_to_tech",
            ),
        ),
        name="triage",
        instructions=render(TRIAGE_HAND_BACK, company=COMPANY),
        default_options=options,
    )
    billing = Agent(
        client=sample_client(
            provider,
            "billing",
            respond(
                "I've refunded the double charge.",
                call_tool("transfer_back_to_triage", summary="refund done; crash still open"),
            ),
        ),
        name="billing",
        instructions=render(SPECIALIST_HAND_BACK, role="billing", company=COMPANY),
        default_options=options,
    )
    tech = Agent(
        client=sample_client(
            provider,
            "tech",
            reply("Update the app to version 4.2: the crash on opening bills is fixed there."),
        ),
        name="tech",
        instructions=render(SPECIALIST_HAND_BACK, role="tech", company=COMPANY),
        default_options=options,
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, "charges, invoices, plans", tool_name="transfer_to_billing")
        .with_handoff(triage, tech, "errors, bugs, how-to questions", tool_name="transfer_to_tech")
        .with_hand_back(triage)
        .with_max_handoffs_per_turn(4)
        .build()
    )
    print(f"user: {QUESTION}")
    turn = await run_turn(workflow, QUESTION)
    show(turn)
    return turn


if __name__ == "__main__":
    run_sample(__doc__, main)
