"""The ``handoff-builder`` command line: ``demo``, ``chat`` and ``graph``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator, Sequence

from .exceptions import HandoffBuilderError
from .providers import PROVIDERS

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
        description="Print the handoff graph of a built-in workflow as a Mermaid flowchart.",
    )
    graph.add_argument(
        "--workflow",
        choices=("support-desk", "demo"),
        default="support-desk",
        help="support-desk (what chat runs; the default) or demo (what demo runs)",
    )
    return parser


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
            from ._demo import demo_builder
            from ._support_desk import support_desk

            builder = support_desk() if args.workflow == "support-desk" else demo_builder()
            sys.stdout.write(builder.to_mermaid())
    except (HandoffBuilderError, ValueError) as error:
        sys.stderr.write(f"handoff-builder: error: {error}\n")
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
