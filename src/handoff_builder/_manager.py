"""The group-chat manager contract: who speaks in a :class:`~handoff_builder.GroupChatHost`."""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_framework import Message

from ._decision import (
    FOLLOWED_OUTCOMES,
    TRANSFERRED_RESULT,
    AgentReply,
    Decision,
    HandoffCall,
    HandoffRequest,
    TurnStart,
    refused_call,
)
from ._routes import HandoffRoute
from ._settings import (
    DEFAULT_AUTONOMOUS_PROMPT,
    DEFAULT_AUTONOMOUS_TURN_LIMIT,
    DEFAULT_MAX_HANDOFFS_PER_TURN,
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_MAX_REJECTED_HANDOFFS,
    CapOutcome,
)

if TYPE_CHECKING:
    from ._review import Review

__all__ = [
    "DEFAULT_AUTONOMOUS_PROMPT",
    "DEFAULT_AUTONOMOUS_TURN_LIMIT",
    "DEFAULT_MAX_HANDOFFS_PER_TURN",
    "DEFAULT_MAX_ITERATIONS",
    "DEFAULT_MAX_REJECTED_HANDOFFS",
    "AutonomousMode",
    "CapOutcome",
    "CodeRoute",
    "GroupChatManager",
    "ManagerSettings",
    "RouteFunction",
    "TerminationCondition",
]


TerminationCondition = Callable[[Sequence[Message]], "bool | Awaitable[bool]"]
"""Called with the whole conversation after an agent reply without a handoff; true ends the turn."""

RouteFunction = Callable[[Sequence[Message], AgentReply], "str | Awaitable[str | None] | None"]
"""Called after the route's source replied without a handoff, with the conversation and the reply;
returns the name of the agent that runs next, or ``None`` to end the turn."""


@dataclass(frozen=True)
class CodeRoute:
    """A route decided by code (``with_route``).

    After ``source`` replies without a handoff, ``target`` runs (a constant), or the agent
    ``function`` names.
    """

    source: str
    name: str  # what decided it, as the trace shows it: the function's or the target's name
    target: str | None = None
    function: RouteFunction | None = None


@dataclass(frozen=True)
class AutonomousMode:
    """Autonomous mode: an agent that replies without a handoff is run again, up to a limit.

    Each continuation appends ``continuation_prompt`` (a user message, visible to every agent)
    to the conversation. Counters are per agent and reset when that agent hands off, when its
    loop ends, and on every new user message (.NET's semantics).
    """

    turn_limit: int = DEFAULT_AUTONOMOUS_TURN_LIMIT
    continuation_prompt: str = DEFAULT_AUTONOMOUS_PROMPT
    agents: frozenset[str] | None = None
    agent_turn_limits: Mapping[str, int] = field(default_factory=dict[str, int])
    agent_continuation_prompts: Mapping[str, str] = field(default_factory=dict[str, str])

    def allows(self, agent: str) -> bool:
        """True when ``agent`` loops autonomously (every agent when no allow-list was given)."""
        return self.agents is None or agent in self.agents

    def limit(self, agent: str) -> int:
        """The agent's turn limit: its own, else the default."""
        return self.agent_turn_limits.get(agent, self.turn_limit)

    def prompt(self, agent: str) -> str:
        """The agent's continuation prompt: its own, else the default."""
        return self.agent_continuation_prompts.get(agent, self.continuation_prompt)

    @property
    def largest_limit(self) -> int:
        """The largest turn limit any agent has."""
        return max([self.turn_limit, *self.agent_turn_limits.values()])


@dataclass(frozen=True)
class ManagerSettings:
    """What :meth:`HandoffWorkflowBuilder.build` compiled, handed to the manager it creates.

    ``routes`` maps each agent to its handoff tools (tool name -> route) and ``agent_tools`` to
    the names of the tools it has of its own. ``max_iterations`` is the invocation cap per user
    message, ``max_handoffs_per_turn`` the handoff cap (hand-backs included) and
    ``max_rejected_handoffs`` the number of refused handoff attempts a turn tolerates; the rest
    are the builder's ``with_*`` settings.
    """

    initial_agent: str
    agents: tuple[str, ...]
    routes: Mapping[str, Mapping[str, HandoffRoute]]
    agent_tools: Mapping[str, frozenset[str]] = field(default_factory=dict[str, frozenset[str]])
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_handoffs_per_turn: int = DEFAULT_MAX_HANDOFFS_PER_TURN
    max_rejected_handoffs: int = DEFAULT_MAX_REJECTED_HANDOFFS
    bounce_guard: bool = False
    return_to_previous: bool = False
    autonomous: AutonomousMode | None = None
    termination_condition: TerminationCondition | None = None
    code_routes: Mapping[str, CodeRoute] = field(default_factory=dict[str, CodeRoute])
    cap_outcomes: Mapping[str, CapOutcome | str] = field(
        default_factory=dict[str, "CapOutcome | str"]
    )
    """Per cap (``"handoff_cap"``, ``"max_iterations"``, ``"rejected_handoffs"``,
    ``"blocked_handoff"``): its outcome, or the safe agent's name. A cap not named escalates; a
    blocked handoff not named lets the agent carry on."""
    reviews: Mapping[str, Review] = field(default_factory=dict[str, "Review"])
    """The reviews of ``with_review``, by producer."""


