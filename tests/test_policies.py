"""Next-turn routing, termination conditions and autonomous mode (.NET's semantics)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from agent_framework import InMemoryCheckpointStorage, Message

from handoff_builder import (
    DEFAULT_AUTONOMOUS_PROMPT,
    HandoffConfigurationError,
    HandoffWorkflowBuilder,
)
from handoff_builder.testing import call_tool, client_of, handoff_to, reply, scripted_agent
from tests.helpers import run_turn

# -- return to previous --------------------------------------------------------------------------


async def test_return_to_previous_is_off_by_default() -> None:
    coordinator = scripted_agent(
        "coordinator", handoff_to("specialist"), reply("coordinator again")
    )
    specialist = scripted_agent("specialist", reply("specialist here"))
    workflow = HandoffWorkflowBuilder(coordinator).with_handoff(coordinator, specialist).build()
    await run_turn(workflow, "one")
    second = await run_turn(workflow, "two")
    assert second.result.text == "coordinator again"
    assert len(client_of(coordinator).calls) == 2
    assert len(client_of(specialist).calls) == 1


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_return_to_previous_goes_straight_to_the_specialist(stream: bool) -> None:
    coordinator = scripted_agent("coordinator", handoff_to("specialist"))
    specialist = scripted_agent("specialist", reply("first"), reply("second"))
    workflow = (
        HandoffWorkflowBuilder(coordinator)
        .with_handoff(coordinator, specialist)
        .enable_return_to_previous()
        .build()
    )
    await run_turn(workflow, "one", stream=stream)
    second = await run_turn(workflow, "two", stream=stream)
    assert second.result.text == "second"
    assert len(client_of(coordinator).calls) == 1
    assert client_of(specialist).calls[1].texts[-1] == "two"


async def test_return_to_previous_before_any_handoff_starts_at_the_initial_agent() -> None:
    coordinator = scripted_agent("coordinator", reply("hi"), reply("hi again"))
    specialist = scripted_agent("specialist")
    workflow = (
        HandoffWorkflowBuilder(coordinator)
        .with_handoff(coordinator, specialist)
        .enable_return_to_previous()
        .build()
    )
    await run_turn(workflow, "one")
    second = await run_turn(workflow, "two")
    assert second.result.text == "hi again"


async def test_return_to_previous_after_hand_back_starts_at_the_coordinator() -> None:
    coordinator = scripted_agent(
        "coordinator", handoff_to("specialist"), reply("done?"), reply("ok")
    )
    specialist = scripted_agent(
        "specialist", call_tool("transfer_back_to_coordinator", summary="all done")
    )
    workflow = (
        HandoffWorkflowBuilder(coordinator)
        .with_handoff(coordinator, specialist)
        .with_hand_back(coordinator)
        .enable_return_to_previous()
        .build()
    )
    first = await run_turn(workflow, "one")
    assert first.result.active_agent == "coordinator"
    second = await run_turn(workflow, "two")
    assert second.result.text == "ok"
    assert len(client_of(specialist).calls) == 1


async def test_return_to_previous_can_be_disabled_again() -> None:
    coordinator = scripted_agent("coordinator", handoff_to("specialist"), reply("coordinator"))
    specialist = scripted_agent("specialist", reply("specialist"))
    workflow = (
        HandoffWorkflowBuilder(coordinator)
        .with_handoff(coordinator, specialist)
        .enable_return_to_previous()
        .enable_return_to_previous(enabled=False)
        .build()
    )
    await run_turn(workflow, "one")
    assert (await run_turn(workflow, "two")).result.text == "coordinator"


# -- autonomous mode -----------------------------------------------------------------------------


async def test_autonomous_mode_iterates_until_a_handoff() -> None:
    a = scripted_agent("a", reply("working 1"), reply("working 2"), handoff_to("b", goal="finish"))
    b = scripted_agent("b", reply("finished"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_autonomous_mode(agents=[a]).build()
    turn = await run_turn(workflow, "go")
    assert turn.result.text.endswith("finished")
    user_messages = [m.text for m in turn.result.conversation if m.role == "user"]
    assert user_messages == ["go", DEFAULT_AUTONOMOUS_PROMPT, DEFAULT_AUTONOMOUS_PROMPT]
    assert len(client_of(a).calls) == 3


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_autonomous_mode_respects_the_turn_limit(stream: bool) -> None:
    a = scripted_agent("a", *(reply(f"a{i}") for i in range(3)))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a).with_handoff(a, b).with_autonomous_mode(turn_limit=2).build()
    )
    turn = await run_turn(workflow, "go", stream=stream)
    assert len(client_of(a).calls) == 3  # 1 + limit
    client_of(a).assert_complete()
    assert turn.result.active_agent == "a"
    assert not turn.result.escalated


async def test_autonomous_mode_custom_prompt_is_the_last_user_message() -> None:
    a = scripted_agent("a", reply("a1"), reply("a2"))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_autonomous_mode(turn_limit=1, continuation_prompt="Keep going.")
        .build()
    )
    await run_turn(workflow, "go")
    second_call = client_of(a).calls[1]
    user_texts = [m.text for m in second_call.messages if m.role == "user"]
    assert user_texts[-1] == "Keep going."


async def test_autonomous_allow_list_and_per_agent_settings() -> None:
    a = scripted_agent("a", reply("a1"), reply("a2"), reply("a3"), handoff_to("b"))
    b = scripted_agent("b", reply("b only once"))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_autonomous_mode(
            turn_limit=1,
            agents=[a],
            agent_turn_limits={a: 3},
            agent_continuation_prompts={"a": "Continue, a."},
        )
        .build()
    )
    turn = await run_turn(workflow, "go")
    assert len(client_of(a).calls) == 4
    assert len(client_of(b).calls) == 1  # not in the allow-list: yields after one reply
    prompts = [m.text for m in turn.result.conversation if m.role == "user"][1:]
    assert prompts == ["Continue, a."] * 3


async def test_autonomous_counters_reset_when_the_agent_hands_off() -> None:
    """a loops twice, hands to b, b hands back: a starts a new run from zero."""
    a = scripted_agent(
        "a", reply("a1"), reply("a2"), handoff_to("b"), reply("a3"), reply("a4"), reply("a5")
    )
    b = scripted_agent("b", handoff_to("a"))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_handoff(b, a)
        .with_autonomous_mode(turn_limit=2)
        .build()
    )
    await run_turn(workflow, "go")
    assert len(client_of(a).calls) == 6  # 3 (two continuations, then handoff) + 3 (fresh limit)
    client_of(a).assert_complete()


async def test_autonomous_counters_reset_on_each_user_message() -> None:
    a = scripted_agent("a", *(reply(f"a{i}") for i in range(4)))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a).with_handoff(a, b).with_autonomous_mode(turn_limit=1).build()
    )
    await run_turn(workflow, "one")
    await run_turn(workflow, "two")
    assert len(client_of(a).calls) == 4
    client_of(a).assert_complete()


async def test_autonomous_counters_are_checkpointed() -> None:
    storage = InMemoryCheckpointStorage()
    a = scripted_agent("a", reply("a1"), reply("a2"), reply("a3"))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a).with_handoff(a, b).with_autonomous_mode(turn_limit=2).build()
    )
    await run_turn(workflow, "go", checkpoint_storage=storage)
    checkpoints = await storage.list_checkpoints(workflow_name=workflow.name)
    [mid] = [c for c in checkpoints if c.iteration_count == 2]
    assert mid.state["_executor_state"]["handoff_host"]["manager"]["autonomous_turns"] == {"a": 2}

    a2 = scripted_agent("a", reply("a3 after restore"))
    b2 = scripted_agent("b")
    restored = (
        HandoffWorkflowBuilder(a2).with_handoff(a2, b2).with_autonomous_mode(turn_limit=2).build()
    )
    turn = await run_turn(
        restored,
        None,  # type: ignore[arg-type]
        checkpoint_id=mid.checkpoint_id,
        checkpoint_storage=storage,
    )
    assert len(client_of(a2).calls) == 1  # the limit was already nearly used before the checkpoint
    assert turn.result.text.endswith("a3 after restore")


def test_autonomous_validation_matches_dotnet() -> None:
    a, b = scripted_agent("a"), scripted_agent("b")
    builder = HandoffWorkflowBuilder(a).with_handoff(a, b)
    with pytest.raises(ValueError, match=r"^Turn limit must be greater than zero\.$"):
        builder.with_autonomous_mode(turn_limit=0)
    with pytest.raises(ValueError, match=r"^Turn limit for agent 'a' must be greater than zero\.$"):
        builder.with_autonomous_mode(agent_turn_limits={a: -1})
    with pytest.raises(
        ValueError, match=r"^Continuation prompt for agent 'b' must not be empty\.$"
    ):
        builder.with_autonomous_mode(agent_continuation_prompts={b: ""})
    with pytest.raises(TypeError, match="One or more autonomous agents are None"):
        builder.with_autonomous_mode(agents=[a, None])  # type: ignore[list-item]
    stranger = scripted_agent("stranger")
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.with_autonomous_mode(agents=[stranger, "ghost"]).build()
    assert failure.value.problems == (
        "Autonomous mode names agent 'stranger', which is not a participant in this handoff "
        "workflow; add it with add_participants or a handoff.",
        "Autonomous mode names agent 'ghost', which is not a participant in this handoff workflow.",
    )


async def test_each_autonomous_call_replaces_earlier_settings() -> None:
    a = scripted_agent("a", reply("a1"), reply("a2"))
    b = scripted_agent("b", reply("b1"), reply("b2"))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_autonomous_mode(turn_limit=5, agents=[b], continuation_prompt="old")
        .with_autonomous_mode(turn_limit=1)
        .build()
    )
    turn = await run_turn(workflow, "go")
    assert len(client_of(a).calls) == 2  # allow-list reset to everyone, limit 1
    assert [m.text for m in turn.result.conversation if m.role == "user"][-1] == (
        DEFAULT_AUTONOMOUS_PROMPT
    )


# -- termination condition -----------------------------------------------------------------------


async def test_sync_termination_condition_ends_the_autonomous_loop() -> None:
    a = scripted_agent("a", *(reply(f"a{i}") for i in range(5)))
    b = scripted_agent("b")

    def two_replies(conversation: Sequence[Message]) -> bool:
        return sum(m.role == "assistant" for m in conversation) >= 2

    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_autonomous_mode()
        .with_termination_condition(two_replies)
        .build()
    )
    await run_turn(workflow, "go")
    assert len(client_of(a).calls) == 2


async def test_async_termination_condition_ends_the_autonomous_loop() -> None:
    a = scripted_agent("a", *(reply(f"a{i}") for i in range(5)))
    b = scripted_agent("b")

    async def three_replies(conversation: Sequence[Message]) -> bool:
        return sum(m.role == "assistant" for m in conversation) >= 3

    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_autonomous_mode()
        .with_termination_condition(three_replies)
        .build()
    )
    await run_turn(workflow, "go")
    assert len(client_of(a).calls) == 3


async def test_termination_condition_is_not_evaluated_on_a_handoff() -> None:
    seen: list[str | None] = []

    def always(conversation: Sequence[Message]) -> bool:
        seen.append(conversation[-1].author_name)
        return True

    a = scripted_agent("a", handoff_to("b"))
    b = scripted_agent("b", reply("b answers"))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_autonomous_mode()
        .with_termination_condition(always)
        .build()
    )
    turn = await run_turn(workflow, "go")
    assert turn.result.text == "b answers"
    assert seen == ["b"]


def test_termination_condition_must_be_callable() -> None:
    builder = HandoffWorkflowBuilder(scripted_agent("a"))
    with pytest.raises(TypeError, match="condition must be callable, not str"):
        builder.with_termination_condition("stop")  # type: ignore[arg-type]
