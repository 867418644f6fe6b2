"""Triage and three order specialists in a mesh: agent_framework's Python handoff sample, ported.

Run with: python samples/python_handoff.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

The shape of the simple handoff sample of agent-framework-orchestrations' ``HandoffBuilder``: a
triage agent and a refund, an order and a return specialist, each with a tool of its own; no
handoffs declared, so every agent can hand off to every other (a mesh); the next message goes to
the agent that answered the last one; the conversation ends when a reply says "welcome". What
changes in the port, and why, is in docs/porting-from-python-handoffbuilder.md: the messages
are sent with ``workflow.run(message)``, one user turn each, instead of answering a user-input
request after every reply, and the loop that sends them asks the ending condition itself.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from agent_framework import Agent, Message, Workflow, tool

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder, handoff_tool_name
from handoff_builder.testing import ModelCall, Step, call_tool, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, run_turn, sample_client, sample_options, show

FIRST_MESSAGE = "Hello, I need assistance with my recent purchase."
USER_REPLIES = (
    "My order 1234 arrived damaged and the packaging was destroyed. I'd like to return it.",
    "Please also process a refund for order 1234.",
    "Thanks for resolving this.",
)


@tool
def process_refund(order_number: str) -> str:
    """Process a refund for the order with this number."""
    return f"Refund processed successfully for order {order_number}."


@tool
def check_order_status(order_number: str) -> str:
    """Check the status of the order with this number."""
    return f"Order {order_number} is being processed and ships in 2 business days."


@tool
def process_return(order_number: str) -> str:
    """Start the return of the order with this number."""
    return f"Return initiated for order {order_number}; the instructions are on their way by email."


def concluded(conversation: Sequence[Message]) -> bool:
    """The sample's ending condition: the last message says "welcome" (a closing reply)."""
    return bool(conversation) and "welcome" in conversation[-1].text.lower()


# Offline, each agent's model is a function of what it received: the user's last message.
TOPICS = {  # a word of the message: the agent for it, and the goal of a handoff to it
    "refund": ("refund_agent", "Refund order {number}."),
    "return": ("return_agent", "Return the damaged order {number}."),
    "ship": ("order_agent", "Say when order {number} ships."),
}


def order_number(text: str) -> str:
    found = re.search(r"\d+", text)
    return found[0] if found else "unknown"


def topic_handoff(call: ModelCall) -> Step | None:
    """The handoff the user's last message asks for, if the agent has it (else ``None``)."""
    said = call.user_text.lower()
    for word, (agent, goal) in TOPICS.items():
        if word in said and handoff_tool_name(agent) in call.tool_names:
            return handoff_to(agent, goal=goal.format(number=order_number(said)))
    return None


def scripted_triage(call: ModelCall) -> Step:
    return topic_handoff(call) or reply(
        "Could you tell me more about the problem with your purchase?"
    )


def scripted_specialist(topic: str, tool_name: str) -> Callable[[ModelCall], Step]:
    """A specialist: uses its tool on its own topic, hands other topics on, thanks are answered."""

    def model(call: ModelCall) -> Step:
        last = call.messages[-1]
        if last.role == "tool":  # its tool answered: tell the user
            return reply(f"{last.contents[0].result} Anything else I can do?")
        said = call.user_text.lower()
        if "thank" in said:
            return reply("You're welcome! Have a great day.")
        if topic in said:
            return call_tool(tool_name, order_number=order_number(said))
        return topic_handoff(call) or reply("Could you give me the order number?")

    return model


def support_agents(provider: str) -> list[Agent]:
    """triage_agent, refund_agent, order_agent and return_agent, as the original names them."""
    options = sample_options()  # a cap on output tokens
    triage = Agent(
        client=sample_client(provider, "triage_agent", respond_with=scripted_triage),
        name="triage_agent",
        instructions="You are frontline support triage. Route customer issues to the "
        "appropriate specialist agents based on the problem described.",
        default_options=options,
    )
    refund = Agent(
        client=sample_client(
            provider, "refund_agent", respond_with=scripted_specialist("refund", "process_refund")
        ),
        name="refund_agent",
        instructions="You process refund requests.",
        tools=[process_refund],
        default_options=options,
    )
    order = Agent(
        client=sample_client(
            provider, "order_agent", respond_with=scripted_specialist("ship", "check_order_status")
        ),
        name="order_agent",
        instructions="You handle order and shipping inquiries.",
        tools=[check_order_status],
        default_options=options,
    )
    returns = Agent(
        client=sample_client(
            provider, "return_agent", respond_with=scripted_specialist("return", "process_return")
        ),
        name="return_agent",
        instructions="You manage product return requests.",
        tools=[process_return],
        default_options=options,
    )
    return [triage, refund, order, returns]


def support_workflow(agents: Sequence[Agent]) -> Workflow:
    triage, *specialists = agents
    return (
        HandoffWorkflowBuilder(triage)  # with_start_agent(triage)
        .add_participants(*specialists)  # no handoffs declared: every agent reaches every other
        .enable_return_to_previous()  # on by default in HandoffBuilder, off here
        .with_name("customer_support_handoff")
        .build()
    )


async def main(
    provider: str = "scripted", *, agents: Sequence[Agent] | None = None
) -> list[HandoffTurnResult]:
    """Send the first message, then the user's replies until a reply concludes the conversation."""
    workflow = support_workflow(agents or support_agents(provider))
    turns: list[HandoffTurnResult] = []
    for message in (FIRST_MESSAGE, *USER_REPLIES):
        print(f"user: {message}")
        turn = await run_turn(workflow, message)
        show(turn)
        turns.append(turn)
        if concluded(turn.conversation):
            print("[the conversation is over]")
            break
    return turns


if __name__ == "__main__":
    run_sample(__doc__, main)
