"""The ``handoff-builder`` command line: ``demo``, ``chat`` and ``graph``."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from .exceptions import HandoffBuilderError
from .providers import PROVIDERS

if TYPE_CHECKING:
    from ._builder import HandoffWorkflowBuilder

__all__ = ["main"]


def default_store() -> str:
    """The chat's default store: a SQLite file in the user's data directory."""
    import platformdirs

    folder = platformdirs.user_data_path("handoff-builder", appauthor=False)
    return f"sqlite:{folder / 'chat.db'}"


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="handoff-builder",
        description="Multi-agent handoff orchestration on Microsoft Agent Framework.",
    )
    parser.add_argument("--version", action="version", version=f"handoff-builder {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the whole traceback of an error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo",
        help="run the offline customer-support demo (triage -> billing -> refunds)",
        description="Play a customer-support conversation on the scripted model, offline, "
        "printing each speaking agent and each handoff.",
    )
    chat = commands.add_parser(
        "chat",
        help="chat with the support desk (triage, billing, tech), remembered between runs",
        description="An interactive chat with the support desk workflow. Shows which agent "
        "speaks and every handoff. The conversation (and the agent you were talking to) is "
        "kept in the store, so running the command again continues it.",
    )
    chat.add_argument(
        "--provider",
        choices=PROVIDERS,
        default="scripted",
        help="the model: scripted (offline, keyword-driven; the default), openai "
        "(OPENAI_API_KEY) or azure (AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_MODEL)",
    )
    chat.add_argument(
        "--store",
        default=None,
        help="where conversations live: sqlite:PATH, postgresql://..., or memory (default: "
        "sqlite:chat.db in your data directory, e.g. ~/.local/share/handoff-builder)",
    )
    chat.add_argument("--conversation", default="cli", help="the conversation id (default: cli)")
    chat.add_argument(
        "--max-output-tokens",
        type=int,
        default=None,
        metavar="N",
        help="output tokens one model response may use (default: "
        "HANDOFF_BUILDER_MAX_OUTPUT_TOKENS, else 1024)",
    )
    chat.add_argument(
        "--idle-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after this long without a message the conversation starts again at triage "
        "(default: 30 minutes)",
    )
    graph = commands.add_parser(
        "graph",
        help="print a workflow's handoff graph as Mermaid",
        description="Print the handoff graph of your builder (module:attribute) or of a built-in "
        "workflow as a Mermaid flowchart; the topology lint's findings go to stderr.",
    )
    graph.add_argument(
        "builder",
        nargs="?",
        metavar="MODULE:ATTRIBUTE",
        help="your HandoffWorkflowBuilder, or a function that returns one, e.g. "
        "myapp.desk:builder (imported with the current directory on the path)",
    )
    graph.add_argument(
        "--workflow",
        choices=("support-desk", "demo"),
        default="support-desk",
        help="without MODULE:ATTRIBUTE, a built-in workflow: support-desk (what chat runs; the "
        "default) or demo (what demo runs)",
    )
    return parser


def _load_builder(spec: str) -> HandoffWorkflowBuilder:
    """The builder ``module:attribute`` names (an attribute path; a function is called)."""
    import importlib
    import os

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected MODULE:ATTRIBUTE (e.g. myapp.desk:builder), got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: object = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r}: {error}") from error
    except (Exception, SystemExit) as error:  # the module's own code failed, or exited
        raise ValueError(
            f"importing {module_name!r} raised {type(error).__name__}: {error}"
        ) from error
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    return _called(value, spec)


def _called(value: object, spec: str) -> HandoffWorkflowBuilder:
    """``value`` as a builder: itself, or what calling it (a plain function) returns."""
    from ._builder import HandoffWorkflowBuilder

    if callable(value) and not isinstance(value, HandoffWorkflowBuilder):
        try:
            value = value()
        except (Exception, SystemExit) as error:  # reported in one line
            raise ValueError(f"calling {spec} raised {type(error).__name__}: {error}") from error
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never awaited: say so plainly, not with a RuntimeWarning
            raise ValueError(f"{spec} is async; name a builder, or a plain function returning one")
    if not isinstance(value, HandoffWorkflowBuilder):
        raise ValueError(
            f"{spec} is an object of type {type(value).__name__}, not a HandoffWorkflowBuilder "
            "(or a function that returns one)"
        )
    return value


def _graph(spec: str | None, workflow: str) -> None:
    if spec is not None:
        builder = _load_builder(spec)
    else:
        from ._demo import demo_builder
        from ._support_desk import support_desk

        builder = support_desk() if workflow == "support-desk" else demo_builder()
    sys.stdout.write(builder.to_mermaid())
    for finding in builder.lint():
        sys.stderr.write(f"handoff-builder: lint: {finding}\n")


async def _stdin_lines() -> AsyncIterator[str]:
    """Lines of standard input, read in a daemon thread.

    The event loop stays free, so Ctrl-C at the prompt reaches it at once, and a reader blocked
    on the terminal never holds up the exit.
    """
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        try:
            while line := sys.stdin.readline():
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except (OSError, ValueError):  # stdin closed under the reader
            pass
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, name="handoff-builder-stdin", daemon=True).start()
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = await lines.get()
        if line is None:
            return
        yield line


async def _chat(
    provider: str,
    store_spec: str | None,
    conversation: str,
    idle_timeout: float | None,
    max_output_tokens: int | None,
) -> None:
    from pathlib import Path

    from ._hosting import DEFAULT_IDLE_TIMEOUT, ConversationHost
    from ._support_desk import chat, open_store, support_desk

    spec = store_spec or default_store()
    if store_spec is None:
        Path(spec.removeprefix("sqlite:")).parent.mkdir(parents=True, exist_ok=True)
    store = open_store(spec)
    idle = DEFAULT_IDLE_TIMEOUT if idle_timeout is None else idle_timeout
    try:
        desk = support_desk(provider, max_output_tokens)
        host = ConversationHost(desk, store, idle_timeout=idle)
        await chat(host, conversation, _stdin_lines())
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    Every error is one line on stderr and exit status 1 (``--debug`` shows the traceback);
    Ctrl-C ends the command quietly with status 130: a chat turn it interrupted is finished by
    the next ``chat``.
    """
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from ._demo import run_demo

            asyncio.run(run_demo(sys.stdout))
        elif args.command == "chat":
            asyncio.run(
                _chat(
                    args.provider,
                    args.store,
                    args.conversation,
                    args.idle_timeout,
                    args.max_output_tokens,
                )
            )
        else:
            _graph(args.builder, args.workflow)
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        return 130
    except Exception as error:
        if args.debug:
            raise
        sys.stderr.write(f"handoff-builder: error: {_one_line(error)}\n")
        return 1
    return 0


def _one_line(error: BaseException) -> str:
    """An error in one line: its message (the type too, for errors that are not ours)."""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, (HandoffBuilderError, ValueError)):
        return text
    return f"{type(error).__name__}: {text}"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
