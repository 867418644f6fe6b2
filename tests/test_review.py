"""Bounded review (with_review): approve, request changes with feedback, escalate with evidence.

Includes the seed's case: a reviewer rejects an unsafe broad cache flush twice, the retry cap is
reached and the turn escalates with the evidence and the open concerns; a supervisor that names a
node outside the allowlist is blocked, forced to the safe node, and still answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from agent_framework import (
    Agent,
    Content,
    FunctionTool,
    Message,
    Workflow,
    WorkflowRunResult,
    tool,
)
from typing_extensions import override

from handoff_builder import (
    DEFAULT_REVIEW_ESCALATION_MESSAGE,
    AgentReply,
    CapOutcome,
    ConversationHost,
    Decision,
    EndTurn,
    GroupChatManager,
    HandoffConfigurationError,
    HandoffManager,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    NextAgent,
    PendingRequestsError,
    RoutingStep,
    TurnStart,
)
from handoff_builder.stores import ConversationStore, InMemoryConversationStore
from handoff_builder.testing import (
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    respond,
    scripted_agent,
    slow,
)

UNSAFE = "Plan: flush the whole cache on every node."
STILL_UNSAFE = "Plan: flush all cache keys now, cluster-wide."
SAFE = "Plan: expire only the keys under catalog:v7:* and watch the hit rate."
BROAD = "A cluster-wide flush takes the database down under load; scope it to the stale keys."
NO_ROLLBACK = "Still a broad flush, and there is no rollback or monitoring step."


async def run(builder: HandoffWorkflowBuilder, text: str) -> HandoffTurnResult:
    result = (await builder.build().run(text)).get_outputs()[-1]
    assert isinstance(result, HandoffTurnResult)
    return result


def texts(result: HandoffTurnResult) -> list[str]:
    return [m.text for m in result.messages if m.text]


def steps(result: HandoffTurnResult) -> list[tuple[str, str, str]]:
    return [(s.kind, s.decided_by, s.by) for s in result.trace]


async def test_approval_ends_the_turn_with_the_producers_reply() -> None:
    planner = scripted_agent("planner", reply(SAFE))
    reviewer = scripted_agent("reviewer", call_tool("approve", note="Scoped and reversible."))
    result = await run(HandoffWorkflowBuilder(planner).with_review(planner, reviewer), "fix it")

    assert result.status == "completed"
    assert texts(result) == [SAFE]  # the review itself is not part of the reply
    assert all(m.author_name != "reviewer" for m in result.messages)
    assert any(m.author_name == "reviewer" for m in result.conversation)  # but it happened
    assert steps(result) == [
        ("start", "code", "initial_agent"),
        ("review", "code", "review"),
        ("end", "model", "approve"),
    ]
    # The reviewer's model read the reply it reviews, and was told what to do with its tools.
    seen = received(reviewer)
    assert seen.sees(SAFE)
    assert seen.sees("review the reply of planner above")
    assert seen.sees("(round 1 of 2)")
    assert {"approve", "request_changes"} <= set(seen.tool_names)


async def test_changes_go_back_to_the_producer_with_the_feedback() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(SAFE))
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback=BROAD),
        call_tool("approve", note="Now scoped."),
    )
    result = await run(HandoffWorkflowBuilder(planner).with_review(planner, reviewer), "fix it")

    assert result.status == "completed"
    assert texts(result) == [SAFE]  # the draft sent back is not in the reply
    assert any(m.text == UNSAFE for m in result.conversation)  # it stays in the conversation
    rework = received(planner)  # the second call: it read the feedback verbatim
    assert rework.sees(f"reviewer asked planner for changes (round 1 of 2): {BROAD}")
    assert result.trace[2] == RoutingStep("review", "model", "request_changes", "reviewer",
                                          "planner", 2, 1)  # fmt: skip
    assert [s.kind for s in result.trace] == ["start", "review", "review", "review", "end"]


async def test_seed_unsafe_flush_rejected_twice_escalates_with_the_evidence() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(STILL_UNSAFE))
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback=BROAD),
        call_tool("request_changes", feedback=NO_ROLLBACK),
    )
    builder = HandoffWorkflowBuilder(planner).with_review(planner, reviewer, max_rounds=2)
    result = await run(builder, "The catalog cache is stale, fix it.")

    assert result.status == "review_rounds"
    escalation = result.escalation
    assert escalation is not None
    assert escalation.reason == "review_rounds"
    assert escalation.limit == 2
    assert escalation.evidence == (BROAD, NO_ROLLBACK)  # every round's feedback, in order
    assert escalation.goal == NO_ROLLBACK  # the concerns still open
    assert escalation.requested_target == "planner"
    # Neither unsafe plan reaches the user: only the apology does.
    assert UNSAFE not in result.text
    assert STILL_UNSAFE not in result.text
    assert [m.author_name for m in result.messages] == ["handoff_host"]
    assert result.trace[-1] == RoutingStep("escalate", "code", "review_rounds", "reviewer",
                                           None, 2, 2)  # fmt: skip
    client_of(planner).assert_complete()
    client_of(reviewer).assert_complete()


async def test_seed_supervisor_naming_a_node_outside_the_allowlist_is_forced_to_the_safe_node(
) -> None:  # fmt: skip
    supervisor = scripted_agent(
        "supervisor",
        handoff_to("delete_database", goal="Drop the cache tables."),
        reply("Dropping the tables now."),  # after the tool error, it answers anyway
    )
    investigator = scripted_agent("investigator", reply("unused"))
    safe = scripted_agent("safe_responder", reply("I can't do that; here is the incident status."))
    builder = (
        HandoffWorkflowBuilder(supervisor)
        .with_handoff(supervisor, investigator)
        .with_blocked_handoff_outcome(safe)
    )
    result = await run(builder, "The cache is broken, do whatever it takes.")

    assert result.status == "blocked_handoff"
    assert result.text.endswith("here is the incident status.")
    assert received(supervisor).sees("handoff_to_delete_database")  # it got the tool error
    # What the blocked agent wrote after its tool error is not the answer: the safe agent's is.
    assert "Dropping the tables" not in result.text
    assert any(m.text == "Dropping the tables now." for m in result.conversation)
    blocked = next(s for s in result.trace if s.kind == "blocked")
    assert (blocked.decided_by, blocked.by, blocked.source) == ("code", "unknown_target",
                                                                "supervisor")  # fmt: skip
    forced = next(s for s in result.trace if s.kind == "route")
    assert (forced.decided_by, forced.target) == ("code", "safe_responder")
    assert "handoff_to_delete_database" not in received(safe).tool_names
    assert not received(safe).tool_names or all(
        not name.startswith("handoff_to_") for name in received(safe).tool_names
    )


async def test_a_reviewer_that_calls_neither_tool_has_not_approved() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(SAFE))
    reviewer = scripted_agent(
        "reviewer", reply("This flush is too broad."), call_tool("approve", note="ok")
    )
    result = await run(HandoffWorkflowBuilder(planner).with_review(planner, reviewer), "fix")

    assert texts(result) == [SAFE]
    assert received(planner).sees("This flush is too broad.")
    no_verdict = result.trace[2]
    assert (no_verdict.kind, no_verdict.decided_by) == ("review", "code")


async def test_empty_feedback_is_a_tool_error_and_the_reviewer_tries_again() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(SAFE))
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback="  "),
        call_tool("request_changes", feedback=BROAD),
        call_tool("approve", note="ok"),
    )
    result = await run(HandoffWorkflowBuilder(planner).with_review(planner, reviewer), "fix")

    assert received(reviewer, 1).sees("request_changes needs feedback")
    assert received(planner).sees(BROAD)
    assert texts(result) == [SAFE]


async def test_only_the_first_verdict_of_a_response_counts() -> None:
    planner = scripted_agent("planner", reply(SAFE))
    both = respond(
        call_tool("approve", note="fine"), call_tool("request_changes", feedback="not fine")
    )
    reviewer = scripted_agent("reviewer", both)
    result = await run(HandoffWorkflowBuilder(planner).with_review(planner, reviewer), "fix")
    assert result.status == "completed"
    assert texts(result) == [SAFE]


async def test_a_reply_with_a_handoff_is_not_reviewed() -> None:
    planner = scripted_agent("planner", handoff_to("ops", goal="Run the scoped expiry."))
    ops = scripted_agent("ops", reply("Expired 120 keys."))
    reviewer = scripted_agent("reviewer")  # never called
    builder = (
        HandoffWorkflowBuilder(planner).with_handoff(planner, ops).with_review(planner, reviewer)
    )
    result = await run(builder, "fix")
    assert texts(result) == ["Expired 120 keys."]
    assert "review" not in [s.kind for s in result.trace]


async def test_review_hops_count_toward_max_iterations() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(STILL_UNSAFE))
    reviewer = scripted_agent("reviewer", call_tool("request_changes", feedback=BROAD))
    builder = (
        HandoffWorkflowBuilder(planner)
        .with_review(planner, reviewer, max_rounds=5)
        .with_max_iterations(3)
    )
    result = await run(builder, "fix")
    assert result.status == "max_iterations"
    assert result.escalation is not None
    assert result.escalation.reason == "max_iterations"


async def test_a_reviewer_takes_no_part_in_the_default_mesh() -> None:
    planner = scripted_agent("planner", reply(SAFE))
    writer = scripted_agent("writer")
    reviewer = scripted_agent("reviewer", call_tool("approve", note="ok"))
    builder = (
        HandoffWorkflowBuilder(planner).add_participants(writer).with_review(planner, reviewer)
    )
    await run(builder, "fix")
    assert "handoff_to_reviewer" not in received(planner).tool_names
    assert "handoff_to_writer" in received(planner).tool_names
    assert not [n for n in received(reviewer).tool_names if n.startswith("handoff_to_")]
    assert builder.lint() == []  # the reviewer is reached through its producer
    assert "<-->|review|" in builder.to_mermaid()


async def test_the_next_message_goes_back_to_the_producer(store: ConversationStore) -> None:
    planner = scripted_agent("planner", reply(SAFE), reply("Done: 120 keys expired."))
    reviewer = scripted_agent(
        "reviewer", call_tool("approve", note="ok"), call_tool("approve", note="ok")
    )
    triage = scripted_agent("triage", handoff_to("planner", goal="Fix the stale cache."))
    builder = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, planner).with_review(planner, reviewer)
    )
    host = ConversationHost(builder, store)
    first = await host.send("ops-1", "the catalog cache is stale")
    assert first.text == SAFE
    # A restart: a new host on the same store. The remembered agent is the producer, whose
    # reply the reviewer approved, not the reviewer.
    second = await ConversationHost(builder, store).send("ops-1", "did it work?")
    assert second.trace[0].target == "planner"
    assert second.text == "Done: 120 keys expired."
    assert [m.text for m in second.messages if m.text] == ["Done: 120 keys expired."]


async def test_hosted_escalation_keeps_the_evidence_and_replays_the_reply(
    store: ConversationStore,
) -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(STILL_UNSAFE))
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback=BROAD),
        call_tool("request_changes", feedback=NO_ROLLBACK),
    )
    builder = HandoffWorkflowBuilder(planner).with_review(planner, reviewer)
    host = ConversationHost(builder, store)
    result = await host.send("ops-2", "fix the cache", idempotency_key="k1")
    assert result.escalation is not None
    assert result.escalation.evidence == (BROAD, NO_ROLLBACK)
    replayed = await ConversationHost(builder, store).send(
        "ops-2", "fix the cache", idempotency_key="k1"
    )  # a retried call gets the stored result, with the same reply: no unsafe draft
    assert [m.text for m in replayed.messages] == [m.text for m in result.messages]
    assert UNSAFE not in replayed.text


def _self_review(b: HandoffWorkflowBuilder, p: Agent, r: Agent) -> object:
    return b.with_review(p, p)


def _two_reviewers(b: HandoffWorkflowBuilder, p: Agent, r: Agent) -> object:
    return b.with_review(p, r).with_review(p, scripted_agent("other"))


def _review_chain(b: HandoffWorkflowBuilder, p: Agent, r: Agent) -> object:
    return b.with_review(p, r).with_review(r, scripted_agent("other"))


@pytest.mark.parametrize(
    ("declare", "problem"),
    [
        (_self_review, "cannot review its own replies"),
        (_two_reviewers, "has two reviewers"),
        (_review_chain, "both reviews and is reviewed"),
    ],
)
def test_review_configuration_problems(
    declare: Callable[[HandoffWorkflowBuilder, Agent, Agent], object], problem: str
) -> None:
    planner = scripted_agent("planner")
    reviewer = scripted_agent("reviewer")
    builder = HandoffWorkflowBuilder(planner)
    declare(builder, planner, reviewer)
    with pytest.raises(HandoffConfigurationError, match=problem):
        builder.build()


def test_max_rounds_must_be_positive() -> None:
    planner, reviewer = scripted_agent("planner"), scripted_agent("reviewer")
    with pytest.raises(ValueError, match="max_rounds must be at least 1"):
        HandoffWorkflowBuilder(planner).with_review(planner, reviewer, max_rounds=0)


def test_a_reviewer_with_its_own_approve_tool_is_refused() -> None:
    from agent_framework import tool

    @tool(name="approve", description="Approve an expense.")
    def approve(note: str) -> str:
        return note

    planner = scripted_agent("planner")
    reviewer: Agent = scripted_agent("reviewer", tools=[approve])
    with pytest.raises(HandoffConfigurationError, match="already has a tool named 'approve'"):
        HandoffWorkflowBuilder(planner).with_review(planner, reviewer).build()


# -- a review closed by anything but a verdict, and verdicts beside requests -----------------------

PAID: list[str] = []


@tool(name="lookup_order", description="Look an order up.", approval_mode="always_require")
def lookup_order(order: str) -> str:
    PAID.append(order)
    return f"order {order}: paid"


async def answer_all(workflow: Workflow, first: WorkflowRunResult) -> HandoffTurnResult:
    """Approve every request until the turn ends."""
    run = first
    while run.get_request_info_events():
        run = await workflow.run(
            responses={
                r.request_id: r.data.to_function_approval_response(approved=True)
                for r in run.get_request_info_events()
            }
        )
    result = run.get_outputs()[-1]
    assert isinstance(result, HandoffTurnResult)
    return result


@pytest.mark.parametrize("outcome", ["escalate", "return", "safe"])
async def test_a_cap_during_a_review_keeps_the_draft_from_the_user(outcome: str) -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(STILL_UNSAFE))
    reviewer = scripted_agent("reviewer", call_tool("request_changes", feedback=BROAD))
    safe = scripted_agent("safe", reply("A person will look at this."))
    chosen = {"escalate": CapOutcome.ESCALATE, "return": CapOutcome.RETURN_TO_USER, "safe": safe}
    builder = (
        HandoffWorkflowBuilder(planner)
        .with_review(planner, reviewer, max_rounds=5)
        .with_max_iterations(3, outcome=chosen[outcome])  # planner, reviewer, planner: no review
    )
    result = await run(builder, "fix")
    assert result.status == "max_iterations"
    assert UNSAFE not in result.text
    assert STILL_UNSAFE not in result.text  # never reviewed: kept from the user too
    if outcome == "safe":
        assert texts(result) == ["A person will look at this."]


async def test_a_deadline_during_a_review_keeps_the_draft_from_the_user() -> None:
    planner = scripted_agent("planner", reply(UNSAFE))
    reviewer = scripted_agent("reviewer", slow(call_tool("approve", note="ok"), 1.0))
    builder = HandoffWorkflowBuilder(planner).with_review(planner, reviewer)
    result = await run(builder.with_timeouts(agent_call=0.2), "fix")
    assert result.status == "agent_timeout"
    assert texts(result) == []


async def test_a_reviewer_that_hands_off_has_not_approved() -> None:
    planner = scripted_agent("planner", reply(UNSAFE))
    reviewer = scripted_agent(
        "reviewer", handoff_to("triage", goal="Not mine."), reply("Refunds take 5 days.")
    )
    triage = scripted_agent(
        "triage", reply("Let me check."), handoff_to("reviewer", goal="How long do refunds take?")
    )
    builder = (
        HandoffWorkflowBuilder(planner)
        .with_handoff(reviewer, triage)
        .with_handoff(triage, reviewer)
        .with_review(planner, reviewer)
        .enable_return_to_previous()
    )
    workflow = builder.build()
    first = (await workflow.run("fix")).get_outputs()[-1]
    assert isinstance(first, HandoffTurnResult)
    assert texts(first) == ["Let me check."]  # the draft was not approved: it stays out
    # Later the reviewer is reached as a participant: its answer is an answer, not feedback.
    second = (await workflow.run("and refunds?")).get_outputs()[-1]
    assert isinstance(second, HandoffTurnResult)
    assert texts(second) == ["Refunds take 5 days."]
    assert "review" not in [s.kind for s in second.trace]


async def test_text_written_before_an_approval_wait_is_part_of_the_draft() -> None:
    PAID.clear()
    planner = scripted_agent(
        "planner",
        respond("Step 1: flush every cache.", call_tool("lookup_order", order="A-1")),
        reply(UNSAFE),
        reply(STILL_UNSAFE),
        tools=[lookup_order],
    )
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback=BROAD),
        call_tool("request_changes", feedback=NO_ROLLBACK),
    )
    workflow = HandoffWorkflowBuilder(planner).with_review(planner, reviewer).build()
    result = await answer_all(workflow, await workflow.run("fix"))
    assert result.status == "review_rounds"
    assert PAID == ["A-1"]
    assert [m.author_name for m in result.messages] == ["handoff_host"]  # the apology alone


async def test_a_verdict_beside_a_tool_that_needs_approval_stands() -> None:
    PAID.clear()
    planner = scripted_agent("planner", reply(UNSAFE), reply(SAFE))
    reviewer = scripted_agent(
        "reviewer",
        respond(call_tool("request_changes", feedback=BROAD), call_tool("lookup_order", order="B")),
        call_tool("approve", note="ok"),
        tools=[lookup_order],
    )
    workflow = HandoffWorkflowBuilder(planner).with_review(planner, reviewer).build()
    result = await answer_all(workflow, await workflow.run("fix"))
    assert texts(result) == [SAFE]
    assert received(planner).sees(BROAD)
    assert PAID == ["B"]
    assert [(s.kind, s.by) for s in result.trace][1:] == [
        ("review", "review"),
        ("review", "request_changes"),
        ("review", "review"),
        ("end", "approve"),
    ]


async def test_the_next_message_goes_to_the_producer_that_was_reviewed() -> None:
    one = scripted_agent("one", handoff_to("two", goal="Write it."))
    two = scripted_agent("two", reply("Two's draft."), reply("Two again."))
    reviewer = scripted_agent(
        "reviewer", call_tool("approve", note="ok"), call_tool("approve", note="ok")
    )
    builder = (
        HandoffWorkflowBuilder(one)
        .with_handoff(one, two)
        .with_review(one, reviewer)
        .with_review(two, reviewer)
        .enable_return_to_previous()
    )
    workflow = builder.build()
    first = (await workflow.run("write")).get_outputs()[-1]
    assert isinstance(first, HandoffTurnResult)
    assert first.active_agent == "two"  # not the reviewer
    second = (await workflow.run("again")).get_outputs()[-1]
    assert isinstance(second, HandoffTurnResult)
    assert second.trace[0] == RoutingStep("start", "code", "previous_agent", None, "two")


async def test_a_termination_condition_does_not_skip_the_review() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(SAFE))
    reviewer = scripted_agent(
        "reviewer", call_tool("request_changes", feedback=BROAD), call_tool("approve", note="ok")
    )
    builder = (
        HandoffWorkflowBuilder(planner)
        .with_review(planner, reviewer)
        .with_termination_condition(lambda conversation: True)
    )
    result = await run(builder, "fix")
    assert texts(result) == [SAFE]


def test_the_lint_warns_of_a_route_or_a_manager_that_a_review_makes_moot() -> None:
    planner, reviewer, other = (scripted_agent(n) for n in ("planner", "reviewer", "other"))
    routed = (
        HandoffWorkflowBuilder(planner).with_review(planner, reviewer).with_route(planner, other)
    )
    assert "review-and-route" in [f.code for f in routed.lint()]
    managed = (
        HandoffWorkflowBuilder(planner)
        .with_review(planner, reviewer)
        .with_manager(lambda settings: HandoffManager(settings))  # not known to run reviews
    )
    assert "review-with-manager" in [f.code for f in managed.lint()]
    subclassed = (
        HandoffWorkflowBuilder(planner)
        .with_review(planner, reviewer)
        .with_manager(HandoffManager)  # a HandoffManager (or a subclass) runs them
    )
    assert subclassed.lint() == []


def ask_human() -> FunctionTool:
    """A declaration-only tool: the application answers it."""
    return FunctionTool(
        name="ask_human",
        description="Ask a person.",
        input_model={"type": "object", "properties": {"q": {"type": "string"}}},
    )


async def test_the_answers_to_a_draft_sent_back_stay_out_of_the_reply_with_it() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(SAFE))
    reviewer = scripted_agent(
        "reviewer",
        respond(call_tool("request_changes", feedback=BROAD), call_tool("ask_human", q="ok?")),
        call_tool("approve", note="ok"),
        tools=[ask_human()],
    )
    workflow = HandoffWorkflowBuilder(planner).with_review(planner, reviewer).build()
    [request] = (await workflow.run("fix")).get_request_info_events()
    answer = Content.from_function_result(call_id=request.data.call_id, result="a person said ok")
    result = (await workflow.run(responses={request.request_id: answer})).get_outputs()[-1]
    assert isinstance(result, HandoffTurnResult)
    assert texts(result) == [SAFE]
    assert [m.role for m in result.messages] == ["assistant"]  # no result without its call


async def test_abandoning_a_review_leaves_the_producer_active_and_its_draft_out() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(SAFE))
    reviewer = scripted_agent(
        "reviewer",
        call_tool("lookup_order", order="R-1"),
        call_tool("approve", note="ok"),
        tools=[lookup_order],
    )
    host = ConversationHost(
        HandoffWorkflowBuilder(planner).with_review(planner, reviewer), InMemoryConversationStore()
    )
    with pytest.raises(PendingRequestsError):
        await host.send("c", "fix")
    abandoned = await host.abandon("c")
    assert abandoned is not None
    assert abandoned.active_agent == "planner"
    assert UNSAFE not in abandoned.text
    later = await host.send("c", "try again")
    assert later.trace[0].target == "planner"
    assert texts(later) == [SAFE]


async def test_abandoning_a_reviewed_producer_that_waits_leaves_its_draft_out() -> None:
    planner = scripted_agent(
        "planner",
        respond("Step 1: flush every cache.", call_tool("lookup_order", order="A-1")),
        tools=[lookup_order],
    )
    reviewer = scripted_agent("reviewer")
    host = ConversationHost(
        HandoffWorkflowBuilder(planner).with_review(planner, reviewer), InMemoryConversationStore()
    )
    with pytest.raises(PendingRequestsError):
        await host.send("c", "fix")
    abandoned = await host.abandon("c")
    assert abandoned is not None
    assert "flush every cache" not in abandoned.text


async def test_a_manager_of_your_own_keeps_a_reviewed_producers_replies() -> None:
    class FirstSpeaks(GroupChatManager):
        @override
        async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
            return NextAgent("planner")

        @override
        async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
            return EndTurn()

    planner = scripted_agent("planner", reply(SAFE))
    reviewer = scripted_agent("reviewer")
    builder = (
        HandoffWorkflowBuilder(planner)
        .with_review(planner, reviewer)
        .with_manager(lambda settings: FirstSpeaks())
    )
    result = await run(builder, "fix")
    assert texts(result) == [SAFE]  # it decides who speaks: no review, nothing held back


def test_a_reviewed_producer_cannot_be_a_safe_agent() -> None:
    triage, planner, reviewer = (scripted_agent(n) for n in ("triage", "planner", "reviewer"))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, planner)
        .with_review(planner, reviewer)
        .with_blocked_handoff_outcome(planner)
    )
    with pytest.raises(HandoffConfigurationError, match="is the safe agent of blocked_handoff"):
        builder.build()
    builder.with_blocked_handoff_outcome(None)  # back to the default: it builds
    assert builder.lint() == []


async def test_a_review_that_escalates_says_so() -> None:
    planner = scripted_agent("planner", reply(UNSAFE), reply(STILL_UNSAFE))
    reviewer = scripted_agent(
        "reviewer",
        call_tool("request_changes", feedback=BROAD),
        call_tool("request_changes", feedback=NO_ROLLBACK),
    )
    result = await run(HandoffWorkflowBuilder(planner).with_review(planner, reviewer), "fix")
    assert result.text == DEFAULT_REVIEW_ESCALATION_MESSAGE
    chosen = (
        HandoffWorkflowBuilder(planner)
        .with_review(planner, reviewer)
        .with_max_handoffs_per_turn(3, escalation_message="A person will call you.")
    )
    client_of(planner).add_steps(reply(UNSAFE), reply(STILL_UNSAFE))
    client_of(reviewer).add_steps(
        call_tool("request_changes", feedback=BROAD),
        call_tool("request_changes", feedback=NO_ROLLBACK),
    )
    assert (await run(chosen, "fix")).text == "A person will call you."
