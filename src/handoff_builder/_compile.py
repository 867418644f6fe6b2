"""Compile a recorded builder configuration into a workflow: validate, resolve, assemble."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from agent_framework import Agent, FunctionTool, WorkflowBuilder
from typing_extensions import override

from ._delegation import (
    DEFAULT_MAX_DELEGATION_DEPTH,
    DELEGATE_TOOL_PREFIX,
    DelegateRoute,
    HistoryMode,
    make_delegate_tool,
)
from ._handoff_manager import AutonomousMode, HandoffManager
from ._hooks import DEFAULT_HOOK_TIMEOUT, PLAIN, EdgePolicy
from ._host import (
    DEFAULT_AGENT_TIMEOUT,
    DEFAULT_ESCALATION_MESSAGE,
    DEFAULT_REVIEW_ESCALATION_MESSAGE,
    DEFAULT_TURN_TIMEOUT,
    HOST_ID,
    GroupChatHost,
    Participant,
)
from ._instructions import DEFAULT_HANDOFF_INSTRUCTIONS, render_instructions
from ._lint import LintFinding, lint_graph, renamed_tools
from ._logging import ArgumentLogging
from ._manager import (
    DEFAULT_MAX_HANDOFFS_PER_TURN,
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_MAX_REJECTED_HANDOFFS,
    CapOutcome,
    CodeRoute,
    GroupChatManager,
    ManagerSettings,
    TerminationCondition,
)
from ._review import REVIEW_TOOL_KINDS, Review, review_tools
from ._routes import HandoffRoute, default_tool_name, sanitize_tool_name
from ._tools import make_handoff_tool
from ._validation import (
    Edge,
    delegate_problems,
    edge_problems,
    handoff_description,
    label,
    own_tool_names,
    participant_problems,
    review_problems,
    tool_name_problems,
)
from ._views import HandoffToolCallFiltering
from ._workflow import HandoffWorkflow, specialise
from .exceptions import HandoffConfigurationError

AgentRef = Any  # an Agent, or a participant's name
ManagerFactory = Callable[[ManagerSettings], GroupChatManager]

DEFAULT_MAX_HANDOFFS_WITH_HAND_BACK = 4
"""The per-message cap when the workflow has hand-back edges (the hand-back pattern's default)."""


class HandBack(NamedTuple):
    """A declared hand-back: ``specialists`` (None: every agent the coordinator hands off to)."""

    coordinator: Any
    specialists: list[Any] | None
    reason: str | None
    tool_name: str | None
    payload: Any = None
    policy: EdgePolicy = PLAIN


class DelegateEdge(NamedTuple):
    """A declared delegate: ``caller`` may ask ``expert`` through a tool (see ``with_delegate``)."""

    caller: Any
    expert: Any
    reason: str | None = None
    tool_name: str | None = None
    payload: Any = None
    history: HistoryMode = "none"
    approval: bool = False
    max_calls: int | None = None

    @property
    def tool(self) -> str:
        """The tool's name: the one given, else ``ask_<expert name>``, sanitised."""
        name = str(getattr(self.expert, "name", "") or "")
        return self.tool_name or sanitize_tool_name(DELEGATE_TOOL_PREFIX + name)


class AutonomousSettings(NamedTuple):
    """``with_autonomous_mode`` arguments, resolved to agent names at build time."""

    turn_limit: int
    continuation_prompt: str
    agents: list[AgentRef] | None
    agent_turn_limits: list[tuple[AgentRef, int]]
    agent_continuation_prompts: list[tuple[AgentRef, str]]


@dataclass
class BuildConfig:
    """Everything a builder records; ``compile_workflow`` turns it into a workflow.

    ``None`` caps are derived at build time (see :func:`effective_caps`).
    """

    initial: Any
    participants: dict[int, Any]
    edges: list[Edge] = field(default_factory=list[Edge])
    hand_backs: list[HandBack] = field(default_factory=list[HandBack])
    instructions: str = DEFAULT_HANDOFF_INSTRUCTIONS
    max_iterations: int | None = None
    max_handoffs: int | None = None
    max_rejected: int = DEFAULT_MAX_REJECTED_HANDOFFS
    escalation_message: str = DEFAULT_ESCALATION_MESSAGE
    name: str | None = None
    description: str | None = None
    filtering: HandoffToolCallFiltering = HandoffToolCallFiltering.HANDOFF_ONLY
    return_to_previous: bool = False
    termination_condition: TerminationCondition | None = None
    autonomous: AutonomousSettings | None = None
    output_from: list[Any] | None = None
    intermediate_from: list[Any] = field(default_factory=list[Any])
    manager_factory: ManagerFactory | None = None
    argument_logging: ArgumentLogging = field(default_factory=ArgumentLogging)
    agent_timeout: float | None = DEFAULT_AGENT_TIMEOUT
    turn_timeout: float | None = DEFAULT_TURN_TIMEOUT
    hook_timeout: float | None = DEFAULT_HOOK_TIMEOUT
    code_routes: list[tuple[Any, Any]] = field(default_factory=list[tuple[Any, Any]])
    cap_outcomes: dict[str, Any] = field(default_factory=dict[str, Any])
    delegates: list[DelegateEdge] = field(default_factory=list[DelegateEdge])
    max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH
    reviews: list[tuple[Any, Any, int]] = field(default_factory=list[tuple[Any, Any, int]])
    checkpoint_storage: Any = None


class _HopEdgeNotice(logging.Filter):
    """Drops agent_framework's warning about the host's self-loop edge, which is deliberate.

    When a run checkpoints, the host sends itself one message per hop so that every agent
    invocation is its own superstep (and checkpoint); agent_framework warns about every self-loop
    at build time.
    """

    def __init__(self, executor_id: str) -> None:
        super().__init__()
        self._prefix = f"Self-loop detected: Executor '{executor_id}'"

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self._prefix)


