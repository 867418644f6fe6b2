"""Group-chat managers decide who speaks next; :class:`HandoffManager` follows handoff calls."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from agent_framework import Content, Message
from typing_extensions import override

from ._events import EscalationEvent, HandoffBlockedEvent, HandoffEvent
from ._group_chat import (
    DEFAULT_MAX_ITERATIONS,
    GroupChatManager,
    TerminationCondition,
)
from ._naming import HANDOFF_PREFIX
from ._requests import requests_in
from ._tools import TRANSFERRED_RESULT, HandoffRoute, Verdict, marked_result, marker_of

__all__ = [
    "DEFAULT_AUTONOMOUS_PROMPT",
    "DEFAULT_AUTONOMOUS_TURN_LIMIT",
    "AutonomousMode",
    "HandoffManager",
]

logger = logging.getLogger("handoff_builder")

DEFAULT_MAX_HANDOFFS_PER_TURN = 3
DEFAULT_AUTONOMOUS_TURN_LIMIT = 50
DEFAULT_AUTONOMOUS_PROMPT = "User did not respond. Continue assisting autonomously."

EMPTY_ARGUMENT_ERROR = {
    "goal": (
        "Error: the handoff was not performed because the goal is empty. State the user's goal in "
        "one sentence in the `goal` argument and call {tool} again."
    ),
    "summary": (
        "Error: the hand-back was not performed because the summary is empty. Say what you did "
        "and what is still open in the `summary` argument and call {tool} again."
    ),
}
PING_PONG_ERROR = (
    "Error: {target} just handed the conversation back to you, so it cannot be handed straight "
    "back before the user writes again. Hand the open part to another agent, or answer the user."
)
NOT_PERFORMED_RESULT = (
    "Not performed: only the last handoff call in a response is followed ({followed} was followed)."
)
PENDING_RESULT = (
    "Not transferred: you still wait for answers to your tool approvals or external calls. "
    "Finish them first, then hand off."
)
CAP_RESULT = (
    "Not transferred: the limit of {limit} handoffs for this user message was reached. "
    "A human colleague will take over the conversation."
)
# Names that read as handoffs even when no such tool exists (they are audited as blocked).
HANDOFF_LIKE_PREFIXES = (HANDOFF_PREFIX, "transfer_to_", "transfer_back_to_")


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


class _Outcome(NamedTuple):
    kind: str  # "transferred" or "escalated"
    route: HandoffRoute
    argument: str
    call_id: str


class HandoffManager(GroupChatManager):
    """Follows handoff calls: after each response it reads the speaker's last handoff call.

    Only a handoff that the speaker was granted, with a non-empty argument, routes. At most
    ``max_handoffs_per_turn`` handoffs (hand-backs included) are followed per user message; one
    more ends the turn with an escalation to a human. A coordinator may not hand straight back
    to the agent that just handed back to it before the next user message. The cursor (how far
    the history has been read), the counters and the active agent are saved in checkpoints.
    """

    def __init__(
        self,
        *,
        initial_agent: str,
        routes: Mapping[str, Mapping[str, HandoffRoute]],
        agents: Sequence[str] = (),
        max_handoffs_per_turn: int = DEFAULT_MAX_HANDOFFS_PER_TURN,
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        return_to_previous: bool = False,
        autonomous: AutonomousMode | None = None,
        termination_condition: TerminationCondition | None = None,
    ) -> None:
        super().__init__(max_iterations=max_iterations)
        if max_handoffs_per_turn < 1:
            raise ValueError(
                f"max_handoffs_per_turn must be at least 1, got {max_handoffs_per_turn}."
            )
        self.initial_agent = initial_agent
        self.routes = routes
        self.agents = frozenset(agents) | {initial_agent} | set(routes)
        self.max_handoffs_per_turn = max_handoffs_per_turn
        self.return_to_previous = return_to_previous
        self.autonomous = autonomous
        self.termination_condition = termination_condition
        self.active_agent = initial_agent
        self.handoff_count = 0
        self.cursor = 0
        self.autonomous_turns: dict[str, int] = {}
        self.last_hand_back: tuple[str, str] | None = None  # (from, to) of the latest hand-back
        self._all_tools = {name: route for by in routes.values() for name, route in by.items()}

    # -- decisions taken while an agent runs (called by the handoff tool middleware) -----------

    def review_handoff(self, route: HandoffRoute, argument: str, call_id: str) -> Verdict:
        """Accept a handoff call, reject it with a tool error, or escalate on the cap."""
        if not argument:
            reason = "empty_summary" if route.kind == "hand_back" else "empty_goal"
            self._block(route, reason, call_id)
            return Verdict(
                "rejected", EMPTY_ARGUMENT_ERROR[route.argument].format(tool=route.tool_name)
            )
        if route.kind == "handoff" and self.last_hand_back == (route.target, route.source):
            self._block(route, "ping_pong", call_id)
            return Verdict("rejected", PING_PONG_ERROR.format(target=route.target))
        if self.handoff_count >= self.max_handoffs_per_turn:
            return Verdict("escalated", CAP_RESULT.format(limit=self.max_handoffs_per_turn))
        return Verdict("transferred", TRANSFERRED_RESULT)

    def _block(self, route: HandoffRoute, reason: Any, call_id: str) -> None:
        self._events.append(
            HandoffBlockedEvent(route.source, route.tool_name, reason, call_id, route.target)
        )

    # -- GroupChatManager -------------------------------------------------------------------------

    @override
    def begin_turn(self) -> None:
        """A new user message: fresh handoff count, autonomous counters and ping-pong guard."""
        super().begin_turn()
        self.handoff_count = 0
        self.autonomous_turns.clear()
        self.last_hand_back = None

    @override
    def update_history(self, speaker: str, delta: list[Message]) -> list[Message]:
        """Only the last accepted handoff of a response stands, and none while requests wait."""
        accepted = [
            (message, index, marker)
            for message in delta
            for index, content in enumerate(message.contents)
            if (marker := marker_of(content)) is not None and marker.get("outcome") == "transferred"
        ]
        if accepted and requests_in(delta):
            for message, index, marker in accepted:
                route = self._all_tools[str(marker.get("tool"))]
                call_id = str(message.contents[index].call_id)
                argument = str(marker.get("argument", ""))
                message.contents[index] = marked_result(
                    call_id, PENDING_RESULT, "not_performed", route, argument
                )
                self._block(route, "pending_requests", call_id)
            return delta
        if len(accepted) < 2:
            return delta
        *dropped, (_, _, kept) = accepted
        followed = str(kept.get("tool"))
        for message, index, marker in dropped:
            route = self._all_tools[str(marker.get("tool"))]
            text = NOT_PERFORMED_RESULT.format(followed=followed)
            call_id = str(message.contents[index].call_id)
            argument = str(marker.get("argument", ""))
            message.contents[index] = marked_result(call_id, text, "not_performed", route, argument)
        names = ", ".join(str(marker.get("tool")) for _, _, marker in accepted)
        warning = (
            f"Duplicate handoff requests in one response from {speaker!r} ({names}); "
            f"following the last, {followed}."
        )
        logger.warning(warning)
        self._events.append(warning)
        return delta

    @override
    async def select_next_agent(
        self, history: Sequence[Message], speaker: str | None
    ) -> str | None:
        """The first speaker of a turn; afterwards the target of the speaker's last handoff."""
        if speaker is None:
            self.cursor = len(history)
            self.active_agent = self._first_speaker()
            return self.active_agent
        outcome = self._scan(history, speaker)
        self.cursor = len(history)
        self.active_agent = speaker
        if outcome is None:
            return await self._after_reply(history, speaker)
        self.autonomous_turns.pop(speaker, None)
        route = outcome.route
        if outcome.kind == "escalated":
            self.escalation = EscalationEvent(
                "handoff_cap", speaker, self.max_handoffs_per_turn, route.target, outcome.argument
            )
            self._events.append(self.escalation)
            return None
        self.handoff_count += 1
        self.active_agent = route.target
        if route.kind == "hand_back":
            self.last_hand_back = (route.source, route.target)
        self._events.append(
            HandoffEvent(
                speaker,
                route.target,
                outcome.argument,
                route.tool_name,
                outcome.call_id,
                route.kind,
            )
        )
        return route.target

    @override
    async def should_terminate(self, history: Sequence[Message]) -> bool:
        """Stop (and escalate) when the turn used all of its agent invocations."""
        if not await super().should_terminate(history):
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
        """Cursor, counters, ping-pong guard and active agent, as JSON."""
        return {
            **super().save_state(),
            "cursor": self.cursor,
            "handoff_count": self.handoff_count,
            "active_agent": self.active_agent,
            "autonomous_turns": dict(self.autonomous_turns),
            "last_hand_back": list(self.last_hand_back) if self.last_hand_back else None,
        }

    @override
    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`save_state` returned."""
        super().restore_state(state)
        self.cursor = int(state.get("cursor", 0))
        self.handoff_count = int(state.get("handoff_count", 0))
        self.active_agent = str(state.get("active_agent", self.initial_agent))
        self.autonomous_turns = {
            str(k): int(v) for k, v in state.get("autonomous_turns", {}).items()
        }
        last = state.get("last_hand_back")
        self.last_hand_back = (str(last[0]), str(last[1])) if last else None

    # -- policies ---------------------------------------------------------------------------------

    def _first_speaker(self) -> str:
        if not self.return_to_previous or self.active_agent == self.initial_agent:
            return self.initial_agent
        if self.active_agent not in self.agents:
            logger.warning(
                "The previous agent %r is not a participant any more; starting at %r.",
                self.active_agent, self.initial_agent,
            )  # fmt: skip
            return self.initial_agent
        return self.active_agent

    async def _after_reply(self, history: Sequence[Message], speaker: str) -> str | None:
        """A reply without a handoff: the termination condition, then autonomous mode."""
        if self.termination_condition is not None:
            verdict = self.termination_condition(history)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict:
                self.autonomous_turns.pop(speaker, None)
                return None
        mode = self.autonomous
        turns = self.autonomous_turns.get(speaker, 0)
        if mode is None or not mode.allows(speaker) or turns >= mode.limit(speaker):
            self.autonomous_turns.pop(speaker, None)
            return None
        self.autonomous_turns[speaker] = turns + 1
        self.add_input(Message(role="user", contents=[mode.prompt(speaker)]))
        return speaker

    # -- reading the history ----------------------------------------------------------------------

    def _scan(self, history: Sequence[Message], speaker: str) -> _Outcome | None:
        """The last handoff outcome the speaker produced since the cursor; audits stray calls."""
        granted = self.routes.get(speaker, {})
        last: _Outcome | None = None
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
                route = granted.get(str(marker.get("tool")))
                outcome = str(marker.get("outcome"))
                if route is not None and outcome in ("transferred", "escalated"):
                    argument = str(marker.get("argument", ""))
                    last = _Outcome(outcome, route, argument, str(content.call_id))
        return last

    def _audit_call(self, speaker: str, granted: Mapping[str, HandoffRoute], call: Content) -> None:
        name = call.name or ""
        if name in granted or not (
            name in self._all_tools or name.startswith(HANDOFF_LIKE_PREFIXES)
        ):
            return
        route = self._all_tools.get(name)
        reason = "not_granted" if route is not None else "unknown_target"
        arguments = call.arguments if isinstance(call.arguments, str) else str(call.arguments or "")
        self._events.append(
            HandoffBlockedEvent(
                speaker, name, reason, str(call.call_id), route.target if route else None, arguments
            )
        )
