"""Builder validation: every problem is reported at build(), naming the agents involved."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from agent_framework import Agent, FunctionTool, Message, Workflow, tool

from handoff_builder import (
    GroupChatHost,
    HandoffBuilderError,
    HandoffConfigurationError,
    HandoffWorkflowBuilder,
)
from handoff_builder.testing import ScriptedChatClient, handoff_to, reply, scripted_agent


def problems_of(builder: HandoffWorkflowBuilder) -> tuple[str, ...]:
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert isinstance(failure.value, ValueError)
    assert isinstance(failure.value, HandoffBuilderError)
    return failure.value.problems


def test_self_handoff_is_rejected() -> None:
    a = scripted_agent("a")
    assert problems_of(HandoffWorkflowBuilder(a).with_handoff(a, a)) == (
        "Agent 'a' cannot hand off to itself; remove that handoff.",
    )


def test_duplicate_edge_is_rejected() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    builder = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoffs(a, [b])
    assert problems_of(builder) == (
        "The handoff from 'a' to 'b' is declared twice; keep one declaration.",
    )


def test_target_without_anything_to_describe_it() -> None:
    a = scripted_agent("a")
    blank = Agent(client=ScriptedChatClient(), name=None, description="")
    problems = problems_of(HandoffWorkflowBuilder(a).with_handoff(a, blank))
    assert any(
        p.startswith("Target agent <unnamed agent id=")
        and p.endswith(
            "has no description, name or instructions, and the handoff from 'a' gives no reason; "
            "pass reason= or describe the agent."
        )
        for p in problems
    )


def test_unnamed_and_duplicate_names() -> None:
    a = scripted_agent("a")
    twin1, twin2 = scripted_agent("twin"), scripted_agent("twin")
    unnamed = Agent(client=ScriptedChatClient(), name=None, description="helper")
    problems = problems_of(HandoffWorkflowBuilder(a).add_participants(twin1, twin2, unnamed))
    assert "2 different agents are named 'twin'; participant names must be unique." in problems
    assert any("has no name; give every participant a unique name" in p for p in problems)


def test_non_agent_participant() -> None:
    a = scripted_agent("a")
    problems = problems_of(HandoffWorkflowBuilder(a).add_participants([object()]))  # type: ignore[list-item]
    assert len(problems) == 1
    assert "is a object; handoff workflows need agent_framework.Agent instances" in problems[0]


def test_colliding_sanitised_tool_names() -> None:
    a = scripted_agent("a")
    spaced, underscored = scripted_agent("dup name"), scripted_agent("dup_name")
    problems = problems_of(HandoffWorkflowBuilder(a).with_handoffs(a, [spaced, underscored]))
    assert problems == (
        "Agent 'a' would get two handoff tools named 'handoff_to_dup_name' (to 'dup name' and "
        "'dup_name'); pass tool_name= to with_handoff for one of them.",
    )


def test_collision_with_the_agents_own_tool() -> None:
    @tool(name="handoff_to_b", description="An unrelated tool with an unlucky name.")
    def unlucky() -> str:
        return "x"

    a = scripted_agent("a", tools=[unlucky])
    b = scripted_agent("b")
    assert problems_of(HandoffWorkflowBuilder(a).with_handoff(a, b)) == (
        "Agent 'a' already has a tool named 'handoff_to_b', the name of its handoff tool to 'b'; "
        "rename its tool or pass tool_name=.",
    )
    # A per-edge tool name resolves it.
    HandoffWorkflowBuilder(a).with_handoff(a, b, tool_name="transfer_to_b").build()


def test_invalid_custom_tool_name() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    assert problems_of(HandoffWorkflowBuilder(a).with_handoff(a, b, tool_name="go to b")) == (
        "Tool name 'go to b' for the handoff from 'a' to 'b' must use only [A-Za-z0-9_-] and be "
        "1 to 64 characters long.",
    )


def test_all_problems_are_reported_at_once() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    builder = HandoffWorkflowBuilder(a).with_handoff(a, a).with_handoff(a, b).with_handoff(a, b)
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert len(failure.value.problems) == 2
    assert str(failure.value) == (
        "Invalid handoff workflow (2 problems):\n"
        "  - Agent 'a' cannot hand off to itself; remove that handoff.\n"
        "  - The handoff from 'a' to 'b' is declared twice; keep one declaration."
    )


@pytest.mark.parametrize(
    ("method", "value", "message"),
    [
        ("with_max_iterations", 0, "max_iterations must be at least 1, got 0."),
        ("with_max_handoffs_per_turn", 0, "max_handoffs must be at least 1, got 0."),
        ("with_max_handoffs_per_turn", -2, "max_handoffs must be at least 1, got -2."),
        ("with_max_rejected_handoffs", 0, "max_rejected must be at least 1, got 0."),
    ],
)
def test_caps_below_one(method: str, value: int, message: str) -> None:
    builder = HandoffWorkflowBuilder(scripted_agent("a"))
    with pytest.raises(ValueError, match=message):
        getattr(builder, method)(value)


def test_blank_escalation_message_is_rejected() -> None:
    builder = HandoffWorkflowBuilder(scripted_agent("a"))
    with pytest.raises(ValueError, match="escalation_message must not be blank"):
        builder.with_max_handoffs_per_turn(2, escalation_message="  ")


Call = Callable[[HandoffWorkflowBuilder, Agent], object]
WRONG_ARGUMENTS: list[tuple[Call, str]] = [
    (lambda b, a: b.with_handoff(None, a), "source agents must be an agent"),  # type: ignore[arg-type]
    (lambda b, a: b.with_handoff(a, None), "target agents must be an agent"),  # type: ignore[arg-type]
    (lambda b, a: b.with_handoffs(a, [None]), "One or more target agents are None."),  # type: ignore[list-item]
    (lambda b, a: b.with_handoffs([a, None], a), "One or more source agents are None."),  # type: ignore[list-item]
    (lambda b, a: b.add_participants([None]), "One or more agents are None."),  # type: ignore[list-item]
    (lambda b, a: b.with_handoffs("x", "y"), "with_handoffs takes"),  # type: ignore[call-overload]
]


@pytest.mark.parametrize(("call", "message"), WRONG_ARGUMENTS)
def test_none_and_wrong_arguments_fail_at_once(call: Call, message: str) -> None:
    a = scripted_agent("a")
    with pytest.raises(TypeError, match=message):
        call(HandoffWorkflowBuilder(a), a)


def test_with_handoffs_refuses_keywords_that_could_swap_the_edges() -> None:
    """Positional only: a keyword call is a TypeError, for pyright and at run time."""
    a, b, c = scripted_agent("a"), scripted_agent("b"), scripted_agent("c")
    builder = HandoffWorkflowBuilder(a)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'targets'"):
        builder.with_handoffs(targets=[b, c], source=a)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected keyword argument 'reasn'"):
        builder.with_handoffs([b, c], a, reasn="x")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="takes a list of targets; for one target use"):
        builder.with_handoffs(a, b)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"with_handoffs\(source, targets\) takes no reason"):
        builder.with_handoffs(a, [b], "why")  # type: ignore[call-overload]
    # Nothing was declared by the refused calls; a named reason is accepted.
    builder.with_handoffs([b, c], a, reason="back to the desk")
    assert builder.to_mermaid() == (
        "flowchart LR\n"
        '    a0(["a"])\n'
        '    a1["b"]\n'
        '    a2["c"]\n'
        "    a1 -->|handoff_to_a| a0\n"
        "    a2 -->|handoff_to_a| a0\n"
    )


def test_initial_agent_none() -> None:
    with pytest.raises(TypeError, match="initial_agent must be an agent"):
        HandoffWorkflowBuilder(None)  # type: ignore[arg-type]


def test_name_and_description_land_on_the_workflow() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_name("support")
        .with_description("Customer support desk")
        .with_name("   ")  # blank values are ignored, as in .NET
        .build()
    )
    assert workflow.name == "support"
    assert workflow.description == "Customer support desk"


def test_builder_methods_can_be_called_in_any_order_and_build_twice() -> None:
    a, b = scripted_agent("a", reply("x")), scripted_agent("b")
    builder = (
        HandoffWorkflowBuilder(a).with_max_iterations(5).with_instructions("").with_handoff(a, b)
    )
    first, second = builder.build(), builder.build()
    assert first is not second


def test_many_sources_to_one_target_with_reason() -> None:
    triage, billing, tech = (
        scripted_agent("triage"),
        scripted_agent("billing"),
        scripted_agent("tech"),
    )
    # Valid topology: builds without problems.
    HandoffWorkflowBuilder(triage).with_handoffs(triage, [billing, tech]).with_handoffs(
        [billing, tech], triage, "anything else"
    ).build()


def handoff_tools_of(workflow: Workflow, agent: str) -> list[FunctionTool]:
    host = workflow.get_start_executor()
    assert isinstance(host, GroupChatHost)
    return host._participants[agent].tools  # pyright: ignore[reportPrivateUsage]


async def test_builds_share_their_handoff_tools_but_not_their_conversations() -> None:
    """A handoff tool holds nothing per conversation, so every build of a route reuses it."""
    triage = scripted_agent(
        "triage", handoff_to("billing", goal="One."), handoff_to("billing", goal="Two.")
    )
    billing = scripted_agent("billing", reply("First."), reply("Second."))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    first, second = builder.build(), builder.build()
    [tool] = handoff_tools_of(first, "triage")
    assert handoff_tools_of(second, "triage") == [tool]
    assert handoff_tools_of(second, "triage")[0] is tool

    reworded = HandoffWorkflowBuilder(triage).with_handoff(triage, billing, "Invoices only.")
    [other] = handoff_tools_of(reworded.build(), "triage")
    assert other is not tool
    assert other.description == "Invoices only."

    assert (await first.run("a")).get_outputs()[-1].text == "First."
    assert (await second.run("b")).get_outputs()[-1].text == "Second."
    assert [m.text for m in handoff_history(first)][:1] == ["a"]
    assert [m.text for m in handoff_history(second)][:1] == ["b"]


def handoff_history(workflow: Workflow) -> list[Message]:
    host = workflow.get_start_executor()
    assert isinstance(host, GroupChatHost)
    return list(host.history)
