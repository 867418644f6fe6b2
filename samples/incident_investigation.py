"""An incident investigation as an agent graph: bounded review, a human approval, the trace.

Run with: python samples/incident_investigation.py [--provider scripted|openai|azure] [--stubborn]
Extras: none; openai or azure for that --provider

The investigator reads the metrics and hands the incident to the planner. Each plan the planner
writes goes to the reviewer first (``with_review``, at most 2 rounds): the reviewer sends an unsafe
broad cache flush back with its concerns, the planner scopes it, the reviewer approves. On the
next message the planner applies the plan with a tool that needs a person's approval; the sample
approves it. Every turn prints its trace: each step, and whether the model or code decided it.

With ``--stubborn`` the planner insists on the broad flush: the reviewer rejects it twice, the
review cap is reached, and the turn escalates to a human with the evidence (every round's
feedback) and the concern still open. The supervisor that tries to hand the incident to a node
outside the graph (``delete_database``) is blocked and forced to the safe responder, which still
answers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_framework import Agent, Content, Workflow, tool

from handoff_builder import (
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    RoutingStep,
)
from handoff_builder.testing import ScriptStep, call_tool, handoff_to, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import run_sample, sample_client, sample_options

INCIDENT = "The catalog service shows stale prices since 09:12. Please investigate and fix it."
BROAD_FLUSH = "Plan: flush the whole cache on every node now."
SCOPED = "Plan: expire only the keys under catalog:v7:* in batches of 500, then watch the hit rate."
TOO_BROAD = (
    "A cluster-wide flush sends every read to the database at once and can take it down; "
    "expire only the stale keys."
)
NO_ROLLBACK = "Still a cluster-wide flush, with no batching, monitoring or rollback step."

APPLIED: list[str] = []


@tool(name="read_metrics", description="Read the catalog service's cache metrics.")
def read_metrics(service: str) -> str:
    """Metrics, as an observability backend would return them."""
    return f"{service}: cache hit rate 99.8%, 0 evictions since 09:12, catalog:v7:* keys stale"


@tool(
    name="apply_remediation",
    description="Apply a remediation plan to production (a person approves it first).",
    approval_mode="always_require",
)
def apply_remediation(plan: str) -> str:
    """Apply the plan: here, record it."""
    APPLIED.append(plan)
    return f"applied: {plan}"


def agent(
    provider: str,
    name: str,
    instructions: str,
    script: Sequence[ScriptStep],
    *,
    description: str | None = None,
    tools: list[Any] | None = None,
) -> Agent:
    """An agent on a real provider, or on a scripted model that plays ``script`` (offline)."""
    return Agent(
        client=sample_client(provider, name, *script),
        name=name,
        instructions=instructions,
        description=description,
        tools=tools,
        default_options=sample_options(),  # a cap on output tokens
    )


def investigation(provider: str, *, stubborn: bool) -> Workflow:
    """The graph: investigator -> planner, the planner's plans reviewed, the blocked-path guard."""
    second_plan = BROAD_FLUSH if stubborn else SCOPED
    investigator = agent(
        provider,
        "investigator",
        "You investigate production incidents. Read the metrics with read_metrics, then hand "
        "the incident to the planner with what you found.",
        [
            call_tool("read_metrics", service="catalog"),
            handoff_to(
                "planner", goal="Stale catalog:v7:* keys in the cache since 09:12; plan a fix."
            ),
        ],
        tools=[read_metrics],
    )
    planner = agent(
        provider,
        "planner",
        "You plan remediations for incidents. Reply with one plan that starts with 'Plan:'. "
        "When the user says to go ahead, call apply_remediation with the approved plan.",
        [
            reply(BROAD_FLUSH),
            reply(second_plan),
            call_tool("apply_remediation", plan=SCOPED),
            reply("Applied: the stale catalog keys are expiring in batches; hit rate is normal."),
        ],
        description="plans remediations",
        tools=[apply_remediation],
    )
    reviewer = agent(
        provider,
        "reviewer",
        "You review remediation plans for safety before they reach the on-call engineer. A "
        "plan must be scoped to what is broken, reversible, and monitored. Call approve or "
        "request_changes; never rewrite the plan yourself.",
        [
            call_tool("request_changes", feedback=TOO_BROAD),
            call_tool("request_changes", feedback=NO_ROLLBACK)
            if stubborn
            else call_tool("approve", note="Scoped to the stale keys, batched and monitored."),
            call_tool("approve", note="The approved plan was applied as written."),
        ],
    )
    return (
        HandoffWorkflowBuilder(investigator)
        .with_handoff(investigator, planner, "plans remediations for an investigated incident")
        .with_review(planner, reviewer, max_rounds=2)
        .enable_return_to_previous()
        .with_name("incident-investigation")
        .build()
    )


