"""Hosted throughput: ``ConversationHost`` over the SQLite and the PostgreSQL store, side by side.

Every turn is a real hosted turn against a zero-latency scripted model, so everything measured is
the SDK (host, workflow, store) and the database. Each conversation is
``--turns-per-conversation`` messages long (default 10), then its slot starts a new one, so the
history stays bounded and every configuration runs the same mix of turns:

* the first message of a conversation: triage hands off to billing, billing answers (2 model
  calls; the store is written after the user's message, before each agent call and at the end);
* the following messages: billing, the remembered agent, answers (1 model call).

Configurations (each run by fresh worker processes on a fresh database: a new SQLite file, new
PostgreSQL tables ``bench_<run>_<n>_*`` dropped right after):

1. throughput, ``--conversations`` (50) conversations in flight in one worker process: SQLite
   vs PostgreSQL; turns/s = turns completed inside a fixed ``--seconds`` window / ``--seconds``;
2. PostgreSQL with two worker processes, each serving half of the conversations, on the same
   tables, in the same wall window (both workers wait for one start time): aggregate turns/s;
3. sequential latency: one conversation at a time, each turn after the previous one returned;
   the median milliseconds per turn (a continuing turn; the p90 includes the first turns); for
   PostgreSQL also with ``synchronous_commit=False``, which has the durability of SQLite's default
   (``synchronous="normal"``: no disk flush per commit).

The parent process only orchestrates: it starts the workers (this script with the hidden
``--worker`` flag), waits until each has warmed up (every warm-up turn checked: the expected
reply, agent, handoffs and model calls), hands them one start time on their stdin and reads their
JSON result line. Configurations alternate within a round (the order reversed every other round)
and every figure is the median over ``--rounds``: the machine is small and shared. Every turn
result is checked too (reply, agent, handoffs; and the model-call totals at the end): a correct
run reports 0 errors and 0 unexpected results.

The targets (PASS/FAIL is printed; the exit status is 1 on a FAIL only with ``--check``):

* PostgreSQL, one worker: turns/s >= 0.8x SQLite;
* PostgreSQL, two workers: turns/s >= 1.7x one worker;
* a sequential PostgreSQL turn: <= 2x a sequential SQLite turn (median ms); also printed for
  PostgreSQL with ``synchronous_commit=False`` (alike durability).

Run from the repository root (PostgreSQL must be reachable; ``--dsn`` or
``$HANDOFF_BUILDER_POSTGRES_DSN``, default ``postgresql://postgres@127.0.0.1:5432/test``)::

    .venv/bin/python benchmarks/bench_hosted.py                       # 2 rounds x 5 s, ~1.5 min
    .venv/bin/python benchmarks/bench_hosted.py --seconds 10 --rounds 3 --check
    .venv/bin/python benchmarks/bench_hosted.py --json /tmp/hosted.json --pool-size 20
    .venv/bin/python benchmarks/bench_hosted.py --profile /tmp/prof --rounds 1   # cProfile dumps

With ``--profile DIR`` every worker's timed window runs under cProfile (one ``.prof`` file per
worker in DIR; read them with ``python -m pstats``): the figures of that run are slower and are
not the benchmark's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import env_line, md_table, quiet_logs

if TYPE_CHECKING:
    from agent_framework import Agent

    from handoff_builder import ConversationHost, HandoffTurnResult, HandoffWorkflowBuilder
    from handoff_builder.stores import ConversationStore

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
USER_TEXT = "I was double charged, please refund me."
REPLY = "Refund issued."
STORE_OPS = ("load", "version", "acquire_and_append", "append", "acquire", "renew", "release")
READY, GO, BYE = "READY", "GO", "BYE"
SCRIPT = os.path.abspath(__file__)
START_DELAY = 0.25  # seconds between the start line and the start of the window

StoreKind = Literal["sqlite", "postgres"]


# ------------------------------------------------------------------------------------------------
# what one worker process does


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process runs; passed to it as JSON on its command line."""

    store: StoreKind
    target: str  # the SQLite file, or the PostgreSQL DSN
    prefix: str  # PostgreSQL table prefix ("" for SQLite)
    pool_size: int
    slots: int  # conversations in flight at once
    name: str  # makes this worker's conversation ids unique
    turns_per_conversation: int
    seconds: float
    profile: str | None = None  # write the window's cProfile stats here
    synchronous_commit: bool = True  # PostgreSQL: wait for the disk flush of every commit


