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
  context). A delegation starts a new context each time (an expert's reply keeps its task under
  a key of its own, to carry the answer to its question).
* **Its answer** is the text of its finished task's artifacts or of its message (an artifact
  read before in the same task is not read again). While its task waits for input, its reply is
  what it wrote before in this exchange (its task's messages and new artifacts, read from the
  task: :func:`~._remote_reading.written`), then its question as a request (:func:`~._remote_input.
  question_request`: the text parts of the status message, without its data parts, unless it has
  no text), which the turn waits for; the answer is the next news it is sent, in the same task.
  ``auth-required`` is a :class:`~handoff_builder.RemoteAgentError`. It streams
  (``SendStreamingMessage``) when the agent's card says its server does: its artifacts' text goes
  to the run's sink as it arrives, as deltas of one message
  (:class:`~._remote_reading.Reading`); the rest of the answer when it is complete.
* **Handing back.** It is given no tools. When its task completes (or it answers with a plain
  message) and it has a hand-back edge, the run makes the hand-back call itself, with its answer
  as the summary; the manager vets it and the edge's gate admits it, as any call. While its task
  waits for input, it keeps the conversation: the turn waits for its question.
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
from ._remote_input import question_request
from ._remote_reading import Reading, answer_of, is_task, raw_of, status_of, written
from ._timeouts import within
from ._tools import HandoffToolMiddleware, HandoffVetter, handoff_request, handoff_result
from .exceptions import HandoffHookError, RemoteAgentError

__all__ = [
    "CANCEL_WITHIN",
    "REMOTE_DELEGATION_KEY",
    "REMOTE_TASK_KEY",
    "RemoteParticipant",
    "RemoteTask",
    "cancel_remote_task",
    "remote_error",
]

logger = logging.getLogger("handoff_builder")

REMOTE_TASK_KEY = "handoff_builder_a2a"
"""Where a remote agent's reply keeps its A2A task (``Message.additional_properties``)."""
REMOTE_DELEGATION_KEY = "handoff_builder_a2a_delegation"
"""Where a remote expert's reply keeps the A2A task of its delegation (kept apart: a delegated
task never continues the conversation's context, nor the other way round)."""

NO_TEXT = "(The remote agent answered without text.)"
CARRY_ON = "Carry on."
"""What a remote agent is sent when nothing is new in its view (A2A needs a message)."""

COMPLETED = "TASK_STATE_COMPLETED"
CANCELED = "TASK_STATE_CANCELED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"
FAILED_STATES = frozenset({"TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED"})


