"""What becomes of one handoff call while its agent runs: a value :func:`vet_call` returns.

The :class:`~handoff_builder.HandoffManager` asks this about each call, with its settings and
the turn's counters: the call is transferred, refused with a tool error the agent can read and
act on, not performed (another call of the same response stands), or stopped at a cap. Pure: the
counters are read, never changed (the manager updates them when it decides after the run).
"""

from __future__ import annotations

from collections.abc import Sequence

from ._caps import CAPS, HOP_CAPS, HUMAN_TAKES_OVER, CapKind
from ._decision import (
    FOLLOWED_OUTCOMES,
    TRANSFERRED_RESULT,
    CallOutcome,
    HandoffCall,
    HandoffRequest,
)
from ._events import BlockReason, EscalationReason
from ._manager import CapOutcome, ManagerSettings
from ._state import HandoffState

__all__ = ["vet_call"]

INVALID_PAYLOAD_ERROR = (
    "Error: the {noun} was not performed because its arguments are not valid: {problem}. Fix them "
    "and call {tool} again."
)
PING_PONG_ERROR = (
    "Error: {target} just handed the conversation back to you, so it cannot be handed straight "
    "back before the user writes again. Hand the open part to another agent, or answer the user."
)
BOUNCE_ERROR = (
    "Error: {target} just handed the conversation to you, so it was not handed back. Answer the "
    "user's request yourself now. Hand back only a part that is not yours, after answering yours."
)
"""The tool error of a receiver's first hand-back straight to the agent that just handed to it."""
NOT_PERFORMED_RESULT = (
    "Not performed: only one handoff per response is followed ({followed} was followed)."
)
AWAITING_NOT_PERFORMED_RESULT = (
    "Not performed: only one handoff per response is followed ({followed} waits for a person's "
    "approval)."
)
SAFE_AGENT_NO_HANDOFF = (
    "Error: {tool} was not called: you were given the conversation to answer the user yourself, "
    "without handing off."
)


def vet_call(
    settings: ManagerSettings,
    state: HandoffState,
    request: HandoffRequest,
    earlier: Sequence[HandoffCall],
    last_handoff: tuple[str, str] | None = None,
) -> HandoffCall:
    """Accept the call, refuse it with a tool error, or stop the turn at a cap.

    ``earlier``: the calls of the same run vetted before this one; ``last_handoff``: (from, to)
    of the turn's latest handoff since a hand-back (``with_bounce_guard`` reads it). A call to a
    handoff the agent does not have in this run is always refused (a refused attempt, even beside
    a call that stands).
    """
    safe = state.safe_agent
    if safe is not None and request.route.source == safe[0]:  # a safe agent's run
        text = SAFE_AGENT_NO_HANDOFF.format(tool=request.route.tool_name)
        return _call(request, "rejected", text, blocked=request.blocked or "disabled")
    followed = next((c for c in earlier if c.outcome in FOLLOWED_OUTCOMES), None)
    if followed is not None and request.blocked is None:  # the first accepted call stands
        text = (
            AWAITING_NOT_PERFORMED_RESULT
            if followed.outcome == "awaiting_approval"
            else NOT_PERFORMED_RESULT
        )
        return _call(request, "not_performed", text.format(followed=followed.route.tool_name))
    refusal = _refusal(settings, state, request, earlier, last_handoff)
    if refusal is not None:
        reason, text = refusal
        refused = state.rejected + sum(1 for call in earlier if call.outcome == "rejected")
        if refused >= settings.max_rejected_handoffs:
            return _cap_call(settings, request, CAPS["rejected_handoffs"], reason)
        return _call(request, "rejected", text, blocked=reason)
    for cap in HOP_CAPS:
        if cap.reached(settings, state):
            return _cap_call(settings, request, cap)
    return _call(request, "transferred", TRANSFERRED_RESULT)


def _refusal(
    settings: ManagerSettings,
    state: HandoffState,
    request: HandoffRequest,
    earlier: Sequence[HandoffCall],
    last_handoff: tuple[str, str] | None,
) -> tuple[BlockReason, str] | None:
    if request.blocked is not None:  # a handoff the agent does not have in this run
        return request.blocked, request.error
    route = request.route
    edge = route.edge
    if request.problem is not None:
        text = INVALID_PAYLOAD_ERROR.format(
            noun=edge.noun, problem=request.problem, tool=route.tool_name
        )
        return "invalid_payload", text
    if route.payload is None and not request.argument:
        return edge.empty_reason, edge.empty_error.format(tool=route.tool_name)
    if not edge.returns and state.last_hand_back == (route.target, route.source):
        return "ping_pong", PING_PONG_ERROR.format(target=route.target)
    if settings.bounce_guard and _bounces(last_handoff, request, earlier):
        return "ping_pong", BOUNCE_ERROR.format(target=route.target)
    return None


def _bounces(
    last_handoff: tuple[str, str] | None, request: HandoffRequest, earlier: Sequence[HandoffCall]
) -> bool:
    """A receiver hands straight back to the agent that just handed to it, for the first time.

    (``with_bounce_guard``.) Refused once per run: a second hand-back in the same run, after the
    error, is the receiver's considered choice (nothing of the request is its own) and stands.
    """
    route = request.route
    if not route.edge.returns or last_handoff != (route.target, route.source):
        return False
    return not any(call.blocked == "ping_pong" and call.route.edge.returns for call in earlier)


def _cap_call(
    settings: ManagerSettings,
    request: HandoffRequest,
    cap: CapKind,
    blocked: BlockReason | None = None,
) -> HandoffCall:
    if cap.result is None:  # pragma: no cover - the table gives every cap a call trips one
        raise ValueError(f"No handoff call trips the {cap.name} cap.")
    text = cap.result.format(limit=cap.limit_in(settings))
    outcome = settings.cap_outcomes.get(cap.name, CapOutcome.ESCALATE)
    if outcome == CapOutcome.RETURN_TO_USER:
        text = text.replace(HUMAN_TAKES_OVER, "Answer the user yourself now.")
    elif outcome != CapOutcome.ESCALATE:
        text = text.replace(HUMAN_TAKES_OVER, f"The conversation goes to {outcome}.")
    return _call(request, "escalated", text, blocked=blocked, escalation=cap.name)


def _call(
    request: HandoffRequest,
    outcome: CallOutcome,
    result: str,
    *,
    blocked: BlockReason | None = None,
    escalation: EscalationReason | None = None,
) -> HandoffCall:
    return HandoffCall(
        request.route,
        request.argument,
        request.call_id,
        outcome,
        result,
        blocked,
        escalation,
        request.payload,
        request.arguments if blocked is not None or escalation is not None else "",
    )
