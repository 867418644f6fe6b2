"""The offline demo and the command line."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from handoff_builder._demo import run_demo
from handoff_builder.cli import main


async def test_demo_shows_every_speaker_and_handoff() -> None:
    out = io.StringIO()
    results = await run_demo(out)
    lines = out.getvalue().splitlines()
    handoffs = [line.strip() for line in lines if "-> handoff" in line]
    assert handoffs == [
        "-> handoff triage -> billing (goal: The user was charged twice for the March bill.)",
        "-> handoff billing -> refunds (goal: Refund the duplicate March charge of 24.90 EUR.)",
        "-> handoff triage -> billing (goal: Email the user the corrected March invoice.)",
    ]
    assert [r.active_agent for r in results] == ["refunds", "billing"]
    assert any(line.strip().startswith("refunds: I've refunded") for line in lines)


def test_cli_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    assert "-> handoff billing -> refunds" in capsys.readouterr().out


def test_cli_help_and_unknown_command() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "handoff_builder.cli", "--help"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ok.returncode == 0
    assert "demo" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "handoff_builder.cli", "nope"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "invalid choice: 'nope'" in bad.stderr
