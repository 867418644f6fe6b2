"""A local OpenAI-compatible server for the wire tests: Chat Completions and Responses.

It answers each request from a script, one reply per request, in order, and keeps every request
body. A reply is written once, as a chat-completions assistant message (``text(...)``,
``tool_call(...)``, or both: ``{**text(...), "tool_calls": [...]}``); the server sends it in the
form the request's API expects:

* ``POST /v1/chat/completions``: a ``chat.completion`` (or, with ``"stream": true``, its
  ``chat.completion.chunk`` events);
* ``POST /v1/responses``: a ``response`` whose ``output`` holds a ``message`` item for the text
  and a ``function_call`` item per call (or, streaming, the events OpenAI sends:
  ``response.created``, ``response.output_item.added``, ``response.content_part.added`` with
  its ``annotations``, ``response.output_text.delta``,
  ``response.function_call_arguments.delta``, ..., ``response.completed``). Like llama.cpp, it
  refuses ``previous_response_id``: it keeps no responses, so every request must carry the
  whole input.

:func:`chat_view` reads a Responses request body as the chat-completions body it stands for, so
one set of assertions checks what a model received through either API;
:func:`assert_responses_input_valid` checks what only a Responses body can get wrong.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, cast

from agent_framework import Agent
from typing_extensions import override

from handoff_builder.providers import chat_client

Api = Literal["chat_completions", "responses"]
APIS: tuple[Api, ...] = ("chat_completions", "responses")
PATHS: dict[Api, str] = {"chat_completions": "/v1/chat/completions", "responses": "/v1/responses"}


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


# -- chat completions ------------------------------------------------------------------------------


USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
"""The usage every reply reports (one token in, one out)."""


def _completion(number: int, model: str, message: dict[str, Any]) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": USAGE,
    }


def _completion_chunks(
    number: int, model: str, message: dict[str, Any], *, usage: bool = False
) -> Iterator[dict[str, Any]]:
    """The chunks of one streamed reply; with ``usage`` (``stream_options.include_usage``), a
    last chunk without choices carries the usage, as OpenAI and llama.cpp send it."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    calls: list[dict[str, Any]] = message.get("tool_calls") or []
    for index, call in enumerate(calls):
        yield chunk({"tool_calls": [{**call, "index": index}]})
    yield chunk({}, "tool_calls" if calls else "stop")
    if usage:
        yield {**chunk({}), "choices": [], "usage": USAGE}


# -- responses -------------------------------------------------------------------------------------


