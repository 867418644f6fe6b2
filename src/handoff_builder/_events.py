"""Audit events and the per-turn result. All are small frozen dataclasses: data, not behaviour.

Each event class names the ``WorkflowEvent.type`` it is emitted under in its ``event_type``
(a class attribute, not a field: it is not part of the event's JSON). The name is not ``kind``
because :class:`HandoffEvent` and :class:`LimitReachedEvent` already have a ``kind`` field of
their own (which edge; which limit).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from agent_framework import AgentResponse, Message
from pydantic import BaseModel, PlainSerializer, PlainValidator, SkipValidation
from typing_extensions import override

from ._model_calls import ModelCall
from ._routes import HandoffKind
from .exceptions import ModelCallNotRecordedError

__all__ = [
    "HANDOFF_BLOCKED_EVENT",
    "HANDOFF_DELEGATION_EVENT",
    "HANDOFF_ESCALATED_EVENT",
    "HANDOFF_EVENT",
    "HANDOFF_INTERMEDIATE_EVENT",
    "HANDOFF_LIMIT_EVENT",
    "HANDOFF_TIMEOUT_EVENT",
    "HANDOFF_TURN_ABANDONED_EVENT",
    "HANDOFF_TURN_EVENT",
    "DecidedBy",
    "DelegationEvent",
    "DelegationOutcome",
    "EscalationEvent",
    "HandoffBlockedEvent",
    "HandoffEvent",
    "HandoffTurnResult",
    "LimitReachedEvent",
    "RoutingStep",
    "StepKind",
    "TurnAbandonedEvent",
    "TurnStatus",
    "TurnTimeoutEvent",
]

HANDOFF_EVENT: str = "handoff_sent"
"""``WorkflowEvent.type`` of a performed handoff (the type agent_framework uses for handoffs)."""
HANDOFF_BLOCKED_EVENT: str = "handoff_blocked"
"""``WorkflowEvent.type`` of a refused handoff (the agent got a tool error)."""
HANDOFF_ESCALATED_EVENT: str = "handoff_escalated"
"""``WorkflowEvent.type`` of an escalation to a human (a cap was reached)."""

HANDOFF_LIMIT_EVENT: str = "handoff_limit_reached"
"""``WorkflowEvent.type`` of a limit that ended a turn without an escalation (autonomous mode)."""

HANDOFF_TIMEOUT_EVENT: str = "handoff_timed_out"
"""``WorkflowEvent.type`` of a deadline that ended a turn (``data``: a TurnTimeoutEvent)."""
HANDOFF_TURN_ABANDONED_EVENT: str = "handoff_turn_abandoned"
"""``WorkflowEvent.type`` of a hosted turn that was given up (``data``: a TurnAbandonedEvent)."""

HANDOFF_TURN_EVENT: str = "handoff_turn_completed"
"""``WorkflowEvent.type`` emitted at the end of every user turn; ``data`` is a HandoffTurnResult."""
HANDOFF_INTERMEDIATE_EVENT: str = "handoff_intermediate"
"""``WorkflowEvent.type`` of a streamed update from an agent designated as intermediate output,
or from an expert answering a delegated task."""
HANDOFF_DELEGATION_EVENT: str = "handoff_delegated"
"""``WorkflowEvent.type`` of a finished delegation (``data``: a DelegationEvent)."""

BlockReason = Literal[
    "empty_goal",
    "empty_summary",
    "invalid_payload",
    "not_granted",
    "unknown_target",
    "ping_pong",
    "disabled",
    "vetoed",
    "declined",
]
EscalationReason = Literal[
    "handoff_cap",
    "max_iterations",
    "rejected_handoffs",
    "blocked_handoff",
    "review_rounds",
    "tool_limit",
]
TurnStatus = Literal[
    "completed",
    "autonomous_limit",
    "handoff_cap",
    "max_iterations",
    "rejected_handoffs",
    "blocked_handoff",
    "review_rounds",
    "tool_limit",
    "agent_timeout",
    "turn_timeout",
    "abandoned",
]
"""How a user turn ended: ``"completed"`` (an agent answered, or the termination condition held),
``"autonomous_limit"`` (an agent used every autonomous continuation it was allowed; the turn goes
back to the user), the cap that escalated it to a human (the :class:`EscalationEvent` reason;
``"tool_limit"``: an agent's tool loop stopped at agent_framework's function-invocation limit
before the model answered), a deadline that cut it short (``"agent_timeout"``,
``"turn_timeout"``: see :class:`TurnTimeoutEvent`), or ``"abandoned"``: a hosted turn that kept
failing, or that was given up on demand, was closed (see :class:`TurnAbandonedEvent`)."""


DecidedBy = Literal["model", "code"]
"""Who made a routing step: the model (it called a handoff tool, or answered without one) or code
(the initial or remembered agent, a cap, a block, autonomous mode, a termination condition, a
deadline, a manager of your own)."""

StepKind = Literal[
    "start",
    "handoff",
    "hand_back",
    "delegate",
    "review",
    "route",
    "continue",
    "blocked",
    "end",
    "escalate",
    "limit",
    "timeout",
]
"""What a routing step did: ``"start"`` (the turn's first agent), ``"handoff"`` / ``"hand_back"``
(an accepted handoff call), ``"delegate"`` (the model asked an expert through a delegate
tool; the caller kept the conversation), ``"review"`` (a reviewer of ``with_review`` was given
the reply, or asked its author for changes), ``"route"`` (a route of ``with_route``: code picked the
next agent),
``"continue"`` (an autonomous continuation: the same agent again),
``"blocked"`` (a refused handoff call: the agent goes on), ``"end"`` (the turn went back to the
user), ``"escalate"`` (a cap handed it to a human), ``"limit"`` (a limit ended it without an
escalation), ``"timeout"`` (a deadline ended it)."""


def _payload_json(payload: Any) -> Any:
    return payload.model_dump(mode="json") if isinstance(payload, BaseModel) else payload


PayloadField = Annotated[BaseModel | None, SkipValidation, PlainSerializer(_payload_json)]
"""A payload: a model instance in memory, its JSON in persisted state (read back by the host)."""


@dataclass(frozen=True)
class HandoffEvent:
    """A performed handoff: ``source`` passed the conversation to ``target``.

    ``goal`` is the handoff's goal, or, for a hand-back (``kind="hand_back"``), its summary; for
    an edge with a typed payload, the payload as JSON. ``payload`` is that payload, an instance of
    the edge's pydantic model (``None`` for an edge without one).
    """

    event_type: ClassVar[str] = HANDOFF_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    source: str
    target: str
    goal: str
    tool_name: str
    call_id: str
    kind: HandoffKind = "handoff"
    payload: PayloadField = None
    decided_by: DecidedBy = "model"


def _messages_in(value: Any) -> tuple[Message, ...]:
    items: Sequence[Any] = value if isinstance(value, Sequence) else ()  # pyright: ignore[reportUnknownVariableType]
    return tuple(m if isinstance(m, Message) else Message.from_dict(m) for m in items)


MessagesField = Annotated[
    tuple[Message, ...],
    PlainValidator(_messages_in),
    PlainSerializer(lambda messages: [m.to_dict() for m in messages]),
]
"""Messages: ``Message`` objects in memory, their ``to_dict()`` forms in persisted state."""

DelegationOutcome = Literal["answered", "failed", "timed_out", "declined", "refused"]
"""What became of a delegation: the expert ``"answered"``; it ``"failed"`` (its call raised: the
caller got the error as the tool's result); it ``"timed_out"`` (it gave no answer within the
delegate's ``timeout``: the caller was told so); a person ``"declined"`` it (``approval=True``);
or it was ``"refused"`` before the expert ran (invalid arguments, ``max_calls`` used up)."""


@dataclass(frozen=True)
class DelegationEvent:
    """A delegation: ``caller`` asked ``expert`` through ``tool_name``, and kept the conversation.

    ``task`` is the task (for a delegate with a typed payload, the payload as JSON); ``result``
    is what the caller got back as the tool's result (the expert's final text, or why there was
    none). ``messages`` are the expert's own messages (its task first): they are not in the
    shared conversation, which holds only the call and its result. ``depth`` is 1 for a
    delegation of a participant, 2 for one its expert made, and so on.
    """

    event_type: ClassVar[str] = HANDOFF_DELEGATION_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    caller: str
    expert: str
    tool_name: str
    call_id: str
    task: str
    result: str
    outcome: DelegationOutcome = "answered"
    messages: MessagesField = ()
    depth: int = 1


@dataclass(frozen=True)
class HandoffBlockedEvent:
    """A handoff call that was refused; the calling agent got a tool error and kept the turn.

    ``reason`` is ``"empty_goal"`` / ``"empty_summary"`` (the argument was blank),
    ``"invalid_payload"`` (the arguments did not validate), ``"not_granted"`` (the tool belongs
    to another agent's handoffs), ``"disabled"`` (one of the agent's own handoffs, not offered in
    that run), ``"unknown_target"`` (no such handoff tool in this workflow: a handoff-like name,
    ``target`` is ``None``), ``"ping_pong"`` (handing straight back to the agent that just handed
    back), ``"vetoed"`` (the edge's ``on_handoff`` said no) or ``"declined"`` (a person declined
    the approval). Calls to a handoff the agent does not have in its run are refused while it
    runs, like the others: the tool error names the handoff tools it has.
    """

    event_type: ClassVar[str] = HANDOFF_BLOCKED_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    source: str
    tool_name: str
    reason: BlockReason
    call_id: str
    target: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class EscalationEvent:
    """The turn was handed to a human: a cap was reached and the user got an apology.

    ``reason`` is ``"handoff_cap"`` (more handoffs were requested than the per-message cap
    allows), ``"max_iterations"`` (the turn used every agent invocation it was allowed) or
    ``"rejected_handoffs"`` (the agents kept making handoff calls that were refused: past the cap
    on rejected attempts), ``"review_rounds"`` (a reviewer asked for changes ``limit`` times) or
    ``"tool_limit"``: the agent's tool loop stopped at one of agent_framework's
    function-invocation limits (its model calls per run, failing calls in a row, function calls
    or time: ``function_invocation_configuration`` of the agent's chat client) before the model
    answered; ``limit`` is 0 then (not a count of this workflow's).
    ``requested_target`` and ``goal`` are those of the call that tripped the cap, when a call
    did; for a review, the reply's author and the last feedback (the concerns still open), and
    ``evidence`` is every round's feedback, in order.
    """

    event_type: ClassVar[str] = HANDOFF_ESCALATED_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    reason: EscalationReason
    agent: str
    limit: int
    requested_target: str | None = None
    goal: str | None = None
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class LimitReachedEvent:
    """A limit ended the turn, and the user gets the last reply (no escalation).

    ``kind`` is ``"autonomous_turns"``: ``agent`` used every autonomous continuation it was
    allowed (``limit``), so the turn went back to the user (.NET's behaviour); or a cap whose
    outcome is :attr:`~handoff_builder.CapOutcome.RETURN_TO_USER` (``"handoff_cap"``,
    ``"max_iterations"``, ``"rejected_handoffs"``, ``"blocked_handoff"``).
    """

    event_type: ClassVar[str] = HANDOFF_LIMIT_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    kind: Literal[
        "autonomous_turns",
        "handoff_cap",
        "max_iterations",
        "rejected_handoffs",
        "blocked_handoff",
        "review_rounds",
        "tool_limit",
    ]
    agent: str
    limit: int


@dataclass(frozen=True)
class RoutingStep:
    """One routing step of a turn, in :attr:`HandoffTurnResult.trace`.

    ``decided_by`` says whether the model or code made it, and ``by`` what exactly: the handoff
    tool the model called (``"handoff_to_billing"``), or, for code, ``"initial_agent"``,
    ``"previous_agent"``, ``"reply"`` (the agent answered without a handoff: the model's choice),
    ``"termination_condition"``, ``"autonomous_mode"``, a cap (``"handoff_cap"``,
    ``"max_iterations"``, ``"rejected_handoffs"``, ``"autonomous_turns"``), a block reason
    (``"not_granted"``, ``"empty_goal"``...), ``"agent_call"`` / ``"turn"`` (a deadline), or the
    manager's class name for a manager of your own. ``source`` is the agent whose reply led to it
    (``None`` at the start), ``target`` the agent that runs next (``None``: the turn ended there).
    ``limit`` and ``count`` are the cap and how far the turn got, for caps.
    """

    kind: StepKind
    decided_by: DecidedBy
    by: str
    source: str | None = None
    target: str | None = None
    limit: int | None = None
    count: int | None = None


@dataclass(frozen=True)
class TurnTimeoutEvent:
    """A deadline cut the turn short; the turn ended without the late agent's reply.

    ``limit`` is ``"agent_call"`` (one agent call took longer than ``seconds``) or ``"turn"``
    (the whole turn did); ``agent`` is the agent that was running, or about to run, when it
    passed. The conversation stays valid: nothing of the cancelled call was kept.
    """

    event_type: ClassVar[str] = HANDOFF_TIMEOUT_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    limit: Literal["agent_call", "turn"]
    agent: str
    seconds: float


@dataclass(frozen=True)
class TurnAbandonedEvent:
    """A hosted turn was given up and closed, so that the conversation moves on.

    ``reason`` is ``"failed"`` (it failed ``attempts`` times: the first run and every retry) or
    ``"on_demand"`` (``ConversationHost.abandon``). ``agent`` is the agent the turn was waiting
    for, ``error`` the last failure (``"TypeName: message"``), when there was one. Requests the
    turn waited for were answered as not answered, so the history stays valid for every provider.
    """

    event_type: ClassVar[str] = HANDOFF_TURN_ABANDONED_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    reason: Literal["failed", "on_demand"]
    agent: str | None
    attempts: int
    error: str | None = None


class HandoffTurnResult(AgentResponse):
    """What one user turn produced: the workflow output yielded when the turn ends.

    It is an :class:`agent_framework.AgentResponse` whose ``messages`` are the messages the turn
    added after the user's input (agent replies, handoff calls and their results, and the apology
    when the turn was escalated), so ``workflow.as_agent()`` and ``result.get_outputs()`` work as
    usual. It also carries:

    * ``active_agent``: the agent that ended the turn (the next message goes there when the
      workflow returns to the previous agent);
    * ``handoffs``: the handoffs performed in this turn, in order;
    * ``status``: how the turn ended (:data:`TurnStatus`): ``"completed"``, or the cap that
      stopped it;
    * ``escalation``: why the turn was escalated to a human, or ``None``; ``escalated`` is the flag;
    * ``timeout``: the deadline that cut the turn short, or ``None``;
    * ``abandoned``: why a hosted turn was given up, or ``None``;
    * ``trace``: the turn's routing steps (:class:`RoutingStep`), each saying whether the model
      or code decided it;
    * ``delegations``: the delegations of this turn (:class:`DelegationEvent`), in the order
      they finished, each with the expert's own messages;
    * ``recovered``: in a hosted conversation, the result of an earlier turn that this call
      finished (after a crash) or abandoned before it ran the new message, or ``None``;
    * ``conversation``: the whole shared conversation at the end of the turn;
    * ``start``: where the turn's own messages start in ``conversation``; ``hidden``: the ranges
      of them left out of ``messages`` (drafts a reviewer sent back, and the reviews);
    * ``model_calls``: what each model received in this turn (:class:`ModelCall`, in order, the
      latest ``max_calls``), when the workflow was built with
      :meth:`~handoff_builder.HandoffWorkflowBuilder.with_model_inputs`; empty otherwise.
      :meth:`received` picks one agent's.
    """

    def __init__(
        self,
        *,
        messages: Sequence[Message],
        active_agent: str,
        handoffs: Sequence[HandoffEvent],
        escalation: EscalationEvent | None,
        conversation: Sequence[Message],
        status: TurnStatus | None = None,
        timeout: TurnTimeoutEvent | None = None,
        abandoned: TurnAbandonedEvent | None = None,
        recovered: HandoffTurnResult | None = None,
        trace: Sequence[RoutingStep] = (),
        delegations: Sequence[DelegationEvent] = (),
        start: int | None = None,
        hidden: Sequence[tuple[int, int]] = (),
        model_calls: Sequence[ModelCall] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(messages=list(messages), **kwargs)
        self.active_agent = active_agent
        self.handoffs: tuple[HandoffEvent, ...] = tuple(handoffs)
        self.escalation = escalation
        self.timeout = timeout
        self.abandoned = abandoned
        self.recovered = recovered
        self.trace: tuple[RoutingStep, ...] = tuple(trace)
        self.delegations: tuple[DelegationEvent, ...] = tuple(delegations)
        self.start = start if start is not None else len(conversation) - len(self.messages)
        self.hidden: tuple[tuple[int, int], ...] = tuple(hidden)
        self.status: TurnStatus = status or (escalation.reason if escalation else "completed")
        self.conversation: tuple[Message, ...] = tuple(conversation)
        self.model_calls: tuple[ModelCall, ...] = tuple(model_calls)

    @property
    def escalated(self) -> bool:
        """True when the turn was escalated to a human; see ``escalation`` for why."""
        return self.escalation is not None

    def received(self, agent: str, call: int = -1) -> ModelCall:
        """What ``agent``'s model received in its call ``call`` of this turn (default: the last).

        As :func:`handoff_builder.testing.received` for a scripted agent, with any chat client:
        ``print(turn.received("billing").rendered)``. Needs a workflow built with
        :meth:`~handoff_builder.HandoffWorkflowBuilder.with_model_inputs`.

        Raises:
            ModelCallNotRecordedError: nothing was recorded, or no such call of ``agent``.
        """
        if not self.model_calls:
            raise ModelCallNotRecordedError(
                agent,
                call,
                "No model call was recorded in this turn: build the workflow with "
                "with_model_inputs() to keep what each model receives.",
            )
        calls = [c for c in self.model_calls if c.agent == agent]
        try:
            return calls[call]
        except IndexError:
            pass
        first = self.model_calls[0].index or 0
        dropped = f" The turn's first {first} call(s) were not kept (max_calls)." if first else ""
        if not calls:
            counts: dict[str, int] = {}
            for recorded in self.model_calls:
                counts[str(recorded.agent)] = counts.get(str(recorded.agent), 0) + 1
            shown = ", ".join(f"{name} ({count})" for name, count in counts.items())
            message = (
                f"Agent {agent!r}'s model has no recorded call in this turn; recorded: {shown}."
            )
        else:
            message = (
                f"Agent {agent!r}'s model has {len(calls)} recorded call(s) in this turn; "
                f"there is no call {call}."
            )
        raise ModelCallNotRecordedError(agent, call, message + dropped)

    @override
    def __deepcopy__(self, memo: dict[int, Any]) -> HandoffTurnResult:
        # A turn result is a snapshot that nothing changes afterwards (the history is
        # append-only), so agent_framework's defensive deep copy of outputs can share it.
        return self

    @override
    def __repr__(self) -> str:
        return (
            f"HandoffTurnResult(active_agent={self.active_agent!r}, "
            f"handoffs={len(self.handoffs)}, status={self.status!r}, text={self.text!r})"
        )
