"""The ``handoff-builder`` command line: ``demo``, ``chat`` and ``graph``."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .exceptions import HandoffBuilderError
from .providers import PROVIDERS

if TYPE_CHECKING:
    from ._builder import HandoffWorkflowBuilder

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="handoff-builder",
        description="Multi-agent handoff orchestration on Microsoft Agent Framework.",
    )
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
        "(OPENAI_API_KEY) or azure (AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_DEPLOYMENT)",
    )
    chat.add_argument(
        "--store",
        default="sqlite:handoff-chat.db",
        help="where conversations live: sqlite:PATH (default sqlite:handoff-chat.db), "
        "postgresql://..., or memory",
    )
    chat.add_argument("--conversation", default="cli", help="the conversation id (default: cli)")
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


def _stdin_lines() -> Iterator[str]:
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:
            return
        yield line


async def _chat(provider: str, store_spec: str, conversation: str) -> None:
    from ._hosting import ConversationHost
    from ._support_desk import chat, open_store, support_desk

    store = open_store(store_spec)
    try:
        await chat(ConversationHost(support_desk(provider), store), conversation, _stdin_lines())
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from ._demo import run_demo

            asyncio.run(run_demo(sys.stdout))
        elif args.command == "chat":
            asyncio.run(_chat(args.provider, args.store, args.conversation))
        else:
            _graph(args.builder, args.workflow)
    except (HandoffBuilderError, ValueError) as error:
        sys.stderr.write(f"handoff-builder: error: {error}\n")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
