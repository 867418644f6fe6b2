"""A served turn's routing as updates of its stream, and the line each one reads as.

``HostedConversationAgent`` streams the agents' updates (each with its ``author_name``, the
agent that wrote it) and, between them, an update for each routing event of the turn: a handoff
or hand-back, a route, a refused handoff, a delegation, an escalation, a deadline or limit that
ended the turn. Such an update has no contents; its ``additional_properties`` hold the event
under :data:`ROUTING_EVENT_PROPERTY`, as ``{"type": <the WorkflowEvent type>, "data": <the
event as JSON>}``, and its ``author_name`` is the agent that made the step. A client that shows
contents shows nothing for it; the UI adapters show it (``agui_agent``: an AG-UI custom event
named after the type; ``devui_agent``: the line :func:`routing_line` writes).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import AgentResponse, AgentResponseUpdate, Content, Message

from ._events import (
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_DELEGATION_EVENT,
    HANDOFF_ESCALATED_EVENT,
    HANDOFF_EVENT,
    HANDOFF_LIMIT_EVENT,
    HANDOFF_TIMEOUT_EVENT,
    HANDOFF_TURN_ABANDONED_EVENT,
    DelegationEvent,
    HandoffEvent,
    HandoffTurnResult,
)
from ._routes import EDGE_KINDS
from ._state import adapter_for

__all__ = [
    "ROUTING_EVENT_PROPERTY",
    "ROUTING_EVENT_TYPES",
    "RoutingEvent",
    "TextLabels",
    "message_update",
    "read_back_updates",
    "routing_event",
    "routing_line",
    "routing_update",
]

ROUTING_EVENT_PROPERTY = "handoff_builder_event"
"""In an update streamed by ``ConversationHost.as_agent()``, the ``additional_properties`` key
of a routing event: ``{"type": <its WorkflowEvent type, e.g. "handoff_sent">, "data": <the event
as JSON>}``. Such an update has no contents; its ``author_name`` is the agent that made the step
(the handoff's source, the escalated or delegating agent)."""


@dataclass(frozen=True)
class RoutingEvent:
    """A routing event as a streamed update carries it: its type and the event as JSON."""

    type: str
    data: Mapping[str, Any]


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    return "" if value is None else " ".join(str(value).split())  # one line


def _handoff_line(data: Mapping[str, Any]) -> str:
    edge = EDGE_KINDS.get(_text(data, "kind"), EDGE_KINDS["handoff"])
    noun = "route" if data.get("decided_by") == "code" else edge.noun
    goal = _text(data, "goal")
    return f"{noun} `{data.get('source')}` → `{data.get('target')}`" + (f": {goal}" if goal else "")


# One row per routing event type: the agent that made the step, and the line it reads as.
_ROUTING: dict[str, tuple[str, Callable[[Mapping[str, Any]], str]]] = {
    HANDOFF_EVENT: ("source", _handoff_line),
    HANDOFF_BLOCKED_EVENT: (
        "source",
        lambda d: (
            f"blocked handoff from `{d.get('source')}` via `{d.get('tool_name')}` "
            f"({d.get('reason')})"
        ),
    ),
    HANDOFF_DELEGATION_EVENT: (
        "caller",
        lambda d: (
            f"delegation `{d.get('caller')}` → `{d.get('expert')}` ({d.get('outcome')}): "
            + _text(d, "task")
        ),
    ),
    HANDOFF_ESCALATED_EVENT: (
        "agent",
        lambda d: (
            f"escalated to a human: {d.get('reason')} at `{d.get('agent')}` "
            f"(limit {d.get('limit')})"
        ),
    ),
    HANDOFF_TIMEOUT_EVENT: (
        "agent",
        lambda d: (
            f"turn cut short: the {_text(d, 'limit').replace('_', ' ')} deadline "
            f"({d.get('seconds')} s) passed while `{d.get('agent')}` ran"
        ),
    ),
    HANDOFF_LIMIT_EVENT: (
        "agent",
        lambda d: f"limit reached: {d.get('kind')} for `{d.get('agent')}` (limit {d.get('limit')})",
    ),
    HANDOFF_TURN_ABANDONED_EVENT: (
        "agent",
        lambda d: f"turn abandoned ({d.get('reason')}) after {d.get('attempts')} attempts",
    ),
}
ROUTING_EVENT_TYPES = frozenset(_ROUTING)
"""The ``WorkflowEvent`` types a served turn streams as routing updates."""


def routing_update(event_type: str, event: object) -> AgentResponseUpdate:
    """The update that carries ``event`` (a routing event of ``event_type``) in a stream."""
    data = cast(dict[str, Any], adapter_for(type(event)).dump_python(event, mode="json"))
    if event_type == HANDOFF_DELEGATION_EVENT:
        data.pop("messages", None)  # the expert's own messages: in the turn's result, not here
    author = data.get(_ROUTING[event_type][0])
    return AgentResponseUpdate(
        role="assistant",
        contents=[],
        author_name=author if isinstance(author, str) else None,
        additional_properties={ROUTING_EVENT_PROPERTY: {"type": event_type, "data": data}},
    )


def routing_event(update: AgentResponseUpdate) -> RoutingEvent | None:
    """The routing event ``update`` carries, or ``None`` for an agent's update."""
    raw: Any = (update.additional_properties or {}).get(ROUTING_EVENT_PROPERTY)
    if not isinstance(raw, Mapping):
        return None
    fields = cast(Mapping[str, Any], raw)
    event_type, data = fields.get("type"), fields.get("data")
    if event_type not in _ROUTING or not isinstance(data, Mapping):
        return None
    return RoutingEvent(cast(str, event_type), cast(Mapping[str, Any], data))


def routing_line(event: RoutingEvent) -> str:
    """One line that says what ``event`` did: ``handoff `triage` → `billing`: the goal``."""
    return _ROUTING[event.type][1](event.data)


def message_update(message: Message) -> AgentResponseUpdate:
    """A stored message as one update of a stream (its author kept)."""
    return AgentResponseUpdate(
        role=message.role, contents=list(message.contents), author_name=message.author_name
    )


def read_back_updates(response: AgentResponse[Any]) -> Iterator[AgentResponseUpdate]:
    """A finished (or waiting) turn as a stream: an update per message and the turn's routing.

    A handoff or delegation made by a call comes right after the call's result; a route (code,
    no call) right before its target's first message after it; the escalation, deadline or
    abandonment last. What a turn read back, answered or finished gives a client that streams.
    """
    if not isinstance(response, HandoffTurnResult):
        yield from (message_update(message) for message in response.messages)
        return
    after_call, routes = _placed(response)
    for message in response.messages:
        if routes and message.author_name == routes[0][0]:
            yield routes.pop(0)[1]
        yield message_update(message)
        for content in message.contents:
            if content.type == "function_result" and content.call_id:
                yield from after_call.pop(str(content.call_id), [])
    yield from (update for updates in after_call.values() for update in updates)
    yield from (update for _, update in routes)
    endings = (response.escalation, response.timeout, response.abandoned)
    yield from (routing_update(e.event_type, e) for e in endings if e is not None)


def _placed(
    result: HandoffTurnResult,
) -> tuple[dict[str, list[AgentResponseUpdate]], list[tuple[str, AgentResponseUpdate]]]:
    """The turn's handoffs and delegations as updates, by the call that made them.

    Routes (made by code, with no call) come apart, each with its target, in order.
    """
    after_call: dict[str, list[AgentResponseUpdate]] = {}
    routes: list[tuple[str, AgentResponseUpdate]] = []
    events: list[HandoffEvent | DelegationEvent] = [*result.handoffs, *result.delegations]
    for event in events:
        update = routing_update(event.event_type, event)
        if event.call_id:
            after_call.setdefault(event.call_id, []).append(update)
        elif isinstance(event, HandoffEvent):
            routes.append((event.target, update))
    return after_call, routes


class TextLabels:
    """Labels a stream's text for a UI that shows only text (DevUI): who speaks, what routed.

    Called with each update of one stream, in order (``ResponseStream.with_update_transform``):
    the first text an agent writes, and its first after a routing event, starts with its name
    in bold (``**billing:** ``); a routing event becomes a text update, a quoted line of its own
    (``> handoff `triage` → `billing`: the goal``). Anything else goes through as it is.
    """

    def __init__(self) -> None:
        self._speaking: str | None = None  # the agent whose text was labelled last
        self._shown = False  # any text in the stream yet (a label then starts a new paragraph)

    def __call__(self, update: AgentResponseUpdate) -> AgentResponseUpdate:
        """``update`` as the UI shows it."""
        event = routing_event(update)
        if event is not None:
            self._speaking = None
            labelled = copy.copy(update)
            line = ("\n\n" if self._shown else "") + f"> {routing_line(event)}"
            labelled.contents = [Content.from_text(line)]
            self._shown = True
            return labelled
        if not update.text:
            return update
        author = update.author_name
        shown, self._shown = self._shown, True
        if update.role != "assistant" or author is None or author == self._speaking:
            return update
        self._speaking = author
        labelled = copy.copy(update)
        label = ("\n\n" if shown else "") + f"**{author}:** "
        labelled.contents = [Content.from_text(label), *update.contents]
        return labelled
