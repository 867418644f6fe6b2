"""Tool approvals and external function calls from any participant, resumed on that participant."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import (
    Content,
    FunctionTool,
    InMemoryCheckpointStorage,
    Workflow,
    WorkflowEvent,
    tool,
)

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import call_tool, client_of, handoff_to, reply, respond, scripted_agent

PAID: list[int] = []


@tool(name="refund", description="Refund an amount.", approval_mode="always_require")
def refund(amount: int) -> str:
    PAID.append(amount)
    return f"refunded {amount}"


order_status = FunctionTool(
    name="order_status",
    description="Look an order up in the back office (answered by the application).",
    input_model={
        "type": "object",
        "properties": {"order": {"type": "string"}},
        "required": ["order"],
    },
)


def requests(events: list[WorkflowEvent[Any]]) -> list[WorkflowEvent[Any]]:
    return [event for event in events if event.type == "request_info"]


def turn_result(events: list[WorkflowEvent[Any]]) -> HandoffTurnResult | None:
    results = [
        e.data for e in events if e.type == "output" and isinstance(e.data, HandoffTurnResult)
    ]
    return results[-1] if results else None


def refund_desk(*billing_steps: Any) -> tuple[Workflow, dict[str, Any]]:
    agents = {
        "triage": scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR.")),
        "billing": scripted_agent("billing", *billing_steps, tools=[refund, order_status]),
        "refunds": scripted_agent("refunds", reply("Refund confirmed by refunds.")),
    }
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .with_handoff(agents["billing"], agents["refunds"])
        .build()
    )
    return workflow, agents


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "rejected"])
async def test_approval_from_the_second_agent_resumes_that_agent(approved: bool) -> None:
    PAID.clear()
    workflow, agents = refund_desk(
        call_tool("refund", amount=5), handoff_to("refunds", goal="Confirm the refund.")
    )
    first = list(await workflow.run("please refund 5 EUR"))
    [request] = requests(first)
    assert request.source_executor_id == "handoff_host"
    assert request.data.type == "function_approval_request"
    assert turn_result(first) is None  # the turn is still open

    answer = request.data.to_function_approval_response(approved=approved)
    second = list(await workflow.run(responses={request.request_id: answer}))
    result = turn_result(second)
    assert result is not None
    assert result.text == "Refund confirmed by refunds."
    assert ([5] if approved else []) == PAID
    assert len(client_of(agents["triage"]).calls) == 1  # the initial agent was not re-run
    resumed = client_of(agents["billing"]).calls[1]
    [outcome] = [c for m in resumed.messages for c in m.contents if c.type == "function_result"]
    expected = "refunded 5" if approved else "did not approve"
    assert expected in str(outcome.result)
    assert [(h.source, h.target) for h in result.handoffs] == [
        ("triage", "billing"),
        ("billing", "refunds"),
    ]


async def test_declaration_only_call_surfaces_and_its_result_resumes_the_agent() -> None:
    workflow, agents = refund_desk(
        call_tool("order_status", order="A-7"), reply("Order A-7 shipped yesterday.")
    )
    first = list(await workflow.run("where is order A-7?"))
    [request] = requests(first)
    assert (request.data.type, request.data.name) == ("function_call", "order_status")
    answer = Content.from_function_result(call_id=request.data.call_id, result="shipped 2026-11-30")
    second = list(await workflow.run(responses={request.request_id: answer}))
    result = turn_result(second)
    assert result is not None
    assert result.text == "Order A-7 shipped yesterday."
    assert result.active_agent == "billing"
    resumed = client_of(agents["billing"]).calls[1]
    [outcome] = [c for m in resumed.messages for c in m.contents if c.type == "function_result"]
    assert outcome.result == "shipped 2026-11-30"


async def test_approval_after_restoring_from_a_checkpoint() -> None:
    """.NET #5621, #8247, #8577: resume from a checkpoint, on the asking agent, once per call."""
    PAID.clear()
    storage = InMemoryCheckpointStorage()
    workflow, _ = refund_desk(call_tool("refund", amount=7))
    first = list(await workflow.run("refund 7", checkpoint_storage=storage))
    [request] = requests(first)
    latest = await storage.get_latest(workflow_name=workflow.name)
    assert latest is not None

    restored, agents = refund_desk(handoff_to("refunds", goal="Confirm."))
    resumed = list(
        await restored.run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage)
    )
    [again] = requests(resumed)  # the pending request is re-emitted once, not duplicated
    assert again.request_id == request.request_id

    answer = again.data.to_function_approval_response(approved=True)
    done = list(await restored.run(responses={again.request_id: answer}))
    result = turn_result(done)
    assert result is not None
    assert result.text == "Refund confirmed by refunds."
    assert PAID == [7]
    assert client_of(agents["triage"]).calls == []
    assert len(client_of(agents["billing"]).calls) == 1


