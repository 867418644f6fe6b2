"""Delegation: an agent asks another agent through a tool (``with_delegate``) and keeps the turn.

The caller gets ``ask_<expert>``; the expert runs on its task (and, with ``history=``, on the
shared conversation), with its own tools and instructions and no handoff tools; its final text is
the call's result. Only the call and its result join the shared conversation; the expert's own
messages are in ``HandoffTurnResult.delegations`` and the ``handoff_delegated`` events.

A scripted model ignores what it receives, so these tests check what each model *received*
(``client_of(agent).calls``), not only who was called. Sections follow the feature: the basic
call, history modes, payloads, ``max_calls``, nesting and the depth cap, build errors, lint and
Mermaid, experts that are participants, failures, streaming, approvals, checkpoints, hosted
conversations, telemetry and deadlines. Regressions of bugs found in review are at the end.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from agent_framework import (
    Agent,
    CheckpointStorage,
    FileCheckpointStorage,
    FunctionTool,
    InMemoryCheckpointStorage,
    Message,
    Workflow,
    WorkflowEvent,
    tool,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, Field

from handoff_builder import (
    DEFAULT_HANDOFF_INSTRUCTIONS,
    HANDOFF_TURN_EVENT,
    ConversationHost,
    DelegationEvent,
    HandoffArgumentError,
    HandoffConfigurationError,
    HandoffToolCallFiltering,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    HistoryMode,
    PendingRequestsError,
    RoutingStep,
)
from handoff_builder.stores import ConversationStore
from handoff_builder.testing import (
    ModelCall,
    ScriptStep,
    Step,
    call_tool,
    client_of,
    handoff_to,
    never_answer,
    received,
    reply,
    respond,
    scripted_agent,
    slow,
)
from tests.helpers import run_turn
from tests.test_telemetry import EXPORTER, measured, named, parent_of

TASK = "What is the refund window for a damaged parcel?"
ANSWER = "Damaged parcels can be refunded within 30 days."
USER = "My parcel arrived broken, can I get my money back?"

Events = list[WorkflowEvent[Any]]
Row = tuple[str, str | None, str]


# -- helpers --------------------------------------------------------------------------------------


def call_id(step: Step) -> str:
    """The call id of a scripted step's (first) tool call."""
    return str(step.contents[0].call_id)


def rows(messages: Sequence[Message]) -> list[Row]:
    """Each message as (role, author, text)."""
    return [(m.role, m.author_name, m.text) for m in messages]


def results_in(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """Every function result in ``messages`` as (call id, result)."""
    return [
        (str(c.call_id), str(c.result))
        for m in messages
        for c in m.contents
        if c.type == "function_result"
    ]


def calls_in(messages: Sequence[Message]) -> list[str]:
    """The names of the function calls in ``messages``, in order."""
    return [str(c.name) for m in messages for c in m.contents if c.type == "function_call"]


def tool_schema(call: ModelCall, name: str) -> dict[str, Any]:
    """The JSON schema of the tool ``name`` that a model call was offered."""
    tools: list[Any] = list(call.options.get("tools") or [])
    [found] = [t for t in tools if isinstance(t, FunctionTool) and t.name == name]
    return found.parameters()


def requests_of(events: Events) -> list[WorkflowEvent[Any]]:
    return [event for event in events if event.type == "request_info"]


def result_of(events: Events) -> HandoffTurnResult:
    [result] = [event.data for event in events if event.type == HANDOFF_TURN_EVENT]
    assert isinstance(result, HandoffTurnResult)
    return result


def summary(event: DelegationEvent) -> tuple[str, str, str, int, str, str]:
    """A delegation without its messages: (caller, expert, tool, depth, outcome, task)."""
    return (event.caller, event.expert, event.tool_name, event.depth, event.outcome, event.task)


async def answer(workflow: Workflow, request: WorkflowEvent[Any], *, approved: bool) -> Events:
    """Answer one approval request of a waiting workflow run."""
    response = request.data.to_function_approval_response(approved=approved)
    return list(await workflow.run(responses={request.request_id: response}))


def approval_tool(ran: list[str]) -> FunctionTool:
    """A ledger lookup that needs a person's approval; ``ran`` records each execution."""

    @tool(
        name="lookup_order",
        description="Look an order up in the ledger.",
        approval_mode="always_require",
    )
    def lookup_order(order: str) -> str:
        ran.append(order)
        return f"order {order}: paid"

    return lookup_order


def policy_desk(
    triage_steps: Sequence[ScriptStep],
    policy_steps: Sequence[ScriptStep],
    *,
    policy_tools: Sequence[Any] | None = None,
    **delegate: Any,
) -> tuple[HandoffWorkflowBuilder, Agent, Agent]:
    """triage, which may ask policy (``ask_policy``) with the given delegate options."""
    triage = scripted_agent("triage", *triage_steps)
    policy = scripted_agent("policy", *policy_steps, tools=policy_tools)
    builder = HandoffWorkflowBuilder(triage).with_delegate(
        triage, policy, "refund policy", **delegate
    )
    return builder, triage, policy


def chain(
    a_steps: Sequence[ScriptStep],
    b_steps: Sequence[ScriptStep],
    c_steps: Sequence[ScriptStep],
    *,
    c_tools: Sequence[Any] | None = None,
    b_to_c: dict[str, Any] | None = None,
) -> tuple[HandoffWorkflowBuilder, Agent, Agent, Agent]:
    """a asks b, b asks c; only a is a participant."""
    a = scripted_agent("a", *a_steps)
    b = scripted_agent("b", *b_steps)
    c = scripted_agent("c", *c_steps, tools=c_tools)
    builder = (
        HandoffWorkflowBuilder(a)
        .with_delegate(a, b, "b knows")
        .with_delegate(b, c, "c knows", **(b_to_c or {}))
        .with_name("chain")
    )
    return builder, a, b, c


# -- 1. the basic call ----------------------------------------------------------------------------


async def test_the_expert_reads_only_its_task_and_the_caller_reads_its_answer() -> None:
    ask = call_tool("ask_policy", task=TASK)
    builder, triage, policy = policy_desk(
        [ask, reply("You can get a refund within 30 days.")], [reply(ANSWER)]
    )
    turn = await run_turn(builder.build(), USER)

    # history="none": the expert reads its task, written by the caller, and nothing else.
    assert rows(received(policy).messages) == [("user", "triage", TASK)]
    assert received(policy).tool_names == ()
    # The caller's second model call reads the expert's answer as the call's result.
    second = received(triage, 1)
    assert rows(second.messages)[0] == ("user", None, USER)
    assert results_in(second.messages) == [(call_id(ask), ANSWER)]
    assert turn.result.text == "You can get a refund within 30 days."
    assert turn.result.active_agent == "triage"
    assert turn.result.status == "completed"
    client_of(triage).assert_complete()
    client_of(policy).assert_complete()


async def test_the_shared_conversation_holds_only_the_call_and_its_result() -> None:
    ask = call_tool("ask_policy", task=TASK)
    builder, _, _ = policy_desk([ask, reply("30 days.")], [reply(ANSWER)])
    result = (await run_turn(builder.build(), USER)).result

    assert [(m.role, m.author_name) for m in result.conversation] == [
        ("user", None),
        ("assistant", "triage"),
        ("tool", "triage"),
        ("assistant", "triage"),
    ]
    assert calls_in(result.conversation) == ["ask_policy"]
    assert results_in(result.conversation) == [(call_id(ask), ANSWER)]
    assert all(m.author_name != "policy" for m in result.conversation)
    assert all(m.text != ANSWER for m in result.conversation)  # only as the call's result
    assert [m.role for m in result.messages] == ["assistant", "tool", "assistant"]


async def test_the_delegation_is_in_the_result_the_events_and_the_trace() -> None:
    ask = call_tool("ask_policy", task=TASK)
    builder, _, _ = policy_desk([ask, reply("30 days.")], [reply(ANSWER)])
    turn = await run_turn(builder.build(), USER)
    result = turn.result

    [delegation] = result.delegations
    assert isinstance(delegation, DelegationEvent)
    assert (
        delegation.caller,
        delegation.expert,
        delegation.tool_name,
        delegation.call_id,
        delegation.task,
        delegation.result,
        delegation.outcome,
        delegation.depth,
    ) == ("triage", "policy", "ask_policy", call_id(ask), TASK, ANSWER, "answered", 1)
    assert rows(delegation.messages) == [("user", "triage", TASK), ("assistant", "policy", ANSWER)]
    assert turn.of_type("handoff_delegated") == [delegation]
    assert result.trace == (
        RoutingStep("start", "code", "initial_agent", None, "triage"),
        RoutingStep("delegate", "model", "ask_policy", "triage", "policy"),
        RoutingStep("end", "model", "reply", "triage"),
    )
    assert result.handoffs == ()


async def test_the_delegate_tool_takes_a_required_task() -> None:
    builder, triage, _ = policy_desk([reply("Hello.")], [])
    await run_turn(builder.build(), USER)

    call = received(triage)
    assert call.tool_names == ("ask_policy",)
    schema = tool_schema(call, "ask_policy")
    assert schema["required"] == ["task"]
    assert schema["properties"]["task"]["type"] == "string"
    assert schema["additionalProperties"] is False
    [offered] = [t for t in call.options["tools"] if t.name == "ask_policy"]
    assert offered.description == "refund policy"  # the reason describes the tool


async def test_the_expert_keeps_its_own_instructions() -> None:
    triage = scripted_agent("triage", call_tool("ask_policy", task=TASK), reply("ok"))
    policy = scripted_agent("policy", reply(ANSWER), instructions="Quote the policy verbatim.")
    workflow = HandoffWorkflowBuilder(triage).with_delegate(triage, policy).build()
    await run_turn(workflow, USER)

    assert received(policy).instructions == "Quote the policy verbatim."
    [offered] = [t for t in received(triage).options["tools"] if t.name == "ask_policy"]
    assert offered.description == "policy"  # no reason, no description: the expert's name


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"task": "   "}, "the task is empty; say what the expert should do"),
        ({"question": TASK}, "task: Field required"),
    ],
    ids=["blank-task", "wrong-argument"],
)
async def test_a_call_without_a_task_is_refused_before_the_expert_runs(
    arguments: dict[str, str], problem: str
) -> None:
    ask = call_tool("ask_policy", **arguments)
    builder, triage, policy = policy_desk([ask, reply("Sorry.")], [])
    result = (await run_turn(builder.build(), USER)).result

    [(answered_id, error)] = results_in(received(triage, 1).messages)
    assert answered_id == call_id(ask)
    assert error.startswith("Error: ask_policy was not called: ")
    assert problem in error
    assert client_of(policy).calls == []
    [delegation] = result.delegations
    assert (delegation.outcome, delegation.result, delegation.messages) == ("refused", error, ())
    assert [step.kind for step in result.trace] == ["start", "end"]  # a refusal is no hop


