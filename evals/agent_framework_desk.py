"""agent_framework's own ``HandoffBuilder`` on the same cases, scored by the same report.

Run with (from the repository's root, a model server set up as docs/evals.md says):
    python -m evals.agent_framework_desk evals/support_desk.jsonl --provider openai \
        --max-output-tokens 256 --out /tmp/eval-agent-framework

Needs ``agent-framework-orchestrations`` (``pip install agent-framework-orchestrations``); without
it the command says so and exits with status 1.

The agents are the seed desk's (``evals.desks.seed_desk``): the seed's prompts, the same
descriptions of the two specialists, one chat client each. What differs is agent_framework's:
its tools are ``handoff_to_<agent>`` and take no argument (no goal, no summary), so the seed
prompts name those tools instead of ``transfer_to_billing`` and ``transfer_back_to_triage``; it
adds no handoff instructions; and it has no cap on handoffs per message, no ping-pong guard and
no hand-back of its own (a specialist hands off to triage like any agent). So that a bouncing
turn ends, the adapter ends it at a fifth handoff (the seed desk's cap is 4) and counts it
escalated, as the seed desk would.

Each case is a new workflow that starts at the case's ``start`` agent (default triage) with the
case's earlier messages, as ``handoff-builder eval`` runs it; the answering agent is the one that
asks the user for the next message (agent_framework's ``request_info``). The figures are
:class:`handoff_builder.evals.EvalReport`'s, so the summary and the files read as
``handoff-builder eval``'s do.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from agent_framework import Agent, ChatContext, ChatResponse, Message, chat_middleware
from samples._shared import SPECIALIST_HAND_BACK, TRIAGE_HAND_BACK, render

from evals.desks import COMPANY, MAX_HANDOFFS, REASONS
from evals.one_by_one import run_one_by_one
from handoff_builder import HandoffEvent
from handoff_builder.evals import (
    ESCALATED,
    FAILED,
    CaseResult,
    EvalCase,
    EvalReport,
    ModelCallRecord,
    load_cases,
    write_report,
)
from handoff_builder.providers import agent_options, chat_client
from handoff_builder.testing import render_messages

__all__ = ["main", "run_case", "run_cases"]

# The seed prompts' tool names, as agent_framework names its tools.
_TOOL_NAMES = {
    "transfer_to_billing": "handoff_to_billing",
    "transfer_to_tech": "handoff_to_tech",
    "transfer_back_to_triage": "handoff_to_triage",
}


def _orchestrations() -> Any:
    """``agent_framework_orchestrations``, imported by name: an optional package."""
    return importlib.import_module("agent_framework_orchestrations")


class _Turn:
    """What one case's turn recorded: each model call, tokens, handoff calls."""

    def __init__(self) -> None:
        self.calls: list[ModelCallRecord] = []
        self.input_tokens = 0
        self.output_tokens = 0
        self.reported = False  # the provider reported token use
        self.handoff_calls = 0

    def recorder(self, agent: str) -> Callable[[ChatContext, Callable[[], Awaitable[None]]], Any]:
        """A chat middleware that records each model call of ``agent``."""

        @chat_middleware
        async def record(context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
            await call_next()
            options = dict(context.options or {})
            tools = tuple(getattr(t, "name", str(t)) for t in options.get("tools") or ())
            result = context.result
            output: tuple[str, ...] | None = None
            if isinstance(result, ChatResponse):
                output = tuple(render_messages(result.messages).splitlines())
                self.handoff_calls += sum(
                    1
                    for message in result.messages
                    for content in message.contents
                    if content.type == "function_call"
                    and str(content.name).startswith("handoff_to_")
                )
                usage = result.usage_details or {}
                if usage.get("input_token_count") is not None:
                    self.reported = True
                    self.input_tokens += int(usage.get("input_token_count") or 0)
                    self.output_tokens += int(usage.get("output_token_count") or 0)
            self.calls.append(
                ModelCallRecord(
                    agent=agent,
                    index=len(self.calls),
                    instructions=str(options.get("instructions") or ""),
                    tools=tools,
                    input=tuple(render_messages(context.messages).splitlines()),
                    output=output,
                )
            )

        return record


def _agents(provider: str, max_output_tokens: int | None, turn: _Turn) -> dict[str, Agent]:
    def prompt(template: str, **values: str) -> str:
        text = render(template, company=COMPANY, **values)
        for seed_name, framework_name in _TOOL_NAMES.items():
            text = text.replace(seed_name, framework_name)
        return text

    instructions = {
        "triage": prompt(TRIAGE_HAND_BACK),
        "billing": prompt(SPECIALIST_HAND_BACK, role="billing"),
        "tech": prompt(SPECIALIST_HAND_BACK, role="tech"),
    }
    return {
        name: Agent(
            client=chat_client(provider),
            name=name,
            instructions=text,
            default_options=cast(Any, agent_options(max_output_tokens)),
            middleware=[turn.recorder(name)],
            require_per_service_call_history_persistence=True,
        )
        for name, text in instructions.items()
    }


def _workflow(agents: dict[str, Agent], start: str, turn: _Turn) -> Any:
    def capped(_conversation: list[Message]) -> bool:
        return turn.handoff_calls > MAX_HANDOFFS

    builder = _orchestrations().HandoffBuilder(
        participants=list(agents.values()), termination_condition=capped
    )
    builder = builder.with_start_agent(agents[start])
    for role, reason in REASONS.items():
        builder = builder.add_handoff(agents["triage"], [agents[role]], description=reason)
        builder = builder.add_handoff(agents[role], [agents["triage"]])
    return builder.build()


def _messages(case: EvalCase) -> list[Message]:
    return [
        Message(
            role=m.role, contents=[m.text], author_name=m.agent if m.role == "assistant" else None
        )
        for m in case.input
    ]


async def run_case(
    case: EvalCase, provider: str, max_output_tokens: int | None, run: int = 1
) -> CaseResult:
    """One case as a new agent_framework ``HandoffBuilder`` workflow."""
    turn = _Turn()
    start = case.start or "triage"
    began = time.perf_counter()
    handoffs: list[HandoffEvent] = []
    answered, status, reply, error = ESCALATED, "escalated", "", None
    try:
        workflow = _workflow(_agents(provider, max_output_tokens, turn), start, turn)
        result = await workflow.run(_messages(case))
        for event in result:
            if event.type == "handoff_sent":
                source, target = event.data.source, event.data.target
                tool = f"handoff_to_{target}"
                handoffs.append(HandoffEvent(source, target, "", tool, str(len(handoffs))))
            elif event.type == "request_info":
                answered, status = str(event.source_executor_id), "completed"
                reply = str(
                    getattr(event.data, "agent_response", "") and event.data.agent_response.text
                )
    except Exception as failure:
        answered, status, error = FAILED, "error", f"{type(failure).__name__}: {failure}"
    path = (start, *(h.target for h in handoffs))
    return CaseResult(
        case=case,
        run=run,
        answered=answered,
        status=status,
        path=path,
        handoffs=tuple(handoffs),
        refused=(),
        escalation=None,
        reply=reply,
        seconds=time.perf_counter() - began,
        input_tokens=turn.input_tokens if turn.reported else None,
        output_tokens=turn.output_tokens if turn.reported else None,
        model_calls=tuple(turn.calls),
        error=error,
    )


async def run_cases(
    cases: Sequence[EvalCase], provider: str, max_output_tokens: int | None
) -> EvalReport:
    """Every case, one after another (a local model serves one request at a time)."""
    return await run_one_by_one(
        cases, lambda case: run_case(case, provider, max_output_tokens), "agent_framework_desk"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evals.agent_framework_desk CASES.jsonl [--provider P] [--out DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("cases")
    parser.add_argument("--provider", default="openai")
    parser.add_argument("--max-output-tokens", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    try:
        _orchestrations()
    except ImportError:
        sys.stderr.write(
            "agent_framework_desk: needs agent-framework-orchestrations "
            "(pip install agent-framework-orchestrations)\n"
        )
        return 1
    cases = load_cases(args.cases)
    report = asyncio.run(run_cases(cases, args.provider, args.max_output_tokens))
    sys.stdout.write(report.summary() + "\n")
    if args.out:
        write_report(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
