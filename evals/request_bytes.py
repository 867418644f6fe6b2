"""What one turn sends to the model: the bytes of its Chat Completions requests, tools apart.

The scenario is the benchmarks' (benchmarks/README.md): ``user -> triage --handoff--> billing
--handoff--> refunds -> reply``, every turn at triage, N prior messages, agents told only "You
are the <name> agent.", everything else the framework's defaults. Three model calls: triage and
billing each call their one handoff tool (with a goal where the tool takes one), refunds
answers. The requests go through the framework's real OpenAI client to an in-process transport
that answers from that script, so what is counted is exactly what would go over the wire.

Run from the repository's root:
    .venv/bin/python -m evals.request_bytes                      # handoff_builder, N = 0 and 100
    .venv/bin/python -m evals.request_bytes --framework handoff_builder_reply_tool  # reply tool
    VENV/bin/python -m evals.request_bytes --framework openai_agents   # pip install openai-agents

It prints one line per N: the requests' bytes, the bytes of their ``tools``, and the tool
schemas the first request offered.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2 as httpx  # the openai package's HTTP client

CHAIN = ("triage", "billing", "refunds")
TARGET = {"triage": "billing", "billing": "refunds"}
USER_TEXT = "I was double charged, please refund me."
GOAL = "Refund a double charge."
REPLY = "refunds: done"


@dataclass
class Capture:
    """Every request body the transport received, and its answers."""

    bodies: list[bytes] = field(default_factory=list[bytes])

    def handler(self, request: httpx.Request) -> httpx.Response:
        """Answer a chat completion from the script: hand off while a handoff tool is offered."""
        body = request.content
        self.bodies.append(body)
        sent = json.loads(body)
        step = len(self.bodies) - 1
        message: dict[str, Any]
        if step < len(TARGET):
            target = CHAIN[step + 1]
            tool = next(t for t in sent.get("tools", ()) if target in t["function"]["name"])
            schema: dict[str, Any] = tool["function"].get("parameters") or {}
            arguments = {"goal": GOAL} if "goal" in schema.get("properties", {}) else {}
            call = {
                "id": f"call_{step}",
                "type": "function",
                "function": {"name": tool["function"]["name"], "arguments": json.dumps(arguments)},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        else:
            message = {"role": "assistant", "content": REPLY}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if sent.get("stream"):
            return httpx.Response(200, content=_sse(message, usage), headers=_SSE_HEADERS)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        completion = {
            "id": f"chatcmpl-{step}",
            "object": "chat.completion",
            "created": 0,
            "model": sent.get("model", "m"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        return httpx.Response(200, json=completion)

    def figures(self) -> tuple[int, int]:
        """The bytes of every request body, and of the ``tools`` in them (as sent)."""
        total = sum(len(body) for body in self.bodies)
        tools = 0
        for body in self.bodies:
            sent = json.loads(body)
            if "tools" in sent:
                without = {key: value for key, value in sent.items() if key != "tools"}
                tools += len(_compact(sent)) - len(_compact(without))
        return total, tools


_SSE_HEADERS = {"content-type": "text/event-stream"}


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _sse(message: dict[str, Any], usage: dict[str, int]) -> bytes:
    delta: dict[str, Any] = {"role": "assistant"}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": 0, **call} for call in message["tool_calls"]]
    else:
        delta["content"] = message["content"]
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {"choices": [], "usage": usage},
    ]
    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    lines = ["data: " + json.dumps({**head, **chunk}) for chunk in chunks]
    return ("\n\n".join([*lines, "data: [DONE]"]) + "\n\n").encode()


def prior_messages(count: int) -> list[tuple[str, str]]:
    """The benchmarks' prior conversation: ``count`` messages of ~60 characters."""
    roles = ("user", "assistant")
    return [
        (roles[i % 2], f"{roles[i % 2]} message number {i:05d} about an invoice and a refund.")
        for i in range(count)
    ]


