"""Hosted handoff conversations served as an A2A agent (:func:`a2a_app`).

The app is a2a-sdk's own server (its JSON-RPC routes, its agent card route, its request handler
and task store) around an ``AgentExecutor`` that runs each A2A message as a turn of a
:class:`~handoff_builder.ConversationHost`:

* **The A2A context id is the conversation id.** A message without one opens a new
  conversation (the server makes the id); the next message in the same context goes to the agent
  the conversation is with, as ``host.send`` would.
* **A message is a turn.** Each message is an A2A task: the turn runs with ``host.stream``; each
  agent message of the reply is an artifact (named by its agent), streamed in chunks as the agent
  writes (``append``), and ends with one last chunk holding the whole text (``append=False``,
  ``last_chunk=True``), so the stored task holds each message whole. Each routing event of the
  turn (a handoff, a delegation...) is a ``working`` status update whose metadata carries it,
  under :data:`~handoff_builder.ROUTING_EVENT_PROPERTY`. The task ends ``completed``.
* **A turn that waits for a person** (an approval, an external call, a remote agent's question)
  ends its task ``input-required``, the requests described in the status message (a text part
  for a person, a data part for a program). The next message in the context answers them
  (:func:`answers_in` reads it) and the turn carries on through ``host.respond``; a message
  that answers nothing leaves the task waiting, saying why.
* **Bad input is an A2A error, before anything runs**: a message with neither a text nor a data
  part, a context id that cannot be a conversation id, a data part that is not an answer or
  answers nothing the conversation waits for (``InvalidParamsError``); an unknown task id is
  a2a-sdk's own ``TaskNotFoundError``. A turn that fails (a model, a remote agent) ends its task
  ``failed``, the error in the status message; the host retries the turn with the next message.

Why not agent_framework's own ``A2AExecutor`` around ``host.as_agent()``: it completes every task
(nothing ends ``input-required``, so no request could be answered), streams only the agents'
text (no routing events), and sends no reply for a turn that waits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import InternalError, InvalidParamsError
from agent_framework import AgentResponseUpdate, Content, WorkflowEvent
from agent_framework import Message as AgentMessage
from starlette.applications import Starlette
from typing_extensions import override

from ._events import HANDOFF_TURN_EVENT, HandoffTurnResult
from ._hosted_agent import after_answers
from ._remote_input import RemoteQuestion
from ._routing_updates import ROUTING_EVENT_PROPERTY, ROUTING_EVENT_TYPES, routing_update
from .exceptions import PendingRequestsError
from .stores import check_conversation_id

if TYPE_CHECKING:
    from a2a.server.events import Event

    from ._hosting import ConversationHost

__all__ = ["A2A_TURN_PROPERTY", "APPROVE_WORDS", "DECLINE_WORDS", "a2a_app", "answers_in"]

APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})
"""A text answer that approves every approval a turn waits for (case and a final ``.`` or ``!``
do not matter)."""
DECLINE_WORDS = frozenset({"decline", "declined", "no", "n", "deny", "reject"})
"""A text answer that declines every approval a turn waits for."""
A2A_TURN_PROPERTY = "handoff_builder_turn"
"""The metadata key of a task's last status update that says how its turn ended:
``{"status": <TurnStatus>, "active_agent": <the agent the conversation is with>}``."""

_KINDS = {
    "function_approval_request": "approval",
    "function_call": "external_call",
    "text": "question",
}


# -- what a message answers ---------------------------------------------------------------------


def answers_in(
    texts: Sequence[str], data: Sequence[Any], pending: Sequence[Content]
) -> dict[str, Content] | str:
    """The answers a message's text and data parts give to the ``pending`` requests.

    A data part answers by request id: ``{"request_id": ..., "approved": true}`` for an
    approval, ``{"request_id": ..., "result": ...}`` for an external call (its call id serves too),
    ``{"request_id": ..., "text": ...}`` for a remote agent's question, or several as
    ``{"answers": [...]}``. Text answers when it is unambiguous: ``approve`` or ``decline``
    (:data:`APPROVE_WORDS`, :data:`DECLINE_WORDS`) when every request is an approval; any text,
    as the result, when the one request is an external call, or as the answer, when it is a
    question.

    Returns the answers by request id, or why the message answers nothing (a sentence).
    """
    if data:
        return _data_answers(data, pending)
    text = " ".join(t.strip() for t in texts if t.strip())
    word = text.lower().rstrip(".!").strip()
    if pending and all(r.type == "function_approval_request" for r in pending):
        if word in APPROVE_WORDS or word in DECLINE_WORDS:
            approved = word in APPROVE_WORDS
            return {str(r.id): r.to_function_approval_response(approved=approved) for r in pending}
        return f"{text!r} is neither approve nor decline."
    if len(pending) == 1 and pending[0].type == "function_call" and text:
        call = pending[0]
        return {str(call.id): Content.from_function_result(call_id=str(call.call_id), result=text)}
    if len(pending) == 1 and pending[0].type == "text" and text:
        return {str(pending[0].id): Content.from_text(text)}
    return (
        "Text answers only one external call or question, or approvals; answer each request by "
        'its id in a data part ({"answers": [{"request_id": ..., "approved": true}, ...]}).'
    )


def _data_answers(data: Sequence[Any], pending: Sequence[Content]) -> dict[str, Content] | str:
    items = _answer_items(data)
    if isinstance(items, str):
        return items
    by_id = {str(r.id): r for r in pending}
    by_call = {str(r.call_id): r for r in pending if r.type == "function_call"}
    answers: dict[str, Content] = {}
    for item in items:
        request = by_id.get(item["request_id"]) or by_call.get(item["request_id"])
        if request is None:
            return (
                f"The conversation waits for no request {item['request_id']!r}; it waits for "
                f"{sorted(by_id)}."
            )
        answer = _answer_to(request, item)
        if isinstance(answer, str):
            return answer
        answers[str(request.id)] = answer
    return answers


def _answer_items(data: Sequence[Any]) -> list[dict[str, Any]] | str:
    """The answers the data parts hold (each with a ``request_id``), or what is wrong."""
    items: list[Any] = []
    for value in data:
        if isinstance(value, dict) and "answers" in value:
            listed = cast(dict[str, Any], value)["answers"]
            if not isinstance(listed, list):
                return 'A data part\'s "answers" must be a list of answers.'
            items.extend(cast(list[Any], listed))
        else:
            items.append(value)
    answers: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(
            cast(dict[str, Any], item).get("request_id"), str
        ):
            return 'Each answer is an object with a "request_id" (a string).'
        answers.append(cast(dict[str, Any], item))
    return answers


def _answer_to(request: Content, item: Mapping[str, Any]) -> Content | str:
    """``item``'s answer to ``request``, or what it lacks."""
    if request.type == "function_approval_request":
        if not isinstance(item.get("approved"), bool):
            return f'The answer to approval {request.id!r} needs "approved": true or false.'
        return request.to_function_approval_response(approved=item["approved"])
    if request.type == "text":
        said = item.get("text")
        if not isinstance(said, str) or not said.strip():
            return f'The answer to question {request.id!r} needs a "text" (a string with words).'
        return Content.from_text(said)
    if "result" not in item:
        return f'The answer to external call {request.id!r} needs a "result".'
    return Content.from_function_result(call_id=str(request.call_id), result=item["result"])


