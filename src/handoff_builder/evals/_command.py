"""``handoff-builder eval``: run a case file and print the summary; ``eval record``: make cases.

The parser is ``cli.py``'s; this module runs what it parsed. Progress goes to standard error on
long runs, the summary to standard output; the files are written with ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import TextIO

from typing_extensions import override

from handoff_builder._builder import HandoffWorkflowBuilder
from handoff_builder._loading import builder_of, load_target, parameters_of

from ._cases import EvalCase, load_cases
from ._record import record_cases
from ._report import write_report
from ._run import CaseResult, run_cases
from ._summary import EvalReport, ordered, percent

__all__ = ["PROGRESS_AFTER", "PROGRESS_EVERY", "eval_command", "min_accuracy"]

RECORD = "record"
"""The word that makes ``eval`` record cases instead of running them."""
PROGRESS_AFTER = 2.0
"""Seconds a run goes on before progress is shown (a short run shows none)."""
PROGRESS_EVERY = 5.0
"""Seconds between progress lines when standard error is not a terminal."""
_LINT = "handoff workflow lint"
"""How the builder's lint warnings begin (they are logged during an eval too)."""
_RUN_OPTIONS = ("workflow", "provider", "max_output_tokens", "out", "min_accuracy")
_RECORD_OPTIONS = ("store", "conversation", "redact")


def min_accuracy(text: str) -> float:
    """``--min-accuracy``: a fraction from 0 to 1 (``0.8``) or a percentage (``80%``)."""
    raw = text.strip()
    scale = 100 if raw.endswith("%") else 1
    try:
        value = float(raw.removesuffix("%")) / scale
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(
            f"expected a fraction from 0 to 1 (0.8) or a percentage (80%), got {text!r}"
        )
    return value


def eval_command(args: argparse.Namespace) -> int:
    """Run ``eval`` (or ``eval record``) as parsed; the exit status."""
    if args.cases == RECORD:
        _refuse(args, _RUN_OPTIONS, "eval record")
        if args.store is None or args.conversation is None:
            raise ValueError("eval record needs --store and --conversation")
        spec: str = args.store
        if spec.startswith("sqlite:") and not Path(spec.removeprefix("sqlite:")).is_file():
            raise ValueError(f"--store {spec}: there is no file {spec.removeprefix('sqlite:')}")
        return asyncio.run(_record(spec, args.conversation, redact=args.redact))
    _refuse(args, _RECORD_OPTIONS, "eval CASES.jsonl (they are eval record's)")
    cases = load_cases(args.cases)
    builder = _builder(args)
    with _turns_not_logged():
        results = asyncio.run(_run(builder, cases, args))
    report = EvalReport(ordered(results, cases), runs=args.repeat)
    sys.stdout.write(report.summary())
    if args.out is not None:
        _, page, _ = write_report(report, args.out)
        sys.stdout.write(f"report: {page} (with results.jsonl and confusion.svg)\n")
    if args.min_accuracy is not None and report.accuracy < args.min_accuracy:
        shown = percent(report.correct, report.total)
        sys.stderr.write(
            f"handoff-builder: error: routing accuracy {shown} is below --min-accuracy "
            f"{100 * args.min_accuracy:g}%\n"
        )
        return 1
    return 0


def _refuse(args: argparse.Namespace, options: tuple[str, ...], what: str) -> None:
    given = [name for name in options if getattr(args, name) not in (None, False)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        are = "is not an option" if len(given) == 1 else "are not options"
        raise ValueError(f"{flags} {are} of {what}")


def _builder(args: argparse.Namespace) -> HandoffWorkflowBuilder:
    """The workflow to run: the one ``--workflow`` names, else the built-in support desk.

    ``--provider`` and ``--max-output-tokens`` are passed to a function that takes them as
    keyword arguments (the support desk's ``support_desk`` does).
    """
    arguments = {
        name: getattr(args, name)
        for name in ("provider", "max_output_tokens")
        if getattr(args, name) is not None
    }
    if args.workflow is None:
        from handoff_builder._support_desk import support_desk

        return builder_of(support_desk, "the support desk", arguments)
    value = load_target(args.workflow)
    if arguments:
        taken = parameters_of(value)
        flags = ", ".join("--" + name.replace("_", "-") for name in arguments)
        if taken is None:
            raise ValueError(
                f"{flags} {'is' if len(arguments) == 1 else 'are'} passed to a function that "
                f"makes the workflow; {args.workflow} is a builder"
            )
        missing = [name for name in arguments if name not in taken]
        if missing:
            raise ValueError(
                f"{flags}: {args.workflow} takes no parameter named {', '.join(missing)}"
            )
    return builder_of(value, args.workflow, arguments)


async def _run(
    builder: HandoffWorkflowBuilder, cases: list[EvalCase], args: argparse.Namespace
) -> list[CaseResult]:
    results: list[CaseResult] = []
    progress = _Progress(len(cases) * args.repeat, sys.stderr)
    runs = run_cases(
        builder, cases, repeat=args.repeat, concurrency=args.concurrency, source=args.cases
    )
    async for result in runs:
        results.append(result)
        progress.show(results)
    progress.end()
    return results


async def _record(spec: str, conversation_id: str, *, redact: bool) -> int:
    from handoff_builder._support_desk import open_store

    store = open_store(spec)
    try:
        cases = await record_cases(store, conversation_id, redact=redact)
    finally:
        await store.close()
    for case in cases:
        sys.stdout.write(json.dumps(case.to_json(), ensure_ascii=False) + "\n")
    return 0


class _TurnWarnings(logging.Filter):
    """Drops the warnings of the turns themselves (a refused handoff, an escalation)."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.WARNING or str(record.msg).startswith(_LINT)


@contextlib.contextmanager
def _turns_not_logged() -> Generator[None, None, None]:
    """While cases run, the summary counts what each turn would log; the lint is still logged."""
    logger, kept = logging.getLogger("handoff_builder"), _TurnWarnings()
    logger.addFilter(kept)
    try:
        yield
    finally:
        logger.removeFilter(kept)


class _Progress:
    """Progress on standard error, once a run has gone on for :data:`PROGRESS_AFTER` seconds.

    On a terminal one line is rewritten after every turn; elsewhere (a log, a CI job) a line is
    written every :data:`PROGRESS_EVERY` seconds.
    """

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = total
        self.out = out
        self.began = time.monotonic()
        self.last: float | None = None
        self.terminal = out.isatty()

    def show(self, results: list[CaseResult]) -> None:
        now = time.monotonic()
        if now - self.began < PROGRESS_AFTER or len(results) == self.total:
            return
        if not self.terminal and self.last is not None and now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        right = sum(result.correct for result in results)
        line = (
            f"handoff-builder: eval: {len(results)}/{self.total} turns run, {right} right "
            f"({percent(right, len(results))}), {now - self.began:.0f} s"
        )
        self.out.write(f"\r{line}\x1b[K" if self.terminal else f"{line}\n")
        self.out.flush()

    def end(self) -> None:
        if self.terminal and self.last is not None:
            self.out.write("\r\x1b[K")
            self.out.flush()
