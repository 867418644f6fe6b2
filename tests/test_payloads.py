"""Typed handoff payloads: the schema from a pydantic model, validation, and where it arrives."""

from __future__ import annotations

from datetime import date
from enum import Enum
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage, tool
from pydantic import BaseModel, ConfigDict, Field

from handoff_builder import (
    ConversationHost,
    CorruptConversationError,
    HandoffConfigurationError,
    HandoffWorkflowBuilder,
    PendingRequestsError,
)
from handoff_builder.stores import ConversationStore
from handoff_builder.testing import (
    assert_received,
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    scripted_agent,
)
from tests.helpers import run_turn


class Reason(str, Enum):
    DUPLICATE = "duplicate"
    DAMAGED = "damaged"


class Customer(BaseModel):
    """Who is refunded."""

    model_config = ConfigDict(extra="forbid")
    email: str = Field(description="Where the confirmation goes.")


class RefundRequest(BaseModel):
    """A refund the refunds team will pay."""

    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(description="The order to refund, e.g. A-1.")
    amount: float = Field(gt=0, description="In EUR.")
    reason: Reason = Field(description="Why the customer is refunded.")
    customer: Customer


GOOD: dict[str, Any] = {
    "order_id": "A-1",
    "amount": 24.9,
    "reason": "duplicate",
    "customer": {"email": "jane@example.com"},
}


def refund_desk(*billing_steps: Any) -> tuple[HandoffWorkflowBuilder, Any, Any]:
    billing = scripted_agent("billing", *billing_steps)
    refunds = scripted_agent("refunds", reply("Refunded."), reply("Refunded again."))
    builder = HandoffWorkflowBuilder(billing).with_handoff(
        billing, refunds, "refunds", tool_name="send_to_refunds", payload=RefundRequest
    )
    return builder, billing, refunds


async def test_the_tool_schema_is_the_models() -> None:
    builder, billing, _ = refund_desk(call_tool("send_to_refunds", **GOOD))
    await run_turn(builder.build(), "refund A-1")

    [tool] = received(billing).options["tools"]
    schema = tool.parameters()
    # The model's own description stays; pydantic's titles are left out (a lean schema).
    assert "title" not in schema
    assert schema["description"] == "A refund the refunds team will pay."
    assert schema["required"] == ["order_id", "amount", "reason", "customer"]
    assert schema["properties"]["amount"] == {
        "description": "In EUR.",
        "exclusiveMinimum": 0,
        "type": "number",
    }
    assert schema["$defs"]["Reason"]["enum"] == ["duplicate", "damaged"]
    assert schema["$defs"]["Customer"]["properties"]["email"]["description"] == (
        "Where the confirmation goes."
    )
    # A closed model with every field required is declared strict for OpenAI.
    assert tool.to_json_schema_spec()["function"]["strict"] is True


def test_a_model_with_optional_fields_is_not_declared_strict() -> None:
    class Loose(BaseModel):
        order_id: str
        note: str = ""

    billing, refunds = scripted_agent("billing"), scripted_agent("refunds")
    workflow = HandoffWorkflowBuilder(billing).with_handoff(billing, refunds, payload=Loose).build()
    host = workflow.get_start_executor()
    [tool] = host._participants["billing"].tools  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    assert "strict" not in tool.to_json_schema_spec()["function"]  # pyright: ignore[reportUnknownMemberType]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_an_invalid_payload_is_a_tool_error_that_names_each_field(stream: bool) -> None:
    bad = {"order_id": "A-1", "amount": -5, "reason": "whim"}
    builder, billing, refunds = refund_desk(
        call_tool("send_to_refunds", **bad), reply("Let me check the amount.")
    )

    turn = await run_turn(builder.build(), "refund A-1", stream=stream)

    assert client_of(refunds).calls == []
    assert turn.result.text == "Let me check the amount."
    [blocked] = turn.blocked
    assert (blocked.reason, blocked.target) == ("invalid_payload", "refunds")
    assert '"amount": -5' in blocked.arguments
    error = received(billing).rendered.splitlines()[-1]
    assert error.endswith(
        "Error: the handoff was not performed because its arguments are not valid: "
        "amount: Input should be greater than 0; reason: Input should be 'duplicate' or "
        "'damaged'; customer: Field required. Fix them and call send_to_refunds again."
    )


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_the_payload_reaches_the_receiver_the_event_and_the_turn_result(
    stream: bool,
) -> None:
    builder, _, refunds = refund_desk(call_tool("send_to_refunds", **GOOD))

    turn = await run_turn(builder.build(), "refund A-1", stream=stream)

    [handoff] = turn.handoffs
    assert isinstance(handoff.payload, RefundRequest)
    assert handoff.payload.customer.email == "jane@example.com"
    assert handoff.payload.reason is Reason.DUPLICATE
    assert turn.result.handoffs == (handoff,)
    assert handoff.goal == RefundRequest.model_validate(GOOD).model_dump_json()
    assert received(refunds).texts[-1] == (
        "RefundRequest: "
        '{"order_id":"A-1","amount":24.9,"reason":"duplicate","customer":'
        '{"email":"jane@example.com"}}'
    )