# -- 2. what the expert reads besides its task ----------------------------------------------------


def lookup_tool() -> FunctionTool:
    @tool(name="lookup_customer", description="Find the customer's account.")
    def lookup_customer() -> str:
        return "customer 42"

    return lookup_customer


async def run_history_desk(
    history: HistoryMode, filtering: HandoffToolCallFiltering | None = None
) -> tuple[HandoffTurnResult, ModelCall]:
    """triage looks the customer up, hands off to billing; billing asks policy (``history``)."""
    triage = scripted_agent(
        "triage",
        call_tool("lookup_customer"),
        handoff_to("billing", goal="Refund the broken parcel."),
        tools=[lookup_tool()],
    )
    billing = scripted_agent(
        "billing", call_tool("ask_policy", task="May I refund it?"), reply("Refunded.")
    )
    policy = scripted_agent("policy", reply("Yes, within 30 days."))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_delegate(billing, policy, "refund policy", history=history)
    )
    if filtering is not None:
        builder.with_tool_call_filtering(filtering)
    result = (await run_turn(builder.build(), USER)).result
    return result, received(policy)


async def test_filtered_history_is_the_experts_own_view_with_the_handoff_note() -> None:
    result, seen = await run_history_desk("filtered")

    assert seen.rendered.splitlines() == [
        f"user: {USER}",
        "assistant[triage]: -> lookup_customer({})",
        f"tool[triage]: <- {results_in(result.conversation)[0][0]}: customer 42",
        # the handoff call is filtered out (HANDOFF_ONLY); its note carries the goal
        "user[handoff_host]: Handoff from triage to billing. Goal: Refund the broken parcel.",
        "user[billing]: May I refund it?",
    ]
    assert "handoff_to_billing" not in calls_in(seen.messages)
    assert result.text == "Refunded."


async def test_filtered_history_follows_the_workflows_filtering() -> None:
    _, seen = await run_history_desk("filtered", HandoffToolCallFiltering.ALL)

    assert calls_in(seen.messages) == []
    assert rows(seen.messages) == [
        ("user", None, USER),
        (
            "user",
            "handoff_host",
            "Handoff from triage to billing. Goal: Refund the broken parcel.",
        ),
        ("user", "billing", "May I refund it?"),
    ]


async def test_full_history_shows_every_tool_call_whatever_the_filtering() -> None:
    _, seen = await run_history_desk("full", HandoffToolCallFiltering.ALL)

    assert seen.user_text == USER
    assert calls_in(seen.messages) == ["lookup_customer", "handoff_to_billing"]  # NONE
    assert seen.sees("Handoff from triage to billing. Goal: Refund the broken parcel.")
    assert rows(seen.messages)[-1] == ("user", "billing", "May I refund it?")


async def test_none_history_shows_nothing_of_the_conversation() -> None:
    _, seen = await run_history_desk("none")
    assert rows(seen.messages) == [("user", "billing", "May I refund it?")]


@pytest.mark.parametrize("history", ["full", "filtered"])
async def test_history_reads_the_earlier_user_turns_too(history: HistoryMode) -> None:
    builder, _, policy = policy_desk(
        [reply("Hello!"), call_tool("ask_policy", task=TASK), reply("30 days.")],
        [reply(ANSWER)],
        history=history,
    )
    workflow = builder.build()
    await run_turn(workflow, "Hi there")
    await run_turn(workflow, USER)

    assert rows(received(policy).messages) == [
        ("user", None, "Hi there"),
        ("user", "triage", "Hello!"),  # another agent's words reach it as a user message
        ("user", None, USER),
        ("user", "triage", TASK),
    ]


# -- 3. typed payloads ----------------------------------------------------------------------------


class RefundCheck(BaseModel):
    """A refund to check against the policy."""

    order: str = Field(description="The order id.")
    amount: int = Field(description="The amount, in EUR.")


async def test_a_payload_is_the_tools_schema_and_reaches_the_expert_as_labelled_json() -> None:
    invalid = call_tool("ask_policy", order="A-1")
    valid = call_tool("ask_policy", order="A-1", amount=5)
    builder, triage, policy = policy_desk(
        [invalid, valid, reply("Checked.")], [reply("A 5 EUR refund is fine.")], payload=RefundCheck
    )
    result = (await run_turn(builder.build(), USER)).result

    # The model's schema without pydantic's titles (a lean schema).
    expected = RefundCheck.model_json_schema()
    del expected["title"]
    for field in expected["properties"].values():
        del field["title"]
    assert tool_schema(received(triage, 0), "ask_policy") == expected
    # The invalid call: a tool error that names the field; the expert is not called for it.
    [(first_id, error)] = results_in(received(triage, 1).messages)
    assert first_id == call_id(invalid)
    assert error == "Error: ask_policy was not called: amount: Field required."
    # The valid call reaches the expert once, as JSON after the payload's label.
    assert len(client_of(policy).calls) == 1
    assert rows(received(policy).messages) == [
        ("user", "triage", 'RefundCheck: {"order":"A-1","amount":5}')
    ]
    assert [summary(d)[4:] for d in result.delegations] == [
        ("refused", ""),
        ("answered", 'RefundCheck: {"order":"A-1","amount":5}'),
    ]
    assert results_in(received(triage, 2).messages)[-1] == (
        call_id(valid),
        "A 5 EUR refund is fine.",
    )


# -- 4. max_calls ---------------------------------------------------------------------------------


