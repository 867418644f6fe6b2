"""Check what a builder recorded and resolve it by agent name: the plan ``build()`` assembles.

:func:`survey` returns every problem ``build()`` refuses (error findings, all at once) and, when
the agents can be told apart by name, the plan with the topology lint's findings. ``lint()``
reports both; ``build()`` and ``to_mermaid()`` raise on the problems (:func:`plan_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from agent_framework import Agent

from ._arguments import label
from ._config import AgentRef, BuildConfig, DelegateEdge, Edge
from ._delegation import DelegateRoute
from ._handoff_manager import HandoffManager
from ._lint import LintFinding, lint_graph, renamed_tools
from ._manager import AutonomousMode, CodeRoute
from ._remote import is_remote, remote_url
from ._reply_tool import ReplyTool
from ._review import REVIEW_TOOL_KINDS, Review
from ._routes import MAX_TOOL_NAME_LENGTH, HandoffRoute, default_tool_name, is_valid_tool_name
from ._settings import DELEGATE_TOOL_PREFIX, PLAIN, EdgePolicy
from ._validation import (
    delegate_problems,
    edge_problems,
    handoff_description,
    own_tool_names,
    participant_problems,
    problem,
    remote_problems,
    review_problems,
    tool_name_problems,
)
from .exceptions import HandoffConfigurationError

__all__ = ["Plan", "lint", "plan_of", "survey"]

ToolNames = dict[Any, list[tuple[str, Any, str]]]
"""Per agent, the tools the workflow may offer it: ``(tool name, target, kind)``."""


class Plan(NamedTuple):
    """A configuration resolved by agent name: what the workflow is assembled from."""

    initial: str
    code_routes: dict[str, CodeRoute]
    agents: dict[str, Agent]
    routes: dict[str, dict[str, HandoffRoute]]
    policies: dict[str, dict[str, EdgePolicy]]
    autonomous: AutonomousMode | None
    output_agents: frozenset[str] | None
    intermediate_agents: frozenset[str]
    findings: tuple[LintFinding, ...] = ()
    delegates: dict[str, dict[str, DelegateRoute]] = {}  # noqa: RUF012 - a NamedTuple default
    experts: dict[str, Agent] = {}  # noqa: RUF012 - the agents that answer delegates, by name
    reviews: dict[str, Review] = {}  # noqa: RUF012 - by producer
    replies: dict[str, ReplyTool] = {}  # noqa: RUF012 - the reply tool, by agent that has it


def lint(config: BuildConfig) -> list[LintFinding]:
    """Every finding at once: what ``build()`` refuses, then the topology lint's, errors first."""
    problems, plan = survey(config)
    findings = [*problems, *(plan.findings if plan is not None else ())]
    return sorted(findings, key=lambda finding: finding.severity != "error")


def plan_of(config: BuildConfig) -> Plan:
    """The plan of a configuration that builds.

    Raises:
        HandoffConfigurationError: every problem found.
    """
    problems, plan = survey(config)
    if problems or plan is None:
        raise HandoffConfigurationError([found.message for found in problems])
    return plan


def survey(config: BuildConfig) -> tuple[list[LintFinding], Plan | None]:
    """The problems ``build()`` refuses, and the plan (``None``: agents without unique names)."""
    participants = list(config.participants.values())
    edges = _all_edges(config, participants)
    in_graph = {id(agent) for agent in participants}
    experts = [d.expert for d in _distinct_delegates(config) if id(d.expert) not in in_graph]
    naming = participant_problems(participants + list({id(e): e for e in experts}.values()))
    problems = naming + edge_problems(edges) + delegate_problems(config.delegates, in_graph)
    problems += remote_problems(edges)
    safe_agents: dict[str, Any] = {
        cap: outcome for cap, outcome in config.cap_outcomes.items() if isinstance(outcome, Agent)
    }
    problems += review_problems(config.reviews, safe_agents)
    tool_names = _tool_names(config, edges)
    replies = _reply_agents(config, tool_names, problems)
    problems += tool_name_problems(tool_names)
    autonomous = _autonomous(config, participants, problems)
    code_routes = _code_routes(config, participants, problems)
    output_agents = _designated(config.output_from, config, problems)
    intermediate_agents = _designated(config.intermediate_from, config, problems) or frozenset()
    if naming:  # nothing can be resolved by name
        return problems, None
    plan = _resolve(config, participants, _compiled_edges(edges, tool_names), code_routes)
    plan = plan._replace(
        autonomous=autonomous,
        output_agents=output_agents,
        intermediate_agents=intermediate_agents,
        replies=replies,
    )
    return problems, plan


