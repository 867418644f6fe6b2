"""What crosses Temporal: JSON through pydantic, never pickle.

The workflow's input, the user's messages and answers, a turn's outcome, and one agent call (the
activity's input and result). Messages and contents travel as agent_framework's ``to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agent_framework import AgentResponse, Content, Message, WorkflowEvent
from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from temporalio.api.common.v1 import Payloads
from temporalio.contrib.pydantic import pydantic_data_converter

from handoff_builder._decision import CallOutcome, HandoffCall, ReviewVerdict
from handoff_builder._delegation import DueExperts, Suspension
from handoff_builder._events import (
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_LIMIT_EVENT,
    BlockReason,
    DelegationEvent,
    EscalationEvent,
    EscalationReason,
    HandoffBlockedEvent,
    HandoffEvent,
    HandoffTurnResult,
    LimitReachedEvent,
    RoutingStep,
    TurnAbandonedEvent,
    TurnStatus,
    TurnTimeoutEvent,
)
from handoff_builder._host import GroupChatHost
from handoff_builder._participant import AgentRun
from handoff_builder._state import (
    DelegationFrame,
    TurnRecord,
    adapter_for,
    decode_host_state,
    validated,
)

from ._chain import HistoryReference

DEFAULT_PAYLOAD_LIMIT = 2 * 1024 * 1024
"""Temporal's limit on one payload (``limit.blobSize.error``) when the namespace does not say."""


TURN_ALLOWANCE = 1024
"""Bytes an agent call may take besides the conversation and the new input: the open turn's state
(where it starts, who runs, its counters) and how the input is stored. An Update whose input
would leave less room than this under the payload limit is refused."""

KEY_PREFIX = "key:"
"""The start of an Update's id that is a client's idempotency key (the rest of the id)."""


def payload_size(value: Any) -> int:
    """The bytes ``value`` takes as a Temporal payload, measured as the server measures them."""
    payloads = pydantic_data_converter.payload_converter.to_payloads([value])
    return Payloads(payloads=payloads).ByteSize()


class Carried(BaseModel):
    """A conversation carried into a new run of its workflow (continue-as-new)."""

    history: list[dict[str, Any]]
    host: dict[str, Any]
    idle: bool = False
    failures: int = 0
    last_error: str | None = None
    receipts: dict[str, dict[str, Any]] = Field(default_factory=dict[str, dict[str, Any]])
    logged: str = ""
    """The digest of the latest history the workers' message log holds (``""``: none known)."""
    length: int = 0
    """How many messages of the conversation are carried by reference: the history ending at
    ``logged``, read back from the workers' message log; ``history`` holds those after them
    (``0``: ``history`` is the whole conversation)."""

    @property
    def by_reference(self) -> bool:
        """Whether part of the history is to be read back from the message log."""
        return self.length > 0


def carried(
    host: GroupChatHost,
    *,
    idle: bool = False,
    failures: int = 0,
    last_error: str | None = None,
    receipts: dict[str, dict[str, Any]] | None = None,
    logged: tuple[str, int] = ("", 0),
) -> Carried:
    """The conversation as ``host`` holds it, to carry into a new run or to go back to.

    ``receipts`` are copied: the carried ones may be dropped without touching these.
    ``logged``: the digest and the length of the part of the history the workers' message log
    holds, which is carried by reference (only the messages after it are carried).
    """
    digest, length = logged
    return Carried(
        history=[message.to_dict() for message in host.history[length:]],
        length=length,
        host=host.snapshot(),
        idle=idle,
        failures=failures,
        last_error=last_error,
        receipts=dict(receipts or {}),
        logged=digest,
    )


def load(
    host: GroupChatHost, history: list[dict[str, Any]], state: dict[str, Any], conversation_id: str
) -> None:
    """Load ``host`` with the history and the state of a conversation, as they crossed.

    Raises:
        CorruptStateError: the state does not decode.
        ValueError, TypeError, KeyError: a message does not.
    """
    messages = [Message.from_dict(item) for item in history]
    host.load(messages, decode_host_state(state, f"Conversation {conversation_id!r}"))


