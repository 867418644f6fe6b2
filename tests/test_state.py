"""Persisted state: one typed schema, records of the earlier schema read, bad records refused."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage, tool

from handoff_builder import (
    ConversationHost,
    CorruptConversationError,
    CorruptStateError,
    GroupChatHost,
    HandoffManager,
    HandoffState,
    HandoffWorkflowBuilder,
    PendingRequestsError,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import (
    assert_received,
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    scripted_agent,
)
from tests.helpers import run_turn

DATA = Path(__file__).parent / "data"


def data(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


async def test_a_conversation_stored_by_schema_1_continues() -> None:
    """Stored by handoff_builder 0.1: the next message starts at billing, which reads the goal."""
    stored = data("conversation-schema-1.json")
    store = InMemoryConversationStore()
    await store.append(
        "conv-v1", start=0, messages=stored["messages"], state=stored["state"], expected_version=0
    )
    triage = scripted_agent("triage")
    billing = scripted_agent("billing", reply("It was paid on March 3rd."))
    builder = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, triage)
    )
    host = ConversationHost(builder, store, idle_timeout=10**9)

    assert await host.active_agent("conv-v1") == "billing"
    turn = await host.send("conv-v1", "When was it paid?")

    assert turn.text == "It was paid on March 3rd."
    assert client_of(triage).calls == []
    assert_received(
        billing,
        "Goal: The user wants last month's invoice.",
        "When was it paid?",
    )
    record = await store.load("conv-v1")
    assert record is not None
    assert record.state["host"]["schema_version"] == 5


async def test_a_checkpoint_written_by_schema_1_restores_mid_turn() -> None:
    """Taken after triage handed off, before billing answered: billing runs with the goal."""
    v1_state = data("checkpoint-schema-1.json")["state"]
    triage = scripted_agent("triage", handoff_to("billing", goal="Double charge."))
    billing = scripted_agent("billing", handoff_to("refunds", goal="Refund it."))
    refunds = scripted_agent("refunds", reply("Refunded."))

    def workflow() -> Any:
        return (
            HandoffWorkflowBuilder(triage)
            .with_handoff(triage, billing)
            .with_handoff(billing, refunds)
            .with_name("support")
            .build()
        )

    storage = InMemoryCheckpointStorage()
    await run_turn(workflow(), "I was charged twice", checkpoint_storage=storage)
    [after_triage] = [
        c for c in await storage.list_checkpoints(workflow_name="support") if c.iteration_count == 1
    ]
    after_triage.state["_executor_state"]["handoff_host"] = v1_state
    await storage.save(after_triage)
    billing_calls = len(client_of(billing).calls)
    client_of(billing).add_steps(handoff_to("refunds", goal="Refund it, again."))
    client_of(refunds).add_steps(reply("Refunded after restore."))

    turn = await run_turn(
        workflow(),
        None,  # type: ignore[arg-type]
        checkpoint_id=after_triage.checkpoint_id,
        checkpoint_storage=storage,
    )

    assert turn.result.text == "Refunded after restore."
    assert [h.target for h in turn.result.handoffs] == ["billing", "refunds"]
    assert_received(billing, "Goal: Double charge.")
    assert len(client_of(billing).calls) == billing_calls + 1


async def test_schema_1_counters_read_as_schema_2() -> None:
    """Schema 1 counted an invocation when it started: billing, about to run, is the second."""
    v1_state = data("checkpoint-schema-1.json")["state"]
    triage, billing = scripted_agent("triage"), scripted_agent("billing")
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()
    host = workflow.get_start_executor()
    assert isinstance(host, GroupChatHost)

    await host.on_checkpoint_restore(v1_state)

    state = host.state()
    assert (state.speaker, state.next) == ("triage", "billing")
    assert state.turn is not None
    assert (state.turn.start, state.turn.invocations) == (1, 2)
    assert [h.target for h in state.turn.handoffs] == ["billing"]
    assert isinstance(host.manager, HandoffManager)
    assert host.manager.state == HandoffState(invocations=2, handoffs=1)
    assert len(host.history) == 3


@tool(name="refund", description="Refund an amount.", approval_mode="always_require")
def refund(amount: int) -> str:
    return f"refunded {amount}"


async def test_an_approval_stored_by_schema_1_is_answered() -> None:
    """Stored by 0.1 while billing waited for an approval: answering it resumes billing."""
    stored = data("conversation-schema-1-pending.json")
    store = InMemoryConversationStore()
    await store.append(
        "c", start=0, messages=stored["messages"], state=stored["state"], expected_version=0
    )
    triage = scripted_agent("triage")
    billing = scripted_agent("billing", reply("Refunded 5 EUR."), tools=[refund])
    builder = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, triage)
    )
    host = ConversationHost(builder, store, idle_timeout=10**9)
    [request_id] = [r["id"] for r in stored["state"]["host"]["pending"]["requests"]]
    [request] = await pending(host, "c")

    turn = await host.respond(
        "c", {request_id: request.to_function_approval_response(approved=True)}
    )

    assert (turn.status, turn.active_agent, turn.text) == (
        "completed",
        "billing",
        "Refunded 5 EUR.",
    )
    assert client_of(triage).calls == []
    assert received(billing).rendered.splitlines()[-1].endswith(": refunded 5")
    assert [h.target for h in turn.handoffs] == ["billing"]


async def pending(host: ConversationHost, conversation_id: str) -> list[Any]:
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send(conversation_id, "hello?")
    return list(waiting.value.requests)


@pytest.mark.parametrize(
    ("host_state", "detail"),
    [
        (
            {"schema_version": 2, "turn": {"start": "one"}},
            "turn.start: Input should be a valid integer, unable to parse string as an integer",
        ),
        ({"schema_version": "2"}, "schema_version is '2', not an integer"),
        (["not", "an", "object"], "the state is a list, not an object"),
        (
            {"schema_version": 2, "manager": {"handoffs": "many"}},
            "the handoff manager's state: handoffs: Input should be a valid integer, unable to "
            "parse string as an integer",
        ),
    ],
)
async def test_a_stored_state_that_is_not_a_valid_record_is_refused(
    host_state: Any, detail: str
) -> None:
    store = InMemoryConversationStore()
    stored = data("conversation-schema-1.json")
    await store.append(
        "bad", start=0, messages=stored["messages"], state={"host": host_state}, expected_version=0
    )
    triage = scripted_agent("triage")
    billing = scripted_agent("billing")
    host = ConversationHost(HandoffWorkflowBuilder(triage).with_handoff(triage, billing), store)

    with pytest.raises(CorruptConversationError) as failure:
        await host.send("bad", "hello")

    assert failure.value.detail == detail
    assert str(failure.value) == (
        f"Conversation 'bad' is corrupt: {detail}. It was left untouched; repair or delete "
        "it in the store."
    )
    assert client_of(triage).calls == []
    record = await store.load("bad")
    assert record is not None
    assert record.state == {"host": host_state}  # nothing was written


async def test_a_corrupt_checkpoint_is_refused_with_the_field_named() -> None:
    triage = scripted_agent("triage", reply("hi"))
    workflow = HandoffWorkflowBuilder(triage).with_name("w").build()
    checkpoints = InMemoryCheckpointStorage()
    await run_turn(workflow, "hello", checkpoint_storage=checkpoints)
    [last] = sorted(
        await checkpoints.list_checkpoints(workflow_name="w"), key=lambda c: c.iteration_count
    )[-1:]
    last.state["_executor_state"]["handoff_host"]["speaker"] = 7
    await checkpoints.save(last)

    with pytest.raises(Exception, match="on_checkpoint_restore failed") as failure:
        await (
            HandoffWorkflowBuilder(triage)
            .with_name("w")
            .build()
            .run(checkpoint_id=last.checkpoint_id, checkpoint_storage=checkpoints)
        )

    cause = failure.value.__cause__
    assert isinstance(cause, CorruptStateError)
    assert str(cause) == (
        "Saved state of executor 'handoff_host' is corrupt: speaker: Input should be a valid "
        "string."
    )


async def test_a_failed_turn_stored_by_schema_3_is_abandoned_and_left_out_of_views() -> None:
    """Schema 3 knew no abandoned ranges nor where a turn's input starts: read back from the
    history, the failed turn, from the user's message on, leaves every view."""
    store = InMemoryConversationStore()
    stored = data("conversation-schema-3-failed-turn.json")
    assert stored["state"]["host"]["schema_version"] == 3
    await store.append(
        "c", start=0, messages=stored["messages"], state=stored["state"], expected_version=0
    )
    triage = scripted_agent("triage", reply("Hello again."))
    billing = scripted_agent("billing")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = ConversationHost(builder, store, max_turn_retries=0)

    result = await host.send("c", "hello?")

    assert result.recovered is not None
    assert result.recovered.status == "abandoned"
    assert [m.text for m in received(triage).messages] == ["hi", "Hello.", "hello?"]
    assert client_of(billing).calls == []
    record = await store.load("c")
    assert record is not None
    assert record.state["host"]["schema_version"] == 5
    assert record.state["host"]["left_out"] == [[2, 5]]  # the user's message to the results


