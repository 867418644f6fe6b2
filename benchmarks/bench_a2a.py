"""Remote agents over A2A on 127.0.0.1: one delegate call, and fan-out to four experts, in one run.

The remote agents are a2a-sdk servers in a process of their own (this script, ``--serve``), one
server a port of 127.0.0.1: ``echo`` answers at once, ``expert_1`` to ``expert_4`` after
``--latency-ms`` (default 100: a remote agent that takes 100 ms). Each answers every message with
a task that completes, its answer (``<name>: <the message's text>``) its artifact, as an A2A
agent answers agent_framework's ``A2AAgent``. Every figure is the time of one whole call or turn
in this process, the configurations interleaved round by round in shuffled order, so the
machine's noise falls on all of them alike; every answer is checked (a correct run reports 0
errors).

**1. One delegate call** (``--calls`` per configuration and round), the same message each time:

* ``a2a-sdk client``: ``Client.send_message`` of a2a-sdk (its ``ClientFactory``, non-streaming,
  JSON-RPC, one ``httpx.AsyncClient`` kept open), the answer read from the task's artifact. The
  floor: calling the remote agent without agent_framework or handoff_builder.
* ``A2AAgent.run``: agent_framework's ``A2AAgent`` (``agent-framework-a2a``), a new session a call.
* ``handoff_builder, remote expert``: one turn of a workflow whose coordinator (a scripted model,
  no latency) calls the delegate tool ``ask_echo`` once and then answers with its result:
  ``HandoffWorkflowBuilder(coordinator).with_delegate(coordinator, A2AAgent(url=...))``.
* ``handoff_builder, local expert``: the same turn, the expert a local scripted agent that
  answers at once: what the turn costs without the remote call.

``remote expert`` minus ``a2a-sdk client`` is everything a turn does around the call: the
coordinator's two model calls (scripted), the workflow's run, the delegation, ``A2AAgent`` (its
own part is ``A2AAgent.run`` minus ``a2a-sdk client``). ``local expert`` is that turn with a local
expert's run in place of the remote call.

**2. Fan-out** (``--fan-rounds`` rounds), four experts that take ``--latency-ms`` each:

* ``one expert``: the coordinator calls ``ask_expert_1`` alone, then answers;
* ``4 in one response``: it calls the four delegate tools in one response (they run at once);
* ``4 in one response, 2 at a time``: the same with ``with_max_parallel_delegations(2)``;
* ``4 in a row``: one delegate call a response, four responses, then the answer;
* ``a2a-sdk client, one expert`` and ``a2a-sdk client, 4 at once``: ``expert_1`` asked alone, and
  the four asked with ``asyncio.gather``, with a2a-sdk's client and no workflow: the floors.

The four experts share one server process (and this machine's cores), so four calls at once cost
the server more than one: the ``a2a-sdk client`` rows show how much.

Run from the repository root (needs the ``a2a`` extra; the project's ``.venv`` has it)::

    .venv/bin/python benchmarks/bench_a2a.py                       # ~1 min
    .venv/bin/python benchmarks/bench_a2a.py --rounds 20 --fan-rounds 80 --json /tmp/a2a.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import (
    get_artifact_text,
    new_task_from_user_message,
    new_text_message,
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
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from agent_framework import Agent
from agent_framework_a2a import A2AAgent
from starlette.applications import Starlette
from typing_extensions import override

from handoff_builder import HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    reply,
    respond,
    scripted_agent,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import env_line, md_table, quiet_logs

SCRIPT = os.path.abspath(__file__)
TASK = "What is the refund window for a damaged parcel?"
EXPERTS = ("expert_1", "expert_2", "expert_3", "expert_4")
CALL_ROWS = (
    "a2a-sdk client",
    "A2AAgent.run",
    "handoff_builder, remote expert",
    "handoff_builder, local expert",
)
FAN_ROWS = (
    "one expert",
    "4 in one response",
    "4 in one response, 2 at a time",
    "4 in a row",
    "a2a-sdk client, one expert",
    "a2a-sdk client, 4 at once",
)


def answer_of(name: str, text: str) -> str:
    """What the remote agent ``name`` answers to ``text``."""
    return f"{name}: {text}"


# -- the remote agents (the --serve process) ------------------------------------------------------


class Answering(AgentExecutor):
    """A remote agent: answers every message after ``delay`` seconds, with a task that completes."""

    def __init__(self, name: str, delay: float) -> None:
        self.name, self.delay = name, delay

    @override
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Answer ``answer_of(name, text)``: the task's artifact; the task completes."""
        assert context.message is not None  # noqa: S101 - a2a-sdk gives one
        assert context.task_id is not None  # noqa: S101
        assert context.context_id is not None  # noqa: S101
        if self.delay:
            await asyncio.sleep(self.delay)
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        text = answer_of(self.name, context.get_user_input())
        await updater.add_artifact([new_text_part(text)], name="answer")
        await updater.complete()

    @override
    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Its tasks finish at once: nothing to cancel."""
        raise NotImplementedError


def agent_app(name: str, delay: float, url: str) -> Starlette:
    """The A2A app of the remote agent ``name``: its card and JSON-RPC routes, at ``url``."""
    card = AgentCard(
        name=name,
        description=f"Answers after {delay * 1000:g} ms.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="answer", name="answer", description="answers", tags=["bench"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Answering(name, delay), task_store=InMemoryTaskStore(), agent_card=card
    )
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])


async def until_ready(urls: dict[str, str]) -> None:
    """Wait until every agent card at ``urls`` answers."""
    async with httpx.AsyncClient() as client:
        for url in urls.values():
            while True:
                try:
                    found = await client.get(url.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH)
                    if found.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.02)


async def serve(latency: float) -> None:
    """Serve ``echo`` and the four experts, each on a free port of 127.0.0.1, until killed.

    Prints ``READY {name: url, ...}`` once every agent card answers.
    """
    serving: list[asyncio.Task[None]] = []
    urls: dict[str, str] = {}
    for name, delay in {"echo": 0.0, **dict.fromkeys(EXPERTS, latency)}.items():
        # IPPROTO_TCP: asyncio sets TCP_NODELAY only on the connections of a socket made so (a
        # plain socket.socket() leaves Nagle on: each answer after a connection's first then
        # waits ~40 ms for the client's delayed ACK).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        urls[name] = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        config = uvicorn.Config(
            agent_app(name, delay, urls[name]), log_level="warning", lifespan="off"
        )
        serving.append(asyncio.create_task(uvicorn.Server(config).serve(sockets=[sock])))
    await until_ready(urls)
    sys.stdout.write("READY " + json.dumps(urls) + "\n")
    sys.stdout.flush()
    await asyncio.gather(*serving)


def start_servers(latency_ms: float) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """The remote agents' process, and each agent's address once it answers."""
    process = subprocess.Popen(  # noqa: S603 - this interpreter, this script
        [sys.executable, SCRIPT, "--serve", str(latency_ms / 1000)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None  # noqa: S101 - spawned with a pipe
    line = process.stdout.readline().strip()
    if not line.startswith("READY "):
        process.kill()
        raise RuntimeError("the A2A servers did not start")
    return process, json.loads(line.removeprefix("READY "))


# -- the configurations ---------------------------------------------------------------------------

Call = Callable[[], Awaitable[float]]
"""One call or turn: its seconds; raises ``AssertionError`` when its answer is wrong."""


class Configs:
    """Every configuration of both parts, over one set of clients to the remote agents."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.http = httpx.AsyncClient(timeout=60)
        self.clients: dict[str, Any] = {}
        self.remote = {name: A2AAgent(url=url, name=name) for name, url in urls.items()}

    async def __aenter__(self) -> Configs:
        factory = ClientFactory(ClientConfig(httpx_client=self.http, streaming=False))
        for name, url in self.urls.items():
            card = await A2ACardResolver(self.http, url).get_agent_card()
            self.clients[name] = factory.create(card)
        return self

    async def __aexit__(self, *_: object) -> None:
        for agent in self.remote.values():
            await agent.__aexit__(None, None, None)
        await self.http.aclose()

    def part_1(self) -> dict[str, Call]:
        """The configurations of part 1, by row."""
        return dict(
            zip(
                CALL_ROWS,
                (self.a2a_sdk, self.a2a_agent, self.remote_turn, self.local_turn),
                strict=True,
            )
        )

    def part_2(self) -> dict[str, Call]:
        """The configurations of part 2, by row."""
        experts = [self.remote[name] for name in EXPERTS]
        tools = [f"ask_{name}" for name in EXPERTS]
        return dict(
            zip(
                FAN_ROWS,
                (
                    lambda: self.turn(experts[:1], [tools[:1]]),
                    lambda: self.turn(experts, [tools]),
                    lambda: self.turn(experts, [tools], max_parallel=2),
                    lambda: self.turn(experts, [[tool] for tool in tools]),
                    lambda: self.direct_fan_out(EXPERTS[:1]),
                    lambda: self.direct_fan_out(EXPERTS),
                ),
                strict=True,
            )
        )

    # -- direct calls --

    async def direct(self, name: str, text: str) -> str:
        """One call of a2a-sdk's client: the completed task's artifact text."""
        request = SendMessageRequest(message=new_text_message(text, role=Role.ROLE_USER))
        answers: list[str] = []
        async for item in self.clients[name].send_message(request):
            task = item.task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED  # noqa: S101
            answers.extend(get_artifact_text(artifact) for artifact in task.artifacts)
        return "\n".join(answers)

    async def a2a_sdk(self) -> float:
        """``a2a-sdk client``: one call of a2a-sdk's client to ``echo``."""
        started = time.perf_counter()
        answer = await self.direct("echo", TASK)
        took = time.perf_counter() - started
        assert answer == answer_of("echo", TASK), answer  # noqa: S101
        return took

    async def a2a_agent(self) -> float:
        """``A2AAgent.run``: one run of agent_framework's A2A agent for ``echo``."""
        started = time.perf_counter()
        response = await self.remote["echo"].run(TASK)
        took = time.perf_counter() - started
        assert response.text == answer_of("echo", TASK), response.text  # noqa: S101
        return took

    async def direct_fan_out(self, experts: tuple[str, ...]) -> float:
        """``experts`` asked at once with a2a-sdk's client, no workflow."""
        started = time.perf_counter()
        found = await asyncio.gather(*(self.direct(name, TASK) for name in experts))
        took = time.perf_counter() - started
        assert found == [answer_of(name, TASK) for name in experts], found  # noqa: S101
        return took

    # -- turns of a workflow --

    async def turn(
        self, experts: list[Any], calls: list[list[str]], *, max_parallel: int | None = None
    ) -> float:
        """One turn (its run timed): the coordinator's responses call ``calls``, then it answers.

        ``calls``: the tool names of each response. Each expert's answer must be its call's
        result, in call order (the turn's ``delegations`` are in the order they finished).
        """
        steps = [respond(*(call_tool(tool, task=TASK) for tool in response)) for response in calls]
        coordinator = scripted_agent("coordinator", *steps, reply("Done."))
        builder = HandoffWorkflowBuilder(coordinator)
        for expert in experts:
            builder = builder.with_delegate(coordinator, expert, "answers questions")
        if max_parallel is not None:
            builder = builder.with_max_parallel_delegations(max_parallel)
        workflow = builder.build()  # not timed: the turn is
        started = time.perf_counter()
        events = await workflow.run("Help me, please.")
        took = time.perf_counter() - started
        result = events.get_outputs()[-1]
        assert isinstance(result, HandoffTurnResult)  # noqa: S101
        assert result.text == "Done.", result.text  # noqa: S101
        asked = [tool.removeprefix("ask_") for response in calls for tool in response]
        expected = [answer_of(name, TASK) for name in asked]
        read = [  # the results the coordinator's last model call read, in call order
            str(content.result)
            for message in client_of(coordinator).calls[-1].messages
            for content in message.contents
            if content.type == "function_result"
        ]
        assert read == expected, read  # noqa: S101
        finished = sorted((d.expert, d.outcome, d.result) for d in result.delegations)
        answered = sorted((n, "answered", a) for n, a in zip(asked, expected, strict=True))
        assert finished == answered, finished  # noqa: S101
        return took

    async def remote_turn(self) -> float:
        """``handoff_builder, remote expert``: a turn that asks ``echo`` over A2A once."""
        return await self.turn([self.remote["echo"]], [["ask_echo"]])

    async def local_turn(self) -> float:
        """``handoff_builder, local expert``: the same turn, a local expert in its place."""
        return await self.turn([local_echo()], [["ask_echo"]])


