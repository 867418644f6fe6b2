"""Every sample runs offline (on the scripted provider) and does what its docstring says."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from handoff_builder.providers import ProviderConfigurationError
from tests.stores import postgres_dsn, unique_prefix
from tests.test_packaging import project

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "samples"
SAMPLES = sorted(path.stem for path in SAMPLES_DIR.glob("*.py") if not path.stem.startswith("_"))

# What each extra brings that a sample may import: blocked, they are as good as not installed.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "openai": ("agent_framework_openai",),
    "azure": ("agent_framework_openai", "azure.identity"),
    "postgres": ("psycopg", "psycopg_pool"),
    "serve": ("agent_framework_devui", "agent_framework_ag_ui"),
    "temporal": ("temporalio",),
    "redis": ("redis",),
    "otel": ("opentelemetry.sdk",),
    "a2a": ("agent_framework_a2a", "a2a"),
}
NOT_FOR_USERS = {"dev", "bench"}  # the project's own extras: no sample may need them
# Samples that need a server: run whole only when the tests have one, else checked with --help.
SERVERS = {
    "order_desk_postgres": "HANDOFF_BUILDER_POSTGRES_DSN",
    "postgres_workers": "HANDOFF_BUILDER_POSTGRES_DSN",
    "temporal_conversation": "HANDOFF_BUILDER_TEMPORAL_ADDRESS",
}
# A sitecustomize that makes the modules named in BLOCKED_MODULES unimportable, as if the
# extra that brings them were not installed.
BLOCKER = """
import importlib.abc
import os
import sys


class Blocked(importlib.abc.MetaPathFinder):
    names = [name for name in os.environ.get("BLOCKED_MODULES", "").split(",") if name]

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == name or fullname.startswith(name + ".") for name in self.names):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


sys.meta_path.insert(0, Blocked())
"""


def sample_extras(name: str) -> tuple[list[str], bool]:
    """The extras a sample's docstring names, and whether it says --provider needs its own."""
    doc = ast.get_docstring(ast.parse((SAMPLES_DIR / f"{name}.py").read_text("utf-8"))) or ""
    extra = r"[a-z][a-z0-9]*"  # a2a, otel...
    found = re.search(
        rf"^Extras: (none|{extra}(?:, {extra})*)(; openai or azure for that --provider)?$",
        doc,
        re.M,
    )
    assert found, f"{name}: no 'Extras: ...' line in its docstring"
    extras = [] if found[1] == "none" else found[1].split(", ")
    return extras, found[2] is not None


def blocking(tmp_path: Path, modules: set[str]) -> dict[str, str]:
    """The environment of a process in which ``modules`` cannot be imported."""
    folder = tmp_path / "blocker"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    return {**os.environ, "PYTHONPATH": str(folder), "BLOCKED_MODULES": ",".join(sorted(modules))}


