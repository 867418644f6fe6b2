"""The files an eval writes: ``results.jsonl``, ``report.md`` and the matrix as ``confusion.svg``.

The picture is drawn here, in plain SVG (no plotting library): one cell per expected agent and
answering agent, green on the diagonal (the expected agent answered), red elsewhere, darker for
a larger share of the row.
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.sax.saxutils import escape

from ._summary import EvalReport, percent

__all__ = ["REPORT_FILE", "RESULTS_FILE", "SVG_FILE", "confusion_svg", "markdown", "write_report"]

RESULTS_FILE = "results.jsonl"
REPORT_FILE = "report.md"
SVG_FILE = "confusion.svg"

_CELL_W, _CELL_H, _CHAR_W, _PAD = 72, 44, 7.5, 12
_RIGHT, _WRONG = (22, 128, 61), (200, 40, 40)  # RGB of a full share: green, red
_SIN, _COS = 0.574, 0.819  # of the column labels' slant, 35 degrees
_LEGEND = (
    "rows: the agent expected to answer; columns: the agent that answered",
    "green: the expected agent, red: another (darker: more of the row's turns)",
)
_SHOWN_TEXT = 80


def write_report(report: EvalReport, directory: str | Path) -> tuple[Path, Path, Path]:
    """Write ``results.jsonl``, ``report.md`` and ``confusion.svg``; return their paths.

    ``directory`` is made if need be; files of an earlier eval there are replaced.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / RESULTS_FILE
    with results.open("w", encoding="utf-8") as out:
        for result in report.results:
            out.write(json.dumps(result.to_json(), ensure_ascii=False) + "\n")
    svg = folder / SVG_FILE
    svg.write_text(confusion_svg(report), encoding="utf-8")
    page = folder / REPORT_FILE
    page.write_text(markdown(report, SVG_FILE), encoding="utf-8")
    return results, page, svg


def markdown(report: EvalReport, picture: str = SVG_FILE) -> str:
    """The report as a Markdown page; ``picture`` is the matrix's SVG, relative to the page."""
    headline = f"{report.correct}/{report.total} ({percent(report.correct, report.total)})"
    lines = [
        "# Routing eval",
        "",
        f"**Routing accuracy: {headline}**: the expected agent answered {report.correct} of "
        f"{report.total} turns.",
        "",
        "## Confusion matrix",
        "",
        f"![Confusion matrix: rows are the expected agent, columns the agent that answered]"
        f"({picture})",
        "",
        *_matrix_table(report),
        "",
        "## Figures",
        "",
        "| | |",
        "|---|---|",
        *(f"| {label.capitalize()} | {_cell(value)} |" for label, value in report.figures()),
        "",
        "## Handoff edges",
        "",
        *_edge_table(report),
        "",
        "## Wrong answers",
        "",
        *_miss_table(report),
    ]
    return "\n".join(lines) + "\n"


def _matrix_table(report: EvalReport) -> list[str]:
    columns = report.agents
    lines = [
        "| expected \\ answered | " + " | ".join(_cell(c) for c in columns) + " | right |",
        "|---|" + "---:|" * (len(columns) + 1),
    ]
    for row, cells in report.confusion().items():
        total = sum(cells.values())
        shown = " | ".join(f"**{cells[c]}**" if c == row else str(cells[c]) for c in columns)
        lines.append(f"| {_cell(row)} | {shown} | {percent(cells[row], total)} |")
    return lines


def _edge_table(report: EvalReport) -> list[str]:
    edges = report.edges()
    if not edges:
        return ["No handoff was taken, and no case expects one."]
    lines = [
        "| edge | taken | in turns answered right | in expect.path | found there |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {_cell(e.source)} → {_cell(e.target)} | {e.taken} | {e.right} | {e.expected} | "
        f"{e.found} |"
        for e in edges
    ]
    return lines


