"""The handoff-builder command line: demo, chat and graph, as a new user would try them.

The commands run in this process (``main(argv)``, standard input and output captured); only
what needs a real process (the installed entry point, a real Ctrl-C) starts one.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from handoff_builder.cli import main
from tests.stores import connection_failures, elsewhere, postgres_dsn


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[CliRunner]:
    """Runs the command line in this process; modules it imports are forgotten afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield CliRunner(monkeypatch, capsys)
    for name in set(sys.modules) - before:
        if name in ("my_desk", "exits", "approvals_desk", "warns", "talkative_desk"):
            del sys.modules[name]


class CliRunner:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
        self.monkeypatch, self.capsys = monkeypatch, capsys

    def __call__(self, *args: str, stdin: str = "", cwd: Path | None = None) -> Done:
        if cwd is not None:
            self.monkeypatch.chdir(cwd)
        self.monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        self.capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse: --help, --version, a usage error
            code = exit_.code if isinstance(exit_.code, int) else 1
        out = self.capsys.readouterr()
        return Done(code, out.out, out.err)


@pytest.mark.parametrize("command", [[], ["demo"], ["chat"], ["graph"], ["eval"], ["serve"]])
def test_help_on_every_command(cli: CliRunner, command: list[str]) -> None:
    done = cli(*command, "--help")
    assert done.returncode == 0
    assert "usage: handoff-builder" in done.stdout


def test_the_installed_command_runs() -> None:
    """The entry point as a user starts it: a process, the demo, offline."""
    done = subprocess.run(
        [sys.executable, "-m", "handoff_builder.cli", "demo"],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "  (turn ended at billing, 1 handoff)" in done.stdout.splitlines()


def test_chat_remembers_the_active_agent_between_runs(cli: CliRunner, tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'chat.db'}"
    done = cli(
        "chat", "--store", store, "--conversation", "c1", stdin="hello\nmy invoice is wrong\n"
    )
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "conversation 'c1': talking to triage (exit to quit)",
        "triage: Hello! I'm the front desk. I can help with billing or technical problems.",
        "  [triage -> billing] The user says: my invoice is wrong",
        "billing: (billing) I'm on it: my invoice is wrong",
    ]
    again = cli("chat", "--store", store, "--conversation", "c1",
                stdin="and the price of my plan?\nexit\nignored\n")  # fmt: skip
    assert again.returncode == 0
    assert again.stdout.splitlines() == [
        "conversation 'c1': talking to billing (exit to quit)",
        "billing: (billing) I'm on it: and the price of my plan?",
    ]


