"""What the model received: every model call of a turn, as the model got it, card number masked.

Run with: python samples/what_the_model_received.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

The workflow is built with ``with_model_inputs(redact=...)``: each turn's result keeps what each
agent's model received (its messages, instructions and tools), whatever the chat client, and the
redaction masks card numbers in that record (not in the conversation, nor in what the models
get). The sample prints each call: the agent, its tools, its transcript. With a real model, this
is how to see why a receiving agent asked for something it was already told.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_framework import Agent

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder, redact_patterns
from handoff_builder.testing import handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import (
    SPECIALIST,
    TRIAGE,
    last_line,
    render,
    run_sample,
    run_turn,
    sample_client,
    sample_options,
)

COMPANY = "Contoso"
QUESTION = "My card 4111 1111 1111 1111 was charged twice for the March invoice. Please refund one."
CARD_NUMBER = r"\b\d(?:[ -]?\d){12,18}\b"


async def main(provider: str = "scripted") -> HandoffTurnResult:
    options = sample_options()  # a cap on output tokens
    triage = Agent(
        client=sample_client(
            provider,
            "triage",
            handoff_to(
                "billing",
                goal="Refund one of two March charges on card 4111 1111 1111 1111.",
                tool_name="transfer_to_billing",
            ),
        ),
        name="triage",
        instructions=render(TRIAGE, company=COMPANY),
        default_options=options,
    )
    billing = Agent(
        client=sample_client(
            provider, "billing", reply("I have refunded the second March charge.")
        ),
        name="billing",
        instructions=render(SPECIALIST, role="billing", company=COMPANY, handoff_tools="(none)"),
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
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, "charges, invoices, plans", tool_name="transfer_to_billing")
        .with_handoff(triage, tech, "errors, bugs, how-to questions", tool_name="transfer_to_tech")
        .with_model_inputs(redact=redact_patterns(CARD_NUMBER))
        .build()
    )
    print(f"user: {QUESTION}")
    turn = await run_turn(workflow, QUESTION)
    for call in turn.model_calls:
        tools = ", ".join(call.tool_names) or "none"
        print(f"\n--- model call {call.index}: {call.agent} (tools: {tools})")
        print(call.rendered)
    print(f"\n{last_line(turn)}")  # or why there is no reply (a deadline passed)
    return turn


if __name__ == "__main__":
    run_sample(__doc__, main)
