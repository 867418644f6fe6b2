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


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from handoff_builder import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"handoff-builder {__version__}\n"
    assert __version__ != "0+unknown"


def test_an_error_is_one_line_and_debug_shows_it_whole(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["chat", "--store", "mongo://x"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("handoff-builder: error: --store must be")
    with pytest.raises(ValueError, match="--store must be"):
        main(["--debug", "chat", "--store", "mongo://x"])


def test_the_default_store_is_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert main(["chat"]) == 0
    assert (tmp_path / "data" / "handoff-builder" / "chat.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # nothing in the cwd
    capsys.readouterr()


def test_idle_timeout_starts_the_conversation_again_at_triage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time

    store = f"sqlite:{tmp_path / 'chat.db'}"
    monkeypatch.setattr(sys, "stdin", io.StringIO("my invoice is wrong\n"))
    assert main(["chat", "--store", store, "--idle-timeout", "0.2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("billing:")
    time.sleep(0.3)
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert main(["chat", "--store", store, "--idle-timeout", "0.2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("triage:")


def test_ctrl_c_mid_turn_and_the_next_chat_finishes_the_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while billing answers: the command ends quietly (130); the next one finishes
    the turn, shows its reply, and goes on."""
    import handoff_builder._support_desk as desk
    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.testing import ModelCall, Step, handoff_to, reply, scripted_agent

    interrupted = [True]

    def billing_answer(call: ModelCall) -> Step:
        if interrupted[0]:
            interrupted[0] = False
            raise KeyboardInterrupt  # as Ctrl-C does, in the middle of the model call
        return reply(f"billing: {call.user_text}")

    def desk_with_ctrl_c(*args: object) -> HandoffWorkflowBuilder:
        del args
        triage = scripted_agent("triage", respond_with=lambda c: handoff_to("billing", goal="g"))
        billing = scripted_agent("billing", respond_with=billing_answer)
        return HandoffWorkflowBuilder(triage).with_handoff(triage, billing)

    monkeypatch.setattr(desk, "support_desk", desk_with_ctrl_c)
    store = f"sqlite:{tmp_path / 'chat.db'}"
    monkeypatch.setattr(sys, "stdin", io.StringIO("my invoice is wrong\n"))
    assert main(["chat", "--store", store]) == 130
    out = capsys.readouterr()
    assert out.err == ""  # no traceback
    monkeypatch.setattr(sys, "stdin", io.StringIO("thanks\n"))
    assert main(["chat", "--store", store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "(finishing the turn that was interrupted)",
        "  [triage -> billing] g",
        "billing: billing: my invoice is wrong",
    ]
    assert lines[-1] == "billing: billing: thanks"


def test_ctrl_c_at_the_prompt_ends_quietly(tmp_path: Path) -> None:
    """The prompt waits on a terminal that never answers; Ctrl-C (SIGINT) ends it at once."""
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "handoff_builder.cli", "chat", "--store", "memory"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        assert process.stdout is not None
        banner = process.stdout.readline()  # the chat is up and waits at its prompt
        assert banner.startswith("conversation 'cli'"), banner
        assert time.monotonic() < deadline
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 130
    assert err == ""
