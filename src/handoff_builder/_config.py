"""What a :class:`~handoff_builder.HandoffWorkflowBuilder` records: plain values, no logic.

``build()`` checks and resolves this record (:mod:`._plan`), then assembles the workflow from it
(:mod:`._compile`). Like the builder, this module imports none of the runtime: only
:mod:`._settings` and :mod:`._instructions` when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from ._instructions import DEFAULT_HANDOFF_INSTRUCTIONS
from ._settings import (
    DEFAULT_AGENT_TIMEOUT,
    DEFAULT_ESCALATION_MESSAGE,
    DEFAULT_HOOK_TIMEOUT,
    DEFAULT_MAX_DELEGATION_DEPTH,
    DEFAULT_MAX_REJECTED_HANDOFFS,
    DEFAULT_TURN_TIMEOUT,
    DELEGATE_TOOL_PREFIX,
    PLAIN,
    ArgumentLogging,
    EdgePolicy,
    HandoffToolCallFiltering,
    HistoryMode,
    ReplyToolSettings,
)

if TYPE_CHECKING:
    from ._manager import GroupChatManager, ManagerSettings, TerminationCondition
    from ._model_inputs import ModelInputs
    from ._routes import EdgeKind, HandoffKind

__all__ = [
    "AgentRef",
    "AutonomousSettings",
    "BuildConfig",
    "DelegateEdge",
    "Edge",
    "HandBack",
    "ManagerFactory",
]

AgentRef = Any  # an Agent, or a participant's name
ManagerFactory: TypeAlias = "Callable[[ManagerSettings], GroupChatManager]"


class Edge(NamedTuple):
    """A declared handoff: ``source`` may pass the conversation to ``target``."""

    source: Any
    target: Any
    reason: str | None = None
    tool_name: str | None = None
    kind: HandoffKind = "handoff"
    payload: Any = None
    policy: EdgePolicy = PLAIN

    @property
    def edge(self) -> EdgeKind:
        """The row of the edge-kind table for this edge."""
        from ._routes import EDGE_KINDS  # the table's payload models are the runtime's

        return EDGE_KINDS[self.kind]


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
    timeout: float | None = None

    @property
    def tool(self) -> str:
        """The tool's name: the one given, else ``ask_<expert name>``, sanitised."""
        from ._routes import sanitize_tool_name  # the runtime's; read once the config is built

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

    ``None`` caps are derived at build time (see :func:`~._compile.effective_caps`).
    """

    initial: Any
    participants: dict[int, Any]
    edges: list[Edge] = field(default_factory=list[Edge])
    hand_backs: list[HandBack] = field(default_factory=list[HandBack])
    instructions: str = DEFAULT_HANDOFF_INSTRUCTIONS
    max_iterations: int | None = None
    max_handoffs: int | None = None
    max_rejected: int = DEFAULT_MAX_REJECTED_HANDOFFS
    bounce_guard: bool = False
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
    max_parallel_delegations: int | None = None
    reviews: list[tuple[Any, Any, int]] = field(default_factory=list[tuple[Any, Any, int]])
    checkpoint_storage: Any = None
    model_inputs: ModelInputs | None = None
    reply_tool: ReplyToolSettings | None = None
