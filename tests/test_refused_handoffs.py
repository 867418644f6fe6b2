"""Handoff-shaped calls to tools the agent does not have in its run: refused while it runs.

Three kinds: another agent's handoff tool (``not_granted``), one of its own that ``is_enabled``
turned off (``disabled``), and a handoff that does not exist (``unknown_target``). Each is a tool
error the agent's model reads on its next call, naming the handoff tools it may use; a
``handoff_blocked`` event; and a refused attempt, counted by ``max_rejected_handoffs``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from agent_framework import Agent, Content, WorkflowEvent, tool
from typing_extensions import override

from handoff_builder import (
    DEFAULT_ESCALATION_MESSAGE,
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_TURN_EVENT,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffCall,
    HandoffManager,
    HandoffRequest,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    RoutingStep,
)
from handoff_builder.testing import (
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    respond,
    scripted_agent,
)
from tests.helpers import Turn, run_turn

pytestmark = pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])

FRAMEWORK_LIMIT_TEXT = "Function invocation limit reached"

NOT_GRANTED = (
    "Error: handoff_to_refunds is not one of your tools, so it was not called: you cannot hand "
    "the conversation to refunds. The handoff tools you have now: handoff_to_billing (to "
    "billing). Use one of them if it fits, or answer the user yourself."
)


def last_result(agent: Agent, call: int = -1) -> str:
    """The text of the last function result ``agent``'s model received in ``call``."""
    results = [
        c for m in received(agent, call).messages for c in m.contents if c.type == "function_result"
    ]
    return str(results[-1].result)


def desk() -> tuple[HandoffWorkflowBuilder, Agent, Agent, Agent]:
    """triage may hand off to billing; only billing may hand off to refunds."""
    triage = scripted_agent("triage")
    billing = scripted_agent("billing")
    refunds = scripted_agent("refunds")
    builder = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, refunds)
    )
    return builder, triage, billing, refunds


def results_in(turn: Turn) -> list[str]:
    return [
        str(c.result)
        for m in turn.result.conversation
        for c in m.contents
        if c.type == "function_result"
    ]


async def test_another_agents_handoff_is_refused_while_the_agent_runs(stream: bool) -> None:
    builder, triage, _, refunds = desk()
    client_of(triage).add_steps(
        handoff_to("refunds", goal="Refund."), reply("I can send you to billing.")
    )

    turn = await run_turn(builder.build(), "refund please", stream=stream)

    # The model read the refusal, naming the one handoff it has, and answered in the same run.
    assert len(client_of(triage).calls) == 2
    assert last_result(triage) == NOT_GRANTED
    assert received(triage).tool_names == ("handoff_to_billing",)  # the refused name not offered
    assert turn.blocked == [
        HandoffBlockedEvent(
            "triage", "handoff_to_refunds", "not_granted", turn.blocked[0].call_id, "refunds",
            '{"goal": "Refund."}',
        )
    ]  # fmt: skip
    assert (turn.result.status, turn.result.text) == ("completed", "I can send you to billing.")
    assert turn.result.trace == (
        RoutingStep("start", "code", "initial_agent", None, "triage"),
        RoutingStep("blocked", "code", "not_granted", "triage", "refunds"),
        RoutingStep("end", "model", "reply", "triage"),
    )
    assert client_of(refunds).calls == []


async def test_a_disabled_handoff_is_refused_with_the_handoffs_the_agent_has(stream: bool) -> None:
    triage = scripted_agent(
        "triage", handoff_to("billing", goal="Bill."), reply("Tech can help meanwhile.")
    )
    billing, tech = scripted_agent("billing"), scripted_agent("tech")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, is_enabled=False)
        .with_handoff(triage, tech)
        .build()
    )

    turn = await run_turn(workflow, "my bill", stream=stream)

    assert last_result(triage) == (
        "Error: handoff_to_billing is not available to you now, so it was not called. The "
        "handoff tools you have now: handoff_to_tech (to tech). Use one of them if it fits, or "
        "answer the user yourself."
    )
    assert received(triage).tool_names == ("handoff_to_tech",)
    assert [(b.source, b.tool_name, b.reason, b.target) for b in turn.blocked] == [
        ("triage", "handoff_to_billing", "disabled", "billing")
    ]
    assert (turn.result.status, turn.result.text) == ("completed", "Tech can help meanwhile.")
    assert client_of(billing).calls == []