# The logger agent_framework's workflow validation writes to (a name only; nothing is imported).
logging.getLogger("agent_framework._workflows._validation").addFilter(_HopEdgeNotice(HOST_ID))


class _Plan(NamedTuple):
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


class Caps(NamedTuple):
    """The caps a build uses, explicit or derived."""

    max_iterations: int
    max_handoffs_per_turn: int


def effective_caps(
    config: BuildConfig,
    routes: Mapping[str, Mapping[str, HandoffRoute]],
    autonomous: AutonomousMode | None,
) -> Caps:
    """The caps the workflow runs with: the explicit ones, else the defaults that compose.

    * Handoffs per user message: 4 when the workflow has hand-back edges (hand-backs count, and
      the hand-back pattern needs a round trip more), else 3.
    * Agent invocations per user message: 40; with autonomous mode, enough for every agent that
      runs in a turn to reach its autonomous limit: (handoff cap + 1) x (1 + largest limit), so
      that the invocation cap never cuts an autonomous run short before the other caps would.
    """
    handoffs = config.max_handoffs
    if handoffs is None:
        has_hand_back = any(r.edge.returns for by in routes.values() for r in by.values())
        handoffs = (
            DEFAULT_MAX_HANDOFFS_WITH_HAND_BACK if has_hand_back else DEFAULT_MAX_HANDOFFS_PER_TURN
        )
    iterations = config.max_iterations
    if iterations is None:
        iterations = DEFAULT_MAX_ITERATIONS
        if autonomous is not None:
            iterations = max(iterations, (handoffs + 1) * (1 + autonomous.largest_limit))
    return Caps(iterations, handoffs)


