"""The host's cursor, counters and history survive agent_framework workflow checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_framework import (
    Agent,
    CheckpointStorage,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    Workflow,
    WorkflowCheckpoint,
)

from handoff_builder import HandoffWorkflowBuilder, SchemaVersionError
from handoff_builder.testing import ScriptStep, client_of, handoff_to, reply, scripted_agent
from tests.helpers import run_turn


def support_workflow(
    triage_steps: list[ScriptStep], billing_steps: list[ScriptStep], refunds_steps: list[ScriptStep]
) -> tuple[Workflow, dict[str, Agent]]:
    agents = {
        "triage": scripted_agent("triage", *triage_steps),
        "billing": scripted_agent("billing", *billing_steps),
        "refunds": scripted_agent("refunds", *refunds_steps),
    }
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .with_handoff(agents["billing"], agents["refunds"])
        .with_name("support")
        .build()
    )
    return workflow, agents


@pytest.fixture(params=["memory", "file"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStorage:
    if request.param == "memory":
        return InMemoryCheckpointStorage()
    return FileCheckpointStorage(tmp_path)


async def checkpoint_after_first_hop(storage: CheckpointStorage) -> WorkflowCheckpoint:
    workflow, _ = support_workflow(
        [handoff_to("billing", goal="Double charge.")],
        [handoff_to("refunds", goal="Refund it.")],
        [reply("Refunded.")],
    )
    turn = await run_turn(workflow, "I was charged twice", checkpoint_storage=storage)
    assert turn.result.text == "Refunded."
    checkpoints = await storage.list_checkpoints(workflow_name="support")
    # An entry checkpoint, then one per superstep; superstep 1 ran triage, which handed off.
    assert sorted(c.iteration_count for c in checkpoints) == [0, 1, 2, 3]
    [first] = [checkpoint for checkpoint in checkpoints if checkpoint.iteration_count == 1]
    return first


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_restore_mid_turn_continues_with_the_target(
    storage: CheckpointStorage, stream: bool
) -> None:
    """Restored after triage handed off, before billing answered: billing runs, triage doesn't."""
    checkpoint = await checkpoint_after_first_hop(storage)

    workflow, agents = support_workflow(
        [], [handoff_to("refunds", goal="Refund it.")], [reply("Refunded after restore.")]
    )
    turn = await run_turn(
        workflow,
        None,  # type: ignore[arg-type]  # resume: no new message
        stream=stream,
        checkpoint_id=checkpoint.checkpoint_id,
        checkpoint_storage=storage,
    )

    assert client_of(agents["triage"]).calls == []
    assert len(client_of(agents["billing"]).calls) == 1
    assert turn.result.text == "Refunded after restore."
    assert turn.result.active_agent == "refunds"
    # The restored turn still reports the handoff made before the checkpoint.
    assert [(h.source, h.target) for h in turn.result.handoffs] == [
        ("triage", "billing"),
        ("billing", "refunds"),
    ]
    # Billing saw the user's message exactly once (triage's handoff call is filtered out), and,
    # restored from the checkpoint, the note that carries triage's goal.
    billing_saw = client_of(agents["billing"]).calls[0].messages
    assert [(m.role, m.text) for m in billing_saw] == [
        ("user", "I was charged twice"),
        ("user", "Goal: Double charge."),
    ]
    # Refunds, reached after the restore, reads both handoffs.
    assert client_of(agents["refunds"]).calls[0].texts == [
        "I was charged twice",
        "Handoff from triage to billing. Goal: Double charge.",
        "Goal: Refund it.",
    ]


async def test_checkpoint_state_is_versioned_json(storage: CheckpointStorage) -> None:
    checkpoint = await checkpoint_after_first_hop(storage)
    state = checkpoint.state["_executor_state"]["handoff_host"]
    assert json.loads(json.dumps(state)) == state
    assert state["schema_version"] == 5
    assert state["manager"] == {
        "invocations": 2,
        "handoffs": 1,
        "rejected": 0,
        "autonomous_turns": {},
        "last_hand_back": None,
        "forced": None,
        "reviewing": None,
        "review_feedback": [],
    }
    assert state["speaker"] == "triage"
    assert state["next"] == "billing"
    assert state["turn"]["start"] == 1
    assert [h["target"] for h in state["turn"]["handoffs"]] == ["billing"]
    assert [item["role"] for item in state["history"]] == ["user", "assistant", "tool"]


