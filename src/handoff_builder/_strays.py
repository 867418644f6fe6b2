"""Calls to handoffs an agent does not have in its run: refused while it runs, like other refusals.

A model may call a handoff tool it was not given in this run: another agent's (``not_granted``),
one of its own that is not offered now (``disabled``: its ``is_enabled`` said no, or a safe agent
runs without handoffs), or one that does not exist (``unknown_target``: a name that reads as a
handoff, see :data:`HANDOFF_LIKE_PREFIXES`). agent_framework answers a call to a tool it was not
given with its own error before any function middleware sees it, and counts it as a failed call:
three in a row end the agent's tool loop.

:class:`StrayHandoffMiddleware`, a chat middleware around each of the run's model calls, closes
that gap. When a response calls such a name, it adds a :class:`RefusalTool` of that name to the
run's tool list (the live list agent_framework's tool loop dispatches from), so the call reaches
:class:`~handoff_builder._tools.HandoffToolMiddleware` and is vetted as a refused call
(:meth:`RunHandoffs.refusal`): a tool error that names the handoff tools the agent has, a
``handoff_blocked`` event, one more refused attempt. The model is never offered a refusal tool:
each model call is sent the list without them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from agent_framework import (
    ChatContext,
    ChatMiddleware,
    ChatResponse,
    FunctionTool,
    ResponseStream,
)
from pydantic import BaseModel
from typing_extensions import override

from ._decision import HandoffRequest
from ._events import BlockReason
from ._routes import EDGE_KINDS, HAND_BACK, HandoffRoute

__all__ = [
    "HANDOFF_LIKE_PREFIXES",
    "RefusalTool",
    "RunHandoffs",
    "StrayHandoffMiddleware",
]

HANDOFF_LIKE_PREFIXES = (*(kind.tool_prefix for kind in EDGE_KINDS.values()), "transfer_to_")
"""Names that read as handoffs even when no such tool exists."""

STRAY_ERRORS: dict[BlockReason, str] = {
    "not_granted": (
        "Error: {tool} is not one of your tools, so it was not called: you cannot hand the "
        "conversation to {target}."
    ),
    "disabled": "Error: {tool} is not available to you now, so it was not called.",
    "unknown_target": "Error: {tool} does not exist, so it was not called.",
}
"""The tool error of a call to a handoff the agent does not have, by why it does not."""
HANDOFFS_OFFERED = (
    " The handoff tools you have now: {tools}. Use one of them if it fits, or answer the user "
    "yourself."
)
NO_HANDOFFS_OFFERED = " You have no handoff tools now: answer the user yourself."

_OPEN_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": True}


def _never_called(**_: Any) -> str:  # pragma: no cover - the middleware intercepts every call
    raise RuntimeError("refusal tools are intercepted by HandoffToolMiddleware and never executed")


class RefusalTool(FunctionTool):
    """Stands for a handoff the agent does not have, so that its call reaches our middleware.

    It takes any arguments, is never offered to the model and never executed.
    """

    def __init__(self, name: str) -> None:
        """A refusal tool named ``name``."""
        super().__init__(
            name=name,
            description="",
            func=_never_called,
            input_model=_OPEN_SCHEMA,
            approval_mode="never_require",
        )


class RunHandoffs:
    """One run's handoffs: those the agent has now, and what a call to any other one reads as.

    ``routes`` are the agent's own handoff routes, ``offered`` those of them it has in this run
    (by tool name), and ``elsewhere`` the workflow's handoff tools of other agents, by name.
    """

    __slots__ = ("_elsewhere", "_routes", "offered", "source")

    def __init__(
        self,
        source: str,
        routes: Mapping[str, HandoffRoute],
        offered: Mapping[str, HandoffRoute],
        elsewhere: Mapping[str, HandoffRoute],
    ) -> None:
        self.source = source
        self._routes = routes
        self.offered = offered
        self._elsewhere = elsewhere

    def reason(self, name: str) -> BlockReason | None:
        """Why a call to ``name`` is refused, when it is a handoff the agent does not have now.

        ``None``: a handoff tool it has, or a name that does not read as a handoff (such a call
        is agent_framework's to answer).
        """
        if name in self.offered:
            return None
        if name in self._routes:
            return "disabled"
        if name in self._elsewhere:
            return "not_granted"
        if name.startswith(HANDOFF_LIKE_PREFIXES):
            return "unknown_target"
        return None

    def route(self, name: str) -> HandoffRoute:
        """The route a call to ``name`` reads as: from this agent to the tool's target.

        The target of a handoff that does not exist is ``""``.
        """
        own = self._routes.get(name)
        if own is not None:
            return own
        other = self._elsewhere.get(name)
        if other is not None:
            return HandoffRoute(
                self.source, other.target, name, "", other.kind, target_url=other.target_url
            )
        kind = HAND_BACK.name if name.startswith(HAND_BACK.tool_prefix) else "handoff"
        return HandoffRoute(self.source, "", name, "", kind)

    def refusal(self, name: str, call_id: str, arguments: Any) -> HandoffRequest:
        """A call to a handoff the agent does not have, as a request that can only be refused.

        Its ``error`` is the tool error the agent gets, naming the handoff tools it has now.
        """
        reason = self.reason(name) or "unknown_target"
        route = self.route(name)
        if isinstance(arguments, BaseModel):
            arguments = arguments.model_dump(mode="json")
        error = STRAY_ERRORS[reason].format(tool=name, target=route.target) + self._offer()
        return HandoffRequest(route, call_id, None, arguments, blocked=reason, error=error)

    def _offer(self) -> str:
        if not self.offered:
            return NO_HANDOFFS_OFFERED
        tools = ", ".join(f"{r.tool_name} (to {r.target})" for r in self.offered.values())
        return HANDOFFS_OFFERED.format(tools=tools)


class StrayHandoffMiddleware(ChatMiddleware):
    """Makes a call to a handoff the agent does not have reach our middleware, as a refusal.

    Around each model call of one run: the model is sent the run's tools without the refusal
    tools; the response's calls to handoff-like names the run has no tool for get one.
    """

    def __init__(self, handoffs: RunHandoffs) -> None:
        self._handoffs = handoffs

    @override
    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        """Hide the refusal tools from the model; add one for each stray call it makes."""
        options = context.options
        tools: list[Any] = list(options.get("tools") or ()) if options is not None else []
        if options is not None and any(isinstance(t, RefusalTool) for t in tools):
            sent = {key: value for key, value in options.items() if key != "tools"}
            visible = [t for t in tools if not isinstance(t, RefusalTool)]
            if visible:
                sent["tools"] = visible
            context.options = sent
        await call_next()
        if not isinstance(options, dict):  # not agent_framework's tool loop: nothing to add to
            return
        loop_options: dict[str, Any] = options
        result = context.result
        if isinstance(result, ResponseStream):
            stream = cast("ResponseStream[Any, ChatResponse[Any]]", result)
            stream.with_result_hook(lambda response: self._admit(loop_options, response))
        elif isinstance(result, ChatResponse):
            self._admit(loop_options, cast("ChatResponse[Any]", result))

    def _admit(self, options: dict[str, Any], response: ChatResponse[Any]) -> None:
        """A refusal tool in the tool loop's list for each stray call of ``response``."""
        tools = options.get("tools")
        if tools is not None and not isinstance(tools, list):
            return  # agent_framework's loop keeps a list; anything else is not ours to extend
        have = {_tool_name(t) for t in cast("list[Any]", tools or [])}
        added: list[RefusalTool] = []
        for message in response.messages:
            for content in message.contents:
                name = content.name if content.type == "function_call" else None
                if name and name not in have and self._handoffs.reason(name) is not None:
                    have.add(name)
                    added.append(RefusalTool(name))
        if not added:
            return
        if tools is not None:
            cast("list[Any]", tools).extend(added)  # the loop's live list: it dispatches from it
        else:  # a run with no tools at all
            options["tools"] = added


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        function = cast("Mapping[str, Any]", tool).get("function")
        if isinstance(function, Mapping):
            return str(cast("Mapping[str, Any]", function).get("name") or "")
        return str(cast("Mapping[str, Any]", tool).get("name") or "")
    return str(getattr(tool, "name", "") or "")
