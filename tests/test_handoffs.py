"""Handoff routing through real agent_framework Agents and the scripted client."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agent_framework import (
    Agent,
    Content,
    FunctionInvocationContext,
    Message,
    function_middleware,
    tool,
)

from handoff_builder import (
    DEFAULT_ESCALATION_MESSAGE,
    DEFAULT_HAND_BACK_INSTRUCTIONS,
    DEFAULT_HANDOFF_INSTRUCTIONS,
    HandoffBlockedEvent,
    HandoffWorkflowBuilder,
)
from handoff_builder.testing import (
    ScriptedChatClient,
    assert_received,
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    respond,
    scripted_agent,
)
from tests.helpers import run_turn, speakers

pytestmark = pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])


def chain(*steps_by_agent: tuple[str, list[Any]]) -> dict[str, Agent]:
    return {
        name: scripted_agent(name, *steps, description=f"{name} desk")
        for name, steps in steps_by_agent
    }


def results_for(messages: list[Message] | tuple[Message, ...], call_id: str) -> list[Content]:
    return [
        content
        for message in messages
        for content in message.contents
        if content.type == "function_result" and content.call_id == call_id
    ]


def call_ids(messages: tuple[Message, ...], name: str) -> list[str]:
    return [
        str(content.call_id)
        for message in messages
        for content in message.contents
        if content.type == "function_call" and content.name == name
    ]


async def test_pass_it_on_seed(stream: bool, caplog: pytest.LogCaptureFixture) -> None:
    """The seed's test: triage -> billing -> refunds, which replies; exactly two handoffs logged."""
    agents = chain(
        ("triage", [handoff_to("billing", goal="The user was charged twice and wants it fixed.")]),
        ("billing", [handoff_to("refunds", goal="Refund the duplicate charge.")]),
        ("refunds", [reply("I have refunded the duplicate charge.")]),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"], reason="charges, invoices, plans")
        .with_handoff(agents["billing"], agents["refunds"])
        .build()
    )
    with caplog.at_level(logging.INFO, logger="handoff_builder"):
        turn = await run_turn(workflow, "I was charged twice this month", stream=stream)

    assert turn.result.active_agent == "refunds"
    assert turn.result.text == "I have refunded the duplicate charge."
    assert [(h.source, h.target, h.goal) for h in turn.handoffs] == [
        ("triage", "billing", "The user was charged twice and wants it fixed."),
        ("billing", "refunds", "Refund the duplicate charge."),
    ]
    assert turn.result.handoffs == tuple(turn.handoffs)
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("handoff ")]
    assert logged == [
        "handoff triage -> billing: The user was charged twice and wants it fixed.",
        "handoff billing -> refunds: Refund the duplicate charge.",
    ]
    assert speakers(turn) == ["triage", "billing", "refunds"]
    assert not turn.result.escalated
    for agent in agents.values():
        client_of(agent).assert_complete()
    # Each receiver's model got the goal it was handed, so it does not have to ask again.
    assert_received(
        agents["billing"],
        "Goal: The user was charged twice and wants it fixed.",
    )
    assert received(agents["refunds"]).texts[-1] == ("Goal: Refund the duplicate charge.")


async def test_turn_output_shape_matches_dotnet(stream: bool) -> None:
    """Output: call, result, call, result, text; each authored by its agent."""
    agents = chain(
        ("a", [handoff_to("b", goal="g1")]),
        ("b", [handoff_to("c", goal="g2")]),
        ("c", [reply("Hello from c")]),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["a"])
        .with_handoff(agents["a"], agents["b"])
        .with_handoff(agents["b"], agents["c"])
        .build()
    )
    turn = await run_turn(workflow, "abc", stream=stream)
    shape = [(m.role, m.author_name, [c.type for c in m.contents]) for m in turn.result.messages]
    assert shape == [
        ("assistant", "a", ["function_call"]),
        ("tool", "a", ["function_result"]),
        ("assistant", "b", ["function_call"]),
        ("tool", "b", ["function_result"]),
        ("assistant", "c", ["text"]),
    ]
    assert turn.result.conversation[0].text == "abc"
    assert len(turn.result.conversation) == 6