def _parts(message: Message) -> tuple[list[str], list[Any]]:
    """A message's text parts and data parts (as JSON values)."""
    texts = [part.text for part in message.parts if part.HasField("text")]
    return texts, get_data_parts(list(message.parts))


def describe(requests: Sequence[Content], agent: str | None) -> tuple[str, dict[str, Any]]:
    """The requests a turn waits for, for a person (text) and for a program (a data part)."""
    who = agent or "The agent"
    lines: list[str] = []
    listed: list[dict[str, Any]] = []
    for request in requests:
        question = RemoteQuestion.of(request)
        if question is not None:  # a remote agent's (an expert's, perhaps): it names who asks
            lines.append(f"{question.agent or who} asks: {question.text}")
            listed.append(
                {
                    "request_id": str(request.id),
                    "kind": "question",
                    "agent": question.agent or agent,
                    "text": question.text,
                }
            )
            continue
        call = request.function_call if request.type == "function_approval_request" else request
        name = str(getattr(call, "name", None) or "?")
        arguments = call.parse_arguments() if call is not None else None
        shown = json.dumps(arguments or {}, ensure_ascii=False, default=str)
        kind = _KINDS.get(request.type, request.type)
        listed.append(
            {
                "request_id": str(request.id),
                "kind": kind,
                "agent": agent,
                "name": name,
                "arguments": arguments or {},
            }
        )
        if kind == "approval":
            lines.append(f"{who} asks for approval to call {name} with {shown}.")
        else:
            lines.append(f"{who} waits for the result of {name} with {shown}.")
    if all(r.type == "function_approval_request" for r in requests):
        lines.append('Answer "approve" or "decline".')
    elif len(requests) == 1 and requests[0].type == "text":
        lines.append("Answer with your reply.")
    elif len(requests) == 1:
        lines.append("Answer with its result.")
    else:
        lines.append("Answer each request by its id in a data part.")
    return " ".join(lines), {"requests": listed}