def run_sample(
    name: str, *args: str, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter and sample
        [sys.executable, str(SAMPLES_DIR / f"{name}.py"), *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_blocked_modules_are_those_of_the_extras() -> None:
    """Each module the tests block to play a missing extra is installed by that extra (when
    it is installed here: azure-identity is not, in the dev extra)."""
    extras = project()["optional-dependencies"]
    assert set(EXTRA_MODULES) == set(extras) - NOT_FOR_USERS
    for extra, modules in EXTRA_MODULES.items():
        files: set[str] = set()
        for requirement in extras[extra]:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                name = re.split(r"[\[<>=; ]", requirement)[0]
                files.update(str(file) for file in importlib.metadata.files(name) or [])
        for module in modules:
            if importlib.util.find_spec(module.split(".")[0]) is None:
                continue
            path = module.replace(".", "/")
            assert any(f.startswith(f"{path}/") or f == f"{path}.py" for f in files), module


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_names_its_extras(name: str) -> None:
    """``Extras:`` in the docstring: real extras of the package, the same in the README table."""
    extras, for_provider = sample_extras(name)
    assert set(extras) <= set(project()["optional-dependencies"]) - NOT_FOR_USERS
    source = (SAMPLES_DIR / f"{name}.py").read_text("utf-8")
    assert for_provider == ("--provider scripted|openai|azure" in source)
    readme = (SAMPLES_DIR / "README.md").read_text("utf-8")
    [row] = [line for line in readme.splitlines() if line.startswith(f"| [`{name}.py`]")]
    listed = row.split(" | ")[1]
    assert listed == (", ".join(f"`{extra}`" for extra in extras) or "none"), row


WITH_EXTRAS = [(name, extra) for name in SAMPLES for extra in sample_extras(name)[0]]


@pytest.mark.parametrize(("name", "extra"), WITH_EXTRAS, ids=[f"{n}-{e}" for n, e in WITH_EXTRAS])
def test_a_sample_without_its_extra_says_which_to_install(
    name: str, extra: str, tmp_path: Path
) -> None:
    """Run as a user would without the extra: one line naming it, exit status 1."""
    modules = EXTRA_MODULES[extra]
    ran = run_sample(name, "--help", env=blocking(tmp_path, set(modules)), cwd=tmp_path)
    assert (ran.returncode, ran.stdout) == (1, "")
    assert ran.stderr.splitlines() == [
        f"{name}: needs the {extra} extra: pip install 'handoff-builder[{extra}]' "
        f"({modules[0]} is missing)"
    ]


@pytest.mark.parametrize("name", SAMPLES)
def test_a_sample_runs_with_only_the_extras_it_names(name: str, tmp_path: Path) -> None:
    """Every other extra's modules unimportable: the sample runs offline all the same (one
    that needs a server it is not given shows its --help)."""
    extras, _ = sample_extras(name)
    needed = {module for extra in extras for module in EXTRA_MODULES[extra]}
    others = {module for modules in EXTRA_MODULES.values() for module in modules} - needed
    server = SERVERS.get(name)
    arguments = ["--help"] if server is not None and not os.environ.get(server) else []
    ran = run_sample(name, *arguments, env=blocking(tmp_path, others), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout


def test_a_real_provider_without_its_extra_is_one_line(tmp_path: Path) -> None:
    env = {**blocking(tmp_path, set(EXTRA_MODULES["openai"])), "OPENAI_API_KEY": "sk-test"}
    ran = run_sample("refund_approval", "--provider", "openai", env=env, cwd=tmp_path)
    assert ran.returncode == 1
    assert ran.stderr.splitlines() == [
        "refund_approval: The openai provider needs agent-framework-openai: "
        "pip install 'handoff-builder[openai]'."
    ]


# Samples whose agents are not the point: they build them with testing.scripted_agent on purpose.
SCRIPTED_ON_PURPOSE = {
    "postgres_workers": "about worker processes and the store, not agents; it needs no provider",
}


def test_every_sample_is_tested_and_documented() -> None:
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert set(SAMPLES) <= tested
    readme = (Path(__file__).resolve().parent.parent / "samples" / "README.md").read_text("utf-8")
    for name in SAMPLES:
        module = importlib.import_module(f"samples.{name}")
        assert (module.__doc__ or "").split("\n\n")[1].startswith("Run with: ")
        assert f"{name}.py" in readme


def _called(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def _imported(tree: ast.AST) -> set[str]:
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_the_shared_module_builds_no_agents() -> None:
    """``_shared`` gives a sample its chat client and options, never a ready-made agent."""
    tree = ast.parse((SAMPLES_DIR / "_shared.py").read_text("utf-8"))
    makers = {"Agent", "scripted_agent"}
    assert not _imported(tree) & makers, "samples/_shared.py must not build agents for the samples"
    assert not [call for maker in makers for call in _called(tree, maker)]


@pytest.mark.parametrize("name", SAMPLES)
def test_samples_build_plain_agents(name: str) -> None:
    """A sample builds its agents as plain `Agent(client=..., name=..., ...)` calls, as in .NET."""
    tree = ast.parse((SAMPLES_DIR / f"{name}.py").read_text("utf-8"))
    helpers = {n for n in _imported(tree) if re.search(r"(^|_)agents?$", n)} - {"scripted_agent"}
    assert not helpers, f"{name} imports agent-making helpers {helpers}; use Agent(...)"
    agents, scripted = _called(tree, "Agent"), _called(tree, "scripted_agent")
    if name in SCRIPTED_ON_PURPOSE:
        assert scripted, f"{name} no longer uses scripted_agent: drop it from SCRIPTED_ON_PURPOSE"
        return
    assert not scripted, f"{name} builds agents with scripted_agent; use Agent(...)"
    assert agents, f"{name} has no visible Agent(...) call"
    for call in agents:
        keywords = {keyword.arg for keyword in call.keywords}
        assert {"client", "name", "instructions", "default_options"} <= keywords, (
            f"{name}, line {call.lineno}: Agent(...) without client=, name=, instructions= "
            "or default_options="
        )


def test_postgres_workers_help(tmp_path: Path) -> None:
    script = SAMPLES_DIR / "postgres_workers.py"
    ran = subprocess.run(  # noqa: S603 - our own interpreter and sample
        [sys.executable, str(script), "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "two worker processes serve one conversation" in " ".join(ran.stdout.split())
    assert "--worker" not in ran.stdout  # internal: how main() starts a worker
    env = {k: v for k, v in os.environ.items() if k != "HANDOFF_BUILDER_POSTGRES_DSN"}
    unset = subprocess.run(  # noqa: S603
        [sys.executable, str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert unset.returncode == 1
    assert unset.stderr.strip().splitlines() == [
        "postgres_workers: Set HANDOFF_BUILDER_POSTGRES_DSN to a PostgreSQL address, e.g. "
        "postgresql://postgres@127.0.0.1:5432/test"
    ]


async def test_pass_it_on() -> None:
    from samples.pass_it_on import main

    turn = await main()
    assert turn.active_agent == "refunds"
    assert [(h.source, h.target, h.tool_name) for h in turn.handoffs] == [
        ("triage", "billing", "transfer_to_billing"),
        ("billing", "refunds", "transfer_to_refunds"),
    ]


async def test_what_the_model_received(capsys: pytest.CaptureFixture[str]) -> None:
    from samples.what_the_model_received import main

    turn = await main()
    assert [(c.index, c.agent, c.tool_names) for c in turn.model_calls] == [
        (0, "triage", ("transfer_to_billing", "transfer_to_tech")),
        (1, "billing", ()),
    ]
    printed = capsys.readouterr().out
    assert printed.count("4111 1111 1111 1111") == 1  # the user's line; every record is masked
    assert (
        "--- model call 1: billing (tools: none)\n"
        "user: My card [redacted] was charged twice for the March invoice. Please refund one.\n"
        "user[handoff_host]: Goal: Refund one of two March "
        "charges on card [redacted].\n"
    ) in printed


def test_a_turn_without_a_reply_says_why() -> None:
    """A timed-out turn has no text: its last line says why instead of ``triage: ``."""
    from samples._shared import last_line

    from handoff_builder import HandoffTurnResult, TurnStatus, TurnTimeoutEvent

    def turn(timeout: TurnTimeoutEvent | None, status: TurnStatus) -> HandoffTurnResult:
        return HandoffTurnResult(
            messages=[], active_agent="triage", handoffs=[], escalation=None, conversation=[],
            timeout=timeout, status=status,
        )  # fmt: skip

    assert last_line(turn(TurnTimeoutEvent("agent_call", "triage", 120.0), "agent_timeout")) == (
        "(no reply: triage's call took longer than its 120 s deadline (status agent_timeout))"
    )
    assert last_line(turn(TurnTimeoutEvent("turn", "billing", 600.0), "turn_timeout")) == (
        "(no reply: the turn took longer than its 600 s deadline while billing ran "
        "(status turn_timeout))"
    )
    assert last_line(turn(None, "abandoned")) == (
        "(no reply: the turn ended with status abandoned)"
    )


def test_log_warnings_on_stderr_name_the_sample(tmp_path: Path) -> None:
    """A blocked handoff and an escalation are logged; like every other line a sample writes to
    stderr, they start with the sample's name."""
    ran = run_sample("incident_investigation", "--stubborn", env=dict(os.environ), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.splitlines() == [
        "incident_investigation: escalated to a human: review_rounds at reviewer (limit 2)",
        "incident_investigation: blocked handoff from supervisor via handoff_to_delete_database "
        '(unknown_target): {"goal": "Drop the catalog cache tables."}',
    ]


async def test_hand_back(capsys: pytest.CaptureFixture[str]) -> None:
    from samples.hand_back import main

    turn = await main()
    assert ["triage"] + [h.target for h in turn.handoffs] == ["triage", "billing", "triage", "tech"]
    printed = [line.split(":")[0].strip() for line in capsys.readouterr().out.splitlines()[1:]]
    assert printed == [  # in the order it happened: each handoff between the replies
        "[handoff] triage -> billing",
        "billing",
        "[hand_back] billing -> triage",
        "[handoff] triage -> tech",
        "tech",
    ]


async def test_remembers_active_agent(tmp_path: Path) -> None:
    from samples.remembers_active_agent import main

    turn = await main(database=tmp_path / "c.db")
    assert turn.text == "It was paid by card on March 3rd."
    assert turn.handoffs == ()


async def test_dotnet_handoff() -> None:
    from samples.dotnet_handoff import SCRIPTED_MESSAGES, main

    speakers = await main(messages=SCRIPTED_MESSAGES)
    assert speakers == ["flights", "flights", "hotels"]


async def test_hosted_as_agent() -> None:
    from samples.hosted_as_agent import main

    answers = await main()
    assert answers[1] == "For the X200, update the firmware to 3.1 and restart it."


async def test_autonomous_mode() -> None:
    from samples.autonomous_mode import main

    turn = await main()
    assert turn.active_agent == "writer"
    assert sum(m.role == "user" for m in turn.conversation) == 3  # the question + 2 continuations


async def test_tool_approval_checkpoint(capsys: pytest.CaptureFixture[str]) -> None:
    from samples.tool_approval_checkpoint import main

    turn = await main()
    assert turn.text == "Your refund of 24.90 EUR is on its way."
    assert capsys.readouterr().out.splitlines() == [  # the handoff before the restart
        "user: Please refund the 24.90 EUR double charge.",
        "  [handoff] triage -> billing: Refund 24.90 EUR.",
        "waiting for approval of issue_refund",
        "(the process restarts; a human approves)",
        "  billing: Your refund of 24.90 EUR is on its way.",
    ]


@pytest.mark.postgres
async def test_postgres_workers(capsys: pytest.CaptureFixture[str]) -> None:
    from samples.postgres_workers import main

    texts = [text for text in await main(postgres_dsn()) if text]
    assert sorted(texts[0::2]) == ["Also, can I get a paper invoice?", "Why was I charged twice?"]
    assert all(answer == f"billing handled: {question}" for question, answer in zip(
        texts[0::2], texts[1::2], strict=True
    ))  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    [stored] = [line for line in out if line.startswith("stored ")]
    listed = out[out.index(stored) + 1 :]
    assert stored.startswith(f"stored {len(listed)} messages, ")  # each one listed
    assert listed[1:3] == [
        '  triage: calls handoff_to_billing({"goal": "Billing."})',
        "  tool: handoff_to_billing returned 'Transferred.'",
    ]


@pytest.mark.postgres
async def test_order_desk_postgres(capsys: pytest.CaptureFixture[str]) -> None:
    """Two messages, each from a new host and connection: the second starts at orders, whose
    model receives the first message and its tool's result from PostgreSQL."""
    from agent_framework import Message
    from samples.order_desk_postgres import MESSAGES, main

    from handoff_builder.stores import PostgresConversationStore

    prefix = unique_prefix()
    try:
        first, second = await main(dsn=postgres_dsn(), table_prefix=prefix)
    finally:
        async with PostgresConversationStore(postgres_dsn(), table_prefix=prefix) as store:
            stored = [await store.load(c) for c in await store.conversation_ids()]
            await store.drop_tables()
    assert [(h.source, h.target) for h in first.handoffs] == [("triage", "orders")]
    assert (
        first.text
        == "Your order was shipped on 28 November; the courier delivers it on 2 December."
    )
    assert list(second.handoffs) == []  # remembered: it started at orders
    # the scripted orders model says this only when the stored history reached it
    assert second.text == "Yes: I have asked the courier to leave order 1234 with your neighbour."
    [record] = stored
    assert record is not None
    messages = [Message.from_dict(m) for m in record.messages]
    calls = [c.name for m in messages for c in m.contents if c.type == "function_call"]
    assert calls == ["handoff_to_orders", "order_status"]
    assert [m.text for m in messages if m.role == "user" and m.author_name is None] == list(
        MESSAGES
    )  # each stored once
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("starts at triage")
    assert out[4].endswith("starts at orders")


async def test_temporal_conversation(capsys: pytest.CaptureFixture[str]) -> None:
    """On the Temporal server CI runs (HANDOFF_BUILDER_TEMPORAL_ADDRESS): the refund approved
    and paid once, the next message answered by billing on a new worker."""
    from tests.test_temporal import temporal_address

    temporal_address()  # skips, saying why, without a server (fails in CI)
    from samples.temporal_conversation import PAYMENTS, main

    replies = await main()
    assert replies == [
        "Done: 24.90 EUR are on their way back to your card.",
        "Within 3 to 5 working days.",
    ]
    assert list(PAYMENTS.values()) == [24.90]
    out = capsys.readouterr().out.splitlines()
    assert out[1:4] == [  # in the order it happened: the handoff, then billing's refund approved
        "  [triage -> billing] Refund the duplicate 24.90 EUR charge.",
        '  [approval] refund({"amount": 24.9}) -> approved',
        "billing: Done: 24.90 EUR are on their way back to your card.",
    ]
    assert out[-2] == "billing: Within 3 to 5 working days.  (no handoff: it remembered billing)"


async def test_real_providers_need_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    from samples.pass_it_on import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderConfigurationError, match=r"^Set OPENAI_API_KEY to use the openai"):
        await main("openai")


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "declined"])
async def test_refund_approval(approve: bool, capsys: pytest.CaptureFixture[str]) -> None:
    from samples.refund_approval import Reason, RefundRequest, main

    turn = await main(approve=approve)
    out = capsys.readouterr().out
    assert 'approval needed: send_to_refunds({"order_id": "A-1", "amount": 240, ' in out
    if approve:
        [handoff] = turn.handoffs
        assert handoff.payload == RefundRequest(order_id="A-1", amount=240, reason=Reason.DUPLICATE)
        assert turn.active_agent == "refunds"
    else:
        assert (turn.handoffs, turn.active_agent) == ((), "billing")
    # The trace: the run that waits, and the run that answers, with the handoff spans.
    assert "invoke_workflow refund-desk  [awaiting_input]" in out
    assert "invoke_workflow refund-desk  [completed]  (linked to the run it resumes)" in out
    assert out.count("invoke_workflow refund-desk") == 2  # ours, not agent_framework's too
    assert "execute_tool send_to_refunds  [pass_control -> refunds: rejected]" in out
    second = "transferred" if approve else "rejected"
    assert f"execute_tool send_to_refunds  [pass_control -> refunds: {second}]" in out


async def test_incident_investigation() -> None:
    from samples.incident_investigation import APPLIED, SCOPED, main

    APPLIED.clear()
    plan, applied = await main()
    assert plan.text == SCOPED  # the approved plan only: the broad flush was sent back
    assert [(s.kind, s.decided_by, s.by) for s in plan.trace][2:] == [
        ("review", "code", "review"),
        ("review", "model", "request_changes"),
        ("review", "code", "review"),
        ("end", "model", "approve"),
    ]
    assert applied.status == "completed"
    assert APPLIED == [SCOPED]  # a person approved it, and it ran once


async def test_incident_investigation_stubborn() -> None:
    from samples.incident_investigation import APPLIED, BROAD_FLUSH, NO_ROLLBACK, TOO_BROAD, main

    APPLIED.clear()
    escalated, forced = await main(stubborn=True)
    assert escalated.status == "review_rounds"
    assert escalated.escalation is not None
    assert escalated.escalation.evidence == (TOO_BROAD, NO_ROLLBACK)
    assert BROAD_FLUSH not in escalated.text
    assert forced.status == "blocked_handoff"
    assert forced.active_agent == "safe_responder"
    assert "nothing was deleted" in forced.text
    assert "drop the tables" not in forced.text
    assert APPLIED == []


async def test_delegate_or_handoff() -> None:
    from samples.delegate_or_handoff import LEDGER, POLICY, main

    delegated, handed_off = await main()
    assert delegated.active_agent == "support"
    assert [d.result for d in delegated.delegations] == [LEDGER, POLICY]
    assert all(m.author_name == "support" for m in delegated.conversation if m.role != "user")
    assert handed_off.active_agent == "policy"
    assert handed_off.delegations == ()


async def test_remote_desk(capsys: pytest.CaptureFixture[str]) -> None:
    """Two remote agents on the A2A servers the sample starts: triage asks one and answers with
    its answer; it hands the conversation to the other, whose task waits for the customer's
    confirmation (a tool with approval on its server): its question is the turn's request, the
    next message answers it, and its task completes and hands back."""
    from samples.remote_desk import POLICY, REFUNDED, REFUNDS, main

    from handoff_builder import HandoffTurnResult, RemoteQuestion

    asked, waited, confirmed = await main()
    assert isinstance(asked, HandoffTurnResult)
    assert isinstance(waited, RemoteQuestion)
    assert isinstance(confirmed, HandoffTurnResult)
    [delegation] = asked.delegations
    assert (delegation.expert, delegation.outcome, delegation.result) == (
        "policy", "answered", POLICY,
    )  # fmt: skip
    assert (asked.text, asked.active_agent) == (f"{POLICY} Shall I start the refund?", "triage")
    question = (
        'returns asks for approval to call start_refund with {"order": "A-17", "amount": 24.9}. '
        'Answer "approve" or "decline".'
    )  # the remote desk's question, without the data part that describes it for programs
    assert (waited.agent, waited.text) == ("returns", question)
    assert [(h.kind, h.source, h.target) for h in confirmed.handoffs] == [
        ("handoff", "triage", "returns"),
        ("hand_back", "returns", "triage"),
    ]
    assert confirmed.handoffs[-1].goal == REFUNDED
    assert confirmed.active_agent == "triage"
    assert REFUNDS == [("A-17", 24.9)]  # refunded once, on the returns server, once confirmed
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("(policy serves A2A at http://127.0.0.1:")
    assert out[1:] == [
        "",
        "user: Hi! A parcel of mine arrived broken. How long do I have to get my money back?",
        "  [triage asks policy, over A2A] How long can a damaged parcel be refunded?",
        f"  [policy answers triage] {POLICY}",
        f"triage: {POLICY} Shall I start the refund?",
        "  (the conversation is now with triage)",
        "",
        "user: Then please refund it: order A-17, 24.90 EUR.",
        f"  [returns asks, over A2A] {question}",
        "  (the turn waits for the answer)",
        "",
        "user: approve",
        "  [handoff] triage -> returns: Refund order A-17 (24.90 EUR): the parcel arrived broken.",
        f"returns: {REFUNDED}",
        f"  [hand_back] returns -> triage: {REFUNDED}",
        "triage: Your refund is on its way. Anything else I can do for you?",
        "  (the conversation is now with triage)",
        "",
        "(refunds made on the returns server: [('A-17', 24.9)])",
    ]


def test_a_sample_runs_as_a_script_from_anywhere(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "samples" / "pass_it_on.py"
    ran = subprocess.run(  # noqa: S603 - our own interpreter and sample
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert "refunds" in ran.stdout
    bogus = subprocess.run(  # noqa: S603
        [sys.executable, str(script), "--provider", "bogus"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bogus.returncode == 2
    assert "invalid choice: 'bogus'" in bogus.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    unset = subprocess.run(  # noqa: S603
        [sys.executable, str(script), "--provider", "openai"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert unset.returncode == 1
    assert unset.stderr.strip().splitlines() == [
        "pass_it_on: Set OPENAI_API_KEY to use the openai provider."
    ]


async def test_tutors_handoff() -> None:
    from samples.tutors_handoff import main

    printed = await main()
    assert printed == [
        "user: What is 12 times 7?",
        "  [triage -> math_tutor] Answer: What is 12 times 7?",
        "  math_tutor: 12 x 7 = 84.",
        "user: And who was the first emperor of Rome?",
        "  [math_tutor -> triage] Route: And who was the first emperor of Rome?",
        "  [triage -> history_tutor] Answer: And who was the first emperor of Rome?",
        "  history_tutor: Augustus, from 27 BC.",
        "user: Thanks! What is 144 divided by 12?",
        "  [history_tutor -> triage] Route: Thanks! What is 144 divided by 12?",
        "  [triage -> math_tutor] Answer: Thanks! What is 144 divided by 12?",
        "  math_tutor: 144 ÷ 12 = 12.",
    ]  # each handoff printed where it happened, between the replies


async def test_python_handoff(capsys: pytest.CaptureFixture[str]) -> None:
    """The port of agent_framework's Python handoff sample: a mesh without declared handoffs,
    each reply's agent answers the next message, and the loop stops at the closing reply."""
    from samples.python_handoff import USER_REPLIES, main, support_agents

    from handoff_builder.testing import client_of

    agents = support_agents("scripted")
    triage, refund, _, returns = agents
    turns = await main(agents=agents)
    assert [t.active_agent for t in turns] == [
        "triage_agent", "return_agent", "refund_agent", "refund_agent",
    ]  # fmt: skip
    assert [[(h.source, h.target, h.goal) for h in t.handoffs] for t in turns] == [
        [],
        [("triage_agent", "return_agent", "Return the damaged order 1234.")],
        [("return_agent", "refund_agent", "Refund order 1234.")],
        [],
    ]
    assert len(client_of(triage).calls) == 2  # the third and fourth messages skip triage
    # The receivers read what they were handed, and the mesh gave each agent every other one.
    assert client_of(returns).calls[0].texts[-1] == ("Goal: Return the damaged order 1234.")
    assert client_of(refund).calls[0].texts[-1] == ("Goal: Refund order 1234.")
    assert set(client_of(returns).calls[0].tool_names) == {
        "process_return", "handoff_to_triage_agent", "handoff_to_refund_agent",
        "handoff_to_order_agent",
    }  # fmt: skip
    results = [
        c.result for m in turns[-1].conversation for c in m.contents if c.type == "function_result"
    ]
    assert "Return initiated for order 1234; the instructions are on their way by email." in results
    assert "Refund processed successfully for order 1234." in results
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [
        "  refund_agent: You're welcome! Have a great day.",
        "[the conversation is over]",
    ]
    assert sum(line.startswith("user: ") for line in out) == 1 + len(USER_REPLIES)


def test_the_cli_without_the_postgres_extra_says_what_to_install(tmp_path: Path) -> None:
    """``chat --store postgresql://...`` without psycopg: one line, the install command."""
    done = subprocess.run(
        [sys.executable, "-m", "handoff_builder.cli", "chat", "--store",
         "postgresql://postgres@127.0.0.1:1/none"],
        cwd=tmp_path, env=blocking(tmp_path, {"psycopg", "psycopg_pool"}), input="",
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "handoff-builder: error: PostgresConversationStore needs psycopg 3 and psycopg-pool: "
        "pip install 'handoff-builder[postgres]'"
    ]
