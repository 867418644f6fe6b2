"""What the other frameworks' eval adapters share: their cases run one after another."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Sequence

from handoff_builder.evals import CaseResult, EvalCase, EvalReport

__all__ = ["run_one_by_one"]


async def run_one_by_one(
    cases: Sequence[EvalCase], run_case: Callable[[EvalCase], Awaitable[CaseResult]], name: str
) -> EvalReport:
    """Every case, one after another (a local model serves one request at a time).

    A progress line goes to standard error after each.
    """
    results: list[CaseResult] = []
    began = time.monotonic()
    for case in cases:
        results.append(await run_case(case))
        right = sum(r.correct for r in results)
        sys.stderr.write(
            f"{name}: {len(results)}/{len(cases)} turns run, {right} right, "
            f"{time.monotonic() - began:.0f} s\n"
        )
    return EvalReport(tuple(results))
