"""What each agent sees of the shared conversation: incremental, filtered views with handoff notes.

The shared history keeps everything and is never changed. Each agent reads a view of it, built
incrementally (only messages added since its last run are looked at), in which

* the agent's own messages and the user's messages appear unchanged;
* other agents' tool calls are filtered by the :class:`HandoffToolCallFiltering` mode (a call and
  its result are matched by order, so providers that reuse call ids work); an approval request
  and its answer go with the call they are about;
* other agents' reasoning is dropped (it belongs to their model, and a handoff turn's reasoning
  must not reach the next agent), except with ``NONE``;
* other agents' text reaches the agent as ``user`` messages: copies, with ``author_name`` kept;
* every handoff another agent made is followed by a **note**, a ``user`` message written by the
  host that says who handed the conversation to whom and carries the goal (or a hand-back's
  summary) verbatim: "Handoff from triage to you (billing). Goal: ...". It is the same in every
  filtering mode, so the agent that receives the conversation always reads what it was handed.
  A note never separates a tool call from its result: while a call in the view waits for its
  result (an external call answered later), the note waits after it;
* messages left empty are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from agent_framework import Content, Message

from ._routes import EDGE_KINDS
from ._state import RecordedHandoff, transferred_handoff

__all__ = ["AgentView", "HandoffToolCallFiltering", "handoff_note"]

_APPROVAL_TYPES = frozenset({"function_approval_request", "function_approval_response"})
_USER_SAFE_TYPES = frozenset({"text", "data", "uri", "usage"})


class HandoffToolCallFiltering(str, Enum):
    """Which tool calls of other agents an agent sees (.NET's ``HandoffToolCallFilteringBehavior``).

    * ``NONE``: every call and result.
    * ``HANDOFF_ONLY`` (default): all but handoff calls and their results.
    * ``ALL``: no tool calls and no tool results at all.

    In every mode the agent also reads a note for each handoff another agent made.
    """

    NONE = "none"
    HANDOFF_ONLY = "handoff_only"
    ALL = "all"


def handoff_note(recorded: RecordedHandoff, viewer: str) -> str:
    """The note ``viewer`` reads where a handoff happened.

    The receiver reads "Handoff from triage to you (billing). Goal: ..."; any other agent reads
    "Handoff from triage to billing. Goal: ...". The argument is quoted verbatim; a typed
    payload is shown as JSON after its label ("RefundRequest: {...}").
    """
    handoff = recorded.handoff
    to = f"you ({viewer})" if handoff.target == viewer else handoff.target
    note_label = EDGE_KINDS[handoff.kind].note_label
    return f"{note_label} from {handoff.source} to {to}. {recorded.label}: {handoff.goal}"


class AgentView:
    """The conversation as one agent sees it, extended from the shared history on demand.

    ``note_author`` is the ``author_name`` of the handoff notes (the host's id).
    """

    __slots__ = (
        "_dropped_calls",
        "_handoff_tools",
        "_held_notes",
        "_mode",
        "_note_author",
        "_open_calls",
        "agent",
        "cursor",
        "messages",
    )

    def __init__(
        self,
        agent: str,
        mode: HandoffToolCallFiltering,
        handoff_tools: frozenset[str],
        note_author: str,
    ) -> None:
        self.agent = agent
        self._mode = mode
        self._handoff_tools = handoff_tools
        self._note_author = note_author
        self.messages: list[Message] = []
        self.cursor = 0
        self._dropped_calls: list[str] = []  # call ids whose result must be dropped too, in order
        self._open_calls: list[str] = []  # call ids in the view still waiting for their result
        self._held_notes: list[Message] = []

    def update(self, history: Sequence[Message]) -> list[Message]:
        """Bring the view up to date with ``history`` (append-only) and return it."""
        if self.cursor < len(history):
            for message in history[self.cursor :]:
                seen = self._see(message)
                if seen is not None:
                    self.messages.append(seen)
                    if self._held_notes:
                        self._answer_calls(seen)
                if message.role == "tool" and message.author_name != self.agent:
                    self._add_notes(message)
            self.cursor = len(history)
        return self.messages

    def _add_notes(self, message: Message) -> None:
        """The notes for the handoffs this tool message records, now or once calls are answered."""
        for content in message.contents:
            if content.type != "function_result":
                continue
            recorded = transferred_handoff(content)
            if recorded is not None and recorded.handoff.source != self.agent:
                text = handoff_note(recorded, self.agent)
                note = Message(role="user", contents=[text], author_name=self._note_author)
                if not self._held_notes:
                    self._open_calls = _unanswered_calls(self.messages)
                if self._open_calls:
                    self._held_notes.append(note)
                else:
                    self.messages.append(note)

    def _answer_calls(self, message: Message) -> None:
        """While notes wait: cross off the calls ``message`` answers; release the notes after."""
        for content in message.contents:
            call_id = str(content.call_id)
            if content.type == "function_result" and call_id in self._open_calls:
                self._open_calls.remove(call_id)
        if not self._open_calls:
            self.messages.extend(self._held_notes)
            self._held_notes.clear()

    def _see(self, message: Message) -> Message | None:
        if message.author_name in (self.agent, None):
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
        if self._mode is HandoffToolCallFiltering.NONE:
            return True
        if kind in _APPROVAL_TYPES:  # kept with the call it asks about, dropped with it
            call = content.function_call
            name = call.name if call is not None else None
            return (
                self._mode is not HandoffToolCallFiltering.ALL and name not in self._handoff_tools
            )
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


def _unanswered_calls(messages: Sequence[Message]) -> list[str]:
    """Call ids of the view's last tool exchange (calls and results at its end) with no result."""
    calls: list[str] = []
    answered: list[str] = []
    for message in reversed(messages):
        found = False
        for content in message.contents:
            if content.type == "function_call":
                calls.append(str(content.call_id))
                found = True
            elif content.type == "function_result":
                answered.append(str(content.call_id))
                found = True
        if not found:
            break
    for call_id in answered:
        if call_id in calls:
            calls.remove(call_id)
    return calls


def _copy(message: Message, contents: list[Content], *, role: str) -> Message:
    return Message(
        role=role,
        contents=contents,
        author_name=message.author_name,
        message_id=message.message_id,
        additional_properties=dict(message.additional_properties or {}),
    )
