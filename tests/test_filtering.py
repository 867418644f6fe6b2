"""What an agent sees of the shared conversation: tool-call filtering and role reassignment."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from agent_framework import Content, Message, tool

from handoff_builder import GroupChatHost, HandoffToolCallFiltering, HandoffWorkflowBuilder
from handoff_builder._views import AgentView
from handoff_builder.testing import (
    ModelCall,
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    respond,
    scripted_agent,
)
from tests.helpers import run_turn


def shape(call: ModelCall) -> list[tuple[str, str | None, list[str]]]:
    return [(m.role, m.author_name, [c.type for c in m.contents]) for m in call.messages]


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_target_does_not_receive_handoff_calls_by_default(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("b", goal="g"))
    b = scripted_agent("b", reply("b answers"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).build()
    turn = await run_turn(workflow, "what is 2+2?", stream=stream)
    [seen] = client_of(b).calls
    # Not the call, but a note from the host with the goal, verbatim.
    assert [(m.role, m.author_name, m.text) for m in seen.messages] == [
        ("user", None, "what is 2+2?"),
        ("user", "handoff_host", "Goal: g"),
    ]
    # The shared conversation and the output keep everything.
    assert [c.type for m in turn.result.conversation for c in m.contents] == [
        "text", "function_call", "function_result", "text",
    ]  # fmt: skip


async def test_other_agents_text_arrives_as_user_copies() -> None:
    a = scripted_agent("a", respond("Let me ask b.", handoff_to("b", goal="g")))
    b = scripted_agent("b", respond("b adds this.", handoff_to("c", goal="g")))
    c = scripted_agent("c", reply("c answers"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, c).build()
    turn = await run_turn(workflow, "question")
    [seen_by_c] = client_of(c).calls
    assert [(m.role, m.author_name, m.text) for m in seen_by_c.messages] == [
        ("user", None, "question"),
        ("user", "a", "Let me ask b."),
        ("user", "handoff_host", "Handoff from a to b. Goal: g"),
        ("user", "b", "b adds this."),
        ("user", "handoff_host", "Goal: g"),
    ]
    # The shared conversation is not mutated: a's message is still an assistant message.
    shared_a = next(m for m in turn.result.conversation if m.author_name == "a" and m.text)
    assert shared_a.role == "assistant"
    assert [c.type for c in shared_a.contents] == ["text", "function_call"]
    assert all(m is not shared_a for m in seen_by_c.messages)


async def test_filtering_none_keeps_handoff_calls() -> None:
    a = scripted_agent("a", handoff_to("b", goal="g"))
    b = scripted_agent("b", reply("ok"))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_tool_call_filtering(HandoffToolCallFiltering.NONE)
        .build()
    )
    await run_turn(workflow, "hi")
    assert shape(client_of(b).calls[0]) == [
        ("user", None, ["text"]),
        ("assistant", "a", ["function_call"]),
        ("tool", "a", ["function_result"]),
        ("user", "handoff_host", ["text"]),  # the note comes in every mode
    ]


def weather_tool() -> object:
    @tool(name="get_weather", description="Weather for a city.")
    def get_weather(city: str) -> str:
        return f"Sunny in {city}"

    return get_weather


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            HandoffToolCallFiltering.HANDOFF_ONLY,
            [
                ("user", None, ["text"]),
                ("assistant", "a", ["function_call"]),
                ("tool", "a", ["function_result"]),
                ("user", "a", ["text"]),
                ("user", "handoff_host", ["text"]),
            ],
        ),
        (
            HandoffToolCallFiltering.ALL,
            [("user", None, ["text"]), ("user", "a", ["text"]), ("user", "handoff_host", ["text"])],
        ),
    ],
)
async def test_non_handoff_tool_calls_by_mode(
    mode: HandoffToolCallFiltering, expected: list[tuple[str, str | None, list[str]]]
) -> None:
    a = scripted_agent(
        "a",
        call_tool("get_weather", city="Oslo"),
        respond("It is sunny; b will book.", handoff_to("b", goal="Book a trip to Oslo.")),
        tools=[weather_tool()],
    )
    b = scripted_agent("b", reply("Booked."))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_tool_call_filtering(mode).build()
    await run_turn(workflow, "weather in Oslo, then book")
    assert shape(client_of(b).calls[0]) == expected


async def test_reentered_agent_sees_its_own_handoff_call_and_result() -> None:
    """Every call an agent sees has its result when it runs again (.NET #4544)."""
    a = scripted_agent("a", handoff_to("b", goal="g"), reply("back at a"))
    b = scripted_agent("b", handoff_to("a", goal="g2"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a).build()
    turn = await run_turn(workflow, "ping")
    assert turn.result.text == "back at a"
    second = client_of(a).calls[1]
    calls = [c.call_id for m in second.messages for c in m.contents if c.type == "function_call"]
    results = [
        c.call_id for m in second.messages for c in m.contents if c.type == "function_result"
    ]
    assert calls == results
    assert len(calls) == 1  # its own call; b's handoff call is filtered out


async def test_multi_turn_calls_always_have_results() -> None:
    a = scripted_agent("a", handoff_to("b", goal="g"), handoff_to("b", goal="g3"))
    b = scripted_agent("b", reply("one"), handoff_to("a", goal="g2"))
    client_of(a).add_steps(reply("two"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, a).build()
    await run_turn(workflow, "turn one")
    await run_turn(workflow, "turn two")
    for call in client_of(a).calls + client_of(b).calls:
        contents = [c for m in call.messages for c in m.contents]
        calls = sorted(str(c.call_id) for c in contents if c.type == "function_call")
        results = sorted(str(c.call_id) for c in contents if c.type == "function_result")
        assert calls == results


def test_view_matches_calls_and_results_by_order_with_reused_ids() -> None:
    """Providers that reuse call ids (the function name as id) still filter correctly."""
    history = [
        Message(role="user", contents=["go"]),
        Message(
            role="assistant",
            author_name="a",
            contents=[Content.from_function_call(call_id="same", name="lookup", arguments="{}")],
        ),
        Message(
            role="tool",
            author_name="a",
            contents=[Content.from_function_result(call_id="same", result="looked up")],
        ),
        Message(
            role="assistant",
            author_name="a",
            contents=[
                Content.from_function_call(call_id="same", name="handoff_to_b", arguments="{}")
            ],
        ),
        Message(
            role="tool",
            author_name="a",
            contents=[Content.from_function_result(call_id="same", result="Transferred.")],
        ),
    ]
    view = AgentView(
        "b", HandoffToolCallFiltering.HANDOFF_ONLY, frozenset({"handoff_to_b"}), "handoff_host"
    )
    seen = view.update(history)
    assert [[c.type for c in m.contents] for m in seen] == [
        ["text"], ["function_call"], ["function_result"],
    ]  # fmt: skip
    assert seen[2].contents[0].result == "looked up"


@pytest.mark.parametrize(
    ("tool", "mode", "kept"),
    [
        ("pay", HandoffToolCallFiltering.NONE, True),
        ("pay", HandoffToolCallFiltering.HANDOFF_ONLY, True),
        ("pay", HandoffToolCallFiltering.ALL, False),
        ("handoff_to_b", HandoffToolCallFiltering.NONE, True),
        ("handoff_to_b", HandoffToolCallFiltering.HANDOFF_ONLY, False),
        ("handoff_to_b", HandoffToolCallFiltering.ALL, False),
    ],
)
def test_approvals_go_with_their_call_and_other_agents_reasoning_is_dropped(
    tool: str, mode: HandoffToolCallFiltering, kept: bool
) -> None:
    """Another agent's approval request and its answer are kept exactly when the call is."""
    call = Content.from_function_call(call_id="c1", name=tool, arguments="{}")
    request = Content.from_function_approval_request(id="r1", function_call=call)
    history = [
        Message(role="user", contents=["pay it"]),
        Message(
            role="assistant",
            author_name="a",
            contents=[Content.from_text_reasoning(text="thinking about it"), call, request],
        ),
        Message(
            role="user",
            author_name="a",
            contents=[request.to_function_approval_response(approved=True)],
        ),
    ]
    view = AgentView("b", mode, frozenset({"handoff_to_b"}), "handoff_host")
    waiting = [c.type for m in view.update(history) for c in m.contents]
    # While the call waits for its result, a model may not receive it: nothing of it is shown.
    assert not {"function_call", "function_approval_request", "function_approval_response"} & set(
        waiting
    )
    history.append(Message(role="tool", author_name="a", contents=[_result("c1", "paid")]))
    seen = view.update(history)
    kinds = [c.type for m in seen for c in m.contents]
    assert ("function_result" in kinds) is kept
    assert ("function_approval_request" in kinds) is kept
    assert ("function_approval_response" in kinds) is kept
    assert ("function_call" in kinds) is kept
    assert ("text_reasoning" in kinds) is (mode is HandoffToolCallFiltering.NONE)


async def test_reasoning_of_a_handoff_turn_does_not_reach_the_next_agent() -> None:
    """.NET #7384: reasoning attached to a handoff defeated the filter."""
    thinking = Content.from_text_reasoning(text="The user wants billing.")
    a = scripted_agent("a", respond(thinking, handoff_to("b", goal="g")))
    b = scripted_agent("b", reply("billing here"))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).build()
    await run_turn(workflow, "my bill")
    assert shape(client_of(b).calls[0]) == [
        ("user", None, ["text"]),
        ("user", "handoff_host", ["text"]),
    ]
    assert "The user wants billing." not in client_of(b).calls[0].rendered


def test_view_is_incremental() -> None:
    history = [Message(role="user", contents=["one"])]
    view = AgentView("a", HandoffToolCallFiltering.HANDOFF_ONLY, frozenset(), "handoff_host")
    first = view.update(history)
    history.append(Message(role="assistant", author_name="b", contents=["two"]))
    second = view.update(history)
    assert first is second
    assert [m.text for m in second] == ["one", "two"]
    assert view.cursor == 2


def _call(name: str, call_id: str) -> Content:
    return Content.from_function_call(call_id=call_id, name=name, arguments="{}")


def _result(call_id: str, text: str) -> Content:
    return Content.from_function_result(call_id=call_id, result=text)


@pytest.mark.parametrize("call_id", ["c1", ""], ids=["with-call-id", "empty-call-id"])
@pytest.mark.parametrize(
    ("mode", "kept"),
    [
        (HandoffToolCallFiltering.NONE, ["lookup", "looked", "handoff_to_b", "Transferred.", "hi"]),
        (HandoffToolCallFiltering.HANDOFF_ONLY, ["lookup", "looked", "hi"]),
        (HandoffToolCallFiltering.ALL, ["hi"]),
    ],
)
def test_filter_cases(call_id: str, mode: HandoffToolCallFiltering, kept: list[str]) -> None:
    """The .NET filter's cases: each mode, with and without call ids, on another agent's turn."""
    other = "a"
    history = [
        Message(role="assistant", author_name=other, contents=[_call("lookup", call_id)]),
        Message(role="tool", author_name=other, contents=[_result(call_id, "looked")]),
        Message(role="assistant", author_name=other, contents=[_call("handoff_to_b", call_id)]),
        Message(role="tool", author_name=other, contents=[_result(call_id, "Transferred.")]),
        Message(role="assistant", author_name=other, contents=["hi"]),
    ]
    seen = AgentView("b", mode, frozenset({"handoff_to_b"}), "handoff_host").update(history)
    labels = [
        c.name
        if c.type == "function_call"
        else (str(c.result) if c.type == "function_result" else c.text)
        for m in seen
        for c in m.contents
    ]
    assert labels == kept
    assert seen[-1].role == "user"
    assert history[-1].role == "assistant"  # the shared history is never changed


async def test_the_host_shows_what_an_agent_would_receive_now() -> None:
    """view_of(): the view of any agent, for any model client (here one that never ran)."""
    a = scripted_agent("a", handoff_to("b", goal="Book a table for two."))
    b = scripted_agent("b", reply("Booked."))
    c = scripted_agent("c")
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b).with_handoff(b, c).build()
    await run_turn(workflow, "dinner tonight?")
    host = workflow.get_start_executor()
    assert isinstance(host, GroupChatHost)

    assert [(m.role, m.author_name, m.text) for m in host.view_of("c")] == [
        ("user", None, "dinner tonight?"),
        ("user", "handoff_host", "Handoff from a to b. Goal: Book a table for two."),
        ("user", "b", "Booked."),
    ]
    assert [m.text for m in host.view_of("b")] == [m.text for m in received(b).messages] + [
        "Booked."
    ]


def provider_problems(messages: Sequence[Message]) -> list[str]:
    """What a chat-completions provider would refuse in ``messages``.

    Each call must be answered, by one result per call, before anything else is said; each
    result must answer a call that waits (matched in order: ids may repeat).
    """
    problems: list[str] = []
    waiting: list[str] = []
    exchange = {"function_result", "function_approval_request", "function_approval_response"}
    for position, message in enumerate(messages):
        kinds = {content.type for content in message.contents}
        if waiting and kinds - exchange:
            problems.append(f"message {position}: calls {waiting} have no result before it")
            waiting = []
        for content in message.contents:
            if content.type == "function_call":
                waiting.append(str(content.call_id))
            elif content.type == "function_result":
                if str(content.call_id) in waiting:
                    waiting.remove(str(content.call_id))
                else:
                    problems.append(f"message {position}: result {content.call_id!r} has no call")
    if waiting:
        problems.append(f"the view ends with calls {waiting} that have no result")
    return problems


@pytest.mark.parametrize("mode", list(HandoffToolCallFiltering), ids=lambda m: m.value)
@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
async def test_history_the_caller_passed_in_reaches_the_model_as_valid_input(
    mode: HandoffToolCallFiltering, stream: bool
) -> None:
    """A result with no author whose call the view drops, and a call with no result, are left
    out; the caller's tool calls are filtered by the mode like any other agent's."""
    triage = scripted_agent("triage", reply("How can I help?"))
    billing = scripted_agent("billing")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, triage)
        .with_tool_call_filtering(mode)
        .build()
    )
    history = [
        Message(role="user", contents=["I was charged twice"]),
        Message(
            role="assistant",
            author_name="billing",
            contents=[_call("handoff_to_triage", "h1"), _call("lookup", "l1")],
        ),
        Message(role="tool", contents=[_result("h1", "Transferred.")]),  # no author
        Message(role="tool", contents=[_result("l1", "two charges")]),  # no author
        Message(role="tool", contents=[_result("x9", "an orphan result")]),
        Message(role="assistant", contents=[_call("lookup", "never-answered")]),
        Message(role="user", contents=["hello?"]),
    ]
    await run_turn(workflow, history, stream=stream)
    [seen] = client_of(triage).calls
    assert provider_problems(seen.messages) == []
    results = [
        str(c.result) for m in seen.messages for c in m.contents if c.type == "function_result"
    ]
    expected = {
        HandoffToolCallFiltering.NONE: ["Transferred.", "two charges"],
        HandoffToolCallFiltering.HANDOFF_ONLY: ["two charges"],
        HandoffToolCallFiltering.ALL: [],
    }[mode]
    assert results == expected
    assert seen.messages[-1].text == "hello?"