class GroupChatManager(ABC):
    """Decides who speaks in a :class:`~handoff_builder.GroupChatHost`, one decision at a time.

    The host calls :meth:`start_turn` when a user message arrives and :meth:`decide` after every
    agent reply; each returns one :data:`~handoff_builder.Decision` (:class:`NextAgent`,
    :class:`EndTurn` or :class:`Escalate`) that the host carries out. While an agent runs, the
    host asks :meth:`vet_handoff` about each handoff tool call it makes; the vetted calls come
    back in the reply.

    The host also enforces ``max_iterations``, whatever the manager: a :class:`NextAgent` past
    that many agent invocations in one user turn ends the turn with an escalation
    (``reason="max_iterations"``). Likewise, a reply whose tool loop stopped at agent_framework's
    function-invocation limit (``reply.tool_limit``) never ends the turn as ``"completed"``: an
    :class:`EndTurn` then becomes an escalation (``reason="tool_limit"``). An agent that carries
    on after its requests were answered is the same invocation. Subclass it to write another
    policy (round robin, a model that picks the speaker) and reuse the host, or pass a factory to
    :meth:`HandoffWorkflowBuilder.with_manager`. Everything :meth:`save_state` returns must be
    JSON-serialisable.

    ``vet_handoff`` was ``review_handoff`` in earlier releases ("review" is ``with_review``'s
    word). A subclass that still overrides ``review_handoff`` works: defining it warns once, with
    a :class:`DeprecationWarning`, and its method is the one the host calls.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        legacy = vars(cls).get("review_handoff")
        if legacy is not None and "vet_handoff" not in vars(cls):
            warnings.warn(
                f"{cls.__qualname__} overrides GroupChatManager.review_handoff, which is now "
                "vet_handoff: rename the method (review_handoff goes in a later release).",
                DeprecationWarning,
                stacklevel=3,  # the class statement, past ABCMeta.__new__
            )
            setattr(cls, "vet_handoff", legacy)  # noqa: B010 - the host calls vet_handoff

    def __init__(self, *, max_iterations: int = DEFAULT_MAX_ITERATIONS) -> None:
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}.")
        self.max_iterations = max_iterations

    @abstractmethod
    async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
        """The first decision of a user turn (usually :class:`NextAgent` with the first speaker).

        Args:
            history: The whole shared conversation, the new user input included; read-only.
            start: Who ended the last turn, and the caller's instruction for this one.
        """

    @abstractmethod
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        """What happens after ``reply``: the next agent, the end of the turn, or an escalation.

        Args:
            history: The whole shared conversation, ``reply.messages`` included; read-only.
            reply: The agent's new messages and its vetted handoff calls.
        """

    def vet_handoff(self, request: HandoffRequest, earlier: Sequence[HandoffCall]) -> HandoffCall:
        """Vet one handoff tool call while its agent runs (default: the first valid one goes).

        A call to a handoff the agent does not have in this run (``request.blocked``) is refused
        with ``request.error`` (the host refuses it whatever this returns, unless it stops the
        turn at a cap: ``"escalated"``).

        Args:
            request: The call: its route (``route.source`` is calling), id and validated payload
                (``request.problem`` says what is wrong when its arguments are invalid).
            earlier: The calls the same agent made earlier in this run, in order.
        """
        if request.blocked is not None:
            return refused_call(request)
        route, argument = request.route, request.argument
        if request.problem is not None:
            text = f"Error: the arguments are not valid: {request.problem}."
            return HandoffCall(
                route, argument, request.call_id, "rejected", text, "invalid_payload",
                arguments=request.arguments,
            )  # fmt: skip
        if any(
            call.outcome in FOLLOWED_OUTCOMES for call in earlier
        ):  # it stands while it waits, too
            return HandoffCall(route, argument, request.call_id, "not_performed", "Not performed.")
        return HandoffCall(
            route,
            argument,
            request.call_id,
            "transferred",
            TRANSFERRED_RESULT,
            payload=request.payload,
        )

    def review_handoff(
        self, request: HandoffRequest, earlier: Sequence[HandoffCall]
    ) -> HandoffCall:
        """Deprecated: the earlier name of :meth:`vet_handoff`; calls it.

        A subclass that overrides ``review_handoff`` (warned when it is defined) may call
        ``super().review_handoff(...)``: that runs the ``vet_handoff`` it overrode.
        """
        classes = [cls for cls in type(self).__mro__ if cls is not GroupChatManager]
        if not any("review_handoff" in vars(cls) for cls in classes):
            # Called by its old name (an override was warned about when it was defined).
            warnings.warn(
                "GroupChatManager.review_handoff is now vet_handoff: call that instead "
                "(review_handoff goes in a later release).",
                DeprecationWarning,
                stacklevel=2,
            )
        for cls in classes:  # the first vet_handoff that is not an override's old name
            vet = vars(cls).get("vet_handoff")
            if vet is not None and vet is not vars(cls).get("review_handoff"):
                return vet(self, request, earlier)
        return GroupChatManager.vet_handoff(self, request, earlier)

    def save_state(self) -> dict[str, Any]:
        """JSON-serialisable state for checkpoints and hosted conversations (default: none)."""
        return {}

    def restore_state(self, state: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Restore what :meth:`save_state` returned (default: nothing to restore)."""
