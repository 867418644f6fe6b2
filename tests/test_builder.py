"""Builder validation: every problem is reported at build(), naming the agents involved."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import pytest
from agent_framework import Agent, FunctionTool, Message, Workflow, tool

from handoff_builder import (
    AgentReply,
    GroupChatHost,
    HandoffArgumentError,
    HandoffBuilderError,
    HandoffConfigurationError,
    HandoffContext,
    HandoffManager,
    HandoffWorkflowBuilder,
    HookSignatureError,
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
    (lambda b, a: b.with_handoff(None, a), "source must be an agent_framework.Agent, not None."),  # type: ignore[arg-type]
    (lambda b, a: b.with_handoff(a, None), "target must be an agent_framework.Agent, not None."),  # type: ignore[arg-type]
    (lambda b, a: b.with_handoffs(a, [None]), "One or more target agents are None."),  # type: ignore[list-item]
    (lambda b, a: b.with_handoffs([a, None], a), "One or more source agents are None."),  # type: ignore[list-item]
    (lambda b, a: b.add_participants([None]), "One or more agents are None."),  # type: ignore[list-item]
    (lambda b, a: b.with_handoffs([a], [a]),  # type: ignore[call-overload]
     "with_handoffs takes (source, [targets]) or ([sources], target); got list and list."),
    (lambda b, a: b.with_handoffs("x", a),  # type: ignore[call-overload]
     "sources must be an agent_framework.Agent or a list of them, not a str ('x'): pass the "
     "agent itself, not its name."),
]  # fmt: skip


@pytest.mark.parametrize(("call", "message"), WRONG_ARGUMENTS)
def test_none_and_wrong_arguments_fail_at_once(call: Call, message: str) -> None:
    a = scripted_agent("a")
    with pytest.raises(HandoffArgumentError) as failure:
        call(HandoffWorkflowBuilder(a), a)
    assert str(failure.value) == message
    assert isinstance(failure.value, TypeError)


def not_agents() -> dict[str, object]:
    """What users pass where an agent goes: a workflow, the workflow as an agent, a name."""
    a, b = scripted_agent("a"), scripted_agent("b")
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).build()
    return {"workflow": workflow, "workflow agent": workflow.as_agent(), "name": "billing"}


# Every builder method that takes agents, with a non-agent `x` in each place: the argument named.
NOT_AN_AGENT: list[tuple[str, Callable[[HandoffWorkflowBuilder, Agent, object], object]]] = [
    ("initial_agent", lambda b, a, x: HandoffWorkflowBuilder(x)),  # type: ignore[arg-type]
    ("agents[1]", lambda b, a, x: b.add_participants(a, x)),  # type: ignore[arg-type]
    ("agents[0][1]", lambda b, a, x: b.add_participants([a, x])),  # type: ignore[list-item]
    ("source", lambda b, a, x: b.with_handoff(x, a)),  # type: ignore[arg-type]
    ("target", lambda b, a, x: b.with_handoff(a, x)),  # type: ignore[arg-type]
    ("targets[0]", lambda b, a, x: b.with_handoffs(a, [x])),  # type: ignore[list-item]
    ("sources[1]", lambda b, a, x: b.with_handoffs([a, x], a)),  # type: ignore[list-item]
    ("target", lambda b, a, x: b.with_handoffs([a], x)),  # type: ignore[call-overload]
    ("coordinator", lambda b, a, x: b.with_hand_back(x)),  # type: ignore[arg-type]
    ("specialists[0]", lambda b, a, x: b.with_hand_back(a, [x])),  # type: ignore[list-item]
    ("caller", lambda b, a, x: b.with_delegate(x, a)),  # type: ignore[arg-type]
    ("expert", lambda b, a, x: b.with_delegate(a, x)),  # type: ignore[arg-type]
    ("producer", lambda b, a, x: b.with_review(x, a)),  # type: ignore[arg-type]
    ("reviewer", lambda b, a, x: b.with_review(a, x)),  # type: ignore[arg-type]
    ("source", lambda b, a, x: b.with_route(x, a)),  # type: ignore[arg-type]
    ("agents[0]", lambda b, a, x: b.with_output_from(x)),  # type: ignore[arg-type]
    ("agents[0]", lambda b, a, x: b.with_intermediate_output_from(x)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("kind", ["workflow", "workflow agent", "name"])
@pytest.mark.parametrize(("argument", "call"), NOT_AN_AGENT)
def test_a_non_agent_is_refused_by_the_method_it_is_given_to(
    argument: str, call: Callable[[HandoffWorkflowBuilder, Agent, object], object], kind: str
) -> None:
    a = scripted_agent("a")
    builder = HandoffWorkflowBuilder(a)
    thing = not_agents()[kind]
    with pytest.raises(HandoffArgumentError) as failure:
        call(builder, a, thing)
    error = failure.value
    assert isinstance(error, TypeError)
    assert error.argument == argument
    if kind == "name":
        assert str(error).endswith("not a str ('billing'): pass the agent itself, not its name.")
    else:
        name = type(thing).__name__
        assert str(error) == (
            f"{argument} must be an agent_framework.Agent"
            + (" or a list of them" if argument in {"agents[0]", "agents[1]"} else "")
            + f", not {name}: a handoff workflow runs each agent with its own handoff tools and "
            "middleware, which only an Agent takes. Pass the Agent itself, or give an Agent a "
            f"tool that runs the {name}."
        )
    assert list(builder._config.participants.values()) == [a]  # pyright: ignore[reportPrivateUsage]


def test_a_workflow_as_a_target_names_the_argument() -> None:
    """The issue's case: a workflow passed as an agent is not 'not iterable'."""
    a = scripted_agent("a")
    workflow = not_agents()["workflow"]
    with pytest.raises(TypeError) as failure:
        HandoffWorkflowBuilder(a).with_handoff(a, workflow)  # type: ignore[arg-type]
    assert str(failure.value) == (
        "target must be an agent_framework.Agent, not HandoffWorkflow: a handoff workflow runs "
        "each agent with its own handoff tools and middleware, which only an Agent takes. Pass "
        "the Agent itself, or give an Agent a tool that runs the HandoffWorkflow."
    )


