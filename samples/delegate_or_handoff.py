"""The same experts two ways: asked as delegates (the caller stays), or handed the conversation.

Run with: python samples/delegate_or_handoff.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

A support agent gets a question that needs the refund policy and the order ledger. With
``with_delegate`` it asks both experts through ``ask_policy`` and ``ask_ledger``, gets their
answers as tool results, and answers the user itself: it stays the active agent, the shared
conversation holds only its calls and their results, and the experts' own messages are in
``result.delegations``. With ``with_handoff`` the same experts are handoff targets: the support
agent passes the conversation to the policy expert, which answers the user and is the active agent
from then on. Each run prints who answered, who is active, the shape of the conversation and the
trace (with who decided each step).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from agent_framework import Agent, Workflow

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import ScriptStep, call_tool, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, sample_client, sample_options

QUESTION = "I returned order A-7 after 40 days. Can I still get my 80 EUR back?"
POLICY = "Returns within 60 days are refunded in full; after that, store credit only."
LEDGER = "Order A-7: 80 EUR paid on 2026-10-20, returned on 2026-11-29 (40 days)."


def agent(
    provider: str, name: str, instructions: str, script: Sequence[ScriptStep], description: str
) -> Agent:
    """An agent on a real provider, or on a scripted model that plays ``script`` (offline)."""
    return Agent(
        client=sample_client(provider, name, *script),
        name=name,
        instructions=instructions,
        description=description,
        default_options=sample_options(),  # a cap on output tokens
    )


def experts(provider: str, *, asked: bool) -> tuple[Agent, Agent]:
    """The refund-policy and ledger experts (scripted to answer a task, or the user)."""
    policy = agent(
        provider,
        "policy",
        "You know the refund policy. Answer the question you are given in one or two sentences.",
        [reply(POLICY)] if asked else [reply(f"{POLICY} Yours was 40 days: a full refund.")],
        "the refund policy: what is refunded, when, and how",
    )
    ledger = agent(
        provider,
        "ledger",
        "You read the order ledger. Answer with the order's payments and dates.",
        [reply(LEDGER)],
        "order payments, refunds and dates",
    )
    return policy, ledger


def with_delegates(provider: str) -> Workflow:
    """Support asks the experts and answers the user itself."""
    policy, ledger = experts(provider, asked=True)
    support = agent(
        provider,
        "support",
        "You answer customers. Ask ask_policy about the rules and ask_ledger about the order, "
        "then answer the customer yourself.",
        [
            call_tool("ask_ledger", task="When was order A-7 paid and returned, and for how much?"),
            call_tool("ask_policy", task="Is a return after 40 days refunded in full?"),
            reply(
                "Yes: A-7 came back after 40 days, within the 60-day window, so you get the "
                "full 80 EUR back."
            ),
        ],
        "answers customers",
    )
    return (
        HandoffWorkflowBuilder(support)
        .with_delegate(support, policy)
        .with_delegate(support, ledger)
        .with_name("support-with-delegates")
        .build()
    )


def with_handoffs(provider: str) -> Workflow:
    """Support passes the conversation on; the expert answers the user and stays active."""
    policy, ledger = experts(provider, asked=False)
    support = agent(
        provider,
        "support",
        "You answer customers. Hand refund-policy questions to the policy agent and order "
        "questions to the ledger agent.",
        [handoff_to("policy", goal="Is the return of order A-7 after 40 days refunded in full?")],
        "answers customers",
    )
    return (
        HandoffWorkflowBuilder(support)
        .with_handoffs(support, [policy, ledger])
        .with_name("support-with-handoffs")
        .build()
    )


async def run(workflow: Workflow) -> HandoffTurnResult:
    """One user turn, printed: the reply, the active agent, the conversation, the trace."""
    turn = (await workflow.run(QUESTION)).get_outputs()[-1]
    if not isinstance(turn, HandoffTurnResult):
        raise TypeError(f"expected a HandoffTurnResult, got {turn!r}")
    for message in turn.messages:
        if message.role == "assistant" and message.text:
            print(f"  {message.author_name} (to the user): {message.text}")
    print(f"  active agent: {turn.active_agent}")
    shape = ", ".join(f"{m.role}[{m.author_name or 'user'}]" for m in turn.conversation)
    print(f"  shared conversation: {shape}")
    for delegation in turn.delegations:
        print(
            f"  asked {delegation.expert} ({len(delegation.messages)} messages of its own, not "
            f"shared): {delegation.result}"
        )
    print("  trace: " + "; ".join(f"{s.kind} by {s.decided_by} ({s.by})" for s in turn.trace))
    return turn


async def main(provider: str = "scripted") -> tuple[HandoffTurnResult, HandoffTurnResult]:
    print(f"user: {QUESTION}")
    print("as delegates (the caller stays in charge):")
    delegated = await run(with_delegates(provider))
    print("as handoffs (control passes):")
    handed_off = await run(with_handoffs(provider))
    return delegated, handed_off


if __name__ == "__main__":
    run_sample(__doc__, main)