def compile_workflow(
    config: BuildConfig,
    *,
    strict: bool = False,
    report: Callable[[Sequence[LintFinding]], None] | None = None,
) -> HandoffWorkflow:
    """Validate ``config`` (all problems at once) and assemble the workflow.

    The lint's findings go to ``report``; with ``strict`` its errors are problems too.
    """
    plan = _plan(config)
    if strict and any(finding.severity == "error" for finding in plan.findings):
        raise HandoffConfigurationError(
            [str(finding) for finding in plan.findings if finding.severity == "error"]
        )
    if report is not None and plan.findings:
        report(plan.findings)
    caps = effective_caps(config, plan.routes, plan.autonomous)
    settings = ManagerSettings(
        initial_agent=plan.initial,
        agents=tuple(plan.agents),
        routes=plan.routes,
        agent_tools={name: frozenset(own_tool_names(a)) for name, a in plan.agents.items()},
        max_iterations=caps.max_iterations,
        max_handoffs_per_turn=caps.max_handoffs_per_turn,
        max_rejected_handoffs=config.max_rejected,
        return_to_previous=config.return_to_previous,
        autonomous=plan.autonomous,
        termination_condition=config.termination_condition,
        code_routes=plan.code_routes,
        cap_outcomes={
            cap: outcome if isinstance(outcome, CapOutcome) else str(outcome.name)
            for cap, outcome in config.cap_outcomes.items()
        },
        reviews=plan.reviews,
    )
    manager = (config.manager_factory or HandoffManager)(settings)
    if not isinstance(manager, GroupChatManager):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"The manager factory returned a {type(manager).__name__}, not a GroupChatManager."
        )
    reviewers = {review.reviewer for review in plan.reviews.values()}
    participants = {
        name: _participant(
            agent,
            plan.routes.get(name, {}),
            plan.policies.get(name, {}),
            config.instructions,
            plan.delegates.get(name, {}),
            reviewer=name in reviewers,
        )
        for name, agent in plan.agents.items()
    }
    experts = {
        name: _participant(agent, {}, {}, "", plan.delegates.get(name, {}))
        for name, agent in plan.experts.items()
    }
    host = GroupChatHost(
        participants=participants,
        manager=manager,
        apology=config.escalation_message,
        filtering=config.filtering,
        handoff_tools=_handoff_tools(plan),
        output_agents=plan.output_agents,
        intermediate_agents=plan.intermediate_agents,
        argument_logging=config.argument_logging,
        workflow_name=config.name or "handoff",
        agent_timeout=config.agent_timeout,
        turn_timeout=config.turn_timeout,
        hook_timeout=config.hook_timeout,
        experts=experts,
        max_delegation_depth=config.max_delegation_depth,
        reviewed=frozenset(plan.reviews) if isinstance(manager, HandoffManager) else frozenset(),
        apologies=(
            {"review_rounds": DEFAULT_REVIEW_ESCALATION_MESSAGE}
            if config.escalation_message == DEFAULT_ESCALATION_MESSAGE
            else None
        ),
    )
    builder = WorkflowBuilder(
        start_executor=host,
        name=config.name,
        description=config.description,
        max_iterations=manager.max_iterations + 2,
        checkpoint_storage=config.checkpoint_storage,
    )
    workflow = specialise(builder.add_edge(host, host).build(), host)
    workflow.checkpoints = config.checkpoint_storage is not None
    return workflow


def _participant(
    agent: Agent,
    routes: Mapping[str, HandoffRoute],
    policies: dict[str, EdgePolicy],
    instructions: str,
    delegates: Mapping[str, DelegateRoute],
    *,
    reviewer: bool = False,
) -> Participant:
    """An agent as the host runs it.

    Its handoff tools (with their instructions), its delegates and, for a reviewer, the review
    tools.
    """
    delegate_tools: list[FunctionTool] = [make_delegate_tool(route) for route in delegates.values()]
    if reviewer:
        delegate_tools.extend(review_tools())
    if not routes:
        return Participant(agent, tools=delegate_tools, delegates=delegates, reviewer=reviewer)
    options: dict[str, Any] = {"allow_multiple_tool_calls": False}
    text = render_instructions(instructions, list(routes))
    if text.strip():
        options["instructions"] = text
    return Participant(
        agent,
        tools=[*(make_handoff_tool(route) for route in routes.values()), *delegate_tools],
        options=options,
        routes=routes,
        policies=policies,
        delegates=delegates,
        reviewer=reviewer,
        instructions=instructions,
    )


def _handoff_tools(plan: _Plan) -> frozenset[str]:
    """The tools other agents' views filter as handoffs: handoff tools, and the review tools."""
    names = {name for by in plan.routes.values() for name in by}
    if plan.reviews:
        names.update(REVIEW_TOOL_KINDS)
    return frozenset(names)


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


