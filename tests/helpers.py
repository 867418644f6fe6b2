"""Helpers for driving handoff workflows in tests."""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
from dataclasses import dataclass, field
from typing import Any

from agent_framework import Agent, AgentResponseUpdate, Message, Workflow, WorkflowEvent

from handoff_builder import (
    HANDOFF_TURN_EVENT,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffEvent,
    HandoffTurnResult,
)
from handoff_builder.testing import client_of

AGENT_FRAMEWORK = tuple(
    int(part) for part in importlib.metadata.version("agent-framework-core").split(".")[:2]
)
"""The installed agent-framework-core's major and minor version. The package is tested with 1.23
and 1.26; the few tests of what agent_framework itself does differently in them say what each
does."""


@dataclass
class Turn:
    """Everything one run of a workflow produced."""

    events: list[WorkflowEvent[Any]]
    result: HandoffTurnResult
    updates: list[AgentResponseUpdate] = field(default_factory=list[AgentResponseUpdate])

    def of_type(self, kind: str) -> list[Any]:
        return [event.data for event in self.events if event.type == kind]

    @property
    def handoffs(self) -> list[HandoffEvent]:
        return [data for data in self.of_type("handoff_sent") if isinstance(data, HandoffEvent)]

    @property
    def blocked(self) -> list[HandoffBlockedEvent]:
        return [d for d in self.of_type("handoff_blocked") if isinstance(d, HandoffBlockedEvent)]

    @property
    def escalations(self) -> list[EscalationEvent]:
        return [d for d in self.of_type("handoff_escalated") if isinstance(d, EscalationEvent)]

    @property
    def warnings(self) -> list[str]:
        return [str(data) for data in self.of_type("warning")]


async def run_turn(
    workflow: Workflow,
    message: str | Message | list[Message],
    *,
    stream: bool = False,
    **kwargs: Any,
) -> Turn:
    """Run one user turn (streaming or not) and collect its events and its turn result."""
    if stream:
        events = [event async for event in workflow.run(message, stream=True, **kwargs)]
    else:
        events = list(await workflow.run(message, **kwargs))
    outputs = [event.data for event in events if event.type == "output"]
    [result] = [event.data for event in events if event.type == HANDOFF_TURN_EVENT]
    assert isinstance(result, HandoffTurnResult)
    updates = [data for data in outputs if isinstance(data, AgentResponseUpdate)]
    if stream:  # the turn's messages went out as updates; no second copy as output
        assert len(updates) == len(outputs), f"unexpected outputs {outputs!r}"
    else:
        assert outputs == [result], f"expected the turn result as the only output: {outputs!r}"
    return Turn(events=events, result=result, updates=updates)


async def until_called(agent: Agent, *, seconds: float = 30) -> None:
    """Wait until ``agent``'s scripted model has been called (``seconds`` is a backstop)."""
    deadline = time.monotonic() + seconds
    while not client_of(agent).calls:
        assert time.monotonic() < deadline, f"{agent.name} was never called"
        await asyncio.sleep(0.01)


def speakers(turn: Turn) -> list[str]:
    """Agents that produced messages in the turn, in order, without repeats in a row."""
    out: list[str] = []
    for message in turn.result.messages:
        if (
            message.role == "assistant"
            and message.author_name
            and out[-1:] != [message.author_name]
        ):
            out.append(message.author_name)
    return out
