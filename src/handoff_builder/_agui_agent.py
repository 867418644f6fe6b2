"""Hosted conversations over AG-UI, saying which agent speaks and what routed the turn.

agent_framework_ag_ui turns an agent's updates into AG-UI events from their contents only: an
update's ``author_name`` is not carried, and an update without contents gives no event. So
:func:`agui_agent` wraps ``ConversationHost.as_agent()``'s agent in an AG-UI runner (an
``AgentFrameworkAgent``) that adds, to the events AG-UI makes:

* a step per agent: ``STEP_STARTED`` / ``STEP_FINISHED`` with ``stepName`` the agent's name,
  around everything the agent wrote (as AG-UI's workflow runner does for each executor);
* the agent's name on each assistant message: ``TEXT_MESSAGE_START``'s ``name``, and ``name``
  on the messages of the final ``MESSAGES_SNAPSHOT``; text of two agents that AG-UI would run
  together (a route: no tool call between them) becomes two messages;
* a ``CUSTOM`` event for each routing event (a handoff, hand-back, route, refused handoff,
  delegation, escalation, deadline, limit), named after its ``WorkflowEvent`` type
  (``"handoff_sent"``...), its value the event as JSON, inside the step of the agent that made
  it: the same name and value AG-UI's own workflow runner gives a workflow event.

It reads the agent's updates as AG-UI pulls them (each update's events come before the next
update is pulled), through a view of the agent made for each run.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, cast, overload

try:
    from ag_ui.core import (
        AssistantMessage,
        BaseEvent,
        CustomEvent,
        EventType,
        MessagesSnapshotEvent,
        StepFinishedEvent,
        StepStartedEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
    )
    from agent_framework_ag_ui import AgentFrameworkAgent
except ImportError as missing:  # pragma: no cover - the serve extra is not installed
    raise ImportError(
        "agui_agent needs agent-framework-ag-ui: pip install 'handoff-builder[serve]'."
    ) from missing

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    BaseAgent,
    ResponseStream,
)
from typing_extensions import override

from ._hosted_agent import HostedConversationAgent
from ._routing_updates import routing_event

__all__ = ["AGUIEvents", "agui_agent"]

# Events that belong to the run, not to an agent: no step is opened for them.
_RUN_EVENTS = frozenset(
    {EventType.RUN_STARTED, EventType.STATE_SNAPSHOT, EventType.STATE_DELTA, EventType.RAW}
)
# Events that end the run's content: the open step is finished before them.
_CLOSING_EVENTS = frozenset(
    {EventType.MESSAGES_SNAPSHOT, EventType.RUN_FINISHED, EventType.RUN_ERROR}
)


def agui_agent(agent: HostedConversationAgent) -> AgentFrameworkAgent:
    """``agent`` as an AG-UI runner that names the agent of each reply and each routing step.

    Pass it to ``add_agent_framework_fastapi_endpoint`` instead of ``agent``::

        add_agent_framework_fastapi_endpoint(
            app, agui_agent(host.as_agent(name="desk")), "/desk", ...
        )

    Each agent's output is a step (``STEP_STARTED``/``STEP_FINISHED``, ``stepName`` the agent),
    each assistant message carries its agent's ``name`` (``TEXT_MESSAGE_START`` and the
    ``MESSAGES_SNAPSHOT``), and each routing event is a ``CUSTOM`` event named after its type
    (``"handoff_sent"``, value ``{"source", "target", "goal", "kind", "decided_by", ...}``).
    """
    return _ConversationRunner(agent)


class _ConversationRunner(AgentFrameworkAgent):
    """AG-UI's agent runner, with each run's events given their agents (:class:`AGUIEvents`)."""

    def __init__(self, agent: HostedConversationAgent) -> None:
        super().__init__(agent=agent, name=agent.name, description=agent.description)
        self.conversations = agent

    @override
    async def run(
        self,
        input_data: dict[str, Any],
        *,
        function_invocation_kwargs: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[BaseEvent, None]:
        """AG-UI's events for the run, with the agents' steps, names and routing events."""
        events = AGUIEvents()
        runner = copy.copy(self)  # shares the configuration and the approval state
        runner.agent = _Observed(self.conversations, events.note)
        run = AgentFrameworkAgent.run(
            runner, input_data, function_invocation_kwargs=function_invocation_kwargs
        )
        async with aclosing(run):
            async for event in run:
                for named in events.events(event):
                    yield named


class _Observed(BaseAgent):
    """The hosted agent, for one run: each streamed update is shown to ``note`` as it is pulled."""

    def __init__(
        self,
        agent: HostedConversationAgent,
        note: Callable[[AgentResponseUpdate], AgentResponseUpdate],
    ) -> None:
        super().__init__(id=agent.id, name=agent.name, description=agent.description)
        self._agent = agent
        self._note = note

    @overload
    def run(
        self,
        messages: Any = None,
        *,
        stream: bool = False,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> Any: ...

    @overload
    def run(self, messages: Any = None, **kwargs: Any) -> Any: ...

    def run(
        self,
        messages: Any = None,
        *,
        stream: bool = False,
        session: AgentSession | None = None,
        **kwargs: Any,
    ) -> Any:
        """The hosted agent's run; a stream's updates pass ``note`` on their way."""
        response = self._agent.run(messages, stream=stream, session=session, **kwargs)
        if isinstance(response, ResponseStream):
            stream_ = cast(ResponseStream[AgentResponseUpdate, AgentResponse[Any]], response)
            return stream_.with_update_transform(self._note)
        return response

    @override
    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        """The hosted agent's session (its id is the conversation's)."""
        return self._agent.create_session(session_id=session_id)


@dataclass
class _Message:
    """An assistant message as this run sends it (AG-UI's may be split in two by agent)."""

    id: str
    name: str | None
    text: str = ""


@dataclass
class AGUIEvents:
    """One run's AG-UI events, given the agents that wrote them.

    :meth:`note` sees each update of the agent's stream as AG-UI pulls it; :meth:`events` takes
    each event AG-UI made and returns the events to send in its place. AG-UI makes an update's
    events after pulling it and before pulling the next, so the last update noted is the one
    an event comes from.
    """

    author: str | None = None
    """The agent of the last update noted."""
    step: str | None = None
    """The agent whose step is open."""
    pending: list[tuple[str | None, CustomEvent]] = field(default_factory=list)  # pyright: ignore[reportUnknownVariableType]
    """Routing events noted and not sent yet, with the agent that made each."""
    open_id: str | None = None
    """AG-UI's id of the assistant message open now (between its start and its end)."""
    open_started: bool = False
    """Whether the open message's current part was started (a split ends it, the next starts)."""
    parts: dict[str, list[_Message]] = field(default_factory=dict)  # pyright: ignore[reportUnknownVariableType]
    """AG-UI's message id -> the messages sent for it, in order (more than one: split)."""
    named: dict[str, str] = field(default_factory=dict)  # pyright: ignore[reportUnknownVariableType]
    """Message ids of tool calls -> the agent that made them."""

    def note(self, update: AgentResponseUpdate) -> AgentResponseUpdate:
        """Take ``update`` as AG-UI pulls it (a stream's update transform): it goes on as it is."""
        event = routing_event(update)
        if event is not None:
            custom = CustomEvent(name=event.type, value=dict(event.data))
            self.pending.append((update.author_name, custom))
        elif update.author_name is not None and update.role in ("assistant", "tool"):
            self.author = update.author_name
        return update

    def events(self, event: BaseEvent) -> list[BaseEvent]:
        """The events to send for ``event``: it, named, with the steps and routing before it."""
        if event.type in _RUN_EVENTS:
            return [event]
        out: list[BaseEvent] = []
        for author, custom in self.pending:  # the agent that made the step wrote what came before
            out += [*self._enter(author or self.step), *self._end_part(), custom]
        self.pending.clear()
        if event.type in _CLOSING_EVENTS:
            out += self._enter(None)
            if isinstance(event, MessagesSnapshotEvent):
                return [*out, self._named_snapshot(event)]
            return [*out, event]
        if self.author is not None:
            out += self._enter(self.author)
        return out + self._named(event)

    def _enter(self, agent: str | None) -> list[BaseEvent]:
        """The events that finish the open step and start ``agent``'s (``None``: none)."""
        if agent == self.step or (agent is None and self.step is None):
            return []
        out = self._end_part()
        if self.step is not None:
            out.append(StepFinishedEvent(step_name=self.step))
        if agent is not None:
            out.append(StepStartedEvent(step_name=agent))
        self.step = agent
        return out

    def _end_part(self) -> list[BaseEvent]:
        """The end of the open message's current part, if one is open: what follows is new."""
        if self.open_id is None or not self.open_started:
            return []
        self.open_started = False  # more text in AG-UI's message starts a new part
        return [TextMessageEndEvent(message_id=self.parts[self.open_id][-1].id)]

    def _named(self, event: BaseEvent) -> list[BaseEvent]:
        """``event`` with the agent's name, or with the id of the part it belongs to now."""
        if isinstance(event, TextMessageStartEvent):
            self.open_id, self.open_started = event.message_id, True
            self.parts[event.message_id] = [_Message(event.message_id, self.step)]
            return [event.model_copy(update={"name": self.step})]
        fields = event.model_dump()  # snake_case field names
        message_id = fields.get("message_id") or fields.get("parent_message_id")
        if message_id is None or message_id != self.open_id:
            if event.type == EventType.TOOL_CALL_START and message_id and self.step:
                self.named.setdefault(str(message_id), self.step)
            return [event]
        out: list[BaseEvent] = []
        parts = self.parts[message_id]
        if event.type == EventType.TEXT_MESSAGE_END:
            self.open_id = None
            if not self.open_started:
                return []  # a split ended it already
            return [event.model_copy(update={"message_id": parts[-1].id})]
        if not self.open_started:  # the first output of another agent in a message: a new part
            parts.append(_Message(f"{message_id}:{len(parts)}", self.step))
            out.append(TextMessageStartEvent(message_id=parts[-1].id, name=self.step))
            self.open_started = True
        part = parts[-1]
        if event.type == EventType.TEXT_MESSAGE_CONTENT:
            part.text += str(fields.get("delta") or "")
        key = "message_id" if "message_id" in fields else "parent_message_id"
        if event.type == EventType.TOOL_CALL_START and part.name:
            self.named.setdefault(part.id, part.name)
        return [*out, event.model_copy(update={key: part.id})]

    def _named_snapshot(self, event: MessagesSnapshotEvent) -> MessagesSnapshotEvent:
        """The snapshot with each assistant message of this run named, split messages split."""
        messages: list[Any] = []
        for message in event.messages:
            parts = self.parts.get(message.id)
            ours = parts is not None or message.id in self.named
            if not isinstance(message, AssistantMessage) or not ours:
                messages.append(message)
            elif parts and len(parts) > 1 and message.content == "".join(p.text for p in parts):
                messages += [
                    message.model_copy(update={"id": p.id, "name": p.name, "content": p.text})
                    for p in parts
                ]
            else:
                name = parts[0].name if parts else self.named[message.id]
                messages.append(message.model_copy(update={"name": name}))
        return event.model_copy(update={"messages": messages})