def _plan(config: BuildConfig) -> _Plan:
    participants = list(config.participants.values())
    edges = [
        edge
        for edge in _all_edges(config, participants)
        if isinstance(edge.source, Agent) and isinstance(edge.target, Agent)
    ]
    in_graph = {id(agent) for agent in participants}
    expert_agents = list(
        {id(d.expert): d.expert for d in config.delegates if id(d.expert) not in in_graph}.values()
    )
    problems = participant_problems(participants + expert_agents) + edge_problems(edges)
    problems += delegate_problems(config.delegates, in_graph)
    safe_agents: dict[str, Any] = {
        cap: outcome for cap, outcome in config.cap_outcomes.items() if isinstance(outcome, Agent)
    }
    problems += review_problems(config.reviews, safe_agents)
    tool_names: dict[Any, list[tuple[str, Any, str]]] = {}
    distinct = {(id(e.source), id(e.target), e.kind): e for e in reversed(edges)}
    for edge in reversed(distinct.values()):  # a duplicate edge is reported once, above
        if edge.policy.is_enabled is not False:  # never offered: its name is free (see below)
            tool_names.setdefault(edge.source, []).append(
                (_tool_name(edge), edge.target, "handoff")
            )
    delegated: dict[tuple[int, int], DelegateEdge] = {}
    for delegate in config.delegates:  # a duplicate is reported once, above
        delegated.setdefault((id(delegate.caller), id(delegate.expert)), delegate)
    for delegate in delegated.values():
        tool_names.setdefault(delegate.caller, []).append(
            (delegate.tool, delegate.expert, "delegate")
        )
    for reviewer in {id(r): r for _, r, _ in config.reviews}.values():
        tool_names.setdefault(reviewer, []).extend(
            (tool, None, "review") for tool in REVIEW_TOOL_KINDS
        )
    problems += tool_name_problems(tool_names)
    autonomous, autonomous_problems = _autonomous(config, participants)
    problems += autonomous_problems
    code_routes = _code_routes(config, participants, problems)
    output_agents = _designated(config.output_from, config, problems)
    intermediate_agents = _designated(config.intermediate_from, config, problems) or frozenset()
    if problems:
        raise HandoffConfigurationError(problems)
    routes: dict[str, dict[str, HandoffRoute]] = {}
    policies: dict[str, dict[str, EdgePolicy]] = {}
    compiled = _compiled_edges(edges, tool_names)
    for edge in compiled:
        source, target = str(edge.source.name), str(edge.target.name)
        tool = _tool_name(edge)
        description = handoff_description(edge) or target
        routes.setdefault(source, {})[tool] = HandoffRoute(
            source, target, tool, description, edge.kind, edge.payload
        )
        if not edge.policy.is_plain:
            policies.setdefault(source, {})[tool] = edge.policy
    agents = {str(agent.name): agent for agent in participants}
    experts = {str(d.expert.name): d.expert for d in config.delegates}
    delegates: dict[str, dict[str, DelegateRoute]] = {}
    for delegate in delegated.values():
        caller, expert = str(delegate.caller.name), str(delegate.expert.name)
        description = handoff_description(Edge(delegate.caller, delegate.expert, delegate.reason))
        delegates.setdefault(caller, {})[delegate.tool] = DelegateRoute(
            caller, expert, delegate.tool, description or expert, delegate.payload,
            delegate.history, delegate.approval, delegate.max_calls,
        )  # fmt: skip
    initial = str(config.initial.name)
    reviews = {
        str(producer.name): Review(str(producer.name), str(reviewer.name), rounds)
        for producer, reviewer, rounds in config.reviews
    }
    safe = [str(o.name) for o in config.cap_outcomes.values() if isinstance(o, Agent)]
    offered = {  # a handoff declared is_enabled=False leads nowhere
        source: {
            tool: route
            for tool, route in by.items()
            if policies.get(source, {}).get(tool, PLAIN).is_enabled is not False
        }
        for source, by in routes.items()
    }
    findings = lint_graph(initial, agents, offered, code_routes, safe, delegates, reviews)
    findings += renamed_tools(_named_by_default(compiled, delegated.values()))
    findings += [
        LintFinding(
            "warning",
            "review-and-route",
            (producer,),
            f"The route from {producer!r} never runs: its replies go to its reviewer "
            f"{reviews[producer].reviewer!r}, and an approved reply ends the turn. Remove the "
            "route, or route from another agent.",
        )
        for producer in reviews
        if producer in code_routes
    ]
    findings = _with_manager_findings(config, findings, reviews, code_routes)
    return _Plan(
        initial,
        code_routes,
        agents,
        routes,
        policies,
        autonomous,
        output_agents,
        intermediate_agents,
        tuple(findings),
        delegates,
        experts,
        reviews,
    )


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


def _compiled_edges(
    edges: Sequence[Edge], tool_names: Mapping[Any, Sequence[tuple[str, Any, str]]]
) -> list[Edge]:
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
            if _tool_name(edge) in names:
                continue
            names.add(_tool_name(edge))
        kept.append(edge)
    return kept


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
    config: BuildConfig, participants: Sequence[Any], problems: list[str]
) -> dict[str, CodeRoute]:
    """``with_route`` routes by source name; a constant target must be a participant."""
    names = {str(getattr(agent, "name", "")) for agent in participants}
    found: dict[str, CodeRoute] = {}
    for source, route in config.code_routes:
        source_name = str(getattr(source, "name", ""))
        if source_name in found:
            problems.append(
                f"Agent {label(source)} has two routes (with_route); keep one: a single function "
                "can choose between several agents."
            )
            continue
        if callable(route) and not isinstance(route, Agent):
            name = getattr(route, "__name__", type(route).__name__)
            found[source_name] = CodeRoute(source_name, str(name), function=cast(Any, route))
            continue
        target = str(route.name) if isinstance(route, Agent) else str(route)
        if target not in names:
            problems.append(
                f"The route from {label(source)} names {target!r}, which is not a participant in "
                "this handoff workflow; name one of its agents, or add that agent."
            )
        elif target == source_name:
            problems.append(f"The route from {label(source)} leads to itself; remove it.")
        else:
            found[source_name] = CodeRoute(source_name, target, target=target)
    return found


