"""Group-chat managers decide who speaks next; :class:`HandoffManager` follows handoff calls."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from agent_framework import Content, Message
from typing_extensions import override

from ._events import EscalationEvent, HandoffBlockedEvent, HandoffEvent
from ._naming import HANDOFF_PREFIX
from ._tools import TRANSFERRED_RESULT, HandoffRoute, Verdict, marked_result, marker_of

__all__ = ["DEFAULT_MAX_ITERATIONS", "GroupChatManager", "HandoffManager"]

logger = logging.getLogger("handoff_builder")

DEFAULT_MAX_ITERATIONS = 40
DEFAULT_MAX_HANDOFFS_PER_TURN = 3

EMPTY_GOAL_ERROR = (
    "Error: the handoff was not performed because the goal is empty. State the user's goal in one "
    "sentence in the `goal` argument and call the handoff tool again."
)
NOT_PERFORMED_RESULT = (
    "Not performed: only the last handoff call in a response is followed ({followed} was followed)."
)
CAP_RESULT = (
    "Not transferred: the limit of {limit} handoffs for this user message was reached. "
    "A human colleague will take over the conversation."
)
# Names that read as handoffs even when no such tool exists (they are audited as blocked).
HANDOFF_LIKE_PREFIXES = (HANDOFF_PREFIX, "transfer_to_", "transfer_back_to_")

Event = HandoffEvent | HandoffBlockedEvent | EscalationEvent | str
"""An audit event, or a warning (a ``str``)."""


class GroupChatManager(ABC):
    """Decides who speaks next in a :class:`~handoff_builder.GroupChatHost`.

    The host calls :meth:`begin_turn` on each user message, then :meth:`select_next_agent` with
    ``speaker=None`` for the first speaker and after every agent response with that agent's name.
    ``None`` ends the turn. Before each agent invocation the host asks :meth:`should_terminate`;
    the default stops at ``max_iterations`` agent invocations per user turn.

    Subclass it to write another policy (round robin, a model that picks the speaker) and reuse
    the host. Everything returned by :meth:`save_state` must be JSON-serialisable.
    """

    def __init__(self, *, max_iterations: int = DEFAULT_MAX_ITERATIONS) -> None:
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations}.")
        self.max_iterations = max_iterations
        self.iteration_count = 0
        self.escalation: EscalationEvent | None = None
        self._events: list[Event] = []

    @abstractmethod
    def select_next_agent(self, history: Sequence[Message], speaker: str | None) -> str | None:
        """Name of the agent that speaks next, or ``None`` to end the turn.

        Args:
            history: The whole shared conversation, read-only.
            speaker: The agent that just answered, or ``None`` at the start of a turn.
        """

    def begin_turn(self) -> None:
        """Reset the per-turn counters; called when a user message arrives."""
        self.iteration_count = 0
        self.escalation = None

    def record_invocation(self) -> None:
        """Count one agent invocation in this turn."""
        self.iteration_count += 1

    def should_terminate(self, history: Sequence[Message]) -> bool:
        """True when the turn must end before the next agent is invoked."""
        del history
        return self.iteration_count >= self.max_iterations

    def update_history(self, speaker: str, delta: list[Message]) -> list[Message]:
        """Adjust an agent's new messages before they join the shared history (default: as-is)."""
        del speaker
        return delta

    def take_events(self) -> list[Event]:
        """The audit events produced since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def reset(self) -> None:
        """Forget everything (a new conversation)."""
        self.begin_turn()
        self._events.clear()

    def save_state(self) -> dict[str, Any]:
        """JSON-serialisable state for workflow checkpoints."""
        escalation = asdict(self.escalation) if self.escalation else None
        return {"iteration_count": self.iteration_count, "escalation": escalation}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`save_state` returned."""
        self.iteration_count = int(state.get("iteration_count", 0))
        escalation = state.get("escalation")
        self.escalation = EscalationEvent(**escalation) if escalation else None