@dataclass
class Tally:
    """What a worker's slots did in the timed window."""

    turns: int = 0  # turns that returned inside the window
    done: int = 0  # turns that returned correctly, also after the window (the model-call check)
    first_turns: int = 0  # of those, first turns of a conversation (a handoff)
    unexpected: int = 0  # turns that returned something else than the scenario's result
    # exceptions raised by send, by type
    errors: Counter[str] = field(default_factory=lambda: Counter[str]())
    # the latency of each turn inside the window
    latencies_us: list[int] = field(default_factory=lambda: list[int]())


def _builder() -> tuple[HandoffWorkflowBuilder, Agent, Agent]:
    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.testing import handoff_to, reply, scripted_agent

    # Open-ended scripts: every call after the (empty) script gets the same answer, forever.
    triage = scripted_agent(
        "triage", respond_with=lambda _call: handoff_to("billing", goal="Refund a double charge.")
    )
    billing = scripted_agent("billing", respond_with=lambda _call: reply(REPLY))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_hand_back(triage)
    return builder, triage, billing


def _store(spec: WorkerSpec) -> ConversationStore:
    from handoff_builder.stores import PostgresConversationStore, SqliteConversationStore

    if spec.store == "sqlite":
        return SqliteConversationStore(spec.target)
    return PostgresConversationStore(
        spec.target,
        table_prefix=spec.prefix,
        max_size=spec.pool_size,
        synchronous_commit=spec.synchronous_commit,
    )


