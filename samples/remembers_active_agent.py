"""Remembers active agent: each message starts with the specialist the user was talking to.

Run with: python samples/remembers_active_agent.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

The seed's "Remembers active agent" pattern on a ConversationHost with the SQLite store: message 1
goes triage -> billing; the service "restarts" (a new host and store object on the same file);
message 2 starts at billing, and triage is not called.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from agent_framework import Agent

from handoff_builder import ConversationHost, HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.stores import SqliteConversationStore
from handoff_builder.testing import handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import (
    SPECIALIST,
    TRIAGE,
    render,
    run_sample,
    sample_client,
    sample_options,
    show,
)

COMPANY = "Contoso"


def support_desk(provider: str, *, first_run: bool) -> HandoffWorkflowBuilder:
    options = sample_options()  # a cap on output tokens
    # Offline, the first run's models route and answer; after the restart, triage is not called.
    triage_script = (
        [handoff_to("billing", goal="Explain the March invoice.", tool_name="transfer_to_billing")]
        if first_run
        else []
    )
    billing_answer = (
        "Your March invoice is 42 EUR: the plan plus one roaming day."
        if first_run
        else "It was paid by card on March 3rd."
    )
    triage = Agent(
        client=sample_client(provider, "triage", *triage_script),
        name="triage",
        instructions=render(TRIAGE, company=COMPANY),
        default_options=options,
    )
    billing = Agent(
        client=sample_client(provider, "billing", reply(billing_answer)),
        name="billing",
        instructions=render(
            SPECIALIST, role="billing", company=COMPANY, handoff_tools="transfer_back_to_triage"
        ),
        description="charges, invoices, plans",
        default_options=options,
    )
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, "charges, invoices, plans", tool_name="transfer_to_billing")
        .with_hand_back(triage)  # specialists hand back when the user changes topic
    )


async def main(provider: str = "scripted", database: Path | None = None) -> HandoffTurnResult:
    with tempfile.TemporaryDirectory() as folder:
        path = database or Path(folder) / "conversations.db"
        store = SqliteConversationStore(path)
        host = ConversationHost(support_desk(provider, first_run=True), store)
        print("user: What is on my March invoice?")
        show(await host.send("customer-42", "What is on my March invoice?"))
        await store.close()

        print("(the service restarts)")
        store = SqliteConversationStore(path)
        host = ConversationHost(support_desk(provider, first_run=False), store)
        print(f"active agent: {await host.active_agent('customer-42')}")
        print("user: When was it paid?")
        turn = await host.send("customer-42", "When was it paid?")
        show(turn)
        await store.close()
        return turn


if __name__ == "__main__":
    run_sample(__doc__, main)
