"""Assemble a workflow from a builder's checked and resolved configuration (:mod:`._plan`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from agent_framework import Agent, FunctionTool, WorkflowBuilder
from typing_extensions import override

from ._config import BuildConfig
from ._delegation import DelegateRoute, make_delegate_tool
from ._handoff_manager import HandoffManager
from ._host import HOST_ID, GroupChatHost, Participant
from ._host_settings import HostSettings
from ._instructions import DEFAULT_HANDOFF_INSTRUCTIONS, render_instructions
from ._lint import LintFinding
from ._manager import AutonomousMode, GroupChatManager, ManagerSettings
from ._model_inputs import ModelCallLog, ModelInputRecorder
from ._plan import Plan, plan_of
from ._remote import is_remote
from ._remote_participant import RemoteParticipant
from ._reply_tool import ReplyTool
from ._review import REVIEW_TOOL_KINDS, review_tools
from ._routes import HandoffRoute, default_instructions
from ._settings import (
    DEFAULT_ESCALATION_MESSAGE,
    DEFAULT_MAX_HANDOFFS_PER_TURN,
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_REVIEW_ESCALATION_MESSAGE,
    CapOutcome,
    EdgePolicy,
)
from ._tools import make_handoff_tool
from ._validation import own_tool_names
from ._workflow import HandoffWorkflow, specialise
from .exceptions import HandoffConfigurationError

DEFAULT_MAX_HANDOFFS_WITH_HAND_BACK = 4
"""The per-message cap when the workflow has hand-back edges (the hand-back pattern's default)."""


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
    plan = plan_of(config)
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
        bounce_guard=config.bounce_guard,
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
    every_route = {tool: route for by in plan.routes.values() for tool, route in by.items()}
    participants = {
        name: _participant(
            agent,
            plan.routes.get(name, {}),
            plan.policies.get(name, {}),
            config.instructions,
            plan.delegates.get(name, {}),
            reviewer=name in reviewers,
            reply=plan.replies.get(name),
            elsewhere={
                tool: route
                for tool, route in every_route.items()
                if tool not in plan.routes.get(name, {})
            },
        )
        for name, agent in plan.agents.items()
    }
    experts = {
        name: _participant(agent, {}, {}, "", plan.delegates.get(name, {}))
        for name, agent in plan.experts.items()
    }
    model_calls = None
    if config.model_inputs is not None:  # only then does a run get a recorder
        model_calls = ModelCallLog(config.model_inputs)
        for participant in (*participants.values(), *experts.values()):
            participant.middleware = [ModelInputRecorder(participant.name, model_calls)]
    settings = HostSettings(
        filtering=config.filtering,
        handoff_tools=_handoff_tools(plan),
        output_agents=plan.output_agents,
        intermediate_agents=plan.intermediate_agents,
        agent_timeout=config.agent_timeout,
        turn_timeout=config.turn_timeout,
        hook_timeout=config.hook_timeout,
        experts=experts,
        max_delegation_depth=config.max_delegation_depth,
        max_parallel_delegations=config.max_parallel_delegations,
        reviewed=frozenset(plan.reviews) if isinstance(manager, HandoffManager) else frozenset(),
        apologies=(
            {"review_rounds": DEFAULT_REVIEW_ESCALATION_MESSAGE}
            if config.escalation_message == DEFAULT_ESCALATION_MESSAGE
            else {}
        ),
        model_calls=model_calls,
        argument_logging=config.argument_logging,
        workflow_name=config.name or "handoff",
    )
    host = GroupChatHost(
        participants=participants,
        manager=manager,
        apology=config.escalation_message,
        settings=settings,
    )
    builder = WorkflowBuilder(
        start_executor=host,
        name=config.name,
        description=config.description,
        max_iterations=manager.max_iterations + 2,
        checkpoint_storage=config.checkpoint_storage,
    )
    cast(Any, builder).add_edge(host, host)  # agent_framework 1.26 leaves its condition untyped
    workflow = specialise(builder.build(), host)
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
    reply: ReplyTool | None = None,
    elsewhere: Mapping[str, HandoffRoute] | None = None,
) -> Participant:
    """An agent as the host runs it.

    Its handoff tools (with their instructions) and its ``reply`` tool, its delegates and, for a
    reviewer, the review tools. ``elsewhere``: the workflow's handoff tools of other agents. A
    remote agent gets no tools: its hand-back is made by its run (:mod:`._remote_participant`).
    """
    if is_remote(agent):
        return RemoteParticipant(
            agent, routes=routes, policies=policies, elsewhere=dict(elsewhere or {})
        )
    delegate_tools: list[FunctionTool] = [make_delegate_tool(route) for route in delegates.values()]
    if reviewer:
        delegate_tools.extend(review_tools())
    elsewhere = dict(elsewhere or {})
    stateless = _stateless_options(agent)
    if not routes:
        return Participant(
            agent, tools=delegate_tools, options=stateless or None, delegates=delegates,
            reviewer=reviewer, elsewhere=elsewhere,
        )  # fmt: skip
    options: dict[str, Any] = dict(stateless)  # parallel tool calls: the agent's own options
    if instructions == DEFAULT_HANDOFF_INSTRUCTIONS:  # the default: the text of its edges' kind
        instructions = default_instructions(routes.values())
    text = render_instructions(instructions, list(routes))
    if text.strip():
        options["instructions"] = text
    handoff_tools: list[FunctionTool] = [make_handoff_tool(route) for route in routes.values()]
    if reply is not None:
        handoff_tools.append(reply.tool())
    return Participant(
        agent,
        tools=[*handoff_tools, *delegate_tools],
        options=options,
        routes=routes,
        policies=policies,
        delegates=delegates,
        reviewer=reviewer,
        elsewhere=elsewhere,
        instructions=instructions,
        reply=reply,
    )


