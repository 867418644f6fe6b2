"""The offline customer-support demo: triage -> billing -> refunds on the scripted client."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from agent_framework import Agent, AgentResponseUpdate, Workflow

from ._builder import HandoffWorkflowBuilder
from ._events import HandoffBlockedEvent, HandoffEvent, HandoffTurnResult
from .testing import handoff_to, reply, respond, scripted_agent

COMPANY = "Contoso Telecom"

TRIAGE_INSTRUCTIONS = f"""\
You are the front desk for {COMPANY}. Greet the user and work out what
they need. Do not try to solve the problem yourself.
Before you hand off, state the user's goal in one sentence so the next
agent does not have to ask again."""

SPECIALIST_INSTRUCTIONS = """\
You are the {role} agent for {company}. You now own this conversation.
The full history above is yours to read.

Help the user directly. If the request belongs to another agent, hand off
and say what you are passing on.
Never ask the user to repeat something already in the history."""

USER_MESSAGES = (
    "Hi, I was charged twice for my March phone bill.",
    "Thanks! Can you also email me the corrected invoice?",
)


def demo_agents() -> tuple[Agent, Agent, Agent]:
    """Three agents whose scripted model plays the demo conversation."""
    triage = scripted_agent(
        "triage",
        handoff_to("billing", goal="The user was charged twice for the March bill."),
        handoff_to("billing", goal="Email the user the corrected March invoice."),
        instructions=TRIAGE_INSTRUCTIONS,
        description="Front desk: greets the user and routes the request.",
    )
    billing = scripted_agent(
        "billing",
        respond(
            "I can see two identical charges of 24.90 EUR on March 3rd. "
            "I'm passing the duplicate to our refunds team.",
            handoff_to("refunds", goal="Refund the duplicate March charge of 24.90 EUR."),
        ),
        reply("Done: the corrected March invoice is on its way to your email."),
        instructions=SPECIALIST_INSTRUCTIONS.format(role="billing", company=COMPANY),
        description="Charges, invoices and plans.",
    )
    refunds = scripted_agent(
        "refunds",
        reply(
            "I've refunded the duplicate charge of 24.90 EUR. "
            "It will be back on your card within 3 business days."
        ),
        instructions=SPECIALIST_INSTRUCTIONS.format(role="refunds", company=COMPANY),
        description="Refunds of duplicate or wrong charges.",
    )
    return triage, billing, refunds


def demo_builder() -> HandoffWorkflowBuilder:
    """The demo's handoff workflow: triage -> billing -> refunds."""
    triage, billing, refunds = demo_agents()
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, reason="charges, invoices, plans")
        .with_handoff(billing, refunds, reason="refunds of duplicate or wrong charges")
        .with_name("customer-support")
    )


def demo_workflow() -> Workflow:
    """The demo's workflow, built."""
    return demo_builder().build()


async def run_demo(out: TextIO | None = None) -> list[HandoffTurnResult]:
    """Play the demo conversation, printing each speaking agent and each handoff."""
    out = out or sys.stdout
    say: Callable[[str], object] = lambda line: print(line, file=out)  # noqa: E731
    workflow = demo_workflow()
    results: list[HandoffTurnResult] = []
    say(f"{COMPANY} support (offline demo: scripted model, no network)\n")
    for text in USER_MESSAGES:
        say(f"user: {text}")
        async for event in workflow.run(text, stream=True):
            data = event.data
            if isinstance(data, AgentResponseUpdate) and data.text:
                say(f"  {data.author_name}: {data.text}")
            elif isinstance(data, HandoffEvent):
                say(f"  -> handoff {data.source} -> {data.target} (goal: {data.goal})")
            elif isinstance(data, HandoffBlockedEvent):
                say(f"  !! blocked handoff from {data.source} via {data.tool_name} ({data.reason})")
            elif isinstance(data, HandoffTurnResult):
                results.append(data)
                flag = " [escalated to a human]" if data.escalated else ""
                count = len(data.handoffs)
                handoffs = f"{count} handoff{'s' if count != 1 else ''}"
                say(f"  (turn ended at {data.active_agent}, {handoffs}{flag})\n")
    return results