def _all_edges(config: BuildConfig, participants: Sequence[Any]) -> list[Edge]:
    """Declared handoff edges, else the default mesh, then hand-backs.

    Routes are not handoffs, and reviewers take no part in the mesh: they only review.
    """
    reviewers = {id(reviewer) for _, reviewer, _ in config.reviews}
    meshed = [agent for agent in participants if id(agent) not in reviewers]
    edges = config.edges or [
        Edge(source, target) for source in meshed for target in meshed if source is not target
    ]
    for hand_back in config.hand_backs:
        coordinator = hand_back.coordinator
        specialists = hand_back.specialists
        if specialists is None:
            specialists = [edge.target for edge in edges if edge.source is coordinator]
        edges = edges + [
            Edge(
                specialist,
                coordinator,
                hand_back.reason,
                hand_back.tool_name,
                "hand_back",
                hand_back.payload,
                hand_back.policy,
            )
            for specialist in specialists
        ]
    return edges


def _distinct_delegates(config: BuildConfig) -> list[DelegateEdge]:
    """The delegates, each pair once (a duplicate is a problem of its own)."""
    delegated: dict[tuple[int, int], DelegateEdge] = {}
    for delegate in config.delegates:
        delegated.setdefault((id(delegate.caller), id(delegate.expert)), delegate)
    return list(delegated.values())


def _tool_names(config: BuildConfig, edges: Sequence[Edge]) -> ToolNames:
    """The tools each agent may be offered: handoffs (not those never offered), delegates, reviews.

    A handoff declared ``is_enabled=False`` is never offered: it takes no name (see
    :func:`_compiled_edges`).
    """
    tool_names: ToolNames = {}
    distinct = {(id(e.source), id(e.target), e.kind): e for e in reversed(edges)}
    for edge in reversed(distinct.values()):  # a duplicate edge is a problem of its own
        if edge.policy.is_enabled is not False:
            tool_names.setdefault(edge.source, []).append((tool_name(edge), edge.target, "handoff"))
    for delegate in _distinct_delegates(config):
        tool_names.setdefault(delegate.caller, []).append(
            (delegate.tool, delegate.expert, "delegate")
        )
    for reviewer in {id(r): r for _, r, _ in config.reviews}.values():
        tool_names.setdefault(reviewer, []).extend(
            (tool, None, "review") for tool in REVIEW_TOOL_KINDS
        )
    return tool_names


def _reply_agents(
    config: BuildConfig, tool_names: ToolNames, problems: list[LintFinding]
) -> dict[str, ReplyTool]:
    """The reply tool by agent that gets it; each gets it among ``tool_names`` too.

    Every agent offered a handoff, or those named: a named agent with no handoff to offer, or no
    participant, is a problem, and so is a name that is no valid tool name.
    """
    settings = config.reply_tool
    if settings is None:
        return {}
    if not is_valid_tool_name(settings.name):
        problems.append(
            problem(
                "invalid-tool-name",
                [],
                f"The reply tool's name {settings.name!r} (with_reply_tool) must use only "
                f"[A-Za-z0-9_-] and be 1 to {MAX_TOOL_NAME_LENGTH} characters long.",
            )
        )
    hands_off = [
        agent
        for agent, tools in tool_names.items()
        if not is_remote(agent) and any(kind == "handoff" for _, _, kind in tools)
    ]
    chosen = hands_off
    if settings.agents is not None:
        offered = {id(agent) for agent in hands_off}
        chosen = [agent for agent in settings.agents if id(agent) in offered]
        for agent in settings.agents:
            if id(agent) not in config.participants:
                problems.append(
                    problem(
                        "not-a-participant",
                        [agent],
                        f"with_reply_tool names agent {label(agent)}, which is not a participant "
                        "in this handoff workflow; add it with add_participants or a handoff.",
                    )
                )
            elif id(agent) not in offered:
                problems.append(
                    problem(
                        "no-handoff-tools",
                        [agent],
                        f"with_reply_tool names agent {label(agent)}, which has no handoff "
                        "tools: the reply tool is offered beside them. Give it a handoff, or "
                        "leave it out of with_reply_tool.",
                    )
                )
    reply = ReplyTool(settings.name, settings.description)
    for agent in chosen:
        tool_names[agent].append((settings.name, None, "reply"))
    return {str(agent.name): reply for agent in chosen}


