"""Pass it on: triage hands off to billing, billing to refunds, which answers.

Run with: python samples/pass_it_on.py

Offline on the scripted model: each agent's model is a script, so the conversation is the same
every time. Replace ``scripted_agent`` with ``Agent(client=<a real chat client>, ...)`` to use a
real model.
"""

from __future__ import annotations

import asyncio

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import handoff_to, reply, scripted_agent

TRIAGE = """You are the front desk for {company}. Greet the user and work out what
they need. Do not try to solve the problem yourself.
Before you hand off, state the user's goal in one sentence so the next
agent does not have to ask again."""

SPECIALIST = """You are the {role} agent for {company}. You now own this conversation.
The full history above is yours to read.
Help the user directly. If the request belongs to another agent, hand off
and say what you are passing on."""


async def main(company: str = "Contoso") -> HandoffTurnResult:
    triage = scripted_agent(
        "triage",
        handoff_to("billing", goal="The user was charged twice and wants the extra charge back."),
        instructions=TRIAGE.format(company=company),
    )
    billing = scripted_agent(
        "billing",
        handoff_to("refunds", goal="Refund the duplicate charge."),
        instructions=SPECIALIST.format(role="billing", company=company),
        description="charges, invoices, plans",
    )
    refunds = scripted_agent(
        "refunds",
        reply("Done: the duplicate charge is refunded."),
        instructions=SPECIALIST.format(role="refunds", company=company),
        description="refunds",
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, reason="charges, invoices, plans")
        .with_handoff(billing, refunds, reason="refunds of duplicate or wrong charges")
        .build()
    )
    result = await workflow.run("I was charged twice this month.")
    turn = result.get_outputs()[-1]
    if not isinstance(turn, HandoffTurnResult):
        raise TypeError(f"expected a HandoffTurnResult, got {turn!r}")
    for handoff in turn.handoffs:
        print(f"handoff {handoff.source} -> {handoff.target}: {handoff.goal}")
    print(f"{turn.active_agent}: {turn.text}")
    return turn


if __name__ == "__main__":
    asyncio.run(main())
