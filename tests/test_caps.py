"""Every cap: its default, how the defaults compose, and the status and event it leaves."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from agent_framework import Agent, Message, tool
from typing_extensions import override

from handoff_builder import (
    DEFAULT_ESCALATION_MESSAGE,
    AgentReply,
    Decision,
    EndTurn,
    EscalationEvent,
    GroupChatManager,
    HandoffWorkflowBuilder,
    LimitReachedEvent,
    NextAgent,
    RoutingStep,
    TurnStart,
)
from handoff_builder.testing import (
    Step,
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    scripted_agent,
)
from tests.helpers import Turn, run_turn

pytestmark = pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])


def empty_goal() -> Step:
    return handoff_to("billing", goal="")


async def test_a_model_that_keeps_retrying_a_refused_handoff_is_stopped(stream: bool) -> None:
    """Refused attempts are capped per turn (3): the fourth ends the turn with its own reason.

    As in the reported run (max_iterations 3, which caps agent invocations, not the model calls
    of one agent's tool loop), where such a model made 41 model calls.
    """
    triage = scripted_agent("triage", *[empty_goal() for _ in range(10)])
    billing = scripted_agent("billing")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_max_iterations(3).build()
    )

    turn = await run_turn(workflow, "help", stream=stream)

    assert len(client_of(triage).calls) == 4  # the fourth refused call stops the tool loop
    assert client_of(billing).calls == []
    assert turn.result.status == "rejected_handoffs"
    assert turn.result.escalated
    assert turn.escalations == [EscalationEvent("rejected_handoffs", "triage", 3, "billing", "")]
    assert [b.reason for b in turn.blocked] == ["empty_goal"] * 4
    assert turn.result.text.endswith(DEFAULT_ESCALATION_MESSAGE)
    # The model was told why, in the tool result of its last call.
    last = client_of(triage).calls[-1].rendered.splitlines()[-1]
    assert last.endswith("Error: the handoff was not performed because the goal is empty. State "
                         "the user's goal in one sentence in the `goal` argument and call "
                         "handoff_to_billing again.")  # fmt: skip
    results = [
        str(c.result) for m in turn.result.conversation for c in m.contents
        if c.type == "function_result"
    ]  # fmt: skip
    assert results[-1] == (
        "Not transferred: 3 handoff attempts were already refused for this user message. "
        "A human colleague will take over the conversation."
    )


def strays_then(*then: Step) -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """Three refused attempts by triage, two to tools it does not have; then ``then``."""
    triage = scripted_agent(
        "triage",
        handoff_to("refunds", goal="Refund."),  # refunds is billing's target, not triage's
        empty_goal(),
        handoff_to("nobody", goal="Anyone."),
        *then,
    )
    billing = scripted_agent("billing", reply("Billed."))
    refunds = scripted_agent("refunds")
    builder = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, refunds)
    )
    return builder, {"triage": triage, "billing": billing, "refunds": refunds}


async def test_refused_attempts_the_agent_has_no_tool_for_count_too(stream: bool) -> None:
    """They are refused as the agent runs, in order: the fourth refusal escalates at once."""
    builder, agents = strays_then(
        handoff_to("refunds", goal="Refund."), handoff_to("billing", goal="Bill.")
    )

    turn = await run_turn(builder.build(), "refund", stream=stream)

    assert [b.reason for b in turn.blocked] == [
        "not_granted",
        "empty_goal",
        "unknown_target",
        "not_granted",
    ]
    assert turn.result.status == "rejected_handoffs"
    assert turn.escalations == [EscalationEvent("rejected_handoffs", "triage", 3, "refunds", "")]
    assert client_of(agents["triage"]).remaining == 1  # its handoff to billing never came
    assert client_of(agents["billing"]).calls == []


async def test_an_agent_that_answers_after_refused_attempts_keeps_its_answer(
    stream: bool,
) -> None:
    builder, _ = strays_then(reply("I can help with that myself."))

    turn = await run_turn(builder.build(), "refund", stream=stream)

    assert len(turn.blocked) == 3  # every refusal is recorded
    assert turn.result.status == "completed"
    assert turn.result.text == "I can help with that myself."
    assert not turn.result.escalated


async def test_the_agents_own_tools_are_never_refused_handoffs(stream: bool) -> None:
    """A tool of the agent's own whose name looks like a handoff is just a tool."""
    moved: list[int] = []

    @tool(name="transfer_to_savings", description="Move money to savings.")
    def transfer_to_savings(amount: int) -> str:
        moved.append(amount)
        return f"Moved {amount}."

    steps = [call_tool("transfer_to_savings", amount=n) for n in range(1, 6)]
    bank = scripted_agent(
        "bank", *steps, reply("Done, all five moved."), tools=[transfer_to_savings]
    )
    other = scripted_agent("other")
    workflow = HandoffWorkflowBuilder(bank).with_handoff(bank, other).build()

    turn = await run_turn(workflow, "move money", stream=stream)

    assert moved == [1, 2, 3, 4, 5]
    assert turn.blocked == []
    assert (turn.result.status, turn.result.text) == ("completed", "Done, all five moved.")


async def test_the_refused_attempts_cap_is_a_parameter(stream: bool) -> None:
    triage = scripted_agent("triage", empty_goal(), handoff_to("billing", goal="Bill."))
    billing = scripted_agent("billing", reply("Billed."))
    strict = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_max_rejected_handoffs(1)
        .build()
    )
    turn = await run_turn(strict, "bill me", stream=stream)
    assert turn.result.status == "completed"  # one refused attempt is tolerated
    assert turn.result.text == "Billed."

    again = scripted_agent("triage", empty_goal(), empty_goal())
    billing2 = scripted_agent("billing")
    strict2 = (
        HandoffWorkflowBuilder(again)
        .with_handoff(again, billing2)
        .with_max_rejected_handoffs(1)
        .build()
    )
    turn2 = await run_turn(strict2, "bill me", stream=stream)
    assert turn2.result.status == "rejected_handoffs"
    assert len(client_of(again).calls) == 2