async def test_no_handoff_answer_comes_from_initial_agent(stream: bool) -> None:
    agents = chain(("triage", [reply("Hi! How can I help?")]), ("billing", []))
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .build()
    )
    turn = await run_turn(workflow, "hello", stream=stream)
    assert turn.result.text == "Hi! How can I help?"
    assert turn.result.active_agent == "triage"
    assert turn.handoffs == []
    assert client_of(agents["billing"]).calls == []


async def test_handoff_ends_the_callers_tool_loop(stream: bool) -> None:
    """The source gets exactly one model call in that hop: no narration after the handoff."""
    agents = chain(("triage", [handoff_to("billing")]), ("billing", [reply("done")]))
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .build()
    )
    turn = await run_turn(workflow, "help", stream=stream)
    assert len(client_of(agents["triage"]).calls) == 1
    assert turn.result.text == "done"
    result = results_for(
        turn.result.messages, call_ids(turn.result.conversation, "handoff_to_billing")[0]
    )
    assert [r.result for r in result] == ["Transferred."]


async def test_empty_goal_is_a_tool_error_and_nothing_routes(stream: bool) -> None:
    agents = chain(
        ("triage", [handoff_to("billing", goal="  "), reply("Could you tell me more?")]),
        ("billing", []),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .build()
    )
    turn = await run_turn(workflow, "help", stream=stream)

    assert turn.result.text == "Could you tell me more?"
    assert turn.result.active_agent == "triage"
    assert turn.handoffs == []
    assert client_of(agents["billing"]).calls == []
    second_call = client_of(agents["triage"]).calls[1]
    tool_results = [
        c for m in second_call.messages for c in m.contents if c.type == "function_result"
    ]
    assert len(tool_results) == 1
    assert str(tool_results[0].result).startswith(
        "Error: the handoff was not performed because the goal is empty"
    )
    assert "one sentence" in str(tool_results[0].result)
    [blocked] = turn.blocked
    assert (blocked.source, blocked.tool_name, blocked.reason, blocked.target) == (
        "triage", "handoff_to_billing", "empty_goal", "billing",
    )  # fmt: skip


async def test_retry_with_a_goal_after_an_empty_one_routes(stream: bool) -> None:
    agents = chain(
        ("triage", [handoff_to("billing", goal=""), handoff_to("billing", goal="Fix my invoice.")]),
        ("billing", [reply("Invoice fixed.")]),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .build()
    )
    turn = await run_turn(workflow, "help", stream=stream)
    assert turn.result.text == "Invoice fixed."
    assert [(h.source, h.target, h.goal) for h in turn.handoffs] == [
        ("triage", "billing", "Fix my invoice.")
    ]


async def test_unknown_handoff_target_is_a_tool_error(stream: bool) -> None:
    agents = chain(
        (
            "triage",
            [call_tool("handoff_to_ghost", goal="Haunt the user."), reply("Let me help myself.")],
        ),
        ("billing", []),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .build()
    )
    turn = await run_turn(workflow, "help", stream=stream)
    assert turn.result.text == "Let me help myself."
    assert turn.result.active_agent == "triage"
    assert turn.handoffs == []
    [blocked] = turn.blocked
    assert (blocked.tool_name, blocked.reason, blocked.target) == (
        "handoff_to_ghost",
        "unknown_target",
        None,
    )
    assert json.loads(blocked.arguments) == {"goal": "Haunt the user."}
    second_call = client_of(agents["triage"]).calls[1]
    [error] = [c for m in second_call.messages for c in m.contents if c.type == "function_result"]
    assert error.result == (
        "Error: handoff_to_ghost does not exist, so it was not called. The handoff tools you "
        "have now: handoff_to_billing (to billing). Use one of them if it fits, or answer the "
        "user yourself."
    )


