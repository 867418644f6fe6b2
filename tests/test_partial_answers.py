"""A hosted turn that waits for two requests, answered one call at a time.

The first answer is stored with the conversation: the turn still waits (for the other request
alone), a new host over the same store knows the answer, and the second answer carries the turn
on with both. Over every store.
"""

from __future__ import annotations

import pytest
from agent_framework import Agent, Content, FunctionTool, tool

from handoff_builder import (
    ConversationHost,
    HandoffWorkflowBuilder,
    PendingRequestsError,
    UnexpectedAnswersError,
    decline,
)
from handoff_builder.stores import ConversationStore
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    received,
    reply,
    respond,
    scripted_agent,
)


def approval_tools(ran: list[str]) -> list[FunctionTool]:
    @tool(name="refund", description="Refund an order.", approval_mode="always_require")
    def refund(order: str) -> str:
        ran.append(f"refund {order}")
        return f"refunded {order}"

    @tool(name="cancel", description="Cancel an order.", approval_mode="always_require")
    def cancel(order: str) -> str:
        ran.append(f"cancel {order}")
        return f"cancelled {order}"

    return [refund, cancel]


def one_agent_two_approvals(ran: list[str]) -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """``billing`` calls two tools that need approval in one response."""
    billing = scripted_agent(
        "billing",
        respond(call_tool("refund", order="A-1"), call_tool("cancel", order="B-2")),
        reply("Done what you allowed."),
        tools=approval_tools(ran),
    )
    return HandoffWorkflowBuilder(billing), {"billing": billing}


def two_experts_waiting(ran: list[str]) -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """``triage`` asks two experts in one response; each expert's own tool needs approval."""
    triage = scripted_agent(
        "triage",
        respond(call_tool("ask_policy", task="P?"), call_tool("ask_legal", task="L?")),
        reply("Both experts answered."),
    )
    refund, cancel = approval_tools(ran)
    policy = scripted_agent(
        "policy", call_tool("refund", order="P-1"), reply("Policy: ok."), tools=[refund]
    )
    legal = scripted_agent(
        "legal", call_tool("cancel", order="L-1"), reply("Legal: ok."), tools=[cancel]
    )
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "policy")
        .with_delegate(triage, legal, "legal")
    )
    return builder, {"triage": triage, "policy": policy, "legal": legal}


def calls(agents: dict[str, Agent]) -> dict[str, int]:
    return {name: len(client_of(agent).calls) for name, agent in agents.items()}


def tool_results(agent: Agent) -> list[str]:
    """The function results ``agent``'s last model call read, in order."""
    return [
        str(c.result)
        for m in received(agent).messages
        for c in m.contents
        if c.type == "function_result"
    ]