async def test_max_calls_refuses_the_call_past_the_limit_until_the_next_user_turn() -> None:
    first, second, third = (call_tool("ask_policy", task=t) for t in ("one", "two", "three"))
    builder, triage, policy = policy_desk(
        [first, second, reply("That is all I know."), third, reply("Again.")],
        [reply("Answer one."), reply("Answer three.")],
        max_calls=1,
    )
    workflow = builder.build()
    result = (await run_turn(workflow, USER)).result

    [(_, refused)] = results_in(received(triage, 2).messages)[1:]
    assert refused == (
        "Error: ask_policy was not called: it was already called 1 time(s) in this turn, its "
        "limit; answer with what you have."
    )
    assert [(d.task, d.outcome) for d in result.delegations] == [
        ("one", "answered"),
        ("two", "refused"),
    ]
    assert len(client_of(policy).calls) == 1

    later = (await run_turn(workflow, "And for a lost parcel?")).result
    assert [(d.task, d.outcome, d.result) for d in later.delegations] == [
        ("three", "answered", "Answer three.")
    ]
    assert rows(received(policy).messages) == [("user", "triage", "three")]
    client_of(policy).assert_complete()


# -- 5. nested delegates and the depth cap --------------------------------------------------------


async def test_nested_delegates_answer_back_out_through_each_caller() -> None:
    ask_b = call_tool("ask_b", task="T1")
    ask_c = call_tool("ask_c", task="T2")
    builder, a, b, c = chain(
        [ask_b, reply("A done.")], [ask_c, reply("B done.")], [reply("C done.")]
    )
    result = (await run_turn(builder.build(), "go")).result

    assert received(b, 0).tool_names == ("ask_c",)
    assert rows(received(b, 0).messages) == [("user", "a", "T1")]
    assert rows(received(c).messages) == [("user", "b", "T2")]
    assert results_in(received(b, 1).messages) == [(call_id(ask_c), "C done.")]
    assert results_in(received(a, 1).messages) == [(call_id(ask_b), "B done.")]
    assert result.text == "A done."

    inner, outer = result.delegations  # in the order they finished: the innermost first
    assert summary(inner) == ("b", "c", "ask_c", 2, "answered", "T2")
    assert summary(outer) == ("a", "b", "ask_b", 1, "answered", "T1")
    assert rows(inner.messages) == [("user", "b", "T2"), ("assistant", "c", "C done.")]
    assert calls_in(outer.messages) == ["ask_c"]  # b's own exchange is in its delegation ...
    assert calls_in(result.conversation) == ["ask_b"]  # ... not in the shared conversation
    assert [(s.kind, s.by, s.source, s.target) for s in result.trace] == [
        ("start", "initial_agent", None, "a"),
        ("delegate", "ask_c", "b", "c"),
        ("delegate", "ask_b", "a", "b"),
        ("end", "reply", "a", None),
    ]


async def test_an_expert_at_the_depth_cap_runs_without_its_delegates() -> None:
    builder, _, b, c = chain(
        [call_tool("ask_b", task="T1"), reply("A done.")], [reply("B alone.")], []
    )
    result = (await run_turn(builder.with_max_delegation_depth(1).build(), "go")).result

    assert received(b).tool_names == ()  # no ask_c at depth 1 of 1
    assert client_of(c).calls == []
    assert [summary(d) for d in result.delegations] == [("a", "b", "ask_b", 1, "answered", "T1")]
    assert result.delegations[0].result == "B alone."


# -- 6. build errors ------------------------------------------------------------------------------

_a, _b, _c, _outsider = (scripted_agent(name) for name in ("a", "b", "c", "outsider"))


def _own_tool() -> FunctionTool:
    @tool(name="ask_b", description="An agent's own tool named like a delegate tool.")
    def ask_b() -> str:
        return "mine"

    return ask_b


_a_with_tool = scripted_agent("a", tools=[_own_tool()])


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (
            lambda: HandoffWorkflowBuilder(_a).with_delegate(_a, _b).with_delegate(_b, _a),
            "Delegates form a cycle ('a' -> 'b' -> 'a')",
        ),
        (
            lambda: (
                HandoffWorkflowBuilder(_a)
                .with_delegate(_a, _b)
                .with_delegate(_b, _c)
                .with_delegate(_c, _a)
            ),
            "Delegates form a cycle ('a' -> 'b' -> 'c' -> 'a')",
        ),
        (
            lambda: HandoffWorkflowBuilder(_a).with_delegate(_a, _a),
            "Agent 'a' cannot delegate to itself",
        ),
        (
            lambda: HandoffWorkflowBuilder(_a).with_delegate(_outsider, _b),
            "The delegate from 'outsider' to 'b': 'outsider' is not in this workflow",
        ),
        (
            lambda: HandoffWorkflowBuilder(_a).with_delegate(_a, _b).with_delegate(_a, _b),
            "The delegate from 'a' to 'b' is declared twice",
        ),
        (
            lambda: (
                HandoffWorkflowBuilder(_a)
                .with_handoff(_a, _b)
                .with_delegate(_a, _c, tool_name="handoff_to_b")
            ),
            "Agent 'a' would get two tools named 'handoff_to_b' (to 'b' and 'c'); pass tool_name= "
            "to with_delegate or with_handoff",
        ),
        (
            lambda: HandoffWorkflowBuilder(_a_with_tool).with_delegate(_a_with_tool, _b),
            "Agent 'a' already has a tool named 'ask_b'",
        ),
        (
            lambda: HandoffWorkflowBuilder(_a).with_delegate(_a, _b, tool_name="ask b!"),
            "Tool name 'ask b!' for the delegate from 'a' to 'b' must use only [A-Za-z0-9_-]",
        ),
        (
            lambda: HandoffWorkflowBuilder(_a).with_delegate(_a, _b, payload=cast(Any, dict)),
            "The payload of the delegate from 'a' to 'b' is <class 'dict'>",
        ),
        (
            lambda: (
                HandoffWorkflowBuilder(_a)
                .add_participants(_b)
                .with_delegate(_a, scripted_agent("b"))
            ),
            "2 different agents are named 'b'",
        ),
    ],
    ids=[
        "cycle",
        "long-cycle",
        "self",
        "caller-outside",
        "duplicate",
        "clash-with-handoff-tool",
        "clash-with-own-tool",
        "invalid-tool-name",
        "payload-not-a-model",
        "expert-name-taken",
    ],
)
def test_build_refuses_a_delegate_that_cannot_run(
    make: Callable[[], HandoffWorkflowBuilder], problem: str
) -> None:
    with pytest.raises(HandoffConfigurationError, match=re.escape(problem)):
        make().build()


def test_an_expert_that_only_answers_may_delegate_further() -> None:
    """b is not a participant, only a's expert: it may still be a caller."""
    builder = HandoffWorkflowBuilder(_a).with_delegate(_a, _b).with_delegate(_b, _c)
    builder.build()
    assert builder.lint() == []


def test_every_delegate_problem_is_reported_at_once() -> None:
    builder = (
        HandoffWorkflowBuilder(_a).with_delegate(_a, _a).with_delegate(_a, _b, tool_name="ask b!")
    )
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert len(failure.value.problems) == 2


def test_with_delegate_checks_its_arguments_when_called() -> None:
    builder = HandoffWorkflowBuilder(_a)
    with pytest.raises(ValueError, match="history must be one of 'none', 'full', 'filtered'"):
        builder.with_delegate(_a, _b, history="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_calls must be at least 1, got 0"):
        builder.with_delegate(_a, _b, max_calls=0)
    with pytest.raises(TypeError, match="approval must be a bool"):
        builder.with_delegate(_a, _b, approval="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="depth must be at least 1, got 0"):
        builder.with_max_delegation_depth(0)
    assert builder.build() is not None  # nothing half-declared was kept


# -- 7. lint and Mermaid --------------------------------------------------------------------------


def test_a_handoff_and_a_delegate_to_the_same_agent_is_a_lint_warning() -> None:
    triage, billing = scripted_agent("triage"), scripted_agent("billing")
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, "charges and invoices")
        .with_delegate(triage, billing, "a question about a charge")
    )
    [finding] = [f for f in builder.lint() if f.code == "handoff-and-delegate"]
    assert (finding.severity, finding.agents) == ("warning", ("triage", "billing"))
    assert "handoff_to_billing" in finding.message
    assert "ask_billing" in finding.message
    builder.build(strict=True)  # a warning: strict builds still build

    assert builder.to_mermaid() == (
        "flowchart LR\n"
        '    a0(["triage"])\n'
        '    a1["billing"]\n'
        "    a0 -->|handoff_to_billing| a1\n"
        "    a0 --o|ask_billing| a1\n"
    )


