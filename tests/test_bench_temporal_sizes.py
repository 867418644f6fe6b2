"""``benchmarks/bench_temporal_sizes.py`` reads a turn's bytes from a real event history.

The benchmark itself is not run here (see docs/performance.md); its measuring path is, on
conversations of a few messages against the dev server ``.ci/run`` starts. Without
``HANDOFF_BUILDER_TEMPORAL_ADDRESS`` the test skips, saying so; in CI it must run.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("temporalio")

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.temporal import TemporalConversationHost, conversation_worker
from handoff_builder.testing import handoff_to, reply, scripted_agent

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_temporal_sizes.py"
REPLY = "Refund issued."


@pytest.fixture
def sizes(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The benchmark's module (it puts benchmarks/ on ``sys.path``; both undone after the test)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("bench_temporal_sizes", BENCHMARK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    return module


def desk() -> HandoffWorkflowBuilder:
    """The benchmark's desk: triage hands off to billing, which answers every message."""
    triage = scripted_agent(
        "triage", respond_with=lambda _call: handoff_to("billing", goal="Refund a double charge.")
    )
    billing = scripted_agent("billing", respond_with=lambda _call: reply(REPLY))
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_hand_back(triage)


def json_bytes(messages: list[Any]) -> int:
    return sum(len(json.dumps(message.to_dict(), separators=(",", ":"))) for message in messages)


async def test_a_turns_bytes_are_read_from_its_events(
    sizes: ModuleType, client: Any, queue: str
) -> None:
    """One continuing turn: one activity, whose input is the conversation so far with the new
    message (and the host's state), whose result is the reply; the history holds both and more.
    A conversation longer by 32 messages makes an input larger by about their size."""
    async with conversation_worker(client, desk(), task_queue=queue):
        host = TemporalConversationHost(client, task_queue=queue)
        added = await sizes.added_by_first_turn(host)
        assert added == 4  # the user's message, the handoff's call and result, the reply
        short = await sizes.measure(host, 8, added, 200)
        long = await sizes.measure(host, 40, added, 200)

    for measured, length in ((short, 8), (long, 40)):
        turn = measured.sizes
        assert measured.error is None
        assert measured.turn_ms > 0
        assert turn.activities == 1
        carried = json_bytes(
            [*sizes.prior(length - added, 200), *[sizes.user_message()] * (added + 1)]
        )  # a lower bound: the calls also carry the handoff's messages and the host's state
        assert carried < turn.activity_input_bytes < carried + 8_000, (length, turn)
        assert len(REPLY) < turn.activity_result_bytes < 2_000
        assert turn.history_bytes > turn.activity_input_bytes + turn.activity_result_bytes
        assert turn.events >= 8  # workflow tasks, the Update, the activity, the idle timer
    grown = long.sizes.activity_input_bytes - short.sizes.activity_input_bytes
    expected = json_bytes(sizes.prior(40 - added, 200)) - json_bytes(sizes.prior(8 - added, 200))
    assert abs(grown - expected) < 0.1 * expected, (grown, expected)
    # the history holds the input; the rest of it (ids, times, the other events) does not grow
    # with the conversation, but its fields' lengths vary by a few bytes from turn to turn
    rest = [m.sizes.history_bytes - m.sizes.activity_input_bytes for m in (short, long)]
    assert abs(rest[1] - rest[0]) < 500, rest