async def test_the_payload_is_stored_as_json_in_the_handoffs_record(
    store: ConversationStore,
) -> None:
    builder, _, _ = refund_desk(
        call_tool("send_to_refunds", **GOOD), call_tool("send_to_refunds", **GOOD)
    )
    host = ConversationHost(builder, store, live_conversations=0)
    first = await host.send("c", "refund A-1")
    assert isinstance(first.handoffs[0].payload, RefundRequest)
    record = await store.load("c")
    assert record is not None
    # The turn's handoffs live in the state while the turn is open; the note's record always.
    [result] = [
        c
        for m in record.messages
        for c in m["contents"]
        if c["type"] == "function_result" and "handoff_builder" in c["additional_properties"]
    ]
    assert result["additional_properties"]["handoff_builder"]["payload"] == GOOD


async def test_an_open_turns_payload_comes_back_as_the_model_on_another_worker(
    store: ConversationStore,
) -> None:
    """The turn waits (refunds asks for a tool approval) after the typed handoff; another host,
    with nothing in memory, answers and ends the turn: its handoff carries the model again."""

    def desk(*refunds_steps: Any) -> HandoffWorkflowBuilder:
        billing = scripted_agent("billing", call_tool("send_to_refunds", **GOOD))
        refunds = scripted_agent("refunds", *refunds_steps, tools=[pay])
        return HandoffWorkflowBuilder(billing).with_handoff(
            billing, refunds, tool_name="send_to_refunds", payload=RefundRequest
        )

    first_worker = ConversationHost(desk(call_tool("pay", amount=24.9)), store)
    with pytest.raises(PendingRequestsError) as waiting:
        await first_worker.send("c", "refund A-1")
    [approval] = waiting.value.requests

    other_worker = ConversationHost(desk(reply("Refunded.")), store)  # a new process
    answer = approval.to_function_approval_response(approved=True)
    done = await other_worker.respond("c", {str(approval.id): answer})

    assert done.text == "Refunded."
    [handoff] = done.handoffs
    assert handoff.payload == RefundRequest.model_validate(GOOD)
    assert isinstance(handoff.payload, RefundRequest)


@tool(name="pay", description="Pay a refund.", approval_mode="always_require")
def pay(amount: float) -> str:
    return f"Paid {amount} EUR."


class Quote(BaseModel):
    """A quote to refund instead of an order."""

    model_config = ConfigDict(extra="forbid")
    quote_id: str


async def test_two_sources_alike_named_tools_keep_their_own_models_across_workers(
    store: ConversationStore,
) -> None:
    """billing and sales both get ``handoff_to_refunds``, with different payloads."""

    def desk(*refunds_steps: Any) -> HandoffWorkflowBuilder:
        billing = scripted_agent("billing", call_tool("handoff_to_refunds", **GOOD))
        sales = scripted_agent("sales")
        refunds = scripted_agent("refunds", *refunds_steps, tools=[pay])
        return (
            HandoffWorkflowBuilder(billing)
            .with_handoff(billing, sales)
            .with_handoff(billing, refunds, payload=RefundRequest)
            .with_handoff(sales, refunds, payload=Quote)
        )

    first_worker = ConversationHost(desk(call_tool("pay", amount=5)), store)
    with pytest.raises(PendingRequestsError) as waiting:
        await first_worker.send("c", "refund A-1")
    [approval] = waiting.value.requests

    other_worker = ConversationHost(desk(reply("Refunded.")), store)
    answer = approval.to_function_approval_response(approved=True)
    done = await other_worker.respond("c", {str(approval.id): answer})

    [handoff] = done.handoffs  # billing's, read back with billing's model, not sales'
    assert (handoff.source, handoff.tool_name) == ("billing", "handoff_to_refunds")
    assert handoff.payload == RefundRequest.model_validate(GOOD)


