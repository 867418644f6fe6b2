"""The reply tool (``with_reply_tool``): a tool to answer in words beside the handoff tools."""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework import Agent, Message, tool

from handoff_builder import (
    DEFAULT_REPLY_TOOL_DESCRIPTION,
    ConversationHost,
    HandoffArgumentError,
    HandoffConfigurationError,
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

HELLO = "Hello! How can I help you today?"


def desk(*triage_steps: Any, billing_steps: tuple[Any, ...] = ()) -> tuple[Agent, Agent]:
    triage = scripted_agent("triage", *triage_steps)
    billing = scripted_agent("billing", *billing_steps)
    return triage, billing


def with_reply(triage: Agent, billing: Agent) -> HandoffWorkflowBuilder:
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, "charges, invoices, plans")
        .with_reply_tool()
    )


def greet(**arguments: Any) -> Any:
    return call_tool("reply_to_user", **arguments)


def kinds(messages: list[Message] | tuple[Message, ...]) -> list[tuple[str, list[str]]]:
    return [(str(m.role), [c.type for c in m.contents]) for m in messages]


async def test_the_reply_tool_is_offered_with_a_strict_lean_schema() -> None:
    triage, billing = desk(reply("Hi."))
    await run_turn(with_reply(triage, billing).build(), "Hi there!")
    call = received(triage)
    assert call.tool_names == ("handoff_to_billing", "reply_to_user")
    reply_tool = call.options["tools"][1]
    assert reply_tool.to_json_schema_spec() == {
        "type": "function",
        "function": {
            "name": "reply_to_user",
            "description": "A greeting, a thanks, no request yet: answer in words.",
            "parameters": {
                "additionalProperties": False,
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "type": "object",
            },
            "strict": True,
        },
    }
    assert (
        DEFAULT_REPLY_TOOL_DESCRIPTION == "A greeting, a thanks, no request yet: answer in words."
    )
    assert "reply_to_user" not in str(call.options.get("instructions"))


async def test_without_the_option_no_reply_tool_is_offered() -> None:
    triage, billing = desk(reply("Hi."))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    await run_turn(builder.build(), "Hi there!")
    assert received(triage).tool_names == ("handoff_to_billing",)


async def test_a_name_and_description_of_ones_own() -> None:
    triage, billing = desk(call_tool("answer", text=HELLO))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_reply_tool(description="Small talk.", name="answer")
    )
    turn = await run_turn(builder.build(), "Hi there!")
    assert turn.result.text == HELLO
    spec = received(triage).options["tools"][1].to_json_schema_spec()["function"]
    assert (spec["name"], spec["description"]) == ("answer", "Small talk.")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_reply_call_ends_the_turn_with_its_text_as_the_agents_message(
    stream: bool,
) -> None:
    triage, billing = desk(respond("Hi!", greet(text=HELLO)))  # one model call, no second one
    turn = await run_turn(with_reply(triage, billing).build(), "Hi there!", stream=stream)
    result = turn.result
    assert (result.active_agent, result.status, result.handoffs) == ("triage", "completed", ())
    assert result.text == "Hi! " + HELLO
    assert kinds(result.messages) == [("assistant", ["text", "text"])]
    [message] = result.messages
    assert message.author_name == "triage"
    assert [c.text for c in message.contents] == ["Hi!", HELLO]
    assert kinds(result.conversation) == [("user", ["text"]), ("assistant", ["text", "text"])]
    assert [(s.kind, s.decided_by) for s in result.trace] == [("start", "code"), ("end", "model")]
    assert len(client_of(triage).calls) == 1
    if stream:
        shown = [(u.author_name, str(u.role), u.text) for u in turn.updates if u.contents]
        assert shown == [("triage", "assistant", "Hi!"), ("triage", "assistant", HELLO)]
        assert all(c.type == "text" for u in turn.updates for c in u.contents)


async def test_the_next_turn_reads_the_reply_as_the_agents_own_words() -> None:
    triage, billing = desk(greet(text=HELLO), reply("Anything else?"))
    workflow = with_reply(triage, billing).build()
    first = await run_turn(workflow, "Hi there!")
    await run_turn(workflow, [*first.result.conversation, Message("user", ["Thanks!"])])
    lines = received(triage).rendered.splitlines()
    assert f"assistant[triage]: {HELLO}" in lines
    assert "reply_to_user" not in "\n".join(line for line in lines if "->" in line or "<-" in line)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("handoff_first", [False, True], ids=["reply-first", "handoff-first"])
