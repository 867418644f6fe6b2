"""What a manager is given and what it decides: one agent reply in, one immutable decision out.

The host runs an agent, collects its new messages and the handoff calls it made (each vetted
while the agent ran, see :class:`HandoffCall`), and hands them to the manager as an
:class:`AgentReply`. The manager answers with one :data:`Decision`:

* :class:`NextAgent`: run this agent next, after adding ``input`` to the conversation; ``handoff``
  is the handoff that caused it (``None`` for the first speaker of a turn, an agent that carries
  on after its requests were answered, or an autonomous continuation);
* :class:`EndTurn`: the turn is over; ``status`` says why;
* :class:`Escalate`: the turn is over and goes to a human; ``escalation`` says why.

Each decision carries the audit events it produced, in order. The host acts on the decision and
never reads routing from message contents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from agent_framework import Message
from pydantic import BaseModel

from ._events import (
    BlockReason,
    DelegationEvent,
    EscalationEvent,
    EscalationReason,
    HandoffBlockedEvent,
    HandoffEvent,
    LimitReachedEvent,
    RoutingStep,
    TurnStatus,
    TurnTimeoutEvent,
)
from ._routes import HandoffRoute

__all__ = [
    "AgentReply",
    "CallOutcome",
    "Decision",
    "EndTurn",
    "Escalate",
    "Event",
    "HandoffCall",
    "HandoffRequest",
    "NextAgent",
    "ReviewVerdict",
    "TurnStart",
    "refused_call",
]

HOST_NOTE_AUTHOR = "handoff_host"
"""``author_name`` of the notes the host adds to the conversation for an agent (a safe agent's
"why you"): they are not part of a turn's reply to the user."""

TRANSFERRED_RESULT = "Transferred."
"""The tool result of a handoff call that routes (.NET's text)."""

Event = (
    HandoffEvent
    | DelegationEvent
    | HandoffBlockedEvent
    | EscalationEvent
    | LimitReachedEvent
    | TurnTimeoutEvent
    | str
)
"""An audit event, or a warning (a ``str``)."""

CallOutcome = Literal["transferred", "rejected", "escalated", "not_performed", "awaiting_approval"]
"""What became of one handoff call: it routes; it was refused with a tool error (the agent goes
on); it tripped a cap (the turn escalates); it was not performed (an earlier call of the same
response was followed); or it waits for a human's approval."""

FOLLOWED_OUTCOMES: frozenset[str] = frozenset({"transferred", "escalated", "awaiting_approval"})
"""Outcomes of a call that stands: a later handoff call in the same run is not performed."""


class HandoffRequest(NamedTuple):
    """One handoff tool call as the model made it, its arguments validated, before it is vetted.

    ``payload`` is the validated model (the built-in goal or summary, or the edge's payload);
    ``None`` when the arguments are invalid, and ``problem`` then names each bad field.
    ``raw`` is what the model sent (``arguments`` has it as JSON).

    ``blocked`` is set when the agent does not have the tool in this run, so the call can only be
    refused: ``"not_granted"`` (another agent's handoff tool; ``route.target`` is its target),
    ``"disabled"`` (one of its own, not offered now) or ``"unknown_target"`` (a handoff-like name
    that does not exist; ``route.target`` is ``""``). ``error`` is then the tool error the agent
    gets, naming the handoff tools it has in this run; past a cap, a manager may answer with the
    cap's result instead.
    """

    route: HandoffRoute
    call_id: str
    payload: BaseModel | None
    raw: Any = None
    problem: str | None = None
    blocked: BlockReason | None = None
    error: str = ""

    @property
    def arguments(self) -> str:
        """What the model sent, as JSON."""
        raw = self.raw
        if isinstance(raw, str):
            return raw
        try:
            return json.dumps(raw, ensure_ascii=False, default=str)
        except (TypeError, ValueError):  # pragma: no cover - agent_framework passes JSON values
            return str(raw)

    @property
    def argument(self) -> str:
        """The handoff's argument as text: the goal or summary, or the payload as JSON."""
        payload = self.payload
        if payload is None:
            return ""
        if self.route.payload is None:
            return str(getattr(payload, self.route.edge.argument, "")).strip()
        return payload.model_dump_json()