def _output_items(number: int, message: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses output items of one scripted reply: its text, then each call."""
    items: list[dict[str, Any]] = []
    if message.get("content"):
        items.append(
            {
                "type": "message",
                "id": f"msg_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": message["content"], "annotations": []}],
            }
        )
    calls: list[dict[str, Any]] = message.get("tool_calls") or []
    for index, call in enumerate(calls):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{number}_{index}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
        )
    return items


def _response(number: int, model: str, items: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": f"resp_{number}",
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": status,
        "output": items if status == "completed" else [],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2,
        },
    }


def _response_events(number: int, model: str, message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The stream of one reply, event by event, as OpenAI sends it."""
    items = _output_items(number, message)
    yield {"type": "response.created", "response": _response(number, model, items, "in_progress")}
    for output_index, item in enumerate(items):
        if item["type"] == "message":
            yield {
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": {**item, "status": "in_progress", "content": []},
            }
            part: dict[str, Any] = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
            yield {"type": "response.content_part.added", **where, "part": part}
            full = item["content"][0]["text"]
            yield {"type": "response.output_text.delta", **where, "delta": full, "logprobs": []}
            yield {"type": "response.output_text.done", **where, "text": full, "logprobs": []}
            yield {"type": "response.content_part.done", **where, "part": {**part, "text": full}}
        else:
            yield {
                "type": "response.output_item.added",
                "output_index": output_index,
                "item": {**item, "status": "in_progress", "arguments": ""},
            }
            where = {"item_id": item["id"], "output_index": output_index}
            arguments = item["arguments"]
            yield {"type": "response.function_call_arguments.delta", **where, "delta": arguments}
            yield {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
        yield {"type": "response.output_item.done", "output_index": output_index, "item": item}
    yield {"type": "response.completed", "response": _response(number, model, items, "completed")}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        fake = cast("_Server", self.server).fake
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        fake.requests.append({"path": self.path, "body": body})
        number, model = len(fake.requests), body.get("model", "fake")
        if self.path == PATHS["responses"] and body.get("previous_response_id"):
            error = {"message": "previous_response_id is not supported here."}
            self._send(400, {"error": {**error, "type": "invalid_request_error"}})
            return
        message = fake.replies.pop(0)
        if self.path != PATHS["responses"]:
            if body.get("stream"):
                options: dict[str, Any] = body.get("stream_options") or {}
                usage = bool(options.get("include_usage"))
                chunks = _completion_chunks(number, model, message, usage=usage)
                self._stream(chunks, named=False)
            else:
                self._send(200, _completion(number, model, message))
        elif body.get("stream"):
            self._stream(_response_events(number, model, message), named=True)
        else:
            self._send(200, _response(number, model, _output_items(number, message), "completed"))

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: Iterator[dict[str, Any]], *, named: bool) -> None:
        """Server-sent events; Responses events carry their type and a sequence number."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for sequence, event in enumerate(events):
            head = ""
            if named:
                event = {**event, "sequence_number": sequence}
                head = f"event: {event['type']}\n"
            self.wfile.write(f"{head}data: {json.dumps(event)}\n\n".encode())
        if not named:
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    @override
    def log_message(self, format: str, *args: Any) -> None:
        del format, args


class _Server(ThreadingHTTPServer):
    def __init__(self, fake: FakeOpenAI) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class FakeOpenAI:
    """A scripted OpenAI endpoint (both APIs): one reply per request, in order."""

    def __init__(self, replies: list[dict[str, Any]], api: Api = "chat_completions") -> None:
        self.replies = list(replies)
        self.api: Api = api
        self.requests: list[dict[str, Any]] = []
        self.server = _Server(self)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def environ(self) -> dict[str, str]:
        """The environment that points ``providers.chat_client("openai")`` here."""
        api = "responses" if self.api == "responses" else "chat-completions"
        return {
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": self.base_url,
            "HANDOFF_BUILDER_OPENAI_API": api,
        }

    def agent(
        self,
        name: str,
        instructions: str,
        description: str | None = None,
        tools: list[Any] | None = None,
    ) -> Agent:
        return Agent(
            client=chat_client("openai", environ=self.environ),
            name=name,
            instructions=instructions,
            description=description,
            tools=tools,
        )

    def raw_bodies(self) -> list[dict[str, Any]]:
        """Every request body as sent, after checking each went to this server's API."""
        assert all(r["path"] == PATHS[self.api] for r in self.requests), [
            r["path"] for r in self.requests
        ]
        return [request["body"] for request in self.requests]

    def bodies(self) -> list[dict[str, Any]]:
        """Every request body, as chat-completions bodies (a Responses body checked, then read
        as one)."""
        bodies = self.raw_bodies()
        if self.api == "chat_completions":
            return bodies
        for body in bodies:
            assert_responses_input_valid(body)
        return [chat_view(body) for body in bodies]


# -- reading a Responses request -------------------------------------------------------------------

_TEXT_PARTS = {"user": "input_text", "system": "input_text", "developer": "input_text"}


def _text_of(item: dict[str, Any]) -> str:
    content: str | list[dict[str, Any]] = item["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


def _output_text(output: Any) -> str:
    """A function_call_output's output: a string, or a list of parts (rich output)."""
    if isinstance(output, str):
        return output
    parts: list[dict[str, Any]] = output
    return "".join(part.get("text", "") for part in parts)


def _tool_call(item: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }


def _chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as chat messages; a run of assistant items is one assistant message."""
    messages: list[dict[str, Any]] = []
    reply: dict[str, Any] | None = None  # the assistant message the items go on filling
    for item in items:
        kind = item.get("type", "message")
        is_reply = kind == "function_call" or (kind == "message" and item["role"] == "assistant")
        if not is_reply:
            reply = None
        elif reply is None or (kind == "message" and reply["content"] is not None):
            reply = {"role": "assistant", "content": None}
            messages.append(reply)
        if kind == "function_call" and reply is not None:
            reply.setdefault("tool_calls", []).append(_tool_call(item))
        elif kind == "message" and reply is not None:
            reply["content"] = _text_of(item)
        elif kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": _text_of(item)})
        elif kind == "function_call_output":
            output = _output_text(item["output"])
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        else:
            raise AssertionError(f"unexpected input item {item}")
    return messages


def chat_view(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request body read as the chat-completions body it stands for.

    Input ``message`` items become messages (``developer`` reads as ``system``, ``instructions``
    as a first system message). A run of assistant items, its text and its ``function_call``
    items in either order (agent_framework sends a response's calls before its text), is one
    assistant message with ``tool_calls``: one model response. ``function_call_output`` items
    become ``tool`` messages; tools get the ``function`` wrapper and ``max_output_tokens`` reads
    as ``max_completion_tokens``.
    """
    instructions = body.get("instructions")
    system = [{"role": "system", "content": instructions}] if instructions else []
    view: dict[str, Any] = {k: v for k, v in body.items() if k not in ("input", "instructions")}
    view["messages"] = system + _chat_messages(body["input"])
    if "tools" in body:
        view["tools"] = [
            {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
            for t in body["tools"]
        ]
    if "max_output_tokens" in view:
        view["max_completion_tokens"] = view.pop("max_output_tokens")
    return view


def assert_responses_input_valid(body: dict[str, Any]) -> None:
    """What a Responses provider checks that a chat view cannot show.

    The whole input is sent (no ``previous_response_id``, ``store`` false: nothing is kept on
    the server); each message's parts have the type of its role (``input_text`` from a user or
    the system, ``output_text`` with ``annotations`` from an assistant); every
    ``function_call_output`` answers a ``function_call`` earlier in the input, every call is
    answered, and no item id is sent twice.
    """
    assert "previous_response_id" not in body, body.get("previous_response_id")
    assert "conversation" not in body
    assert body.get("store") is False, f"store is {body.get('store')!r}, not false"
    calls: set[str] = set()
    answered: set[str] = set()
    ids: list[str] = [item["id"] for item in body["input"] if "id" in item]
    assert len(ids) == len(set(ids)), f"an item id is sent twice: {ids}"
    for item in body["input"]:
        kind = item.get("type", "message")
        if kind == "message" and isinstance(item["content"], list):
            expected = _TEXT_PARTS.get(item["role"], "output_text")
            parts: list[dict[str, Any]] = item["content"]
            for part in parts:
                assert part["type"] == expected, f"{item['role']} message with a {part['type']}"
                if expected == "output_text":
                    assert part.get("annotations") == [], part
        elif kind == "function_call":
            assert item["id"].startswith("fc_"), item
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            assert item["call_id"] in calls, f"orphan function_call_output: {item}"
            answered.add(item["call_id"])
    assert calls == answered, f"calls {sorted(calls - answered)} are never answered"
