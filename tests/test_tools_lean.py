"""What handoff tools cost and tolerate: a lean schema, extra argument keys, the bounce guard."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.testing import (
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    scripted_agent,
)
from tests.helpers import run_turn


def _titles(node: Any) -> list[str]:
    """Every ``title`` keyword (a string) anywhere in a schema."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():  # pyright: ignore[reportUnknownVariableType]
            if key == "title" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_titles(value))
    elif isinstance(node, list):
        for item in node:  # pyright: ignore[reportUnknownVariableType]
            found.extend(_titles(item))
    return found


async def test_the_built_in_goal_schema_is_lean() -> None:
    a = scripted_agent("a", reply("hi"))
    b = scripted_agent("b")
    await run_turn(HandoffWorkflowBuilder(a).with_handoff(a, b, "billing").build(), "hi")
    [tool] = received(a).options["tools"]
    assert tool.to_json_schema_spec() == {
        "type": "function",
        "function": {
            "name": "handoff_to_b",
            "description": "billing",
            "parameters": {
                "additionalProperties": False,
                "properties": {
                    "goal": {"description": "The user's goal in one sentence.", "type": "string"}
                },
                "required": ["goal"],
                "type": "object",
            },
            "strict": True,
        },
    }


class Ticket(BaseModel):
    """A ticket for the support team."""

    model_config = ConfigDict(extra="forbid")
    title: str = Field(description="One line.")
    tags: list[Tag]


class Tag(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


Ticket.model_rebuild()


async def test_a_payload_keeps_its_fields_and_description_without_titles() -> None:
    a = scripted_agent("a", reply("hi"))
    b = scripted_agent("b")
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b, payload=Ticket).build()
    await run_turn(workflow, "hi")
    [tool] = received(a).options["tools"]
    schema = tool.parameters()
    assert _titles(schema) == []
    # A field named "title" is a property, not a keyword: it stays.
    assert schema["properties"]["title"] == {"description": "One line.", "type": "string"}
    assert schema["required"] == ["title", "tags"]
    assert schema["description"] == "A ticket for the support team."
    assert schema["$defs"]["Tag"]["properties"]["name"] == {"type": "string"}


@pytest.mark.parametrize(
    "extra",
    [
        {"title": "handoff", "type": "object"},
        {"required": ["goal"], "additionalProperties": False},
    ],
    ids=["title-and-type", "required"],
)
async def test_schema_keys_beside_the_goal_are_ignored(extra: dict[str, Any]) -> None:
    """A small model copied schema keys into its arguments: the goal is taken, the call stands."""
    triage = scripted_agent("triage", call_tool("handoff_to_billing", goal="A refund.", **extra))
    billing = scripted_agent("billing", reply("Refunded."))
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()
    turn = await run_turn(workflow, "refund please")
    assert turn.blocked == []
    assert [(h.target, h.goal) for h in turn.result.handoffs] == [("billing", "A refund.")]
    assert turn.result.text == "Refunded."


async def test_a_payload_still_refuses_keys_it_does_not_declare() -> None:
    class Order(BaseModel):
        model_config = ConfigDict(extra="forbid")
        order_id: str

    a = scripted_agent(
        "a",
        call_tool("handoff_to_b", order_id="A-1", title="Order"),
        reply("Which order?"),
    )
    b = scripted_agent("b")
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b, payload=Order).build()
    turn = await run_turn(workflow, "refund")
    [blocked] = turn.blocked
    assert blocked.reason == "invalid_payload"
    assert json.loads(blocked.arguments) == {"order_id": "A-1", "title": "Order"}


def _desk(billing: list[Any], *, guard: bool) -> tuple[HandoffWorkflowBuilder, dict[str, Any]]:
    agents = {
        "triage": scripted_agent(
            "triage", handoff_to("billing", goal="Explain my bill."), reply("Anything else?")
        ),
        "billing": scripted_agent("billing", *billing),
    }
    builder = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .with_hand_back(agents["triage"])
    )
    return (builder.with_bounce_guard() if guard else builder), agents


def _back(summary: str) -> Any:
    return call_tool("transfer_back_to_triage", summary=summary)


async def test_the_bounce_guard_refuses_a_receivers_first_hand_back() -> None:
    builder, agents = _desk(
        [_back("The user wants the bill explained."), reply("Here.")], guard=True
    )
    turn = await run_turn(builder.build(), "my bill?")
    assert turn.result.active_agent == "billing"
    assert turn.result.text == "Here."
    [blocked] = turn.blocked
    assert (blocked.reason, blocked.source, blocked.target) == ("ping_pong", "billing", "triage")
    second = client_of(agents["billing"]).calls[1]
    [error] = [c for m in second.messages[-1:] for c in m.contents if c.type == "function_result"]
    assert str(error.result).startswith(
        "Error: triage just handed the conversation to you, so it was not handed back."
    )


async def test_the_bounce_guard_lets_a_second_hand_back_stand() -> None:
    builder, _ = _desk([_back("Not mine."), _back("Really not mine: a router fault.")], guard=True)
    turn = await run_turn(builder.build(), "my router?")
    assert [(h.source, h.target) for h in turn.result.handoffs] == [
        ("triage", "billing"),
        ("billing", "triage"),
    ]
    assert [b.reason for b in turn.blocked] == ["ping_pong"]
    assert turn.result.text == "Anything else?"


async def test_without_the_bounce_guard_a_straight_hand_back_is_followed() -> None:
    builder, _ = _desk([_back("Nothing for me here.")], guard=False)
    turn = await run_turn(builder.build(), "my bill?")
    assert turn.blocked == []
    assert [h.kind for h in turn.result.handoffs] == ["handoff", "hand_back"]
    assert turn.result.text == "Anything else?"
