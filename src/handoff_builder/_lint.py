"""Topology lint: findings about a handoff graph that builds, but will not behave as meant.

``build()`` refuses what cannot run (see :mod:`._validation`; ``lint()`` reports those problems
as error findings too); the lint's own rules find what runs but is likely a mistake: an agent
nothing leads to, a specialist that cannot give the conversation back in a hand-back workflow,
tools of one agent that the model cannot tell apart, a tool name that had to be sanitised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from agent_framework import Agent
from typing_extensions import override

from ._delegation import DelegateRoute
from ._manager import CodeRoute
from ._review import Review
from ._routes import MAX_TOOL_NAME_LENGTH, HandoffRoute, is_valid_tool_name, sanitize_tool_name

__all__ = ["LintFinding", "LintSeverity", "lint_graph", "renamed_tools"]

LintSeverity = Literal["error", "warning"]
"""``"error"``: the graph contradicts itself (``build(strict=True)`` refuses it);
``"warning"``: it is likely to confuse the model or the user."""


@dataclass(frozen=True)
class LintFinding:
    """One finding of :meth:`HandoffWorkflowBuilder.lint`.

    ``code`` names the rule (``"unreachable-agent"``, ``"no-way-back"``,
    ``"same-tool-description"``, ``"handoff-and-delegate"``, ``"route-with-manager"``,
    ``"sanitised-tool-name"``..., or, for a problem ``build()`` refuses, ``"delegate-cycle"``,
    ``"self-handoff"``, ``"tool-name-collision"``...);
    ``agents`` are the agents it is about; ``message`` says what is wrong and how to fix it.
    """

    severity: LintSeverity
    code: str
    agents: tuple[str, ...]
    message: str

    @override
    def __str__(self) -> str:
        return f"{self.severity} [{self.code}] {self.message}"


def lint_graph(
    initial: str,
    agents: Mapping[str, Agent],
    routes: Mapping[str, Mapping[str, HandoffRoute]],
    code_routes: Mapping[str, CodeRoute] | None = None,
    safe_agents: Iterable[str] = (),
    delegates: Mapping[str, Mapping[str, DelegateRoute]] | None = None,
    reviews: Mapping[str, Review] | None = None,
) -> list[LintFinding]:
    """Every finding about the compiled graph, errors first, each rule in agent order.

    A route whose function picks the agent at run time may lead anywhere: once the walk from the
    initial agent reaches one, no agent is reported unreachable.
    """
    code = code_routes or {}
    findings = _unreachable(initial, agents, routes, code, frozenset(safe_agents), reviews or {})
    findings += _no_way_back(initial, agents, routes, code)
    findings += _same_descriptions(agents, routes, delegates or {})
    findings += _handoff_and_delegate(routes, delegates or {})
    return sorted(findings, key=lambda finding: finding.severity != "error")


def _unreachable(
    initial: str,
    agents: Mapping[str, Agent],
    routes: Mapping[str, Mapping[str, HandoffRoute]],
    code: Mapping[str, CodeRoute],
    safe_agents: frozenset[str],
    reviews: Mapping[str, Review],
) -> list[LintFinding]:
    # A cap's safe agent is reached by the cap; its edges count too: with a remembered active
    # agent (hosted conversations, enable_return_to_previous) the next message starts there.
    reached = {initial, *safe_agents}
    frontier = [initial, *safe_agents]
    while frontier:
        source = frontier.pop()
        targets = [route.target for route in routes.get(source, {}).values()]
        if source in reviews:  # the reviewer runs after the producer's replies
            targets.append(reviews[source].reviewer)
        if source in code:
            if code[source].target is None:  # a function reached: it may lead anywhere
                return []
            targets.append(str(code[source].target))
        for target in targets:
            if target not in reached:
                reached.add(target)
                frontier.append(target)
    return [
        LintFinding(
            "error",
            "unreachable-agent",
            (name,),
            f"Agent {name!r} cannot be reached from the initial agent {initial!r}: no chain of "
            f"handoffs leads to it, so it never runs. Add a handoff to it (for example "
            f"with_handoff({initial}, {name})) or remove it from the workflow.",
        )
        for name in agents
        if name not in reached
    ]


def _no_way_back(
    initial: str,
    agents: Mapping[str, Agent],
    routes: Mapping[str, Mapping[str, HandoffRoute]],
    code: Mapping[str, CodeRoute],
) -> list[LintFinding]:
    """In a hand-back workflow, a specialist with no edge out keeps the conversation."""
    returns_to = {
        route.target for by in routes.values() for route in by.values() if route.edge.returns
    }
    if not returns_to:  # not a hand-back workflow: specialists that answer and stay are normal
        return []
    receivers = {route.target for by in routes.values() for route in by.values()}
    receivers |= {str(route.target) for route in code.values() if route.target is not None}
    return [
        LintFinding(
            "warning",
            "no-way-back",
            (name,),
            f"Agent {name!r} receives handoffs but has no edge out, in a workflow where other "
            f"agents hand back to {_names(sorted(returns_to))}: once it has the conversation it "
            f"keeps it. Give it a way back (with_hand_back({_names(sorted(returns_to))}, "
            f"[{name}]) or a handoff), or leave it as a final stop on purpose.",
        )
        for name in agents
        if name in receivers and name != initial and not routes.get(name) and name not in code
    ]


def _same_descriptions(
    agents: Mapping[str, Agent],
    routes: Mapping[str, Mapping[str, HandoffRoute]],
    delegates: Mapping[str, Mapping[str, DelegateRoute]],
) -> list[LintFinding]:
    findings: list[LintFinding] = []
    for name, agent in agents.items():
        by_description: dict[str, list[str]] = {}
        tools = [
            *_own_tools(agent),
            *((r.tool_name, r.description) for r in _of(routes, name)),
            *((d.tool_name, d.description) for d in delegates.get(name, {}).values()),
        ]
        for tool, description in tools:
            key = " ".join(description.split()).casefold()
            if key:
                by_description.setdefault(key, []).append(tool)
        for description, names in by_description.items():
            if len(names) > 1:
                findings.append(
                    LintFinding(
                        "warning",
                        "same-tool-description",
                        (name,),
                        f"Agent {name!r} has {len(names)} tools with the same description "
                        f"({_names(names)}: {description!r}): its model cannot tell them apart. "
                        "Pass reason= to with_handoff or with_delegate, or describe the agents "
                        "differently.",
                    )
                )
    return findings


def _handoff_and_delegate(
    routes: Mapping[str, Mapping[str, HandoffRoute]],
    delegates: Mapping[str, Mapping[str, DelegateRoute]],
) -> list[LintFinding]:
    """An agent that may both ask an expert and hand the conversation to it: which one, when?"""
    findings: list[LintFinding] = []
    for caller, by_tool in delegates.items():
        targets = {route.target: route.tool_name for route in _of(routes, caller)}
        for delegate in by_tool.values():
            handoff = targets.get(delegate.expert)
            if handoff is not None:
                findings.append(
                    LintFinding(
                        "warning",
                        "handoff-and-delegate",
                        (caller, delegate.expert),
                        f"Agent {caller!r} can both hand the conversation to {delegate.expert!r} "
                        f"({handoff}) and ask it a question ({delegate.tool_name}): its model "
                        "must guess which one you mean. Keep one, or say in each reason= when "
                        "to use it.",
                    )
                )
    return findings


def renamed_tools(defaults: Iterable[tuple[str, str, str]]) -> list[LintFinding]:
    """A warning per default tool name that had to be changed to be valid.

    ``defaults`` are ``(source, tool noun, unsanitised name)``, one per tool named by default
    (``handoff_to_<target>``, ``ask_<expert>``...): a name with characters outside
    ``[A-Za-z0-9_-]``, or too long, is changed; the model sees the changed one.
    """
    sources: dict[tuple[str, str], list[str]] = {}
    for source, noun, wanted in defaults:
        if not is_valid_tool_name(wanted):
            sources.setdefault((noun, wanted), []).append(source)
    findings: list[LintFinding] = []
    for (noun, wanted), agents in sources.items():
        why: list[str] = []
        if sanitize_tool_name(wanted) != wanted[:MAX_TOOL_NAME_LENGTH]:
            why.append("has characters outside [A-Za-z0-9_-]")
        if len(wanted) > MAX_TOOL_NAME_LENGTH:
            why.append(f"is longer than {MAX_TOOL_NAME_LENGTH} characters")
        findings.append(
            LintFinding(
                "warning",
                "sanitised-tool-name",
                tuple(agents),
                f"The {noun} tool {wanted!r} of {_names([repr(a) for a in agents])} "
                f"{' and '.join(why)}: it is named {sanitize_tool_name(wanted)!r}. Pass "
                "tool_name= to name it yourself, or rename the agent.",
            )
        )
    return findings


def _of(routes: Mapping[str, Mapping[str, HandoffRoute]], name: str) -> Iterable[HandoffRoute]:
    return routes.get(name, {}).values()


def _own_tools(agent: Agent) -> list[tuple[str, str]]:
    options: dict[str, Any] = getattr(agent, "default_options", None) or {}
    tools: Any = options.get("tools") or []
    items: Sequence[Any] = cast("Sequence[Any]", tools) if isinstance(tools, Sequence) else [tools]
    found: list[tuple[str, str]] = []
    for item in items:
        tool_name, description = getattr(item, "name", None), getattr(item, "description", None)
        if isinstance(tool_name, str) and isinstance(description, str):
            found.append((tool_name, description))
    return found


def _names(names: Sequence[str]) -> str:
    return ", ".join(names)