class HandoffManager(GroupChatManager):
    """Follows handoff calls: after each response it reads the speaker's last handoff call.

    Only a handoff that the speaker was granted, whose goal is not empty, routes. At most
    ``max_handoffs_per_turn`` handoffs are followed per user message; one more ends the turn with
    an escalation to a human. The cursor (how far the history has been read), the handoff count
    of the turn and the active agent are saved in checkpoints.
    """

    def __init__(
        self,
        *,
        initial_agent: str,
        routes: Mapping[str, Mapping[str, HandoffRoute]],
        max_handoffs_per_turn: int = DEFAULT_MAX_HANDOFFS_PER_TURN,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
    ) -> None:
        super().__init__(max_iterations=max_iterations)
        if max_handoffs_per_turn < 1:
            raise ValueError(
                f"max_handoffs_per_turn must be at least 1, got {max_handoffs_per_turn}."
            )
        self.initial_agent = initial_agent
        self.routes = routes
        self.max_handoffs_per_turn = max_handoffs_per_turn
        self.active_agent = initial_agent
        self.handoff_count = 0
        self.cursor = 0
        self._all_tool_names = frozenset(name for by_tool in routes.values() for name in by_tool)

    # -- decisions taken while an agent runs (called by the handoff tool middleware) -----------

    def review_handoff(self, route: HandoffRoute, goal: str, call_id: str) -> Verdict:
        """Accept a handoff call, reject it with a tool error, or escalate on the cap."""
        if not goal:
            self._events.append(
                HandoffBlockedEvent(
                    route.source, route.tool_name, "empty_goal", call_id, route.target
                )
            )
            return Verdict("rejected", EMPTY_GOAL_ERROR)
        if self.handoff_count >= self.max_handoffs_per_turn:
            return Verdict("escalated", CAP_RESULT.format(limit=self.max_handoffs_per_turn))
        return Verdict("transferred", TRANSFERRED_RESULT)

    # -- GroupChatManager -------------------------------------------------------------------------

    @override
    def begin_turn(self) -> None:
        """Start a user turn at the initial agent with a fresh handoff count."""
        super().begin_turn()
        self.handoff_count = 0

    @override
    def update_history(self, speaker: str, delta: list[Message]) -> list[Message]:
        """When one response holds several accepted handoff calls, only the last one stands."""
        accepted = [
            (message, index, content)
            for message in delta
            for index, content in enumerate(message.contents)
            if (marker := marker_of(content)) is not None and marker.get("outcome") == "transferred"
        ]
        if len(accepted) < 2:
            return delta
        *dropped, (_, _, kept) = accepted
        followed = self._tool_name(speaker, kept)
        for message, index, content in dropped:
            marker = marker_of(content) or {}
            route = self.routes[speaker][self._tool_name(speaker, content)]
            message.contents[index] = marked_result(
                str(content.call_id),
                NOT_PERFORMED_RESULT.format(followed=followed),
                "not_performed",
                route,
                str(marker.get("goal", "")),
            )
        names = ", ".join(self._tool_name(speaker, content) for _, _, content in accepted)
        warning = (
            f"Duplicate handoff requests in one response from {speaker!r} ({names}); "
            f"following the last, {followed}."
        )
        logger.warning(warning)
        self._events.append(warning)
        return delta

    @override
    def select_next_agent(self, history: Sequence[Message], speaker: str | None) -> str | None:
        """The initial agent at the start of a turn; afterwards the target of the last handoff."""
        if speaker is None:
            self.cursor = len(history)
            self.active_agent = self.initial_agent
            return self.initial_agent
        last = self._scan(history, speaker)
        self.cursor = len(history)
        self.active_agent = speaker
        if last is None:
            return None
        outcome, route, goal, call_id = last
        if outcome == "escalated":
            self.escalation = EscalationEvent(
                "handoff_cap", speaker, self.max_handoffs_per_turn, route.target, goal
            )
            self._events.append(self.escalation)
            return None
        self.handoff_count += 1
        self.active_agent = route.target
        self._events.append(HandoffEvent(speaker, route.target, goal, route.tool_name, call_id))
        return route.target

    @override
    def should_terminate(self, history: Sequence[Message]) -> bool:
        """Stop (and escalate) when the turn used all of its agent invocations."""
        if not super().should_terminate(history):
            return False
        self.escalation = EscalationEvent("max_iterations", self.active_agent, self.max_iterations)
        self._events.append(self.escalation)
        return True

    @override
    def reset(self) -> None:
        """Back to the initial agent, at the start of an empty history."""
        super().reset()
        self.active_agent = self.initial_agent
        self.cursor = 0

    @override
    def save_state(self) -> dict[str, Any]:
        """Cursor, counters and active agent, as JSON."""
        return {
            **super().save_state(),
            "cursor": self.cursor,
            "handoff_count": self.handoff_count,
            "active_agent": self.active_agent,
        }

    @override
    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`save_state` returned."""
        super().restore_state(state)
        self.cursor = int(state.get("cursor", 0))
        self.handoff_count = int(state.get("handoff_count", 0))
        self.active_agent = str(state.get("active_agent", self.initial_agent))

    # -- reading the history ----------------------------------------------------------------------

    def _scan(
        self, history: Sequence[Message], speaker: str
    ) -> tuple[str, HandoffRoute, str, str] | None:
        """The last handoff outcome the speaker produced since the cursor; audits stray calls."""
        granted = self.routes.get(speaker, {})
        last: tuple[str, HandoffRoute, str, str] | None = None
        for message in history[self.cursor :]:
            if message.author_name not in (speaker, None):
                continue
            for content in message.contents:
                if content.type == "function_call":
                    self._audit_call(speaker, granted, content)
                    continue
                marker = marker_of(content)
                if marker is None or marker.get("source") != speaker:
                    continue
                route = self._route_to(granted, str(marker.get("target")))
                if route is not None and marker.get("outcome") in ("transferred", "escalated"):
                    goal = str(marker.get("goal", ""))
                    last = (str(marker["outcome"]), route, goal, str(content.call_id))
        return last

    def _audit_call(self, speaker: str, granted: Mapping[str, HandoffRoute], call: Content) -> None:
        name = call.name or ""
        if name in granted or not (
            name in self._all_tool_names or name.startswith(HANDOFF_LIKE_PREFIXES)
        ):
            return
        reason = "not_granted" if name in self._all_tool_names else "unknown_target"
        target = next(
            (by_tool[name].target for by_tool in self.routes.values() if name in by_tool), None
        )
        arguments = call.arguments if isinstance(call.arguments, str) else str(call.arguments or "")
        self._events.append(
            HandoffBlockedEvent(speaker, name, reason, str(call.call_id), target, arguments)
        )

    @staticmethod
    def _route_to(granted: Mapping[str, HandoffRoute], target: str) -> HandoffRoute | None:
        return next((route for route in granted.values() if route.target == target), None)

    def _tool_name(self, speaker: str, content: Content) -> str:
        marker = marker_of(content) or {}
        route = self._route_to(self.routes.get(speaker, {}), str(marker.get("target")))
        return route.tool_name if route else "?"
