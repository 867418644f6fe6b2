"""The first model call of the agent each case starts at, alone: does it hand off, and to whom?

A whole turn takes several model calls; this sends only the first, as the seed desk
(evals/desks.py) would send it: the seed's prompt of the agent the case starts at (triage, or
the specialist of ``start``), the handoff instructions after it, the agent's handoff tools as the
SDK makes them, the case's messages. It is a quick way to compare handoff instructions on a real
model (a few seconds a case), before running whole turns with ``handoff-builder eval``.

Run from the repository's root, a model server up (docs/evals.md, "Measured on a local model"):
    .venv/bin/python -m evals.first_call evals/support_desk.jsonl [--instructions FILE]

Each case gets one line and one outcome: ``call-right`` (a handoff to the first target of
``expect.path``), ``call-wrong``, ``call-when-none`` (a handoff where the agent should answer),
``text`` (an answer where it should hand off), ``text-ok``, ``error`` (the server refused the
model's output); then the count of each, per agent kind (``T:`` triage, ``S:`` a specialist).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from samples._shared import SPECIALIST_HAND_BACK, TRIAGE_HAND_BACK, render

from handoff_builder import (
    DEFAULT_HAND_BACK_INSTRUCTIONS,
    DEFAULT_HANDOFF_INSTRUCTIONS,
    HandoffWorkflowBuilder,
)
from handoff_builder.testing import scripted_agent

from .desks import COMPANY, REASONS


def _tools(start: str) -> list[dict[str, Any]]:
    """The handoff tools the SDK offers ``start`` on the seed desk, as sent to the model."""
    agents = {name: scripted_agent(name) for name in ("triage", "billing", "tech")}
    builder = HandoffWorkflowBuilder(agents["triage"])
    for role in ("billing", "tech"):
        builder.with_handoff(
            agents["triage"], agents[role], REASONS[role], tool_name=f"transfer_to_{role}"
        )
    host: Any = builder.with_hand_back(agents["triage"]).build().get_start_executor()
    return [tool.to_json_schema_spec() for tool in host._participants[start].tools]


def _outcome(message: dict[str, Any], want: str | None) -> tuple[str, str]:
    calls: list[dict[str, Any]] = message.get("tool_calls") or []
    if not calls:
        return ("text-ok" if want is None else "text"), str(message.get("content") or "")[:80]
    function: dict[str, Any] = calls[0]["function"]
    got = str(function["name"]).replace("transfer_back_to_", "").replace("transfer_to_", "")
    kind = "call-when-none" if want is None else ("call-right" if got == want else "call-wrong")
    return kind, f"{function['name']}({str(function['arguments'])[:80]})"


def main(argv: list[str] | None = None) -> None:
    """Send each case's first model call and print what the model did."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument(
        "--instructions", type=Path, help="every agent's handoff instructions (default: SDK's)"
    )
    parser.add_argument("--max-tokens", type=int, default=40, help="enough for a handoff call")
    args = parser.parse_args(argv)
    given = args.instructions.read_text().strip() if args.instructions else None
    url = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8089/v1") + "/chat/completions"
    counts: Counter[str] = Counter()
    for line in args.cases.read_text().splitlines():
        if not line.strip():
            continue
        case: dict[str, Any] = json.loads(line)
        start = str(case.get("start") or "triage")
        prompt = TRIAGE_HAND_BACK if start == "triage" else SPECIALIST_HAND_BACK
        default = (  # a specialist's only handoff is its hand-back: the SDK gives it that text
            DEFAULT_HANDOFF_INSTRUCTIONS if start == "triage" else DEFAULT_HAND_BACK_INSTRUCTIONS
        )
        instructions = default if given is None else given
        system = render(prompt, company=COMPANY, role=start) + "\n" + instructions
        raw = case["input"]
        turns = [{"role": "user", "text": raw}] if isinstance(raw, str) else raw
        messages = [{"role": "system", "content": system}] + [
            {"role": m["role"], "content": m["text"]} for m in turns
        ]
        path: list[str] = case["expect"].get("path") or []
        want = path[1] if len(path) > 1 else None
        body = {
            "model": os.environ.get("OPENAI_MODEL", "model"),
            "messages": messages,
            "tools": _tools(start),
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "max_tokens": args.max_tokens,
        }
        request = urllib.request.Request(  # noqa: S310 - the local model server's address
            url, json.dumps(body).encode(), {"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310
                message: dict[str, Any] = json.load(response)["choices"][0]["message"]
            kind, detail = _outcome(message, want)
        except urllib.error.HTTPError as error:
            kind, detail = "error", f"HTTP {error.code}"
        counts[("T:" if start == "triage" else "S:") + kind] += 1
        sys.stdout.write(f"{case.get('id', '?')[:24]:24} {start:8} want={want}: {kind} {detail}\n")
    sys.stdout.write(", ".join(f"{key} {n}" for key, n in sorted(counts.items())) + "\n")


if __name__ == "__main__":
    main()
