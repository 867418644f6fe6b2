"""Every code block of the documentation runs as written, or at least compiles against the code.

Every ```python block of ``docs/*.md``, ``README.md`` and ``samples/README.md`` is checked; a page
cannot drift from the code:

* Each block compiles; the names it uses are defined by the block itself, by the blocks before
  it, or by the page's setup (``tests/docs_setups.py``, declared in the page by a
  ``<!-- docs-setup: ... -->`` comment that lists them); what it imports exists.
* Then it runs, in the page's namespace, offline, on scripted agents (top-level ``await`` is
  allowed, as in a notebook or ``python -m asyncio``), in a temporary directory.
* A block marked ``<!-- docs-test: with Temporal -->`` (or ``with PostgreSQL``) runs against the
  test server (``HANDOFF_BUILDER_TEMPORAL_ADDRESS``, ``HANDOFF_BUILDER_POSTGRES_DSN``); without
  one it is only compiled and the page's test is skipped at the end (a failure in CI).
* A block marked ``<!-- docs-test: compile only: <why> -->`` is compiled and checked as above but
  not run: a server that runs until it is stopped, a real model, the process's global telemetry.
* A ```text block marked ``<!-- docs-test: output of the code above -->`` is what the page's code
  above it prints since the block before, line for line (getting-started's printed lines are
  checked here, below).

A marker that is not one of these, a setup comment that does not list exactly what the setup
defines, or a page whose blocks need a setup it does not declare, is a failure. The ```bash
blocks' commands (``handoff-builder ...``, ``python samples/...``, ``make ...``) must exist and
take the options shown.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import importlib
import importlib.metadata
import inspect
import io
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from handoff_builder.stores import ConversationStore
from tests.docs_setups import SETUPS, Servers, Setup
from tests.stores import POSTGRES_DSN_VARIABLE, server_address

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    path.relative_to(ROOT).as_posix()
    for path in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md", ROOT / "samples" / "README.md"]
)
TEMPORAL_VARIABLE = "HANDOFF_BUILDER_TEMPORAL_ADDRESS"

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<what>.*?)\s*-->\s*$")
_SETUP = re.compile(
    r"<!--\s*docs-setup(?P<alone>\s*\(each block on its own\))?:\s*(?P<names>[\w,\s]*?)\s*-->"
)
_MODES = {
    "with Temporal": "temporal",
    "with PostgreSQL": "postgres",
    "output of the code above": "output",  # a ```text block: what the page's code prints
}
# Modules a page tells the reader to install that are not among the test dependencies: a block
# that imports them is compiled, and its imports checked only where they are installed.
NOT_TEST_DEPENDENCIES = {"opentelemetry.exporter.otlp": "opentelemetry-exporter-otlp-proto-http"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    mode: str  # "run", "temporal", "postgres", "compile" or (not Python) "output"
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page``, with the marker on the line before it."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, end = opening["indent"], index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        body = [line.removeprefix(indent) for line in lines[index + 1 : end]]
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = _MARKER.match(before)
        mode, reason = "run", ""
        if marker:
            what = marker["what"]
            if what in _MODES:
                mode = _MODES[what]
            elif what.startswith("compile only: ") and len(what) > len("compile only: "):
                mode, reason = "compile", what.removeprefix("compile only: ")
            else:
                raise AssertionError(
                    f"{page}:{index + 1}: unknown marker {what!r}; use 'with Temporal', "
                    "'with PostgreSQL', 'compile only: <why>' or 'output of the code above'"
                )
        assert (mode == "output") == (opening["lang"] != "python" and marker is not None), (
            f"{page}:{index + 1}: a ```{opening['lang']} block cannot be marked {before.strip()}"
        )
        code = "\n" * (index + 1) + "\n".join(body) + "\n"  # line numbers are the page's
        found.append(Block(page, index + 1, opening["lang"], code, mode, reason))
        index = end + 1
    return found


def python_blocks(page: str) -> list[Block]:
    return [block for block in blocks(page) if block.lang == "python"]


def declared_setup(page: str) -> tuple[set[str], bool] | None:
    """The names a page's ``docs-setup`` comment lists, and whether each block runs alone."""
    found = _SETUP.search((ROOT / page).read_text(encoding="utf-8"))
    if found is None:
        return None
    return {name.strip() for name in found["names"].split(",") if name.strip()}, bool(
        found["alone"]
    )


# -- what a block uses --------------------------------------------------------------------------


