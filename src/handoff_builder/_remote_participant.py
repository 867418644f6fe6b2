"""A remote agent's runs: a participant on another server, reached through A2A.

:class:`RemoteParticipant` is a :class:`~handoff_builder._participant.Participant` whose agent is
agent_framework's ``A2AAgent``; the local runner runs it as any participant, on its view of the
conversation, and reads back an ``AgentRun``. What differs is inside the run:

* **What it is sent.** The remote agent keeps its own side of the conversation in its A2A
  context, so each run sends one A2A message: the text of the view's messages it has not seen
  (all of them the first time; after that, those after its last reply). A delegated task is sent
  as it is (with ``history``, after the conversation's messages).
* **Its task and context.** Its reply in the shared history carries the A2A context id, task id
  and task state (``additional_properties[REMOTE_TASK_KEY]``), so they are stored and
  checkpointed with the conversation; its next run continues that context, and that task while
  it waits for input (a task its server no longer takes is followed by a new one in the same
  context). A delegation starts a new context each time.
* **Its answer** is the text of its finished task's artifacts or of its message; while its
  task waits for input, the text parts of its question (the status message), without its data
  parts, unless it has no text. It streams (``SendStreamingMessage``) when the agent's card says
  its server does: its artifacts' text goes to the run's sink as it arrives, as deltas of one
  message (:class:`_Reading`); the rest of the answer when it is complete.
* **Handing back.** It is given no tools. When its task completes (or it answers with a plain
  message) and it has a hand-back edge, the run makes the hand-back call itself, with its answer
  as the summary; the manager vets it and the edge's gate admits it, as any call. While its task
  waits for input, it keeps the conversation: its question is the turn's reply.
* **Failures.** Whatever its client raises (no connection, a timeout of the ``A2AAgent``'s own
  client, an HTTP error) and a task that ends failed, rejected or cancelled are a
  :class:`~handoff_builder.RemoteAgentError`. In a delegation it is the caller's tool error.
* **A run cut** (its deadline, or any cancellation) asks the server to cancel the task it knows
  of, A2A's ``CancelTask``, within :data:`CANCEL_WITHIN` seconds and never raising
  (:func:`cancel_remote_task`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    AgentSession,
    Content,
    Message,
    MiddlewareFailure,
)
from typing_extensions import override

from ._decision import HandoffCall
from ._delegation import Delegations
from ._hooks import HandoffGate
from ._participant import AgentRun, Participant
from ._remote import one_line, remote_url
from ._timeouts import within
from ._tools import HandoffToolMiddleware, HandoffVetter, handoff_request, handoff_result
from .exceptions import HandoffHookError, RemoteAgentError

__all__ = [
    "CANCEL_WITHIN",
    "REMOTE_TASK_KEY",
    "RemoteParticipant",
    "RemoteTask",
    "cancel_remote_task",
    "remote_error",
]

logger = logging.getLogger("handoff_builder")

REMOTE_TASK_KEY = "handoff_builder_a2a"
"""Where a remote agent's reply keeps its A2A task (``Message.additional_properties``)."""

NO_TEXT = "(The remote agent answered without text.)"
CARRY_ON = "Carry on."
"""What a remote agent is sent when nothing is new in its view (A2A needs a message)."""

COMPLETED = "TASK_STATE_COMPLETED"
CANCELED = "TASK_STATE_CANCELED"
FAILED_STATES = frozenset({"TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED"})


class RemoteTask(NamedTuple):
    """A remote agent's A2A context and its last task.

    ``state`` is the task's state by name (``"TASK_STATE_INPUT_REQUIRED"``...), ``""`` when the
    agent answered with a message and no task.
    """

    context_id: str
    task_id: str | None = None
    state: str = ""

    @property
    def done(self) -> bool:
        """True when the agent's work is finished: its task completed, or it just answered."""
        return self.state in {COMPLETED, ""}

    def session(self) -> AgentSession:
        """A session that continues this context (and the task, if it waits for input)."""
        from a2a.types import TaskState

        state = TaskState.Value(self.state) if self.state else None
        return AgentSession(
            service_session_id={
                "context_id": self.context_id,
                "task_id": self.task_id,
                "task_state": state,
            }
        )

    @classmethod
    def of(cls, session: AgentSession) -> RemoteTask | None:
        """The task an ``A2AAgent`` left in ``session`` after a run (``None``: nothing known)."""
        from a2a.types import TaskState

        found = session.service_session_id
        if not isinstance(found, dict):
            return None
        context_id = found.get("context_id")
        if not isinstance(context_id, str) or not context_id:
            return None
        task_id = found.get("task_id")
        state = found.get("task_state")
        name = TaskState.Name(state) if isinstance(state, int) else ""
        return cls(context_id, task_id if isinstance(task_id, str) else None, name)

    @classmethod
    def in_message(cls, message: Message, agent: str) -> RemoteTask | None:
        """The task ``agent``'s reply ``message`` carries (``None``: not such a reply)."""
        if message.author_name != agent:
            return None
        kept = (message.additional_properties or {}).get(REMOTE_TASK_KEY)
        if not isinstance(kept, dict):
            return None
        kept = cast(dict[str, Any], kept)
        context_id = kept.get("context_id")
        if not isinstance(context_id, str):
            return None
        task_id = kept.get("task_id")
        state = kept.get("state")
        return cls(
            context_id,
            task_id if isinstance(task_id, str) else None,
            state if isinstance(state, str) else "",
        )