def _count_ops(store: ConversationStore) -> Counter[str]:
    """Count the store calls the host makes (the instance's methods wrapped; a few ns each)."""
    counts: Counter[str] = Counter()

    def counted(name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return await method(*args, **kwargs)

        return call

    for name in STORE_OPS:
        setattr(store, name, counted(name, getattr(store, name)))
    return counts


def _expected(result: HandoffTurnResult, *, first: bool) -> bool:
    """Whether a turn did what the scenario says (billing answers; a handoff on the first turn)."""
    return (
        result.status == "completed"
        and result.active_agent == "billing"
        and len(result.handoffs) == (1 if first else 0)
        and bool(result.messages)
        and result.messages[-1].text == REPLY
    )


async def _warm_up(host: ConversationHost, spec: WorkerSpec, triage: Agent, billing: Agent) -> None:
    """Untimed: checked turns one by one, then every slot at once (grows the connection pool)."""
    from handoff_builder.testing import client_of

    calls = client_of(triage).calls, client_of(billing).calls
    for turn in range(3):
        before = len(calls[0]), len(calls[1])
        result = await host.send(f"{spec.name}-warm", USER_TEXT)
        made = len(calls[0]) - before[0], len(calls[1]) - before[1]
        want = (1, 1) if turn == 0 else (0, 1)
        if not _expected(result, first=turn == 0) or made != want:
            raise AssertionError(
                f"scenario broken on warm-up turn {turn}: model calls (triage, billing) {made}, "
                f"want {want}; agent {result.active_agent!r}, status {result.status!r}, "
                f"{len(result.handoffs)} handoff(s), messages {[m.text for m in result.messages]}"
            )
    for _ in range(2):
        await asyncio.gather(
            *(host.send(f"{spec.name}-warm{slot}", USER_TEXT) for slot in range(spec.slots))
        )
    for agent_calls in calls:
        agent_calls.clear()


async def _slot(
    host: ConversationHost, spec: WorkerSpec, slot: int, deadline: float, tally: Tally
) -> None:
    """Run conversations of ``turns_per_conversation`` turns back to back until the deadline."""
    conversation = 0
    while True:
        conversation_id = f"{spec.name}-s{slot}-c{conversation}"
        conversation += 1
        for turn in range(spec.turns_per_conversation):
            started = time.monotonic()
            if started >= deadline:
                return
            try:
                result = await host.send(conversation_id, USER_TEXT)
            except Exception as error:  # counted and reported: a correct run has none
                tally.errors[type(error).__name__] += 1
                continue
            ended = time.monotonic()
            if not _expected(result, first=turn == 0):
                tally.unexpected += 1
                continue
            tally.done += 1
            tally.first_turns += turn == 0
            if ended <= deadline:
                tally.turns += 1
                tally.latencies_us.append(round((ended - started) * 1e6))


async def _window(host: ConversationHost, spec: WorkerSpec, start: float) -> tuple[Tally, float]:
    """Wait for the shared start time, run every slot for ``seconds``; the CPU seconds used."""
    loop = asyncio.get_running_loop()  # its clock is time.monotonic, shared by every process
    await asyncio.sleep(max(0.0, start - time.monotonic()))
    deadline = start + spec.seconds
    tally = Tally()
    cpu: list[float] = [time.process_time()]
    loop.call_at(deadline, lambda: cpu.append(time.process_time()))
    profiler = cProfile.Profile() if spec.profile else None
    if profiler is not None:
        profiler.enable()
    await asyncio.gather(*(_slot(host, spec, slot, deadline, tally) for slot in range(spec.slots)))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(str(spec.profile))
    return tally, cpu[-1] - cpu[0]


async def worker(spec: WorkerSpec) -> None:
    """One worker process: warm up, say READY, wait for GO <start>, run the window, report.

    The store stays open (its PostgreSQL connections alive) until the parent says BYE: the
    parent reads the server processes' CPU counters at the end of the window first.
    """
    from handoff_builder import ConversationHost

    store = _store(spec)
    builder, triage, billing = _builder()
    host = ConversationHost(builder, store)
    try:
        await _warm_up(host, spec, triage, billing)
        ops = _count_ops(store)
        gc.collect()
        _say(READY)
        command = (await asyncio.to_thread(sys.stdin.readline)).split()
        if len(command) != 2 or command[0] != GO:
            raise SystemExit(f"worker {spec.name}: expected '{GO} <start>', got {command}")
        tally, cpu_seconds = await _window(host, spec, float(command[1]))
        _say(json.dumps(_result(tally, cpu_seconds, ops, (triage, billing))))
        await asyncio.to_thread(sys.stdin.readline)  # BYE (or the end of the pipe)
    finally:
        await store.close()


def _result(
    tally: Tally, cpu_seconds: float, ops: Counter[str], agents: tuple[Agent, Agent]
) -> dict[str, Any]:
    """A worker's result line: what its window did, checked against its model calls."""
    from handoff_builder.testing import client_of

    model_calls = tuple(len(client_of(agent).calls) for agent in agents)  # triage, billing
    return {
        "turns": tally.turns,
        "errors": dict(tally.errors),
        "unexpected": tally.unexpected,
        "model_calls_ok": not tally.errors
        and model_calls == (tally.first_turns, tally.done + tally.unexpected),
        "latencies_us": tally.latencies_us,
        "cpu_seconds": cpu_seconds,
        "ops": dict(ops),
        "ops_turns": tally.done + tally.unexpected + sum(tally.errors.values()),
    }


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# ------------------------------------------------------------------------------------------------
# the parent: configurations, measurements, report


@dataclass(frozen=True)
class Config:
    """One measured configuration."""

    key: str
    label: str
    store: StoreKind
    workers: int
    sequential: bool = False
    synchronous_commit: bool = True


CONFIGS = (
    Config("sqlite_1w", "SQLite, 1 worker", "sqlite", 1),
    Config("pg_1w", "PostgreSQL, 1 worker", "postgres", 1),
    Config("pg_2w", "PostgreSQL, 2 workers", "postgres", 2),
    Config("sqlite_seq", "SQLite, sequential", "sqlite", 1, sequential=True),
    Config("pg_seq", "PostgreSQL, sequential", "postgres", 1, sequential=True),
    # The same durability as SQLite's default synchronous="normal": no disk flush per commit.
    Config(
        "pg_seq_async",
        "PostgreSQL synchronous_commit=off, sequential",
        "postgres",
        1,
        sequential=True,
        synchronous_commit=False,
    ),
)
BY_KEY = {config.key: config for config in CONFIGS}


@dataclass(frozen=True)
class Load:
    """Cores in use during a window (Linux /proc; NaN elsewhere)."""

    machine: float  # every process on the machine
    postgres: float  # the processes named ``postgres`` on this machine (a local server)


@dataclass
class Measurement:
    """One configuration's window in one round (the workers' results summed)."""

    turns: int
    seconds: float
    errors: dict[str, int]
    unexpected: int
    model_calls_ok: bool
    latencies_us: list[int]
    worker_cpu: float  # cores: CPU seconds of the worker processes in the window / window
    load: Load  # cores used in the window by the machine, PostgreSQL's processes
    ops_per_turn: dict[str, float]

    @property
    def rate(self) -> float:
        """Turns per second."""
        return self.turns / self.seconds

    def latency_ms(self, quantile: float) -> float:
        """A quantile of the turn latencies, in milliseconds."""
        if not self.latencies_us:
            return float("nan")
        ordered = sorted(self.latencies_us)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] / 1000