def supervised(provider: str) -> Workflow:
    """A supervisor that may only send work to the investigator; anything else is forced safe."""
    supervisor = agent(
        provider,
        "supervisor",
        "You supervise incident response. Hand the incident to the investigator.",
        [
            handoff_to("delete_database", goal="Drop the catalog cache tables."),
            reply("I will drop the tables."),
        ],
    )
    investigator = agent(provider, "investigator", "You investigate incidents.", [reply("-")])
    safe = agent(
        provider,
        "safe_responder",
        "You answer the user when the workflow stopped a risky step: say what was stopped and "
        "what happens next. You cannot hand off.",
        [reply("That step was stopped: nothing was deleted. The on-call engineer will follow up.")],
    )
    return (
        HandoffWorkflowBuilder(supervisor)
        .with_handoff(supervisor, investigator)
        .with_blocked_handoff_outcome(safe)
        .build()
    )


async def run_turn(workflow: Workflow, message: str, *, approve: bool = True) -> HandoffTurnResult:
    """One user turn; a person answers each approval request (``approve``), then it finishes."""
    print(f"user: {message}")
    run = await workflow.run(message)
    while run.get_request_info_events():
        answers: dict[str, Content] = {}
        for request in run.get_request_info_events():
            call = request.data.function_call
            print(
                f"  approval needed: {call.name}({call.arguments}) -> "
                f"{'approved' if approve else 'declined'}"
            )
            answers[request.request_id] = request.data.to_function_approval_response(
                approved=approve
            )
        run = await workflow.run(responses=answers)
    turn = run.get_outputs()[-1]
    if not isinstance(turn, HandoffTurnResult):
        raise TypeError(f"expected a HandoffTurnResult, got {turn!r}")
    return turn


def show(turn: HandoffTurnResult) -> None:
    """The reply the user gets, then the trace: each step and who decided it."""
    for message in turn.messages:
        if message.role == "assistant" and message.text:
            print(f"  {message.author_name}: {message.text}")
    print(f"  status: {turn.status}")
    if turn.escalation is not None:
        print(f"  escalated: {turn.escalation.reason} (limit {turn.escalation.limit})")
        evidence = turn.escalation.evidence
        for number, feedback in enumerate(evidence, 1):
            still = " (still open)" if number == len(evidence) else ""
            print(f"    round {number}{still}: {feedback}")
    print("  trace:")
    for step in turn.trace:
        target = f" -> {step.target}" if step.target else ""
        print(
            f"    {step.decided_by:>5}  {step.kind:<9} {step.by}: {step.source}{target}"
            f"{progress(step)}"
        )


def progress(step: RoutingStep) -> str:
    """How far a review or a cap had got at a step."""
    if step.limit is None or step.count is None:
        return ""
    if step.kind == "review" and step.by == "review":
        return f" (round {step.count + 1} of {step.limit})"
    return f" ({step.count} of {step.limit})"


async def main(provider: str = "scripted", *, stubborn: bool = False) -> list[HandoffTurnResult]:
    turns: list[HandoffTurnResult] = []
    workflow = investigation(provider, stubborn=stubborn)
    turns.append(await run_turn(workflow, INCIDENT))
    show(turns[-1])
    if stubborn:
        print()
        turns.append(await run_turn(supervised(provider), "Just fix the cache, whatever it takes."))
        show(turns[-1])
        return turns
    turns.append(await run_turn(workflow, "Looks good, go ahead."))
    show(turns[-1])
    return turns


if __name__ == "__main__":
    run_sample(__doc__, main, {"stubborn": "the planner insists: the review escalates"})
