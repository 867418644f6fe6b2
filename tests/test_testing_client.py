"""The scripted chat client: strict, recording, and on the real function-invocation path."""

from __future__ import annotations

import pytest
from agent_framework import Agent, Message, tool

from handoff_builder import HandoffWorkflowBuilder, ScriptExhaustedError
from handoff_builder.testing import (
    ModelCall,
    ScriptedChatClient,
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    respond,
    scripted_agent,
)
from tests.helpers import AGENT_FRAMEWORK


async def test_plays_steps_in_order_and_records_calls() -> None:
    agent = scripted_agent("a", reply("one"), reply("two"), instructions="Be brief.")
    first = await agent.run("hello")
    second = await agent.run([Message(role="user", contents=["again"])])
    assert (first.text, second.text) == ("one", "two")
    calls = client_of(agent).calls
    assert [call.texts for call in calls] == [["hello"], ["again"]]
    assert calls[0].instructions == "Be brief."
    client_of(agent).assert_complete()


async def test_raises_when_the_script_runs_out() -> None:
    agent = scripted_agent("a", reply("only"))
    await agent.run("one")
    with pytest.raises(ScriptExhaustedError, match="'a' has no step left for model call #2"):
        await agent.run("two")


def test_assert_complete_reports_unused_steps() -> None:
    client = ScriptedChatClient(reply("x"), name="c")
    with pytest.raises(AssertionError, match="'c' has 1 unused step"):
        client.assert_complete()


async def test_tool_calls_run_through_the_function_invocation_loop() -> None:
    seen: list[int] = []

    @tool(name="add", description="Add two numbers.")
    def add(x: int, y: int) -> int:
        seen.append(x + y)
        return x + y

    agent = scripted_agent("a", call_tool("add", x=2, y=3), reply("5"), tools=[add])
    response = await agent.run("2+3?")
    assert seen == [5]
    assert response.text == "5"
    second = client_of(agent).calls[1]
    [result] = [c for m in second.messages for c in m.contents if c.type == "function_result"]
    assert str(result.result) == "5"
    assert client_of(agent).calls[0].tool_names == ("add",)


async def test_function_steps_see_the_call() -> None:
    def echo(call: ModelCall) -> object:
        return reply(f"you said {call.texts[-1]}")

    agent = scripted_agent("a", echo)  # type: ignore[arg-type]
    assert (await agent.run("ping")).text == "you said ping"


async def test_streaming_yields_each_content() -> None:
    client = ScriptedChatClient(respond("hello", "world"))
    stream = client.get_response([Message(role="user", contents=["hi"])], stream=True)
    assert [(u.role, u.text) async for u in stream] == [
        ("assistant", "hello"),
        ("assistant", "world"),
    ]


async def test_an_agent_streams_each_content_under_its_name() -> None:
    """agent_framework 1.26's Agent ends a streamed run with an update of its own (the run's
    metadata, no contents, no author); 1.23's did not. The client streams the same."""
    agent = scripted_agent("a", respond("hello", "world"))
    updates = [update async for update in agent.run("hi", stream=True)]
    said = [(u.author_name, u.text) for u in updates if u.contents]
    assert said == [("a", "hello"), ("a", "world")]
    closing = [(u.author_name, u.role) for u in updates if not u.contents]
    assert closing == ([] if AGENT_FRAMEWORK < (1, 26) else [(None, None)])


def test_client_of_rejects_other_clients() -> None:
    class Other(ScriptedChatClient):
        pass

    agent = Agent(client=Other(), name="x")
    assert isinstance(client_of(agent), ScriptedChatClient)
    plain = Agent(client=ScriptedChatClient(), name="y")
    plain.client = object()  # type: ignore[assignment]
    with pytest.raises(TypeError, match="does not use a ScriptedChatClient"):
        client_of(plain)


def test_received_with_a_real_client_says_where_its_inputs_are() -> None:
    from handoff_builder.providers import chat_client

    billing = Agent(client=chat_client("openai", environ={"OPENAI_API_KEY": "k"}), name="billing")
    with pytest.raises(TypeError) as failure:
        received(billing)
    assert str(failure.value) == (
        "Agent 'billing' does not use a ScriptedChatClient, whose own record this reads. With any "
        "chat client, build the workflow with with_model_inputs() and read "
        "turn.received('billing') on the turn's result."
    )


async def test_user_text_is_what_the_user_wrote_not_a_note_or_an_agents_words() -> None:
    triage = scripted_agent("triage", respond("One moment.", handoff_to("billing", goal="Bill.")))
    billing = scripted_agent(
        "billing", respond_with=lambda call: reply(f"You said: {call.user_text}")
    )
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()

    result = await workflow.run("I was charged twice")

    assert result.get_outputs()[-1].messages[-1].text == "You said: I was charged twice"
    assert client_of(billing).calls[0].texts[-1] == "Goal: Bill."
