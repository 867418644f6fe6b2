"""A desk served over A2A (``a2a_app``), against a real server on 127.0.0.1.

Each test serves a ``ConversationHost`` with uvicorn on a free port (``tests.a2a_servers.serving``,
ready once its agent card answers) and talks to it with clients we did not write: the a2a-sdk
client, agent_framework's ``A2AAgent``, and plain JSON-RPC over httpx for what a client would
not send. Sections: the card, a turn and the next one, streaming, a turn that waits for a
person, another framework's agent, bad input.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
import uuid
from asyncio.subprocess import PIPE
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_data_parts, new_data_part
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, InvalidParamsError, TaskNotFoundError
from agent_framework import Content, FunctionTool, tool
from agent_framework_a2a import A2AAgent
from google.protobuf.json_format import MessageToDict

from handoff_builder import (
    ROUTING_EVENT_PROPERTY,
    ConversationHost,
    HandoffWorkflowBuilder,
    a2a_app,
)
from handoff_builder._a2a_server import answers_in
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import (
    call_tool,
    client_of,
    handoff_to,
    reply,
    respond,
    scripted_agent,
)
from tests.a2a_servers import A2AServer, Answer, answers, serving

A2A_1 = {"A2A-Version": "1.0"}
"""The protocol version a plain JSON-RPC request names (a2a-sdk's clients send it)."""
CHARGED = "I was charged twice this month."
FOUND = "I found the duplicate charge and refunded it."


def desk_host(*billing_steps: Any, tools: Sequence[Any] = ()) -> tuple[ConversationHost, Any, Any]:
    """triage hands the first message to billing, which answers from ``billing_steps``."""
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund the double charge."))
    billing = scripted_agent("billing", *billing_steps, tools=list(tools) or None)
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing, "charges and refunds")
    return ConversationHost(builder, InMemoryConversationStore()), triage, billing


@asynccontextmanager
async def served(host: ConversationHost) -> AsyncGenerator[str]:
    def app(url: str) -> Any:
        return a2a_app(host, name="desk", description="The support desk.", url=url)

    async with serving(app) as url:
        yield url


@asynccontextmanager
async def a2a_client(url: str, *, streaming: bool = False) -> AsyncGenerator[Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        config = ClientConfig(streaming=streaming, httpx_client=http)
        client = ClientFactory(config).create(card)
        yield client


def user_message(
    *parts: Part | str, context_id: str | None = None, task_id: str | None = None
) -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=p) if isinstance(p, str) else p for p in parts],
    )
    if context_id:
        message.context_id = context_id
    if task_id:
        message.task_id = task_id
    return SendMessageRequest(message=message)


async def events_of(client: Any, request: SendMessageRequest) -> list[StreamResponse]:
    return [event async for event in client.send_message(request)]


async def task_of(client: Any, request: SendMessageRequest) -> Task:
    [event] = await events_of(client, request)
    assert event.HasField("task"), event
    return event.task


def artifacts(task: Task) -> list[tuple[str, str]]:
    """Each artifact as (its name: the agent, its text)."""
    return [(a.name, "".join(p.text for p in a.parts)) for a in task.artifacts]


def status_text(task: Task) -> str:
    return " ".join(p.text for p in task.status.message.parts if p.HasField("text"))


# -- the card -------------------------------------------------------------------------------------


async def test_the_card_names_the_desk_and_says_what_it_does() -> None:
    host, _, _ = desk_host()
    async with served(host) as url, httpx.AsyncClient() as http:
        card: AgentCard = await A2ACardResolver(http, url).get_agent_card()

    assert (card.name, card.description) == ("desk", "The support desk.")
    assert card.capabilities.streaming
    assert [(i.protocol_binding, i.url) for i in card.supported_interfaces] == [("JSONRPC", url)]
    skills = {skill.id: skill.description for skill in card.skills}
    assert set(skills) == {"conversation", "approvals"}
    assert "starts at triage" in skills["conversation"]
    assert "input-required" in skills["approvals"]