@dataclass(slots=True)
class RemoteParticipant(Participant):
    """A participant whose agent is a remote ``A2AAgent``: no tools, its own context (see above)."""

    @property
    @override
    def url(self) -> str:
        """The address its requests go to (:func:`~._remote.remote_url`)."""
        return remote_url(self.agent)

    @override
    async def run(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        vet: HandoffVetter | None,
        gate: HandoffGate,
        delegations: Delegations | None = None,
        earlier: Sequence[HandoffCall] = (),
    ) -> AgentRun:
        """One run on its view: the new messages sent in its context; a finished task hands back.

        It has no delegates, so it never goes on after experts answered (``earlier``).
        """
        del earlier
        news, task = self._news(messages)
        answer, task, message_id = await self._ask(_text_of(news), task, on_update)
        properties = {REMOTE_TASK_KEY: task._asdict()} if task is not None else None
        reply = Message(
            role="assistant",
            contents=[answer or NO_TEXT],
            author_name=self.name,
            message_id=message_id,
            additional_properties=properties,
        )
        if vet is None or task is None or not task.done:
            return AgentRun(AgentResponse(messages=[reply]), (), frozenset())
        handoffs = await self.handoffs(gate)
        disabled = frozenset(self.routes).difference(handoffs.offered)
        route = next((r for r in handoffs.offered.values() if r.edge.returns), None)
        if route is None:  # no hand-back (or not now): it keeps the conversation
            return AgentRun(AgentResponse(messages=[reply]), (), disabled)
        calls: list[HandoffCall] = []
        vetting = HandoffToolMiddleware(handoffs, vet, gate, calls)
        call_id = f"a2a_{task.task_id or uuid.uuid4().hex}"
        arguments = {route.edge.argument: answer or NO_TEXT}
        try:
            call = await vetting.decide(handoff_request(route, call_id, arguments))
        except MiddlewareFailure as failure:  # an edge's own code failed: the run fails
            if isinstance(failure.__cause__, HandoffHookError):
                raise failure.__cause__ from failure.__cause__.__cause__
            raise
        reply.contents.append(
            Content.from_function_call(
                call_id=call_id, name=route.tool_name, arguments=json.dumps(arguments)
            )
        )
        result = (
            Content.from_function_result(call_id=call_id, result=call.result)
            if call.outcome == "rejected"
            else handoff_result(call)
        )
        settled = Message(role="tool", contents=[result], author_name=self.name)
        return AgentRun(AgentResponse(messages=[reply, settled]), tuple(calls), disabled)

    @override
    async def run_delegated(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        delegations: Delegations,
    ) -> AgentResponse:
        """One delegated task, in a context of its own; its answer is the caller's tool result."""
        answer = await self._ask(_text_of(messages), None, on_update)
        reply = Message(
            role="assistant",
            contents=[answer.text],
            author_name=self.name,
            message_id=answer.message_id,
        )
        return AgentResponse(messages=[reply])

    def _news(self, messages: Sequence[Message]) -> tuple[list[Message], RemoteTask | None]:
        """The messages after its last reply, and the task that reply carries."""
        for index in range(len(messages) - 1, -1, -1):
            task = RemoteTask.in_message(messages[index], self.name)
            if task is not None:
                return list(messages[index + 1 :]), task
        return list(messages), None

    async def _ask(
        self,
        text: str,
        task: RemoteTask | None,
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
    ) -> _Answer:
        """Send ``text`` in ``task``'s context (a new one: ``None``); its answer and its task.

        A message that continues a waiting task its server no longer takes (the task was
        cancelled when a call was cut, or the server lost it) is sent again as a new task in the
        same context, referring to that one.

        Raises:
            RemoteAgentError: no answer (unreachable, timed out, an HTTP error), or its task
                ended failed, rejected or cancelled.
        """
        try:
            return await self._exchange(text, task, on_update)
        except _TaskOverError as over:
            return await self._exchange(text, over.then, on_update)

    async def _exchange(
        self,
        text: str,
        task: RemoteTask | None,
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
    ) -> _Answer:
        """One A2A exchange: the message sent, its answer read as it streams (see :meth:`_ask`).

        The run streams (``SendStreamingMessage``) when the agent's card says its server does,
        and reads one answer (``SendMessage``) otherwise: a2a-sdk's client chooses. A run cut
        meanwhile (its deadline) asks the server to cancel the task it knows of.
        """
        session = task.session() if task is not None else AgentSession()
        continued = task.task_id if task is not None and not task.done else None
        remote: Any = self.agent
        reading = _Reading(self.name, on_update)
        stream: Any = None
        try:
            stream = remote.run(
                Message(role="user", contents=[text]),
                session=session,
                stream=True,
                background=True,  # in-progress updates name the task from its first event
            )
            async for update in stream:
                await reading.read(update)
            response = cast(AgentResponse, await stream.get_final_response())
        except asyncio.CancelledError:
            await cancel_remote_task(self.name, remote, reading.task_id or continued)
            if stream is not None:  # its connection let go now, not when it is collected
                with contextlib.suppress(Exception):
                    await stream.close()
            raise
        except Exception as error:
            if task is not None and continued and not reading.read_any and _task_over(error):
                raise _TaskOverError(task._replace(state=CANCELED)) from error
            raise remote_error(self.name, error) from error
        answer = _answer_of(response)
        now = RemoteTask.of(session)
        if now is not None and now.state in FAILED_STATES:
            said = answer or _status_text(response)
            detail = f"{now.state}: {one_line(said, 300)}" if said else now.state
            raise RemoteAgentError(self.name, "failed", "", detail)
        if now is not None and not now.done:  # it asks: its question's words, not its data parts
            answer = _status_text(response) or answer
        message_id = await reading.finish(answer)
        return _Answer(answer, now, message_id)


