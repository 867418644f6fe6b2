"""An eval's figures, computed from its results: accuracy, the confusion matrix, edges, hops...

:class:`EvalReport` holds the results of every case in every run and computes each figure from
them on demand (nothing is counted twice); :meth:`EvalReport.summary` is the text the CLI prints.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ._run import ESCALATED, FAILED, NO_ANSWER, CaseResult

__all__ = ["EdgeFigures", "EvalReport", "percent"]

_LAST_COLUMNS = (ESCALATED, NO_ANSWER, FAILED)
_SHOWN_MISSES = 10


def percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a percentage with one decimal (``"50.0%"``)."""
    return f"{100 * part / whole:.1f}%" if whole else "-"


@dataclass(frozen=True)
class EdgeFigures:
    """One handoff edge, over every run.

    It was ``taken`` times, ``right`` of them in turns the expected agent answered; the cases'
    ``expect.path`` hold it ``expected`` times, and the case's turn took it ``found`` of them.
    """

    source: str
    target: str
    taken: int
    right: int
    expected: int
    found: int


@dataclass(frozen=True)
class EvalReport:
    """The results of an eval: every case's turn in every run (``runs`` of them), in order."""

    results: tuple[CaseResult, ...]
    runs: int = 1

    # -- the figures ------------------------------------------------------------------------------

    @property
    def correct(self) -> int:
        """Turns the expected agent answered, over every run."""
        return sum(result.correct for result in self.results)

    @property
    def total(self) -> int:
        """Turns run: cases times runs."""
        return len(self.results)

    @property
    def accuracy(self) -> float:
        """``correct / total``, from 0 to 1."""
        return self.correct / self.total if self.total else 0.0

    @property
    def run_accuracies(self) -> tuple[float, ...]:
        """The accuracy of each run, in order."""
        by_run = [[r for r in self.results if r.run == run] for run in range(1, self.runs + 1)]
        return tuple(sum(r.correct for r in rs) / len(rs) if rs else 0.0 for rs in by_run)

    @property
    def agents(self) -> tuple[str, ...]:
        """The matrix's columns: the expected agents, the others that answered, then no agent.

        The last are :data:`ESCALATED`, :data:`NO_ANSWER` and :data:`FAILED`, when they occur.
        """
        expected = sorted({r.case.expect.agent for r in self.results})
        others = sorted({r.answered for r in self.results} - set(expected) - set(_LAST_COLUMNS))
        last = [label for label in _LAST_COLUMNS if any(r.answered == label for r in self.results)]
        return (*expected, *others, *last)

    @property
    def expected_agents(self) -> tuple[str, ...]:
        """The matrix's rows: the expected agents, sorted."""
        return tuple(sorted({r.case.expect.agent for r in self.results}))

    def confusion(self) -> dict[str, dict[str, int]]:
        """Turns by expected agent (rows) and the agent that answered (columns), every cell."""
        counts = Counter((r.case.expect.agent, r.answered) for r in self.results)
        return {
            row: {column: counts[row, column] for column in self.agents}
            for row in self.expected_agents
        }

    def edges(self) -> tuple[EdgeFigures, ...]:
        """Every edge a turn took or a case expected, sorted."""
        taken: Counter[tuple[str, str]] = Counter()
        right: Counter[tuple[str, str]] = Counter()
        expected: Counter[tuple[str, str]] = Counter()
        found: Counter[tuple[str, str]] = Counter()
        for result in self.results:
            steps = Counter(itertools.pairwise(result.path))
            taken.update(steps)
            if result.correct:
                right.update(steps)
            path = result.case.expect.path or ()
            wanted = Counter(itertools.pairwise(path))
            expected.update(wanted)
            found.update(wanted & steps)
        return tuple(
            EdgeFigures(edge[0], edge[1], taken[edge], right[edge], expected[edge], found[edge])
            for edge in sorted(set(taken) | set(expected))
        )

    def misses(self) -> tuple[CaseResult, ...]:
        """The turns the expected agent did not answer, in order."""
        return tuple(r for r in self.results if not r.correct)

    def unsteady(self) -> tuple[str, ...]:
        """Ids of the cases answered by different agents across runs."""
        answers: dict[str, set[str]] = {}
        for result in self.results:
            answers.setdefault(result.case.id, set()).add(result.answered)
        return tuple(case for case, seen in answers.items() if len(seen) > 1)

    def checks(self, which: str) -> tuple[int, int]:
        """``(passed, checked)`` of the ``"path"`` or ``"goal"`` checks."""
        values = [r.path_ok if which == "path" else r.goal_ok for r in self.results]
        checked = [v for v in values if v is not None]
        return sum(checked), len(checked)

    # -- the text ---------------------------------------------------------------------------------

    def summary(self) -> str:
        """The summary the CLI prints; its first line is ``routing accuracy: C/T (P%)``."""
        accuracy = f"{self.correct}/{self.total} ({percent(self.correct, self.total)})"
        lines = [f"routing accuracy: {accuracy}", *self._matrix_lines(), *self._edge_lines()]
        lines += [f"{label}: {value}" for label, value in self.figures()]
        lines += self._miss_lines()
        return "\n".join(lines) + "\n"

    def figures(self) -> list[tuple[str, str]]:
        """The figures besides accuracy, matrix and edges, as ``(label, value)`` texts."""
        shown = [
            ("hops per turn", self._hops()),
            ("refused handoff attempts", self._refused()),
            ("escalations", self._escalations()),
            ("goal checks", self._checked("goal")),
            ("path checks", self._checked("path")),
            ("latency per turn", self._latency()),
            ("tokens per turn", self._tokens()),
            ("runs", self._runs()),
        ]
        if self.runs > 1:
            unsteady = self.unsteady()
            listed = f"{len(unsteady)} ({', '.join(unsteady) or 'none'})"
            shown.append(("cases answered differently across runs", listed))
        return shown

    def _matrix_lines(self) -> list[str]:
        columns = self.agents
        matrix = self.confusion()
        corner = "expected \\ answered"
        first = max(len(corner), *(len(row) for row in matrix))
        widths = [max(len(c), *(len(str(matrix[r][c])) for r in matrix)) for c in columns]
        header = "  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))
        lines = [
            "confusion matrix (rows: the expected agent; columns: the agent that answered):",
            f"  {corner.ljust(first)}  {header}",
        ]
        for row, cells in matrix.items():
            shown = "  ".join(str(cells[c]).rjust(w) for c, w in zip(columns, widths, strict=True))
            lines.append(f"  {row.ljust(first)}  {shown}")
        right = ", ".join(
            f"{row} {cells[row]}/{sum(cells.values())} ({percent(cells[row], sum(cells.values()))})"
            for row, cells in matrix.items()
        )
        lines.append(f"per expected agent: {right}")
        return lines

    def _edge_lines(self) -> list[str]:
        edges = self.edges()
        if not edges:
            return ["handoff edges: none taken, none expected"]
        heads = ("edge", "taken", "right", "expected", "found")
        rows = [
            (f"{e.source} -> {e.target}", *map(str, (e.taken, e.right, e.expected, e.found)))
            for e in edges
        ]
        widths = [max(len(row[i]) for row in (heads, *rows)) for i in range(len(heads))]
        lines = [
            "handoff edges (right: taken in turns the expected agent answered; expected: in "
            "expect.path; found: taken where expected):"
        ]
        for row in (heads, *rows):
            cells = [row[0].ljust(widths[0])]
            cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
            lines.append("  " + "  ".join(cells))
        return lines

    def _hops(self) -> str:
        hops = [len(r.handoffs) for r in self.results]
        spread = Counter(hops)
        each = ", ".join(f"{n}: {spread[n]}" for n in sorted(spread))
        return f"mean {statistics.fmean(hops):.2f}, max {max(hops)} (turns by hops: {each})"

    def _refused(self) -> str:
        refused = [attempt for r in self.results for attempt in r.refused]
        if not refused:
            return "0"
        turns = sum(bool(r.refused) for r in self.results)
        reasons = Counter(attempt.reason for attempt in refused)
        shown = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
        return f"{len(refused)} in {turns} turn{'s' if turns > 1 else ''} ({shown})"

    def _escalations(self) -> str:
        reasons = Counter(r.escalation.reason for r in self.results if r.escalation is not None)
        if not reasons:
            return "0"
        shown = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
        return f"{sum(reasons.values())} ({shown})"

    def _checked(self, which: str) -> str:
        passed, checked = self.checks(which)
        if not checked:
            field = "expect.goal_contains" if which == "goal" else "expect.path"
            return f"none ({field} in no case)"
        return f"{passed}/{checked} passed ({percent(passed, checked)})"

    def _latency(self) -> str:
        seconds = sorted(r.seconds for r in self.results)
        p95 = seconds[min(len(seconds) - 1, math.ceil(0.95 * len(seconds)) - 1)]
        return (
            f"mean {statistics.fmean(seconds):.2f} s, median {statistics.median(seconds):.2f} s, "
            f"p95 {p95:.2f} s, max {seconds[-1]:.2f} s"
        )

    def _tokens(self) -> str:
        reported = [
            r for r in self.results if r.input_tokens is not None or r.output_tokens is not None
        ]
        if not reported:
            return "not reported by the provider"
        tokens_in = statistics.fmean(r.input_tokens or 0 for r in reported)
        tokens_out = statistics.fmean(r.output_tokens or 0 for r in reported)
        return (
            f"{tokens_in:.0f} in, {tokens_out:.0f} out (mean of {len(reported)} "
            f"turn{'s' if len(reported) > 1 else ''} that reported them)"
        )

    def _runs(self) -> str:
        if self.runs == 1:
            return "1"
        accuracies = self.run_accuracies
        each = ", ".join(f"{100 * a:.1f}%" for a in accuracies)
        spread = 100 * (max(accuracies) - min(accuracies))
        stdev = 100 * statistics.pstdev(accuracies)
        return (
            f"{self.runs} (accuracy per run: {each}; spread {spread:.1f} points, standard "
            f"deviation {stdev:.1f} points)"
        )

    def _miss_lines(self) -> list[str]:
        misses = self.misses()
        if not misses:
            return ["wrong answers: none"]
        cut = "" if len(misses) <= _SHOWN_MISSES else f", the first {_SHOWN_MISSES}"
        lines = [f"wrong answers ({len(misses)}{cut}):"]
        for miss in misses[:_SHOWN_MISSES]:
            run = f" (run {miss.run})" if self.runs > 1 else ""
            why = f": {miss.error}" if miss.error else ""
            lines.append(
                f"  {miss.case.id}{run}: expected {miss.case.expect.agent}, answered "
                f"{miss.answered} via {' -> '.join(miss.path) or '-'}{why}"
            )
        return lines

    # -- the check --------------------------------------------------------------------------------

    def assert_accuracy(self, minimum: float) -> None:
        """Fail (``AssertionError``, with the summary) when the accuracy is below ``minimum``.

        ``minimum`` is a fraction from 0 to 1 (``0.8`` for 80%).
        """
        if not 0 <= minimum <= 1:
            raise ValueError(f"minimum must be from 0 to 1 (0.8 for 80%), got {minimum!r}.")
        if self.accuracy < minimum:
            raise AssertionError(
                f"routing accuracy {percent(self.correct, self.total)} is below "
                f"{100 * minimum:g}%\n{self.summary()}"
            )


def ordered(results: Sequence[CaseResult], cases: Sequence[object]) -> tuple[CaseResult, ...]:
    """``results`` by run, then in the order of ``cases``."""
    place = {id(case): index for index, case in enumerate(cases)}
    return tuple(sorted(results, key=lambda r: (r.run, place.get(id(r.case), 0))))
