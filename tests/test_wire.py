"""The real wire path: agent_framework's OpenAI client against a local OpenAI-compatible server.

The server (started here, on 127.0.0.1) answers chat-completion requests from a script and keeps
every request, so the test can check what went over the wire.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from agent_framework import Agent
from typing_extensions import override

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.providers import chat_client


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


class FakeOpenAI:
    """A scripted chat-completions endpoint: one reply per request, in order."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body})
                message = fake.replies.pop(0)
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                payload = json.dumps(
                    {
                        "id": f"chatcmpl-{len(fake.requests)}",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body.get("model", "fake"),
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            @override
            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(
        [
            tool_call("call_a", "handoff_to_billing", {"goal": ""}),
            tool_call("call_b", "handoff_to_billing", {"goal": "Refund the double charge."}),
            {"role": "assistant", "content": "Refund issued."},
        ]
    )
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


async def test_handoff_conversation_over_the_wire(fake_openai: FakeOpenAI) -> None:
    environ = {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": fake_openai.base_url}
    triage = Agent(
        client=chat_client("openai", environ=environ), name="triage", instructions="Route the user."
    )
    billing = Agent(
        client=chat_client("openai", environ=environ),
        name="billing",
        instructions="Fix charges.",
        description="charges, invoices, plans",
    )
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()

    result = await workflow.run("I was charged twice.")
    turn = result.get_outputs()[-1]
    assert turn.text == "Refund issued."
    assert [(h.source, h.target, h.goal) for h in turn.handoffs] == [
        ("triage", "billing", "Refund the double charge.")
    ]

    first, second, third = (request["body"] for request in fake_openai.requests)
    assert all(r["path"] == "/v1/chat/completions" for r in fake_openai.requests)
    # The handoff tool's JSON schema, with its required goal.
    [tool] = first["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "handoff_to_billing"
    assert tool["function"]["description"] == "charges, invoices, plans"
    parameters = tool["function"]["parameters"]
    assert parameters["required"] == ["goal"]
    assert parameters["properties"]["goal"]["type"] == "string"
    # One tool call per response.
    assert first["parallel_tool_calls"] is False
    # The empty goal's tool error went back to the model, answering its call.
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_a"]
    assert "goal is empty" in tool_messages[0]["content"]
    # Billing got the user's message, with no handoff call or result, and no tools of its own.
    assert [m["role"] for m in third["messages"] if m["role"] != "system"] == ["user"]
    assert "tools" not in third or not third["tools"]
    assert "Transferred." not in json.dumps(third["messages"])