class RemoteTask(NamedTuple):
    """A remote agent's A2A context and its last task.

    ``state`` is the task's state by name (``"TASK_STATE_INPUT_REQUIRED"``...), ``""`` when the
    agent answered with a message and no task.
    """

    context_id: str
    task_id: str | None = None
    state: str = ""
    read: tuple[str, ...] = ()
    """The ids of the task's artifacts read so far (a task that waited for input goes on)."""

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
    def in_message(
        cls, message: Message, agent: str, key: str = REMOTE_TASK_KEY
    ) -> RemoteTask | None:
        """The task ``agent``'s reply ``message`` carries under ``key`` (``None``: none)."""
        if message.author_name != agent:
            return None
        kept = (message.additional_properties or {}).get(key)
        if not isinstance(kept, dict):
            return None
        kept = cast(dict[str, Any], kept)
        context_id = kept.get("context_id")
        if not isinstance(context_id, str):
            return None
        task_id = kept.get("task_id")
        state = kept.get("state")
        read: Any = kept.get("read")
        return cls(
            context_id,
            task_id if isinstance(task_id, str) else None,
            state if isinstance(state, str) else "",
            tuple(str(r) for r in cast(list[Any], read)) if isinstance(read, list | tuple) else (),
        )

    def record(self) -> dict[str, Any]:
        """What a reply keeps of it (JSON)."""
        return {**self._asdict(), "read": list(self.read)}


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

        A task that waits for input leaves its question in the reply, as a request. It has no
        delegates, so it never goes on after experts answered (``earlier``).
        """
        del earlier
        news, task = self._news(messages, REMOTE_TASK_KEY)
        found = await self._ask(_text_of(news), task, on_update)
        reply = self._reply(found, REMOTE_TASK_KEY)
        answer, task = found.text, found.task
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
        """One delegated task, in a context of its own; its answer is the caller's tool result.

        A task that waits for input leaves its question in the reply, as a request (the
        delegation waits with it); once answered, the answer goes on in the same task.
        """
        news, task = self._news(messages, REMOTE_DELEGATION_KEY)
        found = await self._ask(_text_of(news), task, on_update)
        return AgentResponse(messages=[self._reply(found, REMOTE_DELEGATION_KEY)])

    def _reply(self, found: _Answer, key: str) -> Message:
        """Its reply: its answer's text, its question as a request; its task kept under ``key``."""
        contents = [Content.from_text(found.text)] if found.text else []
        task = found.task
        if found.question is not None and task is not None:
            question, asked = found.question
            request = question_request(self.name, question, task.context_id, task.task_id, asked)
            contents.append(request)
        return Message(
            role="assistant",
            contents=contents or [NO_TEXT],
            author_name=self.name,
            message_id=found.message_id,
            additional_properties={key: task.record()} if task is not None else None,
        )

    def _news(
        self, messages: Sequence[Message], key: str
    ) -> tuple[list[Message], RemoteTask | None]:
        """The messages after its last reply, and the task that reply carries under ``key``."""
        for index in range(len(messages) - 1, -1, -1):
            task = RemoteTask.in_message(messages[index], self.name, key)
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
        reading = Reading(self.name, on_update)
        stream: Any = None
        sent = uuid.uuid4().hex
        try:
            stream = remote.run(
                Message(role="user", contents=[text], message_id=sent),
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
        now = RemoteTask.of(session)
        read = (
            task.read if task is not None and now is not None and now.task_id == continued else ()
        )
        return await self._read(response, now, read, sent, reading)

    async def _read(
        self,
        response: AgentResponse,
        now: RemoteTask | None,
        read: tuple[str, ...],
        sent: str,
        reading: Reading,
    ) -> _Answer:
        """An exchange's answer, its task ``now`` (``read``: the artifacts read before in it).

        Raises:
            RemoteAgentError: its task ended failed, rejected or cancelled, or asks for
                authentication.
        """
        answer = answer_of(response, read)
        if now is not None and now.state in FAILED_STATES:
            said = answer or status_of(response)[0]
            detail = f"{now.state}: {one_line(said, 300)}" if said else now.state
            raise RemoteAgentError(self.name, "failed", "", detail)
        if now is not None and now.state == AUTH_REQUIRED:
            said = status_of(response)[0] or answer
            raise RemoteAgentError(self.name, "auth_required", self.url, one_line(said, 300))
        if now is None or now.done:
            return _Answer(answer, now, await reading.finish(answer))
        # It asks: its question's words (not its data parts), after what it wrote before them.
        question, asked = status_of(response)
        earlier, read = await self._earlier(response, now._replace(read=read), sent, reading)
        now = now._replace(read=read)
        shown = "\n".join(t for t in (earlier, question or answer) if t)
        message_id = await reading.finish(shown)
        return _Answer(earlier, now, message_id, (question or answer or NO_TEXT, asked))

    async def _earlier(
        self, response: AgentResponse, task: RemoteTask, sent: str, reading: Reading
    ) -> tuple[str, tuple[str, ...]]:
        """What a task that waits for input wrote in this exchange before its question.

        Its messages after the one sent (``sent``), then its artifacts not read before, as the
        task holds them: the task of the answer (``SendMessage``), else the task read back
        (``GetTask``: a stream does not carry the messages). Returns that text and the ids of
        every artifact read so far. A task that cannot be read back gives what was streamed.
        """
        found: Any = raw_of(response)[-1]  # the task whole (SendMessage), or a stream's last event
        if not is_task(found):
            from a2a.types import GetTaskRequest

            remote: Any = self.agent
            try:
                request = GetTaskRequest(id=str(task.task_id))
                found = await within(CANCEL_WITHIN, remote.client.get_task(request))
            except Exception as error:  # its question stands; what streamed stands
                logger.warning(
                    "remote agent %s: task %s could not be read back (%s: %s)",
                    self.name, task.task_id, type(error).__name__, one_line(str(error), 200),
                )  # fmt: skip
                return reading.streamed_artifacts(task.read)
        return written(found, sent, task.read)


class _Answer(NamedTuple):
    """A remote agent's answer: its text, its task, and the id its streamed updates had.

    ``question``: while its task waits for input, its question and the id of the A2A message
    that asks (``text`` is then what it wrote before it).
    """

    text: str
    task: RemoteTask | None
    message_id: str
    question: tuple[str, str] | None = None


class _TaskOverError(Exception):
    """The server no longer takes messages for the waiting task a message continued.

    ``then``: the same context, its task over (the next message refers to it).
    """

    def __init__(self, then: RemoteTask) -> None:
        super().__init__(then.task_id)
        self.then = then


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


def _text_of(messages: Sequence[Message]) -> str:
    """One A2A message's text for ``messages``: one message as it is, several labelled."""
    said = [(message, message.text.strip()) for message in messages]
    said = [(message, text) for message, text in said if text]
    if not said:
        return CARRY_ON
    if len(said) == 1:
        return said[0][1]
    return "\n\n".join(f"[{_speaker(message)}] {text}" for message, text in said)


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
