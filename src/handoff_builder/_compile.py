"""Compile a recorded builder configuration into a workflow: validate, resolve, assemble."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent_framework import Agent, WorkflowBuilder
from typing_extensions import override

from ._filtering import HandoffToolCallFiltering
from ._group_chat import DEFAULT_MAX_ITERATIONS, TerminationCondition
from ._host import DEFAULT_ESCALATION_MESSAGE, HOST_ID, GroupChatHost, Participant
from ._manager import DEFAULT_MAX_HANDOFFS_PER_TURN, AutonomousMode, HandoffManager
from ._naming import DEFAULT_HANDOFF_INSTRUCTIONS, hand_back_tool_name, handoff_tool_name
from ._tools import HandoffRoute, HandoffToolMiddleware, make_handoff_tool
from ._validation import (
    Edge,
    edge_problems,
    handoff_description,
    label,
    participant_problems,
    tool_name_problems,
)
from ._workflow import HandoffWorkflow, specialise
from .exceptions import HandoffConfigurationError

AgentRef = Any  # an Agent, or a participant's name


class HandBack(NamedTuple):
    """A declared hand-back: ``specialists`` (None: every agent the coordinator hands off to)."""

    coordinator: Any
    specialists: list[Any] | None
    reason: str | None
    tool_name: str | None


class AutonomousSettings(NamedTuple):
    """``with_autonomous_mode`` arguments, resolved to agent names at build time."""

    turn_limit: int
    continuation_prompt: str
    agents: list[AgentRef] | None
    agent_turn_limits: list[tuple[AgentRef, int]]
    agent_continuation_prompts: list[tuple[AgentRef, str]]


@dataclass
class BuildConfig:
    """Everything a builder records; ``compile_workflow`` turns it into a workflow."""

    initial: Any
    participants: dict[int, Any]
    edges: list[Edge] = field(default_factory=list[Edge])
    hand_backs: list[HandBack] = field(default_factory=list[HandBack])
    instructions: str = DEFAULT_HANDOFF_INSTRUCTIONS
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_handoffs: int = DEFAULT_MAX_HANDOFFS_PER_TURN
    escalation_message: str = DEFAULT_ESCALATION_MESSAGE
    name: str | None = None
    description: str | None = None
    filtering: HandoffToolCallFiltering = HandoffToolCallFiltering.HANDOFF_ONLY
    return_to_previous: bool = False
    termination_condition: TerminationCondition | None = None
    autonomous: AutonomousSettings | None = None
    output_from: list[Any] | None = None
    intermediate_from: list[Any] = field(default_factory=list[Any])


class _HopEdgeNotice(logging.Filter):
    """Drops agent_framework's warning about the host's self-loop edge, which is deliberate.

    The host sends itself one message per hop so that every agent invocation is its own
    superstep (and checkpoint); agent_framework warns about every self-loop at build time.
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
    agents: dict[str, Agent]
    routes: dict[str, dict[str, HandoffRoute]]
    autonomous: AutonomousMode | None
    output_agents: frozenset[str] | None
    intermediate_agents: frozenset[str]


def compile_workflow(config: BuildConfig) -> HandoffWorkflow:
    """Validate ``config`` (all problems at once) and assemble the workflow."""
    plan = _plan(config)
    manager = HandoffManager(
        initial_agent=plan.initial,
        routes=plan.routes,
        agents=list(plan.agents),
        max_handoffs_per_turn=config.max_handoffs,
        max_iterations=config.max_iterations,
        return_to_previous=config.return_to_previous,
        autonomous=plan.autonomous,
        termination_condition=config.termination_condition,
    )
    participants = {
        name: _participant(agent, plan.routes.get(name, {}), manager, config.instructions)
        for name, agent in plan.agents.items()
    }
    host = GroupChatHost(
        participants=participants,
        manager=manager,
        apology=config.escalation_message,
        filtering=config.filtering,
        handoff_tools=frozenset(name for by in plan.routes.values() for name in by),
        output_agents=plan.output_agents,
        intermediate_agents=plan.intermediate_agents,
    )
    builder = WorkflowBuilder(
        start_executor=host,
        name=config.name,
        description=config.description,
        max_iterations=config.max_iterations + 2,
    )
    return specialise(builder.add_edge(host, host).build())


def _participant(
    agent: Agent, routes: Mapping[str, HandoffRoute], manager: HandoffManager, instructions: str
) -> Participant:
    if not routes:
        return Participant(agent)
    options: dict[str, Any] = {"allow_multiple_tool_calls": False}
    if instructions.strip():
        options["instructions"] = instructions
    return Participant(
        agent,
        tools=[make_handoff_tool(route) for route in routes.values()],
        options=options,
        middleware=[HandoffToolMiddleware(routes, manager)],
    )


def _all_edges(config: BuildConfig, participants: Sequence[Any]) -> list[Edge]:
    """Declared handoff edges (else the default mesh), then the hand-back edges."""
    edges = config.edges or [
        Edge(source, target, derived=True)
        for source in participants
        for target in participants
        if source is not target
    ]
    for hand_back in config.hand_backs:
        coordinator = hand_back.coordinator
        specialists = hand_back.specialists
        if specialists is None:
            specialists = [edge.target for edge in edges if edge.source is coordinator]
        edges = edges + [
            Edge(specialist, coordinator, hand_back.reason, hand_back.tool_name, kind="hand_back")
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
    problems = participant_problems(participants) + edge_problems(edges)
    tool_names: dict[Any, list[tuple[str, Any]]] = {}
    distinct = {(id(e.source), id(e.target), e.kind): e for e in reversed(edges)}
    for edge in reversed(distinct.values()):  # a duplicate edge is reported once, above
        tool_names.setdefault(edge.source, []).append((_tool_name(edge), edge.target))
    problems += tool_name_problems(tool_names)
    autonomous, autonomous_problems = _autonomous(config, participants)
    problems += autonomous_problems
    output_agents = _designated(config.output_from, config, problems)
    intermediate_agents = _designated(config.intermediate_from, config, problems) or frozenset()
    if problems:
        raise HandoffConfigurationError(problems)
    routes: dict[str, dict[str, HandoffRoute]] = {}
    for edge in edges:
        source, target = str(edge.source.name), str(edge.target.name)
        tool = _tool_name(edge)
        description = handoff_description(edge) or target
        routes.setdefault(source, {})[tool] = HandoffRoute(
            source, target, tool, description, edge.kind
        )
    agents = {str(agent.name): agent for agent in participants}
    return _Plan(
        str(config.initial.name), agents, routes, autonomous, output_agents, intermediate_agents
    )


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
    if edge.tool_name:
        return edge.tool_name
    target = str(getattr(edge.target, "name", ""))
    return hand_back_tool_name(target) if edge.kind == "hand_back" else handoff_tool_name(target)


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


def to_mermaid(config: BuildConfig) -> str:
    """The handoff graph as a Mermaid flowchart (validated like ``build()``)."""
    plan = _plan(config)
    ids = {name: f"a{index}" for index, name in enumerate(plan.agents)}
    lines = ["flowchart LR"]
    for name, node in ids.items():
        shape = f'{node}(["{name}"])' if name == plan.initial else f'{node}["{name}"]'
        lines.append(f"    {shape}")
    for source, routes in plan.routes.items():
        for route in routes.values():
            arrow = "-.->" if route.kind == "hand_back" else "-->"
            lines.append(f"    {ids[source]} {arrow}|{route.tool_name}| {ids[route.target]}")
    return "\n".join(lines) + "\n"