def _miss_table(report: EvalReport) -> list[str]:
    misses = report.misses()
    if not misses:
        return ["None: every turn was answered by the expected agent."]
    lines = [
        "| case | run | message | expected | answered | path |",
        "|---|---:|---|---|---|---|",
    ]
    for miss in misses:
        message = miss.case.turn[-1].text
        if len(message) > _SHOWN_TEXT:
            message = message[: _SHOWN_TEXT - 1] + "…"
        answered = miss.answered + (f" ({miss.error})" if miss.error else "")
        lines.append(
            f"| {_cell(miss.case.id)} | {miss.run} | {_cell(message)} | "
            f"{_cell(miss.case.expect.agent)} | {_cell(answered)} | "
            f"{_cell(' → '.join(miss.path) or '-')} |"
        )
    return lines


def _cell(text: str) -> str:
    """``text`` as the content of a Markdown table cell (one line, pipes escaped)."""
    return " ".join(text.split()).replace("|", "\\|")


def confusion_svg(report: EvalReport) -> str:
    """The confusion matrix as an SVG picture."""
    columns, matrix = report.agents, report.confusion()
    rows = list(matrix)
    longest = _CHAR_W * max(len(label) for label in columns)  # a column label's length
    left = _PAD + _CHAR_W * max(len(label) for label in [*rows, "expected ↓ "]) + _PAD
    top = _PAD + 20 + longest * _SIN + _PAD
    legend = _CHAR_W * 0.85 * max(len(line) for line in _LEGEND)
    width = max(left + _CELL_W * (len(columns) - 0.5) + longest * _COS, _PAD + legend) + _PAD
    height = top + _CELL_H * len(rows) + _PAD + 18 * len(_LEGEND)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="13">',
        f"<title>Routing confusion matrix: {report.correct} of {report.total} turns answered "
        "by the expected agent</title>",
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="{_PAD}" y="{_PAD + 12}" font-weight="bold">answered by →</text>',
        f'<text x="{left - 8:.1f}" y="{top - 6:.1f}" text-anchor="end" font-weight="bold">'
        "expected ↓</text>",
    ]
    for index, column in enumerate(columns):
        x = left + _CELL_W * (index + 0.5) - 8
        parts.append(
            f'<text x="{x:.1f}" y="{top - 6:.1f}" transform="rotate(-35 {x:.1f} {top - 6:.1f})">'
            f"{escape(column)}</text>"
        )
    for row_index, row in enumerate(rows):
        cells = matrix[row]
        total = sum(cells.values())
        y = top + _CELL_H * row_index
        parts.append(
            f'<text x="{left - 8:.1f}" y="{y + _CELL_H / 2 + 4:.1f}" text-anchor="end">'
            f"{escape(row)}</text>"
        )
        for index, column in enumerate(columns):
            parts += _svg_cell(left + _CELL_W * index, y, cells[column], total, column == row)
    for number, line in enumerate(_LEGEND):
        y = top + _CELL_H * len(rows) + _PAD + 12 + 18 * number
        parts.append(f'<text x="{_PAD}" y="{y:.1f}" fill="#555" font-size="12">{line}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _svg_cell(x: float, y: float, count: int, total: int, diagonal: bool) -> list[str]:  # noqa: FBT001
    share = count / total if total else 0.0
    red, green, blue = (
        round(255 - (255 - channel) * share) for channel in (_RIGHT if diagonal else _WRONG)
    )
    ink = "white" if share > 0.5 else "black"
    middle = x + _CELL_W / 2
    drawn = [
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{_CELL_W}" height="{_CELL_H}" '
        f'fill="rgb({red},{green},{blue})" stroke="#999"/>',
        f'<text x="{middle:.1f}" y="{y + (20 if count else 27):.1f}" text-anchor="middle" '
        f'fill="{ink}" font-weight="bold">{count}</text>',
    ]
    if count:
        drawn.append(
            f'<text x="{middle:.1f}" y="{y + 36:.1f}" text-anchor="middle" fill="{ink}" '
            f'font-size="11">{percent(count, total)}</text>'
        )
    return drawn