def compiled(block: Block) -> Any:
    return compile(block.code, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def used_names(tree: ast.AST) -> set[str]:
    """Names the code reads but never binds anywhere in it (its free names)."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return loaded - bound - set(dir(builtins))


def bound_names(tree: ast.Module) -> set[str]:
    """Names the code binds at its top level (what a block defines for the blocks after it)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    bound.update(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    )
    return bound


def check_imports(block: Block, tree: ast.AST) -> None:
    """Fail unless every module and name the block imports exists."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _module(block, alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = _module(block, node.module)
            if module is None:
                continue
            for alias in node.names:
                if not hasattr(module, alias.name):
                    _module(block, f"{node.module}.{alias.name}")


def _module(block: Block, name: str) -> Any:
    optional = next((p for m, p in NOT_TEST_DEPENDENCIES.items() if name.startswith(m)), None)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if optional is not None and error.name is not None and name.startswith(error.name):
            return None  # a package the page says to install, not a test dependency
        raise AssertionError(f"{block.where} imports {name}, which does not exist") from error


def check_block(block: Block, defined: set[str]) -> ast.Module:
    """Compile ``block`` and check its imports and the names it uses; return its syntax tree."""
    try:
        tree = ast.parse(block.code, block.page)
        compiled(block)
    except SyntaxError as error:
        raise AssertionError(f"{block.where} does not compile: {error}") from error
    check_imports(block, tree)
    missing = sorted(used_names(tree) - defined)
    assert not missing, (
        f"{block.where} uses {', '.join(missing)}, which neither the block, the blocks before "
        f"it nor the page's setup define (tests/docs_setups.py, declared by the page's "
        f"<!-- docs-setup: ... --> comment)"
    )
    return tree


def rewritten(block: Block, literals: dict[str, str]) -> Block:
    """``block`` with the string literals of a server block pointed at the test server's."""
    if not literals:
        return block
    tree = ast.parse(block.code, block.page)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = literals.get(node.value, node.value)
    code = "\n" * (block.line - 1) + ast.unparse(tree) + "\n"
    return Block(block.page, block.line, block.lang, code, block.mode, block.reason)


# -- running a page -----------------------------------------------------------------------------


def servers() -> Servers:
    return Servers(
        temporal=os.environ.get(TEMPORAL_VARIABLE) or None,
        postgres=os.environ.get(POSTGRES_DSN_VARIABLE) or None,
    )


def server_for(mode: str) -> str | None:
    if mode == "temporal":
        return os.environ.get(TEMPORAL_VARIABLE) or None
    if mode == "postgres":
        return os.environ.get(POSTGRES_DSN_VARIABLE) or None
    return "(none needed)"


@dataclass
class PageRun:
    output: str
    namespace: dict[str, Any]
    skipped: list[Block]


After = Callable[[dict[str, Any], asyncio.AbstractEventLoop], None]


def run_page(
    page: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, after: After | None = None
) -> PageRun:
    """Check every ```python block of ``page`` and run those that can run; then ``after``, with
    the page's namespace, on the page's event loop."""
    page_blocks = python_blocks(page)
    declared = declared_setup(page)
    factory = SETUPS.get(page)
    assert (declared is None) == (factory is None), (
        f"{page}: a page with a <!-- docs-setup: ... --> comment needs a setup in "
        "tests/docs_setups.py, and a setup there needs the comment"
    )
    names, alone = declared or (set[str](), False)
    monkeypatch.chdir(tmp_path)
    loop = asyncio.new_event_loop()
    output = io.StringIO()
    skipped: list[Block] = []
    namespace: dict[str, Any] = {}
    defined: set[str] = set()
    setup = Setup({})
    try:
        with contextlib.ExitStack() as page_stack:
            for number, block in enumerate(page_blocks):
                if number == 0 or alone:  # a fresh setup for the page, or for each block
                    stack = page_stack.enter_context(contextlib.ExitStack())
                    setup = enter_setup(page, loop, stack, names) if factory else Setup({})
                    for variable, value in setup.env.items():
                        monkeypatch.setenv(variable, value)
                    namespace = {"__name__": "__main__", **setup.names}
                    defined = set(namespace)
                tree = check_block(block, defined)
                defined |= bound_names(tree)
                if block.mode == "compile":
                    continue
                if server_for(block.mode) is None:
                    skipped.append(block)
                    continue
                target = rewritten(block, setup.literals) if block.mode != "run" else block
                with contextlib.redirect_stdout(output):
                    execute(target, namespace, loop)
            if after is not None:
                after(namespace, loop)
            loop.run_until_complete(close_stores(namespace))
    finally:
        loop.run_until_complete(cancel_tasks(asyncio.all_tasks(loop)))  # a server's watcher
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return PageRun(output.getvalue(), namespace, skipped)


def enter_setup(
    page: str, loop: asyncio.AbstractEventLoop, stack: contextlib.ExitStack, names: set[str]
) -> Setup:
    manager = SETUPS[page](servers())
    setup = loop.run_until_complete(manager.__aenter__())
    stack.callback(lambda: loop.run_until_complete(manager.__aexit__(None, None, None)))
    assert set(setup.names) == names, (
        f"{page}'s <!-- docs-setup --> comment lists {sorted(names)}; its setup defines "
        f"{sorted(setup.names)}"
    )
    return setup


def execute(block: Block, namespace: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    code = compiled(block)
    if code.co_flags & inspect.CO_COROUTINE:
        loop.run_until_complete(eval(code, namespace))  # noqa: S307 - the docs' own code
    else:
        exec(code, namespace)  # noqa: S102


async def cancel_tasks(tasks: set[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def close_stores(namespace: dict[str, Any]) -> None:
    for value in namespace.values():
        if isinstance(value, ConversationStore) and not isinstance(value, type):
            await value.close()


def skip_for_servers(page: str, run: PageRun) -> None:
    """When blocks of the page need a server that is not set up: skip (fail in CI), saying so."""
    for block in run.skipped:
        variable = TEMPORAL_VARIABLE if block.mode == "temporal" else POSTGRES_DSN_VARIABLE
        server_address(variable, f"block at {block.where} (the other blocks of {page} ran)")


PYTHON_PAGES = [page for page in PAGES if python_blocks(page)]
EXPECTED_OUTPUT: dict[str, list[str]] = {
    "docs/getting-started.md": [
        "I found the duplicate charge and refunded it.",
        "billing",
        "triage -> billing : The user was charged twice this month.",
        "triage : You're welcome! Anything else?",
        "billing : It is in the app, under Billing. | handoffs: 1",
        "billing : Done: I sent it to your email address. | handoffs: 0",
        "[triage -> billing] The user wants this month's invoice.",
        "billing: Your invoice is in the app, under Billing.",
    ],
    "docs/outputs-and-streaming.md": ["billing: I found the duplicate charge and refunded it."],
}


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_page_code_runs(page: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = run_page(page, monkeypatch, tmp_path)
    if page in EXPECTED_OUTPUT:
        assert run.output.splitlines() == EXPECTED_OUTPUT[page]
    shown = [b for b in blocks(page) if b.mode == "output"]
    if shown:  # each block shows what the code above it printed since the block before
        lines = [line for block in shown for line in block.code.strip("\n").splitlines()]
        assert run.output.splitlines() == lines, [block.where for block in shown]
    skip_for_servers(page, run)


def test_every_page_is_checked() -> None:
    """Every page with Python code is in the run above, and every setup belongs to a page."""
    assert set(SETUPS) <= set(PYTHON_PAGES), sorted(set(SETUPS) - set(PYTHON_PAGES))
    assert len(PYTHON_PAGES) >= 18
    assert sum(len(python_blocks(page)) for page in PAGES) >= 71


# -- the AG-UI request the serving page shows ---------------------------------------------------


def documented_request(page: str, path: str) -> tuple[dict[str, str], str]:
    """The headers and body of the page's ``curl`` to ``path``."""
    [command] = [
        " ".join(block.code.replace("\\\n", " ").split())
        for block in blocks(page)
        if block.lang == "bash" and f"{path} " in block.code and "curl" in block.code
    ]
    words = shlex.split(command)
    headers = {
        name.strip(): value.strip()
        for i, word in enumerate(words)
        if word == "-H"
        for name, value in [words[i + 1].split(":", 1)]
    }
    return headers, words[words.index("-d") + 1]


def test_the_agui_request_of_the_serving_page_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The request the page shows, sent to the app the page builds: the handoff and billing's
    reply stream back; the next run, the thread sent again as the page says, starts at billing."""
    import httpx

    headers, body = documented_request("docs/serving.md", "localhost:8000/desk")
    sent: list[list[dict[str, Any]]] = []

    def post(namespace: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        async def run(payload: str, **extra: str) -> list[dict[str, Any]]:
            transport = httpx.ASGITransport(app=namespace["app"])
            async with httpx.AsyncClient(transport=transport, base_url="http://desk") as client:
                answer = await client.post("/desk", content=payload, headers={**headers, **extra})
            assert answer.status_code == 200, answer.text
            return [
                json.loads(line.removeprefix("data: "))
                for line in answer.text.splitlines()
                if line.startswith("data: ")
            ]

        first = loop.run_until_complete(run(body))
        sent.append(first)
        [snapshot] = [e["messages"] for e in first if e["type"] == "MESSAGES_SNAPSHOT"]
        thread = json.loads(body)
        thread["runId"] = "run-2"
        thread["messages"] = [
            *snapshot,
            {"id": "m2", "role": "user", "content": "When do I get it back?"},
        ]
        sent.append(loop.run_until_complete(run(json.dumps(thread))))
        refused = loop.run_until_complete(
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=namespace["app"]), base_url="http://desk"
            ).post("/desk", content=body, headers={**headers, "X-API-Key": "wrong"})
        )
        assert refused.status_code == 401

    run_page("docs/serving.md", monkeypatch, tmp_path, after=post)
    first, second = sent
    assert [e["type"] for e in (first[0], first[-1])] == ["RUN_STARTED", "RUN_FINISHED"]
    assert [e["toolCallName"] for e in first if e["type"] == "TOOL_CALL_START"] == [
        "handoff_to_billing"
    ]
    said = "".join(e["delta"] for e in first if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said == "I found the duplicate charge and refunded it."
    assert [e["type"] for e in second if e["type"] == "TOOL_CALL_START"] == []  # remembered
    said = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert said == "I found the duplicate charge and refunded it."


# -- the shell commands and the output the pages show ------------------------------------------


def shell_commands() -> list[tuple[str, list[str]]]:
    """Every command of a ```bash block, or of a ``$ `` line of a plain block: (where, words)."""
    found: list[tuple[str, list[str]]] = []
    for page in PAGES:
        for block in blocks(page):
            if block.lang not in ("bash", ""):
                continue
            lines = block.code.replace("\\\n", " ").splitlines()
            if block.lang == "":
                lines = [line[2:] for line in lines if line.startswith("$ ")]
            pending = ""
            for line in lines:
                pending += line + "\n"
                try:  # a quoted argument may go on over several lines
                    shlex.split(pending, comments=True)
                except ValueError:
                    continue
                line, pending = pending, ""
                for command in line.split("&&"):
                    words = shlex.split(command, comments=True)
                    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                        words.pop(0)  # VARIABLE=value before the command
                    if words:
                        found.append((block.where, words))
    return found


def _run_help(program: list[str]) -> None:
    if program[0] == "handoff-builder":
        from handoff_builder.cli import main

        main([*program[1:], "--help"])
    elif program[0] == "-m":
        sys.argv = [program[1], "--help"]
        runpy.run_module(program[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = [program[0], "--help"]
        runpy.run_path(str(ROOT / program[0]), run_name="__main__")


def help_text(program: list[str]) -> str:
    """What ``program --help`` prints, run in this process; fails unless it exits with 0."""
    out, argv = io.StringIO(), sys.argv
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
            _run_help(program)
    finally:
        sys.argv = argv
    assert exited.value.code in (0, None), f"{' '.join(program)} --help: {exited.value}"
    return out.getvalue()


def checked_program(words: list[str]) -> list[str] | None:
    """The program of a command whose ``--help`` this test reads (``None``: checked otherwise)."""
    if words[0] == "handoff-builder":
        subcommand = next((w for w in words[1:] if not w.startswith("-")), None)
        return ["handoff-builder", *([subcommand] if subcommand else [])]
    if _PYTHON.fullmatch(words[0]) and len(words) > 1:
        if words[1] == "-m" and words[2].startswith("samples."):
            return ["-m", words[2]]
        if words[1].startswith("samples/"):
            return [words[1]]
    return None


_PYTHON = re.compile(r"(\.venv/bin/)?python3?")


class CommandCheck:
    """Checks one command of a page; each ``check_*`` returns whether it knew the command."""

    def __init__(self) -> None:
        self.makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
        metadata = importlib.metadata.metadata("handoff-builder")
        self.extras = set(metadata.get_all("Provides-Extra") or [])
        self.helps: dict[tuple[str, ...], str] = {}

    def check(self, where: str, words: list[str]) -> bool:
        return (
            self.check_program(where, words)
            or self.check_make(where, words)
            or self.check_script(where, words)
            or self.check_extras(where, words)
        )

    def check_program(self, where: str, words: list[str]) -> bool:
        program = checked_program(words)
        if program is None:
            return False
        key = tuple(program)
        if key not in self.helps:
            self.helps[key] = help_text(program)
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert re.search(rf"{re.escape(option)}\b", self.helps[key]), (
                f"{where}: {' '.join(program)} has no option {option}"
            )
        return True

    def check_make(self, where: str, words: list[str]) -> bool:
        if words[0] != "make":
            return False
        target = re.escape(words[1])
        assert re.search(rf"^{target}:", self.makefile, re.M), f"{where}: no make {words[1]}"
        return True

    def check_script(self, where: str, words: list[str]) -> bool:
        if words[0] != "bash" and not _PYTHON.fullmatch(words[0]):
            return False
        script = next((w for w in words[1:] if w.endswith((".sh", ".py"))), None)
        if script is None or script == "app.py":  # observability.md's app.py is the reader's
            return False
        assert (ROOT / script).is_file(), f"{where}: {script} does not exist"
        source = (ROOT / script).read_text(encoding="utf-8")
        for option in (w for w in words if w.startswith("--")):
            assert option in source, f"{where}: {script} has no option {option}"
        return True

    def check_extras(self, where: str, words: list[str]) -> bool:
        if words[:2] != ["pip", "install"]:
            return False
        asked = [
            set(found[1].split(","))
            for word in words[2:]
            if (found := re.search(r"\[([\w,]+)\]", word))
            and ("." in word.split("[")[0] or word.startswith("dist/"))  # this package's
        ]
        for extras in asked:
            unknown = extras - self.extras
            assert not unknown, f"{where}: no extra {', '.join(sorted(unknown))}"
        return bool(asked)


def test_the_documented_commands_exist() -> None:
    """``handoff-builder``, the samples, ``make`` targets, scripts and extras the pages name
    exist, and every ``--option`` shown is one their ``--help`` lists."""
    check = CommandCheck()
    checked = [where for where, words in shell_commands() if check.check(where, words)]
    assert len(checked) >= 30


def test_the_demo_prints_what_the_readme_shows() -> None:
    """The README's demo output is what ``handoff-builder demo`` prints (``...`` cuts a line)."""
    [shown] = [b for b in blocks("README.md") if b.lang == "" and "user: Hi" in b.code]
    ran = subprocess.run(  # noqa: S603 - our own command
        [str(Path(sys.executable).parent / "handoff-builder"), "demo"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    printed = ran.stdout.splitlines()
    expected = [line for line in shown.code.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(printed) if line == expected[0])
    for doc_line, line in zip(expected, printed[start:], strict=False):
        if doc_line.endswith(" ..."):
            assert line.startswith(doc_line.removesuffix(" ...")), (doc_line, line)
        else:
            assert line == doc_line


def test_the_chat_session_of_the_cli_page(tmp_path: Path) -> None:
    """docs/cli.md's first session, typed into ``handoff-builder chat`` (on a store of its own):
    the lines it shows are the lines it prints, and the second run starts at billing."""
    [session] = [
        b for b in blocks("docs/cli.md") if "$ handoff-builder chat --conversation me" in b.code
    ]
    runs: list[tuple[list[str], list[str], list[str]]] = []  # command, input, output
    for line in session.code.splitlines():
        if line.startswith("$ "):
            runs.append((shlex.split(line[2:]), [], []))
        elif line.startswith("> "):
            runs[-1][1].append(line[2:])
        elif line.strip():
            runs[-1][2].append(line)
    assert len(runs) == 2
    for command, typed, shown in runs:
        ran = subprocess.run(  # noqa: S603 - our own command
            [str(Path(sys.executable).parent / command[0]), *command[1:],
             "--store", f"sqlite:{tmp_path / 'chat.db'}"],
            input="".join(f"{text}\n" for text in typed),
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        assert ran.stdout.splitlines() == shown


def _anchors(path: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub and mkdocs make them."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", path.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_the_links_between_pages_lead_somewhere() -> None:
    """Every relative link of a page names a file that exists, and a heading of it after ``#``."""
    broken: list[str] = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            path = (ROOT / page).parent / file if file else ROOT / page
            if not path.exists():
                broken.append(f"{page}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
