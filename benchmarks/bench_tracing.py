"""Metric (f): what tracing costs: handoff_builder turns with no OpenTelemetry SDK against turns with one.

The same scenario as bench_turn (triage -> billing -> refunds, 2 handoffs, zero-latency model), one new
conversation per turn, in fresh child processes, rounds interleaved:

  untraced  no OpenTelemetry SDK: opentelemetry-api's no-op tracer and meter (what a user gets by default)
  traced    the SDK with an in-memory span exporter (SimpleSpanProcessor) and an in-memory metric reader:
            every span (ours, and agent_framework's invoke_agent/chat spans) and metric is recorded

Each child reports the median turn time; the report gives traced / untraced per round and their median.

    python benchmarks/bench_tracing.py                 # 7 rounds x 400 turns, ~1 min
    python benchmarks/bench_tracing.py --rounds 3 --turns 200
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import env_line, md_table, quiet_logs  # noqa: E402

MODES = ("untraced", "traced")


def install_sdk() -> object:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    return exporter


async def child(mode: str, turns: int) -> dict:
    exporter = install_sdk() if mode == "traced" else None
    quiet_logs()
    from adapters import make_handoff_builder
    from common import checked_turn

    conversations = [await make_handoff_builder([], 2) for _ in range(turns + 20)]
    for turn in conversations[:20]:
        await checked_turn(turn, "warm up", 2)
    times = []
    for turn in conversations[20:]:
        started = time.perf_counter()
        await turn("I was double charged, please refund me.")
        times.append(time.perf_counter() - started)
    spans = len(exporter.get_finished_spans()) if exporter is not None else 0  # type: ignore[attr-defined]
    return {"median": statistics.median(times), "spans_per_turn": spans / (turns + 20)}


def run_child(mode: str, turns: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--turns", str(turns)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--turns", type=int, default=400)
    p.add_argument("--child", choices=MODES)
    args = p.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, args.turns))))
        return
    rows, ratios = [], []
    started = time.time()
    for number in range(1, args.rounds + 1):
        order = MODES if number % 2 else MODES[::-1]
        result = {mode: run_child(mode, args.turns) for mode in order}
        untraced, traced = result["untraced"]["median"], result["traced"]["median"]
        ratios.append(traced / untraced)
        rows.append(
            [
                str(number),
                f"{untraced * 1e3:.2f} ms",
                f"{traced * 1e3:.2f} ms",
                f"{traced / untraced:.2f}x",
                f"{result['traced']['spans_per_turn']:.1f}",
            ]
        )
        print(
            f"round {number}: untraced {untraced * 1e3:.2f} ms, traced {traced * 1e3:.2f} ms",
            file=sys.stderr,
        )
    print(env_line())
    print()
    print("### handoff_builder turn (2 handoffs, new conversation each), median per child process")
    print()
    print(
        md_table(
            [
                "round",
                "untraced (no SDK)",
                "traced (SDK, in-memory)",
                "traced / untraced",
                "spans per turn",
            ],
            rows,
        )
    )
    print()
    print(
        f"median traced / untraced: {statistics.median(ratios):.2f}x over {args.rounds} rounds "
        f"({time.time() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