class _Answer(NamedTuple):
    """A remote agent's answer: its text, its task, and the id its streamed updates had."""

    text: str
    task: RemoteTask | None
    message_id: str


class _TaskOverError(Exception):
    """The server no longer takes messages for the waiting task a message continued.

    ``then``: the same context, its task over (the next message refers to it).
    """

    def __init__(self, then: RemoteTask) -> None:
        super().__init__(then.task_id)
        self.then = then


class _Reading:
    """One run's reading of a remote agent's stream: the task it names, the text streamed.

    The text of the task's artifacts goes to ``on_update`` as it arrives, as deltas of one
    message (each artifact's text on a line of its own, as in the answer): an artifact's update
    either appends to its text or replaces it (A2A's ``append``); a replacement that restates
    the text streamed so far sends only what is new, and one that changes it sends nothing (the
    answer, at the end, is the reply). The rest of the answer (all of it, from a server that does
    not stream) goes out when the run ends (:meth:`finish`).
    """

    def __init__(
        self, agent: str, on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None
    ) -> None:
        self.agent = agent
        self.on_update = on_update
        self.task_id: str | None = None
        self.read_any = False
        self.message_id = uuid.uuid4().hex
        self._artifacts: dict[str, str] = {}  # each artifact's text so far, by its id
        self._streamed = ""

    async def read(self, update: AgentResponseUpdate) -> None:
        """Read one update: the task it names; an artifact's text, streamed."""
        self.read_any = True
        raw: Any = update.raw_representation
        token = update.continuation_token
        named = token.get("task_id") if token is not None else getattr(raw, "task_id", None)
        if isinstance(named, str) and named:
            self.task_id = named
        if self.on_update is None or type(raw).__name__ != "TaskArtifactUpdateEvent":
            return
        key = str(update.message_id)
        for content in update.contents:
            if content.type != "text":
                continue
            so_far = self._artifacts.get(key, "") if content.merge_mode == "append" else ""
            self._artifacts[key] = so_far + (content.text or "")
        await self._send("\n".join(self._artifacts.values()))

    async def finish(self, answer: str) -> str:
        """The rest of ``answer`` streamed; the id of the message that carries it.

        All of it, under a new id, when it is not what was streamed.
        """
        if self._streamed and not answer.startswith(self._streamed):
            self.message_id, self._streamed = uuid.uuid4().hex, ""
        await self._send(answer)
        return self.message_id

    async def _send(self, text: str) -> None:
        """What ``text`` adds to the text streamed so far, streamed (nothing: it changed it)."""
        if self.on_update is None or not text.startswith(self._streamed):
            return
        delta = text[len(self._streamed) :]
        if not delta:
            return
        self._streamed = text
        await self.on_update(
            AgentResponseUpdate(
                contents=[Content.from_text(delta)],
                role="assistant",
                author_name=self.agent,
                message_id=self.message_id,
            )
        )