def test_the_app_refuses_an_address_that_is_not_http() -> None:
    host, _, _ = desk_host()
    with pytest.raises(ValueError, match="url must be an http"):
        a2a_app(host, name="desk", description="d", url="127.0.0.1:8000")


# -- a turn, and the next one in the same context ------------------------------------------------


async def test_a_message_is_a_turn_and_the_next_reaches_the_agent_it_was_handed_to() -> None:
    host, triage, billing = desk_host(reply(FOUND), reply("It was refunded yesterday."))
    async with served(host) as url, a2a_client(url) as client:
        first = await task_of(client, user_message(CHARGED))
        conversation = first.context_id
        second = await task_of(
            client, user_message("When was it refunded?", context_id=conversation)
        )

    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifacts(first) == [("billing", FOUND)]
    # The context id is the conversation id: the host has the conversation under it.
    history = await host.history(conversation)
    assert [m.text for m in history if m.role == "user"] == [CHARGED, "When was it refunded?"]
    # The second message, a new task in the same context, went to billing (remembered).
    assert second.id != first.id
    assert (second.context_id, second.status.state) == (
        conversation,
        TaskState.TASK_STATE_COMPLETED,
    )
    assert artifacts(second) == [("billing", "It was refunded yesterday.")]
    assert len(client_of(triage).calls) == 1
    client_of(billing).assert_complete()
    assert await host.active_agent(conversation) == "billing"


async def test_a_context_id_chosen_by_the_client_is_the_conversation_id() -> None:
    host, _, _ = desk_host(reply(FOUND))
    async with served(host) as url, a2a_client(url) as client:
        task = await task_of(client, user_message(CHARGED, context_id="alice"))

    assert task.context_id == "alice"
    assert await host.active_agent("alice") == "billing"


# -- streaming ------------------------------------------------------------------------------------


async def test_a_streamed_turn_sends_the_text_as_it_is_written_then_the_final_state() -> None:
    host, _, _ = desk_host(respond("I found the duplicate ", "charge and refunded it."))
    async with served(host) as url, a2a_client(url, streaming=True) as client:
        events = await events_of(client, user_message(CHARGED))
        [(task_id, context_id)] = {
            (e.status_update.task_id, e.status_update.context_id)
            for e in events
            if e.HasField("status_update")
        }
        async with httpx.AsyncClient() as http:
            stored = await _get_task(http, url, task_id)

    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    # The handoff, as a working status update that carries it.
    routed = [
        MessageToDict(e.status_update.metadata)[ROUTING_EVENT_PROPERTY]
        for e in events
        if e.HasField("status_update") and ROUTING_EVENT_PROPERTY in e.status_update.metadata
    ]
    assert [(r["type"], r["data"]["source"], r["data"]["target"]) for r in routed] == [
        ("handoff_sent", "triage", "billing")
    ]
    # billing's text in chunks as it wrote it, appended to one artifact, then the whole text.
    updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
    chunks = [
        (u.artifact.name, u.append, u.last_chunk, "".join(p.text for p in u.artifact.parts))
        for u in updates
    ]
    assert chunks == [
        ("billing", False, False, "I found the duplicate "),
        ("billing", True, False, "charge and refunded it."),
        ("billing", False, True, FOUND),
    ]
    assert len({u.artifact.artifact_id for u in updates}) == 1
    # The final state comes last, after every chunk, and says how the turn ended.
    last = events[-1]
    assert last.HasField("status_update")
    assert last.status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert MessageToDict(last.status_update.metadata)["handoff_builder_turn"] == {
        "status": "completed",
        "active_agent": "billing",
    }
    assert kinds.index("artifact_update") < len(kinds) - 1
    # The stored task holds the message whole.
    assert stored["artifacts"][0]["parts"] == [{"text": FOUND}]
    assert await host.active_agent(context_id) == "billing"


async def _get_task(http: httpx.AsyncClient, url: str, task_id: str) -> dict[str, Any]:
    answer = await http.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        headers=A2A_1,
    )
    return answer.json()["result"]


# -- a turn that waits for a person ---------------------------------------------------------------

refunded: list[int] = []


