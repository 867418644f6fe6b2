"""Outputs, streaming, output designations and the workflow hosted as an agent."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from agent_framework import AgentResponseUpdate, Content, Message, WorkflowEvent, tool

from handoff_builder import (
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_TURN_EVENT,
    HandoffConfigurationError,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
)
from handoff_builder.testing import call_tool, client_of, handoff_to, reply, respond, scripted_agent
from tests.helpers import AGENT_FRAMEWORK, run_turn


def chain_workflow(*, a_steps: list[Any] | None = None) -> Any:
    a = scripted_agent("a", *(a_steps or [respond("a speaks", handoff_to("b", goal="g"))]))
    b = scripted_agent("b", respond("b speaks", handoff_to("c", goal="g2")))
    c = scripted_agent("c", reply("c answers"))
    builder = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, c)
    return builder, (a, b, c)


async def test_streaming_yields_every_agents_updates_with_author_names() -> None:
    builder, _ = chain_workflow()
    turn = await run_turn(builder.build(), "hi", stream=True)
    texts = [(u.author_name, u.text) for u in turn.updates if u.text]
    assert texts == [("a", "a speaks"), ("b", "b speaks"), ("c", "c answers")]
    kinds = [
        (u.author_name, u.role, [c.type for c in u.contents]) for u in turn.updates if not u.text
    ]
    assert kinds == [
        ("a", "assistant", ["function_call"]),
        ("a", "tool", ["function_result"]),
        ("b", "assistant", ["function_call"]),
        ("b", "tool", ["function_result"]),
    ]
    # The turn still ends with its result, as an event.
    assert turn.result.text == "a speaksb speaksc answers"
    assert turn.result.active_agent == "c"


async def test_text_a_client_restates_whole_is_streamed_once() -> None:
    """agent_framework's Responses client sends a text as deltas, then whole (``"replace"``):
    the caller gets each piece once, and only what the whole text adds (here " issued.")."""

    def piece(text: str, mode: Literal["append", "replace"] = "append") -> Content:
        return Content.from_text(text, merge_mode=mode)

    a = scripted_agent(
        "a",
        respond(piece("Ref"), piece("und"), piece("Refund issued.", "replace"), handoff_to("b")),
    )
    b = scripted_agent("b", respond(piece("Do"), piece("ne"), piece("Done", "replace")))
    turn = await run_turn(HandoffWorkflowBuilder(a).with_handoff(a, b).build(), "hi", stream=True)
    assert [(u.author_name, u.text) for u in turn.updates if u.text] == [
        ("a", "Ref"),
        ("a", "und"),
        ("a", " issued."),
        ("b", "Do"),
        ("b", "ne"),
    ]
    assert turn.result.text == "Refund issued.Done"


async def test_non_streaming_output_is_the_turn_result() -> None:
    builder, _ = chain_workflow()
    result = await builder.build().run("hi")
    [output] = result.get_outputs()
    assert isinstance(output, HandoffTurnResult)
    [event] = [e.data for e in result if e.type == HANDOFF_TURN_EVENT]
    assert event is output


async def test_output_from_limits_the_streamed_agents() -> None:
    builder, (a, _, c) = chain_workflow()
    turn = await run_turn(builder.with_output_from(c, a).build(), "hi", stream=True)
    assert {u.author_name for u in turn.updates} == {"a", "c"}
    assert [m.author_name for m in turn.result.messages if m.text] == ["a", "b", "c"]


async def test_intermediate_output_from_sends_progress_events() -> None:
    builder, (a, b, c) = chain_workflow()
    workflow = builder.with_output_from(c).with_intermediate_output_from([a, b]).build()
    turn = await run_turn(workflow, "hi", stream=True)
    assert {u.author_name for u in turn.updates} == {"c"}
    progress = [e.data for e in turn.events if e.type == HANDOFF_INTERMEDIATE_EVENT]
    assert all(isinstance(update, AgentResponseUpdate) for update in progress)
    assert [u.text for u in progress if u.text] == ["a speaks", "b speaks"]


def test_designating_a_non_participant_is_a_build_error() -> None:
    builder, _ = chain_workflow()
    stranger = scripted_agent("stranger")
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.with_output_from(stranger).build()
    assert failure.value.problems == (
        "Output designation references agent 'stranger', which is not a participant in this "
        "handoff workflow.",
    )


# -- the workflow as an agent --------------------------------------------------------------------


def calls_and_results(messages: list[Message] | tuple[Message, ...]) -> list[str]:
    return [
        f"{c.type}:{c.call_id}"
        for m in messages
        for c in m.contents
        if c.type in ("function_call", "function_result")
    ]


async def test_as_agent_gives_the_messages_agent_frameworks_workflow_agent_shows() -> None:
    """agent_framework's WorkflowAgent: 1.23 gives each handoff call and its result, in order;
    1.26 gives its caller only the assistant messages without a tool call (an agent's words in
    the message of its handoff call are left out too: here a's and b's)."""
    builder, _ = chain_workflow()
    agent = builder.build().as_agent(name="support")
    response = await agent.run("hi")
    order = calls_and_results(response.messages)
    if AGENT_FRAMEWORK < (1, 26):
        assert [item.split(":")[0] for item in order] == [
            "function_call", "function_result", "function_call", "function_result",
        ]  # fmt: skip
        assert order[0].split(":")[1] == order[1].split(":")[1]
        assert order[2].split(":")[1] == order[3].split(":")[1]
        assert [m.text for m in response.messages if m.text] == [
            "a speaks", "b speaks", "c answers",
        ]  # fmt: skip
    else:
        assert order == []
        assert [(m.role, m.author_name, m.text) for m in response.messages] == [
            ("assistant", "c", "c answers")
        ]
    assert response.messages[-1].text == "c answers"


async def test_as_agent_streaming_does_not_duplicate_messages() -> None:
    builder, _ = chain_workflow()
    agent = builder.build().as_agent(name="support")
    updates = [update async for update in agent.run("hi", stream=True)]
    assert [u.text for u in updates if u.text] == ["a speaks", "b speaks", "c answers"]


async def test_as_agent_multi_turn_keeps_history_once() -> None:
    a = scripted_agent("a", handoff_to("b", goal="g"), reply("a again"))
    b = scripted_agent("b", reply("b here"))
    agent = HandoffWorkflowBuilder(a).with_handoff(a, b).build().as_agent(name="support")
    session = agent.create_session()
    first = await agent.run("first question", session=session)
    assert first.messages[-1].text == "b here"
    second = await agent.run("second question", session=session)
    assert second.text == "a again"
    seen = client_of(a).calls[-1].texts
    assert seen.count("first question") == 1
    assert seen[-1] == "second question"
    assert "b here" in seen


async def test_as_agent_multi_turn_keeps_words_said_with_a_handoff_once() -> None:
    """WorkflowAgent 1.26 neither shows nor resends a's "One moment." (it came with a's handoff
    call): the host still knows the history it resends, and a sees its words once."""
    a = scripted_agent("a", respond("One moment.", handoff_to("b", goal="g")), reply("a again"))
    b = scripted_agent("b", reply("b here"))
    agent = HandoffWorkflowBuilder(a).with_handoff(a, b).build().as_agent(name="support")
    session = agent.create_session()
    await agent.run("first question", session=session)
    second = await agent.run("second question", session=session)
    assert second.text == "a again"
    seen = client_of(a).calls[-1].texts
    assert [t for t in seen if t] == ["first question", "One moment.", "b here", "second question"]


async def test_input_that_leaves_out_a_reply_shown_is_new_input() -> None:
    """Messages that repeat the history's start but not every reply a caller was shown are not
    a resent history: every one of them joins the conversation."""
    a = scripted_agent("a", reply("hello"), reply("hello again"), reply("and again"))
    workflow = HandoffWorkflowBuilder(a).build()
    await run_turn(workflow, "first question")
    await run_turn(workflow, [Message(role="user", contents=["first question"])])
    resent = [
        Message(role="user", contents=["first question"]),
        Message(role="user", contents=["more"]),
    ]
    await run_turn(workflow, resent)
    seen = client_of(a).calls[-1].texts
    assert seen == [
        "first question", "hello", "first question", "hello again", "first question", "more",
    ]  # fmt: skip


async def test_as_agent_approval_resumes_the_asking_agent() -> None:
    """.NET #8247: the approval must go back to the agent that asked, not the entry agent."""
    approved: list[str] = []

    @tool(name="cancel_plan", description="Cancel the plan.", approval_mode="always_require")
    def cancel_plan() -> str:
        approved.append("cancelled")
        return "plan cancelled"

    triage = scripted_agent("triage", handoff_to("billing", goal="Cancel the plan."))
    billing = scripted_agent(
        "billing", call_tool("cancel_plan"), reply("Your plan is cancelled."), tools=[cancel_plan]
    )
    agent = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build().as_agent()
    # No session: the workflow keeps the conversation itself, and agent_framework's WorkflowAgent
    # only accepts the answers as input while requests are pending.
    first = await agent.run("cancel my plan")
    [request] = [
        c for m in first.messages for c in m.contents if c.type == "function_approval_request"
    ]
    answer = Message(role="user", contents=[request.to_function_approval_response(approved=True)])
    second = await agent.run(answer)
    assert second.text == "Your plan is cancelled."
    assert approved == ["cancelled"]
    assert len(client_of(triage).calls) == 1


def test_turn_events_are_workflow_events() -> None:
    event: WorkflowEvent[Any] = WorkflowEvent(HANDOFF_TURN_EVENT)  # type: ignore[arg-type]
    assert event.type == "handoff_turn_completed"
