"""What each agent sees of the shared conversation: incremental, filtered views.

The shared history keeps everything and is never changed. Each agent reads a view of it, built
incrementally (only messages added since its last run are looked at), in which

* the agent's own messages and the user's messages appear unchanged;
* other agents' tool calls are filtered by the :class:`HandoffToolCallFiltering` mode (a call and
  its result are matched by order, so providers that reuse call ids work); tool approvals are
  never filtered;
* other agents' reasoning is dropped (it belongs to their model, and a handoff turn's reasoning
  must not reach the next agent), except with ``NONE``;
* other agents' text reaches the agent as ``user`` messages: copies, with ``author_name`` kept;
* messages left empty are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from agent_framework import Content, Message

__all__ = ["AgentView", "HandoffToolCallFiltering"]

_APPROVAL_TYPES = frozenset({"function_approval_request", "function_approval_response"})
_USER_SAFE_TYPES = frozenset({"text", "data", "uri", "usage"})


class HandoffToolCallFiltering(str, Enum):
    """Which tool calls of other agents an agent sees (.NET's ``HandoffToolCallFilteringBehavior``).

    * ``NONE``: every call and result.
    * ``HANDOFF_ONLY`` (default): all but handoff calls and their results.
    * ``ALL``: no tool calls and no tool results at all.
    """

    NONE = "none"
    HANDOFF_ONLY = "handoff_only"
    ALL = "all"


class AgentView:
    """The conversation as one agent sees it, extended from the shared history on demand."""

    __slots__ = ("_dropped_calls", "_handoff_tools", "_mode", "agent", "cursor", "messages")

    def __init__(
        self, agent: str, mode: HandoffToolCallFiltering, handoff_tools: frozenset[str]
    ) -> None:
        self.agent = agent
        self._mode = mode
        self._handoff_tools = handoff_tools
        self.messages: list[Message] = []
        self.cursor = 0
        self._dropped_calls: list[str] = []  # call ids whose result must be dropped too, in order

    def update(self, history: Sequence[Message]) -> list[Message]:
        """Bring the view up to date with ``history`` (append-only) and return it."""
        if self.cursor < len(history):
            for message in history[self.cursor :]:
                seen = self._see(message)
                if seen is not None:
                    self.messages.append(seen)
            self.cursor = len(history)
        return self.messages

    def _see(self, message: Message) -> Message | None:
        if message.role == "user" or message.author_name in (self.agent, None):
            return message
        contents = [content for content in message.contents if self._keeps(content)]
        if not contents:
            return None
        if message.role == "assistant" and all(c.type in _USER_SAFE_TYPES for c in contents):
            return _copy(message, contents, role="user")
        if len(contents) != len(message.contents):
            return _copy(message, contents, role=message.role)
        return message

    def _keeps(self, content: Content) -> bool:
        kind = content.type
        if kind in _APPROVAL_TYPES or self._mode is HandoffToolCallFiltering.NONE:
            return True
        if kind == "text_reasoning":
            return False
        if kind == "function_call":
            if self._mode is HandoffToolCallFiltering.ALL or content.name in self._handoff_tools:
                self._dropped_calls.append(str(content.call_id))
                return False
            return True
        if kind == "function_result":
            call_id = str(content.call_id)
            if self._mode is HandoffToolCallFiltering.ALL:
                if call_id in self._dropped_calls:
                    self._dropped_calls.remove(call_id)
                return False
            if call_id in self._dropped_calls:
                self._dropped_calls.remove(call_id)  # the first pending call with this id
                return False
        return True


def _copy(message: Message, contents: list[Content], *, role: str) -> Message:
    return Message(
        role=role,
        contents=contents,
        author_name=message.author_name,
        message_id=message.message_id,
        additional_properties=dict(message.additional_properties or {}),
    )