@tool(name="refund", description="Refund an amount.", approval_mode="always_require")
def refund(amount: int) -> str:
    refunded.append(amount)
    return f"refunded {amount}"


async def test_an_approval_is_input_required_and_the_next_message_answers_it() -> None:
    refunded.clear()
    host, _, _ = desk_host(call_tool("refund", amount=5), reply("Refunded 5 EUR."), tools=[refund])
    async with served(host) as url, a2a_client(url) as client:
        asked = await task_of(client, user_message("Refund 5 EUR, please."))
        conversation = asked.context_id
        [request] = await host.pending(conversation)
        unclear = await task_of(
            client, user_message("maybe?", context_id=conversation, task_id=asked.id)
        )
        assert refunded == []  # nothing ran before the answer
        done = await task_of(
            client, user_message("Approve", context_id=conversation, task_id=asked.id)
        )

    # The turn waits: input-required, the request described for a person and for a program.
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(asked) == (
        'billing asks for approval to call refund with {"amount": 5}. '
        'Answer "approve" or "decline".'
    )
    [data] = get_data_parts(list(asked.status.message.parts))
    assert data == {
        "requests": [
            {
                "request_id": str(request.id),
                "kind": "approval",
                "agent": "billing",
                "name": "refund",
                "arguments": {"amount": 5.0},
            }
        ]
    }
    # A message that answers nothing leaves the task waiting, saying why.
    assert unclear.id == asked.id
    assert unclear.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(unclear).startswith("'maybe?' is neither approve nor decline.")
    # The answer carries the turn on: the same task completes with what came after.
    assert done.id == asked.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert refunded == [5]
    assert artifacts(done) == [("billing", "Refunded 5 EUR.")]
    assert await host.pending(conversation) == []


