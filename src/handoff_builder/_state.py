"""Persisted state: frozen records, one schema version, encoded and decoded here only.

Three things are persisted:

* the host's small state (:class:`HostState`, with the manager's own state inside it), in
  workflow checkpoints and in a hosted conversation's state row;
* a finished turn (:class:`TurnRecord`): where its messages are in the conversation and how it
  ended, kept for a hosted call's idempotency key and sent back by a Temporal worker; every
  :class:`~handoff_builder.HandoffTurnResult` is read from one;
* on the function result of every vetted handoff call, a small record of what became of it
  (:func:`handoff_record`), so that each agent's view can show a handoff to the agent that
  receives it, wherever the history is loaded from.

A field renamed since a release wrote it keeps its stored key (:func:`stored_as`): it is written
under that key, so the release before reads it, and read under either name.

Records are validated with pydantic when they are read back (the adapters are built on first use,
so a program that never checkpoints does not pay for them). A record from a newer schema is refused
with :class:`~handoff_builder.SchemaVersionError`; an invalid one raises
:class:`~handoff_builder.CorruptStateError` naming what was wrong.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple, cast

from agent_framework import Content, Message
from pydantic import AliasChoices, BaseModel, Field

from ._decision import HOST_NOTE_AUTHOR
from ._events import (
    DelegationEvent,
    EscalationEvent,
    HandoffEvent,
    HandoffTurnResult,
    MessagesField,
    RoutingStep,
    TurnAbandonedEvent,
    TurnStatus,
    TurnTimeoutEvent,
)
from ._payloads import payload_label, validate_arguments
from ._routes import EDGE_KINDS, HandoffKind
from .exceptions import CorruptStateError, SchemaVersionError

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from ._decision import HandoffCall
    from ._model_calls import ModelCall

__all__ = [
    "HANDOFF_RECORD_KEY",
    "STATE_SCHEMA_VERSION",
    "Continuation",
    "DelegationFrame",
    "HandoffState",
    "HostState",
    "PendingState",
    "RecordedHandoff",
    "TurnRecord",
    "TurnState",
    "WaitingDelegation",
    "active_agent",
    "adapter_for",
    "decode_checkpoint",
    "decode_handoff_state",
    "decode_host_state",
    "encode_handoff_state",
    "encode_host_state",
    "handoff_record",
    "transferred_handoff",
    "turn_reply",
    "validated",
]

STATE_SCHEMA_VERSION = 5
"""Version of the host state written by this release (1: handoff_builder 0.1's first format;
2: without delegations and reviews, which 3 adds; 4 adds the abandoned turns no agent reads any
more; 5 the delegations that wait beside another. A release refuses a newer version, so a
worker of it never drops what it cannot see)."""

HANDOFF_RECORD_KEY = "handoff_builder"
"""Key, in a handoff call's function result ``additional_properties``, of its record."""


def stored_as(key: str, name: str) -> Any:
    """A field named ``name`` in Python and ``key`` in stored records.

    Written as ``key``, read as either: ``Annotated[<type>, stored_as(key, name)]``.
    """
    return Field(validation_alias=AliasChoices(name, key), serialization_alias=key)


# -- the host and the handoff manager -------------------------------------------------------------