class ConversationStart(BaseModel):
    """The workflow's input: the conversation's settings, and what a previous run carried.

    ``task_queue`` names the builder the conversation runs (the one its workers registered for
    that queue), also when a replayer runs the workflow on a task queue of its own.
    ``payload_limit`` is the namespace's limit on one payload, in bytes, as the client read it.
    """

    task_queue: str
    idle_timeout: float = Field(gt=0)
    max_turn_retries: int = Field(ge=0)
    turns_per_run: int = Field(gt=0)
    local_activities: bool = False
    payload_limit: int = Field(default=DEFAULT_PAYLOAD_LIMIT, gt=0)
    carried: Carried | None = None


class UserInputPayload(BaseModel):
    """A user turn: its messages (``ConversationHost``'s ``UserInput``, as it crosses Temporal).

    ``relay``: the relay stream the client reads the turn's live updates from (``stream()``
    with a relay; ``""``: the turn is not relayed).
    """

    messages: list[dict[str, Any]]
    relay: str = ""


class Answers(BaseModel):
    """Answers to the requests a turn waits for, by request id."""

    answers: dict[str, dict[str, Any]]


class RelayedCall(BaseModel):
    """An agent call of a relayed turn: its activity's id and the attempt whose run counted."""

    call: str
    attempt: int


class TurnOutcome(BaseModel):
    """What a turn came to: its result, or the requests it waits for.

    ``relayed``: for a relayed turn, its agent calls, each with the attempt whose run the turn
    kept, in order: the client checks that it read each of them whole (``None``: not relayed).
    """

    status: Literal["completed", "waiting"]
    result: dict[str, Any] | None = None
    requests: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    recovered: dict[str, Any] | None = None
    relayed: list[RelayedCall] | None = None
    events: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    """The events of the turn the client cannot read from its result (refused handoffs,
    limits, warnings), in order (:func:`encode_events`)."""


class AgentCallPayload(BaseModel):
    """One agent call (:class:`~handoff_builder.GroupChatHost`'s ``AgentCall``), for the activity.

    The conversation and the host's state as they stand, the agent, whether it runs without
    handoff tools, and the payload limit its result must keep to. ``relay``: the relay stream
    its live updates go to (``""``: none; a worker without a relay publishes nothing). With a
    ``reference`` (workers with a message log, see ``_chain``), ``history`` is empty: the
    activity reads the conversation from the log.
    """

    model_config = ConfigDict(serialize_by_alias=True)

    conversation_id: str
    agent: str
    no_handoffs: bool = Field(
        validation_alias=AliasChoices("no_handoffs", "closed"), serialization_alias="closed"
    )  # "closed" on the wire, as workers of earlier releases read it
    history: list[dict[str, Any]]
    host: dict[str, Any]
    payload_limit: int = DEFAULT_PAYLOAD_LIMIT  # that of the result, too
    relay: str = ""
    reference: HistoryReference | None = None
    events: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    """The turn's events so far that its result does not hold (:func:`encode_events`): the
    worker relays them before the call's updates."""
    experts_apart: bool = False
    """The agent's delegate calls come back due (``AgentCallResult.due``), not run here: the
    workflow runs each expert as an activity of its own."""
    so_far: AgentCallResult | None = None
    """The agent's run goes on from here, its due experts answered (what it did so far)."""
    frame: dict[str, Any] | None = None
    """A due expert to ask (a ``DelegationFrame``): the call asks it instead of running
    ``agent``, the caller."""

    @property
    def length(self) -> int:
        """How many messages the conversation has where the call starts."""
        return self.reference.length if self.reference is not None else len(self.history)


class CallRecord(BaseModel):
    """One vetted handoff call of an agent invocation."""

    tool: str
    argument: str
    call_id: str
    outcome: CallOutcome
    result: str
    blocked: BlockReason | None = None
    escalation: EscalationReason | None = None
    payload: dict[str, Any] | None = None
    arguments: str = ""


class VerdictRecord(BaseModel):
    """A reviewer's verdict (``with_review``)."""

    kind: Literal["approve", "request_changes"]
    text: str
    call_id: str