async def handoff_builder_turn(capture: Capture, prior: int, *, reply_tool: bool = False) -> str:
    """One turn of handoff_builder's default workflow over the capturing transport.

    ``reply_tool``: the workflow with ``with_reply_tool()``.
    """
    from agent_framework import Agent, Message
    from agent_framework.openai import OpenAIChatCompletionClient
    from openai import AsyncOpenAI

    from handoff_builder import HandoffWorkflowBuilder

    http = httpx.AsyncClient(transport=httpx.MockTransport(capture.handler))
    openai = AsyncOpenAI(api_key="none", base_url="http://model.invalid/v1", http_client=http)
    agents = {
        name: Agent(
            client=OpenAIChatCompletionClient(model="m", async_client=openai),
            name=name,
            description=f"{name} agent",
            instructions=f"You are the {name} agent.",
        )
        for name in CHAIN
    }
    builder = HandoffWorkflowBuilder(agents["triage"])
    for source, target in TARGET.items():
        builder = builder.with_handoff(agents[source], agents[target])
    if reply_tool:
        builder = builder.with_reply_tool()
    history = [Message(role=role, contents=[text]) for role, text in prior_messages(prior)]
    result = await builder.build().run([*history, Message(role="user", contents=[USER_TEXT])])
    return result.get_outputs()[-1].text


async def openai_agents_turn(capture: Capture, prior: int) -> str:  # pragma: no cover - its venv
    """One turn of openai-agents' ``Runner.run`` with handoffs over the capturing transport."""
    from openai import AsyncOpenAI

    sdk: Any = importlib.import_module("agents")  # openai-agents, in a venv of its own
    http = httpx.AsyncClient(transport=httpx.MockTransport(capture.handler))
    openai = AsyncOpenAI(api_key="none", base_url="http://model.invalid/v1", http_client=http)
    model = sdk.OpenAIChatCompletionsModel(model="m", openai_client=openai)
    built: dict[str, Any] = {}
    for name in reversed(CHAIN):
        target = TARGET.get(name)
        built[name] = sdk.Agent(
            name=name,
            instructions=f"You are the {name} agent.",
            model=model,
            handoff_description=f"{name} agent",
            handoffs=[built[target]] if target else [],
        )
    history: list[Any] = [{"role": role, "content": text} for role, text in prior_messages(prior)]
    result = await sdk.Runner.run(
        built["triage"],
        [*history, {"role": "user", "content": USER_TEXT}],
        run_config=sdk.RunConfig(tracing_disabled=True),
    )
    return str(result.final_output)


FRAMEWORKS: dict[str, Callable[[Capture, int], Any]] = {
    "handoff_builder": handoff_builder_turn,
    "handoff_builder_reply_tool": functools.partial(handoff_builder_turn, reply_tool=True),
    "openai_agents": openai_agents_turn,
}


async def measure(framework: str, prior: int) -> tuple[Capture, str]:
    """The requests of one turn of ``framework`` after ``prior`` messages, and its reply."""
    capture = Capture()
    reply = await FRAMEWORKS[framework](capture, prior)
    return capture, reply


def main(argv: list[str] | None = None) -> None:
    """Print the bytes one turn sends, per prior-conversation size."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), default="handoff_builder")
    parser.add_argument("--sizes", default="0,100", help="prior messages, comma-separated")
    parser.add_argument("--show-tools", action="store_true", help="print the first request's tools")
    args = parser.parse_args(argv)
    for prior in (int(size) for size in args.sizes.split(",")):
        capture, reply = asyncio.run(measure(args.framework, prior))
        if len(capture.bodies) != len(CHAIN) or reply != REPLY:
            raise SystemExit(f"unexpected turn: {len(capture.bodies)} model calls, reply {reply!r}")
        total, tools = capture.figures()
        sys.stdout.write(
            f"{args.framework}: N={prior}: {len(capture.bodies)} requests, {total:,} bytes "
            f"(tools {tools:,})\n"
        )
        if args.show_tools:
            for number, body in enumerate(capture.bodies, 1):
                sys.stdout.write(f"  request {number}: {body.decode()}\n")


if __name__ == "__main__":
    main()
