"""docs/what-each-agent-sees.md shows the exact messages a receiver gets: this test runs them.

Each ```text block after a ``<!-- view: SCENARIO MODE -->`` marker is what the receiving agent's
model received in that scenario and filtering mode, as :func:`render_messages` writes it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from agent_framework import Content, Workflow, tool
from pydantic import BaseModel, ConfigDict

from handoff_builder import HandoffToolCallFiltering, HandoffWorkflowBuilder
from handoff_builder.testing import (
    call_tool,
    handoff_to,
    received,
    reply,
    respond,
    scripted_agent,
)

PAGE = Path(__file__).resolve().parent.parent / "docs" / "what-each-agent-sees.md"
USER = "I was charged twice for my March bill, and the app crashes."


@tool(name="refund", description="Refund an amount.", approval_mode="always_require")
def refund(amount: float) -> str:
    return f"Refunded {amount} EUR."


async def run_and_approve(workflow: Workflow) -> None:
    """Run the user's message; the user approves the one request it makes."""
    first = await workflow.run(USER)
    [request] = first.get_request_info_events()
    assert isinstance(request.data, Content)
    answer = request.data.to_function_approval_response(approved=True)
    await workflow.run(responses={request.request_id: answer})


async def handoff(mode: HandoffToolCallFiltering) -> str:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund the duplicate charge."))
    billing = scripted_agent("billing", reply("Done."))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_tool_call_filtering(mode)
        .build()
    )
    await workflow.run(USER)
    return received(billing).rendered


async def hand_back(mode: HandoffToolCallFiltering) -> str:
    triage = scripted_agent(
        "triage",
        handoff_to("billing", goal="Refund the duplicate charge; the app also crashes."),
        reply("Anything else?"),
    )
    billing = scripted_agent(
        "billing",
        respond(
            "I've refunded the duplicate charge.",
            call_tool("transfer_back_to_triage", summary="refund done; crash still open"),
        ),
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_hand_back(triage)
        .with_tool_call_filtering(mode)
        .build()
    )
    await workflow.run(USER)
    return received(triage).rendered


async def approval(mode: HandoffToolCallFiltering) -> str:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund the duplicate charge."))
    billing = scripted_agent(
        "billing", call_tool("refund", amount=24.9), reply("Refunded."), tools=[refund]
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_tool_call_filtering(mode)
        .build()
    )
    await run_and_approve(workflow)
    return received(billing).rendered


class RefundRequest(BaseModel):
    """A refund to pay."""

    model_config = ConfigDict(extra="forbid")
    bill: str
    amount: float


async def typed_handoff(mode: HandoffToolCallFiltering) -> str:
    """Triage hands off with a payload, behind an approval; the user approves."""
    triage = scripted_agent("triage", call_tool("handoff_to_billing", bill="March", amount=24.9))
    billing = scripted_agent("billing", reply("Refunded."))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, payload=RefundRequest, approval=True)
        .with_tool_call_filtering(mode)
        .build()
    )
    await run_and_approve(workflow)
    return received(billing).rendered


async def autonomous(mode: HandoffToolCallFiltering) -> str:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund the duplicate charge."))
    billing = scripted_agent("billing", reply("Looking at your March bill."), reply("Refunded."))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_autonomous_mode(turn_limit=1, agents=[billing])
        .with_tool_call_filtering(mode)
        .build()
    )
    await workflow.run(USER)
    return received(billing).rendered


SCENARIOS: dict[str, Callable[[HandoffToolCallFiltering], Awaitable[str]]] = {
    "handoff": handoff,
    "hand-back": hand_back,
    "approval": approval,
    "typed-handoff": typed_handoff,
    "autonomous": autonomous,
}


def documented() -> dict[tuple[str, str], str]:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- view: (\S+) (\S+) -->\n```text\n(.*?)\n```", page, re.DOTALL)
    return {(scenario, mode): text for scenario, mode, text in blocks}


def test_the_page_shows_every_scenario_in_every_mode() -> None:
    assert sorted(documented()) == sorted(
        (scenario, mode.value) for scenario in SCENARIOS for mode in HandoffToolCallFiltering
    )


@pytest.mark.parametrize("mode", list(HandoffToolCallFiltering), ids=lambda m: m.value)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_what_the_page_shows_is_what_the_model_receives(
    scenario: str, mode: HandoffToolCallFiltering
) -> None:
    assert await shown(scenario, mode) == documented()[(scenario, mode.value)]


async def shown(scenario: str, mode: HandoffToolCallFiltering) -> str:
    """The rendered view, call ids numbered from 1 (the scripted client counts per process)."""
    rendered = await SCENARIOS[scenario](mode)
    numbers = {real: f"call_{n}" for n, real in enumerate(_ids(rendered), start=1)}
    return re.sub(r"call_\d+", lambda match: numbers[match.group(0)], rendered)


def _ids(text: str) -> list[str]:
    """Call ids in order of appearance (the scripted client numbers them per process)."""
    seen: list[str] = []
    for match in re.findall(r"call_\d+", text):
        if match not in seen:
            seen.append(match)
    return seen