def coordinator_desk() -> tuple[HandoffWorkflowBuilder, list[str]]:
    """a hands off to b and c in turn; each hands back: five handoffs are asked for."""
    a = scripted_agent(
        "a", handoff_to("b", goal="1"), handoff_to("c", goal="3"), handoff_to("b", goal="5")
    )
    b = scripted_agent("b", call_tool("transfer_back_to_a", summary="2"))
    c = scripted_agent("c", call_tool("transfer_back_to_a", summary="4"))
    builder = HandoffWorkflowBuilder(a).with_handoffs(a, [b, c]).with_hand_back(a)
    return builder, ["b", "a", "c", "a"]


async def test_with_hand_backs_the_default_handoff_cap_is_four(stream: bool) -> None:
    builder, route = coordinator_desk()

    turn = await run_turn(builder.build(), "go", stream=stream)

    assert [h.target for h in turn.result.handoffs] == route
    assert turn.result.status == "handoff_cap"
    assert turn.escalations[0].limit == 4
    assert turn.escalations[0].requested_target == "b"


async def test_without_hand_backs_the_default_handoff_cap_is_three(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("b", goal="1"), handoff_to("b", goal="3"))
    b = scripted_agent("b", handoff_to("a", goal="2"), handoff_to("a", goal="4"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a).build()

    turn = await run_turn(workflow, "go", stream=stream)

    assert len(turn.result.handoffs) == 3
    assert turn.result.status == "handoff_cap"
    assert turn.escalations[0].limit == 3


async def test_an_explicit_handoff_cap_wins_over_the_hand_back_default(stream: bool) -> None:
    builder, route = coordinator_desk()
    turn = await run_turn(builder.with_max_handoffs_per_turn(2).build(), "go", stream=stream)
    assert [h.target for h in turn.result.handoffs] == route[:2]
    assert turn.escalations[0].limit == 2


async def test_the_default_autonomous_limit_is_reachable(stream: bool) -> None:
    """Autonomous mode with no with_max_iterations: 1 + 50 invocations, then back to the user."""
    worker = scripted_agent("worker", respond_with=lambda call: reply("still working"))
    workflow = HandoffWorkflowBuilder(worker).with_autonomous_mode().build()

    turn = await run_turn(workflow, "work on it", stream=stream)

    assert len(client_of(worker).calls) == 51
    assert turn.result.status == "autonomous_limit"
    assert not turn.result.escalated
    assert turn.of_type("handoff_limit_reached") == [
        LimitReachedEvent("autonomous_turns", "worker", 50)
    ]


async def test_every_agent_of_a_turn_reaches_its_autonomous_limit(stream: bool) -> None:
    """The derived invocation cap leaves room for each agent after a handoff."""
    a = scripted_agent(
        "a",
        *[reply(f"a {n}") for n in range(3)],
        handoff_to("b", goal="Take over."),
    )
    b = scripted_agent("b", respond_with=lambda call: reply("b working"))
    workflow = (
        HandoffWorkflowBuilder(a).with_handoff(a, b).with_autonomous_mode(turn_limit=5).build()
    )

    turn = await run_turn(workflow, "go", stream=stream)

    assert len(client_of(a).calls) == 4
    assert len(client_of(b).calls) == 6  # 1 + its limit of 5
    assert turn.result.status == "autonomous_limit"


async def test_an_explicit_iteration_cap_still_bounds_autonomous_mode(stream: bool) -> None:
    worker = scripted_agent("worker", respond_with=lambda call: reply("still working"))
    workflow = HandoffWorkflowBuilder(worker).with_autonomous_mode().with_max_iterations(10).build()

    turn = await run_turn(workflow, "work on it", stream=stream)

    assert len(client_of(worker).calls) == 10
    assert turn.result.status == "max_iterations"
    assert turn.escalations == [EscalationEvent("max_iterations", "worker", 10)]


async def test_a_handoff_past_the_iteration_cap_is_told_why(stream: bool) -> None:
    a = scripted_agent("a", call_tool("handoff_to_b", goal="Go on."))
    b = scripted_agent("b")
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_max_iterations(1).build()

    turn = await run_turn(workflow, "go", stream=stream)

    assert client_of(b).calls == []
    assert turn.result.status == "max_iterations"
    assert turn.escalations == [EscalationEvent("max_iterations", "a", 1, "b", "Go on.")]
    results = [
        str(c.result) for m in turn.result.conversation for c in m.contents
        if c.type == "function_result"
    ]  # fmt: skip
    assert results == [
        "Not transferred: this user message used all 1 agent invocations it is allowed. "
        "A human colleague will take over the conversation."
    ]
    assert turn.result.handoffs == ()


async def test_a_completed_turn_says_so(stream: bool) -> None:
    a = scripted_agent("a", reply("Hello."))
    turn = await run_turn(HandoffWorkflowBuilder(a).build(), "hi", stream=stream)
    assert turn.result.status == "completed"
    assert turn.escalations == []


# -- agent_framework's function-invocation limit -----------------------------------------------

FRAMEWORK_LIMIT_TEXT = "Function invocation limit reached before a final answer could be produced."


def assert_cut_short(turn: Turn, agent: str) -> None:
    """The turn ended at the tool limit: an escalation, and the framework's text nowhere."""
    assert turn.result.status == "tool_limit"
    assert turn.escalations == [EscalationEvent("tool_limit", agent, 0)]
    assert turn.result.text == DEFAULT_ESCALATION_MESSAGE
    assert turn.result.trace[-1] == RoutingStep("escalate", "code", "tool_limit", agent, None, 0)
    seen = [m.text for m in turn.result.conversation] + [u.text for u in turn.updates]
    assert not [text for text in seen if FRAMEWORK_LIMIT_TEXT in text]


async def test_a_tool_that_keeps_failing_ends_the_turn_at_the_tool_limit(stream: bool) -> None:
    """agent_framework stops a tool loop after 3 failing calls in a row and, when the model
    still gives no answer, replies with its own limit text: never the turn's reply."""

    @tool(name="lookup", description="Look up an order.")
    def lookup(order: str) -> str:
        raise RuntimeError(f"order {order}: database down")

    desk = scripted_agent(
        "desk", *[call_tool("lookup", order="42") for _ in range(4)], tools=[lookup]
    )

    turn = await run_turn(HandoffWorkflowBuilder(desk).build(), "order 42?", stream=stream)

    assert len(client_of(desk).calls) == 4  # the fourth, with tools off, gave no answer
    assert_cut_short(turn, "desk")
    assert turn.result.escalated


async def test_an_unknown_tool_called_again_and_again_ends_at_the_tool_limit(
    stream: bool,
) -> None:
    """A name that is not a handoff and not a tool: agent_framework's error each time."""
    desk = scripted_agent("desk", *[call_tool("search_web", q="x") for _ in range(4)])
    other = scripted_agent("other")
    workflow = HandoffWorkflowBuilder(desk).with_handoff(desk, other).build()

    turn = await run_turn(workflow, "search", stream=stream)

    assert turn.blocked == []  # not a handoff
    assert_cut_short(turn, "desk")
    assert client_of(other).calls == []


async def test_a_tool_loop_past_the_clients_iteration_cap_ends_at_the_tool_limit(
    stream: bool,
) -> None:
    @tool(name="lookup", description="Look up an order.")
    def lookup(order: str) -> str:
        return f"Order {order}: pending."

    desk = scripted_agent(
        "desk", *[call_tool("lookup", order="42") for _ in range(3)], tools=[lookup]
    )
    client_of(desk).function_invocation_configuration["max_iterations"] = 2

    turn = await run_turn(HandoffWorkflowBuilder(desk).build(), "order 42?", stream=stream)

    assert len(client_of(desk).calls) == 3  # two rounds, then one with tools off
    assert_cut_short(turn, "desk")


async def test_a_model_that_answers_with_tools_off_keeps_its_answer(stream: bool) -> None:
    """The limit text stands in only for a missing answer: an answer the model gave stands."""

    @tool(name="lookup", description="Look up an order.")
    def lookup(order: str) -> str:
        raise RuntimeError(f"order {order}: database down")

    desk = scripted_agent(
        "desk",
        *[call_tool("lookup", order="42") for _ in range(3)],
        reply("I cannot reach the order system right now."),
        tools=[lookup],
    )

    turn = await run_turn(HandoffWorkflowBuilder(desk).build(), "order 42?", stream=stream)

    assert received(desk).options.get("tool_choice") == "none"
    assert turn.result.status == "completed"
    assert turn.result.text == "I cannot reach the order system right now."


async def test_a_manager_of_your_own_cannot_end_a_cut_short_turn_as_completed(
    stream: bool,
) -> None:
    """The host escalates, whatever the manager, as it does past max_iterations."""

    class AnswerOnce(GroupChatManager):
        @override
        async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
            return NextAgent("desk")

        @override
        async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
            return EndTurn()

    @tool(name="lookup", description="Look up an order.")
    def lookup(order: str) -> str:
        raise RuntimeError(f"order {order}: database down")

    desk = scripted_agent(
        "desk", *[call_tool("lookup", order="42") for _ in range(4)], tools=[lookup]
    )
    workflow = HandoffWorkflowBuilder(desk).with_manager(lambda _: AnswerOnce()).build()

    turn = await run_turn(workflow, "order 42?", stream=stream)

    assert_cut_short(turn, "desk")