@dataclass(frozen=True)
class TurnState:
    """The open user turn: where its messages start, its handoffs and its agent invocations.

    An agent that carries on after its requests were answered is the same invocation.
    """

    start: int
    """Where the messages the turn adds start in the history (after the user's input)."""
    handoffs: tuple[HandoffEvent, ...] = ()
    invocations: int = 0
    steps: tuple[RoutingStep, ...] = ()
    delegations: tuple[DelegationEvent, ...] = ()
    since: int = 0
    """Where the messages of the agent invocation under way start in the history (after its
    input): a reply that waited for answers is one invocation."""
    review: tuple[int, int, str] | None = None
    """While a reviewer has the reply: where the reply starts, where the review does, and its
    producer."""
    hidden: tuple[tuple[int, int], ...] = ()
    """History ranges (start, end) left out of the turn's reply: a draft that was not approved,
    the reviews, and the run of an agent whose blocked handoff forced a safe agent."""
    input_start: int | None = None
    """Where the user's input that started the turn begins in the history (``None``: a turn
    saved before this was kept; its input is read back from the history)."""

    def input_from(self, history: Sequence[Message]) -> int:
        """Where the user's input that started the turn begins in ``history``."""
        if self.input_start is not None:
            return self.input_start
        first = min(self.start, len(history))
        while (
            first > 0 and history[first - 1].role == "user" and not history[first - 1].author_name
        ):
            first -= 1
        return first

    def with_handoff(self, handoff: HandoffEvent) -> TurnState:
        """This turn with one more handoff."""
        return replace(self, handoffs=(*self.handoffs, handoff))

    def with_step(self, step: RoutingStep) -> TurnState:
        """This turn with one more routing step."""
        return replace(self, steps=(*self.steps, step))

    def with_payloads(
        self, models: Mapping[tuple[str, str], type[BaseModel]], where: str
    ) -> TurnState:
        """This turn with its handoffs' payloads read back into their edges' ``models``.

        They are stored as JSON; ``models`` holds each typed edge's model by source and tool.

        Raises:
            CorruptStateError: a stored payload does not fit its model (it changed since);
                ``where`` names what saved it.
        """
        if not any(isinstance(h.payload, dict) for h in self.handoffs):
            return self
        handoffs: list[HandoffEvent] = []
        for handoff in self.handoffs:
            model = models.get((handoff.source, handoff.tool_name))
            if isinstance(handoff.payload, dict) and model is not None:
                # our own record of a validated payload: read back as it was written
                payload, problem = validate_arguments(model, handoff.payload, strict=False)
                if problem is not None:
                    raise CorruptStateError(
                        where,
                        f"the payload of the handoff from {handoff.source} to {handoff.target} "
                        f"({handoff.tool_name}) does not fit {model.__name__}: {problem}",
                    )
                handoff = replace(handoff, payload=payload)
            handoffs.append(handoff)
        return replace(self, handoffs=tuple(handoffs))


@dataclass(frozen=True)
class Continuation:
    """What a waiting turn does once its requests are answered.

    Add ``input`` (messages as ``Message.to_dict()``), then run ``agent``; ``handoff`` made it
    the next agent, if one did.
    """

    agent: str
    handoff: HandoffEvent | None = None
    input: tuple[dict[str, Any], ...] = ()
    no_handoffs: Annotated[bool, stored_as("last", "no_handoffs")] = False
    """A safe agent: it carries on with no handoff tools."""


@dataclass(frozen=True)
class DelegationFrame:
    """A delegation that waits: ``caller`` asked ``expert`` (call ``call_id``), not answered yet.

    ``messages`` is what the expert has so far: its task, and its replies when it ran
    (``started``); a delegate with ``approval=True`` waits, not started, for that approval. The
    expert also reads the first ``history_end`` messages of the shared conversation, as its
    ``history`` mode shows them (they are read again from the history, not kept here).
    """

    caller: str
    expert: str
    tool_name: str
    call_id: str
    task: str
    depth: int
    history: Literal["none", "full", "filtered"] = "none"
    history_end: int = 0
    messages: MessagesField = ()
    started: bool = True


@dataclass(frozen=True)
class WaitingDelegation:
    """A delegation that waits beside another of the same response.

    Its frames (outermost first) and the ids of the requests it waits for.
    """

    frames: tuple[DelegationFrame, ...]
    requests: tuple[str, ...]


@dataclass(frozen=True)
class PendingState:
    """The requests one agent waits for (``Content.to_dict()`` forms) and the answers so far.

    ``delegation`` (outermost first) when they are an expert's, inside ``agent``'s delegation.
    """

    agent: str
    requests: tuple[dict[str, Any], ...]
    answers: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    then: Continuation | None = None
    delegation: tuple[DelegationFrame, ...] = ()
    beside: tuple[WaitingDelegation, ...] = ()
    """Other delegate calls of ``agent``'s response that wait too, in call order after
    ``delegation``'s; the requests not theirs are ``delegation``'s."""