CANCEL_WITHIN = 2.0
"""Seconds a cut run gives the remote server to take the cancellation of its task."""


async def cancel_remote_task(agent: str, remote: Any, task_id: str | None) -> None:
    """Ask ``remote``'s server to cancel task ``task_id`` (A2A's ``CancelTask``), best effort.

    Within :data:`CANCEL_WITHIN` seconds; a failure is logged, never raised. Nothing is sent
    when no task is known (a server that does not stream names its task only in its answer).
    """
    if task_id is None:
        logger.info("remote agent %s: a cut call left a task unknown, not cancelled", agent)
        return
    from a2a.types import CancelTaskRequest

    try:
        await within(CANCEL_WITHIN, remote.client.cancel_task(CancelTaskRequest(id=task_id)))
    except (Exception, asyncio.CancelledError) as error:  # the cut run's own cancellation goes on
        logger.warning(
            "remote agent %s: task %s could not be cancelled (%s: %s)",
            agent,
            task_id,
            type(error).__name__,
            one_line(str(error), 200),
        )
        return
    logger.info("remote agent %s: task %s cancelled", agent, task_id)


def _task_over(error: BaseException) -> bool:
    """True when ``error`` is the server saying a task can take no more messages.

    A2A's ``UnsupportedOperationError`` (a task in a final state) or ``TaskNotFoundError``, by
    the names of their classes (a2a-sdk's).
    """
    over = {"UnsupportedOperationError", "TaskNotFoundError"}
    cause: BaseException | None = error
    seen: list[BaseException] = []
    while cause is not None and cause not in seen:
        if over.intersection(kind.__name__ for kind in type(cause).__mro__):
            return True
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return False


def _answer_of(response: AgentResponse) -> str:
    """The text of a remote agent's answer: its assistant messages' text parts, line by line."""
    return "\n".join(
        content.text
        for message in response.messages
        if message.role == "assistant"
        for content in message.contents
        if content.type == "text" and content.text
    )


def _text_of(messages: Sequence[Message]) -> str:
    """One A2A message's text for ``messages``: one message as it is, several labelled."""
    said = [(message, message.text.strip()) for message in messages]
    said = [(message, text) for message, text in said if text]
    if not said:
        return CARRY_ON
    if len(said) == 1:
        return said[0][1]
    return "\n\n".join(f"[{_speaker(message)}] {text}" for message, text in said)


def _status_text(response: AgentResponse) -> str:
    """The text parts of the last A2A task's status message in ``response``.

    A failed task's words: agent_framework's ``A2AAgent`` reads a finished task's answer from
    its artifacts, and a task that failed says why in its status message, kept only in the
    response's raw A2A tasks. A waiting task's question: ``A2AAgent`` gives it as one text, its
    text parts and the JSON of its data parts (which are for programs: a desk served with
    ``a2a_app`` describes its requests in one) line by line.
    """
    raw: Any = response.raw_representation
    tasks: list[Any] = list(cast(list[Any], raw)) if isinstance(raw, list) else [raw]
    for task in reversed(tasks):
        status = getattr(task, "status", None)
        message = getattr(status, "message", None)
        parts: Any = getattr(message, "parts", None) or []
        said = " ".join(str(getattr(part, "text", "") or "") for part in parts).strip()
        if said:
            return said
    return ""


def _speaker(message: Message) -> str:
    return message.author_name or str(message.role)


_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("timeout", ("TimeoutException", "A2AClientTimeoutError", "TimeoutError")),
    ("unreachable", ("ConnectError", "ConnectionRefusedError", "ConnectionError")),
    ("http", ("HTTPStatusError", "A2AClientHTTPError")),
)
"""Which errors of a remote agent's client mean what, by the names of their classes (httpx's and
a2a-sdk's; neither is imported here), first match wins along the error's causes."""


def remote_error(agent: str, error: BaseException) -> RemoteAgentError:
    """``error``, raised by a remote agent's client, as a :class:`RemoteAgentError`.

    Its kind is read along the error's causes (a timeout, no connection, an HTTP error); the
    address is the failed request's, when one of them knows it.
    """
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    names = [{kind.__name__ for kind in type(e).__mro__} for e in chain]
    kind = next(
        (kind for kind, known in _KINDS for found in names if found.intersection(known)), "error"
    )
    url = ""
    for failed in chain:
        try:
            url = str(cast(Any, failed).request.url)
            break
        except (AttributeError, RuntimeError):  # no request of its own
            continue
    root = chain[-1]
    detail = one_line(str(root), 300) or one_line(str(error), 300)
    return RemoteAgentError(agent, kind, url, f"{type(root).__name__}: {detail}".rstrip(": "))