@pytest.mark.parametrize("then", ["same_host", "new_host"])
async def test_one_agent_two_approvals_answered_one_at_a_time(
    store: ConversationStore, then: str
) -> None:
    ran: list[str] = []
    builder, agents = one_agent_two_approvals(ran)
    host = ConversationHost(builder, store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c-1", "Refund A-1 and cancel B-2.")
    refund, cancel = waiting.value.requests
    assert [r.function_call.name for r in (refund, cancel)] == ["refund", "cancel"]

    with pytest.raises(PendingRequestsError) as still:
        await host.respond("c-1", {str(cancel.id): decline(cancel, "keep B-2")})
    assert [str(r.id) for r in still.value.requests] == [str(refund.id)]
    assert [str(r.id) for r in await host.pending("c-1")] == [str(refund.id)]
    assert calls(agents) == {"billing": 1}
    assert ran == []

    if then == "new_host":  # a restart: nothing but the store
        host = ConversationHost(builder, store)
        assert [str(r.id) for r in await host.pending("c-1")] == [str(refund.id)]
    with pytest.raises(UnexpectedAnswersError) as again:  # answered already: not pending
        await host.respond("c-1", {str(cancel.id): cancel.to_function_approval_response(True)})
    assert again.value.unknown == (str(cancel.id),)
    assert again.value.waiting == (str(refund.id),)
    assert str(cancel.id) in str(again.value)

    result = await host.respond(
        "c-1", {str(refund.id): refund.to_function_approval_response(approved=True)}
    )
    assert result.text == "Done what you allowed."
    assert ran == ["refund A-1"]  # the stored "no" held: cancel never ran
    assert calls(agents) == {"billing": 2}
    assert tool_results(agents["billing"]) == [
        "refunded A-1",
        "Error: the user did not approve this call, so it was not made.",
    ]
    assert await host.pending("c-1") == []


@pytest.mark.parametrize("then", ["same_host", "new_host"])
async def test_two_experts_waiting_answered_one_at_a_time(
    store: ConversationStore, then: str
) -> None:
    ran: list[str] = []
    builder, agents = two_experts_waiting(ran)
    host = ConversationHost(builder, store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c-1", "go")
    by_tool = {str(r.function_call.name): r for r in waiting.value.requests}
    assert sorted(by_tool) == ["cancel", "refund"]
    first, second = by_tool["cancel"], by_tool["refund"]  # the later expert's first

    with pytest.raises(PendingRequestsError) as still:
        await host.respond("c-1", {str(first.id): first.to_function_approval_response(True)})
    assert [str(r.id) for r in still.value.requests] == [str(second.id)]
    assert calls(agents) == {"triage": 1, "policy": 1, "legal": 1}
    assert ran == []

    if then == "new_host":
        host = ConversationHost(builder, store)
    result = await host.respond(
        "c-1", {str(second.id): second.to_function_approval_response(approved=True)}
    )
    assert result.text == "Both experts answered."
    assert sorted(ran) == ["cancel L-1", "refund P-1"]
    assert calls(agents) == {"triage": 2, "policy": 2, "legal": 2}
    assert tool_results(agents["triage"]) == ["Policy: ok.", "Legal: ok."]
    assert sorted((d.tool_name, d.outcome) for d in result.delegations) == [
        ("ask_legal", "answered"),
        ("ask_policy", "answered"),
    ]


async def test_an_answer_to_no_pending_request_is_refused_by_name(
    store: ConversationStore,
) -> None:
    ran: list[str] = []
    builder, agents = one_agent_two_approvals(ran)
    host = ConversationHost(builder, store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c-1", "Refund A-1 and cancel B-2.")
    refund, _ = waiting.value.requests
    answer = Content.from_function_approval_response(
        approved=True, id="no-such-request", function_call=refund.function_call
    )
    with pytest.raises(UnexpectedAnswersError, match="'no-such-request'") as refused:
        await host.respond("c-1", {"no-such-request": answer})
    assert refused.value.unknown == ("no-such-request",)
    assert len(await host.pending("c-1")) == 2
    assert calls(agents) == {"billing": 1}


async def test_a_repeated_partial_answer_with_its_key_still_waits(store: ConversationStore) -> None:
    """The same call again (a client retrying): the turn still waits for the other request."""
    ran: list[str] = []
    builder, agents = one_agent_two_approvals(ran)
    host = ConversationHost(builder, store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c-1", "Refund A-1 and cancel B-2.")
    refund, cancel = waiting.value.requests
    answers = {str(refund.id): refund.to_function_approval_response(approved=True)}
    for _ in range(2):
        with pytest.raises(PendingRequestsError) as still:
            await host.respond("c-1", answers, idempotency_key="answer-1")
        assert [str(r.id) for r in still.value.requests] == [str(cancel.id)]
    result = await host.respond(
        "c-1", {str(cancel.id): cancel.to_function_approval_response(approved=True)}
    )
    assert result.text == "Done what you allowed."
    assert ran == ["refund A-1", "cancel B-2"]
    assert calls(agents) == {"billing": 2}


def model_down(call: ModelCall) -> Step:
    del call
    raise RuntimeError("model down")


async def test_a_failed_model_call_after_the_last_answer_is_retried(
    store: ConversationStore,
) -> None:
    """The answers are carried out and stored; the agent's model call fails: the turn is an
    interrupted one, finished by ``resume`` with both answers (no request waits again)."""
    ran: list[str] = []
    billing = scripted_agent(
        "billing",
        respond(call_tool("refund", order="A-1"), call_tool("cancel", order="B-2")),
        model_down,
        reply("Done."),
        tools=approval_tools(ran),
    )
    host = ConversationHost(HandoffWorkflowBuilder(billing), store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c-1", "Refund A-1 and cancel B-2.")
    refund, cancel = waiting.value.requests
    with pytest.raises(PendingRequestsError):
        await host.respond("c-1", {str(refund.id): decline(refund)})
    with pytest.raises(RuntimeError, match="model down"):
        await host.respond("c-1", {str(cancel.id): cancel.to_function_approval_response(True)})
    assert await host.pending("c-1") == []

    result = await ConversationHost(HandoffWorkflowBuilder(billing), store).resume("c-1")
    assert result is not None
    assert result.text == "Done."
    assert ran == ["cancel B-2"]
    assert len(client_of(billing).calls) == 3
    assert tool_results(billing) == [
        "Error: the user did not approve this call, so it was not made.",
        "cancelled B-2",
    ]
