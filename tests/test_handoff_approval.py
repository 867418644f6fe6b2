"""Approval gates on handoffs: the call waits for a human; approve routes, decline carries on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_framework import Content, InMemoryCheckpointStorage, WorkflowEvent
from pydantic import BaseModel, ConfigDict, Field

from handoff_builder import (
    HANDOFF_TURN_EVENT,
    ConversationHost,
    HandoffContext,
    HandoffHookError,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    PendingRequestsError,
    ReissueRequests,
    decline,
)
from handoff_builder.stores import ConversationStore
from handoff_builder.testing import (
    call_tool,
    client_of,
    received,
    reply,
    respond,
    scripted_agent,
)


class Refund(BaseModel):
    """A refund to pay."""

    model_config = ConfigDict(extra="forbid")
    order_id: str
    amount: float = Field(gt=0)


BIG = {"order_id": "A-1", "amount": 240.0}
SMALL = {"order_id": "A-2", "amount": 9.5}


def desk(*billing_steps: Any, approval: Any = True, on_handoff: Any = None) -> Any:
    billing = scripted_agent("billing", *billing_steps)
    refunds = scripted_agent("refunds", reply("Refund paid."))
    builder = HandoffWorkflowBuilder(billing).with_handoff(
        billing,
        refunds,
        "pays refunds",
        tool_name="send_to_refunds",
        payload=Refund,
        approval=approval,
        on_handoff=on_handoff,
    )
    return builder, billing, refunds


def requests(events: list[WorkflowEvent[Any]]) -> list[WorkflowEvent[Any]]:
    return [event for event in events if event.type == "request_info"]


def result_of(events: list[WorkflowEvent[Any]]) -> HandoffTurnResult:
    [result] = [e.data for e in events if e.type == HANDOFF_TURN_EVENT]
    assert isinstance(result, HandoffTurnResult)
    return result


async def test_the_handoff_waits_for_approval_then_routes() -> None:
    builder, billing, refunds = desk(call_tool("send_to_refunds", **BIG))
    workflow = builder.build()

    first = list(await workflow.run("refund my order"))

    [request] = requests(first)
    assert request.data.type == "function_approval_request"
    assert request.data.function_call.name == "send_to_refunds"
    assert request.data.function_call.parse_arguments() == BIG
    assert client_of(refunds).calls == []
    assert not [e for e in first if e.type == "handoff_sent"]  # nothing routed yet

    answer = request.data.to_function_approval_response(approved=True)
    second = list(await workflow.run(responses={request.request_id: answer}))

    result = result_of(second)
    assert (result.status, result.active_agent, result.text) == (
        "completed",
        "refunds",
        "Refund paid.",
    )
    [handoff] = result.handoffs
    assert handoff.payload == Refund.model_validate(BIG)
    assert received(refunds).texts[-1] == ('Refund: {"order_id":"A-1","amount":240.0}')
    assert len(client_of(billing).calls) == 1  # billing was not asked again


async def test_a_declined_handoff_is_a_tool_result_and_the_caller_carries_on() -> None:
    builder, billing, refunds = desk(
        call_tool("send_to_refunds", **BIG), reply("I can offer a voucher instead.")
    )
    workflow = builder.build()
    [request] = requests(list(await workflow.run("refund my order")))

    answer = decline(request.data, reason="Refunds over 200 EUR need the receipt.")
    second = list(await workflow.run(responses={request.request_id: answer}))

    result = result_of(second)
    assert (result.status, result.active_agent, result.text) == (
        "completed",
        "billing",
        "I can offer a voucher instead.",
    )
    assert client_of(refunds).calls == []
    assert result.handoffs == ()
    [blocked] = [e.data for e in second if e.type == "handoff_blocked"]
    assert (blocked.reason, blocked.target) == ("declined", "refunds")
    assert json.loads(blocked.arguments) == BIG  # what was declined, as the model sent it
    assert [(s.kind, s.decided_by, s.by) for s in result.trace] == [
        ("start", "code", "initial_agent"),
        ("blocked", "code", "declined"),  # a person said no
        ("end", "model", "reply"),
    ]
    assert (
        received(billing)
        .rendered.splitlines()[-1]
        .endswith(
            ": Not transferred: the handoff to refunds was declined by the person who reviewed it. "
            "Carry on with the user yourself. The reviewer said: Refunds over 200 EUR need the "
            "receipt."
        )
    )


async def test_one_approval_for_duplicate_handoff_calls_in_one_response() -> None:
    builder, _, refunds = desk(
        respond(call_tool("send_to_refunds", **BIG), call_tool("send_to_refunds", **SMALL))
    )
    workflow = builder.build()
    first = list(await workflow.run("refund my order"))
    [request] = requests(first)  # the first call stands; the second is not asked about
    assert json.loads(request.data.function_call.arguments) == BIG
    [warning] = [e.data for e in first if e.type == "warning"]
    assert "following the first, send_to_refunds" in str(warning)

    approve = request.data.to_function_approval_response(approved=True)
    result = result_of(list(await workflow.run(responses={request.request_id: approve})))

    assert (result.active_agent, [h.payload for h in result.handoffs]) == (
        "refunds",
        [Refund(order_id="A-1", amount=240.0)],
    )
    results = [
        c.result for m in result.conversation for c in m.contents if c.type == "function_result"
    ]
    assert results == [
        "Not performed: only one handoff per response is followed (send_to_refunds waits for a "
        "person's approval).",
        "Transferred.",
    ]
    assert len(client_of(refunds).calls) == 1


async def test_an_approval_predicate_asks_only_when_it_says_so() -> None:
    def over_100(context: HandoffContext) -> bool:
        assert isinstance(context.payload, Refund)
        return context.payload.amount > 100

    builder, _, refunds = desk(call_tool("send_to_refunds", **SMALL), approval=over_100)

    events = list(await builder.build().run("refund my order"))

    assert requests(events) == []
    assert result_of(events).text == "Refund paid."
    assert len(client_of(refunds).calls) == 1


async def test_an_invalid_payload_is_refused_before_anyone_is_asked() -> None:
    builder, _, _ = desk(
        call_tool("send_to_refunds", order_id="A-1", amount=-1),
        reply("What amount should I refund?"),
    )
    events = list(await builder.build().run("refund my order"))
    assert requests(events) == []
    assert result_of(events).text == "What amount should I refund?"


async def test_on_handoff_runs_after_the_approval_and_can_still_veto() -> None:
    asked: list[str] = []

    def stock_check(context: HandoffContext) -> str | None:
        asked.append(context.target)
        return "The refunds team is closed today."

    builder, _, refunds = desk(
        call_tool("send_to_refunds", **BIG),
        reply("Refunds reopen tomorrow."),
        on_handoff=stock_check,
    )
    workflow = builder.build()
    [request] = requests(list(await workflow.run("refund my order")))
    assert asked == []  # not before the approval

    answer = request.data.to_function_approval_response(approved=True)
    second = list(await workflow.run(responses={request.request_id: answer}))
    result = result_of(second)

    assert asked == ["refunds"]
    assert result.text == "Refunds reopen tomorrow."
    [vetoed] = [e.data for e in second if e.type == "handoff_blocked"]
    assert (vetoed.reason, json.loads(vetoed.arguments)) == ("vetoed", BIG)
    assert client_of(refunds).calls == []


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "declined"])
async def test_the_approval_survives_a_checkpoint_restore_into_a_fresh_workflow(
    approved: bool,
) -> None:
    storage = InMemoryCheckpointStorage()
    builder, _, _ = desk(call_tool("send_to_refunds", **BIG))
    first = list(
        await builder.with_name("gate").build().run("refund my order", checkpoint_storage=storage)
    )
    [request] = requests(first)
    latest = await storage.get_latest(workflow_name="gate")
    assert latest is not None

    fresh, billing2, refunds2 = desk(reply("A voucher, then."))
    workflow = fresh.with_name("gate").build()
    reissued = list(
        await workflow.run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage)
    )
    [again] = requests(reissued)
    assert again.request_id == request.request_id
    answer = (
        again.data.to_function_approval_response(approved=True)
        if approved
        else decline(again.data, "Not today.")
    )
    result = result_of(
        list(await workflow.run(responses={again.request_id: answer}, checkpoint_storage=storage))
    )

    if approved:
        assert (result.active_agent, result.text) == ("refunds", "Refund paid.")
        assert isinstance(result.handoffs[0].payload, Refund)
        assert client_of(billing2).calls == []
        assert len(client_of(refunds2).calls) == 1
    else:
        assert (result.active_agent, result.text) == ("billing", "A voucher, then.")
        assert received(billing2).rendered.endswith("The reviewer said: Not today.")
        assert client_of(refunds2).calls == []


async def test_a_hook_failing_after_the_approval_leaves_the_request_to_answer_again() -> None:
    failures = ["audit down"]

    def audit(context: HandoffContext) -> None:
        if failures:
            raise ConnectionError(failures.pop())

    builder, _, refunds = desk(call_tool("send_to_refunds", **BIG), on_handoff=audit)
    workflow = builder.build()
    [request] = requests(list(await workflow.run("refund my order")))
    answer = request.data.to_function_approval_response(approved=True)

    with pytest.raises(HandoffHookError, match="audit down"):
        await workflow.run(responses={request.request_id: answer})
    assert client_of(refunds).calls == []

    [again] = requests(list(await workflow.run(ReissueRequests())))  # the same request, waiting
    assert again.request_id == request.request_id
    result = result_of(list(await workflow.run(responses={again.request_id: answer})))
    assert (result.active_agent, result.text) == ("refunds", "Refund paid.")
    approvals = [
        c for m in result.conversation for c in m.contents if c.type == "function_approval_response"
    ]
    assert len(approvals) == 1  # the answer is in the conversation once


async def test_a_hosted_hook_failing_after_the_approval_keeps_the_stored_request(
    store: ConversationStore,
) -> None:
    failures = ["audit down"]

    def audit(context: HandoffContext) -> None:
        if failures:
            raise ConnectionError(failures.pop())

    builder, _, _ = desk(call_tool("send_to_refunds", **BIG), on_handoff=audit)
    host = ConversationHost(builder, store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c", "refund my order")
    [request] = waiting.value.requests
    before = await store.load("c")
    answer = request.to_function_approval_response(approved=True)

    with pytest.raises(HandoffHookError, match="audit down"):
        await host.respond("c", {str(request.id): answer})
    after = await store.load("c")
    assert before is not None
    assert after is not None
    assert after.messages == before.messages
    assert after.state["host"] == before.state["host"]  # the request, as it was stored
    assert (after.version, after.state["failures"]) == (before.version + 1, 1)  # counted
    assert "HandoffHookError" in after.state["last_error"]

    result = await host.respond("c", {str(request.id): answer})  # the hook works again
    assert (result.active_agent, result.text) == ("refunds", "Refund paid.")
    done = await store.load("c")
    assert done is not None
    assert "failures" not in done.state  # the turn ended: its count is gone


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "declined"])
async def test_hosted_approvals_are_answered_with_respond_after_a_restart(
    store: ConversationStore, approved: bool
) -> None:
    builder, _, _ = desk(call_tool("send_to_refunds", **BIG))
    with pytest.raises(PendingRequestsError) as waiting:
        await ConversationHost(builder, store).send("c", "refund my order")
    [request] = waiting.value.requests
    assert isinstance(request, Content)

    again, billing2, refunds2 = desk(reply("A voucher, then."))  # a new process
    host = ConversationHost(again, store)
    answer = (
        request.to_function_approval_response(approved=True)
        if approved
        else decline(request, "Not today.")
    )
    result = await host.respond("c", {str(request.id): answer})

    if approved:
        assert (result.active_agent, result.text) == ("refunds", "Refund paid.")
        assert result.handoffs[0].payload == Refund.model_validate(BIG)
        assert client_of(billing2).calls == []
    else:
        assert (result.active_agent, result.text) == ("billing", "A voucher, then.")
        assert client_of(refunds2).calls == []
        assert received(billing2).rendered.endswith("The reviewer said: Not today.")
    record = await store.load("c")
    assert record is not None
    assert record.state["host"]["pending"] is None
    assert record.state["host"]["turn"] is None
