"""``benchmarks/bench_a2a.py`` measures what it says, against its own A2A servers on 127.0.0.1.

The benchmark itself is not run here (its figures are in docs/performance.md); every one of its
configurations is, once, against the servers it starts in a process of its own, and each must
get the answers it checks. No figure is asserted: speed is the benchmark's business.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from handoff_builder.testing import reply, scripted_agent

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_a2a.py"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The benchmark's module (it puts benchmarks/ on ``sys.path``; both undone after the test)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("bench_a2a", BENCHMARK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def urls(bench: ModuleType) -> Iterator[dict[str, str]]:
    """The remote agents' addresses, served by the benchmark's own process (10 ms experts)."""
    process, found = bench.start_servers(10.0)
    try:
        yield found
    finally:
        process.kill()
        process.wait()


async def test_every_configuration_gets_its_answers(
    bench: ModuleType, urls: dict[str, str]
) -> None:
    args = argparse.Namespace(
        calls=2, rounds=1, fan_rounds=1, latency_ms=10.0, warmup=0, seed=1, json=None, serve=None
    )
    figures = await bench.measure(args, urls)

    assert set(urls) == {"echo", *bench.EXPERTS}
    assert figures["errors"] == dict.fromkeys((*bench.CALL_ROWS, *bench.FAN_ROWS), 0)
    assert [figures["calls"][row]["n"] for row in bench.CALL_ROWS] == [2, 2, 2, 2]
    assert [figures["fan_out"][row]["n"] for row in bench.FAN_ROWS] == [1] * len(bench.FAN_ROWS)
    table = bench.report(figures)
    assert "| handoff_builder, remote expert |" in table
    assert "| 4 in one response |" in table


async def test_a_wrong_answer_is_an_error_not_a_figure(
    bench: ModuleType, urls: dict[str, str]
) -> None:
    """An expert whose answer is not the one expected fails its configuration's check."""
    liar = scripted_agent("echo", respond_with=lambda _call: reply("echo: something else"))
    async with bench.Configs(urls) as configs:
        calls = {"liar": lambda: configs.turn([liar], [["ask_echo"]])}
        errors = {"liar": 0}
        shuffle = random.Random(1)  # noqa: S311 - the order of the rows
        found = await bench.sample(calls, 1, 2, shuffle, errors, "test")

    assert (found, errors) == ({"liar": []}, {"liar": 2})
