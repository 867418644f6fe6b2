"""Per-edge code around a handoff: ``is_enabled``, ``approval`` and ``on_handoff``.

* ``is_enabled`` (a bool, or a sync or async predicate on a :class:`HandoffContext`) is asked
  before each run of the source agent: a disabled handoff's tool is not offered in that run.
* ``approval`` (a bool or a predicate) is asked when a call to the tool was accepted: the call
  then waits for a human's answer, as a function-approval request, before anything routes.
* ``on_handoff`` (a sync or async function) runs last, before the target runs: ``None`` lets the
  handoff go, a string vetoes it (the string is the calling agent's tool error).

An exception in any of them, or no answer within the hook limit (``with_timeouts(hook=...)``,
default :data:`DEFAULT_HOOK_TIMEOUT`), is a :class:`~handoff_builder.HandoffHookError` that names
the edge; nothing routes. A run's ``is_enabled`` predicates are asked together: one that waits
holds up none of the others, and the first error stops the rest.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, cast

from agent_framework import Message

from ._decision import HandoffCall, HandoffRequest, refused_call
from ._routes import HandoffRoute
from ._settings import (
    DEFAULT_HOOK_TIMEOUT,
    PLAIN,
    EdgePolicy,
    HandoffContext,
    HandoffHook,
    HandoffPredicate,
)
from ._timeouts import DeadlinePassedError, within
from .exceptions import HandoffHookError

__all__ = [
    "DEFAULT_HOOK_TIMEOUT",
    "EdgePolicy",
    "HandoffContext",
    "HandoffGate",
    "HandoffHook",
    "HandoffPredicate",
]


_T = TypeVar("_T")


class HandoffGate:
    """Asks one run's edges what they allow; made by the host for each agent run."""

    __slots__ = ("_conversation", "_conversation_id", "_policies", "no_handoffs", "timeout")

    def __init__(
        self,
        policies: dict[str, EdgePolicy],
        conversation: Sequence[Message],
        conversation_id: str | None,
        *,
        no_handoffs: bool = False,
        timeout: float | None = DEFAULT_HOOK_TIMEOUT,
    ) -> None:
        self._policies = policies
        self._conversation = conversation
        self._conversation_id = conversation_id
        self.no_handoffs = no_handoffs
        """No handoff tool is offered in this run (a safe agent's run)."""
        self.timeout = timeout
        """Seconds a hook may take to answer (``None``: no limit of its own)."""

    @property
    def runs_code(self) -> bool:
        """True when some edge of this run has code of its own (which may wait)."""
        return bool(self._policies)

    def _policy(self, route: HandoffRoute) -> EdgePolicy:
        return self._policies.get(route.tool_name, PLAIN)

    def context(self, route: HandoffRoute, call: HandoffCall | None = None) -> HandoffContext:
        """The context a hook of ``route`` is given (for a call, or before the agent runs)."""
        payload = call.payload if call is not None and route.payload is not None else None
        return HandoffContext(
            route.source,
            route.target,
            route.tool_name,
            call.argument if call is not None else "",
            payload,
            tuple(self._conversation),
            self._conversation_id,
        )

    async def disabled(self, routes: Sequence[HandoffRoute]) -> frozenset[str]:
        """The tool names of ``routes`` whose ``is_enabled`` says no for this run.

        The predicates are asked together; the first to fail stops the others and is raised.
        """
        if self.no_handoffs:
            return frozenset(route.tool_name for route in routes)
        off = {route.tool_name for route in routes if self._policy(route).is_enabled is False}
        asked = [
            (route, enabled)
            for route in routes
            if callable(enabled := self._policy(route).is_enabled)
        ]
        answers = await _together(
            [self._ask(route, "is_enabled", predicate, None) for route, predicate in asked]
        )
        off.update(
            route.tool_name for (route, _), yes in zip(asked, answers, strict=True) if not yes
        )
        return frozenset(off)

    async def vet(
        self,
        request: HandoffRequest,
        earlier: Sequence[HandoffCall],
        vetter: Callable[[HandoffRequest, Sequence[HandoffCall]], HandoffCall],
        *,
        approved: bool = False,
    ) -> HandoffCall:
        """The manager's verdict on the call (``vetter``), then, if it goes, the edge's say.

        A call the edge refuses keeps the arguments it was made with, for its blocked event. A
        call to a handoff the agent does not have (``request.blocked``) is refused, or stops the
        turn at a cap, whatever the vetter says.
        """
        call = vetter(request, earlier)
        if request.blocked is not None and call.outcome not in ("rejected", "escalated"):
            return refused_call(request)
        if call.outcome != "transferred":
            return call
        call = await self.admit(call, approved=approved)
        if call.blocked is not None:
            call = call._replace(arguments=request.arguments)
        return call

    async def admit(self, call: HandoffCall, *, approved: bool = False) -> HandoffCall:
        """What becomes of an accepted call: it waits for approval, is vetoed, or goes.

        ``approved``: a human already approved it (its ``approval`` is not asked again).
        """
        policy = self._policy(call.route)
        if policy.is_plain:
            return call
        approval = policy.approval
        if not approved and (
            approval is True
            or (callable(approval) and await self._ask(call.route, "approval", approval, call))
        ):
            text = f"Waiting for a human to approve the handoff to {call.route.target}."
            return call._replace(outcome="awaiting_approval", result=text)
        if policy.on_handoff is not None:
            veto = await self._ask(call.route, "on_handoff", policy.on_handoff, call)
            if veto is not None:
                return call._replace(outcome="rejected", result=str(veto), blocked="vetoed")
        return call

    async def _ask(
        self,
        route: HandoffRoute,
        hook: str,
        function: Callable[[HandoffContext], _T | Awaitable[_T]],
        call: HandoffCall | None,
    ) -> _T:
        try:
            answer = function(self.context(route, call))
            if inspect.isawaitable(answer):
                answer = await within(self.timeout, answer)
        except DeadlinePassedError as error:
            raise HandoffHookError(
                route.source, route.target, route.tool_name, hook, error, timeout=self.timeout
            ) from error
        except Exception as error:
            raise HandoffHookError(
                route.source, route.target, route.tool_name, hook, error
            ) from error
        return cast(_T, answer)


async def _together(calls: Sequence[Awaitable[_T]]) -> list[_T]:
    """The results of ``calls``, run concurrently; the first to fail cancels the rest.

    Of calls that fail at the same moment, the first in order is raised.
    """
    if len(calls) <= 1:
        return [await call for call in calls]
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # an error, or this run was cancelled: nothing is left running
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    failed = [task for task in tasks if not task.cancelled() and task.exception() is not None]
    if failed:
        raise cast(BaseException, failed[0].exception())
    return [task.result() for task in tasks]
