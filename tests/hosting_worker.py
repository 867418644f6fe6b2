"""A worker process for the hosting tests: ``python -m tests.hosting_worker MODE STORE ID [...]``.

Modes:
  crash   send a message; triage hands off to billing, and billing's model call writes a marker
          file and hangs, so the test can kill this process mid-turn.
  resume  finish the interrupted turn (waiting for the killed worker's lease to expire); triage
          must not be called; print a JSON report.
  send    send one message (waiting for the conversation if it is busy); print a JSON report.
  seed1   the seed's message 1: triage hands off to billing, which answers.
  seed2   the seed's message 2 in a new process: billing answers; print who was called.

STORE is ``sqlite:PATH`` or ``postgres:PREFIX`` (the DSN comes from the environment variable the
tests use). ``HOSTING_WORKER_LEASE_TTL`` sets the hosts' lease ttl, in seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from agent_framework import Agent

from handoff_builder import ConversationHost, HandoffWorkflowBuilder
from handoff_builder.stores import (
    ConversationStore,
    PostgresConversationStore,
    SqliteConversationStore,
)
from handoff_builder.testing import ModelCall, Step, client_of, handoff_to, reply, scripted_agent


def open_store(spec: str) -> ConversationStore:
    kind, _, value = spec.partition(":")
    if kind == "sqlite":
        return SqliteConversationStore(value)
    dsn = os.environ["HANDOFF_BUILDER_POSTGRES_DSN"]
    return PostgresConversationStore(dsn, table_prefix=value)


def builder(triage: Agent, billing: Agent) -> HandoffWorkflowBuilder:
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing)


def hosted(triage: Agent, billing: Agent, store: ConversationStore) -> ConversationHost:
    """The host, with the lease ttl the test asks for (a killed worker's lease must expire)."""
    ttl = float(os.environ.get("HOSTING_WORKER_LEASE_TTL", "30"))
    return ConversationHost(builder(triage, billing), store, lease_ttl=ttl)


async def main(mode: str, spec: str, conversation_id: str, extra: str) -> None:
    store = open_store(spec)
    if mode == "crash":
        marker = Path(extra)

        def hang(call: ModelCall) -> Step:
            del call
            marker.write_text("billing was called", encoding="utf-8")
            time.sleep(120)  # the test kills this process here
            return reply("never sent")

        triage = scripted_agent("triage", handoff_to("billing", goal="Refund the double charge."))
        billing = scripted_agent("billing", hang)
        await hosted(triage, billing, store).send(conversation_id, "I was charged twice")
    elif mode == "resume":
        triage = scripted_agent("triage")  # no step: calling triage would raise
        billing = scripted_agent("billing", reply("Refunded after the restart."))
        result = await hosted(triage, billing, store).resume(conversation_id, wait=True)
        record = await store.load(conversation_id)
        assert record is not None
        report = {
            "text": result.text if result else None,
            "active_agent": result.active_agent if result else None,
            "triage_calls": len(client_of(triage).calls),
            "billing_calls": len(client_of(billing).calls),
            "billing_saw": client_of(billing).calls[0].texts if client_of(billing).calls else [],
            "stored_roles": [(m["role"], m.get("author_name")) for m in record.messages],
        }
        print(json.dumps(report))  # noqa: T201
    elif mode in ("seed1", "seed2"):
        first = mode == "seed1"
        triage = scripted_agent(
            "triage", *([handoff_to("billing", goal="Invoice.")] if first else [])
        )
        billing = scripted_agent(
            "billing", reply("Invoice: 42 EUR." if first else "Paid on March 3rd.")
        )
        message = "What is on my invoice?" if first else "When was it paid?"
        result = await hosted(triage, billing, store).send(conversation_id, message)
        report = {
            "text": result.text,
            "active_agent": result.active_agent,
            "triage_calls": len(client_of(triage).calls),
            "billing_saw": client_of(billing).calls[0].texts,
        }
        print(json.dumps(report))  # noqa: T201
    else:
        triage = scripted_agent("triage", reply(f"triage answers {extra}"))
        billing = scripted_agent("billing")
        result = await hosted(triage, billing, store).send(
            conversation_id, f"message {extra}", wait=True
        )
        print(json.dumps({"text": result.text}))  # noqa: T201
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