# -- the safe agent's flag: stored under the keys the release before wrote ------------------------


@tool(approval_mode="always_require")
def page_on_call(team: str) -> str:
    return f"paged {team}"


def safe_agent_desk(*safe_steps: Any) -> tuple[HandoffWorkflowBuilder, Any]:
    """a and b hand off to each other; past one handoff, the safe agent answers."""
    a = scripted_agent("a", handoff_to("b", goal="One."), reply("a answers"))
    b = scripted_agent("b", handoff_to("a", goal="Two."), reply("b answers"))
    safe = scripted_agent("safe", *safe_steps, tools=[page_on_call])
    builder = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a)
    return builder.with_handoff(safe, a).with_max_handoffs_per_turn(1, outcome=safe), safe


def keys_of(value: Any) -> Any:
    """The shape of a JSON record: its keys, nested, without the values."""
    if isinstance(value, dict):
        return {key: keys_of(item) for key, item in value.items()}  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, list):
        return [keys_of(item) for item in value]  # pyright: ignore[reportUnknownVariableType]
    return None


async def test_a_safe_agent_waiting_stored_by_the_release_before_goes_on_without_handoffs() -> None:
    """Stored as ``next_closed``, ``then.last`` and ``forced``: read as ``no_handoffs``."""
    stored = data("conversation-schema-4-safe-agent-waiting.json")
    host_state = stored["state"]["host"]
    assert (host_state["next_closed"], host_state["pending"]["then"]["last"]) == (True, True)
    assert host_state["manager"]["forced"] == ["safe", "handoff_cap"]
    store = InMemoryConversationStore()
    await store.append(
        "c", start=0, messages=stored["messages"], state=stored["state"], expected_version=0
    )
    builder, safe = safe_agent_desk(reply("Paged SRE."))
    host = ConversationHost(builder, store, idle_timeout=10**9)
    [request] = await pending(host, "c")

    turn = await host.respond(
        "c", {request.id: request.to_function_approval_response(approved=True)}
    )

    assert (turn.status, turn.active_agent, turn.text) == ("handoff_cap", "safe", "Paged SRE.")
    assert [call.tool_names for call in client_of(safe).calls] == [("page_on_call",)]


