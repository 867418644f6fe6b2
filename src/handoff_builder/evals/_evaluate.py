"""``evaluate``: run cases and return their report; ``assert_routing_accuracy`` for tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from handoff_builder._builder import HandoffWorkflowBuilder

from ._cases import EvalCase, load_cases
from ._run import DEFAULT_CONCURRENCY, run_cases
from ._summary import EvalReport, ordered

__all__ = ["assert_routing_accuracy", "evaluate"]


async def evaluate(
    workflow: HandoffWorkflowBuilder,
    cases: Sequence[EvalCase] | str | Path,
    *,
    repeat: int = 1,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> EvalReport:
    """Run every case (``repeat`` times, at most ``concurrency`` at once) and report.

    ``cases`` are :class:`EvalCase` values or the path of a JSON Lines case file. Each case is a
    new conversation of ``workflow``; the builder is not changed.

    Raises:
        EvalCaseError: a case file or a case that cannot be run (its line, what is wrong).
        ModelConnectionError: an agent's model could not be reached.
    """
    source = "<cases>"
    if isinstance(cases, (str, Path)):
        source, cases = str(cases), load_cases(cases)
    results = [
        result
        async for result in run_cases(
            workflow, cases, repeat=repeat, concurrency=concurrency, source=source
        )
    ]
    return EvalReport(ordered(results, cases), runs=repeat)


async def assert_routing_accuracy(
    workflow: HandoffWorkflowBuilder,
    cases: Sequence[EvalCase] | str | Path,
    minimum: float,
    *,
    repeat: int = 1,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> EvalReport:
    """Run the cases and fail the test when the routing accuracy is below ``minimum``.

    ``minimum`` is a fraction (``0.8`` for 80%). The ``AssertionError`` holds the whole summary
    (the confusion matrix and the wrong answers among it). Returns the report otherwise.
    """
    report = await evaluate(workflow, cases, repeat=repeat, concurrency=concurrency)
    report.assert_accuracy(minimum)
    return report
