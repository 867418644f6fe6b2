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
  host that carries the goal (or a hand-back's summary) verbatim: the receiver of a handoff reads
  the goal alone ("Goal: ..."), the receiver of a hand-back and every other agent read who
  handed the conversation to whom too ("Handoff from triage to billing. Goal: ..."). It is the
  same in every filtering mode, so the agent that receives the conversation always reads what
  it was handed.
  A note never separates a tool call from its result: while a call in the view waits for its
  result (an external call answered later), the note waits after it;
* messages left empty are dropped.

A view keeps each note as its text and writes it out as a message each time it is read (when its
agent runs): a conversation keeps no note messages between its agents' runs (a note with an input
filter to run is the exception: the filter gets it as a message, and the view keeps that one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, cast

from agent_framework import Content, Message

from ._routes import EDGE_KINDS
from ._settings import HandoffToolCallFiltering
from ._state import RecordedHandoff, transferred_handoff

__all__ = ["AgentView", "FilterDue", "HandoffToolCallFiltering", "handoff_note"]

_APPROVAL_TYPES = frozenset({"function_approval_request", "function_approval_response"})
_USER_SAFE_TYPES = frozenset({"text", "data", "uri", "usage"})
_EXCHANGE_TYPES = frozenset({"function_result", "usage", *_APPROVAL_TYPES})
"""Contents that belong to an open tool exchange; anything else ends it."""
_NO_STOPS = frozenset[tuple[str, str]]()


def handoff_note(recorded: RecordedHandoff, viewer: str) -> str:
    """The note ``viewer`` reads where a handoff happened.

    The receiver of a handoff reads its goal ("Goal: ..."), of a hand-back "Hand-back from
    billing to you (triage). Summary: ..." (the kind's ``received``); any other agent reads
    "Handoff from triage to billing. Goal: ...". The argument is quoted verbatim; a typed
    payload is shown as JSON after its label ("RefundRequest: {...}").
    """
    handoff = recorded.handoff
    kind = EDGE_KINDS[handoff.kind]
    if handoff.target == viewer:
        return kind.received.format(
            label=recorded.label, argument=handoff.goal, source=handoff.source, target=viewer
        )
    passed = f"{kind.note_label} from {handoff.source} to {handoff.target}"
    return f"{passed}. {recorded.label}: {handoff.goal}"


@dataclass(frozen=True)
class FilterDue:
    """A handoff into the view's agent whose edge has an input filter: run it, then :meth:`apply`.

    ``messages`` is the view at that point, ending with the handoff's note; ``call`` and
    ``result`` are the handoff's function call (``None`` if the history does not hold it) and
    result, as the shared history holds them.
    """

    handoff: RecordedHandoff
    call: Content | None
    result: Content
    note: Message
    messages: tuple[Message, ...]


class _Note(NamedTuple):
    """A handoff note in a view, written out as a message whenever the view is read."""

    text: str
    author: str

    def message(self) -> Message:
        return Message(role="user", contents=[self.text], author_name=self.author)


_Item = Message | _Note
"""What a view holds: the messages it shows, and its notes not written out yet."""


@dataclass(slots=True)
class _Call:
    """A function call the view has seen and whose result has not come yet."""

    call_id: str
    kept: bool  # in the view; its result is kept with it (else dropped with it)
    content: Content
    index: int  # the view message that holds it (kept calls)


class AgentView:
    """The conversation as one agent sees it, extended from the shared history on demand.

    ``note_author`` is the ``author_name`` of the handoff notes (the host's id); the ``left_out``
    ranges of the history (abandoned turns) are not in the view. Whatever history
    it is given, the view is valid input for every provider: each function call in it is answered
    by one result before anything else is said, and each result follows its call (results whose
    call is not in the view, and calls left without a result, are left out).
    """

    __slots__ = (
        "_answered",
        "_calls",
        "_handoff_tools",
        "_held_notes",
        "_items",
        "_left_out",
        "_mode",
        "_note_at",
        "_note_author",
        "_stops",
        "agent",
        "cursor",
        "due",
    )

    def __init__(
        self,
        agent: str,
        mode: HandoffToolCallFiltering,
        handoff_tools: frozenset[str],
        note_author: str,
        *,
        left_out: Sequence[tuple[int, int]] = (),
        stops: frozenset[tuple[str, str]] = frozenset(),
    ) -> None:
        self.agent = agent
        self._mode = mode
        self._handoff_tools = handoff_tools
        self._note_author = note_author
        self._items: list[_Item] = []  # the view so far
        self._note_at: list[int] = []  # where the items hold notes not written out (_Note)
        self.cursor = 0
        self._calls: list[_Call] = []  # calls waiting for their result, in order
        # notes that wait until the open calls are answered, each with its filter if it has one
        self._held_notes: list[tuple[_Item, FilterDue | None]] = []
        self._left_out = tuple(left_out)  # history ranges the view skips: abandoned turns
        # (source, tool) of the handoffs into the agent that are filtered
        self._stops = stops or _NO_STOPS
        self._answered: dict[str, Content] = {}  # calls the message being read answers
        self.due: FilterDue | None = None
        """A handoff whose input filter must run before the view goes on (see :meth:`apply`)."""

    def update(self, history: Sequence[Message]) -> list[Message]:
        """Bring the view up to date with ``history`` (append-only) and return it.

        Calls still waiting for their result at the end of the history are not in the list
        returned (nor the notes that wait for them); they join the view with their results.
        The view stops after a handoff whose edge has an input filter (:attr:`due`): run the
        filter, :meth:`apply` what it returns, and update again.
        """
        if self.due is None and self.cursor < len(history):
            end = len(history)
            for index, message in enumerate(history[self.cursor :], self.cursor):
                if self._left_out and any(low <= index < high for low, high in self._left_out):
                    continue
                if self._answered:
                    self._answered.clear()
                seen = self._see(message)
                if seen is not None:
                    self._items.append(seen)
                if message.role == "tool" and message.author_name != self.agent:
                    self._add_notes(message)
                if self._held_notes and not self._open():
                    self._release_notes()
                if self.due is not None:
                    end = index + 1
                    break
            self._answered.clear()
            self.cursor = end
        if self._open():
            return self._without_open_calls()
        return self._written()

    def apply(self, messages: Sequence[Message]) -> None:
        """What the input filter of :attr:`due` returned becomes the view so far.

        Its messages are checked like the history's own: a result with no call before it, or a
        call left without a result, is left out.
        """
        due = self.due
        after = self._items[len(due.messages) :] if due is not None else []  # read since
        self.due = None
        self._items = []
        self._note_at = []
        self._calls = []
        for message in [*messages, *after]:
            if isinstance(message, _Note):  # text: it ends any open exchange
                self._close()
                self._append(message)
                continue
            marked = [(content, True) for content in message.contents]
            if any(c.type not in _EXCHANGE_TYPES for c in message.contents):
                self._close()
            contents = [c for c, keep in marked if self._paired(c, keep)]
            if len(contents) == len(message.contents):
                self._items.append(message)
            elif contents:
                self._items.append(_copy(message, contents, role=message.role))

    def _open(self) -> bool:
        return any(call.kept for call in self._calls)

    def _add_notes(self, message: Message) -> None:
        """The notes for the handoffs this tool message records, now or once calls are answered."""
        for content in message.contents:
            if content.type != "function_result":
                continue
            recorded = transferred_handoff(content)
            if recorded is not None and recorded.handoff.source != self.agent:
                note = _Note(handoff_note(recorded, self.agent), self._note_author)
                handoff = recorded.handoff
                due = None
                held: _Item = note
                if handoff.target == self.agent and (handoff.source, handoff.tool_name) in (
                    self._stops
                ):
                    call = self._answered.get(str(content.call_id))
                    held = note.message()  # the filter gets it, and the view keeps that one
                    due = FilterDue(recorded, call, content, held, ())
                self._held_notes.append((held, due))
                if not self._open():
                    self._release_notes()

    def _release_notes(self) -> None:
        """The held notes join the view; the first with a filter makes the view stop there."""
        for position, (note, due) in enumerate(self._held_notes):
            self._append(note)
            if due is not None:
                self.due = replace(due, messages=tuple(self._written()))
                del self._held_notes[: position + 1]
                return
        self._held_notes.clear()

    def _append(self, item: _Item) -> None:
        if isinstance(item, _Note):
            self._note_at.append(len(self._items))
        self._items.append(item)

    def _written(self) -> list[Message]:
        """The items as messages: the list itself when it holds no note to write out.

        A copy of the list with the notes written in place, not a pass over every item: a view
        is read at every model call, and holds the whole conversation.
        """
        items = self._items
        if not self._note_at:
            return cast("list[Message]", items)
        written = cast("list[Message]", list(items))
        for position in self._note_at:
            written[position] = cast("_Note", items[position]).message()
        return written

    def _see(self, message: Message) -> Message | None:
        """The message as the view shows it (``None``: nothing of it).

        Other agents' messages, and messages with no author (history the caller passed in), are
        filtered by the mode; in every message, calls and results are paired in order.
        """
        author = message.author_name
        filtered = author != self.agent
        other = filtered and author is not None
        contents = message.contents
        plain = True  # most messages are text only: nothing to filter or pair
        for content in contents:  # a loop, not all(): this runs for every message of a history
            if content.type != "text":
                plain = False
                break
        if plain:
            if self._calls:
                self._close()
            if other and message.role == "assistant":
                return _copy(message, list(contents), role="user")
            return message if contents else None
        marked = [(c, not filtered or self._keeps(c, other=other)) for c in contents]
        if any(keep and c.type not in _EXCHANGE_TYPES for c, keep in marked):
            self._close()  # something else is said: calls still without a result never get one
        contents = [c for c, keep in marked if self._paired(c, keep)]
        if not contents:
            return None
        if (
            other
            and message.role == "assistant"
            and all(c.type in _USER_SAFE_TYPES for c in contents)
        ):
            return _copy(message, contents, role="user")
        if len(contents) != len(message.contents):
            return _copy(message, contents, role=message.role)
        return message

    def _paired(self, content: Content, keep: bool) -> bool:  # noqa: FBT001
        """Whether the view keeps ``content``, given what the mode says (``keep``).

        A result goes with its call (the first waiting one with its id: providers may reuse
        ids), whatever the mode; a result or an answer with no waiting call is dropped.
        """
        kind = content.type
        if kind == "function_call":
            self._calls.append(_Call(str(content.call_id), keep, content, len(self._items)))
            return keep
        if kind == "function_result":
            call = self._take(str(content.call_id))
            if call is not None:
                self._answered[call.call_id] = call.content
            return call is not None and call.kept
        if keep and kind == "function_approval_response":
            about = content.function_call
            call_id = str(about.call_id) if about is not None else None
            return any(call.kept and call.call_id == call_id for call in self._calls)
        return keep

    def _take(self, call_id: str) -> _Call | None:
        """The first waiting call with this id (providers may reuse ids), answered now."""
        for position, call in enumerate(self._calls):
            if call.call_id == call_id:
                return self._calls.pop(position)
        return None

    def _close(self) -> None:
        """Calls left without a result when the exchange ends leave the view, with approvals."""
        open_calls = [call for call in self._calls if call.kept]
        self._calls.clear()
        if open_calls:
            first = min(call.index for call in open_calls)
            self._items[first:] = _without(self._items[first:], open_calls)
            self._note_at = [i for i, item in enumerate(self._items) if isinstance(item, _Note)]
        if self._held_notes:
            self._release_notes()

    def _without_open_calls(self) -> list[Message]:
        """The view as a model may receive it now: without the calls still waiting for results."""
        open_calls = [call for call in self._calls if call.kept]
        first = min(call.index for call in open_calls)
        items = [
            *self._items[:first],
            *_without(self._items[first:], open_calls),
            *(note for note, _ in self._held_notes),
        ]
        return [item.message() if isinstance(item, _Note) else item for item in items]

    def _keeps(self, content: Content, *, other: bool) -> bool:
        """What the mode keeps of a message that is not the agent's own.

        ``other``: another agent's (its reasoning is dropped); else history the caller passed in.
        """
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
            return not other
        if kind == "function_call":
            return (
                self._mode is not HandoffToolCallFiltering.ALL
                and content.name not in self._handoff_tools
            )
        return True


def _without(items: Sequence[_Item], calls: Sequence[_Call]) -> list[_Item]:
    """``items`` without ``calls`` and the approval requests and answers about them."""
    kept: list[_Item] = []
    for message in items:
        if isinstance(message, _Note):
            kept.append(message)
            continue
        contents = [c for c in message.contents if not _about(c, calls)]
        if len(contents) == len(message.contents):
            kept.append(message)
        elif contents:
            kept.append(_copy(message, contents, role=message.role))
    return kept


def _about(content: Content, calls: Sequence[_Call]) -> bool:
    """True for one of ``calls``, or an approval request or answer about one of them."""
    if any(content is call.content for call in calls):
        return True
    if content.type in _APPROVAL_TYPES and content.function_call is not None:
        return any(str(content.function_call.call_id) == call.call_id for call in calls)
    return False


def _copy(message: Message, contents: list[Content], *, role: str) -> Message:
    return Message(
        role=role,
        contents=contents,
        author_name=message.author_name,
        message_id=message.message_id,
        additional_properties=dict(message.additional_properties or {}),
    )
