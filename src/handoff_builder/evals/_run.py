"""Running eval cases: each one a new hosted conversation, its turn read back as a CaseResult.

Every case runs on a :class:`~handoff_builder.ConversationHost` over an in-memory store, a new
conversation each: the case's earlier messages (and the agent it starts at) are stored first, as
a hosted conversation keeps them, and the turn is streamed, so that the token use the provider
reports (usage in the streamed updates) is counted. The workflow records what each model
received (``with_model_inputs``; a copy of the builder is made for that, the builder itself is
not changed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from agent_framework import AgentResponseUpdate, Message

from handoff_builder._builder import HandoffWorkflowBuilder, agent_names, recording_model_inputs
from handoff_builder._events import (
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_ESCALATED_EVENT,
    HANDOFF_EVENT,
    HANDOFF_TURN_EVENT,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffEvent,
    HandoffTurnResult,
)
from handoff_builder._hosting import ConversationHost
from handoff_builder._model_calls import ModelCall, render_messages
from handoff_builder._state import HostState, encode_host_state
from handoff_builder.exceptions import ModelConnectionError
from handoff_builder.stores import InMemoryConversationStore

from ._cases import CaseMessage, EvalCase, check_agents

__all__ = [
    "DEFAULT_CONCURRENCY",
    "ESCALATED",
    "FAILED",
    "NO_ANSWER",
    "CaseResult",
    "ModelCallRecord",
    "run_cases",
]

DEFAULT_CONCURRENCY = 4
"""Cases run at the same time, unless told otherwise."""

ESCALATED = "(escalated)"
"""What answered a turn that was escalated to a human (a cap): never the expected agent."""
NO_ANSWER = "(no answer)"
"""What answered a turn a deadline cut short, or that was abandoned."""
FAILED = "(error)"
"""What answered a turn that raised (its ``error`` says what)."""

_CUT_SHORT = ("agent_timeout", "turn_timeout", "abandoned")


@dataclass(frozen=True)
class ModelCallRecord:
    """One model call of a turn: what the agent's model received and what it answered.

    ``input`` and ``output`` are transcript lines (``role[author]: text``, ``-> tool(arguments)``
    for a call, ``<- call_id: result`` for a result; see
    :func:`handoff_builder.testing.render_messages`). ``output`` is ``None`` when the answer is
    not in the shared conversation (a delegated expert's, say).
    """

    agent: str
    index: int
    instructions: str
    tools: tuple[str, ...]
    input: tuple[str, ...]
    output: tuple[str, ...] | None

    def to_json(self) -> dict[str, Any]:
        """The call as ``results.jsonl`` writes it."""
        return {
            "agent": self.agent,
            "index": self.index,
            "instructions": self.instructions,
            "tools": list(self.tools),
            "input": list(self.input),
            "output": None if self.output is None else list(self.output),
        }


@dataclass(frozen=True)
class CaseResult:
    """One case's turn, in one run (``run`` counts from 1).

    ``answered`` is the agent the turn ended at, or :data:`ESCALATED`, :data:`NO_ANSWER` or
    :data:`FAILED`; ``status`` the turn's :data:`~handoff_builder.TurnStatus`, ``"waiting"``
    (for an approval or an external call) or ``"error"``. ``path`` is every agent that held the
    conversation, in order; ``refused`` the handoff calls that were refused (the agent got a
    tool error). ``seconds`` is the turn's wall time; ``input_tokens`` and ``output_tokens`` the
    sums the provider reported (``None``: it reported none).
    """

    case: EvalCase
    run: int
    answered: str
    status: str
    path: tuple[str, ...]
    handoffs: tuple[HandoffEvent, ...]
    refused: tuple[HandoffBlockedEvent, ...]
    escalation: EscalationEvent | None
    reply: str
    seconds: float
    input_tokens: int | None
    output_tokens: int | None
    model_calls: tuple[ModelCallRecord, ...]
    error: str | None = None

    @property
    def correct(self) -> bool:
        """The expected agent answered the turn."""
        return self.answered == self.case.expect.agent

    @property
    def path_ok(self) -> bool | None:
        """The turn took the expected path (``None``: the case expects none)."""
        expected = self.case.expect.path
        return None if expected is None else self.path == expected

    @property
    def goal_ok(self) -> bool | None:
        """Each expected fragment is in the last handoff's goal (``None``: none expected)."""
        fragments = self.case.expect.goal_contains
        if not fragments:
            return None
        if not self.handoffs:
            return False
        goal = self.handoffs[-1].goal.casefold()
        return all(fragment.casefold() in goal for fragment in fragments)

    def to_json(self) -> dict[str, Any]:
        """The result as one line of ``results.jsonl``."""
        return {
            "id": self.case.id,
            "run": self.run,
            "input": [m.to_json() for m in self.case.input],
            "start": self.case.start,
            "expect": self.case.expect.to_json(),
            "answered": self.answered,
            "correct": self.correct,
            "path": list(self.path),
            "path_ok": self.path_ok,
            "goal_ok": self.goal_ok,
            "status": self.status,
            "handoffs": [
                {"source": h.source, "target": h.target, "goal": h.goal, "tool": h.tool_name}
                for h in self.handoffs
            ],
            "refused": [
                {"source": r.source, "tool": r.tool_name, "reason": r.reason, "target": r.target}
                for r in self.refused
            ],
            "escalation": None if self.escalation is None else self.escalation.reason,
            "reply": self.reply,
            "seconds": round(self.seconds, 6),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "error": self.error,
            "model_calls": [call.to_json() for call in self.model_calls],
        }


async def run_cases(
    workflow: HandoffWorkflowBuilder,
    cases: Sequence[EvalCase],
    *,
    repeat: int = 1,
    concurrency: int = DEFAULT_CONCURRENCY,
    source: str = "<cases>",
) -> AsyncIterator[CaseResult]:
    """Run every case ``repeat`` times, at most ``concurrency`` at once; yield results as they end.

    The results come in the order their turns end, not in the cases' order.
    A turn that raises is a result with ``answered`` :data:`FAILED`; a model that cannot be
    reached stops the whole run (its :class:`~handoff_builder.ModelConnectionError`). ``source``
    names the cases in an error (a case file's path).

    Raises:
        EvalCaseError: a case names an agent the workflow does not have (nothing runs).
        ValueError: ``repeat`` or ``concurrency`` is below 1.
        ModelConnectionError: an agent's model could not be reached.
    """
    if repeat < 1 or concurrency < 1:
        raise ValueError(f"repeat and concurrency must be 1 or more, got {repeat}, {concurrency}.")
    check_agents(cases, agent_names(workflow), source=source)
    store = InMemoryConversationStore()
    host = ConversationHost(recording_model_inputs(workflow), store, live_conversations=0)
    bound = asyncio.Semaphore(concurrency)

    async def one(run: int, position: int, case: EvalCase) -> CaseResult:
        async with bound:
            return await _run_case(host, store, case, run, f"eval-{run}-{position}")

    tasks = [
        asyncio.ensure_future(one(run, position, case))
        for run in range(1, repeat + 1)
        for position, case in enumerate(cases)
    ]
    try:
        for finished in asyncio.as_completed(tasks):
            yield await finished
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _run_case(
    host: ConversationHost,
    store: InMemoryConversationStore,
    case: EvalCase,
    run: int,
    conversation_id: str,
) -> CaseResult:
    """One case's turn on a new conversation, read back; the conversation is deleted after."""
    await _store_before(store, conversation_id, case)
    turn = _Turn()
    began = time.perf_counter()
    try:
        async for event in host.stream(conversation_id, [_message(m) for m in case.turn]):
            turn.see(event.type, event.data)
    except ModelConnectionError:
        raise
    except Exception as error:
        turn.error = f"{type(error).__name__}: {' '.join(str(error).split())}"
    seconds = time.perf_counter() - began
    waiting = (
        None if turn.result is not None or turn.error else await host.active_agent(conversation_id)
    )
    await store.delete(conversation_id)
    return turn.read(case, run, seconds, waiting)


async def _store_before(
    store: InMemoryConversationStore, conversation_id: str, case: EvalCase
) -> None:
    """The conversation before the turn, and the agent it starts at, stored as a host keeps them."""
    if not case.context and case.start is None:
        return
    state = {"host": encode_host_state(HostState(speaker=case.start))}
    messages = [_message(m).to_dict() for m in case.context]
    await store.append(conversation_id, start=0, messages=messages, state=state, expected_version=0)


def _message(message: CaseMessage) -> Message:
    return Message(role=message.role, contents=[message.text], author_name=message.agent)


class _Turn:
    """What the stream of one turn showed."""

    def __init__(self) -> None:
        self.result: HandoffTurnResult | None = None
        self.handoffs: list[HandoffEvent] = []
        self.refused: list[HandoffBlockedEvent] = []
        self.escalation: EscalationEvent | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.error: str | None = None

    def see(self, kind: str, data: object) -> None:
        if isinstance(data, AgentResponseUpdate):
            self._count(data)
        elif kind == HANDOFF_EVENT and isinstance(data, HandoffEvent):
            self.handoffs.append(data)
        elif kind == HANDOFF_BLOCKED_EVENT and isinstance(data, HandoffBlockedEvent):
            self.refused.append(data)
        elif kind == HANDOFF_ESCALATED_EVENT and isinstance(data, EscalationEvent):
            self.escalation = data
        elif kind == HANDOFF_TURN_EVENT and isinstance(data, HandoffTurnResult):
            self.result = data

    def _count(self, update: AgentResponseUpdate) -> None:
        for content in update.contents:
            usage = content.usage_details if content.type == "usage" else None
            if not usage:
                continue
            tokens_in, tokens_out = usage.get("input_token_count"), usage.get("output_token_count")
            if tokens_in is not None:
                self.input_tokens = (self.input_tokens or 0) + tokens_in
            if tokens_out is not None:
                self.output_tokens = (self.output_tokens or 0) + tokens_out

    def read(self, case: EvalCase, run: int, seconds: float, waiting: str | None) -> CaseResult:
        result = self.result
        if self.error is not None:
            answered, status = FAILED, "error"
        elif result is None:
            answered, status = waiting or NO_ANSWER, "waiting"
        else:
            status = result.status
            answered = (
                ESCALATED
                if result.escalated
                else NO_ANSWER
                if status in _CUT_SHORT
                else result.active_agent
            )
        handoffs = tuple(result.handoffs) if result is not None else tuple(self.handoffs)
        first = handoffs[0].source if handoffs else (result.active_agent if result else waiting)
        path = ((first,) if first else ()) + tuple(h.target for h in handoffs)
        return CaseResult(
            case=case,
            run=run,
            answered=answered,
            status=status,
            path=path,
            handoffs=handoffs,
            refused=tuple(self.refused),
            escalation=result.escalation if result is not None else self.escalation,
            reply=result.text if result is not None else "",
            seconds=seconds,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            model_calls=_calls(result) if result is not None else (),
            error=self.error,
        )


def _calls(result: HandoffTurnResult) -> tuple[ModelCallRecord, ...]:
    """Each recorded model call of the turn, with the answer it gave.

    An agent's k-th model call of the turn answered with its k-th message of the turn (each
    model response is one assistant message of the shared conversation).
    """
    answers: dict[str, list[Message]] = {}
    for message in result.conversation[result.start :]:
        if message.role == "assistant" and message.author_name:
            answers.setdefault(message.author_name, []).append(message)
    made: dict[str, int] = {}
    records: list[ModelCallRecord] = []
    for call in result.model_calls:
        agent = call.agent or ""
        k = made[agent] = made.get(agent, -1) + 1
        said = answers.get(agent, [])
        output = tuple(render_messages([said[k]]).splitlines()) if k < len(said) else None
        records.append(_record(call, agent, output))
    return tuple(records)


def _record(call: ModelCall, agent: str, output: tuple[str, ...] | None) -> ModelCallRecord:
    return ModelCallRecord(
        agent=agent,
        index=call.index or 0,
        instructions=call.instructions,
        tools=call.tool_names,
        input=tuple(call.rendered.splitlines()),
        output=output,
    )