def local_echo() -> Agent:
    """A local expert that answers as ``echo`` does, at once: ``echo: <its task>``."""

    def answer(call: ModelCall) -> Step:
        return reply(answer_of("echo", call.messages[-1].text))

    return scripted_agent("echo", respond_with=answer)


# -- the run --------------------------------------------------------------------------------------


async def sample(
    configs: dict[str, Call],
    rounds: int,
    repeat: int,
    rng: random.Random,
    errors: dict[str, int],
    label: str,
) -> dict[str, list[float]]:
    """Every call's milliseconds, by row; a wrong answer counts in ``errors``.

    ``rounds`` rounds, the configurations in a new shuffled order each, ``repeat`` calls of each
    a round.
    """
    found: dict[str, list[float]] = {row: [] for row in configs}
    for number in range(rounds):
        for row in rng.sample(list(configs), len(configs)):
            for _ in range(repeat):
                try:
                    found[row].append(await configs[row]() * 1000)
                except AssertionError:
                    errors[row] += 1
        sys.stderr.write(f"{label}: round {number + 1} of {rounds}\n")
    return found


async def measure(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, Any]:
    """Both parts, against the remote agents at ``urls``: the figures of every row."""
    rng = random.Random(args.seed)  # noqa: S311 - a shuffle
    errors: dict[str, int] = dict.fromkeys((*CALL_ROWS, *FAN_ROWS), 0)
    async with Configs(urls) as configs:
        one, fan = configs.part_1(), configs.part_2()
        for call in [*one.values(), *fan.values()]:  # warm-up, not timed
            for _ in range(args.warmup):
                await call()
        calls = await sample(one, args.rounds, args.calls, rng, errors, "one delegate call")
        fans = await sample(fan, args.fan_rounds, 1, rng, errors, "fan-out")
    return {
        "calls": {row: _stats(values) for row, values in calls.items()},
        "fan_out": {row: _stats(values) for row, values in fans.items()},
        "errors": errors,
        "settings": {k: v for k, v in vars(args).items() if k != "serve"},
        "env": env_line(),
    }


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": float("nan"), "p90": float("nan"), "n": 0}
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))],
        "n": len(ordered),
    }