OtherCall = Callable[[HandoffWorkflowBuilder, object], object]
OTHER_ARGUMENTS: list[tuple[OtherCall, str, str]] = [
    (
        lambda b, x: b.with_max_iterations(5, outcome=x),  # type: ignore[arg-type]
        "outcome",
        "outcome must be a CapOutcome or an agent_framework.Agent (the safe agent), not "
        "WorkflowAgent.",
    ),
    (
        lambda b, x: b.with_blocked_handoff_outcome(x),  # type: ignore[arg-type]
        "outcome",
        "outcome must be a CapOutcome or an agent_framework.Agent (the safe agent), not "
        "WorkflowAgent.",
    ),
    (
        lambda b, x: b.with_route(b.initial_agent, x),  # type: ignore[arg-type]
        "route",
        "route must be an agent_framework.Agent, its name or a function, not WorkflowAgent.",
    ),
    (
        lambda b, x: b.with_autonomous_mode(agents=[x]),  # type: ignore[list-item]
        "agents[0]",
        "agents[0] must be an agent_framework.Agent or an agent's name, not WorkflowAgent.",
    ),
    (
        lambda b, x: b.with_autonomous_mode(agent_turn_limits={x: 2}),  # type: ignore[dict-item]
        "a key of agent_turn_limits",
        "a key of agent_turn_limits must be an agent_framework.Agent or an agent's name, not "
        "WorkflowAgent.",
    ),
]


@pytest.mark.parametrize(("call", "argument", "message"), OTHER_ARGUMENTS)
def test_agent_or_other_arguments_name_a_non_agent(
    call: Callable[[HandoffWorkflowBuilder, object], object], argument: str, message: str
) -> None:
    builder = HandoffWorkflowBuilder(scripted_agent("a"))
    with pytest.raises(HandoffArgumentError) as failure:
        call(builder, not_agents()["workflow agent"])
    assert (failure.value.argument, str(failure.value)) == (argument, message)


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
    with pytest.raises(
        TypeError, match=r"^initial_agent must be an agent_framework\.Agent, not None\.$"
    ):
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


# -- functions are checked when they are given -------------------------------------------------


def audit(context: HandoffContext, ticket: str) -> None:
    del context, ticket


def test_an_on_handoff_with_the_wrong_parameters_is_refused_where_the_edge_is_declared() -> None:
    triage, billing = scripted_agent("triage"), scripted_agent("billing")
    builder = HandoffWorkflowBuilder(triage)
    with pytest.raises(HookSignatureError) as failure:
        builder.with_handoff(triage, billing, on_handoff=audit)  # type: ignore[arg-type]
    error = failure.value
    assert isinstance(error, TypeError)
    assert (error.hook, error.argument, error.source, error.target) == (
        "on_handoff",
        "on_handoff",
        "triage",
        "billing",
    )
    assert str(error) == (
        "The on_handoff of the handoff from 'triage' to 'billing' is called with one argument, "
        "a HandoffContext; audit(context, ticket) cannot take it"
        " (missing a required argument: 'ticket')."
    )
    assert list(builder._config.participants.values()) == [triage]  # pyright: ignore[reportPrivateUsage]


def needs_nothing() -> bool:
    return True


