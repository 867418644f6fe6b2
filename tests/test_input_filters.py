"""Per-handoff input filters (``with_handoff(input_filter=)``): what the receiving agent reads."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import InMemoryCheckpointStorage, Message
from pydantic import BaseModel, ConfigDict

from handoff_builder import (
    ConversationHost,
    HandoffHookError,
    HandoffInput,
    HandoffToolCallFiltering,
    HandoffWorkflowBuilder,
)
from handoff_builder.stores import ConversationStore
from handoff_builder.testing import (
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    respond,
    scripted_agent,
)
from tests.helpers import run_turn

GOAL = "Refund the duplicate March charge."


def last_user_and_note(data: HandoffInput) -> list[Message]:
    """A filter: the target reads the user's last message and the note, nothing else."""
    users = [m for m in data.messages if m.role == "user" and m.author_name is None]
    return [users[-1], data.note]


def desk(
    input_filter: Any, mode: HandoffToolCallFiltering = HandoffToolCallFiltering.HANDOFF_ONLY
) -> tuple[HandoffWorkflowBuilder, Any, Any]:
    triage = scripted_agent(
        "triage",
        reply("Hello! What can I do for you?"),
        respond("Let me pass you to billing.", handoff_to("billing", goal=GOAL)),
    )
    billing = scripted_agent("billing", reply("Refunded."), reply("You're welcome."))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, input_filter=input_filter)
        .with_tool_call_filtering(mode)
        .enable_return_to_previous()
    )
    return builder, triage, billing


@pytest.mark.parametrize("mode", list(HandoffToolCallFiltering), ids=lambda m: m.value)
@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_the_target_reads_what_the_filter_returns(
    mode: HandoffToolCallFiltering, stream: bool
) -> None:
    seen: list[HandoffInput] = []

    def keep_little(data: HandoffInput) -> list[Message]:
        seen.append(data)
        return last_user_and_note(data)

    builder, _, billing = desk(keep_little, mode)
    workflow = builder.build()
    await run_turn(workflow, "hi", stream=stream)
    turn = await run_turn(workflow, "I was charged twice in March", stream=stream)

    assert turn.result.text == "Let me pass you to billing.Refunded."
    assert [(m.role, m.author_name, m.text) for m in received(billing).messages] == [
        ("user", None, "I was charged twice in March"),
        ("user", "handoff_host", f"Goal: {GOAL}"),
    ]
    [data] = seen
    assert data.messages[-1] is data.note  # what billing would have read ends with the note
    assert data.messages[0].text == "hi"
    assert (data.handoff.source, data.handoff.target, data.handoff.goal) == (
        "triage", "billing", GOAL,
    )  # fmt: skip
    assert data.call is not None
    assert (data.call.name, data.result.call_id) == ("handoff_to_billing", data.call.call_id)
    calls_shown = [c for m in data.messages for c in m.contents if c.type == "function_call"]
    assert bool(calls_shown) is (mode is HandoffToolCallFiltering.NONE)
    # the shared conversation keeps everything
    assert [m.text for m in turn.result.conversation][:2] == ["hi", "Hello! What can I do for you?"]


async def test_the_targets_later_runs_build_on_the_filtered_view() -> None:
    builder, _, billing = desk(last_user_and_note)
    workflow = builder.build()
    await run_turn(workflow, "hi")
    await run_turn(workflow, "I was charged twice in March")
    await run_turn(workflow, "thanks!")
    assert [m.text for m in received(billing).messages] == [
        "I was charged twice in March",
        f"Goal: {GOAL}",
        "Refunded.",
        "thanks!",
    ]


async def test_an_async_filter_and_a_typed_payload() -> None:
    class Refund(BaseModel):
        model_config = ConfigDict(extra="forbid")
        amount: float
        month: str

    got: list[Any] = []

    async def only_the_note(data: HandoffInput) -> Sequence[Message]:
        got.append(data.handoff.payload)
        return (data.note,)

    triage = scripted_agent("triage", call_tool("handoff_to_billing", amount=24.9, month="March"))
    billing = scripted_agent("billing", reply("Refunded 24.90."))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, payload=Refund, input_filter=only_the_note)
        .build()
    )
    await run_turn(workflow, "refund please")
    assert got == [Refund(amount=24.9, month="March")]
    [note] = received(billing).messages
    assert note.text.startswith("Refund: ")


