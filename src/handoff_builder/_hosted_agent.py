"""Hosted handoff conversations as an agent_framework agent (``ConversationHost.as_agent``).

The agent's session id is the conversation id: ``agent.run(text, session=AgentSession(
session_id="alice"))`` continues Alice's stored conversation at her remembered agent, so any
agent_framework hosting that keeps one session per conversation (DevUI, the AG-UI endpoint)
serves hosted handoff conversations, each isolated, each remembering its active agent.

* A run without a session is a new conversation (a fresh id each time).
* Only the new input is sent on: a client that resends the conversation (AG-UI does) gives its
  whole transcript, and the store has everything but the messages after the last reply. The
  trailing user messages are the turn.
* A turn that waits for a person (a tool approval, a delegation's approval, an external call)
  answers with its requests as contents of the response (``user_input_requests``), as
  agent_framework's own agents do; the next run's ``function_approval_response`` or
  ``function_result`` contents answer them (``ConversationHost.respond``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TYPE_CHECKING, Any, cast, overload

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    BaseAgent,
    Content,
    Message,
    ResponseStream,
)
from typing_extensions import override

from ._events import HANDOFF_TURN_EVENT, HandoffTurnResult
from .exceptions import PendingRequestsError

if TYPE_CHECKING:
    from ._hosting import ConversationHost

__all__ = ["HostedConversationAgent"]


class HostedConversationAgent(BaseAgent):
    """A :class:`~handoff_builder.ConversationHost` as an agent: one conversation per session.

    Made by :meth:`ConversationHost.as_agent`. ``run`` (streaming or not) sends the new user
    message to the session's conversation, or answers the requests it waits for, and returns
    the turn's result (a :class:`~handoff_builder.HandoffTurnResult`, which is an
    ``AgentResponse``).
    """

    def __init__(
        self,
        host: ConversationHost,
        *,
        name: str,
        description: str | None = None,
        id: str | None = None,  # noqa: A002 - agent_framework's name
    ) -> None:
        super().__init__(id=id or name, name=name, description=description)
        self.host = host

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
    ) -> Awaitable[AgentResponse[Any]] | ResponseStream[AgentResponseUpdate, AgentResponse[Any]]:
        """One turn of the session's conversation (a new conversation without a session).

        Keyword arguments agent_framework's hosting passes (``function_invocation_kwargs``,
        ``client_kwargs``) are accepted and not used: the workflow's agents have their own.
        """
        del kwargs
        conversation_id = (session or self.create_session()).session_id
        inputs = _new_input(messages)
        if stream:
            return self._stream(conversation_id, inputs)
        return self._send(conversation_id, inputs)

    async def _send(self, conversation_id: str, inputs: list[Message]) -> AgentResponse[Any]:
        answers = _answers(inputs)
        try:
            if answers:
                return await self.host.respond(conversation_id, answers, wait=True)
            return await self.host.send(conversation_id, inputs, wait=True)
        except PendingRequestsError as waiting:
            return _waiting(waiting.requests)

    def _stream(
        self, conversation_id: str, inputs: list[Message]
    ) -> ResponseStream[AgentResponseUpdate, AgentResponse[Any]]:
        final: list[AgentResponse[Any]] = []
        if _answers(inputs):
            updates = self._answered(conversation_id, inputs, final)
        else:
            updates = self._turn(conversation_id, inputs, final)

        def finish(seen: Sequence[AgentResponseUpdate]) -> AgentResponse[Any]:
            return final[-1] if final else AgentResponse.from_updates(list(seen))

        return ResponseStream(updates, finalizer=finish)

    async def _answered(
        self, conversation_id: str, inputs: list[Message], final: list[AgentResponse[Any]]
    ) -> AsyncIterator[AgentResponseUpdate]:
        """Answers are not streamed: the rest of the turn comes as one update per message."""
        result = await self._send(conversation_id, inputs)
        final.append(result)
        for message in result.messages:
            yield _update(message)

    async def _turn(
        self, conversation_id: str, inputs: list[Message], final: list[AgentResponse[Any]]
    ) -> AsyncIterator[AgentResponseUpdate]:
        """The agents' updates as they come; a turn that waits ends with its requests."""
        requests: list[Content] = []
        async for event in self.host.stream(conversation_id, inputs, wait=True):
            if event.type == "output" and isinstance(event.data, AgentResponseUpdate):
                yield event.data
            elif event.type == "request_info" and isinstance(event.data, Content):
                requests.append(event.data)
            elif event.type == HANDOFF_TURN_EVENT and isinstance(event.data, HandoffTurnResult):
                final.append(event.data)
        if requests and not final:
            waiting = _waiting(requests)
            final.append(waiting)
            yield _update(waiting.messages[0])

    @override
    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        """A session: its id is the conversation's (a new one when not given)."""
        return AgentSession(session_id=session_id)


def _messages_of(messages: Any) -> list[Message]:
    if messages is None:
        return []
    if isinstance(messages, str):
        return [Message(role="user", contents=[messages])]
    if isinstance(messages, Message):
        return [messages]
    if isinstance(messages, Content):
        return [Message(role="user", contents=[messages])]
    found: list[Message] = []
    for item in cast(Sequence[Any], messages):
        found.extend(_messages_of(item))
    return found


def _new_input(messages: Any) -> list[Message]:
    """The new input of a run: the messages after the last reply in what the client sent."""
    given = _messages_of(messages)
    last_reply = max(
        (i for i, m in enumerate(given) if m.role in ("assistant", "tool")), default=-1
    )
    new = given[last_reply + 1 :]
    if not new:
        raise ValueError(
            "A run needs a new user message (or answers to the requests it waits for)."
        )
    return new


def _answers(inputs: Sequence[Message]) -> dict[str, Content]:
    """Answers to pending requests in the input, by request id (approvals, external results)."""
    answers: dict[str, Content] = {}
    for message in inputs:
        for content in message.contents:
            if content.type == "function_approval_response" and content.id is not None:
                answers[str(content.id)] = content
            elif content.type == "function_result" and content.call_id is not None:
                answers[str(content.call_id)] = content
    return answers


def _waiting(requests: Sequence[Content]) -> AgentResponse[Any]:
    """The response of a turn that waits: its requests, for the client to answer."""
    return AgentResponse(messages=[Message(role="assistant", contents=list(requests))])


def _update(message: Message) -> AgentResponseUpdate:
    return AgentResponseUpdate(
        role=message.role, contents=list(message.contents), author_name=message.author_name
    )