async def test_a_stored_payload_that_no_longer_fits_its_model_is_a_corrupt_conversation(
    store: ConversationStore,
) -> None:
    class RefundV2(BaseModel):  # the model changed between deployments: a new required field
        model_config = ConfigDict(extra="forbid")
        order_id: str
        amount: float
        reason: Reason
        customer: Customer
        currency: str

    def desk(model: type[BaseModel], *refunds_steps: Any) -> HandoffWorkflowBuilder:
        billing = scripted_agent("billing", call_tool("send_to_refunds", **GOOD))
        refunds = scripted_agent("refunds", *refunds_steps, tools=[pay])
        return HandoffWorkflowBuilder(billing).with_handoff(
            billing, refunds, tool_name="send_to_refunds", payload=model
        )

    with pytest.raises(PendingRequestsError) as waiting:
        await ConversationHost(desk(RefundRequest, call_tool("pay", amount=5)), store).send(
            "c", "refund A-1"
        )
    [approval] = waiting.value.requests
    before = await store.load("c")

    upgraded = ConversationHost(desk(RefundV2, reply("Refunded.")), store)
    answer = approval.to_function_approval_response(approved=True)
    with pytest.raises(CorruptConversationError) as corrupt:
        await upgraded.respond("c", {str(approval.id): answer})

    assert corrupt.value.conversation_id == "c"
    assert "does not fit RefundV2: currency: Field required" in str(corrupt.value)
    after = await store.load("c")
    assert after is not None
    assert before is not None
    assert (after.version, after.messages) == (before.version, before.messages)  # untouched


async def test_a_strict_model_takes_enum_values_and_dates_as_the_model_writes_them() -> None:
    class Dated(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        reason: Reason
        when: date

    billing = scripted_agent(
        "billing", call_tool("handoff_to_refunds", reason="damaged", when="2026-12-01")
    )
    refunds = scripted_agent("refunds", reply("Refunded."))
    workflow = HandoffWorkflowBuilder(billing).with_handoff(billing, refunds, payload=Dated).build()

    turn = await run_turn(workflow, "refund")

    [handoff] = turn.result.handoffs
    assert handoff.payload == Dated(reason=Reason.DAMAGED, when=date(2026, 12, 1))


async def test_the_payload_comes_back_as_its_model_after_a_checkpoint_restore() -> None:
    storage = InMemoryCheckpointStorage()
    builder, _, _ = refund_desk(call_tool("send_to_refunds", **GOOD))
    workflow = builder.with_name("refunds-desk").build()
    await run_turn(workflow, "refund A-1", checkpoint_storage=storage)
    [after_billing] = [
        c
        for c in await storage.list_checkpoints(workflow_name="refunds-desk")
        if c.iteration_count == 1
    ]
    stored = after_billing.state["_executor_state"]["handoff_host"]["turn"]["handoffs"]
    assert stored[0]["payload"] == GOOD

    restored, billing2, refunds2 = refund_desk()
    turn = await run_turn(
        restored.with_name("refunds-desk").build(),
        None,  # type: ignore[arg-type]
        checkpoint_id=after_billing.checkpoint_id,
        checkpoint_storage=storage,
    )

    [handoff] = turn.result.handoffs
    assert isinstance(handoff.payload, RefundRequest)
    assert handoff.payload == RefundRequest.model_validate(GOOD)
    assert_received(refunds2, 'RefundRequest: {"order_id":"A-1"')
    assert client_of(billing2).calls == []  # billing had handed off before the checkpoint


async def test_a_hand_back_payload_replaces_the_summary() -> None:
    class Done(BaseModel):
        model_config = ConfigDict(extra="forbid")
        refunded: bool
        still_open: list[str]

    triage = scripted_agent(
        "triage", handoff_to("billing", goal="Refund it."), reply("Anything else?")
    )
    billing = scripted_agent(
        "billing", call_tool("transfer_back_to_triage", refunded=True, still_open=["app crash"])
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_hand_back(triage, payload=Done)
        .build()
    )

    turn = await run_turn(workflow, "refund, and the app crashes")

    assert received(billing).options["tools"][0].parameters()["required"] == [
        "refunded",
        "still_open",
    ]
    back = turn.result.handoffs[1]
    assert (back.kind, back.payload) == ("hand_back", Done(refunded=True, still_open=["app crash"]))
    assert received(triage).texts[-1] == (
        'Hand-back from billing to you (triage). Done: {"refunded":true,"still_open":["app crash"]}'
    )


async def test_with_handoffs_gives_every_edge_the_payload() -> None:
    billing = scripted_agent("billing", call_tool("handoff_to_refunds", **GOOD))
    refunds = scripted_agent("refunds", reply("ok"))
    vouchers = scripted_agent("vouchers")
    workflow = (
        HandoffWorkflowBuilder(billing)
        .with_handoffs(billing, [refunds, vouchers], payload=RefundRequest)
        .build()
    )
    turn = await run_turn(workflow, "refund")
    assert [t.parameters()["description"] for t in received(billing).options["tools"]] == [
        "A refund the refunds team will pay.",
        "A refund the refunds team will pay.",
    ]
    assert isinstance(turn.handoffs[0].payload, RefundRequest)


def test_a_payload_that_is_not_a_pydantic_model_is_a_build_error() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    builder = HandoffWorkflowBuilder(a).with_handoff(a, b, payload=dict)  # type: ignore[arg-type]
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert failure.value.problems == (
        "The payload of the handoff from 'a' to 'b' is <class 'dict'>; pass a pydantic "
        "BaseModel subclass (the class, not an instance).",
    )


def test_without_a_payload_the_tool_takes_the_built_in_goal() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).build()
    host = workflow.get_start_executor()
    [tool] = host._participants["a"].tools  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    spec = tool.to_json_schema_spec()  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    assert spec["function"]["parameters"]["required"] == ["goal"]
    assert spec["function"]["parameters"]["additionalProperties"] is False
    assert spec["function"]["strict"] is True