async def test_what_a_filter_returns_is_made_valid_provider_input() -> None:
    """A filter that keeps a tool result without its call: the result is left out."""

    def orphan_results(data: HandoffInput) -> list[Message]:
        return [Message(role="tool", contents=[data.result]), data.note]

    builder, _, billing = desk(orphan_results)
    workflow = builder.build()
    await run_turn(workflow, "hi")
    await run_turn(workflow, "I was charged twice")
    assert [m.role for m in received(billing).messages] == ["user"]


def divides_by_zero(data: HandoffInput) -> Any:
    return 1 / 0


def returns_text(data: HandoffInput) -> Any:
    return "just text"


def returns_no_messages(data: HandoffInput) -> Any:
    return ["text"]


@pytest.mark.parametrize(
    ("input_filter", "cause", "detail"),
    [
        (divides_by_zero, ZeroDivisionError, "ZeroDivisionError: division by zero"),
        (returns_text, TypeError, "returns a list of Messages, not str"),
        (returns_no_messages, TypeError, "it holds a str"),
    ],
    ids=["raises", "returns-text", "returns-no-messages"],
)
async def test_a_failing_filter_is_a_hook_error_naming_the_edge(
    input_filter: Any, cause: type[Exception], detail: str
) -> None:
    builder, _, billing = desk(input_filter)
    workflow = builder.build()
    await run_turn(workflow, "hi")
    with pytest.raises(HandoffHookError) as failure:
        await run_turn(workflow, "I was charged twice")
    error = failure.value
    assert (error.source, error.target, error.tool_name, error.hook) == (
        "triage", "billing", "handoff_to_billing", "input_filter",
    )  # fmt: skip
    assert isinstance(error.__cause__, cause)
    assert detail in str(error)
    assert client_of(billing).calls == []


async def test_the_filter_runs_again_after_a_restore(tmp_path: Path) -> None:
    calls: list[str] = []

    def counted(data: HandoffInput) -> list[Message]:
        calls.append(data.handoff.goal)
        return last_user_and_note(data)

    builder, _, _ = desk(counted)
    storage = InMemoryCheckpointStorage()
    workflow = builder.with_checkpointing(storage).build()
    await run_turn(workflow, "hi")
    await run_turn(workflow, "I was charged twice in March")
    latest = max(
        await storage.list_checkpoints(workflow_name=workflow.name), key=lambda c: c.timestamp
    )

    restored_builder, _, billing = desk(counted)
    restored_builder.with_checkpointing(storage)
    restored = restored_builder.build()
    await restored.run(checkpoint_id=latest.checkpoint_id, checkpoint_storage=storage)
    client_of(billing).add_steps(reply("Anything else?"))
    await run_turn(restored, "thanks!")
    assert calls == [GOAL, GOAL]  # once when billing first ran, once to rebuild its view
    assert [m.text for m in received(billing).messages][:2] == [
        "I was charged twice in March",
        f"Goal: {GOAL}",
    ]


async def test_hosted_conversations_keep_the_filtered_view(store: ConversationStore) -> None:
    builder, _, _ = desk(last_user_and_note)
    await ConversationHost(builder, store).send("c", "hi")
    await ConversationHost(builder, store).send("c", "I was charged twice in March")
    restarted, _, billing = desk(last_user_and_note)  # another worker, its own agents
    client_of(billing).add_steps(reply("Anything else?"))
    turn = await ConversationHost(restarted, store).send("c", "thanks!")
    assert turn.active_agent == "billing"
    assert [m.text for m in received(billing).messages] == [
        "I was charged twice in March",
        f"Goal: {GOAL}",
        "Refunded.",
        "thanks!",
    ]


def test_a_filter_that_cannot_take_the_input_is_refused_where_the_edge_is_declared() -> None:
    from handoff_builder import HookSignatureError

    def two_arguments(data: HandoffInput, extra: str) -> list[Message]:
        return [data.note]

    wrong: Any = two_arguments  # what a caller without a type checker may pass

    triage, billing = scripted_agent("triage"), scripted_agent("billing")
    with pytest.raises(
        HookSignatureError, match="The input_filter of the handoff from 'triage' to"
    ):
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing, input_filter=wrong)
    with pytest.raises(TypeError, match="input_filter must be callable, not str"):
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing, input_filter="notes")  # pyright: ignore[reportArgumentType]