class AgentCallResult(BaseModel):
    """What the activity returns.

    The agent's messages, its vetted handoff calls, the handoffs it was not offered, and
    whether its tool loop stopped at agent_framework's limit without an answer.
    """

    messages: list[dict[str, Any]]
    calls: list[CallRecord]
    disabled: list[str]
    verdict: VerdictRecord | None = None
    tool_limit: bool = False
    delegations: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    """The run's finished delegations (``DelegationEvent``), innermost first."""
    suspension: dict[str, Any] | None = None
    """A delegation of the run that waits: its frames and the requests it waits for."""
    due: dict[str, Any] | None = None
    """The run's delegate calls not run here (``experts_apart``): their frames, each
    expert's own time limit, and whether the run goes on once they answered."""
    attempt: int = 0
    """The activity's attempt that ran it (1 for the first; 0 from a worker of an earlier
    release): a relayed turn names it, so that the client knows which attempt's updates held."""


AgentCallPayload.model_rebuild()


TRAVELLING_EVENTS: dict[str, type[Any]] = {
    HANDOFF_BLOCKED_EVENT: HandoffBlockedEvent,
    HANDOFF_LIMIT_EVENT: LimitReachedEvent,
}
"""The events of a turn on Temporal that its result does not hold, by type: they travel to the
client beside it (with warnings, ``"warning"``)."""


def encode_events(items: list[object], handoffs: int) -> tuple[list[dict[str, Any]], int]:
    """The events among a host's kept ones (``GroupChatHost.kept_events``) that travel.

    Each is marked with how many of the turn's handoffs came before it (``after``), counted
    from ``handoffs``, the handoffs before ``items``; returned with the count after them.
    """
    encoded: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, HandoffEvent):
            handoffs += 1
        elif isinstance(item, str):
            encoded.append({"type": "warning", "data": item, "after": handoffs})
        elif (kind := TRAVELLING_EVENTS.get(getattr(item, "event_type", ""))) is not None:
            data = _encode(kind, item)
            encoded.append({"type": kind.event_type, "data": data, "after": handoffs})
    return encoded, handoffs


def decode_events(raw: list[dict[str, Any]], where: str) -> list[tuple[int, WorkflowEvent[Any]]]:
    """The workflow events :func:`encode_events` encoded, each with the handoffs before it.

    One of a kind unknown here is left out.

    Raises:
        CorruptStateError: an event does not read.
    """
    events: list[tuple[int, WorkflowEvent[Any]]] = []
    for item in raw:
        kind, data, after = item.get("type"), item.get("data"), int(item.get("after", 0))
        if kind == "warning":
            events.append((after, WorkflowEvent.warning(str(data))))
        elif kind in TRAVELLING_EVENTS:
            event = validated(TRAVELLING_EVENTS[kind], data, where)
            events.append((after, WorkflowEvent(kind, data=event)))
    return events


def encode_run(run: AgentRun) -> AgentCallResult:
    verdict = run.verdict
    return AgentCallResult(
        verdict=None
        if verdict is None
        else VerdictRecord(kind=verdict.kind, text=verdict.text, call_id=verdict.call_id),
        messages=[message.to_dict() for message in run.response.messages],
        calls=[
            CallRecord(
                tool=call.route.tool_name,
                argument=call.argument,
                call_id=call.call_id,
                outcome=call.outcome,
                result=call.result,
                blocked=call.blocked,
                escalation=call.escalation,
                payload=None if call.payload is None else call.payload.model_dump(mode="json"),
                arguments=call.arguments,
            )
            for call in run.calls
        ],
        disabled=sorted(run.disabled),
        tool_limit=run.tool_limit,
        delegations=[_encode(DelegationEvent, record) for record in run.delegations],
        suspension=None if run.suspension is None else _encode_suspension(run.suspension),
        due=None if run.due is None else _encode_due(run.due),
    )


def _encode(kind: type[Any], value: Any) -> dict[str, Any]:
    return adapter_for(kind).dump_python(value, mode="json")


def _encode_suspension(suspension: Suspension) -> dict[str, Any]:
    return {
        "frames": [_encode(DelegationFrame, frame) for frame in suspension.frames],
        "requests": [request.to_dict() for request in suspension.requests],
        "beside": [_encode_suspension(other) for other in suspension.beside],
    }


def _encode_due(due: DueExperts) -> dict[str, Any]:
    return {
        "frames": [_encode(DelegationFrame, frame) for frame in due.frames],
        "seconds": list(due.seconds),
        "goes_on": due.goes_on,
    }