async def test_a_handoff_beside_an_external_call_is_followed_once_it_is_answered() -> None:
    """The handoff was accepted when it was made ("Transferred."); it stands, after the answer."""
    workflow, agents = refund_desk(
        respond(call_tool("order_status", order="A-1"), handoff_to("refunds", goal="Refund A-1."))
    )
    first = list(await workflow.run("refund order A-1"))
    assert [e.data.target for e in first if e.type == "handoff_sent"] == ["billing", "refunds"]
    assert turn_result(first) is None  # the turn waits for the order status
    assert client_of(agents["refunds"]).calls == []
    [request] = requests(first)
    answer = Content.from_function_result(call_id=request.data.call_id, result="eligible")

    second = list(await workflow.run(responses={request.request_id: answer}))

    result = turn_result(second)
    assert result is not None
    assert (result.active_agent, result.text) == ("refunds", "Refund confirmed by refunds.")
    assert [(h.source, h.target) for h in result.handoffs] == [
        ("triage", "billing"),
        ("billing", "refunds"),
    ]
    assert len(client_of(agents["billing"]).calls) == 1  # billing is not asked again
    assert [(s.kind, s.decided_by, s.by, s.source, s.target) for s in result.trace] == [
        ("start", "code", "initial_agent", None, "triage"),
        ("handoff", "model", "handoff_to_billing", "triage", "billing"),
        ("handoff", "model", "handoff_to_refunds", "billing", "refunds"),  # made with the call
        ("end", "model", "reply", "refunds", None),
    ]
    # Refunds reads the answered call, then the handoff with its goal.
    assert client_of(agents["refunds"]).calls[0].rendered.splitlines()[-3:] == [
        'assistant[billing]: -> order_status({"order": "A-1"})',
        f"tool[billing]: <- {request.data.call_id}: eligible",
        "user[handoff_host]: Goal: Refund A-1.",
    ]


async def test_a_wrong_answer_is_reported_and_the_request_asked_again() -> None:
    PAID.clear()
    workflow, _ = refund_desk(call_tool("refund", amount=1), handoff_to("refunds", goal="x"))
    [request] = requests(list(await workflow.run("refund 1")))
    wrong = Content.from_function_result(call_id="nope", result="x")
    retry = list(await workflow.run(responses={request.request_id: wrong}))
    [error] = [e.data for e in retry if e.type == "error"]
    assert isinstance(error, TypeError)
    assert str(error) == (
        f"The answer to approval request {request.request_id!r} must be a "
        "function_approval_response (use request.to_function_approval_response(approved=...)), "
        "not 'function_result'."
    )
    assert turn_result(retry) is None  # the request is still pending under the same id
    answer = request.data.to_function_approval_response(approved=True)
    done = turn_result(list(await workflow.run(responses={request.request_id: answer})))
    assert done is not None
    assert done.text == "Refund confirmed by refunds."
    assert PAID == [1]
