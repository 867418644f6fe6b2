"""Real A2A servers for the tests: a scripted remote agent served by a2a-sdk on 127.0.0.1.

:class:`A2AServer` serves an a2a-sdk app (its agent card and JSON-RPC routes, a
``DefaultRequestHandler`` over an in-memory task store) with uvicorn on a free port of
127.0.0.1, in the test's own event loop, and is ready once its agent card answers. Its agent
answers from a script, one :class:`Answer` per message, and the server keeps what came over the
wire: every request's JSON body (``requests``) and each message as the agent read it
(``received``), the chunks of each answer it streamed with the time it wrote them (``written``),
and the tasks it was asked to cancel (``cancelled``). ``fail_with`` makes it answer every request
(those of the methods in ``failing``, when it names some) with that HTTP status instead.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import uvicorn
from a2a.helpers.proto_helpers import (
    new_data_part,
    new_message,
    new_task_from_user_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Role,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from typing_extensions import override

State = Literal["completed", "input_required", "auth_required", "failed", "message"]
Before = Literal["artifact", "message"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Answer:
    """One scripted answer: its text, how its task ends, after ``delay`` seconds.

    ``"message"``: a plain A2A message and no task; ``"completed"``: a task whose artifact is
    the text; ``"input_required"``: a task that asks the text and waits; ``"auth_required"``: a
    task that asks for authentication with the text and waits; ``"failed"``. A task
    is opened before the delay (a client may cancel it meanwhile). ``before``: lines the agent
    writes in the task first, each an artifact of its own (``before_as="artifact"``, as a desk
    served with ``a2a_app`` writes its agents' messages) or a ``working`` status message
    (``"message"``, as agent_framework's ``A2AExecutor`` writes a whole message). With
    ``data``, the message (or artifact) has a data part after its text (none if it is empty).
    With ``chunks`` (a completed task), the artifact is written chunk by chunk, ``chunk_delay``
    seconds apart (the first opens it, the next are appended, the last is marked last), and the
    text is theirs.
    """

    text: str = ""
    state: State = "completed"
    delay: float = 0.0
    data: dict[str, Any] | None = None
    chunks: tuple[str, ...] = ()
    chunk_delay: float = 0.0
    before: tuple[str, ...] = ()
    before_as: Before = "artifact"

    def parts(self) -> list[Part]:
        """Its A2A parts: the text, then the data."""
        text = [new_text_part(self.text)] if self.text else []
        return text + ([new_data_part(self.data)] if self.data is not None else [])


@dataclass(frozen=True)
class Received:
    """One message as the remote agent read it: its text, context and task."""

    text: str
    context_id: str
    task_id: str
    continued: bool
    """True when the message continued a task the server had already."""


Script = Callable[[Received], Answer]


class ScriptedExecutor(AgentExecutor):
    """The remote agent: answers each message from its server's script."""

    def __init__(self, server: A2AServer) -> None:
        self._server = server

    @override
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        assert context.task_id is not None
        assert context.context_id is not None
        received = Received(
            context.get_user_input(),
            context.context_id,
            context.task_id,
            context.current_task is not None,
        )
        self._server.received.append(received)
        answer = self._server.script(received)
        if answer.state == "message":
            await asyncio.sleep(answer.delay)
            reply = new_message(answer.parts(), context_id=context.context_id, role=Role.ROLE_AGENT)
            await event_queue.enqueue_event(reply)
            return
        if context.current_task is None:  # the task exists (a client may cancel it) from now
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        await asyncio.sleep(answer.delay)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        for line in answer.before:
            if answer.before_as == "artifact":
                await updater.add_artifact([new_text_part(line)], name="said")
            else:
                said_first = updater.new_agent_message([new_text_part(line)])
                await updater.update_status(TaskState.TASK_STATE_WORKING, message=said_first)
        said = updater.new_agent_message(answer.parts())
        if answer.state == "completed" and answer.chunks:
            await self._write_chunks(updater, answer)
            await updater.complete()
        elif answer.state == "completed":
            await updater.add_artifact(answer.parts(), name="answer")
            await updater.complete()
        elif answer.state == "input_required":
            await updater.requires_input(said)
        elif answer.state == "auth_required":
            await updater.requires_auth(said)
        else:
            await updater.failed(said)

    async def _write_chunks(self, updater: TaskUpdater, answer: Answer) -> None:
        """The answer's artifact, chunk by chunk, each written at its time."""
        artifact_id = uuid.uuid4().hex
        for index, chunk in enumerate(answer.chunks):
            if index:
                await asyncio.sleep(answer.chunk_delay)
            await updater.add_artifact(
                [new_text_part(chunk)],
                artifact_id=artifact_id,
                name="answer",
                append=index > 0,
                last_chunk=index == len(answer.chunks) - 1,
            )
            self._server.written.append((chunk, time.monotonic()))

    @override
    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Cancel the task: recorded, and its state made canceled."""
        assert context.task_id is not None
        assert context.context_id is not None
        self._server.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


@dataclass
class A2AServer:
    """A scripted remote agent on 127.0.0.1 (``async with A2AServer(script) as server``)."""

    script: Script
    name: str = "policy"
    description: str = "Answers questions about the refund policy."
    fail_with: int | None = None
    failing: frozenset[str] = frozenset()
    """The JSON-RPC methods answered with ``fail_with`` (none: every request, when it is set)."""
    requests: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])
    received: list[Received] = field(default_factory=list[Received])
    written: list[tuple[str, float]] = field(default_factory=list[tuple[str, float]])
    """Each chunk streamed, with when it was written (``time.monotonic()``)."""
    cancelled: list[str] = field(default_factory=list[str])
    """The ids of the tasks it was asked to cancel, in order."""
    url: str = ""
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None

    @property
    def sent(self) -> list[dict[str, Any]]:
        """The A2A messages sent to it (``params.message`` of each ``SendMessage`` or
        ``SendStreamingMessage``), as JSON."""
        sending = {"SendMessage", "SendStreamingMessage"}
        return [r["params"]["message"] for r in self.requests if r.get("method") in sending]

    def card(self) -> AgentCard:
        """The agent card it serves."""
        return AgentCard(
            name=self.name,
            description=self.description,
            version="1.0.0",
            supported_interfaces=[
                AgentInterface(protocol_binding="JSONRPC", url=self.url, protocol_version="1.0")
            ],
            capabilities=AgentCapabilities(streaming=True),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[
                AgentSkill(id="answer", name="answer", description=self.description, tags=["test"])
            ],
        )

    async def __aenter__(self) -> A2AServer:
        sock = listening_socket()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        card = self.card()
        handler = DefaultRequestHandler(
            agent_executor=ScriptedExecutor(self), task_store=InMemoryTaskStore(), agent_card=card
        )
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")]
        app = Starlette(routes=routes)

        async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["method"] != "POST":
                await app(scope, receive, send)
                return
            body = b""
            while True:
                part = await receive()
                body += part.get("body", b"")
                if not part.get("more_body"):
                    break
            request = json.loads(body)
            self.requests.append(request)
            fails = not self.failing or request.get("method") in self.failing
            if self.fail_with is not None and fails:
                await send({"type": "http.response.start", "status": self.fail_with, "headers": []})
                await send({"type": "http.response.body", "body": b"scripted failure"})
                return
            replayed = False

            async def again() -> MutableMapping[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await app(scope, again, send)

        config = uvicorn.Config(recorded, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        await self._until_ready()
        return self

    async def _until_ready(self, seconds: float = 20) -> None:
        """Wait until its agent card answers."""
        deadline = time.monotonic() + seconds
        async with httpx.AsyncClient() as client:
            while True:
                try:
                    card = await client.get(self.url.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH)
                    if card.status_code == 200 and card.json()["name"] == self.name:
                        return
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"the A2A server at {self.url} never answered"
                await asyncio.sleep(0.02)

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        assert self._task is not None
        self._server.should_exit = True
        await self._task


def listening_socket() -> socket.socket:
    """A TCP socket bound to a free port of 127.0.0.1, for uvicorn to serve on.

    Made with ``IPPROTO_TCP``: asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only on the
    connections of such a socket; on those of a plain ``socket.socket()`` every answer after a
    connection's first waits about 40 ms for the client's delayed ACK.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    return sock


def closed_port_url() -> str:
    """The address of a port of 127.0.0.1 that nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def answers(*scripted: Answer | str) -> Script:
    """A script that plays ``scripted`` in order (a text: a completed task with that answer)."""
    queue = [Answer(a) if isinstance(a, str) else a for a in scripted]

    def script(received: Received) -> Answer:
        assert queue, f"the scripted remote agent got one message too many: {received.text!r}"
        return queue.pop(0)

    return script


@asynccontextmanager
async def serving(make_app: Callable[[str], Any]) -> AsyncGenerator[str]:
    """Serve the ASGI app ``make_app(url)`` with uvicorn on a free port of 127.0.0.1.

    Yields its address once its agent card answers; stops it at the end.
    """
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    server = uvicorn.Server(uvicorn.Config(make_app(url), log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        deadline = time.monotonic() + 20
        async with httpx.AsyncClient() as client:
            while True:
                assert not task.done(), f"the A2A server at {url} stopped"
                try:
                    card = await client.get(url.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH)
                    if card.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"the A2A server at {url} never answered"
                await asyncio.sleep(0.02)
        yield url
    finally:
        server.should_exit = True
        await task