@pytest.mark.parametrize("name", ["handoff_to_nobody", "transfer_to_x", "transfer_back_to_boss"])
async def test_an_invented_handoff_is_refused(stream: bool, name: str) -> None:
    builder, triage, _, _ = desk()
    client_of(triage).add_steps(call_tool(name, goal="Anyone."), reply("Let me help myself."))

    turn = await run_turn(builder.build(), "help", stream=stream)

    assert last_result(triage) == (
        f"Error: {name} does not exist, so it was not called. The handoff tools you have now: "
        "handoff_to_billing (to billing). Use one of them if it fits, or answer the user yourself."
    )
    [blocked] = turn.blocked
    assert (blocked.source, blocked.tool_name, blocked.reason, blocked.target) == (
        "triage", name, "unknown_target", None
    )  # fmt: skip
    assert json.loads(blocked.arguments) == {"goal": "Anyone."}
    assert (turn.result.status, turn.result.text) == ("completed", "Let me help myself.")


async def test_an_agent_with_no_tools_at_all_is_told_it_has_no_handoff(stream: bool) -> None:
    """billing has no handoff and no tool of its own: the call is still refused in the run."""
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent(
        "billing", handoff_to("refunds", goal="Refund."), reply("I will refund it myself.")
    )
    refunds = scripted_agent("refunds")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(refunds, billing)  # handoff_to_billing is refunds' too; billing has none
        .build()
    )

    turn = await run_turn(workflow, "refund", stream=stream)

    assert received(billing).tool_names == ()
    assert last_result(billing) == (
        "Error: handoff_to_refunds does not exist, so it was not called. You have no handoff "
        "tools now: answer the user yourself."
    )
    assert [(b.source, b.reason) for b in turn.blocked] == [("billing", "unknown_target")]
    assert (turn.result.status, turn.result.text) == ("completed", "I will refund it myself.")


async def test_the_reported_run_escalates_at_the_refused_attempts_cap(stream: bool) -> None:
    """Issue 21: triage kept calling billing's handoff_to_refunds; four model calls, then the
    turn ended `completed` with agent_framework's limit text. The fourth refusal escalates."""
    builder, triage, billing, _ = desk()
    client_of(triage).add_steps(*[handoff_to("refunds", goal="Refund.") for _ in range(10)])

    turn = await run_turn(builder.build(), "refund", stream=stream)

    assert len(client_of(triage).calls) == 4
    assert [last_result(triage, call) for call in (1, 2, 3)] == [NOT_GRANTED] * 3
    assert [(b.reason, b.target) for b in turn.blocked] == [("not_granted", "refunds")] * 4
    assert turn.result.status == "rejected_handoffs"
    assert turn.escalations == [EscalationEvent("rejected_handoffs", "triage", 3, "refunds", "")]
    assert results_in(turn)[-1] == (
        "Not transferred: 3 handoff attempts were already refused for this user message. "
        "A human colleague will take over the conversation."
    )
    assert turn.result.text == DEFAULT_ESCALATION_MESSAGE
    assert FRAMEWORK_LIMIT_TEXT not in json.dumps([m.to_dict() for m in turn.result.conversation])
    assert client_of(billing).calls == []


async def test_every_kind_counts_towards_the_cap_in_the_order_made(stream: bool) -> None:
    triage = scripted_agent(
        "triage",
        handoff_to("refunds", goal="Refund."),  # not granted
        handoff_to("billing", goal=""),  # empty goal
        handoff_to("tech", goal="Fix."),  # disabled
        call_tool("transfer_to_nobody", goal="Anyone."),  # invented: the fourth refusal
        reply("never played"),
    )
    billing, tech, refunds = (scripted_agent(n) for n in ("billing", "tech", "refunds"))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(triage, tech, is_enabled=False)
        .with_handoff(billing, refunds)
        .build()
    )

    turn = await run_turn(workflow, "help", stream=stream)

    assert [b.reason for b in turn.blocked] == [
        "not_granted", "empty_goal", "disabled", "unknown_target"
    ]  # fmt: skip
    assert turn.escalations == [EscalationEvent("rejected_handoffs", "triage", 3, None, "")]
    assert client_of(triage).remaining == 1


