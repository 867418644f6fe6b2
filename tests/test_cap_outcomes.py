"""Cap outcomes: escalate (the default), return to the user, or force a safe agent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_framework import Agent, tool

from handoff_builder import (
    HANDOFF_LIMIT_EVENT,
    HANDOFF_TURN_EVENT,
    CapOutcome,
    ConversationHost,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    LimitReachedEvent,
    PendingRequestsError,
    RoutingStep,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import (
    call_tool,
    client_of,
    handoff_to,
    never_answer,
    received,
    reply,
    respond,
    scripted_agent,
)
from tests.helpers import until_called


def ping_pong() -> tuple[HandoffWorkflowBuilder, Agent, Agent]:
    a = scripted_agent("a", handoff_to("b", goal="One."), reply("a answers"))
    b = scripted_agent("b", handoff_to("a", goal="Two."), reply("b answers"))
    return HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a), a, b


def results_of(result: HandoffTurnResult) -> str:
    """Every tool result of the conversation, as text."""
    return "\n".join(
        str(content.result)
        for message in result.conversation
        for content in message.contents
        if content.type == "function_result"
    )


async def outcome_of(builder: HandoffWorkflowBuilder, message: str = "go") -> HandoffTurnResult:
    return (await builder.build().run(message)).get_outputs()[-1]


async def test_the_default_is_still_an_escalation() -> None:
    builder, _, _ = ping_pong()
    result = await outcome_of(builder.with_max_handoffs_per_turn(1))
    assert (result.status, result.escalated) == ("handoff_cap", True)


async def test_return_to_user_ends_the_turn_with_the_last_reply_and_no_apology() -> None:
    builder, _, b = ping_pong()
    builder.with_max_handoffs_per_turn(1, outcome=CapOutcome.RETURN_TO_USER)
    events = [e async for e in builder.build().run("go", stream=True)]
    [result] = [e.data for e in events if e.type == HANDOFF_TURN_EVENT]
    assert (result.status, result.escalated, result.active_agent) == ("handoff_cap", False, "b")
    assert "human colleague" not in result.text  # no apology
    [limit] = [e.data for e in events if e.type == HANDOFF_LIMIT_EVENT]
    assert limit == LimitReachedEvent("handoff_cap", "b", 1)
    # b's call tripped the cap and ended its run: b answers once more, without handoff tools
    assert result.messages[-1].text == "b answers"
    assert result.trace[-2:] == (
        RoutingStep("route", "code", "handoff_cap", "b", "b", 1, 1),
        RoutingStep("end", "code", "safe_agent", "b"),
    )
    assert client_of(b).calls[-1].tool_names == ()
    assert "Answer the user yourself now." in results_of(result)


async def test_return_to_user_after_a_reply_keeps_that_reply() -> None:
    worker = scripted_agent("worker", respond_with=lambda call: reply("more"))
    builder = HandoffWorkflowBuilder(worker).with_autonomous_mode(turn_limit=10)
    result = await outcome_of(builder.with_max_iterations(2, outcome=CapOutcome.RETURN_TO_USER))
    assert (result.status, result.escalated, result.messages[-1].text) == (
        "max_iterations",
        False,
        "more",
    )
    assert result.trace[-1] == RoutingStep("limit", "code", "max_iterations", "worker", None, 2, 2)


async def test_a_safe_agent_runs_once_with_no_handoff_tools_and_answers() -> None:
    @tool
    def runbook(topic: str) -> str:
        """Look up the safe runbook."""
        return f"runbook for {topic}"

    builder, a, b = ping_pong()
    safe = scripted_agent("safe", reply("Here is what I can safely say."), tools=[runbook])
    builder.with_handoff(safe, a)  # it has a handoff tool of its own, which it is not given
    builder.with_max_handoffs_per_turn(1, outcome=safe)
    result = await outcome_of(builder)
    assert (result.status, result.escalated, result.active_agent) == ("handoff_cap", False, "safe")
    assert result.messages[-1].text == "Here is what I can safely say."
    [call] = client_of(safe).calls
    assert call.tool_names == ("runbook",)  # its own tools, no handoff tool
    assert result.trace[-2:] == (
        RoutingStep("route", "code", "handoff_cap", "b", "safe", 1, 1),
        RoutingStep("end", "code", "safe_agent", "safe"),
    )
    assert "The conversation goes to safe." in results_of(result)
    assert received(safe).rendered.splitlines()[-1] == (  # the safe agent is told why it runs
        "user[handoff_host]: The conversation was passed to you (safe) because the limit of 1 "
        "handoffs for this user message was reached. Answer the user yourself in this reply: you "
        "cannot hand off now."
    )
    assert all("passed to you" not in m.text for m in result.messages)  # not for the user
    del b


async def test_a_blocked_handoff_forces_the_safe_agent_and_the_run_still_answers() -> None:
    """The seed's supervisor names a node outside the allowlist: blocked, forced to safety."""
    supervisor = scripted_agent(
        "supervisor", call_tool("handoff_to_delete_database", goal="Clean up."), reply("done")
    )
    investigator, safe = scripted_agent("investigator"), scripted_agent("safe", reply("Safe plan."))
    builder = HandoffWorkflowBuilder(supervisor).with_handoff(supervisor, investigator)
    builder.with_blocked_handoff_outcome(safe)
    result = await outcome_of(builder, "the cache is full")
    assert (result.status, result.active_agent) == ("blocked_handoff", "safe")
    assert result.messages[-1].text == "Safe plan."
    assert [(s.kind, s.decided_by, s.by) for s in result.trace] == [
        ("start", "code", "initial_agent"),
        ("blocked", "code", "unknown_target"),
        ("route", "code", "blocked_handoff"),
        ("end", "code", "safe_agent"),
    ]
    assert client_of(investigator).calls == []
    assert client_of(safe).calls[0].tool_names == ()