async def test_a_safe_agent_interrupted_in_the_release_before_resumes_without_handoffs() -> None:
    stored = data("conversation-schema-4-safe-agent-interrupted.json")
    assert (stored["state"]["host"]["next"], stored["state"]["host"]["next_closed"]) == (
        "safe",
        True,
    )
    store = InMemoryConversationStore()
    await store.append(
        "c", start=0, messages=stored["messages"], state=stored["state"], expected_version=0
    )
    builder, safe = safe_agent_desk(reply("Back, safely."))

    turn = await ConversationHost(builder, store).resume("c")

    assert turn is not None
    assert (turn.status, turn.text) == ("handoff_cap", "Back, safely.")
    assert client_of(safe).calls[0].tool_names == ("page_on_call",)  # no handoff tool


async def test_a_safe_agent_waiting_is_stored_under_the_keys_the_release_before_reads() -> None:
    """Written now, the record has the shape the release before wrote, and what schema 5 adds."""
    store = InMemoryConversationStore()
    builder, _ = safe_agent_desk(call_tool("page_on_call", team="sre"))
    with pytest.raises(PendingRequestsError):
        await ConversationHost(builder, store).send("c", "go")

    record = await store.load("c")
    assert record is not None
    written = record.state["host"]
    before = data("conversation-schema-4-safe-agent-waiting.json")["state"]["host"]
    shape = keys_of(written)
    assert shape["pending"].pop("beside") == []  # schema 5 adds it (delegations side by side)
    assert shape == keys_of(before)
    assert (written["next_closed"], written["pending"]["then"]["last"]) == (True, True)
    assert written["manager"]["forced"] == ["safe", "handoff_cap"]


# A safe agent's hop, as the release before pickled it into a checkpoint: _Hop("safe", closed=True).
HOP_PICKLED_BEFORE = (
    "gAWVQwAAAAAAAACMFWhhbmRvZmZfYnVpbGRlci5faG9zdJSMBF9Ib3CUk5QpgZR9lCiMBWFnZW50lIwEc2FmZZSMBmNsb3N"
    "lZJSIdWIu"
)


def test_a_hop_pickled_by_the_release_before_is_read_and_a_new_one_pickles_as_it_did() -> None:
    from handoff_builder._host import _Hop  # pyright: ignore[reportPrivateUsage]

    hop = pickle.loads(base64.b64decode(HOP_PICKLED_BEFORE))  # noqa: S301 - our own fixture
    assert hop == _Hop("safe", no_handoffs=True)
    again = pickle.dumps(_Hop("safe", no_handoffs=True), protocol=pickle.HIGHEST_PROTOCOL)
    assert base64.b64encode(again).decode() == HOP_PICKLED_BEFORE