async def test_handoff_not_granted_to_the_speaker_is_blocked(stream: bool) -> None:
    """triage may only reach billing; billing's tool to refunds does not work for triage."""
    agents = chain(
        (
            "triage",
            [handoff_to("refunds", goal="Refund."), reply("I can only send you to billing.")],
        ),
        ("billing", []),
        ("refunds", []),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .with_handoff(agents["billing"], agents["refunds"])
        .build()
    )
    turn = await run_turn(workflow, "refund please", stream=stream)
    assert turn.result.active_agent == "triage"
    assert turn.handoffs == []
    assert turn.blocked == [
        HandoffBlockedEvent(
            source="triage",
            tool_name="handoff_to_refunds",
            reason="not_granted",
            call_id=turn.blocked[0].call_id,
            target="refunds",
            arguments='{"goal": "Refund."}',
        )
    ]
    assert client_of(agents["refunds"]).calls == []
    assert client_of(agents["triage"]).calls[0].tool_names == ("handoff_to_billing",)


async def test_several_handoff_calls_in_one_response_first_wins(stream: bool) -> None:
    """Each call is decided when it is made: the first accepted one routes, the rest do not."""
    agents = chain(
        (
            "triage",
            [
                respond(
                    handoff_to("billing", goal="Bill."), handoff_to("tech", goal="Fix the crash.")
                )
            ],
        ),
        ("billing", [reply("Billed.")]),
        ("tech", []),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoffs(agents["triage"], [agents["billing"], agents["tech"]])
        .build()
    )
    turn = await run_turn(workflow, "two things", stream=stream)

    assert turn.result.text == "Billed."
    assert [(h.source, h.target) for h in turn.handoffs] == [("triage", "billing")]
    assert client_of(agents["tech"]).calls == []
    conversation = turn.result.conversation
    [billing_call] = call_ids(conversation, "handoff_to_billing")
    [tech_call] = call_ids(conversation, "handoff_to_tech")
    [billing_result] = results_for(conversation, billing_call)
    [tech_result] = results_for(conversation, tech_call)
    assert billing_result.result == "Transferred."
    assert tech_result.result == (
        "Not performed: only one handoff per response is followed (handoff_to_billing was "
        "followed)."
    )
    assert turn.warnings == [
        "Duplicate handoff requests in one response from 'triage' (handoff_to_billing, "
        "handoff_to_tech); following the first, handoff_to_billing."
    ]
    # Billing reads the goal of the handoff that was followed, and nothing of the other one.
    assert_received(agents["billing"], "Goal: Bill.")
    assert not received(agents["billing"]).sees("Fix the crash.")


async def test_text_and_handoff_in_one_response_keeps_the_text(stream: bool) -> None:
    agents = chain(
        (
            "triage",
            [respond("Let me get billing for you.", handoff_to("billing", goal="Invoice."))],
        ),
        ("billing", [reply("Here is your invoice.")]),
    )
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .build()
    )
    turn = await run_turn(workflow, "invoice", stream=stream)
    texts = [m.text for m in turn.result.messages if m.role == "assistant" and m.text]
    assert texts == ["Let me get billing for you.", "Here is your invoice."]