def test_mermaid_draws_experts_that_are_not_participants_as_subroutines() -> None:
    builder, _, _, _ = chain([], [], [])
    lines = builder.to_mermaid().splitlines()
    assert lines[:4] == ["flowchart LR", '    a0(["a"])', '    a1[["b"]]', '    a2[["c"]]']
    assert lines[4:] == ["    a0 --o|ask_b| a1", "    a1 --o|ask_c| a2"]


# -- 8. an expert that is also a participant ------------------------------------------------------


async def test_a_participant_runs_as_an_expert_without_its_handoff_tools() -> None:
    triage = scripted_agent(
        "triage",
        call_tool("ask_billing", task="Was order A-1 charged twice?"),
        handoff_to("billing", goal="Refund the double charge of A-1."),
    )
    billing = scripted_agent(
        "billing",
        reply("Yes, twice."),
        reply("Refunded."),
        tools=[lookup_tool()],
        instructions="Billing rules.",
    )
    tech = scripted_agent("tech")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, tech)
        .with_delegate(triage, billing, "ask about a charge")
        .build()
    )
    result = (await run_turn(workflow, "I was charged twice")).result

    as_expert, as_participant = client_of(billing).calls
    assert as_expert.tool_names == ("lookup_customer",)
    assert as_expert.instructions == "Billing rules."  # no handoff instructions
    assert rows(as_expert.messages) == [("user", "triage", "Was order A-1 charged twice?")]
    assert as_participant.tool_names == ("lookup_customer", "handoff_to_tech")
    assert as_participant.instructions == "Billing rules.\n" + DEFAULT_HANDOFF_INSTRUCTIONS
    assert received(triage).tool_names == ("handoff_to_billing", "ask_billing")
    assert result.active_agent == "billing"
    assert [summary(d)[:2] for d in result.delegations] == [("triage", "billing")]
    assert [(h.source, h.target) for h in result.handoffs] == [("triage", "billing")]


# -- 9. an expert that fails ----------------------------------------------------------------------


async def test_an_expert_that_raises_gives_the_caller_an_error_and_the_turn_goes_on() -> None:
    def broken(call: ModelCall) -> Step:
        raise RuntimeError("policy database down")

    ask = call_tool("ask_policy", task=TASK)
    builder, triage, _ = policy_desk([ask, reply("I cannot check that right now.")], [broken])
    result = (await run_turn(builder.build(), USER)).result

    expected = (
        "Error: policy could not answer (RuntimeError: policy database down). "
        "Carry on without its answer."
    )
    assert results_in(received(triage, 1).messages) == [(call_id(ask), expected)]
    assert (result.status, result.text) == ("completed", "I cannot check that right now.")
    [delegation] = result.delegations
    assert (delegation.outcome, delegation.result) == ("failed", expected)
    assert rows(delegation.messages) == [("user", "triage", TASK)]
    assert results_in(result.conversation) == [(call_id(ask), expected)]


# -- 10. streaming --------------------------------------------------------------------------------


async def test_streaming_sends_the_experts_updates_as_intermediate_events() -> None:
    builder, _, _ = policy_desk(
        [call_tool("ask_policy", task=TASK), reply("30 days.")], [reply(ANSWER)]
    )
    turn = await run_turn(builder.build(), USER, stream=True)

    intermediate = turn.of_type("handoff_intermediate")
    assert intermediate
    assert {update.author_name for update in intermediate} == {"policy"}
    assert "".join(update.text for update in intermediate) == ANSWER
    assert {update.author_name for update in turn.updates} == {"triage"}  # outputs: the caller's
    assert "".join(update.text for update in turn.updates) == "30 days."
    [delegated] = turn.of_type("handoff_delegated")
    assert turn.result.delegations == (delegated,)
    assert (delegated.expert, delegated.result) == ("policy", ANSWER)


# -- 11. approvals --------------------------------------------------------------------------------


async def test_an_approved_delegate_call_runs_the_expert_then_the_caller() -> None:
    ask = call_tool("ask_policy", task=TASK)
    builder, triage, policy = policy_desk([ask, reply("30 days.")], [reply(ANSWER)], approval=True)
    workflow = builder.build()
    first = list(await workflow.run(USER))

    [request] = requests_of(first)
    assert request.data.type == "function_approval_request"
    assert request.data.function_call.name == "ask_policy"
    assert request.data.function_call.call_id == call_id(ask)
    assert request.data.function_call.parse_arguments() == {"task": TASK}
    assert client_of(policy).calls == []  # not before the approval
    assert [e for e in first if e.type == HANDOFF_TURN_EVENT] == []

    result = result_of(await answer(workflow, request, approved=True))
    assert rows(received(policy).messages) == [("user", "triage", TASK)]
    assert results_in(received(triage, 1).messages) == [(call_id(ask), ANSWER)]
    assert result.text == "30 days."
    assert [summary(d)[4] for d in result.delegations] == ["answered"]
    assert results_in(result.conversation) == [(call_id(ask), ANSWER)]
    assert len(client_of(triage).calls) == 2


async def test_a_declined_delegate_call_tells_the_caller_and_never_runs_the_expert() -> None:
    ask = call_tool("ask_policy", task=TASK)
    builder, triage, policy = policy_desk([ask, reply("I could not check.")], [], approval=True)
    workflow = builder.build()
    [request] = requests_of(list(await workflow.run(USER)))

    result = result_of(await answer(workflow, request, approved=False))
    declined = (
        "Not asked: the person who reviewed it declined the call to ask_policy. "
        "Carry on without it."
    )
    assert results_in(received(triage, 1).messages) == [(call_id(ask), declined)]
    assert client_of(policy).calls == []
    [delegation] = result.delegations
    assert (delegation.outcome, delegation.result) == ("declined", declined)
    assert result.text == "I could not check."


async def test_an_approved_delegate_call_reads_the_history_up_to_the_call() -> None:
    builder, _, policy = policy_desk(
        [call_tool("ask_policy", task=TASK), reply("ok")], [reply(ANSWER)],
        approval=True, history="full",
    )  # fmt: skip
    workflow = builder.build()
    [request] = requests_of(list(await workflow.run(USER)))
    await answer(workflow, request, approved=True)

    # Not the caller's own open call: the expert reads the conversation as it was when asked.
    assert rows(received(policy).messages) == [("user", None, USER), ("user", "triage", TASK)]


async def test_an_experts_own_approval_surfaces_from_the_workflow() -> None:
    ran: list[str] = []
    ask = call_tool("ask_policy", task="Was A-1 paid?")
    lookup = call_tool("lookup_order", order="A-1")
    builder, triage, policy = policy_desk(
        [ask, reply("Yes, A-1 was paid.")],
        [lookup, reply("A-1 is paid.")],
        policy_tools=[approval_tool(ran)],
    )
    workflow = builder.build()
    first = list(await workflow.run("Is A-1 paid?"))

    [request] = requests_of(first)
    assert request.data.type == "function_approval_request"
    assert request.data.function_call.name == "lookup_order"
    assert ran == []
    assert len(client_of(triage).calls) == 1

    result = result_of(await answer(workflow, request, approved=True))
    assert ran == ["A-1"]
    assert results_in(received(policy, 1).messages) == [(call_id(lookup), "order A-1: paid")]
    assert results_in(received(triage, 1).messages) == [(call_id(ask), "A-1 is paid.")]
    assert result.text == "Yes, A-1 was paid."
    # The expert's tool call is its own: not in the shared conversation, in its delegation.
    assert calls_in(result.conversation) == ["ask_policy"]
    assert all(m.author_name != "policy" for m in result.conversation)
    [delegation] = result.delegations
    assert calls_in(delegation.messages) == ["lookup_order"]
    assert delegation.messages[-1].text == "A-1 is paid."