# -- the executor ------------------------------------------------------------------------------


@dataclass
class _Reply:
    """One agent message of the reply, streamed as one artifact."""

    artifact_id: str
    author: str | None
    text: str = ""
    message_id: str | None = None


class ConversationExecutor(AgentExecutor):
    """Runs each A2A message as a turn of ``host``'s conversation whose id is the context id."""

    def __init__(self, host: ConversationHost) -> None:
        self.host = host

    @override
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, conversation_id = _ids(context)
        if message is None:
            raise InvalidParamsError(message="The request holds no message.")
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        updater = TaskUpdater(event_queue, task_id, conversation_id)
        await updater.start_work()
        try:
            pending = await self.host.pending(conversation_id)
            if pending:
                await self._answer(updater, conversation_id, message, pending)
            else:
                texts, _ = _parts(message)
                await self._turn(updater, conversation_id, "\n".join(texts))
        except Exception as error:  # the turn failed: the task says why; the host retries it
            said = f"{type(error).__name__}: {error}"
            await updater.failed(updater.new_agent_message([Part(text=said)]))

    @override
    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task; a turn that waits for answers is given up (``host.abandon``)."""
        task_id, conversation_id = _ids(context)
        if await self.host.pending(conversation_id):
            await self.host.abandon(conversation_id, wait=True)
        await TaskUpdater(event_queue, task_id, conversation_id).cancel()

    async def _answer(
        self,
        updater: TaskUpdater,
        conversation_id: str,
        message: Message,
        pending: Sequence[Content],
    ) -> None:
        texts, data = _parts(message)
        answers = answers_in(texts, data, pending)
        if isinstance(answers, str):  # the task keeps waiting, saying why
            await self._waiting(updater, conversation_id, pending, answers)
            return
        try:
            result = await self.host.respond(conversation_id, answers, wait=True)
        except PendingRequestsError as waiting:  # answered; the turn asks again
            await self._waiting(updater, conversation_id, waiting.requests)
            return
        await self._finish(updater, after_answers(result, answers), [])

    async def _turn(self, updater: TaskUpdater, conversation_id: str, text: str) -> None:
        stream = cast(
            AsyncGenerator[WorkflowEvent[Any], None],
            self.host.stream(conversation_id, text, wait=True),
        )
        replies: list[_Reply] = []
        requests: list[Content] = []
        result: HandoffTurnResult | None = None
        async with aclosing(stream) as events:
            async for event in events:
                if event.type == "output" and isinstance(event.data, AgentResponseUpdate):
                    await _stream_text(updater, replies, event.data)
                elif event.type in ROUTING_EVENT_TYPES:
                    update = routing_update(event.type, event.data)
                    routed = (update.additional_properties or {})[ROUTING_EVENT_PROPERTY]
                    await updater.update_status(
                        TaskState.TASK_STATE_WORKING, metadata={ROUTING_EVENT_PROPERTY: routed}
                    )
                elif event.type == "request_info" and isinstance(event.data, Content):
                    requests.append(event.data)
                elif event.type == HANDOFF_TURN_EVENT and isinstance(event.data, HandoffTurnResult):
                    result = event.data
        if replies:
            await _close(updater, replies[-1])
        if result is None and requests:
            await self._waiting(updater, conversation_id, requests)
            return
        if result is None:
            raise RuntimeError("The turn ended with no result.")
        await self._finish(updater, result, replies)

    async def _waiting(
        self,
        updater: TaskUpdater,
        conversation_id: str,
        requests: Sequence[Content],
        why: str | None = None,
    ) -> None:
        agent = await self.host.active_agent(conversation_id)
        text, data = describe(requests, agent)
        if why:
            text = f"{why} {text}"
        await updater.requires_input(
            updater.new_agent_message([Part(text=text), new_data_part(data)])
        )

    async def _finish(
        self, updater: TaskUpdater, result: HandoffTurnResult, streamed: Sequence[_Reply]
    ) -> None:
        if not streamed:  # nothing came in chunks (a turn read back, answers): whole messages
            for reply in _replies(result.messages):
                await _close(updater, reply)
        turn = {"status": result.status, "active_agent": result.active_agent}
        await updater.update_status(
            TaskState.TASK_STATE_COMPLETED, metadata={A2A_TURN_PROPERTY: turn}
        )


def _ids(context: RequestContext) -> tuple[str, str]:
    """The task id and the context id (the conversation id) a2a-sdk gave the request."""
    if not context.task_id or not context.context_id:
        raise InternalError(message="The request reached the desk without a task or context id.")
    return context.task_id, context.context_id


def _replies(messages: Sequence[AgentMessage]) -> list[_Reply]:
    return [
        _Reply(m.message_id or uuid.uuid4().hex, m.author_name, m.text)
        for m in messages
        if m.role == "assistant" and m.text
    ]


async def _stream_text(
    updater: TaskUpdater, replies: list[_Reply], update: AgentResponseUpdate
) -> None:
    """An agent's text chunk, appended to its message's artifact (a new one: a new message)."""
    text = "".join(c.text or "" for c in update.contents if c.type == "text")
    if not text:
        return
    current = replies[-1] if replies else None
    key = (update.author_name, update.message_id)
    if current is None or (current.author, current.message_id) != key:
        if current is not None:
            await _close(updater, current)
        artifact_id = update.message_id or uuid.uuid4().hex
        current = _Reply(artifact_id, update.author_name, message_id=update.message_id)
        replies.append(current)
        append = False
    else:
        append = True
    current.text += text
    await updater.add_artifact(
        [Part(text=text)],
        artifact_id=current.artifact_id,
        name=current.author,
        metadata={"author": current.author},
        append=append,
    )


async def _close(updater: TaskUpdater, reply: _Reply) -> None:
    """The last chunk of a message's artifact: its whole text, replacing the chunks."""
    await updater.add_artifact(
        [Part(text=reply.text)],
        artifact_id=reply.artifact_id,
        name=reply.author,
        metadata={"author": reply.author},
        append=False,
        last_chunk=True,
    )