async def test_a_data_part_declines_an_approval() -> None:
    refunded.clear()
    host, _, billing = desk_host(
        call_tool("refund", amount=7), reply("I did not refund it."), tools=[refund]
    )
    async with served(host) as url, a2a_client(url, streaming=True) as client:
        asked = [e async for e in client.send_message(user_message("Refund 7 EUR."))]
        [waiting] = [
            e.status_update
            for e in asked
            if e.HasField("status_update")
            and e.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        ]
        [request] = get_data_parts(list(waiting.status.message.parts))[0]["requests"]
        answer = new_data_part({"request_id": request["request_id"], "approved": False})
        done = await events_of(
            client, user_message(answer, context_id=waiting.context_id, task_id=waiting.task_id)
        )

    assert refunded == []
    last = done[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    texts = [
        "".join(p.text for p in e.artifact_update.artifact.parts)
        for e in done
        if e.HasField("artifact_update")
    ]
    assert texts == ["I did not refund it."]
    # billing's model read the call as declined.
    results = [
        str(c.result)
        for m in client_of(billing).calls[-1].messages
        for c in m.contents
        if c.type == "function_result"
    ]
    assert results == ["Error: the user did not approve this call, so it was not made."]


async def test_an_external_call_is_input_required_and_text_is_its_result() -> None:
    lookup = FunctionTool(name="lookup", description="Look an order up.", func=None)
    host, _, billing = desk_host(
        call_tool("lookup", order="A-17"), reply("A-17 shipped on Monday."), tools=[lookup]
    )
    async with served(host) as url, a2a_client(url) as client:
        asked = await task_of(client, user_message("Where is A-17?"))
        done = await task_of(
            client,
            user_message("shipped 2026-11-30", context_id=asked.context_id, task_id=asked.id),
        )

    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(asked) == (
        'billing waits for the result of lookup with {"order": "A-17"}. Answer with its result.'
    )
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifacts(done) == [("billing", "A-17 shipped on Monday.")]
    results = [
        str(c.result)
        for m in client_of(billing).calls[-1].messages
        for c in m.contents
        if c.type == "function_result"
    ]
    assert results == ["shipped 2026-11-30"]


async def test_a_remote_agents_question_is_input_required_and_text_answers_it() -> None:
    """The desk's own remote agent asks (a chain: our client, the desk, a remote returns)."""
    script = answers(
        Answer("Which order is it?", "input_required"), Answer("Refund of A-17 started.")
    )
    async with A2AServer(script, name="returns") as remote_server:
        triage = scripted_agent("triage", handoff_to("returns", goal="Refund a parcel."))
        returns = A2AAgent(url=remote_server.url, name="returns")
        builder = HandoffWorkflowBuilder(triage).with_handoff(triage, returns)
        host = ConversationHost(builder, InMemoryConversationStore())
        async with served(host) as url, a2a_client(url) as client:
            asked = await task_of(client, user_message("Refund my parcel."))
            [request] = await host.pending(asked.context_id)
            done = await task_of(
                client,
                user_message("It is order A-17.", context_id=asked.context_id, task_id=asked.id),
            )

    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert status_text(asked) == "returns asks: Which order is it? Answer with your reply."
    [data] = get_data_parts(list(asked.status.message.parts))
    assert data == {
        "requests": [
            {
                "request_id": str(request.id),
                "kind": "question",
                "agent": "returns",
                "text": "Which order is it?",
            }
        ]
    }
    assert artifacts(asked) == [("returns", "Which order is it?")]
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifacts(done)[-1] == ("returns", "Refund of A-17 started.")
    opened, continued = remote_server.received
    assert (continued.text, continued.task_id) == ("It is order A-17.", opened.task_id)


def test_a_data_part_answers_a_question_by_its_id_with_text() -> None:
    question = Content.from_text("Which order is it?")
    question.id, question.user_input_request = "q-1", True
    answered = answers_in([], [{"request_id": "q-1", "text": "A-17"}], [question])
    assert isinstance(answered, dict)
    assert answered["q-1"].text == "A-17"
    assert answers_in([], [{"request_id": "q-1"}], [question]) == (
        "The answer to question 'q-1' needs a \"text\" (a string with words)."
    )


# -- another framework's agent pointed at the desk ------------------------------------------------


async def test_agent_frameworks_a2a_agent_talks_to_the_desk_across_two_turns() -> None:
    host, triage, billing = desk_host(reply(FOUND), reply("It was refunded yesterday."))
    async with served(host) as url:
        desk = A2AAgent(url=url, name="desk")
        session = desk.create_session()
        first = await desk.run(CHARGED, session=session)
        second = await desk.run("When was it refunded?", session=session)

    assert first.text == FOUND
    assert second.text == "It was refunded yesterday."
    [conversation] = await host.conversations()
    assert await host.active_agent(conversation) == "billing"
    assert len(client_of(triage).calls) == 1  # the second turn went straight to billing
    client_of(billing).assert_complete()


async def test_agent_frameworks_a2a_agent_streams_from_the_desk() -> None:
    host, _, _ = desk_host(respond("I found the duplicate ", "charge and refunded it."))
    async with served(host) as url:
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, url).get_agent_card()
        desk = A2AAgent(agent_card=card)  # the card says it streams
        stream = desk.run(CHARGED, session=desk.create_session(), stream=True)
        updates = [update async for update in stream]
        final = await stream.get_final_response()

    assert desk.name == "desk"
    # The chunks as billing wrote them, then the whole text, which replaces them.
    assert [(u.text, u.contents[0].merge_mode) for u in updates if u.text] == [
        ("I found the duplicate ", "replace"),
        ("charge and refunded it.", "append"),
        (FOUND, "replace"),
    ]
    assert [m.text for m in final.messages] == [FOUND]


# -- bad input ------------------------------------------------------------------------------------


async def rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        answer = await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
            headers=A2A_1,
        )
    assert answer.status_code == 200, answer.text
    return answer.json()


def wire_message(*parts: dict[str, Any], **fields: str) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": list(parts)}
    return {"message": {**message, **fields}}