def lint(config: BuildConfig) -> list[LintFinding]:
    """The topology lint's findings (after the checks that make ``build()`` fail)."""
    return list(_plan(config).findings)


def _designated(
    chosen: list[Any] | None, config: BuildConfig, problems: list[str]
) -> frozenset[str] | None:
    """Names of the agents in an output designation; non-participants are problems."""
    if chosen is None:
        return None
    for agent in chosen:
        if id(agent) not in config.participants:
            problems.append(
                f"Output designation references agent {label(agent)}, which is not a "
                "participant in this handoff workflow."
            )
    return frozenset(str(getattr(agent, "name", "")) for agent in chosen)


def _tool_name(edge: Edge) -> str:
    return edge.tool_name or default_tool_name(edge.edge, str(getattr(edge.target, "name", "")))


def _autonomous(
    config: BuildConfig, participants: Sequence[Any]
) -> tuple[AutonomousMode | None, list[str]]:
    settings = config.autonomous
    if settings is None:
        return None, []
    by_id = {id(agent): agent for agent in participants}
    names = {str(getattr(agent, "name", "")) for agent in participants}
    problems: list[str] = []

    def name_of(ref: AgentRef) -> str:
        if isinstance(ref, str):
            if ref not in names:
                problems.append(
                    f"Autonomous mode names agent {ref!r}, which is not a participant in this "
                    "handoff workflow."
                )
            return ref
        if id(ref) not in by_id:
            problems.append(
                f"Autonomous mode names agent {label(ref)}, which is not a participant in this "
                "handoff workflow; add it with add_participants or a handoff."
            )
        return str(getattr(ref, "name", ""))

    mode = AutonomousMode(
        turn_limit=settings.turn_limit,
        continuation_prompt=settings.continuation_prompt,
        agents=frozenset(name_of(a) for a in settings.agents) if settings.agents else None,
        agent_turn_limits={name_of(a): n for a, n in settings.agent_turn_limits},
        agent_continuation_prompts={name_of(a): p for a, p in settings.agent_continuation_prompts},
    )
    return mode, problems


def _outcome_comments(config: BuildConfig) -> list[str]:
    """Mermaid comments naming each cap's safe agent (an outcome, not an edge)."""
    return [
        f"    %% {cap}: the safe agent {outcome.name} answers"
        for cap, outcome in config.cap_outcomes.items()
        if isinstance(outcome, Agent)
    ]


def to_mermaid(config: BuildConfig) -> str:
    """The handoff graph as a Mermaid flowchart (validated like ``build()``)."""
    plan = _plan(config)
    names = [*plan.agents, *(name for name in plan.experts if name not in plan.agents)]
    ids = {name: f"a{index}" for index, name in enumerate(names)}
    lines = ["flowchart LR"]
    for name, node in ids.items():
        shape = f'{node}(["{name}"])' if name == plan.initial else f'{node}["{name}"]'
        if name not in plan.agents:  # an expert that only answers delegated tasks
            shape = f'{node}[["{name}"]]'
        lines.append(f"    {shape}")
    for source, routes in plan.routes.items():
        for route in routes.values():
            arrow = route.edge.arrow
            lines.append(f"    {ids[source]} {arrow}|{route.tool_name}| {ids[route.target]}")
    for producer, review in plan.reviews.items():
        lines.append(f"    {ids[producer]} <-->|review| {ids[review.reviewer]}")
    lines += _outcome_comments(config)
    for caller, by_tool in plan.delegates.items():
        for delegate in by_tool.values():
            lines.append(f"    {ids[caller]} --o|{delegate.tool_name}| {ids[delegate.expert]}")
    for source, code in plan.code_routes.items():
        if code.target is not None:
            lines.append(f"    {ids[source]} ==>|route| {ids[code.target]}")
        else:
            lines.append(f"    %% {source}: route:{code.name}, decided by code at run time")
    return "\n".join(lines) + "\n"