async def test_cap_escalates_to_a_human_with_an_apology(stream: bool) -> None:
    """Two agents passing the user back and forth hit the cap (2 here)."""
    a = scripted_agent("a", handoff_to("b", goal="g"), handoff_to("b", goal="g"))
    b = scripted_agent("b", handoff_to("a", goal="g"))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_handoff(b, a)
        .with_max_handoffs_per_turn(2, escalation_message="Sorry! A human will call you.")
        .build()
    )
    turn = await run_turn(workflow, "loop", stream=stream)

    assert turn.result.escalated
    assert turn.result.escalation is not None
    assert turn.result.escalation.reason == "handoff_cap"
    assert turn.result.escalation.agent == "a"
    assert turn.result.escalation.requested_target == "b"
    assert turn.result.escalation.limit == 2
    assert turn.escalations == [turn.result.escalation]
    assert [(h.source, h.target) for h in turn.handoffs] == [("a", "b"), ("b", "a")]
    last = turn.result.messages[-1]
    assert (last.role, last.text) == ("assistant", "Sorry! A human will call you.")
    if stream:  # the apology is streamed too, as the host's
        assert turn.updates[-1].text == "Sorry! A human will call you."
        assert turn.updates[-1].author_name == "handoff_host"
    third_call = call_ids(turn.result.conversation, "handoff_to_b")[-1]
    [refused] = results_for(turn.result.conversation, third_call)
    assert str(refused.result).startswith("Not transferred: the limit of 2 handoffs")
    client_of(a).assert_complete()
    client_of(b).assert_complete()


async def test_default_cap_is_three_with_default_apology(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("b"), handoff_to("b"))
    b = scripted_agent("b", handoff_to("a"), handoff_to("a"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a).build()
    turn = await run_turn(workflow, "loop", stream=stream)
    assert len(turn.handoffs) == 3
    assert turn.result.escalated
    assert turn.result.messages[-1].text == DEFAULT_ESCALATION_MESSAGE


async def test_cap_resets_on_each_user_message(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("b"), handoff_to("b"))
    b = scripted_agent("b", reply("first"), reply("second"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_max_handoffs_per_turn(1).build()
    first = await run_turn(workflow, "one", stream=stream)
    second = await run_turn(workflow, "two", stream=stream)
    assert (first.result.text, first.result.escalated) == ("first", False)
    assert (second.result.text, second.result.escalated) == ("second", False)


async def test_max_iterations_ends_the_turn_with_an_escalation(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("b"))
    b = scripted_agent("b", handoff_to("a"))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_handoff(b, a)
        .with_max_iterations(2)
        .build()
    )
    turn = await run_turn(workflow, "loop", stream=stream)
    assert turn.result.escalation is not None
    assert turn.result.escalation.reason == "max_iterations"
    assert turn.result.escalation.limit == 2
    assert len(client_of(a).calls) + len(client_of(b).calls) == 2


async def test_agents_own_tools_and_instructions_are_kept(stream: bool) -> None:
    @tool(name="lookup_invoice", description="Find an invoice.")
    def lookup_invoice(number: str) -> str:
        return f"Invoice {number}: 42 EUR"

    triage = scripted_agent(
        "triage",
        call_tool("lookup_invoice", number="7"),
        handoff_to("billing", goal="Explain invoice 7."),
        instructions="You are the front desk.",
        tools=[lookup_invoice],
    )
    billing = scripted_agent("billing", reply("It is 42 EUR."), instructions="You are billing.")
    tools_before = list(triage.default_options.get("tools") or [])
    options_before = dict(triage.default_options)
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()
    turn = await run_turn(workflow, "invoice 7?", stream=stream)

    first, second = client_of(triage).calls
    assert first.tool_names == ("lookup_invoice", "handoff_to_billing")
    assert first.instructions == "You are the front desk.\n" + DEFAULT_HANDOFF_INSTRUCTIONS.replace(
        "{handoff_tools}", "`handoff_to_billing`"
    )
    assert "allow_multiple_tool_calls" not in first.options  # the agent's own options decide
    [result] = [c for m in second.messages for c in m.contents if c.type == "function_result"]
    assert "42 EUR" in str(result.result)
    assert turn.result.text == "It is 42 EUR."
    # billing has no outgoing handoff: no tools and no handoff instructions added.
    [billing_call] = client_of(billing).calls
    assert billing_call.tool_names == ()
    assert billing_call.instructions == "You are billing."
    # The agents passed in are never mutated.
    assert list(triage.default_options.get("tools") or []) == tools_before
    assert dict(triage.default_options) == options_before


async def test_custom_and_disabled_handoff_instructions(stream: bool) -> None:
    a = scripted_agent("a", reply("x"), reply("y"), instructions="Own.")
    b = scripted_agent("b")
    custom = (
        HandoffWorkflowBuilder(a).with_handoff(a, b).with_instructions("Hand off wisely.").build()
    )
    await run_turn(custom, "hi", stream=stream)
    off = HandoffWorkflowBuilder(a).with_handoff(a, b).with_instructions("").build()
    await run_turn(off, "hi", stream=stream)
    assert [call.instructions for call in client_of(a).calls] == ["Own.\nHand off wisely.", "Own."]


async def test_instructions_none_restores_default(stream: bool) -> None:
    a = scripted_agent("a", reply("x"))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_instructions("x")
        .with_instructions(None)
        .build()
    )
    await run_turn(workflow, "hi", stream=stream)
    assert client_of(a).calls[0].instructions == (
        "Your reply is a call to the handoff function that fits the user's request. If the user "
        "only greets or thanks you, answer in words."
    )


async def test_default_instructions_name_no_tool_the_tools_do(stream: bool) -> None:
    """The default text lists no tool name (a small model wrote such names instead of calling
    them, docs/evals.md); each agent is offered the tools it really has."""
    triage = scripted_agent(
        "triage", handoff_to("billing", goal="A refund.", tool_name="transfer_to_billing")
    )
    billing = scripted_agent("billing", reply("billing here"))
    tech = scripted_agent("tech")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, tool_name="transfer_to_billing")
        .with_handoff(triage, tech, tool_name="transfer_to_tech")
        .with_hand_back(triage)
        .build()
    )
    await run_turn(workflow, "hi", stream=stream)
    assert received(triage).instructions == DEFAULT_HANDOFF_INSTRUCTIONS
    assert received(triage).tool_names == ("transfer_to_billing", "transfer_to_tech")
    # A specialist's only tool is its hand-back: it reads the hand-back's text.
    assert received(billing).tool_names == ("transfer_back_to_triage",)
    assert received(billing).instructions == DEFAULT_HAND_BACK_INSTRUCTIONS


