"""openai-agents' handoffs on the same cases, scored by the same report.

Run with (from the repository's root, a model server set up as docs/evals.md says), in a venv
that has this package and ``openai-agents``:
    python -m evals.openai_agents_desk evals/support_desk.jsonl --max-output-tokens 256 \
        --out /tmp/eval-openai-agents

Without ``openai-agents`` the command says so and exits with status 1.

The agents are the seed desk's (``evals.desks.seed_desk``): the seed's prompts, the same
descriptions of the two specialists, and the seed's tool names, which are openai-agents' own
(``transfer_to_billing``; the hand-back is a handoff to triage named ``transfer_back_to_triage``).
What differs is openai-agents': its handoff tools take no argument (no goal, no summary), it adds
no handoff instructions and has no cap on handoffs per message. So that a bouncing turn ends, the
run stops at a tenth model call (``max_turns``) and is counted escalated. The model is the one of
``$OPENAI_BASE_URL`` / ``$OPENAI_MODEL``, through openai-agents' Chat Completions model.

Each case is a new run that starts at the case's ``start`` agent (default triage) with the
case's earlier messages; the answering agent is the run's last agent. The figures are
:class:`handoff_builder.evals.EvalReport`'s, so the summary and the files read as
``handoff-builder eval``'s do (without each model call's record: openai-agents keeps none).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from samples._shared import SPECIALIST_HAND_BACK, TRIAGE_HAND_BACK, render

from evals.desks import COMPANY, REASONS
from evals.one_by_one import run_one_by_one
from handoff_builder import HandoffEvent
from handoff_builder.evals import (
    ESCALATED,
    FAILED,
    CaseResult,
    EvalCase,
    EvalReport,
    load_cases,
    write_report,
)

__all__ = ["main", "run_case", "run_cases"]

MAX_TURNS = 10
"""Model calls a run may take before it is stopped and counted escalated."""


def _sdk() -> Any:
    return importlib.import_module("agents")


def _agents(max_output_tokens: int | None) -> dict[str, Any]:
    sdk = _sdk()
    openai = importlib.import_module("openai")
    client = openai.AsyncOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8089/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "local"),
    )
    model = sdk.OpenAIChatCompletionsModel(
        model=os.environ.get("OPENAI_MODEL", "qwen2.5-coder-1.5b"), openai_client=client
    )
    settings = sdk.ModelSettings(max_tokens=max_output_tokens)
    agents = {
        "triage": sdk.Agent(
            name="triage",
            instructions=render(TRIAGE_HAND_BACK, company=COMPANY),
            model=model,
            model_settings=settings,
        )
    }
    for role in ("billing", "tech"):
        agents[role] = sdk.Agent(
            name=role,
            instructions=render(SPECIALIST_HAND_BACK, role=role, company=COMPANY),
            model=model,
            model_settings=settings,
            handoffs=[sdk.handoff(agents["triage"], tool_name_override="transfer_back_to_triage")],
        )
    agents["triage"].handoffs = [
        sdk.handoff(agents[role], tool_description_override=REASONS[role])
        for role in ("billing", "tech")
    ]
    return agents


def _input(case: EvalCase) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.text} for m in case.input]


async def run_case(case: EvalCase, max_output_tokens: int | None, run: int = 1) -> CaseResult:
    """One case as a new openai-agents run."""
    sdk = _sdk()
    start = case.start or "triage"
    began = time.perf_counter()
    handoffs: list[HandoffEvent] = []
    answered, status, reply, error = ESCALATED, "escalated", "", None
    tokens: tuple[int, int] | None = None
    try:
        agents = _agents(max_output_tokens)
        result = await sdk.Runner.run(agents[start], _input(case), max_turns=MAX_TURNS)
        for item in result.new_items:
            if isinstance(item, sdk.HandoffOutputItem):
                source, target = item.source_agent.name, item.target_agent.name
                tool = "transfer_back_to_triage" if target == "triage" else f"transfer_to_{target}"
                handoffs.append(HandoffEvent(source, target, "", tool, str(len(handoffs))))
        answered, status, reply = result.last_agent.name, "completed", str(result.final_output)
        usage = result.context_wrapper.usage
        tokens = (usage.input_tokens, usage.output_tokens)
    except Exception as failure:
        if type(failure).__name__ != "MaxTurnsExceeded":
            answered, status, error = FAILED, "error", f"{type(failure).__name__}: {failure}"
    return CaseResult(
        case=case,
        run=run,
        answered=answered,
        status=status,
        path=(start, *(h.target for h in handoffs)),
        handoffs=tuple(handoffs),
        refused=(),
        escalation=None,
        reply=reply,
        seconds=time.perf_counter() - began,
        input_tokens=tokens[0] if tokens else None,
        output_tokens=tokens[1] if tokens else None,
        model_calls=(),
        error=error,
    )


async def run_cases(cases: Sequence[EvalCase], max_output_tokens: int | None) -> EvalReport:
    """Every case, one after another (a local model serves one request at a time)."""
    return await run_one_by_one(
        cases, lambda case: run_case(case, max_output_tokens), "openai_agents_desk"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evals.openai_agents_desk CASES.jsonl [--max-output-tokens N] [--out DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("cases")
    parser.add_argument("--max-output-tokens", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    try:
        sdk = _sdk()
    except ImportError:
        sys.stderr.write("openai_agents_desk: needs openai-agents (pip install openai-agents)\n")
        return 1
    sdk.set_tracing_disabled(True)
    cases = load_cases(args.cases)
    report = asyncio.run(run_cases(cases, args.max_output_tokens))
    sys.stdout.write(report.summary() + "\n")
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