def test_chat_hand_back_when_the_topic_changes(cli: CliRunner) -> None:
    done = cli("chat", "--store", "memory", stdin="refund please\nthe app crashes\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "  [billing -> triage] billing part done; open: the app crashes" in lines
    assert lines[-1] == "tech: (tech) I'm on it: the app crashes"


def test_chat_errors_are_one_line(cli: CliRunner) -> None:
    no_key = cli("chat", "--provider", "openai", "--store", "memory")
    assert no_key.returncode == 1
    assert (
        no_key.stderr == "handoff-builder: error: Set OPENAI_API_KEY to use the openai provider.\n"
    )
    bad_store = cli("chat", "--store", "mongo://x")
    assert bad_store.returncode == 1
    assert bad_store.stderr.startswith(
        "handoff-builder: error: --store must be memory, sqlite:PATH"
    )


def closed_port() -> int:
    """A port of 127.0.0.1 where nothing listens (it was free a moment ago)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_model_that_cannot_be_reached_is_one_line_naming_its_url(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = closed_port()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    done = cli("chat", "--provider", "openai", "--store", "memory", stdin="my invoice is wrong\n")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"handoff-builder: error: Agent 'triage' could not reach its model at "
        f"http://127.0.0.1:{port}/v1/chat/completions (ConnectionRefusedError: [Errno 111] "
        f"Connect call failed ('127.0.0.1', {port})); check the address and that its server "
        "is up."
    ]


def test_a_closed_standard_output_ends_the_command_quietly() -> None:
    """``handoff-builder demo | head -1``: the reader has gone; no error, status 141 (SIGPIPE's
    in a shell). Here the reader is gone before the first line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "handoff_builder.cli", "demo"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (141, "")


def test_a_broken_pipe_that_is_not_standard_output_is_an_error(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import handoff_builder._demo as demo

    async def fails(out: object) -> None:
        del out
        raise BrokenPipeError(32, "Broken pipe")  # a tool's subprocess, say

    monkeypatch.setattr(demo, "run_demo", fails)
    done = cli("demo")
    assert done.returncode == 1
    assert done.stderr == "handoff-builder: error: BrokenPipeError: [Errno 32] Broken pipe\n"


def test_graph_prints_mermaid(cli: CliRunner) -> None:
    done = cli("graph")
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
    assert "a1 -->|handoff_to_refunds| a2" in cli("graph", "--workflow", "demo").stdout


MY_DESK = """
from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.testing import scripted_agent

triage, billing, tech = (scripted_agent(n) for n in ("triage", "billing", "tech"))
builder = HandoffWorkflowBuilder(triage).with_handoffs(triage, [billing, tech])
builder.with_hand_back(triage, [billing])

def make():
    return builder

def cycle():
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_delegate(triage, billing, "billing knows")
        .with_delegate(billing, triage, "triage knows")
    )

def orphaned():
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing).add_participants(tech)

def broken():
    raise RuntimeError("no builder today")

async def later():
    return builder
"""

EXITS = """
import sys
sys.exit("usage: somebody else's program")
"""


def graph_of(cli: CliRunner, tmp_path: Path, *args: str) -> Done:
    (tmp_path / "my_desk.py").write_text(MY_DESK, encoding="utf-8")
    (tmp_path / "exits.py").write_text(EXITS, encoding="utf-8")
    return cli("graph", *args, cwd=tmp_path)


@pytest.mark.parametrize("attribute", ["builder", "make"])
def test_graph_draws_your_builder_and_lints_it(
    cli: CliRunner, tmp_path: Path, attribute: str
) -> None:
    done = graph_of(cli, tmp_path, f"my_desk:{attribute}")
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


def test_graph_of_a_workflow_that_does_not_build_prints_every_finding_and_fails(
    cli: CliRunner, tmp_path: Path
) -> None:
    done = graph_of(cli, tmp_path, "my_desk:cycle")
    assert done.returncode == 1
    assert done.stdout == ""  # nothing to draw
    assert done.stderr.splitlines() == [
        "handoff-builder: lint: error [delegate-cycle] Delegates form a cycle ('triage' -> "
        "'billing' -> 'triage'): an expert would ask its own caller, without end. Remove one of "
        "these delegates, or make it a handoff.",
        "handoff-builder: lint: warning [handoff-and-delegate] Agent 'triage' can both hand the "
        "conversation to 'billing' (handoff_to_billing) and ask it a question (ask_billing): its "
        "model must guess which one you mean. Keep one, or say in each reason= when to use it.",
        "handoff-builder: error: the lint found 1 error; the workflow does not build, so no "
        "graph was drawn.",
    ]


def test_graph_with_a_lint_error_draws_the_graph_and_fails(cli: CliRunner, tmp_path: Path) -> None:
    done = graph_of(cli, tmp_path, "my_desk:orphaned")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "flowchart LR",
        '    a0(["triage"])',
        '    a1["billing"]',
        '    a2["tech"]',
        "    a0 -->|handoff_to_billing| a1",
    ]
    assert done.stderr.splitlines() == [
        "handoff-builder: lint: error [unreachable-agent] Agent 'tech' cannot be reached from the "
        "initial agent 'triage': no chain of handoffs leads to it, so it never runs. Add a "
        "handoff to it (for example with_handoff(triage, tech)) or remove it from the workflow.",
        "handoff-builder: error: the lint found 1 error; build(strict=True) refuses this workflow.",
    ]


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
def test_graph_of_something_else_is_one_line(
    cli: CliRunner, tmp_path: Path, spec: str, error: str
) -> None:
    done = graph_of(cli, tmp_path, spec)
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


def test_an_error_is_one_line_and_debug_shows_it_whole(cli: CliRunner) -> None:
    done = cli("chat", "--store", "mongo://x")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("handoff-builder: error: --store must be")
    with pytest.raises(ValueError, match="--store must be"):
        main(["--debug", "chat", "--store", "mongo://x"])


def test_the_default_store_is_in_the_data_directory(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert cli("chat", stdin="hello\n", cwd=tmp_path).returncode == 0
    assert (tmp_path / "data" / "handoff-builder" / "chat.db").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # nothing in the cwd


def test_ctrl_c_mid_turn_and_the_next_chat_finishes_the_turn(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
    interrupted_run = cli("chat", "--store", store, stdin="my invoice is wrong\n")
    assert interrupted_run.returncode == 130
    assert interrupted_run.stderr == ""  # no traceback
    done = cli("chat", "--store", store, stdin="thanks\n")
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "(finishing the turn that was interrupted)",
        "  [triage -> billing] g",
        "billing: billing: my invoice is wrong",
        "conversation 'cli': talking to billing (exit to quit)",
        "billing: billing: thanks",
    ]
    assert done.stderr == ""  # said once: no warning of the host about the same turn


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_at_the_prompt_ends_quietly(tmp_path: Path, inherited: str) -> None:
    """The prompt waits on a terminal that never answers; Ctrl-C (SIGINT) ends it at once, also
    when the chat was started with SIGINT ignored (a script's background job)."""
    import signal
    import time

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    process = subprocess.Popen(
        [sys.executable, "-m", "handoff_builder.cli", "chat", "--store", "memory"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tmp_path, preexec_fn=ignore_sigint if inherited == "ignored" else None,
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


APPROVALS_DESK = """
from agent_framework import FunctionTool, tool
from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.testing import call_tool, handoff_to, reply, scripted_agent

REFUNDED = []

@tool(approval_mode="always_require")
def refund(amount: int) -> str:
    "Refund money to the customer."
    REFUNDED.append(amount)
    return f"refunded {amount} EUR"

ship = FunctionTool(name="ship", description="Ship a paper invoice (done by the application).",
                    input_model={"type": "object", "properties": {"order": {"type": "integer"}}})

triage = scripted_agent("triage", respond_with=lambda call: handoff_to("billing", goal="help"))
billing = scripted_agent(
    "billing",
    call_tool("refund", amount=5), reply("Refund done."),
    call_tool("ship", order=7), reply("Your invoice is on its way."),
    tools=[refund, ship],
)
builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
"""


def test_chat_asks_for_approvals_and_external_results(cli: CliRunner, tmp_path: Path) -> None:
    """Your builder in chat: a tool that needs approval asks y/N, an external call asks for its
    result, and the model receives what you typed."""
    (tmp_path / "approvals_desk.py").write_text(APPROVALS_DESK, encoding="utf-8")
    store = f"sqlite:{tmp_path / 'chat.db'}"
    done = cli("chat", "approvals_desk:builder", "--store", store,
               stdin="refund my 5 EUR\ny\nand a paper invoice\nshipped, tracking 42\n",
               cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "conversation 'cli': talking to triage (exit to quit)",
        "  [triage -> billing] help",
        "  [approval] refund(amount=5): approve? [y/N]",
        "billing: Refund done.",
        "  [external call] ship(order=7): type its result",
        "billing: Your invoice is on its way.",
    ]
    desk = sys.modules["approvals_desk"]
    assert desk.REFUNDED == [5]  # approved: the tool ran once
    from handoff_builder.testing import received

    last = received(desk.billing)
    assert last.sees("shipped, tracking 42")  # the model got the typed result
    assert last.sees("refunded 5 EUR")


def test_chat_refused_approval_and_a_turn_left_waiting(cli: CliRunner, tmp_path: Path) -> None:
    """The input ends while the turn waits: the next chat asks again; anything but y refuses."""
    (tmp_path / "approvals_desk.py").write_text(APPROVALS_DESK, encoding="utf-8")
    store = f"sqlite:{tmp_path / 'chat.db'}"
    first = cli("chat", "approvals_desk:builder", "--store", store,
                stdin="refund my 5 EUR\n", cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "  [approval] refund(amount=5): approve? [y/N]"
    again = cli("chat", "approvals_desk:builder", "--store", store, stdin="no\n", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "(the last turn waits for your answers)",
        "  [approval] refund(amount=5): approve? [y/N]",
        "billing: Refund done.",
        "conversation 'cli': talking to billing (exit to quit)",
    ]
    desk = sys.modules["approvals_desk"]
    assert desk.REFUNDED == []  # refused: the tool never ran
    from handoff_builder.testing import received

    assert received(desk.billing).sees("the user did not approve this call")


def test_chat_with_your_builder_takes_no_provider(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "approvals_desk.py").write_text(APPROVALS_DESK, encoding="utf-8")
    done = cli("chat", "approvals_desk:builder", "--provider", "openai", cwd=tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("handoff-builder: error: --provider and --max-output-tokens set up")


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "soon", "1e-7", "1e20"])
def test_idle_timeout_must_be_a_positive_finite_number(cli: CliRunner, value: str) -> None:
    done = cli("chat", "--store", "memory", f"--idle-timeout={value}")
    assert done.returncode == 2  # a usage error, before anything runs
    assert done.stderr.splitlines()[-1].startswith("handoff-builder chat: error: argument")
    assert repr(value) in done.stderr


def test_max_output_tokens_must_be_positive(cli: CliRunner) -> None:
    done = cli("chat", "--store", "memory", "--max-output-tokens", "0")
    assert done.returncode == 2
    assert "must be 1 or more, got 0" in done.stderr


def test_the_banner_says_when_an_idle_conversation_starts_again(
    cli: CliRunner, tmp_path: Path
) -> None:
    import time

    store = f"sqlite:{tmp_path / 'chat.db'}"
    first = cli("chat", "--store", store, "--idle-timeout", "0.2", stdin="my invoice is wrong\n")
    assert first.stdout.splitlines()[-1].startswith("billing:")
    again = cli("chat", "--store", store, "--idle-timeout", "30", stdin="")
    assert again.stdout.splitlines() == ["conversation 'cli': talking to billing (exit to quit)"]
    time.sleep(0.3)
    idle = cli("chat", "--store", store, "--idle-timeout", "0.2", stdin="hello\n")
    banner, reply = idle.stdout.splitlines()
    assert banner.startswith("conversation 'cli': idle since ")
    assert banner.endswith(", so it starts again at triage (exit to quit)")
    assert reply.startswith("triage:")


WARNS = """
import logging
import warnings
from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.testing import reply, scripted_agent

def builder():
    warnings.warn("this builder is old\\n  and says so on two lines")
    logging.getLogger("warns").warning("a note from the builder's module")
    logging.getLogger("warns").error("an error record, not the command's error")
    triage, billing, tech = (scripted_agent(n, reply("hi")) for n in ("triage", "billing", "tech"))
    builder = HandoffWorkflowBuilder(triage).with_handoffs(triage, [billing, tech])
    return builder.with_hand_back(triage, [billing])  # tech has no way back: a lint warning
"""


def test_library_warnings_are_one_line_each(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "warns.py").write_text(WARNS, encoding="utf-8")
    done = cli("chat", "warns:builder", "--store", "memory", stdin="hello\n", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert (
        "handoff-builder: warning: UserWarning: this builder is old and says so on two lines"
        in (lines)
    )
    assert "handoff-builder: warning from warns: a note from the builder's module" in lines
    assert "handoff-builder: error from warns: an error record, not the command's error" in lines
    assert not [line for line in lines if line.startswith("handoff-builder: error: ")]
    assert all(line.startswith("handoff-builder: ") for line in lines)
    lint = [line for line in lines if "[no-way-back]" in line]  # the lint, logged by build()
    assert len(lint) == 1
    assert lint[0].startswith("handoff-builder: warning from handoff_builder: ")


@pytest.mark.postgres
@pytest.mark.parametrize(("wrong", "reason"), connection_failures())
def test_a_postgres_store_that_cannot_connect_is_one_line_with_the_reason(
    cli: CliRunner, wrong: dict[str, Any], reason: str
) -> None:
    """A wrong database, user or port: one line with the server's (or the OS's) own words, and
    no driver retry messages."""
    dsn = elsewhere(postgres_dsn(), **wrong)
    parts = urlsplit(dsn)
    done = cli("chat", "--store", dsn, stdin="hello\n")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "handoff-builder: error: The PostgreSQL conversation store is unavailable: connection "
        f'failed: connection to server at "{parts.hostname}", port {parts.port} failed: {reason}'
    ]
    assert done.stdout == ""


TALKATIVE_DESK = """
from agent_framework import FunctionTool, tool
from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.testing import call_tool, handoff_to, reply, respond, scripted_agent

@tool(approval_mode="always_require")
def refund(amount: int) -> str:
    "Refund money."
    return f"refunded {amount} EUR"

@tool(approval_mode="always_require")
def close(account: int) -> str:
    "Close an account."
    return f"closed {account}"

lookup = FunctionTool(name="lookup", description="Asked of the application.",
                      input_model={"type": "object", "properties": {"q": {"type": "string"}}})

triage = scripted_agent(
    "triage",
    respond("Let me refund that first.", call_tool("refund", amount=5)),
    respond("Passing you on.", handoff_to("closer", goal="close it")),
    tools=[refund],
)
closer = scripted_agent(
    "closer",
    respond("Closing now.", call_tool("close", account=3)),
    respond("One more check.", call_tool("lookup", q="balance")),
    reply("Closed."),
    tools=[close, lookup],
)
builder = HandoffWorkflowBuilder(triage).with_handoff(triage, closer)
"""


def test_chat_prints_each_reply_once_across_answers_and_handoffs(
    cli: CliRunner, tmp_path: Path
) -> None:
    """Text beside each request, a handoff between two approvals, an external call: every reply
    and handoff once, in order; an empty line at the external call asks again."""
    (tmp_path / "talkative_desk.py").write_text(TALKATIVE_DESK, encoding="utf-8")
    done = cli("chat", "talkative_desk:builder", "--store", "memory",
               stdin="close my account\ny\nyes\n\nzero\n", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "conversation 'cli': talking to triage (exit to quit)",
        "triage: Let me refund that first.",
        "  [approval] refund(amount=5): approve? [y/N]",
        "triage: Passing you on.",
        "  [triage -> closer] close it",
        "closer: Closing now.",
        "  [approval] close(account=3): approve? [y/N]",
        "closer: One more check.",
        "  [external call] lookup(q='balance'): type its result",
        "  [external call] lookup(q='balance'): type its result",  # the empty line: again
        "closer: Closed.",
    ]
    from handoff_builder.testing import received

    assert received(sys.modules["talkative_desk"].closer).sees("zero")


def test_exit_at_a_prompt_leaves_the_turn_waiting(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "approvals_desk.py").write_text(APPROVALS_DESK, encoding="utf-8")
    store = f"sqlite:{tmp_path / 'chat.db'}"
    first = cli("chat", "approvals_desk:builder", "--store", store,
                stdin="refund my 5 EUR\nexit\n", cwd=tmp_path)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "  [approval] refund(amount=5): approve? [y/N]"
    assert sys.modules["approvals_desk"].REFUNDED == []  # not refused either: still waiting
    again = cli("chat", "approvals_desk:builder", "--store", store, stdin="y\n", cwd=tmp_path)
    assert again.stdout.splitlines()[:3] == [
        "(the last turn waits for your answers)",
        "  [approval] refund(amount=5): approve? [y/N]",
        "billing: Refund done.",
    ]
    assert sys.modules["approvals_desk"].REFUNDED == [5]
