"""The group-chat manager contract: who speaks next in a :class:`~handoff_builder.GroupChatHost`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from agent_framework import Message

from ._events import EscalationEvent, HandoffBlockedEvent, HandoffEvent

__all__ = ["DEFAULT_MAX_ITERATIONS", "Event", "GroupChatManager", "TerminationCondition"]

DEFAULT_MAX_ITERATIONS = 40

Event = HandoffEvent | HandoffBlockedEvent | EscalationEvent | str
"""An audit event, or a warning (a ``str``)."""

TerminationCondition = Callable[[Sequence[Message]], "bool | Awaitable[bool]"]
"""Called with the whole conversation after an agent reply without a handoff; true ends the turn."""


class GroupChatManager(ABC):
    """Decides who speaks next in a :class:`~handoff_builder.GroupChatHost`.

    The host calls :meth:`begin_turn` on each user message, then :meth:`select_next_agent` with
    ``speaker=None`` for the first speaker and after every agent response with that agent's name.
    ``None`` ends the turn. Before each agent invocation the host asks :meth:`should_terminate`;
    the default stops at ``max_iterations`` agent invocations per user turn. Messages queued with
    :meth:`add_input` (a continuation prompt, say) join the shared history before the next agent
    runs.

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
        self._input: list[Message] = []

    @abstractmethod
    async def select_next_agent(
        self, history: Sequence[Message], speaker: str | None
    ) -> str | None:
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

    async def should_terminate(self, history: Sequence[Message]) -> bool:
        """True when the turn must end before the next agent is invoked."""
        del history
        return self.iteration_count >= self.max_iterations

    def update_history(self, speaker: str, delta: list[Message]) -> list[Message]:
        """Adjust an agent's new messages before they join the shared history (default: as-is)."""
        del speaker
        return delta

    def add_input(self, message: Message) -> None:
        """Queue a message for the shared history, added before the next agent runs."""
        self._input.append(message)

    def take_input(self) -> list[Message]:
        """The queued messages, oldest first (the host calls this)."""
        messages, self._input = self._input, []
        return messages

    def take_events(self) -> list[Event]:
        """The audit events produced since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def reset(self) -> None:
        """Forget everything (a new conversation)."""
        self.begin_turn()
        self._events.clear()
        self._input.clear()

    def save_state(self) -> dict[str, Any]:
        """JSON-serialisable state for workflow checkpoints."""
        escalation = asdict(self.escalation) if self.escalation else None
        return {"iteration_count": self.iteration_count, "escalation": escalation}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`save_state` returned."""
        self.iteration_count = int(state.get("iteration_count", 0))
        escalation = state.get("escalation")
        self.escalation = EscalationEvent(**escalation) if escalation else None
