"""The .NET handoff sample, ported: an intake agent, experts reachable from every agent.

Run with: python samples/dotnet_handoff.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

As in .NET's Orchestration/Handoff sample: every agent (intake and experts) can hand off to every
expert, return-to-previous lets an expert that asked the user a question get the answer, and a
console loop streams who is speaking. Offline it plays three scripted messages; with a real
provider it reads your messages until you type "exit".
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from agent_framework import Agent, AgentResponseUpdate, Workflow

from handoff_builder import HandoffEvent, HandoffWorkflowBuilder
from handoff_builder.testing import handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, sample_client, sample_options

SCRIPTED_MESSAGES = (
    "I need a flight from Oslo to Lisbon on May 3rd.",
    "Economy, one adult.",
    "And a hotel near the old town for two nights?",
)


def agents(provider: str) -> tuple[Agent, list[Agent]]:
    options = sample_options()  # a cap on output tokens
    intake = Agent(
        client=sample_client(
            provider,
            "intake",
            handoff_to("flights", goal="Book a flight Oslo to Lisbon on May 3rd."),
        ),
        name="intake",
        instructions="You greet travellers and hand their request to the right expert.",
        description="Greets the traveller and routes the request.",
        default_options=options,
    )
    flights = Agent(
        client=sample_client(
            provider,
            "flights",
            reply("Which cabin class, and how many travellers?"),
            reply("Booked: OSL to LIS, May 3rd, 09:40, economy, 1 adult."),
            handoff_to("hotels", goal="Two nights near Lisbon's old town from May 3rd."),
        ),
        name="flights",
        instructions="You book flights. Ask for what you need; hand hotel questions to hotels.",
        description="Flight bookings and changes.",
        default_options=options,
    )
    hotels = Agent(
        client=sample_client(
            provider, "hotels", reply("Booked: Casa Alfama, May 3rd to 5th, two nights.")
        ),
        name="hotels",
        instructions="You book hotels. Hand flight questions to flights.",
        description="Hotel bookings.",
        default_options=options,
    )
    return intake, [flights, hotels]


def build(provider: str) -> Workflow:
    intake, experts = agents(provider)
    everyone = [intake, *experts]
    builder = HandoffWorkflowBuilder(intake)
    for expert in experts:  # every agent can reach every expert
        builder.with_handoffs([agent for agent in everyone if agent is not expert], expert)
    return builder.enable_return_to_previous().build()


async def console(provider: str) -> AsyncIterator[str]:
    if provider == "scripted":
        for message in SCRIPTED_MESSAGES:
            print(f"> {message}")
            yield message
        return
    while (message := await asyncio.to_thread(input, "> ")).strip().lower() != "exit":
        yield message


async def main(provider: str = "scripted", messages: Iterable[str] | None = None) -> list[str]:
    workflow = build(provider)
    speakers: list[str] = []
    source = console(provider) if messages is None else _iterate(messages)
    async for message in source:
        speaking = None
        async for event in workflow.run(message, stream=True):
            data = event.data
            if isinstance(data, HandoffEvent):
                print(f"\n  ({data.source} -> {data.target})", end="")
            elif isinstance(data, AgentResponseUpdate) and data.text:
                if data.author_name != speaking:
                    speaking = str(data.author_name)
                    speakers.append(speaking)
                    print(f"\n{speaking}: ", end="")
                print(data.text, end="")
        print()
    return speakers


async def _iterate(messages: Iterable[str]) -> AsyncIterator[str]:
    for message in messages:
        yield message


if __name__ == "__main__":
    run_sample(__doc__, main)