async def test_a_blocked_handoff_may_escalate() -> None:
    supervisor = scripted_agent(
        "supervisor", call_tool("handoff_to_nowhere", goal="x"), reply("ok")
    )
    other = scripted_agent("other")
    builder = HandoffWorkflowBuilder(supervisor).with_handoff(supervisor, other)
    result = await outcome_of(builder.with_blocked_handoff_outcome(CapOutcome.ESCALATE))
    assert result.escalation is not None
    assert (result.status, result.escalation.reason) == ("blocked_handoff", "blocked_handoff")


async def test_max_iterations_and_rejected_handoffs_take_outcomes_too() -> None:
    worker = scripted_agent("worker", respond_with=lambda call: reply("more"))
    builder = HandoffWorkflowBuilder(worker).with_autonomous_mode(turn_limit=10)
    builder.with_max_iterations(3, outcome=CapOutcome.RETURN_TO_USER)
    result = await outcome_of(builder)
    assert (result.status, result.escalated) == ("max_iterations", False)
    assert result.trace[-1].by == "max_iterations"

    keeps = scripted_agent("keeps", respond_with=lambda call: handoff_to("other", goal=""))
    other, safe = scripted_agent("other"), scripted_agent("safe", reply("I'll take it."))
    builder = HandoffWorkflowBuilder(keeps).with_handoff(keeps, other)
    builder.with_max_rejected_handoffs(1, outcome=safe)
    result = await outcome_of(builder)
    assert (result.status, result.active_agent, result.text.endswith("I'll take it.")) == (
        "rejected_handoffs",
        "safe",
        True,
    )


def why_safe(safe: Agent) -> str:
    """Why the safe agent was told it has the conversation (its note, without the frame)."""
    note = received(safe).rendered.splitlines()[-1]
    prefix = "user[handoff_host]: The conversation was passed to you (safe) because "
    suffix = ". Answer the user yourself in this reply: you cannot hand off now."
    assert note.startswith(prefix)
    assert note.endswith(suffix)
    return note[len(prefix) : -len(suffix)]


async def test_each_cap_tells_its_safe_agent_why_in_its_own_words() -> None:
    """Each cap's reason, its limit, and the routing step with the limit and the count."""
    worker = scripted_agent("worker", respond_with=lambda call: reply("more"))
    safe = scripted_agent("safe", reply("Enough."))
    builder = HandoffWorkflowBuilder(worker).with_autonomous_mode(turn_limit=10)
    result = await outcome_of(builder.with_max_iterations(3, outcome=safe))
    assert why_safe(safe) == "this user message used all 3 agent invocations it is allowed"
    step = RoutingStep("route", "code", "max_iterations", "worker", "safe", 3, 3)
    assert result.trace[-2] == step

    keeps = scripted_agent("keeps", respond_with=lambda call: handoff_to("other", goal=""))
    safe = scripted_agent("safe", reply("Enough."))
    builder = HandoffWorkflowBuilder(keeps).with_handoff(keeps, scripted_agent("other"))
    result = await outcome_of(builder.with_max_rejected_handoffs(2, outcome=safe))
    assert why_safe(safe) == "2 handoff attempts were refused for this user message"
    assert result.trace[-2] == RoutingStep(
        "route", "code", "rejected_handoffs", "keeps", "safe", 2, 3
    )

    supervisor = scripted_agent("sup", call_tool("handoff_to_nowhere", goal="x"), reply("ok"))
    safe = scripted_agent("safe", reply("Enough."))
    builder = HandoffWorkflowBuilder(supervisor).with_handoff(supervisor, scripted_agent("inv"))
    result = await outcome_of(builder.with_blocked_handoff_outcome(safe))
    assert why_safe(safe) == "a handoff was refused"
    assert result.trace[-2] == RoutingStep("route", "code", "blocked_handoff", "sup", "safe")


