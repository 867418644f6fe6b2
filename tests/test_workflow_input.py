"""HandoffWorkflow: a list of input messages reaches the host without being deep-copied."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from agent_framework import (
    Agent,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    Message,
    Workflow,
)

from handoff_builder import GroupChatHost, HandoffWorkflow, HandoffWorkflowBuilder, MessageBatch
from handoff_builder.testing import client_of, handoff_to, reply, scripted_agent
from tests.helpers import run_turn


def history(count: int) -> list[Message]:
    return [
        Message(role="user" if i % 2 == 0 else "assistant", contents=[f"prior {i}"])
        for i in range(count)
    ]


USER = "Why was I charged twice?"


def two_agents(billing_reply: str) -> tuple[HandoffWorkflow, Agent]:
    triage = scripted_agent("triage", handoff_to("billing", goal="A billing question."))
    billing = scripted_agent("billing", reply(billing_reply))
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_name("support").build()
    )
    return workflow, triage


def test_build_returns_a_handoff_workflow() -> None:
    workflow, _ = two_agents("Answered.")
    assert isinstance(workflow, HandoffWorkflow)
    assert isinstance(workflow, Workflow)


def test_deepcopy_of_a_batch_is_a_new_list_of_the_same_messages() -> None:
    messages = history(3)
    batch = MessageBatch(messages)
    copied = copy.deepcopy(batch)
    assert type(copied) is MessageBatch
    assert copied is not batch
    assert all(a is b for a, b in zip(copied, messages, strict=True))
    copied.append(Message(role="user", contents=["later"]))
    assert len(batch) == 3  # the copy is a separate list
    # A plain list of messages is still copied deeply: only the batch type behaves differently.
    assert copy.deepcopy(messages)[0] is not messages[0]


def test_a_batch_inside_something_larger_is_copied_deeply() -> None:
    """Saved state (a checkpoint being copied) never shares messages with the live run."""
    batch = MessageBatch(history(2))
    holder = {"input": batch, "again": batch}
    copied = copy.deepcopy(holder)
    assert type(copied["input"]) is MessageBatch
    assert copied["input"] is copied["again"]  # one copy, as deepcopy keeps shared references
    assert [m.text for m in copied["input"]] == ["prior 0", "prior 1"]
    assert all(a is not b for a, b in zip(copied["input"], batch, strict=True))


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_list_input_is_passed_as_a_batch_of_the_same_messages(stream: bool) -> None:
    workflow, triage = two_agents("Answered.")
    prior, user = history(20), Message(role="user", contents=[USER])
    turn = await run_turn(workflow, [*prior, user], stream=stream)

    assert turn.result.text == "Answered."
    [invoked] = [
        event.data
        for event in turn.events
        if event.type == "executor_invoked" and isinstance(event.data, MessageBatch)
    ]
    assert len(invoked) == 21
    assert all(a is b for a, b in zip(invoked, [*prior, user], strict=True))
    # The first agent saw the whole history, in order.
    seen = client_of(triage).calls[0].texts
    assert seen[-21:] == [f"prior {i}" for i in range(20)] + [USER]


async def test_a_list_that_is_not_all_messages_is_refused_by_its_type() -> None:
    workflow, _ = two_agents("Answered.")
    with pytest.raises(RuntimeError, match="cannot handle input of type 'list'"):
        await workflow.run(["not a message", 3])


async def test_an_in_memory_checkpoint_does_not_see_later_edits_of_the_input() -> None:
    storage = InMemoryCheckpointStorage()
    workflow, _ = two_agents("First answer.")
    user = Message(role="user", contents=[USER])
    await run_turn(workflow, [*history(2), user], checkpoint_storage=storage)
    user.contents[0].text = "edited after the run"
    [entry] = [
        c for c in await storage.list_checkpoints(workflow_name="support") if c.iteration_count == 0
    ]
    restored, _ = two_agents("Answer after restore.")
    await run_turn(
        restored,
        None,  # type: ignore[arg-type]  # resume: no new message
        checkpoint_id=entry.checkpoint_id,
        checkpoint_storage=storage,
    )
    host = restored.get_start_executor()
    assert isinstance(host, GroupChatHost)
    assert [m.text for m in host.history][:3] == ["prior 0", "prior 1", USER]
    assert host.history[2] is not user


async def test_a_batch_input_survives_an_entry_checkpoint(tmp_path: Path) -> None:
    """The input is checkpointed before the host runs; restoring that checkpoint runs the turn."""
    storage = FileCheckpointStorage(tmp_path)
    workflow, _ = two_agents("First answer.")
    prior, user = history(4), Message(role="user", contents=[USER])
    await run_turn(workflow, [*prior, user], checkpoint_storage=storage)
    [entry] = [
        c for c in await storage.list_checkpoints(workflow_name="support") if c.iteration_count == 0
    ]

    restored, _ = two_agents("Answer after restore.")
    turn = await run_turn(
        restored,
        None,  # type: ignore[arg-type]  # resume: no new message
        checkpoint_id=entry.checkpoint_id,
        checkpoint_storage=storage,
    )
    assert turn.result.text == "Answer after restore."
    host = restored.get_start_executor()
    assert isinstance(host, GroupChatHost)
    texts = [message.text for message in host.history]
    assert texts[:5] == ["prior 0", "prior 1", "prior 2", "prior 3", USER]
