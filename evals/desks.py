"""The support desks that evals/support_desk.jsonl measures: ``--workflow evals.desks:NAME``.

Run with (from the repository's root, a model server set up as docs/evals.md says):
    handoff-builder eval evals/support_desk.jsonl --workflow evals.desks:seed_desk \
        --provider openai --max-output-tokens 256 --concurrency 1 --out /tmp/eval-seed

Both desks are triage, billing and tech for Contoso Telecom: triage hands off to billing
(charges, invoices, plans) and to tech (errors, bugs, how-to questions), and each specialist hands
back to triage with a summary (the seed's "Hand back" variant), at most 4 handoffs per message.

* ``builtin_desk``: the desk ``handoff-builder chat`` and ``eval`` run without ``--workflow``
  (its own short instructions, the SDK's default tool names).
* ``seed_desk_bounce_guard``: ``seed_desk`` with ``with_bounce_guard()``.
* ``seed_desk_reply_tool``: ``seed_desk`` with ``with_reply_tool()``: every agent also has
  ``reply_to_user(text)``, to answer a greeting or a thanks in words.
* ``seed_desk``: the seed's own prompts (shared/seeds, "Hand back") as the agents' instructions,
  its tool names (``transfer_to_billing``, ``transfer_to_tech``; the hand-back is the SDK's
  ``transfer_back_to_triage``, as the seed names it), and the SDK's default handoff instructions
  after them.

Each takes ``provider`` (``scripted`` offline, ``openai``, ``azure``) and ``max_output_tokens``,
which ``handoff-builder eval`` passes from ``--provider`` and ``--max-output-tokens``. Offline
the agents are keyword-driven scripts: they exercise the wiring and the case file, not judgement.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, cast

from agent_framework import Agent
from samples._shared import SPECIALIST_HAND_BACK, TRIAGE_HAND_BACK, render

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.providers import agent_options, chat_client
from handoff_builder.testing import ModelCall, Step, call_tool, handoff_to, reply, scripted_agent

__all__ = [
    "COMPANY",
    "MAX_HANDOFFS",
    "builtin_desk",
    "seed_desk",
    "seed_desk_bounce_guard",
    "seed_desk_reply_tool",
]

COMPANY = "Contoso Telecom"
MAX_HANDOFFS = 4
"""The seed's cap for the "Hand back" variant: handoffs per user message, hand-backs included."""

# What each specialist owns, as the seed's triage prompt lists it (the tools' descriptions).
REASONS = {"billing": "charges, invoices, plans", "tech": "errors, bugs, how-to questions"}
# The offline scripts' idea of a topic: words that mark it, nothing more.
_KEYWORDS = {
    "billing": ("bill", "charge", "invoice", "refund", "plan", "price", "pay", "cost", "fee"),
    "tech": ("crash", "error", "bug", "router", "internet", "wi-fi", "signal", "how do", "app "),
}


def builtin_desk(
    provider: str = "scripted", max_output_tokens: int | None = None
) -> HandoffWorkflowBuilder:
    """The built-in support desk: what ``handoff-builder eval`` runs without ``--workflow``."""
    # The CLI's desk is not public API; naming it here lets one command line measure both
    # desks the same way. It is the same function the CLI calls.
    from handoff_builder._support_desk import support_desk

    return support_desk(provider, max_output_tokens)


def seed_desk(
    provider: str = "scripted", max_output_tokens: int | None = None
) -> HandoffWorkflowBuilder:
    """The seed's prompts and tool names, with the SDK's default handoff instructions."""
    triage = _agent(
        provider,
        max_output_tokens,
        "triage",
        render(TRIAGE_HAND_BACK, company=COMPANY),
        _scripted_triage,
    )
    specialists = {
        role: _agent(
            provider,
            max_output_tokens,
            role,
            render(SPECIALIST_HAND_BACK, role=role, company=COMPANY),
            _scripted_specialist(role),
        )
        for role in ("billing", "tech")
    }
    builder = HandoffWorkflowBuilder(triage)
    for role, specialist in specialists.items():
        builder.with_handoff(triage, specialist, REASONS[role], tool_name=f"transfer_to_{role}")
    return (
        builder.with_hand_back(triage)
        .with_max_handoffs_per_turn(MAX_HANDOFFS)
        .with_name("seed-support-desk")
    )


def seed_desk_bounce_guard(
    provider: str = "scripted", max_output_tokens: int | None = None
) -> HandoffWorkflowBuilder:
    """The seed desk with ``with_bounce_guard()``: a first straight hand-back is refused."""
    return seed_desk(provider, max_output_tokens).with_bounce_guard()


def seed_desk_reply_tool(
    provider: str = "scripted", max_output_tokens: int | None = None
) -> HandoffWorkflowBuilder:
    """The seed desk with ``with_reply_tool()``: a greeting has a tool of its own."""
    return seed_desk(provider, max_output_tokens).with_reply_tool()


def _agent(
    provider: str,
    max_output_tokens: int | None,
    name: str,
    instructions: str,
    script: Callable[[ModelCall], Step],
) -> Agent:
    if provider == "scripted":
        return scripted_agent(name, instructions=instructions, respond_with=script)
    return Agent(
        client=chat_client(provider),
        name=name,
        instructions=instructions,
        default_options=cast(Any, agent_options(max_output_tokens)),
    )


def _topics(text: str) -> list[str]:
    """The topics ``text`` mentions, in the order it first mentions them."""
    lowered = text.lower() + " "
    found = {
        topic: min(at for word in words if (at := lowered.find(word)) >= 0)
        for topic, words in _KEYWORDS.items()
        if any(word in lowered for word in words)
    }
    return sorted(found, key=found.__getitem__)


def _handed_back(call: ModelCall) -> set[str]:
    """The specialists whose hand-back triage has read since the user's last message."""
    done: set[str] = set()
    for message in reversed(call.messages):
        if message.role == "user" and message.author_name is None:
            break
        done.update(re.findall(r"Hand-back from (\w+) to you", message.text))
    return done


def _scripted_triage(call: ModelCall) -> Step:
    done = _handed_back(call)
    open_topics = [topic for topic in _topics(call.user_text) if topic not in done]
    if not open_topics:
        if done:
            return reply("Is there anything else I can help you with?")
        return reply("Hello! What can I help you with today: a bill, or a technical problem?")
    topic = open_topics[0]
    return handoff_to(
        topic, goal=f"The user says: {call.user_text}", tool_name=f"transfer_to_{topic}"
    )


def _scripted_specialist(role: str) -> Callable[[ModelCall], Step]:
    def respond(call: ModelCall) -> Step:
        topics = _topics(call.user_text)
        if topics and topics[-1] != role:
            summary = f"{role} part done; open: {call.user_text}"
            return call_tool("transfer_back_to_triage", summary=summary)
        return reply(f"({role}) I'm on it: {call.user_text}")

    return respond