async def test_an_approval_deep_in_nested_delegates_answers_back_out() -> None:
    ran: list[str] = []
    ask_b, ask_c = call_tool("ask_b", task="T1"), call_tool("ask_c", task="T2")
    lookup = call_tool("lookup_order", order="A-1")
    builder, a, b, c = chain(
        [ask_b, reply("A done.")],
        [ask_c, reply("B done.")],
        [lookup, reply("C done.")],
        c_tools=[approval_tool(ran)],
    )
    workflow = builder.build()
    [request] = requests_of(list(await workflow.run("go")))
    assert request.data.function_call.name == "lookup_order"
    assert (len(client_of(a).calls), len(client_of(b).calls), len(client_of(c).calls)) == (1, 1, 1)

    result = result_of(await answer(workflow, request, approved=True))
    assert ran == ["A-1"]
    assert results_in(received(c, 1).messages) == [(call_id(lookup), "order A-1: paid")]
    assert results_in(received(b, 1).messages) == [(call_id(ask_c), "C done.")]
    assert results_in(received(a, 1).messages) == [(call_id(ask_b), "B done.")]
    assert result.text == "A done."
    assert [summary(d) for d in result.delegations] == [
        ("b", "c", "ask_c", 2, "answered", "T2"),
        ("a", "b", "ask_b", 1, "answered", "T1"),
    ]
    assert calls_in(result.conversation) == ["ask_b"]


# -- 12. checkpoints ------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "file"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStorage:
    if request.param == "memory":
        return InMemoryCheckpointStorage()
    return FileCheckpointStorage(tmp_path)


def ledger_desk(
    triage_steps: Sequence[ScriptStep],
    policy_steps: Sequence[ScriptStep],
    legal_steps: Sequence[ScriptStep],
    ran: list[str],
) -> tuple[HandoffWorkflowBuilder, Agent, Agent]:
    """triage asks legal (answers at once), then policy, whose ledger lookup needs approval."""
    triage = scripted_agent("triage", *triage_steps)
    policy = scripted_agent("policy", *policy_steps, tools=[approval_tool(ran)])
    legal = scripted_agent("legal", *legal_steps)
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, legal, "legal questions")
        .with_delegate(triage, policy, "refund policy")
        .with_name("ledger")
    )
    return builder, triage, policy


async def test_a_delegation_waiting_for_approval_survives_a_checkpoint_restore(
    storage: CheckpointStorage,
) -> None:
    ran: list[str] = []
    ask_legal = call_tool("ask_legal", task="May we refund?")
    ask_policy = call_tool("ask_policy", task="Was A-1 paid?")
    lookup = call_tool("lookup_order", order="A-1")
    builder, _, _ = ledger_desk([ask_legal, ask_policy], [lookup], [reply("Legally fine.")], ran)
    first = list(await builder.build().run("Refund A-1?", checkpoint_storage=storage))
    [request] = requests_of(first)
    latest = await storage.get_latest(workflow_name="ledger")
    assert latest is not None

    restored, triage, policy = ledger_desk(
        [reply("Refunding A-1.")], [reply("A-1 is paid.")], [], ran
    )
    workflow = restored.build()
    resumed = list(
        await workflow.run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage)
    )
    [again] = requests_of(resumed)
    assert again.request_id == request.request_id

    result = result_of(await answer(workflow, again, approved=True))
    assert ran == ["A-1"]
    assert results_in(received(policy).messages) == [(call_id(lookup), "order A-1: paid")]
    assert rows(received(policy).messages)[0] == ("user", "triage", "Was A-1 paid?")
    assert results_in(received(triage).messages) == [
        (call_id(ask_legal), "Legally fine."),
        (call_id(ask_policy), "A-1 is paid."),
    ]
    assert len(client_of(triage).calls) == 1  # only the call that answers, after the restore
    assert result.text == "Refunding A-1."
    # The delegation finished before the checkpoint is still the turn's.
    assert [(d.expert, d.outcome, d.result) for d in result.delegations] == [
        ("legal", "answered", "Legally fine."),
        ("policy", "answered", "A-1 is paid."),
    ]
    assert rows(result.delegations[0].messages) == [
        ("user", "triage", "May we refund?"),
        ("assistant", "legal", "Legally fine."),
    ]


# -- 13. hosted conversations ---------------------------------------------------------------------


async def test_a_hosted_delegation_waits_across_a_restart_and_completes(
    store: ConversationStore,
) -> None:
    ran: list[str] = []
    ask_legal = call_tool("ask_legal", task="May we refund?")
    ask_policy = call_tool("ask_policy", task="Was A-1 paid?")
    builder, _, _ = ledger_desk(
        [ask_legal, ask_policy], [call_tool("lookup_order", order="A-1")], [reply("Fine.")], ran
    )
    with pytest.raises(PendingRequestsError) as pending:
        await ConversationHost(builder, store).send("c", "Refund A-1?")
    [request] = pending.value.requests
    assert (request.type, request.function_call.name) == (
        "function_approval_request",
        "lookup_order",
    )

    restarted, triage, policy = ledger_desk([reply("Refunding A-1.")], [reply("Paid.")], [], ran)
    host = ConversationHost(restarted, store)
    approve = request.to_function_approval_response(approved=True)
    result = await host.respond("c", {str(request.id): approve})

    assert ran == ["A-1"]
    assert result.text == "Refunding A-1."
    assert results_in(received(triage).messages) == [
        (call_id(ask_legal), "Fine."),
        (call_id(ask_policy), "Paid."),
    ]
    assert received(policy).user_text == ""  # the expert reads its task, not the user
    assert rows(received(policy).messages)[0] == ("user", "triage", "Was A-1 paid?")
    assert [(d.expert, d.outcome) for d in result.delegations] == [
        ("legal", "answered"),
        ("policy", "answered"),
    ]
    record = await store.load("c")
    assert record is not None
    assert record.state["host"]["pending"] is None
    assert calls_in([Message.from_dict(m) for m in record.messages]) == ["ask_legal", "ask_policy"]


async def test_abandoning_a_waiting_delegation_settles_the_callers_call(
    store: ConversationStore,
) -> None:
    ran: list[str] = []
    ask_policy = call_tool("ask_policy", task="Was A-1 paid?")
    builder, _, _ = ledger_desk([ask_policy], [call_tool("lookup_order", order="A-1")], [], ran)
    with pytest.raises(PendingRequestsError):
        await ConversationHost(builder, store).send("c", "Refund A-1?")

    restarted, triage, policy = ledger_desk([reply("Hello again.")], [], [], ran)
    host = ConversationHost(restarted, store)
    abandoned = await host.abandon("c")
    assert abandoned is not None
    assert abandoned.status == "abandoned"

    record = await store.load("c")
    assert record is not None
    stored = [Message.from_dict(m) for m in record.messages]
    assert results_in(stored) == [
        (
            call_id(ask_policy),
            "Error: not performed: the turn ended (abandoned) before this call was answered.",
        )
    ]
    assert record.state["host"]["pending"] is None
    assert ran == []
    assert client_of(policy).calls == []

    after = await host.send("c", "Anyone there?")  # the next message runs on a valid history
    assert after.text == "Hello again."
    # The abandoned turn stays in the history, in no agent's view.
    assert results_in(received(triage).messages) == []
    assert [m.text for m in received(triage).messages] == ["Anyone there?"]


# -- 14. telemetry --------------------------------------------------------------------------------


@pytest.fixture
def spans() -> InMemorySpanExporter:
    EXPORTER.clear()
    measured()  # start the metric deltas from here
    return EXPORTER


async def test_a_delegation_is_a_return_to_caller_execute_tool_span(
    spans: InMemorySpanExporter,
) -> None:
    ask = call_tool("ask_policy", task=TASK)
    builder, _, _ = policy_desk([ask, reply("30 days.")], [reply(ANSWER)])
    await builder.with_name("desk").build().run(USER)

    [span] = named(spans, "execute_tool ask_policy")
    attributes = dict(span.attributes or {})
    assert {key: attributes.get(key) for key in (
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.agent.name",
        "gen_ai.transfer.mode", "gen_ai.transfer.target.type", "gen_ai.transfer.target.name",
        "handoff_builder.delegation.depth", "handoff_builder.delegation.outcome",
    )} == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "ask_policy",
        "gen_ai.tool.call.id": call_id(ask),
        "gen_ai.agent.name": "triage",
        "gen_ai.transfer.mode": "return_to_caller",
        "gen_ai.transfer.target.type": "agent",
        "gen_ai.transfer.target.name": "policy",
        "handoff_builder.delegation.depth": 1,
        "handoff_builder.delegation.outcome": "answered",
    }  # fmt: skip
    assert "gen_ai.tool.call.arguments" not in attributes  # sensitive data is off
    caller = parent_of(spans, span)
    assert caller is not None
    assert caller.name == "invoke_agent triage"
    [expert] = named(spans, "invoke_agent policy")
    assert parent_of(spans, expert) is span
    assert measured()["handoff_builder.delegations"] == [
        (
            {
                "handoff_builder.source": "triage",
                "handoff_builder.target": "policy",
                "handoff_builder.delegation.outcome": "answered",
            },
            1,
        )
    ]


