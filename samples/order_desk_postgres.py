"""End to end: a real model, an agent with its own tool, a conversation hosted on PostgreSQL.

Run with: HANDOFF_BUILDER_POSTGRES_DSN=postgresql://user@host/db \
    python samples/order_desk_postgres.py [--provider scripted|openai|azure]
Extras: postgres; openai or azure for that --provider

Triage hands order questions to the orders agent, which looks orders up with its own tool,
``order_status``. The conversation lives in PostgreSQL. The second message is sent by a new host
on a new connection, as a restarted service would: it starts at the orders agent, which reads
the first message and the tool's result from the stored history. docs/end-to-end.md walks
through it.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

from agent_framework import Agent, tool

from handoff_builder import ConversationHost, HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import ModelCall, Step, call_tool, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import (
    SampleSetupError,
    extra,
    last_line,
    run_sample,
    sample_client,
    sample_options,
)

with extra("postgres"):
    from handoff_builder.stores import PostgresConversationStore

DSN_VARIABLE = "HANDOFF_BUILDER_POSTGRES_DSN"
ORDERS = {"1234": "shipped on 28 November; the courier delivers it on 2 December"}

MESSAGES = ("Hi, where is my order 1234?", "Can the courier leave it with my neighbour?")


@tool
def order_status(order_id: str) -> str:
    """Look up the delivery status of an order by its number."""
    return ORDERS.get(order_id.strip("# "), f"There is no order {order_id}.")


def scripted_triage(call: ModelCall) -> Step:
    """Offline triage: anything about an order goes to the orders agent."""
    if "order" in call.user_text.lower():
        return handoff_to("orders", goal=f"The user asks: {call.user_text}")
    return reply("Hello! Ask me about an order.")


def scripted_orders(call: ModelCall) -> Step:
    """Offline orders agent: it answers from what it received, as a model would."""
    last = call.messages[-1]
    if last.role == "tool":  # its tool answered: say what it found
        return reply(f"Your order was {last.contents[0].result}.")
    number = re.search(r"\d+", call.user_text)
    if number is not None:  # an order number: look it up
        return call_tool("order_status", order_id=number.group())
    if call.sees("order 1234"):  # no number now, but the stored history has one
        return reply("Yes: I have asked the courier to leave order 1234 with your neighbour.")
    return reply("Which order do you mean? Please give me its number.")


def desk(provider: str = "scripted") -> HandoffWorkflowBuilder:
    """The workflow: triage and an orders agent with its own tool, handoffs both ways."""
    options = sample_options()  # a cap on output tokens
    triage = Agent(
        client=sample_client(provider, "triage", respond_with=scripted_triage),
        name="triage",
        instructions="You are the front desk of an online shop. Hand questions about an order "
        "to the orders agent. Do not answer them yourself.",
        default_options=options,
    )
    orders = Agent(
        client=sample_client(provider, "orders", respond_with=scripted_orders),
        name="orders",
        instructions="You answer questions about orders. Look an order up with order_status "
        "before you say anything about it. Hand anything else back to triage.",
        description="Order status, delivery and changes to an order.",
        tools=[order_status],
        default_options=options,
    )
    return HandoffWorkflowBuilder(triage).with_handoff(triage, orders).with_handoff(orders, triage)


async def main(
    provider: str = "scripted", *, dsn: str | None = None, table_prefix: str = "handoff_"
) -> list[HandoffTurnResult]:
    """Send the two messages, each from a new host and connection; print what happened."""
    dsn = dsn or os.environ.get(DSN_VARIABLE)
    if not dsn:
        raise SampleSetupError(f"Set {DSN_VARIABLE} to a PostgreSQL address, e.g. {_EXAMPLE_DSN}")
    conversation = f"order-desk-{uuid.uuid4().hex[:8]}"
    turns: list[HandoffTurnResult] = []
    for message in MESSAGES:  # each message as a freshly started service would send it
        async with PostgresConversationStore(dsn, table_prefix=table_prefix) as store:
            host = ConversationHost(desk(provider), store)
            print(f"[{conversation}] starts at {await host.active_agent(conversation) or 'triage'}")
            print(f"user: {message}")
            turn = await host.send(conversation, message)
            for handoff in turn.handoffs:
                print(f"  [{handoff.source} -> {handoff.target}] {handoff.goal}")
            print(last_line(turn))
            turns.append(turn)
    async with PostgresConversationStore(dsn, table_prefix=table_prefix) as store:
        stored = await ConversationHost(desk(provider), store).history(conversation)
        print(f"[{conversation}] {len(stored)} messages stored in {store.tables[1]}")
    return turns


_EXAMPLE_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"

if __name__ == "__main__":
    run_sample(__doc__, main)