def _random_history(rng: random.Random) -> list[Message]:
    authors = [None, "a", "b", "c"]
    names = ["lookup", "pay", "handoff_to_b", "handoff_to_a"]
    ids = ["1", "2", "3", ""]
    history: list[Message] = []
    for _ in range(rng.randint(1, 14)):
        author = rng.choice(authors)
        contents: list[Content] = []
        for _ in range(rng.randint(1, 3)):
            roll = rng.random()
            call_id = rng.choice(ids)
            if roll < 0.3:
                contents.append(_call(rng.choice(names), call_id))
            elif roll < 0.6:
                contents.append(_result(call_id, f"result {call_id}"))
            elif roll < 0.7:
                contents.append(Content.from_text_reasoning(text="thinking"))
            elif roll < 0.8:
                call = _call(rng.choice(names), call_id)
                request = Content.from_function_approval_request(
                    id=f"r{call_id}", function_call=call
                )
                contents.append(rng.choice([request, request.to_function_approval_response(True)]))
            else:
                contents.append(Content.from_text(text="words"))
        tool_only = all(c.type == "function_result" for c in contents)
        role = "tool" if tool_only else rng.choice(["assistant", "user"])
        history.append(Message(role=role, contents=contents, author_name=author))
    return history


@pytest.mark.parametrize("mode", list(HandoffToolCallFiltering), ids=lambda m: m.value)
def test_every_view_of_any_history_is_valid_provider_input(mode: HandoffToolCallFiltering) -> None:
    """Whatever history the caller passed in, read at once or message by message."""
    rng = random.Random(20261202)  # noqa: S311 - test data, not secrets
    tools = frozenset({"handoff_to_a", "handoff_to_b"})
    for _ in range(400):
        history = _random_history(rng)
        for viewer in ("a", "b"):
            whole = AgentView(viewer, mode, tools, "handoff_host").update(history)
            assert provider_problems(whole) == [], (viewer, history)
            stepwise = AgentView(viewer, mode, tools, "handoff_host")
            for end in range(1, len(history) + 1):
                assert provider_problems(stepwise.update(history[:end])) == [], (viewer, end)
            assert [m.text for m in stepwise.update(history)] == [m.text for m in whole]