async def test_nested_delegation_spans_nest(spans: InMemorySpanExporter) -> None:
    builder, _, _, _ = chain(
        [call_tool("ask_b", task="T1"), reply("A.")],
        [call_tool("ask_c", task="T2"), reply("B.")],
        [reply("C.")],
    )
    await builder.build().run("go")

    [outer] = named(spans, "execute_tool ask_b")
    [inner] = named(spans, "execute_tool ask_c")
    [agent_b] = named(spans, "invoke_agent b")
    [agent_c] = named(spans, "invoke_agent c")
    assert parent_of(spans, agent_b) is outer
    assert parent_of(spans, inner) is agent_b
    assert parent_of(spans, agent_c) is inner
    assert dict(inner.attributes or {})["handoff_builder.delegation.depth"] == 2
    assert dict(inner.attributes or {})["gen_ai.agent.name"] == "b"


# -- 15. deadlines --------------------------------------------------------------------------------


async def test_a_slow_expert_times_out_the_callers_agent_call() -> None:
    builder, triage, policy = policy_desk(
        [call_tool("ask_policy", task=TASK), reply("never sent"), reply("Back again.")],
        [slow(ANSWER, 30)],
    )
    workflow = builder.with_timeouts(agent_call=0.2).build()
    result = (await run_turn(workflow, USER)).result

    assert result.status == "agent_timeout"
    assert result.timeout is not None
    assert (result.timeout.limit, result.timeout.agent) == ("agent_call", "triage")
    assert len(client_of(policy).calls) == 1  # the expert was asked, inside triage's call
    assert result.delegations == ()
    assert rows(result.conversation) == [("user", None, USER)]  # nothing of the cancelled call
    assert [step.kind for step in result.trace] == ["start", "timeout"]

    later = (await run_turn(workflow, "Hello?")).result  # the conversation is still valid
    assert later.text == "never sent"
    assert rows(received(triage).messages) == [("user", None, USER), ("user", None, "Hello?")]


# -- regressions: bugs found in review, fixed ------------------------------------------------------


async def test_max_calls_of_a_nested_delegate_holds_after_an_approval() -> None:
    ran: list[str] = []
    builder, _, _, c = chain(
        [call_tool("ask_b", task="T1"), reply("A done.")],
        [call_tool("ask_c", task="T2"), call_tool("ask_c", task="T3"), reply("B done.")],
        [call_tool("lookup_order", order="A-1"), reply("C done."), reply("C again.")],
        c_tools=[approval_tool(ran)],
        b_to_c={"max_calls": 1},
    )
    workflow = builder.build()
    [request] = requests_of(list(await workflow.run("go")))
    result = result_of(await answer(workflow, request, approved=True))

    assert [(d.task, d.outcome) for d in result.delegations] == [
        ("T2", "answered"),
        ("T3", "refused"),
        ("T1", "answered"),
    ]
    assert len(client_of(c).calls) == 2


async def test_full_history_after_restoring_a_checkpoint_into_the_same_workflow() -> None:
    storage = InMemoryCheckpointStorage()
    asks = [call_tool("ask_policy", task=f"T{n}") for n in (1, 2, 3)]
    builder, _, policy = policy_desk(
        [asks[0], reply("R1"), asks[1], reply("R2"), asks[2], reply("R3")],
        [reply("P1"), reply("P2"), reply("P3")],
        history="full",
    )
    workflow = builder.with_name("tt").build()
    await workflow.run("first question", checkpoint_storage=storage)
    after_first = await storage.get_latest(workflow_name="tt")
    assert after_first is not None
    await workflow.run("second question", checkpoint_storage=storage)
    await workflow.run(checkpoint_id=after_first.checkpoint_id, checkpoint_storage=storage)
    await run_turn(workflow, "third question")

    seen = received(policy)
    assert seen.user_text == "third question"
    assert not seen.sees("second question")


def test_a_delegate_tool_name_clash_names_with_delegate() -> None:
    builder = (
        HandoffWorkflowBuilder(_a).with_delegate(_a, _b).with_delegate(_a, _c, tool_name="ask_b")
    )
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    [problem] = failure.value.problems
    assert "with_delegate" in problem
    assert "handoff tool" not in problem


async def test_delegate_tools_are_offered_in_declaration_order() -> None:
    triage = scripted_agent("triage", reply("Hello."))
    x, y, z = (scripted_agent(name) for name in ("x", "y", "z"))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, x)
        .with_handoff(triage, y)
        .with_delegate(triage, y, "ask y")
        .with_delegate(triage, z, "ask z")
    )
    await run_turn(builder.build(), "go")

    assert received(triage).tool_names == ("handoff_to_x", "handoff_to_y", "ask_y", "ask_z")
    edges = builder.to_mermaid().splitlines()[-2:]
    assert edges == ["    a0 --o|ask_y| a2", "    a0 --o|ask_z| a3"]


# -- paths of the expert's run --------------------------------------------------------------------


async def test_an_expert_that_writes_no_text_is_reported_as_no_answer() -> None:
    builder, triage, _ = policy_desk(
        [call_tool("ask_policy", task=TASK), reply("I could not find out.")], [reply("")]
    )
    turn = await run_turn(builder.build(), USER)
    [delegation] = turn.result.delegations
    assert delegation.result == "policy gave no answer."
    assert results_in(received(triage).messages)[0][1] == "policy gave no answer."


async def test_a_caller_and_an_expert_still_run_their_own_tools() -> None:
    looked_up: list[str] = []

    @tool(name="lookup_customer", description="Find a customer.")
    def lookup_customer(email: str) -> str:
        looked_up.append(email)
        return f"customer {email}: gold"

    triage = scripted_agent(
        "triage",
        call_tool("lookup_customer", email="a@example.com"),
        call_tool("ask_policy", task=TASK),
        reply("Done."),
        tools=[lookup_customer],
    )
    policy = scripted_agent(
        "policy",
        call_tool("lookup_customer", email="b@example.com"),
        reply(ANSWER),
        tools=[lookup_customer],
    )
    builder = HandoffWorkflowBuilder(triage).with_delegate(triage, policy, "refund policy")
    turn = await run_turn(builder.build(), USER)
    assert looked_up == ["a@example.com", "b@example.com"]
    assert turn.result.delegations[0].result == ANSWER
    # The expert's own tool call stays in its messages, not in the shared conversation.
    assert calls_in(turn.result.delegations[0].messages) == ["lookup_customer"]
    assert calls_in(turn.result.conversation) == ["lookup_customer", "ask_policy"]


async def test_a_tool_the_expert_does_not_have_gets_a_result_in_its_messages() -> None:
    builder, _, policy = policy_desk(
        [call_tool("ask_policy", task=TASK), reply("Done.")],
        [respond(call_tool("delete_everything"), "I will not."), reply(ANSWER)],
    )
    turn = await run_turn(builder.build(), USER)
    messages = turn.result.delegations[0].messages
    [(_, result)] = results_in(messages)
    assert "delete_everything is not available to you now" in result
    assert "delete_everything" not in str(calls_in(turn.result.conversation))
    assert len(client_of(policy).calls) >= 1


