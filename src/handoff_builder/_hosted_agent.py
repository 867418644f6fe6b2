"""Hosted handoff conversations as an agent_framework agent (``ConversationHost.as_agent``).

The agent's session id is the conversation id: ``agent.run(text, session=AgentSession(
session_id="alice"))`` continues Alice's stored conversation at her remembered agent, so any
agent_framework hosting that keeps one session per conversation (DevUI, the AG-UI endpoint)
serves hosted handoff conversations, each isolated, each remembering its active agent.

* A run without a session is a new conversation (a fresh id each time).
* Text is a new message. Messages are a transcript (AG-UI clients send the whole conversation,
  and send it again after a dropped connection): only its user messages the store does not have
  are a new turn, and a transcript the store has whole gets the turn it asked for again, not a
  new one (``_transcript``).
* A turn that waits for a person (a tool approval, a delegation's approval, an external call)
  answers with its requests as contents of the response (``user_input_requests``), as
  agent_framework's own agents do; the next run's ``function_approval_response`` or
  ``function_result`` contents answer them (``ConversationHost.respond``).
* Text is made valid Unicode at this boundary, both ways (``_unicode``): what the run is given
  before it is stored or sent to a model, and every message and update it hands on.
* A stream says who wrote what: each update's ``author_name`` is its agent, and each routing
  event of the turn (a handoff, a route, a refused handoff...) is an update without contents
  that carries it (``_routing_updates``); :func:`devui_agent` writes both into the text, for
  DevUI, and ``agui_agent`` (``_agui_agent``) makes them AG-UI events.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncGenerator, Awaitable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    BaseAgent,
    Content,
    Message,
    ResponseStream,
    WorkflowEvent,
)
from typing_extensions import override

from ._events import HANDOFF_TURN_EVENT, HandoffTurnResult
from ._records import open_turn_so_far
from ._routing_updates import (
    ROUTING_EVENT_TYPES,
    TextLabels,
    message_update,
    read_back_updates,
    routing_update,
)
from ._state import TurnRecord
from ._transcript import NewTurn, ResentTurn, messages_of, new_input, read_transcript, same_message
from ._unicode import valid_unicode
from .exceptions import InvalidMessageError, PendingRequestsError

if TYPE_CHECKING:
    from ._hosting import ConversationHost

__all__ = ["HostedConversationAgent", "devui_agent"]

_ANSWERS = frozenset({"function_approval_response", "function_result"})
_Serialized = TypeVar("_Serialized", Message, AgentResponseUpdate)


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
        text_labels: bool = False,
    ) -> None:
        super().__init__(id=id or name, name=name, description=description)
        self.host = host
        self.text_labels = text_labels
        """Whether streamed text is labelled for a UI that shows only text (:func:`devui_agent`):
        each agent's text starts with its name, each routing event is a line of text."""

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

        ``messages`` is text (a new user message) or messages, a transcript: only its user
        messages the conversation has not stored run, and a transcript it has stored whole gets
        that turn again (finished first if it was interrupted), not a new one.

        Keyword arguments agent_framework's hosting passes (``function_invocation_kwargs``,
        ``client_kwargs``) are accepted and not used: the workflow's agents have their own.

        Raises:
            InvalidMessageError: ``messages`` is not text, a Message or a Content, or a list of
                them; a message's role is not user, assistant, system or tool; or no user message
                follows the last reply. Nothing is stored then.
        """
        del kwargs
        conversation_id = (session or self.create_session()).session_id
        given = [_valid(message) for message in messages_of(messages)]
        transcript = not isinstance(messages, str)
        final: list[AgentResponse[Any]] = []
        if not stream:
            return self._run(conversation_id, given, transcript=transcript)

        def finish(seen: Sequence[AgentResponseUpdate]) -> AgentResponse[Any]:
            return _valid_response(final[-1]) if final else AgentResponse.from_updates(list(seen))

        updates = self._updates(conversation_id, given, final, transcript=transcript)
        labelled = ResponseStream(_valid_updates(updates), finalizer=finish)
        return labelled.with_update_transform(TextLabels()) if self.text_labels else labelled

    async def _run(
        self,
        conversation_id: str,
        given: list[Message],
        *,
        transcript: bool,
    ) -> AgentResponse[Any]:
        return _valid_response(await self._send(conversation_id, given, transcript=transcript))

    async def _send(
        self,
        conversation_id: str,
        given: list[Message],
        *,
        transcript: bool,
    ) -> AgentResponse[Any]:
        answered = await self._answer(conversation_id, given)
        if answered is not None:
            return answered
        turn = await self._turn(conversation_id, given, transcript=transcript)
        if isinstance(turn, ResentTurn):
            return await self._resent(conversation_id, turn)
        try:
            return await self.host.send(
                conversation_id, turn.messages, wait=True, idempotency_key=turn.key
            )
        except PendingRequestsError as waiting:
            return await self._waiting_turn(conversation_id, turn.messages, waiting.requests)

    async def _turn(
        self,
        conversation_id: str,
        given: list[Message],
        *,
        transcript: bool,
    ) -> NewTurn | ResentTurn:
        """The turn the run asks for: text is new; a transcript is read against the store."""
        if not transcript:
            return NewTurn(new_input(given), None)
        return read_transcript(given, await self.host.history(conversation_id))

    async def _resent(self, conversation_id: str, turn: ResentTurn) -> AgentResponse[Any]:
        """The turn a resent transcript asked for: read back, or finished if it was interrupted.

        Nothing is stored or answered again; a turn that waits gives what it wrote so far, its
        requests last. A turn sent without a key (before this agent kept them) is finished when
        it is the open one.
        """
        try:
            result = await self.host.replay(conversation_id, turn.key, wait=True)
            if result is None:
                open_turn = await open_turn_so_far(self.host.store, conversation_id)
                if open_turn is not None and any(
                    same_message(m, turn.last) for m in open_turn.input
                ):
                    result = await self.host.resume(conversation_id, wait=True)
        except PendingRequestsError as waiting:
            return await self._waiting_turn(conversation_id, None, waiting.requests)
        if result is None:
            raise InvalidMessageError(
                "Every user message of the run is stored already, and the turn they started is "
                "no longer known; send a new message."
            )
        return result

    async def _waiting_turn(
        self, conversation_id: str, inputs: list[Message] | None, requests: Sequence[Content]
    ) -> AgentResponse[Any]:
        """The response of a turn that waits: what it wrote so far, its requests last.

        A message sent while the turn already waited ran nothing: it gets the requests only.
        ``inputs`` is ``None`` when the run asked for the turn that waits (a resent one).
        """
        turn = await open_turn_so_far(self.host.store, conversation_id)
        if turn is None or (
            inputs is not None and [m.text for m in turn.input] != [m.text for m in inputs]
        ):
            return _waiting(requests)
        return AgentResponse(messages=turn.messages)

    async def _updates(
        self,
        conversation_id: str,
        given: list[Message],
        final: list[AgentResponse[Any]],
        *,
        transcript: bool,
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """The agents' updates as they come.

        Answers, and a turn read back or that waits, come as an update per message at the end.
        """
        answered = await self._answer(conversation_id, given)
        if answered is None:
            turn = await self._turn(conversation_id, given, transcript=transcript)
            if isinstance(turn, NewTurn):
                async with aclosing(self._stream(conversation_id, turn, final)) as updates:
                    async for update in updates:
                        yield update
                return
            answered = await self._resent(conversation_id, turn)
        final.append(answered)
        for update in read_back_updates(answered):
            yield update

    async def _stream(
        self, conversation_id: str, turn: NewTurn, final: list[AgentResponse[Any]]
    ) -> AsyncGenerator[AgentResponseUpdate, None]:
        """A new turn's updates as the agents write them."""
        requests: list[Content] = []
        streamed = False
        try:
            stream = self.host.stream(
                conversation_id, turn.messages, wait=True, idempotency_key=turn.key
            )  # an async generator: closed with this one
            async with aclosing(cast(AsyncGenerator[WorkflowEvent[Any], None], stream)) as events:
                async for event in events:
                    if event.type == "output" and isinstance(event.data, AgentResponseUpdate):
                        streamed = True
                        yield event.data  # a request the turn waits for comes in an update too
                    elif event.type in ROUTING_EVENT_TYPES:
                        yield routing_update(event.type, event.data)
                    elif event.type == "request_info" and isinstance(event.data, Content):
                        requests.append(event.data)
                    elif event.type == HANDOFF_TURN_EVENT and isinstance(
                        event.data, HandoffTurnResult
                    ):
                        final.append(event.data)
        except PendingRequestsError as waiting:  # a new message while the turn waits
            final.append(_waiting(waiting.requests))
            yield message_update(final[-1].messages[0])
            return
        if requests and not final:
            final.append(_waiting(requests))
        elif final and not streamed:  # the same turn, sent at the same time, ran it: read back
            for update in read_back_updates(final[-1]):
                yield update

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

    @override
    def create_session(self, *, session_id: str | None = None) -> AgentSession:
        """A session: its id is the conversation's (a new one when not given)."""
        return AgentSession(session_id=session_id)