class Order(BaseModel):
    """An order to refund (closed, every field required: declared strict)."""

    model_config = ConfigDict(extra="forbid")
    order_id: str
    quantity: int


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_a_strict_tool_does_not_coerce_its_arguments(stream: bool) -> None:
    """ "strict": true is what the model is told; "25" for an integer is refused, not taken."""
    billing = scripted_agent(
        "billing",
        call_tool("handoff_to_refunds", order_id="A-1", quantity="25"),
        reply("How many items?"),
    )
    refunds = scripted_agent("refunds")
    workflow = HandoffWorkflowBuilder(billing).with_handoff(billing, refunds, payload=Order).build()

    turn = await run_turn(workflow, "refund 25 items of A-1", stream=stream)

    [tool] = received(billing, 0).options["tools"]
    assert tool.to_json_schema_spec()["function"]["strict"] is True
    assert client_of(refunds).calls == []
    [blocked] = turn.blocked
    assert (blocked.reason, blocked.target) == ("invalid_payload", "refunds")
    assert (
        received(billing)
        .rendered.splitlines()[-1]
        .endswith(
            "Error: the handoff was not performed because its arguments are not valid: quantity: "
            "Input should be a valid integer. Fix them and call handoff_to_refunds again."
        )
    )
    assert turn.result.text == "How many items?"


async def test_a_tool_that_is_not_strict_takes_what_pydantic_can_convert() -> None:
    class LooseOrder(BaseModel):
        order_id: str
        quantity: int
        note: str = ""  # a default: not declared strict

    billing = scripted_agent(
        "billing", call_tool("handoff_to_refunds", order_id="A-1", quantity="25")
    )
    refunds = scripted_agent("refunds", reply("Refunded."))
    workflow = (
        HandoffWorkflowBuilder(billing).with_handoff(billing, refunds, payload=LooseOrder).build()
    )

    turn = await run_turn(workflow, "refund 25 items of A-1")

    [handoff] = turn.result.handoffs
    assert handoff.payload == LooseOrder(order_id="A-1", quantity=25)


async def test_a_strict_delegate_tool_does_not_coerce_its_arguments() -> None:
    triage = scripted_agent(
        "triage", call_tool("ask_policy", order_id="A-1", quantity="25"), reply("Let me check.")
    )
    policy = scripted_agent("policy")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "refund policy", payload=Order)
        .build()
    )

    await run_turn(workflow, "refund 25 items of A-1")

    assert client_of(policy).calls == []
    assert (
        received(triage)
        .rendered.splitlines()[-1]
        .endswith("Error: ask_policy was not called: quantity: Input should be a valid integer.")
    )
