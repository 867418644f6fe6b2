"""Triage with a math tutor and a history tutor, handoffs there and back: .NET's handoff sample.

Run with: python samples/tutors_handoff.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

The shape of the canonical .NET sample, ported as written there:
``WithHandoffs(triage, [mathTutor, historyTutor]).WithHandoffs([mathTutor, historyTutor], triage)``.
The agents are plain ``agent_framework.Agent``s; the conversation is a console loop over a few
questions, streamed: each agent's reply (once it is complete) and each handoff are printed in the
order they happen.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from agent_framework import Agent, AgentResponseUpdate, Workflow

from handoff_builder import (
    HANDOFF_EVENT,
    HandoffEvent,
    HandoffWorkflowBuilder,
)
from handoff_builder.testing import ModelCall, Step, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, sample_client, sample_options

QUESTIONS = (
    "What is 12 times 7?",
    "And who was the first emperor of Rome?",
    "Thanks! What is 144 divided by 12?",
)


def scripted_triage(call: ModelCall) -> Step:
    """Offline triage: numbers go to the math tutor, the rest to the history tutor."""
    question = call.user_text
    target = "math_tutor" if re.search(r"\d", question) else "history_tutor"
    return handoff_to(target, goal=f"Answer: {question}")


def scripted_tutor(subject: str, answers: dict[str, str]) -> Callable[[ModelCall], Step]:
    """Offline tutor: answers its own subject, hands the rest back to triage."""

    def respond(call: ModelCall) -> Step:
        question = call.user_text
        is_math = bool(re.search(r"\d", question))
        if is_math != (subject == "math"):
            return handoff_to("triage", goal=f"Route: {question}")
        return reply(next((a for q, a in answers.items() if q in question), "Let me think."))

    return respond


def tutors(provider: str) -> Workflow:
    options = sample_options()  # a cap on output tokens
    triage = Agent(
        client=sample_client(provider, "triage", respond_with=scripted_triage),
        name="triage",
        instructions="You determine which agent to use based on the user's homework question. "
        "ALWAYS hand off to another agent.",
        description="Routes messages to the appropriate specialist agent",
        default_options=options,
    )
    math_tutor = Agent(
        client=sample_client(
            provider,
            "math_tutor",
            respond_with=scripted_tutor(
                "math", {"12 times 7": "12 x 7 = 84.", "144": "144 ÷ 12 = 12."}
            ),
        ),
        name="math_tutor",
        instructions="You provide help with math problems. Explain your reasoning at each step "
        "and include examples. Only respond about math.",
        description="Specialist agent for math questions",
        default_options=options,
    )
    history_tutor = Agent(
        client=sample_client(
            provider,
            "history_tutor",
            respond_with=scripted_tutor("history", {"emperor": "Augustus, from 27 BC."}),
        ),
        name="history_tutor",
        instructions="You provide assistance with historical queries. Explain important "
        "events and context clearly. Only respond about history.",
        description="Specialist agent for historical questions",
        default_options=options,
    )
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoffs(triage, [math_tutor, history_tutor])
        .with_handoffs([math_tutor, history_tutor], triage)
        .enable_return_to_previous()  # the next question starts with the tutor who answered
        .build()
    )


async def main(provider: str = "scripted") -> list[str]:
    """Ask each question; print the events in the order they happen; return what was printed."""
    workflow = tutors(provider)
    printed: list[str] = []

    def say(line: str) -> None:
        printed.append(line)
        print(line)

    for question in QUESTIONS:
        say(f"user: {question}")
        speaking: str | None = None
        text = ""
        async for event in workflow.run(question, stream=True):
            if event.type == "output" and isinstance(event.data, AgentResponseUpdate):
                if event.data.text and event.data.author_name != speaking:
                    if speaking is not None and text:
                        say(f"  {speaking}: {text}")
                    speaking, text = event.data.author_name, ""
                text += event.data.text or ""
            elif event.type == HANDOFF_EVENT and isinstance(event.data, HandoffEvent):
                if speaking is not None and text:
                    say(f"  {speaking}: {text}")
                    speaking, text = None, ""
                handoff = event.data
                say(f"  [{handoff.source} -> {handoff.target}] {handoff.goal}")
        if speaking is not None and text:
            say(f"  {speaking}: {text}")
    return printed


if __name__ == "__main__":
    run_sample(__doc__, main)