@dataclass(frozen=True)
class _CpuSample:
    at: float
    busy: int  # jiffies the whole machine was busy
    total: int  # jiffies in all
    postgres: dict[int, int]  # jiffies used so far by each process named postgres, by pid


def _cpu_sample() -> _CpuSample:
    """The machine's CPU counters now, from /proc/stat and /proc/<pid>/stat (Linux)."""
    at = time.monotonic()
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return _CpuSample(at, 0, 0, {})
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    postgres: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            if text[text.index("(") + 1 : text.rindex(")")] == "postgres":
                after = text[text.rindex(")") + 2 :].split()
                postgres[int(stat.parent.name)] = int(after[11]) + int(after[12])  # utime+stime
    return _CpuSample(at, sum(values) - idle, sum(values), postgres)


def _load(before: _CpuSample, after: _CpuSample) -> Load:
    if not after.total or after.at <= before.at:
        return Load(float("nan"), float("nan"))
    cores = os.cpu_count() or 1
    machine = (after.busy - before.busy) / max(1, after.total - before.total) * cores
    # A process that started in the window used all its CPU in it; one that ended is not seen.
    jiffies = sum(used - before.postgres.get(pid, 0) for pid, used in after.postgres.items())
    return Load(machine, jiffies / os.sysconf("SC_CLK_TCK") / (after.at - before.at))


async def _spawn(spec: WorkerSpec) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, SCRIPT, "--worker", json.dumps(asdict(spec)),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 26,
    )  # fmt: skip


async def _line(process: asyncio.subprocess.Process, timeout: float) -> str:
    assert process.stdout is not None  # noqa: S101 - spawned with a pipe
    line = await asyncio.wait_for(process.stdout.readline(), timeout)
    if not line:
        code = await process.wait()
        raise RuntimeError(f"a worker exited ({code}) before answering; see its stderr above")
    return line.decode().strip()


async def _run_workers(
    specs: list[WorkerSpec], seconds: float
) -> tuple[list[dict[str, Any]], Load]:
    """Start the workers, give them one start time, return their results and the machine's load.

    The protocol on each worker's pipes: READY (warmed up) -> GO <start> -> its result (one JSON
    line) -> BYE (the CPU counters are read: it may close its store and exit).
    """
    processes = [await _spawn(spec) for spec in specs]
    try:
        for process in processes:
            if (line := await _line(process, 300)) != READY:
                raise RuntimeError(f"a worker said {line!r} instead of {READY}")
        start = time.monotonic() + START_DELAY
        for process in processes:
            assert process.stdin is not None  # noqa: S101 - spawned with a pipe
            process.stdin.write(f"{GO} {start!r}\n".encode())
            await process.stdin.drain()
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        before = _cpu_sample()
        await asyncio.sleep(max(0.0, start + seconds - time.monotonic()))
        after = _cpu_sample()
        results = [json.loads(await _line(process, seconds + 300)) for process in processes]
        for process in processes:
            assert process.stdin is not None  # noqa: S101 - spawned with a pipe
            process.stdin.write(f"{BYE}\n".encode())
            await process.stdin.drain()
        for process in processes:
            if await process.wait() != 0:
                raise RuntimeError(f"a worker exited with status {process.returncode}")
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    return results, _load(before, after)