@dataclass(frozen=True)
class HostState:
    """Everything a :class:`~handoff_builder.GroupChatHost` keeps besides the history.

    ``speaker`` ran last; ``next`` runs next in the open turn; ``manager`` is the manager's own
    JSON state (:meth:`GroupChatManager.save_state`).
    """

    schema_version: int = STATE_SCHEMA_VERSION
    speaker: str | None = None
    next: str | None = None
    next_no_handoffs: Annotated[bool, stored_as("next_closed", "next_no_handoffs")] = False
    """``next`` runs with no handoff tools (a safe agent)."""
    turn: TurnState | None = None
    pending: PendingState | None = None
    manager: dict[str, Any] = field(default_factory=dict[str, Any])
    left_out: tuple[tuple[int, int], ...] = ()
    """History ranges (start, end) no agent reads any more: the turns that were abandoned, from
    the user's input to the results that closed them. They stay in the history."""

    @property
    def active_agent(self) -> str | None:
        """The agent the conversation is with (see :func:`active_agent`)."""
        agent = None if self.pending is None else self.pending.agent
        return active_agent(self.speaker, self.next, agent, turn_open=self.turn is not None)


def active_agent(
    speaker: str | None, next_agent: str | None, waiting: str | None, *, turn_open: bool
) -> str | None:
    """The agent a conversation is with: where its open turn goes on, or its next message starts.

    In an open turn, the agent whose requests it waits for (``waiting``), else the agent about
    to run (``next_agent``, saved before it is called); between turns, the agent that ended the
    last one (``speaker``).
    """
    if waiting is not None:
        return waiting
    if turn_open and next_agent is not None:
        return next_agent
    return speaker


@dataclass(frozen=True)
class HandoffState:
    """The :class:`~handoff_builder.HandoffManager`'s counters for the open turn.

    ``invocations``, ``handoffs`` and ``rejected`` count this turn's agent invocations, followed
    handoffs and refused handoff attempts; ``autonomous_turns`` the continuations of each agent
    in its current autonomous run; ``last_hand_back`` is (from, to) of the latest hand-back, the
    ping-pong guard; ``reviewing`` and ``review_feedback`` the review under way (``with_review``)
    and the changes requested so far. Every field is reset when a user message arrives.
    """

    invocations: int = 0
    handoffs: int = 0
    rejected: int = 0
    autonomous_turns: dict[str, int] = field(default_factory=dict[str, int])
    last_hand_back: tuple[str, str] | None = None
    safe_agent: Annotated[tuple[str, str] | None, stored_as("forced", "safe_agent")] = None
    """(safe agent, cap): a cap passed the turn to that agent, which runs once with no handoff
    tools; then the turn ends."""
    reviewing: tuple[str, str] | None = None  # (producer, reviewer): the reviewer has the reply
    review_feedback: tuple[str, ...] = ()  # each request for changes of this turn, in order


@dataclass(frozen=True)
class TurnRecord:
    """A finished turn: where its messages are in the conversation, and how it ended.

    Every :class:`~handoff_builder.HandoffTurnResult` is read from one (:meth:`result`): the
    host's own at the end of a turn, a hosted call repeated with its idempotency key, the hosted
    agent's answer after the requests, and a Temporal worker's.
    """

    start: int
    end: int
    status: TurnStatus
    agent: str
    handoffs: tuple[HandoffEvent, ...] = ()
    escalation: EscalationEvent | None = None
    timeout: TurnTimeoutEvent | None = None
    abandoned: TurnAbandonedEvent | None = None
    trace: tuple[RoutingStep, ...] = ()
    delegations: tuple[DelegationEvent, ...] = ()
    hidden: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, result: HandoffTurnResult) -> TurnRecord:
        """The record of ``result`` (its turn ends where its conversation does)."""
        return cls(
            result.start, len(result.conversation), result.status, result.active_agent,
            result.handoffs, result.escalation, result.timeout, result.abandoned, result.trace,
            result.delegations, result.hidden,
        )  # fmt: skip

    def result(
        self,
        conversation: Sequence[Message],
        *,
        offset: int = 0,
        recovered: HandoffTurnResult | None = None,
        model_calls: Sequence[ModelCall] = (),
    ) -> HandoffTurnResult:
        """The turn's result, read from ``conversation`` (its messages from index ``offset`` on).

        ``conversation`` holds at least the turn's messages; what follows the turn is left out.
        ``model_calls`` are kept in memory only, never in the record.
        """
        start = self.start - offset
        hidden = tuple((low - offset, high - offset) for low, high in self.hidden)
        conversation = conversation[: self.end - offset]
        return HandoffTurnResult(
            messages=turn_reply(conversation, start, hidden),
            active_agent=self.agent,
            handoffs=self.handoffs,
            escalation=self.escalation,
            conversation=conversation,
            status=self.status,
            timeout=self.timeout,
            abandoned=self.abandoned,
            recovered=recovered,
            trace=self.trace,
            delegations=self.delegations,
            start=start,
            hidden=hidden,
            model_calls=model_calls,
        )


