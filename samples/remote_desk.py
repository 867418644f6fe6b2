"""A local triage agent asks a remote expert, then hands the conversation to a remote specialist.

Run with: python samples/remote_desk.py [--provider scripted|openai|azure]
Extras: a2a; openai or azure for that --provider

Both remote agents are reached through the Agent2Agent protocol (A2A), as agent_framework's
``A2AAgent(url=..., name=...)``; the local desk sees nothing else of them. So that the sample runs
alone, it starts them itself, each a desk of its own served with ``a2a_app`` on a free port of
127.0.0.1 (any A2A server would do), and stops them at the end:

* ``policy`` answers questions on the refund policy. Triage asks it through its delegate tool
  ``ask_policy`` and answers the user itself with what it learnt: the expert's answer is the
  tool's result, and triage stays in charge.
* ``returns`` handles refunds, with a tool of its own on its server, ``start_refund``, which needs
  the customer's confirmation: its A2A task then waits for input and asks. Triage hands the
  conversation to it; its question is the turn's pending request (``send`` raises
  ``PendingRequestsError``, whose request reads as a ``RemoteQuestion``); the next message
  answers it and continues its task; when its task completes, the conversation comes back to
  triage with its answer as the summary.

A ``ConversationHost`` keeps the local conversation (and the agent it is with). The sample prints
what the user sees, with the handoffs and what the expert answered.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from agent_framework import Agent, tool

from handoff_builder import (
    ConversationHost,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    PendingRequestsError,
    RemoteQuestion,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import call_tool, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import extra, run_sample, sample_client, sample_options

with extra("a2a"):  # agent_framework's A2A agent, and a server for the remote desks
    import uvicorn
    from agent_framework_a2a import A2AAgent

    from handoff_builder import a2a_app

MESSAGES = (
    "Hi! A parcel of mine arrived broken. How long do I have to get my money back?",
    "Then please refund it: order A-17, 24.90 EUR.",
    "approve",
)
POLICY = "Damaged parcels are refunded in full within 30 days of delivery."
REFUNDED = "Refund of A-17 started: 24.90 EUR back to your card within 5 working days."
REFUNDS: list[tuple[str, float]] = []
"""The refunds ``start_refund`` made, on the returns server."""


@tool(
    name="start_refund",
    description="Refund an order's amount in EUR to the customer's card.",
    approval_mode="always_require",
)
def start_refund(order: str, amount: float) -> str:
    REFUNDS.append((order, amount))
    return f"Refund of {order} started: {amount:.2f} EUR."


# -- the remote side: two desks on servers of their own ------------------------------------------


def policy_desk(provider: str) -> ConversationHost:
    """The refund-policy expert, alone in a desk of its own."""
    policy = Agent(
        client=sample_client(provider, "policy", reply(POLICY)),
        name="policy",
        instructions="You know the refund policy. Answer the question in one sentence.",
        default_options=sample_options(),  # a cap on output tokens
    )
    return ConversationHost(HandoffWorkflowBuilder(policy), InMemoryConversationStore())


def returns_desk(provider: str) -> ConversationHost:
    """The returns specialist: it starts refunds, each confirmed by the customer first."""
    returns = Agent(
        client=sample_client(
            provider,
            "returns",
            call_tool("start_refund", order="A-17", amount=24.90),
            reply(REFUNDED),
        ),
        name="returns",
        instructions=(
            "You handle refunds. Start the refund the conversation asks for with start_refund, "
            "then tell the customer in one sentence when the money arrives."
        ),
        tools=[start_refund],
        default_options=sample_options(),
    )
    return ConversationHost(HandoffWorkflowBuilder(returns), InMemoryConversationStore())


@asynccontextmanager
async def serving(host: ConversationHost, name: str, description: str) -> AsyncGenerator[str]:
    """``host`` served over A2A on a free port of 127.0.0.1: its address, until the block ends."""
    # IPPROTO_TCP: asyncio turns Nagle's algorithm off only on the connections of such a socket.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    app = a2a_app(host, name=name, description=description, url=url)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():  # it could not start: say why
                task.result()
                raise RuntimeError(f"the A2A server for {name} stopped")
            await asyncio.sleep(0.02)
        yield url
    finally:
        server.should_exit = True
        await task


# -- the local side: triage, and the two remote agents as it sees them ---------------------------


def local_desk(provider: str, policy_url: str, returns_url: str) -> ConversationHost:
    """Triage, with ``policy`` as a remote expert and ``returns`` as a remote handoff target."""
    triage = Agent(
        client=sample_client(
            provider,
            "triage",
            call_tool("ask_policy", task="How long can a damaged parcel be refunded?"),
            reply(f"{POLICY} Shall I start the refund?"),
            handoff_to("returns", goal="Refund order A-17 (24.90 EUR): the parcel arrived broken."),
            reply("Your refund is on its way. Anything else I can do for you?"),
        ),
        name="triage",
        instructions=(
            "You are the front desk of a parcel shop. Ask ask_policy about the refund policy and "
            "answer the customer yourself. Hand refunds to returns, saying what to refund. When "
            "returns hands the conversation back, tell the customer and ask if there is anything "
            "else."
        ),
        default_options=sample_options(),
    )
    policy = A2AAgent(url=policy_url, name="policy")  # on another server
    returns = A2AAgent(url=returns_url, name="returns")
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "questions on the refund policy")  # a remote expert
        .with_handoff(triage, returns, "refunds and returns")  # a remote handoff target
        .with_hand_back(triage, [returns])  # its finished task hands the conversation back
    )
    return ConversationHost(builder, InMemoryConversationStore())


def show(turn: HandoffTurnResult, answer: str | None = None) -> None:
    """A turn as the user sees it, with the delegations and handoffs where they happened.

    ``answer``: the message that answered a question the turn waited for; what was written up to
    it (the question, the answer) is on screen already and is not printed again.
    """
    handoffs = {handoff.call_id: handoff for handoff in turn.handoffs}
    asked = {delegation.call_id: delegation for delegation in turn.delegations}
    seen = answer is not None
    for message in turn.messages:
        shown = message.text and (message.role == "assistant" or message.author_name is None)
        if shown and not seen:
            print(f"{message.author_name or 'user'}: {message.text}")
        if seen and message.role == "user" and message.text == answer:
            seen = False
        for content in message.contents:
            if content.type != "function_call":
                continue
            delegation = asked.get(str(content.call_id))
            handoff = handoffs.get(str(content.call_id))
            if delegation is not None:
                caller, expert = delegation.caller, delegation.expert
                print(f"  [{caller} asks {expert}, over A2A] {delegation.task}")
                print(f"  [{expert} answers {caller}] {delegation.result}")
            elif handoff is not None:
                print(f"  [{handoff.kind}] {handoff.source} -> {handoff.target}: {handoff.goal}")
    print(f"  (the conversation is now with {turn.active_agent})")


async def send(desk: ConversationHost, text: str) -> HandoffTurnResult | RemoteQuestion:
    """The turn ``text`` runs, or the remote agent's question it waits for."""
    try:
        return await desk.send("customer-1", text)
    except PendingRequestsError as waiting:
        [question] = [RemoteQuestion.of(request) for request in waiting.requests]
        if question is None:
            raise
        return question


async def main(provider: str = "scripted") -> list[HandoffTurnResult | RemoteQuestion]:
    REFUNDS.clear()
    async with AsyncExitStack() as servers:
        policy_url = await servers.enter_async_context(
            serving(policy_desk(provider), "policy", "Answers questions on the refund policy.")
        )
        returns_url = await servers.enter_async_context(
            serving(returns_desk(provider), "returns", "Starts refunds, confirmed by the customer.")
        )
        print(f"(policy serves A2A at {policy_url}, returns at {returns_url})")
        desk = local_desk(provider, policy_url, returns_url)
        turns: list[HandoffTurnResult | RemoteQuestion] = []
        for text in MESSAGES:
            print(f"\nuser: {text}")
            waited = bool(turns) and isinstance(turns[-1], RemoteQuestion)
            turns.append(await send(desk, text))
            if isinstance(turns[-1], RemoteQuestion):  # the next message answers it
                print(f"  [{turns[-1].agent} asks, over A2A] {turns[-1].text}")
                print("  (the turn waits for the answer)")
            else:
                show(turns[-1], answer=text if waited else None)
    print(f"\n(refunds made on the returns server: {REFUNDS})")
    return turns


if __name__ == "__main__":
    run_sample(__doc__, main)