class HandoffCall(NamedTuple):
    """One handoff tool call, as it was vetted while the calling agent ran.

    ``result`` is the tool result the agent received. ``blocked`` is the reason a refused call
    was refused; ``escalation`` is the cap a call tripped; ``payload`` the validated payload and
    ``arguments`` what the model sent, as JSON.
    """

    route: HandoffRoute
    argument: str
    call_id: str
    outcome: CallOutcome
    result: str
    blocked: BlockReason | None = None
    escalation: EscalationReason | None = None
    payload: BaseModel | None = None
    arguments: str = ""


def refused_call(request: HandoffRequest) -> HandoffCall:
    """The call of a ``request.blocked`` request, refused with its own ``error``."""
    return HandoffCall(
        request.route,
        request.argument,
        request.call_id,
        "rejected",
        request.error,
        request.blocked,
        arguments=request.arguments,
    )


@dataclass(frozen=True)
class AgentReply:
    """One agent invocation as the manager sees it.

    ``messages`` are the messages the agent added to the conversation (they are already in the
    history) and ``handoff_calls`` the handoff tool calls it made, in order. ``unfinished`` is
    true when the agent has not finished its reply: it waits for answers to requests (tool
    approvals, external calls), or just got them. Unless it handed off, the same agent then
    carries on: the decision is applied once the requests are answered.
    """

    agent: str
    messages: tuple[Message, ...]
    handoff_calls: tuple[HandoffCall, ...] = ()
    unfinished: bool = False
    disabled: frozenset[str] = frozenset()
    """The agent's handoff tools its edges did not offer in this run (``is_enabled``)."""
    verdict: ReviewVerdict | None = None
    """A reviewer's verdict (``with_review``): the first call to its approve or request-changes
    tool in this run, if it made one."""
    tool_limit: bool = False
    """The agent's tool loop stopped at one of agent_framework's function-invocation limits
    before the model answered (see :class:`~handoff_builder.EscalationEvent`): ``messages``
    hold its calls and their results, and no answer. The turn must not end as ``"completed"``."""


@dataclass(frozen=True)
class ReviewVerdict:
    """What a reviewer decided about the reply under review (``with_review``).

    ``kind`` is ``"approve"`` (``text``: its note) or ``"request_changes"`` (``text``: the
    feedback for the reply's author).
    """

    kind: Literal["approve", "request_changes"]
    text: str
    call_id: str


@dataclass(frozen=True)
class TurnStart:
    """What the host knows when a user turn starts.

    ``previous_agent`` ended the last turn (``None`` in a new conversation).
    ``return_to_previous`` is the caller's instruction for this turn: ``True`` starts at the
    previous agent, ``False`` at the initial agent, ``None`` leaves it to the manager's setting.
    A hosted conversation passes ``True`` (it remembers the active agent), or ``False`` when the
    conversation was idle for too long.
    """

    previous_agent: str | None = None
    return_to_previous: bool | None = None


@dataclass(frozen=True)
class NextAgent:
    """Run ``agent`` next; add ``input`` to the conversation first."""

    agent: str
    handoff: HandoffEvent | None = None
    input: tuple[Message, ...] = ()
    events: tuple[Event, ...] = ()
    step: RoutingStep | None = None  # who decided it; the host names it when a manager does not
    no_handoffs: bool = False  # a safe agent: it runs once, with no handoff tools, past every cap


@dataclass(frozen=True)
class EndTurn:
    """The turn is over; the last reply stands."""

    status: TurnStatus = "completed"
    events: tuple[Event, ...] = ()
    step: RoutingStep | None = None


@dataclass(frozen=True)
class Escalate:
    """The turn is over and is handed to a human; the user gets the apology."""

    escalation: EscalationEvent
    events: tuple[Event, ...] = ()
    step: RoutingStep | None = None

    @property
    def status(self) -> TurnStatus:
        """The cap that escalated the turn."""
        return self.escalation.reason


Decision = NextAgent | EndTurn | Escalate
"""One manager decision."""