async def test_a_hosted_safe_agent_interrupted_resumes_with_no_handoff_tools() -> None:
    store = InMemoryConversationStore()
    builder, _, _ = ping_pong()
    safe = scripted_agent("safe", never_answer())
    builder.with_max_handoffs_per_turn(1, outcome=safe)
    sending = asyncio.ensure_future(ConversationHost(builder, store).send("c", "go"))
    await until_called(safe)  # it never answers
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    record = await store.load("c")
    assert record is not None
    assert (record.state["host"]["next"], record.state["host"]["next_closed"]) == ("safe", True)

    again, _, _ = ping_pong()
    safe_again = scripted_agent("safe", reply("Back, safely."))
    again.add_participants(safe_again).with_max_handoffs_per_turn(1, outcome=safe_again)
    result = await ConversationHost(again, store).resume("c")
    assert result is not None
    assert (result.status, result.messages[-1].text) == ("handoff_cap", "Back, safely.")
    assert client_of(safe_again).calls[0].tool_names == ()


def test_an_outcome_must_be_a_cap_outcome_or_an_agent() -> None:
    builder, _, _ = ping_pong()
    with pytest.raises(TypeError, match="outcome must be a CapOutcome or an agent"):
        builder.with_max_iterations(3, outcome="escalate")  # pyright: ignore[reportArgumentType]


async def test_a_safe_agent_waiting_for_an_approval_carries_on_without_handoff_tools() -> None:
    @tool(approval_mode="always_require")
    def page_on_call(team: str) -> str:
        """Page a team."""
        return f"paged {team}"

    builder, a, _ = ping_pong()
    safe = scripted_agent(
        "safe", call_tool("page_on_call", team="sre"), reply("Paged SRE."), tools=[page_on_call]
    )
    builder.with_handoff(safe, a).with_max_handoffs_per_turn(1, outcome=safe)
    workflow = builder.build()
    first = list(await workflow.run("go"))
    [request] = [e for e in first if e.type == "request_info"]
    answer = request.data.to_function_approval_response(approved=True)
    second = list(await workflow.run(responses={request.request_id: answer}))
    [result] = [e.data for e in second if e.type == HANDOFF_TURN_EVENT]
    assert (result.status, result.messages[-1].text) == ("handoff_cap", "Paged SRE.")
    assert [call.tool_names for call in client_of(safe).calls] == [
        ("page_on_call",),
        ("page_on_call",),
    ]  # never its handoff tool, before or after the approval


@tool(approval_mode="always_require")
def page_on_call(team: str) -> str:
    """Page a team."""
    return f"paged {team}"


async def answer_all(workflow: Any, events: list[Any]) -> HandoffTurnResult:
    requests = [e for e in events if e.type == "request_info"]
    answers = {r.request_id: r.data.to_function_approval_response(approved=True) for r in requests}
    later = list(await workflow.run(responses=answers))
    [result] = [e.data for e in later if e.type == HANDOFF_TURN_EVENT]
    return result


async def test_a_safe_agent_cannot_hand_off_even_with_a_call_approved_beside_its_tool() -> None:
    supervisor = scripted_agent("sup", call_tool("handoff_to_nowhere", goal="x"), reply("done"))
    elsewhere = scripted_agent("elsewhere", reply("escaped"))
    safe = scripted_agent(
        "safe",
        respond(call_tool("page_on_call", team="sre"), handoff_to("elsewhere", goal="escape")),
        reply("Safe after all."),
        tools=[page_on_call],
    )
    builder = HandoffWorkflowBuilder(supervisor).with_handoff(supervisor, scripted_agent("inv"))
    builder.with_handoff(safe, elsewhere).with_blocked_handoff_outcome(safe)
    workflow = builder.build()
    result = await answer_all(workflow, list(await workflow.run("go")))
    assert (result.status, result.active_agent) == ("blocked_handoff", "safe")
    assert client_of(elsewhere).calls == []