def _combine(results: list[dict[str, Any]], seconds: float, load: Load) -> Measurement:
    errors: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    for result in results:
        errors.update(result["errors"])
        ops.update(result["ops"])
    ops_turns = max(1, sum(result["ops_turns"] for result in results))
    return Measurement(
        turns=sum(result["turns"] for result in results),
        seconds=seconds,
        errors=dict(errors),
        unexpected=sum(result["unexpected"] for result in results),
        model_calls_ok=all(result["model_calls_ok"] for result in results),
        latencies_us=[x for result in results for x in result["latencies_us"]],
        worker_cpu=sum(result["cpu_seconds"] for result in results) / seconds,
        load=load,
        ops_per_turn={name: count / ops_turns for name, count in sorted(ops.items())},
    )


@dataclass
class Run:
    """Settings and scratch space of one benchmark run."""

    args: argparse.Namespace
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    scratch: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-hosted-")))
    counter: int = 0
    # the PostgreSQL table prefixes whose tables may still exist
    prefixes: list[str] = field(default_factory=lambda: list[str]())

    def specs(self, config: Config, round_no: int) -> list[WorkerSpec]:
        """The workers of one measurement, on a fresh database."""
        self.counter += 1
        args = self.args
        if config.store == "sqlite":
            target, prefix = str(self.scratch / f"{self.counter}-{config.key}.db"), ""
        else:
            target, prefix = args.dsn, f"bench_{self.run_id}_{self.counter}_"
            self.prefixes.append(prefix)
        total = 1 if config.sequential else args.conversations
        shares = [total // config.workers + (i < total % config.workers)
                  for i in range(config.workers)]  # fmt: skip
        profile = Path(args.profile) if args.profile else None
        return [
            WorkerSpec(
                store=config.store,
                target=target,
                prefix=prefix,
                pool_size=args.pool_size,
                slots=slots,
                name=f"w{i}",
                turns_per_conversation=args.turns_per_conversation,
                seconds=args.seconds,
                profile=str(profile / f"{config.key}-r{round_no}-w{i}.prof") if profile else None,
                synchronous_commit=config.synchronous_commit,
            )
            for i, slots in enumerate(shares)
        ]

    async def drop(self, prefixes: Iterable[str]) -> None:
        """Drop the PostgreSQL tables of these prefixes."""
        from handoff_builder.stores import PostgresConversationStore

        for prefix in list(prefixes):
            store = PostgresConversationStore(self.args.dsn, table_prefix=prefix, min_size=0)
            try:
                await store.drop_tables()
            finally:
                await store.close()
            self.prefixes.remove(prefix)

    async def measure(self, config: Config, round_no: int) -> Measurement:
        """One configuration, one window; its database is dropped afterwards."""
        specs = self.specs(config, round_no)
        try:
            results, load = await _run_workers(specs, self.args.seconds)
        finally:
            if config.store == "postgres":
                await self.drop([specs[0].prefix])
            else:
                _remove_sqlite(specs[0].target)
        return _combine(results, self.args.seconds, load)


async def _probe_postgres(run: Run) -> None:
    """Fail early, and clearly, when PostgreSQL cannot be reached."""
    from handoff_builder.stores import PostgresConversationStore

    prefix = f"bench_{run.run_id}_probe_"
    run.prefixes.append(prefix)
    store = PostgresConversationStore(run.args.dsn, table_prefix=prefix, min_size=0)
    try:
        await store.version("probe")
    except Exception as error:
        raise SystemExit(f"PostgreSQL at {run.args.dsn} is not usable: {error}") from error
    finally:
        await store.close()
    await run.drop([prefix])