# -- the request handler: bad input refused before anything runs ---------------------------------


class ConversationRequestHandler(DefaultRequestHandlerV2):
    """a2a-sdk's request handler, refusing a message the desk cannot take as an A2A error."""

    def __init__(self, host: ConversationHost, card: AgentCard, task_store: TaskStore) -> None:
        super().__init__(
            agent_executor=ConversationExecutor(host), task_store=task_store, agent_card=card
        )
        self.host = host

    @override
    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        await self.check(params)
        parent: Any = super()  # a2a-sdk's decorators leave its methods untyped
        return cast(Message | Task, await parent.on_message_send(params, context))

    @override
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        await self.check(params)
        parent: Any = super()
        stream = cast(AsyncGenerator["Event", None], parent.on_message_send_stream(params, context))
        async with aclosing(stream) as events:
            async for event in events:
                yield event

    async def check(self, params: SendMessageRequest) -> None:
        """Refuse a message the desk cannot take.

        Raises:
            InvalidParamsError: no text or data part; a context id that is not a valid
                conversation id; a data part that does not answer what the conversation waits for.
        """
        message = params.message
        texts, data = _parts(message)
        if not any(t.strip() for t in texts) and not data:
            raise InvalidParamsError(
                message="The message has no text part: send the user's words as a text part "
                "(or a data part answering the requests the conversation waits for)."
            )
        conversation_id = message.context_id
        if conversation_id:
            try:
                check_conversation_id(conversation_id)
            except ValueError as error:
                raise InvalidParamsError(
                    message=f"The context id is no conversation id: {error}"
                ) from error
        if data:
            pending = await self.host.pending(conversation_id) if conversation_id else []
            if not pending:
                raise InvalidParamsError(
                    message="A data part answers the requests a conversation waits for, and "
                    "this one waits for none: send text."
                )
            answers = answers_in(texts, data, pending)
            if isinstance(answers, str):
                raise InvalidParamsError(message=answers)


