"""Autonomous mode: an agent keeps working without the user until it hands off.

Run with: python samples/autonomous_mode.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

The researcher is run again with a continuation prompt after each reply (at most 3 times here),
until it hands its findings to the writer, which answers the user.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent_framework import Agent

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, run_turn, sample_client, sample_options, show


async def main(provider: str = "scripted") -> HandoffTurnResult:
    options = sample_options()  # a cap on output tokens
    researcher = Agent(
        client=sample_client(
            provider,
            "researcher",
            reply("Step 1: heat pumps move heat instead of making it."),
            reply("Step 2: their efficiency (COP) is typically 3 to 4."),
            handoff_to("writer", goal="Explain why heat pumps are efficient, from my notes."),
        ),
        name="researcher",
        instructions="Research the question step by step, then hand your notes to the writer.",
        default_options=options,
    )
    writer = Agent(
        client=sample_client(
            provider,
            "writer",
            reply("Heat pumps move heat rather than create it, so 1 kWh gives 3-4 kWh of heat."),
        ),
        name="writer",
        instructions="Write a short, clear answer from the researcher's notes.",
        description="Writes the final answer for the user.",
        default_options=options,
    )
    workflow = (
        HandoffWorkflowBuilder(researcher)
        .with_handoff(researcher, writer)
        .with_autonomous_mode(turn_limit=3, agents=[researcher])
        .build()
    )
    turn = await run_turn(workflow, "Why are heat pumps so efficient?")
    prompts = [m.text for m in turn.conversation if m.role == "user"][1:]
    print(f"continuation prompts: {len(prompts)}")
    show(turn)
    return turn


if __name__ == "__main__":
    run_sample(__doc__, main)
