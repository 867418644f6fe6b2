"""Tool approval with checkpoint and resume: a refund waits for a human, across a restart.

Run with: python samples/tool_approval_checkpoint.py [--provider scripted|openai|azure]
Extras: none; openai or azure for that --provider

Billing calls an approval-required tool. The workflow stops with a request_info event and is
checkpointed to files; a new workflow object (a restarted process) resumes from the checkpoint,
the approval is given, and billing -- not the initial agent -- carries on.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from agent_framework import Agent, FileCheckpointStorage, Workflow, tool

from handoff_builder import (
    HANDOFF_TURN_EVENT,
    HandoffEvent,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
)
from handoff_builder.testing import call_tool, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, sample_client, sample_options, show


@tool(name="issue_refund", description="Refund an amount in EUR.", approval_mode="always_require")
def issue_refund(amount: float) -> str:
    return f"Refund of {amount:.2f} EUR issued."


MESSAGE = "Please refund the 24.90 EUR double charge."


def build(provider: str, *, first_run: bool) -> Workflow:
    options = sample_options()  # a cap on output tokens
    # Offline: before the restart the models route and call the tool; after it, billing answers.
    triage_script = [handoff_to("billing", goal="Refund 24.90 EUR.")] if first_run else []
    billing_step = (
        call_tool("issue_refund", amount=24.90)
        if first_run
        else reply("Your refund of 24.90 EUR is on its way.")
    )
    triage = Agent(
        client=sample_client(provider, "triage", *triage_script),
        name="triage",
        instructions="Route refund requests to billing.",
        default_options=options,
    )
    billing = Agent(
        client=sample_client(provider, "billing", billing_step),
        name="billing",
        instructions="Issue refunds with issue_refund.",
        description="charges and refunds",
        tools=[issue_refund],
        default_options=options,
    )
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_name("refunds").build()


async def main(provider: str = "scripted") -> HandoffTurnResult:
    with tempfile.TemporaryDirectory() as folder:
        storage = FileCheckpointStorage(folder)
        print(f"user: {MESSAGE}")
        first = await build(provider, first_run=True).run(MESSAGE, checkpoint_storage=storage)
        for handoff in (e.data for e in first if isinstance(e.data, HandoffEvent)):
            print(f"  [{handoff.kind}] {handoff.source} -> {handoff.target}: {handoff.goal}")
        [request] = first.get_request_info_events()
        print(f"waiting for approval of {request.data.function_call.name}")
        checkpoint = await storage.get_latest(workflow_name="refunds")
        if checkpoint is None:
            raise RuntimeError("no checkpoint was written")

        print("(the process restarts; a human approves)")
        workflow = build(provider, first_run=False)
        await workflow.run(checkpoint_id=checkpoint.checkpoint_id, checkpoint_storage=storage)
        answer = request.data.to_function_approval_response(approved=True)
        done = await workflow.run(responses={request.request_id: answer})
        [turn] = [e.data for e in done if e.type == HANDOFF_TURN_EVENT]
        # The turn's messages start before the restart: show what came after the approval.
        show(turn, start=after_approval(turn))
        return turn


def after_approval(turn: HandoffTurnResult) -> int:
    """The index in ``turn.messages`` of the first message after the (last) approval answer."""
    answered = [
        index
        for index, message in enumerate(turn.messages)
        if any(content.type == "function_approval_response" for content in message.contents)
    ]
    return answered[-1] + 1 if answered else 0


if __name__ == "__main__":
    run_sample(__doc__, main)
