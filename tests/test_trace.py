"""The per-turn routing trace: every step, and whether the model or code decided it."""

from __future__ import annotations

import asyncio

import pytest

from handoff_builder import (
    ConversationHost,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    RoutingStep,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import call_tool, handoff_to, never_answer, reply, scripted_agent
from tests.helpers import until_called


async def run(builder: HandoffWorkflowBuilder, *messages: str) -> list[HandoffTurnResult]:
    workflow = builder.build()
    results: list[HandoffTurnResult] = []
    for message in messages:
        outputs = (await workflow.run(message)).get_outputs()
        results.append(outputs[-1])
    return results


async def test_a_handoff_then_an_answer() -> None:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing", reply("Refunded."))
    [result] = await run(HandoffWorkflowBuilder(triage).with_handoff(triage, billing), "refund")
    assert result.trace == (
        RoutingStep("start", "code", "initial_agent", None, "triage"),
        RoutingStep("handoff", "model", "handoff_to_billing", "triage", "billing"),
        RoutingStep("end", "model", "reply", "billing"),
    )
    assert result.handoffs[0].decided_by == "model"


async def test_a_hand_back_and_a_refused_call() -> None:
    triage = scripted_agent("triage", handoff_to("billing"), reply("Anything else?"))
    billing = scripted_agent(
        "billing",
        call_tool("handoff_to_nowhere", goal="x"),  # no such tool: refused, billing goes on
        call_tool("transfer_back_to_triage", summary="Refunded."),
        reply("Still billing."),
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_hand_back(triage)
    [first] = await run(builder, "refund")
    assert first.trace == (
        RoutingStep("start", "code", "initial_agent", None, "triage"),
        RoutingStep("handoff", "model", "handoff_to_billing", "triage", "billing"),
        # the refused call: billing got a tool error and went on, in the same reply
        RoutingStep("blocked", "code", "unknown_target", "billing", None),
        RoutingStep("hand_back", "model", "transfer_back_to_triage", "billing", "triage"),
        RoutingStep("end", "model", "reply", "triage"),
    )


async def test_the_remembered_agent_starts_the_next_turn() -> None:
    triage = scripted_agent("triage", handoff_to("billing"))
    billing = scripted_agent("billing", reply("Refunded."), reply("You're welcome."))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    _, second = await run(builder.enable_return_to_previous(), "refund", "thanks")
    assert second.trace == (
        RoutingStep("start", "code", "previous_agent", None, "billing"),
        RoutingStep("end", "model", "reply", "billing"),
    )


async def test_a_cap_is_a_code_step_with_its_limit_and_count() -> None:
    a = scripted_agent("a", handoff_to("b"))
    b = scripted_agent("b", handoff_to("a"))
    builder = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a)
    builder.with_max_handoffs_per_turn(1)
    [result] = await run(builder, "go")
    assert result.status == "handoff_cap"
    assert result.trace[-1] == RoutingStep("escalate", "code", "handoff_cap", "b", None, 1, 1)
    assert all(s.decided_by == "code" for s in result.trace if s.kind in ("start", "escalate"))


async def test_autonomous_continuations_and_the_termination_condition_are_code() -> None:
    worker = scripted_agent("worker", reply("step 1"), reply("step 2"), reply("done"))
    builder = HandoffWorkflowBuilder(worker).with_autonomous_mode(turn_limit=5)
    builder.with_termination_condition(lambda history: history[-1].text == "done")
    [result] = await run(builder, "work")
    assert result.trace == (
        RoutingStep("start", "code", "initial_agent", None, "worker"),
        RoutingStep("continue", "code", "autonomous_mode", "worker", "worker", 5, 1),
        RoutingStep("continue", "code", "autonomous_mode", "worker", "worker", 5, 2),
        RoutingStep("end", "code", "termination_condition", "worker"),
    )


async def test_a_deadline_is_a_code_step() -> None:
    worker = scripted_agent("worker", never_answer())
    [result] = await run(HandoffWorkflowBuilder(worker).with_timeouts(agent_call=0.1), "hi")
    assert result.trace[-1] == RoutingStep("timeout", "code", "agent_call", "worker")


async def test_a_hosted_turn_keeps_its_trace_across_a_resume_and_a_replay() -> None:
    store = InMemoryConversationStore()
    triage = scripted_agent("triage", handoff_to("billing"))
    billing = scripted_agent("billing", never_answer())
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    builder.with_timeouts(agent_call=0.1)
    first = await ConversationHost(builder, store).send("c", "hi", idempotency_key="k")
    assert [s.kind for s in first.trace] == ["start", "handoff", "timeout"]
    replay = await ConversationHost(builder, store).send("c", "hi", idempotency_key="k")
    assert replay.trace == first.trace


async def test_an_abandoned_turn_keeps_its_trace() -> None:
    store = InMemoryConversationStore()
    triage = scripted_agent("triage", handoff_to("billing"))
    billing = scripted_agent("billing", never_answer())
    host = ConversationHost(HandoffWorkflowBuilder(triage).with_handoff(triage, billing), store)
    sending = asyncio.ensure_future(host.send("c", "hi"))
    await until_called(billing)  # it never answers
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    abandoned = await host.abandon("c")
    assert abandoned is not None
    assert [(s.kind, s.by) for s in abandoned.trace] == [
        ("start", "initial_agent"),
        ("handoff", "handoff_to_billing"),
    ]


async def test_a_manager_of_your_own_is_named_in_the_steps_it_decides() -> None:
    from collections.abc import Sequence

    from agent_framework import Message
    from typing_extensions import override

    from handoff_builder import AgentReply, Decision, EndTurn, HandoffManager, NextAgent

    class WriterThenCritic(HandoffManager):
        @override
        async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
            return NextAgent("critic") if reply.agent == "writer" else EndTurn()

    writer, critic = scripted_agent("writer", reply("draft")), scripted_agent("critic", reply("ok"))
    builder = HandoffWorkflowBuilder(writer).add_participants(critic)
    [result] = await run(builder.with_manager(WriterThenCritic), "write")
    assert result.trace[1:] == (
        RoutingStep("route", "code", "WriterThenCritic", "writer", "critic"),
        RoutingStep("end", "code", "WriterThenCritic", "critic"),
    )