async def test_restore_refuses_a_newer_schema(storage: CheckpointStorage) -> None:
    checkpoint = await checkpoint_after_first_hop(storage)
    checkpoint.state["_executor_state"]["handoff_host"]["schema_version"] = 99
    await storage.save(checkpoint)
    workflow, _ = support_workflow([], [], [])
    with pytest.raises(Exception, match="on_checkpoint_restore failed") as failure:
        await workflow.run(checkpoint_id=checkpoint.checkpoint_id, checkpoint_storage=storage)
    cause = failure.value.__cause__
    assert isinstance(cause, SchemaVersionError)
    assert str(cause) == (
        "Saved state of executor 'handoff_host' has schema version 99; this version of "
        "handoff_builder reads up to 5. Upgrade handoff_builder to read it."
    )


async def test_restore_reads_schema_2(storage: CheckpointStorage) -> None:
    """State written before delegations and reviews (schema 2) restores mid-turn."""
    checkpoint = await checkpoint_after_first_hop(storage)
    state = checkpoint.state["_executor_state"]["handoff_host"]
    state["schema_version"] = 2
    for added in ("delegations", "since", "review", "hidden"):
        del state["turn"][added]
    for added in ("reviewing", "review_feedback"):
        del state["manager"][added]
    await storage.save(checkpoint)
    workflow, agents = support_workflow([], [reply("Refund issued.")], [])
    result = await workflow.run(checkpoint_id=checkpoint.checkpoint_id, checkpoint_storage=storage)
    turn = result.get_outputs()[-1]
    assert turn.text.endswith("Refund issued.")
    assert client_of(agents["billing"]).calls[0].texts[-1] == "Goal: Double charge."


async def test_next_turn_after_restore_keeps_the_history(storage: CheckpointStorage) -> None:
    checkpoint = await checkpoint_after_first_hop(storage)
    workflow, agents = support_workflow(
        [reply("Anything else?")], [handoff_to("refunds", goal="Refund it.")], [reply("Refunded.")]
    )
    await run_turn(
        workflow,
        None,  # type: ignore[arg-type]
        checkpoint_id=checkpoint.checkpoint_id,
        checkpoint_storage=storage,
    )
    second = await run_turn(workflow, "thanks")
    assert second.result.text == "Anything else?"
    triage_saw = client_of(agents["triage"]).calls[0].texts
    assert triage_saw[0] == "I was charged twice"
    assert triage_saw[-1] == "thanks"
    assert len(second.result.conversation) == 8


async def test_a_run_without_checkpoints_takes_one_superstep_per_turn() -> None:
    """Supersteps exist for checkpoints: without storage the hops run in the turn's superstep."""
    workflow, agents = support_workflow(
        [handoff_to("billing", goal="Double charge.")],
        [handoff_to("refunds", goal="Refund it.")],
        [reply("Refunded.")],
    )
    events = [event async for event in workflow.run("I was charged twice", stream=True)]
    assert [e.type for e in events].count("superstep_started") == 1
    assert [e.type for e in events].count("handoff_sent") == 2
    assert client_of(agents["refunds"]).calls[0].texts[-1] == ("Goal: Refund it.")

    storage = InMemoryCheckpointStorage()
    workflow2, _ = support_workflow(
        [handoff_to("billing", goal="Double charge.")],
        [handoff_to("refunds", goal="Refund it.")],
        [reply("Refunded.")],
    )
    events2 = [
        e
        async for e in workflow2.run("I was charged twice", stream=True, checkpoint_storage=storage)
    ]
    assert [e.type for e in events2].count("superstep_started") == 3  # one per agent invocation


async def test_a_workflow_built_with_checkpointing_checkpoints_every_run() -> None:
    storage = InMemoryCheckpointStorage()
    agents = {
        "triage": scripted_agent("triage", handoff_to("billing", goal="Double charge.")),
        "billing": scripted_agent("billing", reply("Refunded.")),
    }
    workflow = (
        HandoffWorkflowBuilder(agents["triage"])
        .with_handoff(agents["triage"], agents["billing"])
        .with_name("kept")
        .with_checkpointing(storage)
        .build()
    )
    turn = await run_turn(workflow, "I was charged twice")  # no storage passed to the run
    assert turn.result.text == "Refunded."
    checkpoints = await storage.list_checkpoints(workflow_name="kept")
    assert sorted(c.iteration_count for c in checkpoints) == [0, 1, 2]  # one per hop
    # Restore the one taken after triage handed off, from the workflow's own storage.
    [after_triage] = [c for c in checkpoints if c.iteration_count == 1]
    again = HandoffWorkflowBuilder(agents["triage"]).with_handoff(
        agents["triage"], scripted_agent("billing", reply("Refunded again."))
    )
    restored = again.with_name("kept").with_checkpointing(storage).build()
    result = await restored.run(checkpoint_id=after_triage.checkpoint_id)
    assert result.get_outputs()[-1].text == "Refunded again."
