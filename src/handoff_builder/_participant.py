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
    MiddlewareFailure,
    MiddlewareTypes,
)

from ._decision import HandoffCall
from ._hooks import EdgePolicy, HandoffGate
from ._instructions import render_instructions
from ._routes import HandoffRoute
from ._tools import HandoffReviewer, HandoffToolMiddleware
from .exceptions import HandoffHookError

__all__ = ["Participant"]


@dataclass
class Participant:
    """An agent as the host runs it: its own configuration plus what this workflow adds per run.

    The agent object is never changed; ``tools``, ``options`` and ``middleware`` are passed to
    each ``agent.run`` call and merged there with the agent's own. ``routes`` are the agent's
    handoff tools by name: each run reviews the calls to them (see :meth:`run`); ``policies``
    hold the code of the edges that have some (``is_enabled``, ``approval``, ``on_handoff``).
    """

    agent: Agent
    tools: list[FunctionTool] = field(default_factory=list[FunctionTool])
    options: dict[str, Any] | None = None
    middleware: list[MiddlewareTypes] = field(default_factory=list[MiddlewareTypes])
    routes: Mapping[str, HandoffRoute] = field(default_factory=dict[str, HandoffRoute])
    policies: dict[str, EdgePolicy] = field(default_factory=dict[str, EdgePolicy])
    instructions: str = ""
    """The handoff instructions' template: a run that does not offer every tool names only those
    it offers."""

    @property
    def name(self) -> str:
        """The agent's name: its identity in this workflow."""
        return str(self.agent.name)

    async def run(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        review: HandoffReviewer,
        gate: HandoffGate,
    ) -> tuple[AgentResponse, tuple[HandoffCall, ...], frozenset[str]]:
        """One agent invocation: its response, handoff calls and the handoffs it was not offered.

        Each handoff call is reviewed with ``review`` and admitted by ``gate``; a handoff whose
        ``is_enabled`` says no is not offered in this run. Streams each update to ``on_update``
        when it is given.
        """
        calls: list[HandoffCall] = []
        middleware = self.middleware
        tools = self.tools
        options = self.options
        disabled = frozenset[str]()
        if self.routes:
            middleware = [HandoffToolMiddleware(self.routes, review, gate, calls), *middleware]
            if self.policies or gate.closed:
                disabled = await gate.disabled(list(self.routes.values()))
            if disabled:
                tools = [tool for tool in tools if tool.name not in disabled]
                options = self._options_offering([tool.name for tool in tools])
        kwargs: dict[str, Any] = {
            "tools": tools or None,
            "options": options,
            "middleware": middleware or None,
        }
        try:
            if on_update is None:
                response = await self.agent.run(messages, **kwargs)
            else:
                stream = self.agent.run(messages, stream=True, **kwargs)
                async for update in stream:
                    await on_update(update)
                response = await stream.get_final_response()
        except MiddlewareFailure as failure:
            if isinstance(failure.__cause__, HandoffHookError):
                raise failure.__cause__ from failure.__cause__.__cause__
            raise
        return response, tuple(calls), disabled

    def _options_offering(self, tool_names: Sequence[str]) -> dict[str, Any]:
        """The run's options when only ``tool_names`` are offered.

        The instructions name just those; an agent offered none gets no handoff instructions.
        """
        options = {k: v for k, v in (self.options or {}).items() if k != "instructions"}
        text = render_instructions(self.instructions, tool_names) if tool_names else ""
        if text.strip():
            options["instructions"] = text
        return options