async def keyword_only(*, context: HandoffContext) -> bool:
    del context
    return True


Declare = Callable[[HandoffWorkflowBuilder, Agent, Agent], object]
WRONG_SIGNATURES: list[tuple[Declare, str, str]] = [
    (
        lambda b, s, t: b.with_handoff(s, t, is_enabled=needs_nothing),  # type: ignore[arg-type]
        "is_enabled",
        "The is_enabled of the handoff from 'a' to 'b' is called with one argument, a "
        "HandoffContext; needs_nothing() cannot take it (too many positional "
        "arguments).",
    ),
    (
        lambda b, s, t: b.with_handoffs(s, [t], approval=keyword_only),  # type: ignore[arg-type]
        "approval",
        "The approval of the handoff from 'a' to 'b' is called with one argument, a "
        "HandoffContext; keyword_only(*, context) cannot take it "
        "(too many positional arguments).",
    ),
    (
        lambda b, s, t: b.with_handoffs([s], t, on_handoff=lambda: None),  # type: ignore[arg-type]
        "on_handoff",
        "The on_handoff of the handoff from 'a' to 'b' is called with one argument, a "
        "HandoffContext; <lambda>() cannot take it (too many positional arguments).",
    ),
    (
        lambda b, s, t: b.with_hand_back(s, [t], on_handoff=audit),  # type: ignore[arg-type]
        "on_handoff",
        "The on_handoff of the hand-back to 'a' is called with one argument, a "
        "HandoffContext; audit(context, ticket) cannot take it"
        " (missing a required argument: 'ticket').",
    ),
    (
        lambda b, s, t: b.with_route(s, lambda conversation: "b"),  # type: ignore[arg-type]
        "route",
        "The route of 'a' is called with two arguments, the conversation and the AgentReply; "
        "<lambda>(conversation) cannot take them (too many positional arguments).",
    ),
    (
        lambda b, s, t: b.with_termination_condition(lambda conversation, reply: False),  # type: ignore[arg-type]
        "condition",
        "The termination condition is called with one argument, the conversation; "
        "<lambda>(conversation, reply) cannot take it (missing a required argument: "
        "'reply').",
    ),
    (
        lambda b, s, t: b.with_manager(lambda: None),  # type: ignore[arg-type]
        "factory",
        "The manager factory is called with one argument, the ManagerSettings; <lambda>() "
        "cannot take it (too many positional arguments).",
    ),
]


@pytest.mark.parametrize(("declare", "hook", "message"), WRONG_SIGNATURES)
def test_every_function_the_builder_takes_is_checked_when_given(
    declare: Callable[[HandoffWorkflowBuilder, Agent, Agent], object], hook: str, message: str
) -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    builder = HandoffWorkflowBuilder(a)
    with pytest.raises(HookSignatureError) as failure:
        declare(builder, a, b)
    assert (failure.value.hook, str(failure.value)) == (hook, message)
    assert list(builder._config.participants.values()) == [a]  # nothing was declared  # pyright: ignore[reportPrivateUsage]
    assert builder._config.edges == []  # pyright: ignore[reportPrivateUsage]


class Gate:
    """A predicate as a bound method and as a callable object."""

    def allows(self, context: HandoffContext) -> bool:
        return bool(context)

    async def __call__(self, context: HandoffContext, extra: int = 0) -> bool:
        return extra == 0


def test_functions_that_take_their_arguments_in_other_ways_are_accepted() -> None:
    a, b, c = scripted_agent("a"), scripted_agent("b"), scripted_agent("c")

    def anything(*args: object, **kwargs: object) -> None:
        del args, kwargs

    def flagged(flag: bool, context: HandoffContext) -> bool:
        return flag and bool(context)

    def route(conversation: Sequence[Message], reply: AgentReply, *more: object) -> None:
        del conversation, reply, more

    builder = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b, on_handoff=anything, is_enabled=Gate().allows, approval=Gate())
        .with_handoff(a, c, is_enabled=functools.partial(flagged, True))
        .with_route(b, route)
        .with_termination_condition(bool)  # a built-in whose signature cannot be read
        .with_manager(HandoffManager)
    )
    builder.build()


def test_other_wrong_types_are_argument_errors_too() -> None:
    builder = HandoffWorkflowBuilder(scripted_agent("a"))
    with pytest.raises(HandoffArgumentError, match=r"^max_iterations must be an int, not str\.$"):
        builder.with_max_iterations("3")  # type: ignore[arg-type]
    with pytest.raises(
        HandoffArgumentError,
        match=r"^a key of agent_turn_limits must be an agent or its name, not None\.$",
    ):
        builder.with_autonomous_mode(agent_turn_limits={None: 2})  # type: ignore[dict-item]