def _stateless_options(agent: Agent) -> dict[str, Any]:
    """``{"store": False}`` for an agent whose client keeps conversations on the server by default.

    Such a client (agent_framework's ``OpenAIChatClient``, on OpenAI's Responses API) would go on
    within a run from the server's copy of the previous response (``previous_response_id``) and
    send only what is new. Each run sends the agent's view whole instead, as every other client
    does: what the model reads is the view, on any server (llama.cpp refuses
    ``previous_response_id``), and nothing of the conversation is kept by the provider. An agent
    whose options set ``store`` keeps its choice.
    """
    stores = bool(getattr(agent.client, "STORES_BY_DEFAULT", False))
    if stores and agent.default_options.get("store") is None:
        return {"store": False}
    return {}


def _handoff_tools(plan: Plan) -> frozenset[str]:
    """The tools other agents' views filter as handoffs: handoff, review and reply tools.

    A reply tool's call stays in the conversation only when it was refused.
    """
    names = {name for by in plan.routes.values() for name in by}
    names.update(reply.name for reply in plan.replies.values())
    if plan.reviews:
        names.update(REVIEW_TOOL_KINDS)
    return frozenset(names)


def _outcome_comments(config: BuildConfig) -> list[str]:
    """Mermaid comments naming each cap's safe agent (an outcome, not an edge)."""
    return [
        f"    %% {cap}: the safe agent {outcome.name} answers"
        for cap, outcome in config.cap_outcomes.items()
        if isinstance(outcome, Agent)
    ]


def _node(plan: Plan, name: str, node: str) -> str:
    """An agent's node in the Mermaid graph.

    The initial agent is rounded, an expert that is no participant a subroutine, a remote agent
    (on another server) a flag.
    """
    if is_remote(plan.agents.get(name) or plan.experts.get(name)):
        return f'{node}>"{name} (A2A)"]'
    if name not in plan.agents:  # an expert that only answers delegated tasks
        return f'{node}[["{name}"]]'
    return f'{node}(["{name}"])' if name == plan.initial else f'{node}["{name}"]'


def _fan_out_comment(caller: str, tools: Sequence[str], limit: int | None) -> list[str]:
    """The comment above the delegate arrows of a caller that may ask several experts at once."""
    if len(tools) < 2:  # one delegate: nothing to fan out
        return []
    bound = "all at once" if limit is None else f"at most {limit} at a time"
    return [f"    %% fan-out: {caller}'s {', '.join(tools)} in one response run concurrently "
            f"({bound})"]  # fmt: skip


def to_mermaid(config: BuildConfig) -> str:
    """The handoff graph as a Mermaid flowchart (validated like ``build()``)."""
    plan = plan_of(config)
    names = [*plan.agents, *(name for name in plan.experts if name not in plan.agents)]
    ids = {name: f"a{index}" for index, name in enumerate(names)}
    lines = ["flowchart LR"]
    lines += [f"    {_node(plan, name, node)}" for name, node in ids.items()]
    for source, routes in plan.routes.items():
        for route in routes.values():
            arrow = route.edge.arrow
            lines.append(f"    {ids[source]} {arrow}|{route.tool_name}| {ids[route.target]}")
    for producer, review in plan.reviews.items():
        lines.append(f"    {ids[producer]} <-->|review| {ids[review.reviewer]}")
    lines += _outcome_comments(config)
    for caller, by_tool in plan.delegates.items():
        lines += _fan_out_comment(caller, list(by_tool), config.max_parallel_delegations)
        for delegate in by_tool.values():
            lines.append(f"    {ids[caller]} --o|{delegate.tool_name}| {ids[delegate.expert]}")
    for source, code in plan.code_routes.items():
        if code.target is not None:
            lines.append(f"    {ids[source]} ==>|route| {ids[code.target]}")
        else:
            lines.append(f"    %% {source}: route:{code.name}, decided by code at run time")
    return "\n".join(lines) + "\n"