async def test_an_agent_with_handoffs_of_both_kinds_reads_the_handoff_text(stream: bool) -> None:
    """billing can hand back to triage and hand off to refunds: the handoff's text; set text is
    every agent's, whatever its kinds."""
    triage = scripted_agent("triage", handoff_to("billing", goal="A refund."))
    billing = scripted_agent("billing", reply("billing here"))
    refunds = scripted_agent("refunds")
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds)
        .with_hand_back(triage, [billing])
    )
    await run_turn(builder.build(), "hi", stream=stream)
    assert received(billing).tool_names == ("handoff_to_refunds", "transfer_back_to_triage")
    assert received(billing).instructions == DEFAULT_HANDOFF_INSTRUCTIONS
    desk = scripted_agent("triage", handoff_to("billing", goal="A refund."))
    billing_only = scripted_agent("billing", reply("billing here"))
    custom = (
        HandoffWorkflowBuilder(desk)
        .with_handoff(desk, billing_only)
        .with_hand_back(desk)
        .with_instructions("Use {handoff_tools} when you must.")
    )
    await run_turn(custom.build(), "hi", stream=stream)
    assert received(billing_only).instructions == "Use `transfer_back_to_triage` when you must."


async def test_custom_instructions_can_name_the_tools(stream: bool) -> None:
    a = scripted_agent("a", reply("x"))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b, tool_name="transfer_to_b")
        .with_instructions("Use {handoff_tools} when b should answer; keep {braces} as written.")
        .build()
    )
    await run_turn(workflow, "hi", stream=stream)
    assert received(a).instructions == (
        "Use `transfer_to_b` when b should answer; keep {braces} as written."
    )


