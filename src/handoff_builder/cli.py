"""The ``handoff-builder`` command line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from ._demo import run_demo

        asyncio.run(run_demo(sys.stdout))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