def _compiled_edges(edges: Sequence[Edge], tool_names: Mapping[Any, Sequence[Any]]) -> list[Edge]:
    """The edges that become routes.

    A handoff declared ``is_enabled=False`` is never offered, so it takes part in no name check:
    it is left out when its tool name is another tool's of its source (an offered handoff, a
    delegate or review tool, the agent's own), and kept otherwise, so that a call to it anyway
    is blocked as ``disabled``. ``tool_names`` are the names of the tools that may be offered.
    """
    taken: dict[int, set[str]] = {}
    kept: list[Edge] = []
    for edge in edges:
        if edge.policy.is_enabled is False:
            names = taken.get(id(edge.source))
            if names is None:
                names = {name for name, _, _ in tool_names.get(edge.source, ())}
                names |= own_tool_names(edge.source)
                taken[id(edge.source)] = names
            if tool_name(edge) in names:
                continue
            names.add(tool_name(edge))
        kept.append(edge)
    return kept


def _resolve(
    config: BuildConfig,
    participants: Sequence[Agent],
    edges: Sequence[Edge],
    code_routes: dict[str, CodeRoute],
) -> Plan:
    """The configuration by agent name, with the lint's findings."""
    routes: dict[str, dict[str, HandoffRoute]] = {}
    policies: dict[str, dict[str, EdgePolicy]] = {}
    for edge in edges:
        source, target = str(edge.source.name), str(edge.target.name)
        tool = tool_name(edge)
        description = handoff_description(edge) or target
        routes.setdefault(source, {})[tool] = HandoffRoute(
            source, target, tool, description, edge.kind, edge.payload, remote_url(edge.target)
        )
        if not edge.policy.is_plain:
            policies.setdefault(source, {})[tool] = edge.policy
    delegates: dict[str, dict[str, DelegateRoute]] = {}
    for delegate in _distinct_delegates(config):
        caller, expert = str(delegate.caller.name), str(delegate.expert.name)
        description = handoff_description(Edge(delegate.caller, delegate.expert, delegate.reason))
        delegates.setdefault(caller, {})[delegate.tool] = DelegateRoute(
            caller, expert, delegate.tool, description or expert, delegate.payload,
            delegate.history, delegate.approval, delegate.max_calls, delegate.timeout,
        )  # fmt: skip
    reviews = {
        str(producer.name): Review(str(producer.name), str(reviewer.name), rounds)
        for producer, reviewer, rounds in config.reviews
    }
    plan = Plan(
        str(config.initial.name),
        code_routes,
        {str(agent.name): agent for agent in participants},
        routes,
        policies,
        None,
        None,
        frozenset(),
        (),
        delegates,
        {str(d.expert.name): d.expert for d in config.delegates},
        reviews,
    )
    return plan._replace(findings=tuple(_findings(config, plan, edges)))


def _findings(config: BuildConfig, plan: Plan, edges: Sequence[Edge]) -> list[LintFinding]:
    """The topology lint's findings about the plan, errors first."""
    offered = {  # a handoff declared is_enabled=False leads nowhere
        source: {
            tool: route
            for tool, route in by.items()
            if plan.policies.get(source, {}).get(tool, PLAIN).is_enabled is not False
        }
        for source, by in plan.routes.items()
    }
    safe = [str(o.name) for o in config.cap_outcomes.values() if isinstance(o, Agent)]
    findings = lint_graph(
        plan.initial, plan.agents, offered, plan.code_routes, safe, plan.delegates, plan.reviews
    )
    findings += renamed_tools(_named_by_default(edges, _distinct_delegates(config)))
    findings += [
        LintFinding(
            "warning",
            "review-and-route",
            (producer,),
            f"The route from {producer!r} never runs: its replies go to its reviewer "
            f"{plan.reviews[producer].reviewer!r}, and an approved reply ends the turn. Remove "
            "the route, or route from another agent.",
        )
        for producer in plan.reviews
        if producer in plan.code_routes
    ]
    findings = _with_manager_findings(config, findings, plan.reviews, plan.code_routes)
    return sorted(findings, key=lambda finding: finding.severity != "error")


def _named_by_default(
    edges: Sequence[Edge], delegates: Iterable[DelegateEdge]
) -> list[tuple[str, str, str]]:
    """The tools named by default: (source, tool noun, the name before it is sanitised)."""
    named = [
        (str(e.source.name), e.edge.noun, e.edge.tool_prefix + str(e.target.name))
        for e in edges
        if e.tool_name is None
    ]
    named += [
        (str(d.caller.name), "delegate", DELEGATE_TOOL_PREFIX + str(d.expert.name))
        for d in delegates
        if d.tool_name is None
    ]
    return named