def devui_agent(agent: HostedConversationAgent) -> HostedConversationAgent:
    """``agent`` for DevUI: its streamed text says which agent wrote it and what routed.

    DevUI's chat shows an agent's text (and tool calls, folded away), nothing else: no author,
    no event. So each agent's text starts with its name in bold (``**billing:** ...``), and each
    routing event of the turn (a handoff, hand-back, route, refused handoff, delegation,
    escalation) is a quoted line of its own (``> handoff `triage` → `billing`: the goal``). The
    conversations, what is stored and what the models see are ``agent``'s: only the stream a
    client reads is labelled. ``serve(entities=[devui_agent(host.as_agent(name="desk"))])``.
    """
    return HostedConversationAgent(
        agent.host,
        name=agent.name or "handoff",
        description=agent.description,
        id=agent.id,
        text_labels=True,
    )


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


def _valid(value: _Serialized) -> _Serialized:
    """``value`` with valid Unicode text everywhere (itself when it had nothing to replace)."""
    raw = value.to_dict()
    cleaned = valid_unicode(raw)
    return value if cleaned is raw else type(value).from_dict(cleaned)


async def _valid_updates(
    updates: AsyncGenerator[AgentResponseUpdate, None],
) -> AsyncGenerator[AgentResponseUpdate, None]:
    async with aclosing(updates):  # a client that stops reading ends the turn's stream at once
        async for update in updates:
            yield _valid(update)


def _valid_response(response: AgentResponse[Any]) -> AgentResponse[Any]:
    """``response`` with valid Unicode text in its messages (the reply a client is shown).

    A turn result's ``conversation`` is the stored history as it is: reading all of it again
    for every turn would cost what the history costs.
    """
    messages = [_valid(message) for message in response.messages]
    if all(a is b for a, b in zip(messages, response.messages, strict=True)):
        return response
    valid = copy.copy(response)
    valid.messages = messages
    return valid