def turn_reply(
    history: Sequence[Message], start: int, hidden: Sequence[tuple[int, int]] = ()
) -> list[Message]:
    """A turn's reply: its messages from ``start``, without the host's notes to an agent.

    The ``hidden`` ranges (drafts a reviewer sent back, and reviews) are left out too.
    """
    return [
        message
        for index, message in enumerate(history[start:], start)
        if not (message.role == "user" and message.author_name == HOST_NOTE_AUTHOR)
        and not any(low <= index < high for low, high in hidden)
    ]


@functools.cache
def adapter_for(kind: type[Any]) -> TypeAdapter[Any]:
    """The pydantic adapter of a persisted record type, built on first use and kept."""
    from pydantic import TypeAdapter

    return TypeAdapter(kind)


def validated(kind: type[Any], raw: Any, where: str) -> Any:
    """``raw`` read into ``kind`` by pydantic; a :class:`CorruptStateError` naming each bad field.

    ``where`` names the record in the error.
    """
    from pydantic import ValidationError

    try:
        return adapter_for(kind).validate_python(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'the record'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise CorruptStateError(where, problems) from error


def encode_host_state(state: HostState) -> dict[str, Any]:
    """``state`` as JSON-ready data."""
    return cast(
        dict[str, Any], adapter_for(HostState).dump_python(state, mode="json", by_alias=True)
    )


def decode_host_state(raw: Mapping[str, Any], where: str) -> HostState:
    """Read back what :func:`encode_host_state` wrote (or a schema-1 record), checked.

    Raises:
        SchemaVersionError: the record was written by a newer handoff_builder.
        CorruptStateError: the record is not a valid host state; ``where`` names it.
    """
    if not isinstance(raw, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise CorruptStateError(where, f"the state is a {type(raw).__name__}, not an object")
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise CorruptStateError(where, f"schema_version is {version!r}, not an integer")
    if version > STATE_SCHEMA_VERSION:
        raise SchemaVersionError(where, version, STATE_SCHEMA_VERSION)
    if version == 1:
        raw = _upgrade_from_1(raw)
    if version < STATE_SCHEMA_VERSION:  # every field 3 to 5 add has its default, but one
        raw = {**raw, "schema_version": STATE_SCHEMA_VERSION}
        turn = raw.get("turn")
        if isinstance(turn, Mapping) and "since" not in turn:  # the invocation's start: unknown
            start = cast(Mapping[str, Any], turn).get("start")
            raw["turn"] = {**turn, "since": start if isinstance(start, int) else 0}
    return cast(HostState, validated(HostState, raw, where))


def decode_checkpoint(raw: Mapping[str, Any], where: str) -> tuple[list[Any], HostState]:
    """A group-chat host's checkpoint: its history as saved, and its state.

    The history is ``Message.to_dict()`` of each message; the state :func:`encode_host_state`'s,
    beside it.

    Raises:
        SchemaVersionError, CorruptStateError: as :func:`decode_host_state`.
    """
    state = decode_host_state({k: v for k, v in raw.items() if k != "history"}, where)
    return list(raw.get("history", [])), state


def encode_handoff_state(state: HandoffState) -> dict[str, Any]:
    """The handoff manager's state as JSON-ready data."""
    return cast(
        dict[str, Any], adapter_for(HandoffState).dump_python(state, mode="json", by_alias=True)
    )


def decode_handoff_state(raw: Mapping[str, Any]) -> HandoffState:
    """Read back what :func:`encode_handoff_state` wrote, checked."""
    return cast(HandoffState, validated(HandoffState, raw, "the handoff manager's state"))


def _upgrade_from_1(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Schema 1 kept the manager's counters under other names and the pending requests flat."""
    manager = dict(raw.get("manager") or {})
    turn = raw.get("turn")
    pending = raw.get("pending")
    # Schema 1 counted an invocation when it started; schema 2 when it is decided.
    decided = 1 if raw.get("next") is not None else 0
    invocations = int(manager.get("iteration_count", 0) or 0) + decided
    # Between turns, schema 1's active agent is where the next turn may start.
    speaker = raw.get("speaker")
    if turn is None:
        speaker = manager.get("active_agent", speaker)
    if "handoff_count" in manager:  # a HandoffManager's; another manager's state is its own
        manager = {
            "invocations": invocations,
            "handoffs": manager.get("handoff_count", 0),
            "autonomous_turns": manager.get("autonomous_turns", {}),
            "last_hand_back": manager.get("last_hand_back"),
        }
    return {
        "schema_version": STATE_SCHEMA_VERSION,
        "speaker": speaker,
        "next": raw.get("next"),
        "turn": None
        if not isinstance(turn, Mapping)
        else {
            "start": turn.get("start"),  # pyright: ignore[reportUnknownMemberType]
            "handoffs": turn.get("handoffs", []),  # pyright: ignore[reportUnknownMemberType]
            "invocations": invocations,
        },
        "pending": None
        if not isinstance(pending, Mapping)
        else {
            "agent": pending.get("agent"),  # pyright: ignore[reportUnknownMemberType]
            "requests": pending.get("requests", []),  # pyright: ignore[reportUnknownMemberType]
            "answers": pending.get("answers", {}),  # pyright: ignore[reportUnknownMemberType]
            "then": {"agent": pending.get("agent")},  # pyright: ignore[reportUnknownMemberType]
        },
        "manager": manager,
    }


# -- the record on a handoff call's result --------------------------------------------------------


class RecordedHandoff(NamedTuple):
    """A followed handoff, as its function result records it, and how its note labels it."""

    handoff: HandoffEvent
    label: str


def handoff_record(call: HandoffCall) -> dict[str, Any]:
    """The ``additional_properties`` of the function result of a vetted handoff call.

    For an edge with a payload it also holds the payload (as JSON) and its label.
    """
    route = call.route
    record: dict[str, Any] = {
        "outcome": call.outcome,
        "kind": route.kind,
        "source": route.source,
        "target": route.target,
        "tool": route.tool_name,
        "argument": call.argument,
    }
    if route.payload is not None and call.payload is not None:
        record["payload"] = call.payload.model_dump(mode="json")
        record["label"] = payload_label(route.payload)
    return {HANDOFF_RECORD_KEY: record}


def transferred_handoff(content: Content) -> RecordedHandoff | None:
    """The handoff a function result records, if it is one that was followed.

    Its payload is the recorded JSON (the view only shows it); the host reads payloads back with
    their models.
    """
    record: Any = (content.additional_properties or {}).get(HANDOFF_RECORD_KEY)
    if not isinstance(record, Mapping):
        return None
    fields = cast(Mapping[str, Any], record)
    if fields.get("outcome") != "transferred":
        return None
    kind = cast(HandoffKind, fields.get("kind") if fields.get("kind") in EDGE_KINDS else "handoff")
    label = fields.get("label")
    handoff = HandoffEvent(
        str(fields.get("source", "")),
        str(fields.get("target", "")),
        str(fields.get("argument", "")),
        str(fields.get("tool", "")),
        str(content.call_id),
        kind,
    )
    return RecordedHandoff(
        handoff, label if isinstance(label, str) else EDGE_KINDS[kind].argument_label
    )