def _with_manager_findings(
    config: BuildConfig,
    findings: list[LintFinding],
    reviews: Mapping[str, Review],
    code_routes: Mapping[str, CodeRoute],
) -> list[LintFinding]:
    """The findings with a manager of your own.

    No agent is unreachable (it may pick any), and the routes and reviews that only a
    HandoffManager follows are warned of.
    """
    factory = config.manager_factory
    if factory is None:
        return findings
    findings = [f for f in findings if f.code != "unreachable-agent"]
    if isinstance(factory, type) and issubclass(factory, HandoffManager):
        return findings
    findings += [
        LintFinding(
            "warning",
            "review-with-manager",
            (producer,),
            f"The review of {producer!r} by {review.reviewer!r} runs only if your manager "
            "(with_manager) is a HandoffManager or reads settings.reviews: it decides who "
            "speaks. Pass a HandoffManager subclass itself, or remove the review.",
        )
        for producer, review in reviews.items()
    ]
    findings += [
        LintFinding(
            "warning",
            "route-with-manager",
            (source,),
            f"The route from {source!r} is followed only if your manager (with_manager) is "
            "a HandoffManager or reads settings.code_routes: it decides who speaks. Pass a "
            "HandoffManager subclass itself, or remove the route.",
        )
        for source in code_routes
    ]
    return findings


def _code_routes(
    config: BuildConfig, participants: Sequence[Any], problems: list[LintFinding]
) -> dict[str, CodeRoute]:
    """``with_route`` routes by source name; a constant target must be a participant."""
    names = {str(getattr(agent, "name", "")) for agent in participants}
    found: dict[str, CodeRoute] = {}
    for source, route in config.code_routes:
        source_name = str(getattr(source, "name", ""))
        if source_name in found:
            problems.append(
                problem(
                    "two-routes",
                    [source],
                    f"Agent {label(source)} has two routes (with_route); keep one: a single "
                    "function can choose between several agents.",
                )
            )
            continue
        if callable(route) and not isinstance(route, Agent):
            name = getattr(route, "__name__", type(route).__name__)
            found[source_name] = CodeRoute(source_name, str(name), function=cast(Any, route))
            continue
        target = str(route.name) if isinstance(route, Agent) else str(route)
        if target not in names:
            problems.append(
                problem(
                    "not-a-participant",
                    [source, target],
                    f"The route from {label(source)} names {target!r}, which is not a "
                    "participant in this handoff workflow; name one of its agents, or add that "
                    "agent.",
                )
            )
        elif target == source_name:
            problems.append(
                problem(
                    "self-route",
                    [source],
                    f"The route from {label(source)} leads to itself; remove it.",
                )
            )
        else:
            found[source_name] = CodeRoute(source_name, target, target=target)
    return found


def _designated(
    chosen: list[Any] | None, config: BuildConfig, problems: list[LintFinding]
) -> frozenset[str] | None:
    """Names of the agents in an output designation; non-participants are problems."""
    if chosen is None:
        return None
    for agent in chosen:
        if id(agent) not in config.participants:
            problems.append(
                problem(
                    "not-a-participant",
                    [agent],
                    f"Output designation references agent {label(agent)}, which is not a "
                    "participant in this handoff workflow.",
                )
            )
    return frozenset(str(getattr(agent, "name", "")) for agent in chosen)


def tool_name(edge: Edge) -> str:
    """The edge's tool name: the one given, else its kind's default for the target."""
    return edge.tool_name or default_tool_name(edge.edge, str(getattr(edge.target, "name", "")))


def _autonomous(
    config: BuildConfig, participants: Sequence[Any], problems: list[LintFinding]
) -> AutonomousMode | None:
    settings = config.autonomous
    if settings is None:
        return None
    by_id = {id(agent): agent for agent in participants}
    names = {str(getattr(agent, "name", "")) for agent in participants}

    def name_of(ref: AgentRef) -> str:
        if isinstance(ref, str):
            if ref not in names:
                problems.append(
                    problem(
                        "not-a-participant",
                        [ref],
                        f"Autonomous mode names agent {ref!r}, which is not a participant in "
                        "this handoff workflow.",
                    )
                )
            return ref
        if id(ref) not in by_id:
            problems.append(
                problem(
                    "not-a-participant",
                    [ref],
                    f"Autonomous mode names agent {label(ref)}, which is not a participant in "
                    "this handoff workflow; add it with add_participants or a handoff.",
                )
            )
        return str(getattr(ref, "name", ""))

    return AutonomousMode(
        turn_limit=settings.turn_limit,
        continuation_prompt=settings.continuation_prompt,
        agents=frozenset(name_of(a) for a in settings.agents) if settings.agents else None,
        agent_turn_limits={name_of(a): n for a, n in settings.agent_turn_limits},
        agent_continuation_prompts={name_of(a): p for a, p in settings.agent_continuation_prompts},
    )