def _decode_due(raw: dict[str, Any]) -> DueExperts:
    frames = tuple(validated(DelegationFrame, frame, "a due expert") for frame in raw["frames"])
    seconds = tuple(None if s is None else float(s) for s in raw["seconds"])
    return DueExperts(frames, seconds, bool(raw["goes_on"]))


def encode_frame(frame: DelegationFrame) -> dict[str, Any]:
    """A due expert's frame, as an ``ask_expert`` call carries it."""
    return _encode(DelegationFrame, frame)


def decode_frame(raw: dict[str, Any]) -> DelegationFrame:
    """Read back what :func:`encode_frame` wrote.

    Raises:
        CorruptStateError: it does not read.
    """
    return validated(DelegationFrame, raw, "a due expert")


def _decode_suspension(raw: dict[str, Any]) -> Suspension:
    frames = tuple(
        validated(DelegationFrame, frame, "a waiting delegation") for frame in raw["frames"]
    )
    requests = tuple(Content.from_dict(request) for request in raw["requests"])
    beside = tuple(_decode_suspension(other) for other in raw.get("beside", ()))
    return Suspension(frames, requests, beside)


def decode_run(host: GroupChatHost, agent: str, result: AgentCallResult) -> AgentRun:
    """The activity's result as the host's :class:`AgentRun`, routes and payloads read back."""
    calls: list[HandoffCall] = []
    for record in result.calls:
        route = host.route_of(agent, record.tool)
        payload = None if record.payload is None else route.model.model_validate(record.payload)
        calls.append(
            HandoffCall(
                route,
                record.argument,
                record.call_id,
                record.outcome,
                record.result,
                record.blocked,
                record.escalation,
                payload,
                record.arguments,
            )
        )
    response = AgentResponse(messages=[Message.from_dict(m) for m in result.messages])
    verdict = result.verdict
    return AgentRun(
        response,
        tuple(calls),
        frozenset(result.disabled),
        None if verdict is None else ReviewVerdict(verdict.kind, verdict.text, verdict.call_id),
        result.tool_limit,
        tuple(validated(DelegationEvent, item, "a delegation") for item in result.delegations),
        None if result.suspension is None else _decode_suspension(result.suspension),
        None if result.due is None else _decode_due(result.due),
    )


@dataclass(frozen=True)
class _FinishedTurn:
    """A finished turn as it travels back to the client: its record and its own messages.

    ``messages`` are the conversation's from the record's ``start`` to its ``end``; the client
    reads the rest with ``history()``.
    """

    record: TurnRecord
    messages: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class _EarlierTurn:
    """A finished turn as a release before :class:`TurnRecord` sent it (in kept receipts)."""

    messages: tuple[dict[str, Any], ...]
    status: TurnStatus
    agent: str
    handoffs: tuple[HandoffEvent, ...] = ()
    escalation: EscalationEvent | None = None
    timeout: TurnTimeoutEvent | None = None
    abandoned: TurnAbandonedEvent | None = None
    trace: tuple[RoutingStep, ...] = ()


def encode_turn(result: HandoffTurnResult) -> dict[str, Any]:
    """``result`` as it crosses Temporal."""
    record = TurnRecord.of(result)
    messages = tuple(m.to_dict() for m in result.conversation[record.start : record.end])
    encoded: dict[str, Any] = adapter_for(_FinishedTurn).dump_python(
        _FinishedTurn(record, messages), mode="json"
    )
    return encoded


def decode_turn(raw: dict[str, Any], conversation_id: str) -> HandoffTurnResult:
    """Read back what :func:`encode_turn` wrote (or an earlier release's turn)."""
    where = f"The turn of conversation {conversation_id!r}"
    if "record" not in raw:
        earlier: _EarlierTurn = validated(_EarlierTurn, raw, where)
        messages = [Message.from_dict(message) for message in earlier.messages]
        record = TurnRecord(
            0, len(messages), earlier.status, earlier.agent, earlier.handoffs,
            earlier.escalation, earlier.timeout, earlier.abandoned, earlier.trace,
        )  # fmt: skip
        return record.result(messages)
    finished: _FinishedTurn = validated(_FinishedTurn, raw, where)
    messages = [Message.from_dict(message) for message in finished.messages]
    return finished.record.result(messages, offset=finished.record.start)


def contents(raw: list[dict[str, Any]]) -> list[Content]:
    return [Content.from_dict(item) for item in raw]
