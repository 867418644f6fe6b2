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

from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import replace
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
from ._state import TurnRecord
from .exceptions import PendingRequestsError

if TYPE_CHECKING:
    from ._hosting import ConversationHost

__all__ = ["HostedConversationAgent"]

_ANSWERS = frozenset({"function_approval_response", "function_result"})


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
        given = _messages_of(messages)
        final: list[AgentResponse[Any]] = []
        if not stream:
            return self._send(conversation_id, given)

        def finish(seen: Sequence[AgentResponseUpdate]) -> AgentResponse[Any]:
            return final[-1] if final else AgentResponse.from_updates(list(seen))

        return ResponseStream(self._updates(conversation_id, given, final), finalizer=finish)

    async def _send(self, conversation_id: str, given: list[Message]) -> AgentResponse[Any]:
        answered = await self._answer(conversation_id, given)
        if answered is not None:
            return answered
        inputs = await self._new_input(conversation_id, given)
        try:
            return await self.host.send(conversation_id, inputs, wait=True)
        except PendingRequestsError as waiting:
            return await self._waiting_turn(conversation_id, inputs, waiting.requests)

    async def _waiting_turn(
        self, conversation_id: str, inputs: list[Message], requests: Sequence[Content]
    ) -> AgentResponse[Any]:
        """The response of a turn that waits: what it wrote so far, its requests last.

        A message sent while the turn already waited ran nothing: it gets the requests only.
        """
        from ._hosting import open_turn_so_far

        turn = await open_turn_so_far(self.host, conversation_id)
        if turn is None or [m.text for m in turn.input] != [m.text for m in inputs]:
            return _waiting(requests)
        return AgentResponse(messages=turn.messages)

    async def _updates(
        self, conversation_id: str, given: list[Message], final: list[AgentResponse[Any]]
    ) -> AsyncIterator[AgentResponseUpdate]:
        """The agents' updates as they come; answers and a waiting turn come as one update."""
        answered = await self._answer(conversation_id, given)
        if answered is not None:
            final.append(answered)
            for message in answered.messages:
                yield _update(message)
            return
        inputs = await self._new_input(conversation_id, given)
        requests: list[Content] = []
        try:
            async for event in self.host.stream(conversation_id, inputs, wait=True):
                if event.type == "output" and isinstance(event.data, AgentResponseUpdate):
                    yield event.data  # a request the turn waits for comes in an update too
                elif event.type == "request_info" and isinstance(event.data, Content):
                    requests.append(event.data)
                elif event.type == HANDOFF_TURN_EVENT and isinstance(event.data, HandoffTurnResult):
                    final.append(event.data)
        except PendingRequestsError as waiting:  # a new message while the turn waits
            final.append(_waiting(waiting.requests))
            yield _update(final[-1].messages[0])
            return
        if requests and not final:
            final.append(_waiting(requests))

    async def _answer(
        self, conversation_id: str, given: list[Message]
    ) -> AgentResponse[Any] | None:
        """When the conversation waits, the answers in ``given`` carried out.

        ``None`` when ``given`` answers nothing (a new message while the turn waits gets the
        requests again from ``send``/``stream``), or when nothing waits.
        """
        if not any(c.type in _ANSWERS for m in given for c in m.contents):
            return None  # nothing to look up: the store is read once, by the turn
        pending = await self.host.pending(conversation_id)
        if not pending:
            return None
        answers = _answers_to(pending, given)
        if not answers:
            return None
        result = await self.host.respond(conversation_id, answers, wait=True)
        return after_answers(result, answers)

    async def _new_input(self, conversation_id: str, given: list[Message]) -> list[Message]:
        """The new user input: what follows the last reply in what the client sent.

        Less what the store has already: a client resends its transcript after a failed turn.
        """
        new = _after_last_reply(given)
        if not new:
            raise ValueError(
                "A run needs a new user message (or answers to the requests it waits for)."
            )
        if len(new) > 1:  # only a turn that failed leaves user messages unanswered in the store
            stored = _after_last_reply(await self.host.history(conversation_id))
            while stored and new and _same_text(stored[0], new[0]):
                stored, new = stored[1:], new[1:]
            if not new:
                raise ValueError("Every message of the run is stored already; send a new one.")
        return new

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


def _after_last_reply(messages: Sequence[Message]) -> list[Message]:
    """The messages after the last assistant or tool message."""
    last = max((i for i, m in enumerate(messages) if m.role in ("assistant", "tool")), default=-1)
    return list(messages[last + 1 :])


def _same_text(a: Message, b: Message) -> bool:
    return a.role == b.role and a.text == b.text


def _answers_to(pending: Sequence[Content], given: Sequence[Message]) -> dict[str, Content]:
    """The answers in ``given`` to ``pending`` requests, by request id (any message's role).

    An approval is answered by a ``function_approval_response`` with the request's id; an
    external call by a ``function_result`` with its call id.
    """
    ids = {str(request.id) for request in pending}
    calls = {
        str(request.call_id): str(request.id)
        for request in pending
        if request.type == "function_call" and request.call_id is not None
    }
    answers: dict[str, Content] = {}
    for message in given:
        for content in message.contents:
            if content.type == "function_approval_response" and str(content.id) in ids:
                answers[str(content.id)] = content
            elif content.type == "function_result" and str(content.call_id) in calls:
                answers[calls[str(content.call_id)]] = content
    return answers


def after_answers(result: HandoffTurnResult, answers: Mapping[str, Content]) -> HandoffTurnResult:
    """The turn's result with what came after ``answers`` only: not the requests again.

    The turn's messages hold the response that asked and the answers (the approvals, or the
    results, of the calls answered), then what the agents wrote since: the result starts after
    the last message that answers one of those calls.
    """
    calls = {
        str(answer.function_call.call_id)
        for answer in answers.values()
        if answer.type == "function_approval_response" and answer.function_call is not None
    } | {str(a.call_id) for a in answers.values() if a.type == "function_result"}

    def answers_one(message: Message) -> bool:
        return any(
            (content.type == "function_approval_response" and str(content.id) in answers)
            or (content.type == "function_result" and str(content.call_id) in calls)
            for content in message.contents
        )

    conversation = result.conversation
    last = max(
        (i for i in range(result.start, len(conversation)) if answers_one(conversation[i])),
        default=None,
    )
    if last is None:
        return result
    record = replace(TurnRecord.of(result), start=last + 1)
    return record.result(conversation, recovered=result.recovered)


def _waiting(requests: Sequence[Content]) -> AgentResponse[Any]:
    """The response of a turn that waits: its requests, for the client to answer."""
    return AgentResponse(messages=[Message(role="assistant", contents=list(requests))])


def _update(message: Message) -> AgentResponseUpdate:
    return AgentResponseUpdate(
        role=message.role, contents=list(message.contents), author_name=message.author_name
    )
