"""The Python code in the getting-started guide runs as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_getting_started_code_runs() -> None:
    blocks = python_blocks(DOCS / "getting-started.md")
    assert len(blocks) >= 3
    namespace: dict[str, object] = {"__name__": "docs_getting_started"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in blocks:
            exec(compile(block, "getting-started.md", "exec"), namespace)  # noqa: S102
    assert out.getvalue().splitlines() == [
        "I found the duplicate charge and refunded it.",
        "billing",
        "triage -> billing : The user was charged twice this month.",
    ]