async def test_a_handoff_in_the_same_response_is_followed_after_the_text(
    stream: bool, handoff_first: bool
) -> None:
    calls = [greet(text="Let me get billing."), handoff_to("billing", goal="Explain my bill.")]
    if handoff_first:
        calls.reverse()
    triage, billing = desk(respond(*calls), billing_steps=(reply("Your bill is 42 EUR."),))
    turn = await run_turn(with_reply(triage, billing).build(), "My bill?", stream=stream)
    result = turn.result
    assert [(h.source, h.target, h.goal) for h in result.handoffs] == [
        ("triage", "billing", "Explain my bill.")
    ]
    assert result.active_agent == "billing"
    assert result.text == "Let me get billing.Your bill is 42 EUR."
    assert kinds(result.conversation) == [
        ("user", ["text"]),
        ("assistant", ["text", "function_call"]),
        ("tool", ["function_result"]),
        ("assistant", ["text"]),
    ]
    call = result.conversation[1].contents[1]
    assert call.name == "handoff_to_billing"
    assert "Goal: Explain my bill." in received(billing).rendered
    if stream:
        texts = [(u.author_name, u.text) for u in turn.updates if u.text]
        assert texts == [("triage", "Let me get billing."), ("billing", "Your bill is 42 EUR.")]
        names = [c.name for u in turn.updates for c in u.contents if c.type == "function_call"]
        assert names == ["handoff_to_billing"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (
            {},
            "Error: reply_to_user was not called because its arguments are not valid: text: "
            "Field required. Call reply_to_user again with your answer to the user as text.",
        ),
        (
            {"text": "  "},
            "Error: reply_to_user was not called: text is empty. Call it with your answer.",
        ),
        (
            {"text": 7},
            "Error: reply_to_user was not called because its arguments are not valid: text: "
            "Input should be a valid string. Call reply_to_user again with your answer to the "
            "user as text.",
        ),
    ],
    ids=["no-text", "blank", "not-a-string"],
)
async def test_a_call_without_text_is_refused_with_a_tool_error(
    arguments: dict[str, Any], error: str
) -> None:
    triage, billing = desk(greet(**arguments), greet(text=HELLO))
    turn = await run_turn(with_reply(triage, billing).build(), "Hi there!")
    assert turn.result.text == HELLO
    assert turn.result.active_agent == "triage"
    second = client_of(triage).calls[1]
    [result] = [c for c in second.messages[-1].contents if c.type == "function_result"]
    assert result.result == error
    # The refused call stays, as a refused handoff call does; the reply that stood is text.
    assert kinds(turn.result.messages) == [
        ("assistant", ["function_call"]),
        ("tool", ["function_result"]),
        ("assistant", ["text"]),
    ]


async def test_keys_beside_text_are_ignored() -> None:
    triage, billing = desk(greet(text=HELLO, type="string"))
    turn = await run_turn(with_reply(triage, billing).build(), "Hi there!")
    assert turn.result.text == HELLO


async def test_named_agents_limit_the_tool_to_them() -> None:
    triage, billing = desk(handoff_to("billing"), billing_steps=(reply("Back to you?"),))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_hand_back(triage)
        .with_reply_tool(billing)
    )
    await run_turn(builder.build(), "My bill?")
    assert received(triage).tool_names == ("handoff_to_billing",)
    assert received(billing).tool_names == ("transfer_back_to_triage", "reply_to_user")


async def test_a_run_that_offers_no_handoff_offers_no_reply_tool() -> None:
    triage, billing = desk(reply("Hi."))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, is_enabled=lambda _: False)
        .with_reply_tool()
    )
    await run_turn(builder.build(), "Hi there!")
    assert received(triage).tool_names == ()


def test_an_agent_named_without_handoff_tools_is_a_build_error() -> None:
    triage, billing = desk()
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_reply_tool(billing)
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert failure.value.problems == (
        "with_reply_tool names agent 'billing', which has no handoff tools: the reply tool is "
        "offered beside them. Give it a handoff, or leave it out of with_reply_tool.",
    )
    [finding] = builder.lint()
    assert (finding.code, finding.agents) == ("no-handoff-tools", ("billing",))


def test_an_agent_named_that_is_no_participant_is_a_build_error() -> None:
    triage, billing = desk()
    stranger = scripted_agent("stranger")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    with pytest.raises(HandoffConfigurationError, match="'stranger', which is not a participant"):
        builder.with_reply_tool(stranger).build()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (
            "handoff_to_billing",
            "Agent 'triage' would get two tools named 'handoff_to_billing', one of them the reply "
            "tool; pass name= to with_reply_tool.",
        ),
        (
            "lookup",
            "Agent 'triage' already has a tool named 'lookup', the name of the reply tool; rename "
            "its tool or pass name= to with_reply_tool.",
        ),
        (
            "reply to user",
            "The reply tool's name 'reply to user' (with_reply_tool) must use only [A-Za-z0-9_-] "
            "and be 1 to 64 characters long.",
        ),
    ],
    ids=["a-handoff-tool", "the-agents-own-tool", "invalid"],
)
def test_a_name_that_collides_or_is_invalid_is_a_build_error(name: str, problem: str) -> None:
    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return order

    triage = Agent(client=client_of(scripted_agent("triage")), name="triage", tools=[lookup])
    billing = scripted_agent("billing")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.with_reply_tool(name=name).build()
    assert failure.value.problems == (problem,)


def test_bad_arguments_are_refused_as_they_are_given() -> None:
    triage, billing = desk()
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    with pytest.raises(HandoffArgumentError, match="non-blank"):
        builder.with_reply_tool(description=" ")
    with pytest.raises(HandoffArgumentError, match=r"agents\[0\]"):
        builder.with_reply_tool("triage")  # pyright: ignore[reportArgumentType]


async def test_a_hosted_conversation_stores_the_reply_as_the_agents_text(
    store: ConversationStore,
) -> None:
    triage, billing = desk(greet(text=HELLO), greet(text="You're welcome!"))
    builder = with_reply(triage, billing)
    first = await ConversationHost(builder, store).send("c", "Hi there!")
    assert (first.active_agent, first.text) == ("triage", HELLO)
    host = ConversationHost(builder, store)  # another host: the history is read from the store
    streamed = [
        (event.data.author_name, event.data.text)
        async for event in host.stream("c", "Thanks!")
        if event.type == "output" and getattr(event.data, "text", "")
    ]
    assert streamed == [("triage", "You're welcome!")]
    history = await ConversationHost(builder, store).history("c")
    assert [(str(m.role), m.author_name, m.text) for m in history] == [
        ("user", None, "Hi there!"),
        ("assistant", "triage", HELLO),
        ("user", None, "Thanks!"),
        ("assistant", "triage", "You're welcome!"),
    ]
    assert all(c.type == "text" for m in history for c in m.contents)
