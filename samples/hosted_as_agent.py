"""The handoff workflow hosted as an agent, over several turns (.NET's 12_HandOff_HostAsAgent).

Run with: python samples/hosted_as_agent.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

``workflow.as_agent()`` turns the whole handoff workflow into one agent_framework agent: callers
see one agent, and the workflow keeps the conversation and the handoffs between turns.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_framework import Agent

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.testing import handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, sample_client, sample_options

TURNS = (
    "My router keeps dropping the connection.",
    "It is the X200 model.",
    "Thanks, that fixed it!",
)


async def main(provider: str = "scripted") -> list[str]:
    options = sample_options()  # a cap on output tokens
    triage = Agent(
        client=sample_client(
            provider,
            "triage",
            handoff_to("tech", goal="The user's router keeps dropping the connection."),
        ),
        name="triage",
        instructions="You are the front desk. Hand technical problems to tech.",
        default_options=options,
    )
    tech = Agent(
        client=sample_client(
            provider,
            "tech",
            reply("Which router model do you have?"),
            reply("For the X200, update the firmware to 3.1 and restart it."),
            reply("Glad to hear it! Anything else?"),
        ),
        name="tech",
        instructions="You fix network problems. Ask for the device model if you need it.",
        description="Network and device problems.",
        default_options=options,
    )
    support = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, tech)
        .enable_return_to_previous()
        .build()
        .as_agent(name="support")
    )
    answers: list[str] = []
    for text in TURNS:
        print(f"user: {text}")
        response = await support.run(text)
        answers.append(response.messages[-1].text)
        print(f"support ({response.messages[-1].author_name}): {answers[-1]}")
    return answers


if __name__ == "__main__":
    run_sample(__doc__, main)