async def test_an_expert_that_waits_again_after_its_own_expert_answered() -> None:
    """a -> b -> c: c waits for a person; once c answers, b's own tool waits for a person."""
    ran: list[str] = []
    b_tool = approval_tool(ran)
    a = scripted_agent("a", call_tool("ask_b", task="T1"), reply("A done."))
    b = scripted_agent(
        "b",
        call_tool("ask_c", task="T2"),
        call_tool("lookup_order", order="B-1"),
        reply("B done."),
        tools=[b_tool],
    )
    c = scripted_agent(
        "c", call_tool("lookup_order", order="C-1"), reply("C done."), tools=[b_tool]
    )
    builder = (
        HandoffWorkflowBuilder(a).with_delegate(a, b, "b knows").with_delegate(b, c, "c knows")
    )
    workflow = builder.build()
    [first] = requests_of(list(await workflow.run("go")))
    assert first.data.function_call.arguments == '{"order": "C-1"}'
    [second] = requests_of(await answer(workflow, first, approved=True))
    assert second.data.function_call.arguments == '{"order": "B-1"}'
    result = result_of(await answer(workflow, second, approved=True))

    assert ran == ["C-1", "B-1"]
    assert result.text == "A done."
    assert [(d.expert, d.result) for d in result.delegations] == [
        ("c", "C done."),
        ("b", "B done."),
    ]
    # b's second run read c's answer; a read b's.
    assert results_in(received(b, 1).messages)[0][1] == "C done."
    assert results_in(received(a).messages) == [(results_in(result.conversation)[0][0], "B done.")]


# -- a delegate call beside a tool that needs approval ------------------------------------------


async def test_a_delegate_call_beside_a_tool_that_needs_approval_runs_once_approved() -> None:
    ran: list[str] = []
    both = respond(call_tool("ask_policy", task=TASK), call_tool("lookup_order", order="B-2"))
    triage = scripted_agent("triage", both, reply("Done."), tools=[approval_tool(ran)])
    policy = scripted_agent("policy", reply(ANSWER))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "refund policy", history="full")
        .build()
    )
    first = list(await workflow.run(USER))
    # agent_framework asks for the whole batch: the delegate call is approved with the rest.
    assert sorted(str(r.data.function_call.name) for r in requests_of(first)) == [
        "ask_policy",
        "lookup_order",
    ]
    responses = {
        r.request_id: r.data.to_function_approval_response(approved=True)
        for r in requests_of(first)
    }
    result = result_of(list(await workflow.run(responses=responses)))

    assert ran == ["B-2"]
    assert [(d.expert, d.result, d.outcome) for d in result.delegations] == [
        ("policy", ANSWER, "answered")
    ]
    # The expert read the conversation as it was before the batch: no open call in its input.
    assert rows(received(policy).messages) == [("user", None, USER), ("user", "triage", TASK)]
    assert (call_id(both), ANSWER) in results_in(result.conversation)
    assert result.text == "Done."


async def test_a_declined_delegate_call_in_a_batch_tells_the_caller() -> None:
    ran: list[str] = []
    both = respond(call_tool("ask_policy", task=TASK), call_tool("lookup_order", order="B-2"))
    triage = scripted_agent("triage", both, reply("Done."), tools=[approval_tool(ran)])
    policy = scripted_agent("policy")
    workflow = HandoffWorkflowBuilder(triage).with_delegate(triage, policy, "policy").build()
    first = list(await workflow.run(USER))
    responses = {
        r.request_id: r.data.to_function_approval_response(approved=False)
        for r in requests_of(first)
    }
    result = result_of(list(await workflow.run(responses=responses)))
    assert [(d.outcome, d.task) for d in result.delegations] == [("declined", TASK)]
    assert client_of(policy).calls == []
    assert ran == []


async def test_an_approved_delegate_call_whose_expert_waits_in_turn() -> None:
    ran: list[str] = []
    both = respond(call_tool("ask_policy", task=TASK), call_tool("lookup_order", order="B-2"))
    triage = scripted_agent("triage", both, reply("Done."), tools=[approval_tool(ran)])
    policy = scripted_agent(
        "policy",
        call_tool("lookup_order", order="P-9"),
        reply(ANSWER),
        tools=[approval_tool(ran)],
    )
    workflow = HandoffWorkflowBuilder(triage).with_delegate(triage, policy, "policy").build()
    first = list(await workflow.run(USER))
    batch = {
        r.request_id: r.data.to_function_approval_response(approved=True)
        for r in requests_of(first)
    }
    second = list(await workflow.run(responses=batch))
    [inner] = requests_of(second)  # the expert's own approval, now
    assert inner.data.function_call.arguments == '{"order": "P-9"}'
    result = result_of(await answer(workflow, inner, approved=True))

    assert ran == ["B-2", "P-9"]
    assert result.text == "Done."
    assert (call_id(both), ANSWER) in results_in(result.conversation)
    assert_valid(result.conversation)


def assert_valid(messages: Sequence[Message]) -> None:
    """Every function call in ``messages`` has exactly one result, after it."""
    calls: list[str] = []
    results: list[str] = []
    for message in messages:
        for content in message.contents:
            if content.type == "function_call":
                calls.append(str(content.call_id))
            elif content.type == "function_result":
                assert str(content.call_id) in calls, f"a result before its call: {content}"
                results.append(str(content.call_id))
    assert sorted(calls) == sorted(results)


async def test_a_handoff_in_a_batch_whose_delegation_waits_is_followed_once_it_answers() -> None:
    ran: list[str] = []
    batch = respond(
        call_tool("ask_policy", task=TASK),
        handoff_to("billing", goal="Refund it."),
        call_tool("lookup_order", order="T-1"),
    )
    triage = scripted_agent("triage", batch, tools=[approval_tool(ran)])
    billing = scripted_agent("billing", reply("Billing here."))
    policy = scripted_agent(
        "policy", call_tool("lookup_order", order="P-1"), reply(ANSWER), tools=[approval_tool(ran)]
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_delegate(triage, policy, "policy")
        .build()
    )
    first = list(await workflow.run(USER))
    batch_answers = {
        r.request_id: r.data.to_function_approval_response(approved=True)
        for r in requests_of(first)
    }
    [inner] = requests_of(list(await workflow.run(responses=batch_answers)))
    result = result_of(await answer(workflow, inner, approved=True))

    assert ran == ["T-1", "P-1"]
    assert [(h.source, h.target) for h in result.handoffs] == [("triage", "billing")]
    assert result.active_agent == "billing"
    assert result.text.endswith("Billing here.")
    assert received(billing).sees("Goal: Refund it.")
    assert_valid(result.conversation)


# -- fan-out: several delegate calls in one response ---------------------------------------------


def fan_out_desk(experts: int) -> tuple[HandoffWorkflowBuilder, list[int]]:
    """triage asks ``experts`` experts in one response; each expert's tool counts how many
    experts are inside it at once (``peak[0]``) while it yields to the event loop."""
    inside, peak = [0], [0]

    @tool
    async def look_up() -> str:
        """Look something up."""
        inside[0] += 1
        peak[0] = max(peak[0], inside[0])
        await asyncio.sleep(0.05)
        inside[0] -= 1
        return "found"

    names = [f"expert{n}" for n in range(experts)]
    calls = [call_tool(f"ask_{name}", task=f"task {name}") for name in names]
    triage = scripted_agent("triage", respond(*calls), reply("All answered."))
    builder = HandoffWorkflowBuilder(triage)
    for name in names:
        expert = scripted_agent(
            name, call_tool("look_up"), reply(f"{name} says yes."), tools=[look_up]
        )
        builder = builder.with_delegate(triage, expert, f"{name}'s questions")
    return builder, peak


async def test_a_fan_out_runs_every_expert_at_once_by_default() -> None:
    builder, peak = fan_out_desk(4)
    result = (await run_turn(builder.build(), USER)).result
    assert peak[0] == 4
    assert [(d.expert, d.result) for d in result.delegations] == [
        (f"expert{n}", f"expert{n} says yes.") for n in range(4)
    ]


async def test_max_parallel_delegations_bounds_a_fan_out_and_keeps_every_answer() -> None:
    builder, peak = fan_out_desk(4)
    result = (await run_turn(builder.with_max_parallel_delegations(2).build(), USER)).result
    assert peak[0] == 2
    assert sorted((d.expert, d.outcome) for d in result.delegations) == [
        (f"expert{n}", "answered") for n in range(4)
    ]
    assert result.text == "All answered."


def test_max_parallel_delegations_takes_a_positive_number() -> None:
    triage = scripted_agent("triage", reply("hi"))
    with pytest.raises(ValueError, match="limit"):
        HandoffWorkflowBuilder(triage).with_max_parallel_delegations(0)