async def test_a_blocked_handoff_beside_an_approval_still_takes_its_outcome() -> None:
    supervisor = scripted_agent(
        "sup",
        respond(call_tool("page_on_call", team="sre"), call_tool("handoff_to_nowhere", goal="x")),
        reply("sup carries on"),
        tools=[page_on_call],
    )
    safe = scripted_agent("safe", reply("safe plan"))
    builder = HandoffWorkflowBuilder(supervisor).with_handoff(supervisor, scripted_agent("inv"))
    workflow = builder.with_blocked_handoff_outcome(safe).build()
    result = await answer_all(workflow, list(await workflow.run("go")))
    assert (result.status, result.active_agent, result.messages[-1].text) == (
        "blocked_handoff",
        "safe",
        "safe plan",
    )


@pytest.mark.parametrize("hosted", [False, True], ids=["in-process", "hosted"])
async def test_what_a_blocked_run_leaves_out_does_not_depend_on_a_restart(hosted: bool) -> None:
    """The blocked handoff is decided once an approval is answered: in the same process, or in
    a fresh host (as ConversationHost.respond always is); the reply is the same."""

    def build() -> HandoffWorkflowBuilder:
        triage = scripted_agent(
            "triage",
            respond("I'm passing you to billing.", handoff_to("billing", goal="Refund.")),
        )
        billing = scripted_agent("billing", handoff_to("supervisor", goal="A big refund."))
        supervisor = scripted_agent("supervisor")
        safe = scripted_agent("safe", reply("A colleague will follow up."))
        return (
            HandoffWorkflowBuilder(triage)
            .with_handoff(triage, billing)
            .with_handoff(billing, supervisor, approval=True, on_handoff=lambda c: "vetoed")
            .with_blocked_handoff_outcome(safe)
        )

    if hosted:
        store = InMemoryConversationStore()
        with pytest.raises(PendingRequestsError) as waiting:
            await ConversationHost(build(), store).send("c", "refund please")
        [request] = waiting.value.requests
        answers = {str(request.id): request.to_function_approval_response(approved=True)}
        result = await ConversationHost(build(), store).respond("c", answers)
    else:
        workflow = build().build()
        [event] = (await workflow.run("refund please")).get_request_info_events()
        answer = event.data.to_function_approval_response(approved=True)
        result = (await workflow.run(responses={event.request_id: answer})).get_outputs()[-1]
    assert result.status == "blocked_handoff"
    assert [m.text for m in result.messages if m.text] == [
        "I'm passing you to billing.",
        "A colleague will follow up.",
    ]


async def test_an_approved_handoff_does_not_undo_a_safe_agent_already_decided() -> None:
    """A blocked handoff forced the safe agent while another call waited for approval: once it
    is approved, a handoff call of the same response is not performed."""
    paid: list[str] = []

    @tool(name="lookup_order", description="Look an order up.", approval_mode="always_require")
    def lookup_order(order: str) -> str:
        paid.append(order)
        return f"order {order}: paid"

    a = scripted_agent(
        "a",
        respond(
            call_tool("lookup_order", order="A"),
            handoff_to("nowhere"),
            handoff_to("b", goal="Go."),
        ),
        tools=[lookup_order],
    )
    b = scripted_agent("b")
    safe = scripted_agent("safe", reply("A colleague will follow up."))
    workflow = (
        HandoffWorkflowBuilder(a).with_handoff(a, b).with_blocked_handoff_outcome(safe).build()
    )
    first = await workflow.run("hi")
    answers = {
        r.request_id: r.data.to_function_approval_response(approved=True)
        for r in first.get_request_info_events()
    }
    result = (await workflow.run(responses=answers)).get_outputs()[-1]
    assert isinstance(result, HandoffTurnResult)
    assert result.status == "blocked_handoff"
    assert result.handoffs == ()
    assert client_of(b).calls == []
    assert result.text == "A colleague will follow up."
    results = [str(c.result) for m in result.conversation for c in m.contents if c.result]
    assert any(r.startswith("Not performed: only one handoff per response") for r in results)