async def test_bad_input_is_an_a2a_error_and_the_desk_carries_on() -> None:
    host, triage, _ = desk_host(reply(FOUND))
    async with served(host) as url:
        no_text = await rpc(url, "SendMessage", wire_message({"url": "https://example.com/a.png"}))
        blank = await rpc(url, "SendMessage", wire_message({"text": "  "}))
        unknown_task = await rpc(
            url, "SendMessage", wire_message({"text": "hello"}, taskId="no-such-task")
        )
        bad_context = await rpc(
            url, "SendMessage", wire_message({"text": "hello"}, contextId="a\nb")
        )
        answers_nothing = await rpc(
            url, "SendMessage", wire_message({"data": {"request_id": "r1", "approved": True}})
        )
        fine = await rpc(url, "SendMessage", wire_message({"text": CHARGED}))

    for refused in (no_text, blank, bad_context, answers_nothing):
        assert refused["error"]["code"] == -32602, refused
        assert "result" not in refused
    assert "no text part" in no_text["error"]["message"]
    assert "no text part" in blank["error"]["message"]
    assert "context id is no conversation id" in bad_context["error"]["message"]
    assert "waits for none" in answers_nothing["error"]["message"]
    assert "error" in unknown_task
    assert "no-such-task" in unknown_task["error"]["message"]
    # Nothing ran for them; the good message after them did.
    assert len(client_of(triage).calls) == 1
    assert fine["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_the_a2a_sdk_client_raises_for_bad_input() -> None:
    host, _, _ = desk_host()
    async with served(host) as url, a2a_client(url) as client:
        with pytest.raises(InvalidParamsError, match="no text part"):
            await events_of(client, user_message(Part(url="https://example.com/a.png")))
        with pytest.raises(TaskNotFoundError):
            await events_of(client, user_message("hello", task_id="no-such-task"))


async def test_a_data_part_that_answers_no_waiting_request_is_refused() -> None:
    refunded.clear()
    host, _, _ = desk_host(call_tool("refund", amount=5), reply("Refunded."), tools=[refund])
    async with served(host) as url, a2a_client(url) as client:
        asked = await task_of(client, user_message("Refund 5 EUR."))
        wrong = new_data_part({"request_id": "not-this-one", "approved": True})
        with pytest.raises(InvalidParamsError, match="waits for no request 'not-this-one'"):
            await events_of(
                client, user_message(wrong, context_id=asked.context_id, task_id=asked.id)
            )
        still = await _task(url, asked.id)

    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert refunded == []


async def _task(url: str, task_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        return await _get_task(http, url, task_id)


async def test_a_turn_that_fails_fails_its_task_and_the_next_message_retries_it() -> None:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing")  # no step: its model call fails
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = ConversationHost(builder, InMemoryConversationStore())
    async with served(host) as url, a2a_client(url) as client:
        failed = await task_of(client, user_message(CHARGED))
        client_of(billing).add_steps(reply(FOUND), reply("Anything else?"))
        again = await task_of(client, user_message("Hello?", context_id=failed.context_id))

    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert status_text(failed).startswith("ScriptExhaustedError")
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifacts(again)[-1] == ("billing", "Anything else?")


# -- A2A 0.3's method names, and cancelling ------------------------------------------------------


def v03_message(text: str, **fields: str) -> dict[str, Any]:
    """A message as A2A 0.3 writes it (``kind`` on each part, lower-case roles)."""
    message = {"messageId": uuid.uuid4().hex, "role": "user", "kind": "message"}
    return {"message": {**message, "parts": [{"kind": "text", "text": text}], **fields}}


async def test_a_client_of_a2a_0_3_sends_and_streams_with_its_method_names() -> None:
    host, _, _ = desk_host(reply(FOUND), respond("It was ", "refunded yesterday."))
    async with served(host) as url, httpx.AsyncClient() as http:
        sent = await http.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": v03_message(CHARGED),
            },
        )
        task = sent.json()["result"]
        lines: list[dict[str, Any]] = []
        params = v03_message("When?", contextId=task["contextId"])
        request = {"jsonrpc": "2.0", "id": 2, "method": "message/stream", "params": params}
        async with http.stream("POST", url, json=request) as streamed:
            async for line in streamed.aiter_lines():
                if line.startswith("data: "):
                    lines.append(json.loads(line.removeprefix("data: "))["result"])

    assert task["status"]["state"] == "completed"
    assert [a["parts"] for a in task["artifacts"]] == [[{"kind": "text", "text": FOUND}]]
    assert task["metadata"]["handoff_builder_turn"] == {
        "status": "completed",
        "active_agent": "billing",
    }
    kinds = [(event["kind"], event.get("final")) for event in lines]
    assert kinds[-1] == ("status-update", True)
    assert lines[-1]["status"]["state"] == "completed"
    chunks = [
        "".join(p["text"] for p in event["artifact"]["parts"])
        for event in lines
        if event["kind"] == "artifact-update"
    ]
    assert chunks == ["It was ", "refunded yesterday.", "It was refunded yesterday."]


