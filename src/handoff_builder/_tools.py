"""Handoff tools and the function middleware that turns a handoff call into a routing decision.

Each agent gets one :class:`agent_framework.FunctionTool` per granted target, added to its run (the
agent object is never changed). The tools are never executed: :class:`HandoffToolMiddleware`
intercepts every call to them, asks the manager to review it, and either

* accepts it: the result is a function result marked with :data:`HANDOFF_MARKER` and the agent's
  tool loop ends (no further model call in that hop), or
* rejects it: a tool error goes back to the agent, which keeps the turn and may try again.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, NamedTuple, Protocol

from agent_framework import (
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    FunctionTool,
    MiddlewareTermination,
)
from typing_extensions import override

HANDOFF_MARKER = "handoff_builder"
"""Key, in a function result's ``additional_properties``, of the outcome of a handoff call."""

TRANSFERRED_RESULT = "Transferred."
GOAL_DESCRIPTION = (
    "The user's goal, stated in one sentence, so the next agent does not have to ask."
)
SUMMARY_DESCRIPTION = "What you did, and what is still open for the agent you hand back to."

Outcome = Literal["transferred", "escalated", "not_performed"]
RouteKind = Literal["handoff", "hand_back"]


def argument_schema(argument: str, description: str) -> Mapping[str, Any]:
    """JSON schema of a handoff tool: one required string argument."""
    return {
        "type": "object",
        "properties": {argument: {"type": "string", "description": description}},
        "required": [argument],
        "additionalProperties": False,
    }


class HandoffRoute(NamedTuple):
    """A compiled edge: ``source`` calls ``tool_name`` to pass the conversation to ``target``."""

    source: str
    target: str
    tool_name: str
    description: str
    kind: RouteKind = "handoff"

    @property
    def argument(self) -> str:
        """The tool's one argument: ``goal`` for a handoff, ``summary`` for a hand-back."""
        return "summary" if self.kind == "hand_back" else "goal"


class Verdict(NamedTuple):
    """The manager's answer to a handoff call: accept, reject with a tool error, or escalate."""

    outcome: Literal["transferred", "rejected", "escalated"]
    message: str = TRANSFERRED_RESULT


class HandoffReviewer(Protocol):
    """What the middleware asks before a handoff call is accepted (implemented by the manager)."""

    def review_handoff(self, route: HandoffRoute, argument: str, call_id: str) -> Verdict:
        """Decide what happens to one handoff call made by ``route.source``."""
        ...


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


def marker_of(content: Content) -> Mapping[str, Any] | None:
    """The handoff outcome recorded on a function result, if it is one of ours."""
    marker = (content.additional_properties or {}).get(HANDOFF_MARKER)
    return marker if isinstance(marker, Mapping) else None  # pyright: ignore[reportUnknownVariableType]


def marked_result(
    call_id: str, text: str, outcome: Outcome, route: HandoffRoute, argument: str
) -> Content:
    """A function result for a handoff call, carrying its outcome for the manager to read."""
    marker = {
        "outcome": outcome,
        "kind": route.kind,
        "source": route.source,
        "target": route.target,
        "tool": route.tool_name,
        "argument": argument,
    }
    return Content.from_function_result(
        call_id=call_id, result=text, additional_properties={HANDOFF_MARKER: marker}
    )


def _never_called(**_: Any) -> str:  # pragma: no cover - the middleware intercepts every call
    raise RuntimeError("handoff tools are intercepted by HandoffToolMiddleware and never executed")


@functools.lru_cache(maxsize=1024)
def make_handoff_tool(route: HandoffRoute) -> FunctionTool:
    """The tool an agent calls to hand the conversation to ``route.target``.

    One tool per distinct route, shared by every workflow built with it: the tool holds no
    per-conversation state (it is never executed; :class:`HandoffToolMiddleware`, which is built
    per workflow, intercepts every call), so a built conversation does not carry its own copy.
    """
    return FunctionTool(
        name=route.tool_name,
        description=route.description,
        func=_never_called,
        input_model=argument_schema(
            route.argument,
            SUMMARY_DESCRIPTION if route.kind == "hand_back" else GOAL_DESCRIPTION,
        ),
        approval_mode="never_require",
    )


class HandoffToolMiddleware(FunctionMiddleware):
    """Intercepts one agent's handoff tool calls (other tool calls pass through untouched)."""

    def __init__(self, routes: Mapping[str, HandoffRoute], reviewer: HandoffReviewer) -> None:
        self._routes = routes
        self._reviewer = reviewer

    @override
    async def process(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
    ) -> None:
        """Review a handoff call; end the tool loop when it is accepted or escalated."""
        route = self._routes.get(context.function.name)
        if route is None:
            await call_next()
            return
        call_id = str(context.metadata.get("call_id") or "")
        argument = parse_argument(context.arguments, route.argument)
        verdict = self._reviewer.review_handoff(route, argument, call_id)
        if verdict.outcome == "rejected":
            context.result = verdict.message
            return
        raise MiddlewareTermination(
            verdict.message,
            result=marked_result(call_id, verdict.message, verdict.outcome, route, argument),
        )
