"""Two experts of one response that both wait for a person, at once.

A caller's response asks several experts; two of them wait for a person (a delegate that
needs approval, an expert's own tool that does). The turn waits for both requests; once both
are answered (together, or one after the other) each expert carries on, and the caller reads
every answer in call order, with the answer of the expert that did not wait, asked once.
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import Agent, Content, FunctionTool, Workflow, WorkflowEvent, tool

from handoff_builder import (
    HANDOFF_TURN_EVENT,
    ConversationHost,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    PendingRequestsError,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import call_tool, client_of, received, reply, respond, scripted_agent

Events = list[WorkflowEvent[Any]]


def requests_of(events: Events) -> list[WorkflowEvent[Any]]:
    return [event for event in events if event.type == "request_info"]


def results_of(events: Events) -> list[HandoffTurnResult]:
    return [e.data for e in events if e.type == HANDOFF_TURN_EVENT]


def approval_tool(ran: list[str]) -> FunctionTool:
    @tool(name="lookup_order", description="Look an order up.", approval_mode="always_require")
    def lookup_order(order: str) -> str:
        ran.append(order)
        return f"order {order}: paid"

    return lookup_order


def desk() -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """triage asks three experts in one response: two need approval, ``facts`` does not."""
    triage = scripted_agent(
        "triage",
        respond(
            call_tool("ask_policy", task="P?"),
            call_tool("ask_legal", task="L?"),
            call_tool("ask_facts", task="F?"),
        ),
        reply("All answered."),
    )
    agents = {
        "triage": triage,
        "policy": scripted_agent("policy", reply("P.")),
        "legal": scripted_agent("legal", reply("L.")),
        "facts": scripted_agent("facts", reply("F.")),
    }
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, agents["policy"], "policy", approval=True)
        .with_delegate(triage, agents["legal"], "legal", approval=True)
        .with_delegate(triage, agents["facts"], "facts")
    )
    return builder, agents


def results_read(caller: Agent) -> list[tuple[str, str]]:
    """The tool results the caller's last model call read: (tool name, result), in order."""
    messages = list(received(caller).messages)
    names = {
        str(c.call_id): str(c.name)
        for m in messages
        for c in m.contents
        if c.type == "function_call"
    }
    return [
        (names[str(c.call_id)], str(c.result))
        for m in messages
        for c in m.contents
        if c.type == "function_result"
    ]


def approve(request: WorkflowEvent[Any]) -> dict[str, Content]:
    return {request.request_id: request.data.to_function_approval_response(approved=True)}


@pytest.mark.parametrize("how", ["together", "one_then_the_other"])
async def test_two_delegate_calls_that_need_approval_both_wait(how: str) -> None:
    builder, agents = desk()
    workflow: Workflow = builder.build()
    first = list(await workflow.run("go"))

    waiting = requests_of(first)
    assert [r.data.function_call.name for r in waiting] == ["ask_policy", "ask_legal"]
    assert results_of(first) == []
    assert len(client_of(agents["facts"]).calls) == 1  # answered, while the others wait
    if how == "together":
        last = list(await workflow.run(responses={**approve(waiting[0]), **approve(waiting[1])}))
    else:
        between = list(await workflow.run(responses=approve(waiting[1])))
        assert results_of(between) == []  # the turn goes on only when both are answered
        assert len(client_of(agents["triage"]).calls) == 1
        last = list(await workflow.run(responses=approve(waiting[0])))

    [result] = results_of(last)
    assert result.text == "All answered."
    assert sorted((d.tool_name, d.outcome, d.result) for d in result.delegations) == [
        ("ask_facts", "answered", "F."),
        ("ask_legal", "answered", "L."),
        ("ask_policy", "answered", "P."),
    ]
    assert results_read(agents["triage"]) == [
        ("ask_policy", "P."),
        ("ask_legal", "L."),
        ("ask_facts", "F."),
    ]
    calls = {name: len(client_of(agent).calls) for name, agent in agents.items()}
    assert calls == {"triage": 2, "policy": 1, "legal": 1, "facts": 1}


async def test_two_experts_whose_own_tools_need_approval_both_wait_and_carry_on() -> None:
    """A hosted turn: both experts' requests are the PendingRequestsError's; answered in one
    ``respond``, each expert carries on (its tool runs) and the caller reads both answers."""
    ran: list[str] = []
    triage = scripted_agent(
        "triage",
        respond(call_tool("ask_policy", task="P?"), call_tool("ask_legal", task="L?")),
        reply("Both answered."),
    )
    policy = scripted_agent(
        "policy",
        call_tool("lookup_order", order="P-1"),
        reply("P checked."),
        tools=[approval_tool(ran)],
    )
    legal = scripted_agent(
        "legal",
        call_tool("lookup_order", order="L-1"),
        reply("L checked."),
        tools=[approval_tool(ran)],
    )
    store = InMemoryConversationStore()
    host = ConversationHost(
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "policy")
        .with_delegate(triage, legal, "legal"),
        store,
    )
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c-1", "go")
    both = waiting.value.requests
    assert sorted(str(r.function_call.arguments) for r in both if r.function_call) == [
        '{"order": "L-1"}',
        '{"order": "P-1"}',
    ]
    answers = {str(r.id): r.to_function_approval_response(approved=True) for r in both}
    result = await host.respond("c-1", answers)

    assert result.text == "Both answered."
    assert sorted(ran) == ["L-1", "P-1"]
    assert results_read(triage) == [("ask_policy", "P checked."), ("ask_legal", "L checked.")]
    calls = [len(client_of(a).calls) for a in (triage, policy, legal)]
    assert calls == [2, 2, 2]
    assert sorted((d.tool_name, d.outcome) for d in result.delegations) == [
        ("ask_legal", "answered"),
        ("ask_policy", "answered"),
    ]
