"""The handoff-builder command line: demo, chat and graph, as a new user would try them."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from handoff_builder.cli import main


def run_cli(
    *args: str, stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - this interpreter, our module
        [sys.executable, "-m", "handoff_builder.cli", *args],
        input=stdin, capture_output=True, text=True, check=False, timeout=60, cwd=cwd,
    )  # fmt: skip


@pytest.mark.parametrize("command", [[], ["demo"], ["chat"], ["graph"]])
def test_help_on_every_command(command: list[str]) -> None:
    done = run_cli(*command, "--help")
    assert done.returncode == 0
    assert "usage: handoff-builder" in done.stdout


def test_chat_remembers_the_active_agent_between_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:{tmp_path / 'chat.db'}"
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\nmy invoice is wrong\n"))
    assert main(["chat", "--store", store, "--conversation", "c1"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert first == [
        "conversation 'c1': talking to triage (exit to quit)",
        "triage: Hello! I'm the front desk. I can help with billing or technical problems.",
        "  [triage -> billing] The user says: my invoice is wrong",
        "billing: (billing) I'm on it: my invoice is wrong",
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("and the price of my plan?\nexit\nignored\n"))
    assert main(["chat", "--store", store, "--conversation", "c1"]) == 0
    second = capsys.readouterr().out.splitlines()
    assert second == [
        "conversation 'c1': talking to billing (exit to quit)",
        "billing: (billing) I'm on it: and the price of my plan?",
    ]


def test_chat_hand_back_when_the_topic_changes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("refund please\nthe app crashes\n"))
    code = main(["chat", "--store", "memory"])
    assert code == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    assert "  [billing -> triage] billing part done; open: the app crashes" in lines
    assert lines[-1] == "tech: (tech) I'm on it: the app crashes"


def test_chat_errors_are_one_line() -> None:
    no_key = run_cli("chat", "--provider", "openai", "--store", "memory")
    assert no_key.returncode == 1
    assert (
        no_key.stderr == "handoff-builder: error: Set OPENAI_API_KEY to use the openai provider.\n"
    )
    bad_store = run_cli("chat", "--store", "mongo://x")
    assert bad_store.returncode == 1
    assert bad_store.stderr.startswith(
        "handoff-builder: error: --store must be memory, sqlite:PATH"
    )


def test_graph_prints_mermaid() -> None:
    done = run_cli("graph")
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "flowchart LR",
        '    a0(["triage"])',
        '    a1["billing"]',
        '    a2["tech"]',
        "    a0 -->|handoff_to_billing| a1",
        "    a0 -->|handoff_to_tech| a2",
        "    a1 -.->|transfer_back_to_triage| a0",
        "    a2 -.->|transfer_back_to_triage| a0",
    ]
    assert "a1 -->|handoff_to_refunds| a2" in run_cli("graph", "--workflow", "demo").stdout


MY_DESK = """
from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.testing import scripted_agent

triage, billing, tech = (scripted_agent(n) for n in ("triage", "billing", "tech"))
builder = HandoffWorkflowBuilder(triage).with_handoffs(triage, [billing, tech])
builder.with_hand_back(triage, [billing])

def make():
    return builder

def broken():
    raise RuntimeError("no builder today")

async def later():
    return builder
"""

EXITS = """
import sys
sys.exit("usage: somebody else's program")
"""


def graph_of(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "my_desk.py").write_text(MY_DESK, encoding="utf-8")
    (tmp_path / "exits.py").write_text(EXITS, encoding="utf-8")
    return run_cli("graph", *args, cwd=tmp_path)


@pytest.mark.parametrize("attribute", ["builder", "make"])
def test_graph_draws_your_builder_and_lints_it(tmp_path: Path, attribute: str) -> None:
    done = graph_of(tmp_path, f"my_desk:{attribute}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "flowchart LR",
        '    a0(["triage"])',
        '    a1["billing"]',
        '    a2["tech"]',
        "    a0 -->|handoff_to_billing| a1",
        "    a0 -->|handoff_to_tech| a2",
        "    a1 -.->|transfer_back_to_triage| a0",
    ]
    [lint] = done.stderr.splitlines()
    assert lint.startswith("handoff-builder: lint: warning [no-way-back] Agent 'tech'")


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("my_desk", "expected MODULE:ATTRIBUTE"),
        ("no_such_module:builder", "cannot import 'no_such_module'"),
        ("my_desk:nope", "'my_desk' has no attribute 'nope'"),
        ("my_desk:triage", "is an object of type Agent, not a HandoffWorkflowBuilder"),
        ("my_desk:broken", "calling my_desk:broken raised RuntimeError: no builder today"),
        ("my_desk:later", "my_desk:later is async; name a builder"),
        ("exits:builder", "importing 'exits' raised SystemExit: usage: somebody else's program"),
    ],
)
def test_graph_of_something_else_is_one_line(tmp_path: Path, spec: str, error: str) -> None:
    done = graph_of(tmp_path, spec)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("handoff-builder: error: ")
    assert error in line