async def test_tool_description_and_schema(stream: bool) -> None:
    a = scripted_agent("a", reply("x"))
    described = scripted_agent("described", description="Charges and invoices")
    plain = scripted_agent("plain")
    reasoned = scripted_agent("reasoned", description="ignored")
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoffs(a, [described, plain])
        .with_handoff(a, reasoned, "Refunds only", tool_name="transfer_to_refunds")
        .build()
    )
    await run_turn(workflow, "hi", stream=stream)
    tools = {t.name: t for t in client_of(a).calls[0].options["tools"]}
    assert set(tools) == {"handoff_to_described", "handoff_to_plain", "transfer_to_refunds"}
    assert tools["handoff_to_described"].description == "Charges and invoices"
    assert tools["handoff_to_plain"].description == "plain"
    assert tools["transfer_to_refunds"].description == "Refunds only"
    schema = tools["handoff_to_plain"].parameters()
    assert schema["required"] == ["goal"]
    assert schema["properties"]["goal"]["type"] == "string"


async def test_default_mesh_gives_every_agent_a_tool_to_every_other(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("c", goal="to c"))
    b = scripted_agent("b")
    c = scripted_agent("c", reply("c here"))
    workflow = HandoffWorkflowBuilder(a).add_participants(b, c).build()
    turn = await run_turn(workflow, "hi", stream=stream)
    assert client_of(a).calls[0].tool_names == ("handoff_to_b", "handoff_to_c")
    assert client_of(c).calls[0].tool_names == ("handoff_to_a", "handoff_to_b")
    assert turn.result.text == "c here"


async def test_one_explicit_edge_disables_the_default_mesh(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("b"))
    b = scripted_agent("b", reply("b here"))
    c = scripted_agent("c")
    workflow = HandoffWorkflowBuilder(a).add_participants(b, c).with_handoff(a, b).build()
    await run_turn(workflow, "hi", stream=stream)
    assert client_of(a).calls[0].tool_names == ("handoff_to_b",)
    assert client_of(b).calls[0].tool_names == ()


async def test_sanitised_tool_names(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("Billing Desk!", goal="g"))
    target = scripted_agent("Billing Desk!", reply("ok"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, target).build()
    turn = await run_turn(workflow, "hi", stream=stream)
    assert client_of(a).calls[0].tool_names == ("handoff_to_Billing_Desk_",)
    assert turn.result.active_agent == "Billing Desk!"


async def test_history_is_shared_and_next_message_starts_at_initial_agent(stream: bool) -> None:
    triage = scripted_agent(
        "triage", handoff_to("billing", goal="Invoice."), reply("Anything else?")
    )
    billing = scripted_agent("billing", reply("Invoice sent."))
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()
    await run_turn(workflow, "send my invoice", stream=stream)
    second = await run_turn(workflow, "thanks", stream=stream)
    assert second.result.text == "Anything else?"
    seen = client_of(triage).calls[1].texts
    assert seen[0] == "send my invoice"
    assert "Invoice sent." in seen
    assert seen[-1] == "thanks"
    assert len(second.result.conversation) == 6


async def test_agents_own_function_middleware_still_runs(stream: bool) -> None:
    seen: list[str] = []

    @function_middleware
    async def audit(
        context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        seen.append(context.function.name)
        await call_next()

    @tool(name="lookup", description="Look something up.")
    def lookup() -> str:
        return "found"

    triage = Agent(
        client=ScriptedChatClient(
            call_tool("lookup"), handoff_to("billing", goal="g"), name="triage"
        ),
        name="triage",
        tools=[lookup],
        middleware=[audit],
    )
    billing = scripted_agent("billing", reply("ok"))
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()
    turn = await run_turn(workflow, "hi", stream=stream)
    assert turn.result.text == "ok"
    # The agent's own middleware sees its own tool and, being outermost, the handoff call too.
    assert seen == ["lookup", "handoff_to_billing"]
