"""Pass it on: triage hands off to billing, billing to refunds, which answers.

Run with: python samples/pass_it_on.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

The seed's "Pass it on" pattern. The triage and specialist prompts are the seed's templates,
filled in by code; the handoff tools use the seed's names (transfer_to_billing, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_framework import Agent

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import (
    SPECIALIST,
    TRIAGE,
    render,
    run_sample,
    run_turn,
    sample_client,
    sample_options,
    show,
)

COMPANY = "Contoso"
QUESTION = "I was charged twice this month and I want my money back."


async def main(provider: str = "scripted") -> HandoffTurnResult:
    options = sample_options()  # a cap on output tokens
    triage = Agent(
        client=sample_client(
            provider,
            "triage",
            handoff_to(
                "billing",
                goal="The user was charged twice and wants the extra charge back.",
                tool_name="transfer_to_billing",
            ),
        ),
        name="triage",
        instructions=render(TRIAGE, company=COMPANY),
        default_options=options,
    )
    billing = Agent(
        client=sample_client(
            provider,
            "billing",
            handoff_to(
                "refunds", goal="Refund the duplicate charge.", tool_name="transfer_to_refunds"
            ),
        ),
        name="billing",
        instructions=render(
            SPECIALIST, role="billing", company=COMPANY, handoff_tools="transfer_to_refunds"
        ),
        description="charges, invoices, plans",
        default_options=options,
    )
    tech = Agent(
        client=sample_client(provider, "tech"),  # offline, never called in this conversation
        name="tech",
        instructions=render(SPECIALIST, role="tech", company=COMPANY, handoff_tools="(none)"),
        description="errors, bugs, how-to questions",
        default_options=options,
    )
    refunds = Agent(
        client=sample_client(
            provider,
            "refunds",
            reply("Done: the duplicate charge is refunded; expect it within 3 days."),
        ),
        name="refunds",
        instructions=render(SPECIALIST, role="refunds", company=COMPANY, handoff_tools="(none)"),
        description="refunds of duplicate or wrong charges",
        default_options=options,
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, "charges, invoices, plans", tool_name="transfer_to_billing")
        .with_handoff(triage, tech, "errors, bugs, how-to questions", tool_name="transfer_to_tech")
        .with_handoff(billing, refunds, "refunds", tool_name="transfer_to_refunds")
        .with_max_handoffs_per_turn(3)
        .build()
    )
    print(f"user: {QUESTION}")
    turn = await run_turn(workflow, QUESTION)
    show(turn)
    return turn


if __name__ == "__main__":
    run_sample(__doc__, main)
