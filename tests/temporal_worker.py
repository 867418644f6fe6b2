"""A Temporal worker process for the tests: ``python -m tests.temporal_worker ADDRESS QUEUE LOG``.

It serves :func:`desk` (or :func:`experts` / :func:`fan_out` / :func:`streaming`, with
``TEMPORAL_WORKER_DESK`` set to ``experts`` / ``fan_out`` / ``streaming``) on task queue QUEUE
until it is killed, publishing its agents' updates to the Redis relay at
``TEMPORAL_WORKER_RELAY`` when it is set. Every model call of its
agents is appended to the file LOG as one JSON line (``{"pid", "agent", "user"}``) before it is
answered.
With ``TEMPORAL_WORKER_HANG`` set to an agent's name, that agent's model calls never answer
after they are logged (the worker goes on heartbeating), so that the test can kill the worker in
the middle of one. With ``TEMPORAL_WORKER_SLOW=NAME:SECONDS``, that agent's model calls answer
only after SECONDS (a slow model), so that the test can stop the worker in the middle of one.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from agent_framework import tool

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.temporal import connect, conversation_worker
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    handoff_to,
    never_answer,
    reply,
    respond,
    scripted_agent,
    slow,
)


def logged(
    name: str, log: Path, answer: Callable[[ModelCall], Step]
) -> Callable[[ModelCall], Step]:
    def respond(call: ModelCall) -> Step:
        with log.open("a", encoding="utf-8") as out:
            out.write(
                json.dumps({"pid": os.getpid(), "agent": name, "user": call.user_text}) + "\n"
            )
        if os.environ.get("TEMPORAL_WORKER_HANG") == name:
            return never_answer()
        slow_agent, _, seconds = os.environ.get("TEMPORAL_WORKER_SLOW", "").partition(":")
        if slow_agent == name:
            return slow(answer(call), float(seconds))
        return answer(call)

    return respond


def desk(log: Path) -> HandoffWorkflowBuilder:
    """triage hands every message to billing, which answers with what it received.

    A message about a refund makes billing call ``refund``, a tool that needs approval (and
    logs ``{"pid", "tool"}`` when it runs); billing then answers with the tool's result.
    """

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"pid": os.getpid(), "tool": "refund"}) + "\n")
        return f"refunded {amount} EUR"

    def billing_answer(call: ModelCall) -> Step:
        if call.messages[-1].role == "tool":
            return reply(f"billing: {call.messages[-1].contents[0].result}")
        if "refund" in call.user_text:
            return call_tool("refund", amount=5)
        return reply(f"billing: {call.user_text}")

    triage = scripted_agent(
        "triage",
        respond_with=logged("triage", log, lambda call: handoff_to("billing", goal="Billing.")),
    )
    billing = scripted_agent(
        "billing",
        respond_with=logged("billing", log, billing_answer),
        description="charges",
        tools=[refund],
    )
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing)


def experts(log: Path) -> HandoffWorkflowBuilder:
    """triage asks the expert policy (a delegate) and answers with what policy said.

    A task about a refund makes policy call ``refund``, a tool that needs approval (logged as
    in :func:`desk`); policy then answers with the tool's result.
    """

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"pid": os.getpid(), "tool": "refund"}) + "\n")
        return f"refunded {amount} EUR"

    def triage_answer(call: ModelCall) -> Step:
        if call.messages[-1].role == "tool":
            return reply(f"triage: {call.messages[-1].contents[0].result}")
        return call_tool("ask_policy", task=call.user_text)

    def policy_answer(call: ModelCall) -> Step:
        task = call.messages[-1]  # the task, a user message written by triage
        if task.role == "tool":
            return reply(f"policy: {task.contents[0].result}")
        if "refund" in task.text:
            return call_tool("refund", amount=5)
        return reply(f"policy: {task.text}")

    triage = scripted_agent("triage", respond_with=logged("triage", log, triage_answer))
    policy = scripted_agent(
        "policy",
        respond_with=logged("policy", log, policy_answer),
        description="knows the refund policy",
        tools=[refund],
    )
    return HandoffWorkflowBuilder(triage).with_delegate(triage, policy)


def fan_out(log: Path) -> HandoffWorkflowBuilder:
    """triage asks the experts policy and legal in one response (a fan-out), then answers with
    both their answers, in call order: ``triage: <policy's> | <legal's>``."""

    def triage_answer(call: ModelCall) -> Step:
        last = call.messages[-1]
        if last.role == "tool":
            return reply("triage: " + " | ".join(str(c.result) for c in last.contents))
        task = call.user_text
        return respond(call_tool("ask_policy", task=task), call_tool("ask_legal", task=task))

    def expert(name: str) -> Callable[[ModelCall], Step]:
        return lambda call: reply(f"{name}: {call.messages[-1].text}")

    triage = scripted_agent("triage", respond_with=logged("triage", log, triage_answer))
    policy = scripted_agent("policy", respond_with=logged("policy", log, expert("policy")))
    legal = scripted_agent("legal", respond_with=logged("legal", log, expert("legal")))
    return (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "refund policy")
        .with_delegate(triage, legal, "legal questions")
    )


def streaming(log: Path) -> HandoffWorkflowBuilder:
    """triage writes a few words and hands over to billing, which writes a few, looks the charge
    up and answers with what it found, in several updates each.

    ``look_up`` logs ``{"pid", "tool"}`` when it runs; with ``TEMPORAL_WORKER_HANG=look_up`` it
    never returns (the worker goes on heartbeating): the test kills the worker mid-stream.
    """

    @tool
    async def look_up() -> str:
        """Look the charge up."""
        with log.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"pid": os.getpid(), "tool": "look_up"}) + "\n")
        if os.environ.get("TEMPORAL_WORKER_HANG") == "look_up":
            await asyncio.Event().wait()
        return "a double charge"

    def billing_answer(call: ModelCall) -> Step:
        if call.messages[-1].role == "tool":
            return respond("billing: ", "found ", str(call.messages[-1].contents[0].result))
        return respond("Checking ", "your charges. ", call_tool("look_up"))

    def triage_answer(call: ModelCall) -> Step:
        return respond("Let me ", "get billing. ", handoff_to("billing", goal="Billing."))

    triage = scripted_agent("triage", respond_with=logged("triage", log, triage_answer))
    billing = scripted_agent(
        "billing",
        respond_with=logged("billing", log, billing_answer),
        description="charges",
        tools=[look_up],
    )
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing)


DESKS = {"desk": desk, "experts": experts, "fan_out": fan_out, "streaming": streaming}


async def main(address: str, task_queue: str, log: Path) -> None:
    client = await connect(address)
    chosen = DESKS[os.environ.get("TEMPORAL_WORKER_DESK", "desk")]
    relay = os.environ.get("TEMPORAL_WORKER_RELAY") or None
    messages = None
    dsn, _, prefix = os.environ.get("TEMPORAL_WORKER_MESSAGES", "").partition(" ")
    if dsn:  # a PostgreSQL message log the worker processes share: "DSN TABLE_PREFIX"
        from handoff_builder.stores import PostgresConversationStore

        messages = PostgresConversationStore(dsn, table_prefix=prefix)
    worker = conversation_worker(
        client, chosen(log), task_queue=task_queue, relay=relay, messages=messages
    )  # default AgentCallOptions
    print("ready", flush=True)  # noqa: T201 - the test waits for it
    await worker.run()


def builder() -> HandoffWorkflowBuilder:
    """The desk ``TEMPORAL_WORKER_DESK`` names (:func:`desk` by default), logging to
    ``TEMPORAL_WORKER_LOG`` (for ``handoff-builder worker``)."""
    chosen = DESKS[os.environ.get("TEMPORAL_WORKER_DESK", "desk")]
    return chosen(Path(os.environ.get("TEMPORAL_WORKER_LOG", os.devnull)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