def three_experts(
    policy_steps: Sequence[ScriptStep],
    legal_steps: Sequence[ScriptStep],
    ledger_steps: Sequence[ScriptStep],
    *,
    policy_tools: Sequence[Any] | None = None,
    legal_timeout: float | None = None,
) -> tuple[HandoffWorkflowBuilder, Agent, list[Step], list[Agent]]:
    """triage asks policy, legal and ledger in one response, then replies "All in."."""
    asks = [call_tool(f"ask_{name}", task=f"{name}?") for name in ("policy", "legal", "ledger")]
    triage = scripted_agent("triage", respond(*asks), reply("All in."))
    policy = scripted_agent("policy", *policy_steps, tools=policy_tools)
    legal = scripted_agent("legal", *legal_steps)
    ledger = scripted_agent("ledger", *ledger_steps)
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "refund policy")
        .with_delegate(triage, legal, "legal questions", timeout=legal_timeout)
        .with_delegate(triage, ledger, "ledger lookups")
    )
    return builder, triage, asks, [policy, legal, ledger]


async def test_one_failing_expert_of_a_fan_out_is_its_own_calls_error() -> None:
    def broken(call: ModelCall) -> Step:
        raise RuntimeError("legal archive down")

    # The first expert answers last: the results still come in call order.
    builder, triage, asks, _ = three_experts(
        [slow("Policy: 30 days.", 0.1)], [broken], [reply("Ledger: paid.")]
    )
    result = (await run_turn(builder.build(), USER)).result

    failed = (
        "Error: legal could not answer (RuntimeError: legal archive down). "
        "Carry on without its answer."
    )
    assert results_in(received(triage).messages) == [
        (call_id(asks[0]), "Policy: 30 days."),
        (call_id(asks[1]), failed),
        (call_id(asks[2]), "Ledger: paid."),
    ]
    assert (result.status, result.text) == ("completed", "All in.")
    assert sorted((d.expert, d.outcome) for d in result.delegations) == [
        ("ledger", "answered"), ("legal", "failed"), ("policy", "answered"),
    ]  # fmt: skip


async def test_an_expert_waiting_for_approval_keeps_the_others_answers_of_its_fan_out() -> None:
    ran: list[str] = []
    lookup = call_tool("lookup_order", order="A-1")
    # policy waits for a person at once; legal and ledger answer after it started waiting.
    builder, triage, asks, (policy, legal, ledger) = three_experts(
        [lookup, reply("Policy: A-1 is paid.")],
        [slow("Legal: fine.", 0.05)],
        [slow("Ledger: paid.", 0.1)],
        policy_tools=[approval_tool(ran)],
    )
    workflow = builder.build()
    first = list(await workflow.run(USER))

    [request] = requests_of(first)
    assert request.data.function_call.name == "lookup_order"
    assert [e for e in first if e.type == HANDOFF_TURN_EVENT] == []
    assert len(client_of(triage).calls) == 1
    answered = [e.data for e in first if isinstance(e.data, DelegationEvent)]
    assert sorted((d.expert, d.result) for d in answered) == [
        ("ledger", "Ledger: paid."), ("legal", "Legal: fine."),
    ]  # fmt: skip

    result = result_of(await answer(workflow, request, approved=True))
    assert ran == ["A-1"]
    assert (len(client_of(legal).calls), len(client_of(ledger).calls)) == (1, 1)  # not again
    assert len(client_of(policy).calls) == 2
    assert results_in(received(triage).messages) == [
        (call_id(asks[0]), "Policy: A-1 is paid."),
        (call_id(asks[1]), "Legal: fine."),
        (call_id(asks[2]), "Ledger: paid."),
    ]
    assert result.text == "All in."
    assert sorted((d.expert, d.outcome) for d in result.delegations) == [
        ("ledger", "answered"), ("legal", "answered"), ("policy", "answered"),
    ]  # fmt: skip
    assert_valid(result.conversation)


async def test_an_expert_past_its_timeout_is_its_own_calls_error_and_the_others_answer() -> None:
    builder, triage, asks, (policy, legal, _) = three_experts(
        [slow("Policy: 30 days.", 0.1)],
        [never_answer(), reply("never read")],
        [reply("Ledger: paid.")],
        legal_timeout=0.3,
    )
    started = time.monotonic()
    turn = await run_turn(builder.build(), USER)
    elapsed = time.monotonic() - started

    timed_out = (
        "Error: legal gave no answer within 0.3 s, its time limit, and was stopped. "
        "Carry on without its answer."
    )
    assert results_in(received(triage).messages) == [
        (call_id(asks[0]), "Policy: 30 days."),
        (call_id(asks[1]), timed_out),
        (call_id(asks[2]), "Ledger: paid."),
    ]
    assert 0.3 <= elapsed < 5
    assert len(client_of(legal).calls) == 1
    assert (turn.result.status, turn.result.text) == ("completed", "All in.")
    assert sorted((d.expert, d.outcome) for d in turn.result.delegations) == [
        ("ledger", "answered"), ("legal", "timed_out"), ("policy", "answered"),
    ]  # fmt: skip
    assert [d.result for d in turn.of_type("handoff_delegated") if d.expert == "legal"] == [
        timed_out
    ]
    assert len(client_of(policy).calls) == 1


async def test_a_delegate_timeout_bounds_each_answer_not_the_wait_for_a_slot() -> None:
    builder, triage, asks, _ = three_experts(
        [slow("Policy: 30 days.", 0.3)], [slow("Legal: fine.", 0.3)], [reply("Ledger: paid.")],
        legal_timeout=0.5,
    )  # fmt: skip
    # One at a time: legal waits 0.3 s for policy's slot, then answers in 0.3 s, within 0.5 s.
    await run_turn(builder.with_max_parallel_delegations(1).build(), USER)
    assert results_in(received(triage).messages)[1] == (call_id(asks[1]), "Legal: fine.")


@pytest.mark.parametrize("timeout", [0, -1.0, True, "5"])
def test_a_delegate_timeout_is_a_positive_number(timeout: Any) -> None:
    triage, policy = scripted_agent("triage"), scripted_agent("policy")
    with pytest.raises(HandoffArgumentError, match="timeout must be a positive number"):
        HandoffWorkflowBuilder(triage).with_delegate(triage, policy, timeout=timeout)


def test_mermaid_draws_a_callers_delegates_as_one_fan_out_with_its_bound() -> None:
    builder, _, _, _ = three_experts([], [], [])
    lines = builder.to_mermaid().splitlines()
    fan_out = (
        "    %% fan-out: triage's ask_policy, ask_legal, ask_ledger in one response run "
        "concurrently ({})"
    )
    assert lines[-4:] == [
        fan_out.format("all at once"),
        "    a0 --o|ask_policy| a1",
        "    a0 --o|ask_legal| a2",
        "    a0 --o|ask_ledger| a3",
    ]
    bounded = builder.with_max_parallel_delegations(2).to_mermaid().splitlines()
    assert bounded[-4] == fan_out.format("at most 2 at a time")
    # One delegate is no fan-out.
    single, _, _ = policy_desk([], [])
    assert "fan-out" not in single.to_mermaid()


async def test_the_delegation_spans_of_one_response_are_overlapping_siblings(
    spans: InMemorySpanExporter,
) -> None:
    builder, _, _, _ = three_experts(
        [slow("Policy.", 0.1)], [slow("Legal.", 0.1)], [slow("Ledger.", 0.1)]
    )
    await builder.build().run(USER)

    tools = [named(spans, f"execute_tool ask_{name}")[0] for name in ("policy", "legal", "ledger")]
    parents = [parent_of(spans, span) for span in tools]
    assert {parent.name if parent else None for parent in parents} == {"invoke_agent triage"}
    assert len({parent.context.span_id for parent in parents if parent and parent.context}) == 1
    starts = [span.start_time or 0 for span in tools]
    ends = [span.end_time or 0 for span in tools]
    assert max(starts) < min(ends)  # all three were open at once
    for span in tools:  # each expert's own run is inside its own delegation span
        expert = str(dict(span.attributes or {})["gen_ai.transfer.target.name"])
        [run] = named(spans, f"invoke_agent {expert}")
        assert parent_of(spans, run) is span
