"""The fluent :class:`HandoffWorkflowBuilder`: it records a configuration; ``build()`` compiles."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, overload

from agent_framework import Agent, Workflow, WorkflowBuilder
from typing_extensions import override

from ._host import DEFAULT_ESCALATION_MESSAGE, HOST_ID, GroupChatHost, Participant
from ._manager import DEFAULT_MAX_HANDOFFS_PER_TURN, DEFAULT_MAX_ITERATIONS, HandoffManager
from ._naming import DEFAULT_HANDOFF_INSTRUCTIONS, handoff_tool_name
from ._tools import HandoffRoute, HandoffToolMiddleware, make_handoff_tool
from ._validation import (
    Edge,
    edge_problems,
    handoff_description,
    participant_problems,
    tool_name_problems,
)
from .exceptions import HandoffConfigurationError

__all__ = ["HandoffWorkflowBuilder"]


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


@dataclass(frozen=True)
class _Plan:
    """The compiled, validated topology: what every build() of this configuration shares."""

    initial: str
    agents: dict[str, Agent]
    routes: dict[str, dict[str, HandoffRoute]]


def _agents_of(value: Agent | Iterable[Agent] | None, what: str) -> list[Agent]:
    if value is None:
        raise TypeError(f"{what} must be an agent or a list of agents, not None.")
    if isinstance(value, Agent):
        return [value]
    agents = list(value)  # pyright: ignore[reportUnknownArgumentType]
    if any(agent is None for agent in agents):  # pyright: ignore[reportUnnecessaryComparison]
        raise TypeError(f"One or more {what} are None.")
    return agents


class HandoffWorkflowBuilder:
    """Builds a handoff workflow: agents pass one shared conversation to each other by tool calls.

    Mirrors .NET's ``HandoffWorkflowBuilder``; every ``with_*`` method returns the builder and
    may be called in any order. ``build()`` checks the whole configuration, reports every problem
    at once (:class:`~handoff_builder.HandoffConfigurationError`), and returns an
    ``agent_framework.Workflow``. The agents passed in are never modified.

    Example:
        .. code-block:: python

            workflow = (
                HandoffWorkflowBuilder(triage)
                .with_handoff(triage, billing, reason="charges, invoices, plans")
                .with_handoffs(triage, [tech])
                .with_handoffs([billing, tech], triage)
                .build()
            )
            result = await workflow.run("I was charged twice")
    """

    def __init__(self, initial_agent: Agent) -> None:
        """Start a builder whose conversations begin at ``initial_agent``."""
        if initial_agent is None:  # pyright: ignore[reportUnnecessaryComparison]
            raise TypeError("initial_agent must be an agent, not None.")
        self._initial = initial_agent
        self._participants: dict[int, Any] = {id(initial_agent): initial_agent}
        self._edges: list[Edge] = []
        self._instructions: str = DEFAULT_HANDOFF_INSTRUCTIONS
        self._max_iterations = DEFAULT_MAX_ITERATIONS
        self._max_handoffs = DEFAULT_MAX_HANDOFFS_PER_TURN
        self._escalation_message = DEFAULT_ESCALATION_MESSAGE
        self._name: str | None = None
        self._description: str | None = None

    # -- participants and edges -------------------------------------------------------------------

    def add_participants(self, *agents: Agent | Iterable[Agent]) -> HandoffWorkflowBuilder:
        """Add agents without edges (the default all-to-all mesh applies when no edge is declared).

        Adding the same agent object twice has no effect.
        """
        for item in agents:
            for agent in _agents_of(item, "agents"):
                self._participants.setdefault(id(agent), agent)
        return self

    def with_handoff(
        self,
        source: Agent,
        target: Agent,
        reason: str | None = None,
        *,
        tool_name: str | None = None,
    ) -> HandoffWorkflowBuilder:
        """Let ``source`` hand the conversation to ``target``.

        Args:
            source: The agent that gets the handoff tool.
            target: The agent the tool passes the conversation to.
            reason: When to use this handoff; it becomes the tool's description. Defaults to the
                target's description, else its name, else its instructions.
            tool_name: The tool's name; defaults to ``handoff_to_<target name>``.
        """
        (source_agent,) = _agents_of(source, "source agents")
        (target_agent,) = _agents_of(target, "target agents")
        self.add_participants(source_agent, target_agent)
        self._edges.append(Edge(source_agent, target_agent, reason, tool_name))
        return self

    @overload
    def with_handoffs(self, source: Agent, targets: Iterable[Agent]) -> HandoffWorkflowBuilder: ...

    @overload
    def with_handoffs(
        self, sources: Iterable[Agent], target: Agent, reason: str | None = None
    ) -> HandoffWorkflowBuilder: ...

    def with_handoffs(
        self,
        *args: Agent | Iterable[Agent] | str | None,
        **kwargs: Agent | Iterable[Agent] | str | None,
    ) -> HandoffWorkflowBuilder:
        """Declare several handoffs: one source to many targets, or many sources to one target.

        ``with_handoffs(triage, [billing, tech])`` gives triage a tool for each target;
        ``with_handoffs([billing, tech], triage, reason=...)`` gives each source a tool to triage.
        """
        values = [*args, *kwargs.values()]
        if len(values) not in (2, 3):
            raise TypeError("with_handoffs takes (source, targets) or (sources, target, reason).")
        first, second, *rest = values
        reason = rest[0] if rest else None
        if isinstance(first, Agent):
            if rest:
                raise TypeError("with_handoffs(source, targets) takes no reason; use with_handoff.")
            for target in _agents_of(second, "target agents"):  # pyright: ignore[reportArgumentType]
                self.with_handoff(first, target)
            return self
        if not isinstance(second, Agent):
            raise TypeError(
                "with_handoffs takes (source, [targets]) or ([sources], target); got "
                f"{type(first).__name__} and {type(second).__name__}."
            )
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"reason must be a string, not {type(reason).__name__}.")
        for source in _agents_of(first, "source agents"):  # pyright: ignore[reportArgumentType]
            self.with_handoff(source, second, reason)
        return self

    # -- options ----------------------------------------------------------------------------------

    def with_instructions(self, instructions: str | None) -> HandoffWorkflowBuilder:
        """Handoff instructions added to each agent that can hand off, after its own instructions.

        ``None`` restores the default (.NET's text); ``""`` turns them off.
        """
        self._instructions = DEFAULT_HANDOFF_INSTRUCTIONS if instructions is None else instructions
        return self

    def with_max_iterations(self, max_iterations: int) -> HandoffWorkflowBuilder:
        """At most this many agent invocations per user message (default 40); then escalate."""
        self._max_iterations = _at_least_one("max_iterations", max_iterations)
        return self

    def with_max_handoffs_per_turn(
        self, max_handoffs: int, *, escalation_message: str | None = None
    ) -> HandoffWorkflowBuilder:
        """At most this many handoffs per user message (default 3).

        One more handoff ends the turn: the user gets ``escalation_message`` (a short apology;
        ``None`` keeps the default) and the turn is escalated to a human.
        """
        self._max_handoffs = _at_least_one("max_handoffs", max_handoffs)
        if escalation_message is not None:
            if not escalation_message.strip():
                raise ValueError("escalation_message must not be blank; the user must be told.")
            self._escalation_message = escalation_message
        return self

    def with_name(self, name: str | None) -> HandoffWorkflowBuilder:
        """The workflow's name (blank values are ignored, as in .NET)."""
        if name and name.strip():
            self._name = name
        return self

    def with_description(self, description: str | None) -> HandoffWorkflowBuilder:
        """The workflow's description (blank values are ignored, as in .NET)."""
        if description and description.strip():
            self._description = description
        return self

    # -- build ------------------------------------------------------------------------------------

    def build(self) -> Workflow:
        """Check the configuration and compile it into an ``agent_framework.Workflow``.

        Raises:
            HandoffConfigurationError: listing every problem found, each naming the agents.
        """
        plan = self._plan()
        manager = HandoffManager(
            initial_agent=plan.initial,
            routes=plan.routes,
            max_handoffs_per_turn=self._max_handoffs,
            max_iterations=self._max_iterations,
        )
        participants = {
            name: self._participant(agent, plan.routes.get(name, {}), manager)
            for name, agent in plan.agents.items()
        }
        host = GroupChatHost(
            participants=participants, manager=manager, apology=self._escalation_message
        )
        builder = WorkflowBuilder(
            start_executor=host,
            name=self._name,
            description=self._description,
            max_iterations=self._max_iterations + 2,
        )
        return builder.add_edge(host, host).build()

    def _participant(
        self, agent: Agent, routes: dict[str, HandoffRoute], manager: HandoffManager
    ) -> Participant:
        if not routes:
            return Participant(agent)
        options: dict[str, Any] = {"allow_multiple_tool_calls": False}
        if self._instructions.strip():
            options["instructions"] = self._instructions
        return Participant(
            agent,
            tools=[make_handoff_tool(route) for route in routes.values()],
            options=options,
            middleware=[HandoffToolMiddleware(routes, manager)],
        )

    def _plan(self) -> _Plan:
        participants = list(self._participants.values())
        edges = self._edges or [
            Edge(source, target, derived=True)
            for source in participants
            for target in participants
            if source is not target
        ]
        agent_edges = [
            e for e in edges if isinstance(e.source, Agent) and isinstance(e.target, Agent)
        ]
        problems = participant_problems(participants) + edge_problems(agent_edges)
        tool_names: dict[Any, list[tuple[str, Any]]] = {}
        distinct = {(id(edge.source), id(edge.target)): edge for edge in reversed(agent_edges)}
        for edge in reversed(distinct.values()):  # a duplicate edge is reported once, above
            name = edge.tool_name or handoff_tool_name(str(getattr(edge.target, "name", "")))
            tool_names.setdefault(edge.source, []).append((name, edge.target))
        problems += tool_name_problems(tool_names)
        if problems:
            raise HandoffConfigurationError(problems)
        routes: dict[str, dict[str, HandoffRoute]] = {}
        for edge in edges:
            source, target = str(edge.source.name), str(edge.target.name)
            tool = edge.tool_name or handoff_tool_name(target)
            description = handoff_description(edge) or target
            routes.setdefault(source, {})[tool] = HandoffRoute(source, target, tool, description)
        agents = {str(agent.name): agent for agent in participants}
        return _Plan(initial=str(self._initial.name), agents=agents, routes=routes)


def _at_least_one(what: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"{what} must be an int, not {type(value).__name__}.")
    if value < 1:
        raise ValueError(f"{what} must be at least 1, got {value}.")
    return value
