"""An agent as the host runs it: its own configuration plus what the workflow adds per run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
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

from ._decision import HandoffCall
from ._routes import HandoffRoute
from ._tools import HandoffReviewer, HandoffToolMiddleware

__all__ = ["Participant"]


@dataclass
class Participant:
    """An agent as the host runs it: its own configuration plus what this workflow adds per run.

    The agent object is never changed; ``tools``, ``options`` and ``middleware`` are passed to
    each ``agent.run`` call and merged there with the agent's own. ``routes`` are the agent's
    handoff tools by name: each run reviews the calls to them (see :meth:`run`).
    """

    agent: Agent
    tools: list[FunctionTool] = field(default_factory=list[FunctionTool])
    options: dict[str, Any] | None = None
    middleware: list[MiddlewareTypes] = field(default_factory=list[MiddlewareTypes])
    routes: Mapping[str, HandoffRoute] = field(default_factory=dict[str, HandoffRoute])

    @property
    def name(self) -> str:
        """The agent's name: its identity in this workflow."""
        return str(self.agent.name)

    async def run(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        review: HandoffReviewer,
    ) -> tuple[AgentResponse, tuple[HandoffCall, ...]]:
        """One agent invocation, and the handoff calls it made, each reviewed with ``review``.

        Streams each update to ``on_update`` when it is given.
        """
        calls: list[HandoffCall] = []
        middleware = self.middleware
        if self.routes:
            middleware = [HandoffToolMiddleware(self.routes, review, calls), *middleware]
        kwargs: dict[str, Any] = {
            "tools": self.tools or None,
            "options": self.options,
            "middleware": middleware or None,
        }
        if on_update is None:
            response = await self.agent.run(messages, **kwargs)
        else:
            stream = self.agent.run(messages, stream=True, **kwargs)
            async for update in stream:
                await on_update(update)
            response = await stream.get_final_response()
        return response, tuple(calls)
