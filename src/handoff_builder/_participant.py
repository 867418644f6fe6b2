"""An agent as the host runs it: its own configuration plus what the workflow adds per run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_framework import (
    Agent,
    AgentResponse,
    AgentResponseUpdate,
    FunctionTool,
    Message,
    MiddlewareTypes,
)

__all__ = ["Participant"]


@dataclass
class Participant:
    """An agent as the host runs it: its own configuration plus what this workflow adds per run.

    The agent object is never changed; ``tools``, ``options`` and ``middleware`` are passed to
    each ``agent.run`` call and merged there with the agent's own.
    """

    agent: Agent
    tools: list[FunctionTool] = field(default_factory=list[FunctionTool])
    options: dict[str, Any] | None = None
    middleware: list[MiddlewareTypes] = field(default_factory=list[MiddlewareTypes])

    @property
    def name(self) -> str:
        """The agent's name: its identity in this workflow."""
        return str(self.agent.name)

    async def run(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
    ) -> AgentResponse:
        """One agent invocation; streams each update to ``on_update`` when it is given."""
        kwargs: dict[str, Any] = {
            "tools": self.tools or None,
            "options": self.options,
            "middleware": self.middleware or None,
        }
        if on_update is None:
            return await self.agent.run(messages, **kwargs)
        stream = self.agent.run(messages, stream=True, **kwargs)
        async for update in stream:
            await on_update(update)
        return await stream.get_final_response()