async def benchmark(args: argparse.Namespace) -> dict[str, list[Measurement]]:
    """Every configuration, ``rounds`` times, interleaved; the measurements by configuration."""
    run = Run(args)
    results: dict[str, list[Measurement]] = {config.key: [] for config in CONFIGS}
    try:
        await _probe_postgres(run)
        for round_no in range(args.rounds):
            order = CONFIGS if round_no % 2 == 0 else tuple(reversed(CONFIGS))
            for config in order:
                measurement = await run.measure(config, round_no)
                results[config.key].append(measurement)
                _progress(f"round {round_no + 1}/{args.rounds} {config.label}: "
                          f"{measurement.rate:.0f} turns/s, p50 {measurement.latency_ms(0.5):.2f} "
                          f"ms, errors {sum(measurement.errors.values())}")  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            await run.drop(run.prefixes)
        shutil.rmtree(run.scratch, ignore_errors=True)
    return results


def _remove_sqlite(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(path + suffix).unlink(missing_ok=True)


def _progress(text: str) -> None:
    sys.stderr.write(f"# {text}\n")
    sys.stderr.flush()


# ------------------------------------------------------------------------------------------------
# report


def _median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def _errors(measurements: list[Measurement]) -> str:
    errors: Counter[str] = Counter()
    for measurement in measurements:
        errors.update(measurement.errors)
    unexpected = sum(measurement.unexpected for measurement in measurements)
    calls_ok = all(measurement.model_calls_ok for measurement in measurements)
    parts = [f"{count} {kind}" for kind, count in errors.most_common()] or ["0"]
    if unexpected:
        parts.append(f"{unexpected} unexpected results")
    if not calls_ok:
        parts.append("model-call totals off")
    return ", ".join(parts)


def _ops(measurements: list[Measurement]) -> str:
    names = sorted({name for measurement in measurements for name in measurement.ops_per_turn})
    per_turn = {
        name: _median(measurement.ops_per_turn.get(name, 0.0) for measurement in measurements)
        for name in names
    }
    return " ".join(f"{name} {count:.2f}" for name, count in per_turn.items() if count >= 0.005)


_CPU_NOTE = (
    f"CPU columns: cores busy in the window ({os.cpu_count()} on this machine): the worker "
    "processes, the local `postgres` server processes (all of them: other clients' too), and "
    "the rest of the machine (other users)."
)


def _cpu_columns(runs: list[Measurement]) -> list[str]:
    """Cores used in the window: the workers, PostgreSQL's processes, everything else."""
    workers = _median(m.worker_cpu for m in runs)
    postgres = _median(m.load.postgres for m in runs)
    rest = _median(m.load.machine - m.worker_cpu - m.load.postgres for m in runs)
    return [f"{workers:.2f}", f"{postgres:.2f}", f"{max(0.0, rest):.2f}"]


def _throughput_table(results: dict[str, list[Measurement]], args: argparse.Namespace) -> str:
    rows: list[list[str]] = []
    for key in ("sqlite_1w", "pg_1w", "pg_2w"):
        runs = results[key]
        rows.append([
            BY_KEY[key].label,
            *(f"{measurement.rate:.0f}" for measurement in runs),
            f"**{_median(m.rate for m in runs):.0f}**",
            f"{_median(m.latency_ms(0.5) for m in runs):.1f}",
            *_cpu_columns(runs),
            _ops(runs),
            _errors(runs),
        ])  # fmt: skip
    header = [
        "configuration", *(f"round {i + 1}" for i in range(args.rounds)), "median turns/s",
        "p50 turn ms", "CPU: workers", "PostgreSQL", "rest", "store calls / turn", "errors",
    ]  # fmt: skip
    return (
        f"### throughput: {args.conversations} conversations in flight, turns/s over a "
        f"{args.seconds:g} s window (median of {args.rounds})\n\n"
        + md_table(header, rows)
        + f"\n\n{_CPU_NOTE}"
    )


def _latency_table(results: dict[str, list[Measurement]], args: argparse.Namespace) -> str:
    rows: list[list[str]] = []
    for key in ("sqlite_seq", "pg_seq", "pg_seq_async"):
        runs = results[key]
        rows.append([
            BY_KEY[key].label,
            *(f"{measurement.latency_ms(0.5):.2f}" for measurement in runs),
            f"**{_median(m.latency_ms(0.5) for m in runs):.2f}**",
            f"{_median(m.latency_ms(0.9) for m in runs):.2f}",
            f"{_median(m.rate for m in runs):.0f}",
            *_cpu_columns(runs),
            _ops(runs),
            _errors(runs),
        ])  # fmt: skip
    header = [
        "configuration", *(f"round {i + 1} ms" for i in range(args.rounds)), "median ms",
        "p90 ms", "turns/s", "CPU: worker", "PostgreSQL", "rest", "store calls / turn", "errors",
    ]  # fmt: skip
    return (
        "### sequential: one conversation at a time, median ms per turn "
        f"(median of {args.rounds})\n\n" + md_table(header, rows) + f"\n\n{_CPU_NOTE}"
    )


@dataclass(frozen=True)
class Target:
    """One target: a ratio of two configurations' medians, and its bound."""

    label: str
    value: float
    per_round: list[float]
    bound: float
    at_least: bool

    @property
    def passed(self) -> bool:
        """Whether the median ratio meets the bound."""
        return self.value >= self.bound if self.at_least else self.value <= self.bound


def targets(results: dict[str, list[Measurement]]) -> list[Target]:
    """The three targets, from the medians (and each round's ratio, to show the noise)."""

    def rates(key: str) -> list[float]:
        return [measurement.rate for measurement in results[key]]

    def medians_ms(key: str) -> list[float]:
        return [measurement.latency_ms(0.5) for measurement in results[key]]

    def ratio(top: list[float], bottom: list[float]) -> tuple[float, list[float]]:
        rounds = [a / b if b else float("nan") for a, b in zip(top, bottom, strict=True)]
        base = _median(bottom)
        return (_median(top) / base if base else float("nan")), rounds

    pg_vs_sqlite = ratio(rates("pg_1w"), rates("sqlite_1w"))
    two_vs_one = ratio(rates("pg_2w"), rates("pg_1w"))
    sequential = ratio(medians_ms("pg_seq"), medians_ms("sqlite_seq"))
    alike = ratio(medians_ms("pg_seq_async"), medians_ms("sqlite_seq"))
    return [
        Target("PostgreSQL 1 worker / SQLite 1 worker, turns/s", *pg_vs_sqlite, 0.8, at_least=True),
        Target(
            "PostgreSQL 2 workers / PostgreSQL 1 worker, turns/s", *two_vs_one, 1.7, at_least=True
        ),
        Target("sequential turn, PostgreSQL / SQLite, median ms", *sequential, 2.0, at_least=False),
        Target(
            "sequential turn, PostgreSQL synchronous_commit=off / SQLite (alike durability)",
            *alike,
            2.0,
            at_least=False,
        ),
    ]


def report(results: dict[str, list[Measurement]], args: argparse.Namespace) -> tuple[str, bool]:
    """The Markdown tables, and whether every target passed with no errors."""
    found = targets(results)
    clean = all(
        not m.errors and not m.unexpected and m.model_calls_ok
        for runs in results.values()
        for m in runs
    )
    rows = [
        [
            target.label,
            f"**{target.value:.2f}x**",
            ", ".join(f"{x:.2f}x" for x in target.per_round),
            f"{'>=' if target.at_least else '<='} {target.bound}x",
            "PASS" if target.passed else "FAIL",
        ]
        for target in found
    ]
    text = "\n\n".join([
        f"Environment: {env_line()}; {_versions()}",
        f"Settings: --seconds {args.seconds:g} --rounds {args.rounds} --conversations "
        f"{args.conversations} --turns-per-conversation {args.turns_per_conversation} "
        f"--pool-size {args.pool_size} (per worker process)"
        + ("; PROFILED (cProfile on): the figures are not the benchmark's" if args.profile else ""),
        _throughput_table(results, args),
        _latency_table(results, args),
        "### targets (ratios of the medians)\n\n"
        + md_table(["target", "measured", "per round", "needed", "result"], rows),
        _ceiling(results),
        f"errors: {'none' if clean else 'SOME (see the errors columns): the run is not valid'}",
    ])  # fmt: skip
    return text, clean and all(target.passed for target in found)


def _ceiling(results: dict[str, list[Measurement]]) -> str:
    """What two workers could reach at most here: the CPU a 1-worker turn costs vs the cores."""
    runs = results["pg_1w"]
    per_turn = _median((m.worker_cpu + m.load.postgres) / m.rate for m in runs if m.rate)
    rate = _median(m.rate for m in runs)
    cores = os.cpu_count() or 1
    return (
        f"CPU ceiling for PostgreSQL, 2 workers / 1 worker on this machine: {cores} cores / "
        f"({per_turn * 1e3:.2f} ms of worker + PostgreSQL CPU per turn x {rate:.0f} turns/s) = "
        f"{cores / (per_turn * rate):.2f}x, if nothing else ran on it"
    )


def _versions() -> str:
    import importlib.metadata

    out: list[str] = []
    for package in ("handoff-builder", "agent-framework-core", "psycopg", "psycopg-pool"):
        try:
            out.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{package} (missing)")
    return ", ".join(out)


def _json(results: dict[str, list[Measurement]]) -> dict[str, Any]:
    out: dict[str, Any] = {"env": env_line(), "configs": {}, "targets": []}
    for key, runs in results.items():
        out["configs"][key] = [
            {"turns_per_s": m.rate, "p50_ms": m.latency_ms(0.5), "p90_ms": m.latency_ms(0.9),
             "turns": m.turns, "errors": m.errors, "unexpected": m.unexpected,
             "model_calls_ok": m.model_calls_ok, "cpu_cores_workers": m.worker_cpu,
             "cpu_cores_postgres": m.load.postgres, "cpu_cores_machine": m.load.machine,
             "ops_per_turn": m.ops_per_turn}
            for m in runs
        ]  # fmt: skip
    out["targets"] = [{**asdict(target), "passed": target.passed} for target in targets(results)]
    return out


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="window per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="every configuration this often")
    parser.add_argument("--conversations", type=int, default=50, help="in flight at once")
    parser.add_argument("--turns-per-conversation", type=int, default=10)
    parser.add_argument(
        "--dsn", default=os.environ.get("HANDOFF_BUILDER_POSTGRES_DSN") or DEFAULT_DSN
    )
    parser.add_argument("--pool-size", type=int, default=10, help="PostgreSQL max_size, per worker")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every target passes")
    parser.add_argument("--json", help="also write the raw figures here")
    parser.add_argument("--profile", metavar="DIR", help="cProfile every worker's window")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a worker process: its spec (JSON)
    args = parser.parse_args()
    if args.seconds <= 0 or args.rounds < 1 or args.conversations < 2:
        parser.error("need --seconds > 0, --rounds >= 1 and --conversations >= 2")
    if args.turns_per_conversation < 1 or args.pool_size < 1:
        parser.error("need --turns-per-conversation >= 1 and --pool-size >= 1")
    return args


def main() -> int:
    """Run the benchmark (or, with ``--worker``, one worker process of it)."""
    args = _arguments()
    quiet_logs()
    if args.worker:
        asyncio.run(worker(WorkerSpec(**json.loads(args.worker))))
        return 0
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = asyncio.run(benchmark(args))
    text, ok = report(results, args)
    _say(text)
    _progress(f"total wall {time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(_json(results), indent=1))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    raise SystemExit(main())