async def test_cancelling_a_task_that_waits_abandons_its_turn() -> None:
    refunded.clear()
    host, _, billing = desk_host(
        call_tool("refund", amount=5), reply("How else can I help?"), tools=[refund]
    )
    async with served(host) as url, a2a_client(url) as client:
        asked = await task_of(client, user_message("Refund 5 EUR."))
        cancelled = await client.cancel_task(CancelTaskRequest(id=asked.id))
        after = await task_of(
            client, user_message("Never mind, thanks.", context_id=asked.context_id)
        )

    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert refunded == []
    assert after.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifacts(after) == [("billing", "How else can I help?")]
    assert await host.pending(asked.context_id) == []
    # The given-up turn is in no agent's view: billing's next call reads the new message only.
    seen = client_of(billing).calls[-1].texts
    assert "Never mind, thanks." in seen
    assert "Refund 5 EUR." not in seen


# -- handoff-builder serve --a2a ------------------------------------------------------------------


async def test_the_serve_command_serves_the_support_desk_over_a2a() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    command = [sys.executable, "-m", "handoff_builder.cli", "serve", "--a2a", "--port", str(port)]
    process = await asyncio.create_subprocess_exec(
        *command, "--store", "memory", "--name", "support", stdout=PIPE, stderr=PIPE
    )
    try:
        async with httpx.AsyncClient() as http:
            card = await _card_when_ready(http, url, process)
        desk = A2AAgent(agent_card=card)
        session = desk.create_session()
        first = await desk.run("my invoice is wrong", session=session)
        second = await desk.run("and the price of my plan?", session=session)
    finally:
        process.terminate()
        out, err = await asyncio.wait_for(process.communicate(), 30)

    assert (card.name, card.capabilities.streaming) == ("support", True)
    assert first.text == "(billing) I'm on it: my invoice is wrong"
    assert second.text == "(billing) I'm on it: and the price of my plan?"  # at billing still
    assert process.returncode == 0, err.decode()
    assert out.decode().splitlines()[0] == (
        f"handoff-builder: serving the support desk over A2A at {url} (Ctrl-C stops it)"
    )


async def _card_when_ready(
    http: httpx.AsyncClient, url: str, process: asyncio.subprocess.Process
) -> AgentCard:
    deadline = time.monotonic() + 60
    while True:
        assert process.returncode is None, "the serve command stopped"
        try:
            return await A2ACardResolver(http, url).get_agent_card()
        except A2AError:
            assert time.monotonic() < deadline, f"nothing answered at {url}"
            await asyncio.sleep(0.1)


async def test_after_a_restart_a_message_in_the_context_answers_what_the_turn_waits_for() -> None:
    refunded.clear()
    host, _, _ = desk_host(call_tool("refund", amount=5), reply("Refunded 5 EUR."), tools=[refund])
    async with served(host) as url, a2a_client(url) as client:
        asked = await task_of(client, user_message("Refund 5 EUR, please."))
    # A new server (its A2A tasks forgotten) over the same conversations.
    async with served(host) as url, a2a_client(url) as client:
        with pytest.raises(TaskNotFoundError):
            await events_of(client, user_message("approve", task_id=asked.id))
        done = await task_of(client, user_message("approve", context_id=asked.context_id))

    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert done.id != asked.id  # a new task in the same context
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert artifacts(done) == [("billing", "Refunded 5 EUR.")]
    assert refunded == [5]
