"""Handoff tools, and the function middleware that reviews each call to them as it is made.

Each agent gets one :class:`agent_framework.FunctionTool` per granted target, added to its run (the
agent object is never changed). The tools are never executed: :class:`HandoffToolMiddleware`, made
for one run of one agent, intercepts every call to them, has the manager review it, records the
reviewed call (:class:`~handoff_builder._decision.HandoffCall`) in the run's list, and

* refuses it: a tool error goes back to the agent, which keeps the turn and may try again; or
* settles it (followed, not performed, or stopped at a cap): the function result carries the
  call's record (:func:`~handoff_builder._state.handoff_record`) and the agent's tool loop ends.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from agent_framework import (
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    FunctionTool,
    MiddlewareTermination,
)
from typing_extensions import override

from ._decision import HandoffCall
from ._routes import HandoffRoute
from ._state import handoff_record


class HandoffReviewer(Protocol):
    """Reviews one handoff call (the manager's :meth:`~GroupChatManager.review_handoff`)."""

    def __call__(
        self, route: HandoffRoute, argument: str, call_id: str, earlier: Sequence[HandoffCall]
    ) -> HandoffCall:
        """Decide what becomes of the call."""
        ...


def argument_schema(argument: str, description: str) -> Mapping[str, Any]:
    """JSON schema of a handoff tool: one required string argument."""
    return {
        "type": "object",
        "properties": {argument: {"type": "string", "description": description}},
        "required": [argument],
        "additionalProperties": False,
    }


def parse_argument(arguments: Any, name: str) -> str:
    """The stripped argument ``name`` of a handoff call ("" when missing or not a string)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return ""
    if isinstance(arguments, Mapping):
        value = arguments.get(name)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        if isinstance(value, str):
            return value.strip()
    return ""


def call_result(call: HandoffCall) -> Content:
    """The function result of a settled handoff call, carrying the call's record."""
    return Content.from_function_result(
        call_id=call.call_id, result=call.result, additional_properties=handoff_record(call)
    )


def _never_called(**_: Any) -> str:  # pragma: no cover - the middleware intercepts every call
    raise RuntimeError("handoff tools are intercepted by HandoffToolMiddleware and never executed")


@functools.lru_cache(maxsize=1024)
def make_handoff_tool(route: HandoffRoute) -> FunctionTool:
    """The tool an agent calls to hand the conversation to ``route.target``.

    One tool per distinct route, shared by every workflow built with it: the tool holds no
    per-conversation state (it is never executed; :class:`HandoffToolMiddleware` intercepts every
    call), so a built conversation does not carry its own copy.
    """
    edge = route.edge
    return FunctionTool(
        name=route.tool_name,
        description=route.description,
        func=_never_called,
        input_model=argument_schema(edge.argument, edge.argument_description),
        approval_mode="never_require",
    )


class HandoffToolMiddleware(FunctionMiddleware):
    """Reviews one agent run's handoff tool calls; other tool calls pass through untouched.

    ``calls`` receives every reviewed call, in the order the calls were made.
    """

    def __init__(
        self,
        routes: Mapping[str, HandoffRoute],
        review: HandoffReviewer,
        calls: list[HandoffCall],
    ) -> None:
        self._routes = routes
        self._review = review
        self.calls = calls

    @override
    async def process(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
    ) -> None:
        """Review a handoff call: refuse it with a tool error, or settle it and end the loop."""
        route = self._routes.get(context.function.name)
        if route is None:
            await call_next()
            return
        call_id = str(context.metadata.get("call_id") or "")
        argument = parse_argument(context.arguments, route.edge.argument)
        call = self._review(route, argument, call_id, tuple(self.calls))
        self.calls.append(call)
        if call.outcome == "rejected":
            context.result = call.result
            return
        raise MiddlewareTermination(call.result, result=call_result(call))