async def test_the_agents_own_tool_with_a_handoff_like_name_is_not_refused(stream: bool) -> None:
    @tool(name="transfer_to_savings", description="Move money to savings.")
    def transfer_to_savings(amount: int) -> str:
        return f"Moved {amount}."

    bank = scripted_agent(
        "bank",
        call_tool("transfer_to_savings", amount=5),
        reply("Moved."),
        tools=[transfer_to_savings],
    )
    other = scripted_agent("other")
    workflow = HandoffWorkflowBuilder(bank).with_handoff(bank, other).build()

    turn = await run_turn(workflow, "save 5", stream=stream)

    assert last_result(bank) == "Moved 5."
    assert turn.blocked == []
    assert received(bank).tool_names == ("transfer_to_savings", "handoff_to_other")


async def test_a_refused_call_beside_a_call_of_the_agents_own_tool(stream: bool) -> None:
    """Both calls of one response get their results; the refusal names the offered handoffs."""
    looked_up: list[str] = []

    @tool(name="lookup", description="Look up an order.")
    def lookup(order: str) -> str:
        looked_up.append(order)
        return f"Order {order}: shipped."

    triage = scripted_agent(
        "triage",
        respond(call_tool("lookup", order="42"), handoff_to("refunds", goal="Refund.")),
        reply("Your order shipped."),
        tools=[lookup],
    )
    billing, refunds = scripted_agent("billing"), scripted_agent("refunds")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, refunds)
    ).build()

    turn = await run_turn(workflow, "where is order 42", stream=stream)

    assert looked_up == ["42"]
    results = [
        c for m in received(triage).messages for c in m.contents if c.type == "function_result"
    ]
    assert [str(r.result) for r in results] == ["Order 42: shipped.", NOT_GRANTED]
    assert [b.reason for b in turn.blocked] == ["not_granted"]
    assert turn.result.text == "Your order shipped."


async def test_a_refused_call_beside_a_call_that_waits_for_approval(stream: bool) -> None:
    """agent_framework makes every call of such a response wait for the approval: the refusal
    counts with the reply that made it, and is the call's result once the approval is in."""

    @tool(name="page_on_call", approval_mode="always_require")
    def page_on_call(team: str) -> str:
        """Page a team."""
        return f"paged {team}"

    triage = scripted_agent(
        "triage",
        respond(call_tool("page_on_call", team="sre"), handoff_to("refunds", goal="Refund.")),
        reply("The on-call team is paged."),
        tools=[page_on_call],
    )
    billing, refunds = scripted_agent("billing"), scripted_agent("refunds")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, refunds)
    ).build()

    async def run(**kwargs: Any) -> list[WorkflowEvent[Any]]:
        if stream:
            return [e async for e in workflow.run(stream=True, **kwargs)]
        return list(await workflow.run(**kwargs))

    first = await run(message="page them")
    blocked = [e.data for e in first if isinstance(e.data, HandoffBlockedEvent)]
    assert [(b.tool_name, b.reason) for b in blocked] == [("handoff_to_refunds", "not_granted")]
    answers: dict[str, Any] = {
        e.request_id: e.data.to_function_approval_response(approved=True)
        for e in first
        if e.type == "request_info" and isinstance(e.data, Content)
    }
    later = await run(responses=answers)

    assert not [e for e in later if e.type == HANDOFF_BLOCKED_EVENT]  # counted once, before
    [result] = [e.data for e in later if e.type == HANDOFF_TURN_EVENT]
    assert isinstance(result, HandoffTurnResult)
    assert (result.status, result.text) == ("completed", "The on-call team is paged.")
    results = [
        str(c.result) for m in received(triage).messages for c in m.contents
        if c.type == "function_result"
    ]  # fmt: skip
    assert results == ["paged sre", NOT_GRANTED]


async def test_a_manager_that_follows_every_call_cannot_follow_one_the_agent_lacks(
    stream: bool,
) -> None:
    """The refusal is code's, whatever a manager's ``vet_handoff`` returns."""

    class FollowsEverything(HandoffManager):
        @override
        def vet_handoff(
            self, request: HandoffRequest, earlier: Sequence[HandoffCall]
        ) -> HandoffCall:
            return HandoffCall(
                request.route, request.argument, request.call_id, "transferred", "Transferred."
            )

    builder, triage, _, refunds = desk()
    client_of(triage).add_steps(handoff_to("refunds", goal="Refund."), reply("Billing, then."))

    turn = await run_turn(builder.with_manager(FollowsEverything).build(), "refund", stream=stream)

    assert last_result(triage) == NOT_GRANTED
    assert [(b.reason, b.target) for b in turn.blocked] == [("not_granted", "refunds")]
    assert (turn.result.status, turn.result.text) == ("completed", "Billing, then.")
    assert turn.handoffs == []
    assert client_of(refunds).calls == []
