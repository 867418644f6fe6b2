"""Each audit event names the WorkflowEvent type it is emitted under; no type is shared."""

from __future__ import annotations

import dataclasses
from typing import Any, get_args

import handoff_builder
from handoff_builder import (
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_DELEGATION_EVENT,
    HANDOFF_ESCALATED_EVENT,
    HANDOFF_EVENT,
    HANDOFF_LIMIT_EVENT,
    HANDOFF_TIMEOUT_EVENT,
    HANDOFF_TURN_ABANDONED_EVENT,
    DelegationEvent,
    EscalationEvent,
    Event,
    HandoffBlockedEvent,
    HandoffEvent,
    HandoffWorkflowBuilder,
    LimitReachedEvent,
    TurnAbandonedEvent,
    TurnTimeoutEvent,
)
from handoff_builder.testing import call_tool, handoff_to, reply, scripted_agent

EVENT_TYPES: dict[type[Any], str] = {
    HandoffEvent: HANDOFF_EVENT,
    DelegationEvent: HANDOFF_DELEGATION_EVENT,
    HandoffBlockedEvent: HANDOFF_BLOCKED_EVENT,
    EscalationEvent: HANDOFF_ESCALATED_EVENT,
    LimitReachedEvent: HANDOFF_LIMIT_EVENT,
    TurnTimeoutEvent: HANDOFF_TIMEOUT_EVENT,
    TurnAbandonedEvent: HANDOFF_TURN_ABANDONED_EVENT,
}


def test_every_event_class_has_its_own_event_type() -> None:
    assert {cls: cls.event_type for cls in EVENT_TYPES} == EVENT_TYPES
    assert len(set(EVENT_TYPES.values())) == len(EVENT_TYPES)


def test_every_exported_event_class_and_every_decision_event_is_listed() -> None:
    exported = {
        value
        for name in handoff_builder.__all__
        if name.endswith("Event")
        and dataclasses.is_dataclass(value := getattr(handoff_builder, name))
    }
    assert exported == set(EVENT_TYPES)
    assert {member for member in get_args(Event) if member is not str} <= set(EVENT_TYPES)


def test_the_event_type_is_not_part_of_the_events_json() -> None:
    for cls in EVENT_TYPES:
        assert "event_type" not in {f.name for f in dataclasses.fields(cls)}, cls


async def test_each_event_is_emitted_under_its_own_type() -> None:
    """A refused call, a handoff, and the cap that escalates: each under its class's type."""
    a = scripted_agent("a", call_tool("handoff_to_nowhere", goal="x"), handoff_to("b", goal="One."))
    b = scripted_agent("b", handoff_to("a", goal="Two."))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a)
    events = list(await workflow.with_max_handoffs_per_turn(1).build().run("go"))
    emitted: list[tuple[str, type[Any]]] = [
        (e.type, type(e.data)) for e in events if type(e.data) in EVENT_TYPES
    ]
    assert emitted == [
        (HANDOFF_BLOCKED_EVENT, HandoffBlockedEvent),
        (HANDOFF_EVENT, HandoffEvent),
        (HANDOFF_ESCALATED_EVENT, EscalationEvent),
    ]


async def test_a_limit_is_emitted_under_the_limit_type() -> None:
    worker = scripted_agent("worker", reply("one"), reply("two"))
    workflow = HandoffWorkflowBuilder(worker).with_autonomous_mode(turn_limit=1).build()
    events = list(await workflow.run("go"))
    [limit] = [e for e in events if isinstance(e.data, LimitReachedEvent)]
    assert (limit.type, limit.data.kind) == (HANDOFF_LIMIT_EVENT, "autonomous_turns")