# -- the app -----------------------------------------------------------------------------------


def a2a_card(
    host: ConversationHost,
    *,
    name: str,
    description: str,
    url: str,
    skills: Sequence[AgentSkill] | None = None,
) -> AgentCard:
    """The agent card :func:`a2a_app` serves (see there)."""
    initial = host.builder.initial_agent.name or "the initial agent"
    default_skills = [
        AgentSkill(
            id="conversation",
            name="Conversation",
            description=(
                f"Each message is a turn of the conversation whose id is the A2A context id. It "
                f"starts at {initial}; the agents hand the conversation to one another, and the "
                "next message goes to the agent the conversation is with. Each agent message of "
                "the reply is an artifact named by its agent."
            ),
            tags=["handoff", "conversation"],
            input_modes=["text/plain"],
            output_modes=["text/plain"],
        ),
        AgentSkill(
            id="approvals",
            name="Approvals and external calls",
            description=(
                "A turn that waits for a person's approval of a tool call, for the result of "
                "an external call, or for the answer to a remote agent's question, ends "
                "input-required, the requests described in its status message; the next message "
                'answers them ("approve" or "decline", the result or the answer as text, or a '
                'data part {"answers": [{"request_id": ..., "approved": true}]}).'
            ),
            tags=["human-in-the-loop"],
            input_modes=["text/plain", "application/json"],
            output_modes=["text/plain", "application/json"],
        ),
    ]
    return AgentCard(
        name=name,
        description=description,
        version=_version(),
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=list(skills) if skills is not None else default_skills,
    )


def _version() -> str:
    """The installed version of handoff_builder (the card's version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("handoff-builder")
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        return "0+unknown"


def a2a_app(
    host: ConversationHost,
    *,
    name: str,
    description: str,
    url: str,
    skills: Sequence[AgentSkill] | None = None,
    task_store: TaskStore | None = None,
) -> Starlette:
    """``host``'s conversations served as an A2A agent: an ASGI app (serve it with uvicorn).

    The A2A context id is the conversation id: each message runs a turn (``host.stream``) of
    that conversation, at the agent the conversation is with; the reply's agent messages come
    back as the task's artifacts (streamed in chunks by ``SendStreamingMessage``), and the task
    ends ``completed``. A turn that waits for an approval or an external call ends its task
    ``input-required``, the requests described; the next message in the context answers them
    (``"approve"``/``"decline"``, the result as text, or a data part: see :func:`answers_in`)
    and the turn carries on (``host.respond``). Bad input is an A2A error (``InvalidParamsError``)
    and runs nothing. See ``docs/remote-agents.md``.

    The agent card (at ``/.well-known/agent-card.json``) names the desk ``name`` and
    ``description`` and says what it does (``skills``, or two skills of its own: the
    conversation, and the approvals); JSON-RPC is served at the root, ``url``'s path.

    Args:
        host: The hosted conversations to serve.
        name: The agent's name on its card.
        description: What the desk is for, on its card.
        url: Where clients reach this app (``http://127.0.0.1:8000/``): the card's address.
        skills: The card's skills, in place of its own.
        task_store: Where a2a-sdk keeps the A2A tasks (an ``InMemoryTaskStore`` by default: a
            restart forgets the tasks, not the conversations, which are ``host``'s).

    Raises:
        ValueError: ``url`` is not an http(s) address, or ``name`` is blank.
    """
    parsed = urlparse(url)
    if parsed.scheme not in {"http", "https"} or not parsed.netloc:
        raise ValueError(f"url must be an http(s) address, got {url!r}.")
    if not name.strip():
        raise ValueError("name must not be blank: it is the agent card's name.")
    card = a2a_card(host, name=name, description=description, url=url, skills=skills)
    handler = ConversationRequestHandler(host, card, task_store or InMemoryTaskStore())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[Mapping[str, Any]]:
        del app
        try:
            yield {}
        finally:
            await handler.aclose()

    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, parsed.path or "/", enable_v0_3_compat=True),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