def report(result: dict[str, Any]) -> str:
    """The two tables, in Markdown, and what part 1 says of the call itself."""
    settings, errors = result["settings"], result["errors"]
    calls, fans = result["calls"], result["fan_out"]
    floor = calls["a2a-sdk client"]["median"]
    call_rows = [
        [
            row,
            f"{calls[row]['median']:.2f}",
            f"{calls[row]['p90']:.2f}",
            f"{calls[row]['median'] - floor:+.2f}",
            str(calls[row]["n"]),
            str(errors[row]),
        ]
        for row in CALL_ROWS
    ]
    remote = calls["handoff_builder, remote expert"]["median"]
    local = calls["handoff_builder, local expert"]["median"]
    agent = calls["A2AAgent.run"]["median"]
    alone = fans["one expert"]["median"]
    direct_one = fans["a2a-sdk client, one expert"]["median"]
    direct_four = fans["a2a-sdk client, 4 at once"]["median"]
    fan_rows = [
        [
            row,
            f"{fans[row]['median']:.1f}",
            f"{fans[row]['p90']:.1f}",
            f"{fans[row]['median'] / alone:.2f}x",
            str(fans[row]["n"]),
            str(errors[row]),
        ]
        for row in FAN_ROWS
    ]
    return "\n".join(
        [
            result["env"],
            f"1. one delegate call: {settings['calls']} calls x {settings['rounds']} rounds a "
            "configuration, the remote agent answering at once",
            "",
            md_table(
                ["configuration", "ms median", "ms p90", "vs a2a-sdk (median)", "n", "errors"],
                call_rows,
            ),
            "",
            f"a turn with one remote delegate call: {remote:.2f} ms, the call alone with a2a-sdk's "
            f"client {floor:.2f} ms: {remote - floor:+.2f} ms around it (A2AAgent's part: "
            f"{agent - floor:+.2f} ms); the same turn with a local expert: {local:.2f} ms",
            "",
            f"2. fan-out: 4 experts of {settings['latency_ms']:g} ms each, "
            f"{settings['fan_rounds']} rounds",
            "",
            md_table(
                ["configuration", "ms median", "ms p90", "/ one expert", "n", "errors"], fan_rows
            ),
            "",
            f"4 at once over one alone: {fans['4 in one response']['median'] - alone:+.1f} ms "
            f"through handoff_builder, {direct_four - direct_one:+.1f} ms with a2a-sdk's client",
        ]
    )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--calls", type=int, default=20, help="calls a configuration a round (part 1)"
    )
    parser.add_argument("--rounds", type=int, default=10, help="rounds of part 1")
    parser.add_argument("--fan-rounds", type=int, default=40, help="rounds of part 2")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="each expert's latency")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls a configuration")
    parser.add_argument("--seed", type=int, default=1, help="the shuffle's seed")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--serve", metavar="LATENCY_S", help=argparse.SUPPRESS)
    return parser.parse_args()


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Start the remote agents, measure, stop them."""
    process, urls = start_servers(args.latency_ms)
    try:
        return asyncio.run(measure(args, urls))
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    arguments = _arguments()
    quiet_logs()
    if arguments.serve is not None:
        asyncio.run(serve(float(arguments.serve)))
        raise SystemExit(0)
    figures = main(arguments)
    sys.stdout.write(report(figures) + "\n")
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
