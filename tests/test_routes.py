"""Routes decided by code (``with_route``): after an agent replies, code picks the next one."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from agent_framework import Message

from handoff_builder import (
    HANDOFF_BLOCKED_EVENT,
    AgentReply,
    HandoffConfigurationError,
    HandoffEvent,
    HandoffHookError,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    RoutingStep,
)
from handoff_builder.testing import client_of, handoff_to, received, reply, scripted_agent


async def turn(builder: HandoffWorkflowBuilder, message: str = "write it") -> HandoffTurnResult:
    return (await builder.build().run(message)).get_outputs()[-1]


async def test_a_constant_route_runs_the_next_agent_on_the_reply() -> None:
    writer = scripted_agent("writer", reply("Draft: flush the cache for tenant 7."))
    reviewer = scripted_agent("reviewer", reply("Looks safe."))
    result = await turn(HandoffWorkflowBuilder(writer).with_route(writer, reviewer))
    assert [m.text for m in result.messages] == [
        "Draft: flush the cache for tenant 7.",
        "Looks safe.",
    ]
    assert result.active_agent == "reviewer"
    assert result.trace == (
        RoutingStep("start", "code", "initial_agent", None, "writer"),
        RoutingStep("route", "code", "route:reviewer", "writer", "reviewer"),
        RoutingStep("end", "model", "reply", "reviewer"),
    )
    [hop] = result.handoffs
    assert hop == HandoffEvent("writer", "reviewer", "", "route:reviewer", "", decided_by="code")
    assert "Draft: flush the cache for tenant 7." in received(reviewer).rendered  # it sees the work
    # a route is no tool of the writer's (it has the default mesh's handoff tool: no edge declared)
    assert client_of(writer).calls[0].tool_names == ("handoff_to_reviewer",)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_function_route_picks_by_the_reply(asynchronous: bool) -> None:
    seen: list[tuple[int, str]] = []

    def pick(conversation: Sequence[Message], answer: AgentReply) -> str | None:
        seen.append((len(conversation), answer.agent))
        return "sre" if "outage" in answer.messages[-1].text else None

    async def pick_async(conversation: Sequence[Message], answer: AgentReply) -> str | None:
        return pick(conversation, answer)

    triage = scripted_agent("triage", reply("An outage in eu-west."), reply("A question."))
    sre = scripted_agent("sre", reply("Paging the on-call."))
    builder = HandoffWorkflowBuilder(triage).with_route(
        triage, pick_async if asynchronous else pick
    )
    builder.add_participants(sre)
    workflow = builder.build()
    first = (await workflow.run("help")).get_outputs()[-1]
    assert (first.messages[-1].text, first.trace[1]) == (
        "Paging the on-call.",
        RoutingStep(
            "route", "code", f"route:{'pick_async' if asynchronous else 'pick'}", "triage", "sre"
        ),
    )
    second = (await workflow.run("and?")).get_outputs()[-1]
    assert second.text == "A question."  # None: the turn ends with triage's reply
    assert second.trace[-1].kind == "end"
    assert second.trace[-1].decided_by == "code"
    assert [agent for _, agent in seen] == ["triage", "triage"]


async def test_a_route_to_an_unknown_agent_is_blocked_and_the_turn_ends() -> None:
    triage = scripted_agent("triage", reply("Hmm."))
    other = scripted_agent("other")
    builder = HandoffWorkflowBuilder(triage).with_route(triage, lambda c, r: "delete_database")
    builder.add_participants(other)
    events = [e async for e in builder.build().run("go", stream=True)]
    [blocked] = [e.data for e in events if e.type == HANDOFF_BLOCKED_EVENT]
    assert (blocked.source, blocked.reason, blocked.target) == (
        "triage",
        "unknown_target",
        "delete_database",
    )
    [done] = [e.data for e in events if isinstance(e.data, HandoffTurnResult)]
    assert (done.text, done.status) == ("Hmm.", "completed")
    assert [s.kind for s in done.trace] == ["start", "blocked", "end"]
    assert client_of(other).calls == []


async def test_the_models_handoff_comes_before_the_route() -> None:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing, sre = scripted_agent("billing", reply("Refunded.")), scripted_agent("sre")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_route(triage, sre)
    result = await turn(builder)
    assert result.active_agent == "billing"
    assert client_of(sre).calls == []


async def test_route_hops_count_towards_the_handoff_cap() -> None:
    a = scripted_agent("a", respond_with=lambda call: reply("a again"))
    b = scripted_agent("b", respond_with=lambda call: reply("b again"))
    builder = HandoffWorkflowBuilder(a).with_route(a, b).with_route(b, a)
    result = await turn(builder.with_max_handoffs_per_turn(2))
    assert result.status == "handoff_cap"
    assert result.trace[-1] == RoutingStep("escalate", "code", "handoff_cap", "a", None, 2, 2)
    assert [s.kind for s in result.trace] == ["start", "route", "route", "escalate"]


async def test_a_route_function_that_raises_is_a_hook_error() -> None:
    def broken(conversation: Sequence[Message], answer: AgentReply) -> str:
        raise LookupError("no table")

    triage, sre = scripted_agent("triage", reply("x")), scripted_agent("sre")
    builder = HandoffWorkflowBuilder(triage).with_route(triage, broken).add_participants(sre)
    with pytest.raises(HandoffHookError, match=r"route:broken.*LookupError: no table"):
        await turn(builder)


def test_constant_routes_are_checked_at_build() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    with pytest.raises(HandoffConfigurationError) as failure:
        HandoffWorkflowBuilder(a).with_route(a, "zzz").with_route(b, "b").build()
    assert failure.value.problems == (
        "The route from 'a' names 'zzz', which is not a participant in this handoff workflow; "
        "name one of its agents, or add that agent.",
        "The route from 'b' leads to itself; remove it.",
    )
    with pytest.raises(HandoffConfigurationError, match="has two routes"):
        HandoffWorkflowBuilder(a).with_route(a, b).with_route(a, lambda c, r: None).build()
    message = r"^route must be an agent_framework\.Agent, its name or a function, not int\.$"
    with pytest.raises(TypeError, match=message):
        HandoffWorkflowBuilder(a).with_route(a, 42)  # pyright: ignore[reportArgumentType]


def test_routes_in_the_graph_and_the_lint() -> None:
    a, b, c = scripted_agent("a"), scripted_agent("b"), scripted_agent("c")
    builder = HandoffWorkflowBuilder(a).with_route(a, b).with_handoff(c, a)
    assert "    a0 ==>|route| a1" in builder.to_mermaid()
    assert [f.agents for f in builder.lint()] == [("c",)]  # b is reached by the route, c is not
    dynamic = HandoffWorkflowBuilder(a).with_route(a, lambda conversation, answer: "b")
    dynamic.add_participants(b)
    assert "%% a: route:<lambda>, decided by code at run time" in dynamic.to_mermaid()
    assert dynamic.lint() == []  # a function may lead anywhere
    # ... once it is reached: a function route from an agent nothing leads to proves nothing
    orphan = scripted_agent("orphan")
    unreached = HandoffWorkflowBuilder(a).with_handoff(a, b).with_route(orphan, lambda c, r: "a")
    assert [(f.code, f.agents) for f in unreached.lint()] == [("unreachable-agent", ("orphan",))]


def test_a_route_is_a_way_back_and_a_way_in_for_the_lint() -> None:
    triage, billing, closer = (scripted_agent(n) for n in ("triage", "billing", "closer"))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    builder.with_hand_back(triage, [billing]).with_route(billing, closer)
    [finding] = builder.lint()  # the closer gets the conversation from a route, and keeps it
    assert (finding.code, finding.agents) == ("no-way-back", ("closer",))


def test_a_route_with_a_manager_of_your_own_is_a_warning() -> None:
    from handoff_builder import HandoffManager

    a, b = scripted_agent("a"), scripted_agent("b")
    builder = HandoffWorkflowBuilder(a).with_handoff(a, b).with_route(b, a)
    builder.with_manager(lambda settings: HandoffManager(settings))  # not known to follow routes
    [finding] = builder.lint()
    assert (finding.severity, finding.code, finding.agents) == (
        "warning",
        "route-with-manager",
        ("b",),
    )
