"""ConversationHost.as_agent served by agent_framework's own hosting, over HTTP on 127.0.0.1.

Each test starts a server process (``tests/serving_app.py``): DevUI's OpenAI-compatible API, or
the AG-UI endpoint. Two conversations must not see each other's messages, and the second message
of each must start at its remembered agent (billing), not at triage again.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from pathlib import Path
from typing import Any

import pytest
from agent_framework import AgentSession

from handoff_builder import ConversationHost, HandoffTurnResult, InvalidMessageError
from tests.serving_app import HANG, TOKEN, desk, desk_agents
from tests.serving_http import Serve, agui_body, get, post, post_refused, sse
from tests.serving_http import agui_user as user

# -- in-process ----------------------------------------------------------------------------------


async def test_a_session_is_a_conversation(tmp_path: Path) -> None:
    agent = desk(str(tmp_path / "c.db")).as_agent(name="desk")
    alice, bob = agent.create_session(session_id="alice"), agent.create_session(session_id="bob")

    first = await agent.run("secret account 123", session=alice)
    assert isinstance(first, HandoffTurnResult)
    assert first.text == "billing read: secret account 123"
    assert (await agent.run("hello", session=bob)).text == "billing read: hello"

    again = await agent.run("second", session=alice)
    assert isinstance(again, HandoffTurnResult)
    assert again.text == "billing read: secret account 123 | second"
    assert again.trace[0].target == "billing"  # the remembered agent, not triage
    stream = agent.run("again", session=bob, stream=True)
    updates = [update async for update in stream]
    final = await stream.get_final_response()
    assert isinstance(final, HandoffTurnResult)
    assert final.text == "billing read: hello | again"  # nothing of Alice's
    assert "billing read: hello | again" in [u.text for u in updates]


async def test_a_resent_transcript_adds_only_the_new_message(tmp_path: Path) -> None:
    """A client that resends the conversation (as AG-UI does) adds its last message only."""
    agent = desk(str(tmp_path / "c.db")).as_agent(name="desk")
    alice = AgentSession(session_id="alice")
    first = await agent.run("secret account 123", session=alice)
    resent = [*first.conversation, "second"]
    again = await agent.run(resent, session=alice)
    assert again.text == "billing read: secret account 123 | second"


async def test_a_turn_that_waits_returns_its_requests_and_takes_the_answers(
    tmp_path: Path,
) -> None:
    from agent_framework import Message, tool

    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.stores import SqliteConversationStore
    from handoff_builder.testing import call_tool, reply, scripted_agent

    paid: list[int] = []

    @tool(name="refund", description="Refund.", approval_mode="always_require")
    def refund(amount: int) -> str:
        paid.append(amount)
        return f"refunded {amount}"

    billing = scripted_agent(
        "billing", call_tool("refund", amount=5), reply("Refunded 5 EUR."), tools=[refund]
    )
    host = ConversationHost(
        HandoffWorkflowBuilder(billing), SqliteConversationStore(tmp_path / "c.db")
    )
    agent = host.as_agent(name="billing")
    session = agent.create_session(session_id="c")
    waiting = await agent.run("refund me", session=session)
    [request] = waiting.user_input_requests
    assert request.type == "function_approval_request"
    # A new agent on the same store (a restart) takes the answer.
    agent = ConversationHost(host.builder, SqliteConversationStore(tmp_path / "c.db")).as_agent()
    answer = Message(role="user", contents=[request.to_function_approval_response(approved=True)])
    done = await agent.run(answer, session=session)
    assert done.text == "Refunded 5 EUR."
    assert paid == [5]


# -- DevUI ---------------------------------------------------------------------------------------


HANDED_OFF = "> handoff `triage` → `billing`: Help.\n\n"  # the handoff, as DevUI's text shows it


def devui_turn(base: str, entity: str, conversation: str, text: str, *, stream: bool) -> str:
    body = {
        "metadata": {"entity_id": entity},
        "input": text,
        "conversation": conversation,
        "stream": stream,
    }
    raw = post(f"{base}/v1/responses", body, token=TOKEN)
    if not stream:
        output = json.loads(raw)["output"]
    else:
        [done] = [e for e in sse(raw) if e.get("type") == "response.completed"]
        output = done["response"]["output"]
    texts = [
        part["text"]
        for item in output
        if item.get("type") == "message"
        for part in item["content"]
        if part.get("type") == "output_text"
    ]
    calls = [item["name"] for item in output if item.get("type") == "function_call"]
    return " / ".join(texts) + (f" [{', '.join(calls)}]" if calls else "")


def test_devui_serves_isolated_conversations_that_remember_their_agent(serve: Serve) -> None:
    base = serve("devui")
    [entity] = get(f"{base}/v1/entities", token=TOKEN)["entities"]
    assert (entity["name"], entity["type"]) == ("desk", "agent")
    body = {"metadata": {"agent_id": entity["id"]}}
    alice = json.loads(post(f"{base}/v1/conversations", body, token=TOKEN))["id"]
    bob = json.loads(post(f"{base}/v1/conversations", body, token=TOKEN))["id"]

    turn = devui_turn
    e = entity["id"]
    # Each reply says which agent wrote it, and the handoff is a line of its own.
    assert turn(base, e, alice, "secret account 123", stream=False) == (
        f"{HANDED_OFF}**billing:** billing read: secret account 123 [handoff_to_billing]"
    )
    assert turn(base, e, bob, "hello", stream=True) == (
        f"{HANDED_OFF}**billing:** billing read: hello [handoff_to_billing]"
    )
    # The second message of each starts at billing (no handoff), and sees only its own.
    assert turn(base, e, alice, "second", stream=True) == (
        "**billing:** billing read: secret account 123 | second"
    )
    assert turn(base, e, bob, "again", stream=False) == "**billing:** billing read: hello | again"


def test_devui_serves_a_message_with_a_lone_surrogate_and_the_runs_after_it(serve: Serve) -> None:
    """The message is stored with U+FFFD for the surrogate; the replies that echo it encode."""
    base = serve("devui")
    [entity] = get(f"{base}/v1/entities", token=TOKEN)["entities"]
    body = {"metadata": {"agent_id": entity["id"]}}
    alice = json.loads(post(f"{base}/v1/conversations", body, token=TOKEN))["id"]
    said = devui_turn(base, entity["id"], alice, "bad \ud800 text", stream=False)
    assert said == f"{HANDED_OFF}**billing:** billing read: bad \ufffd text [handoff_to_billing]"
    said = devui_turn(base, entity["id"], alice, "next", stream=True)
    assert said == "**billing:** billing read: bad \ufffd text | next"


# -- AG-UI ---------------------------------------------------------------------------------------


def agui_turn(base: str, thread: str, messages: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    events = sse(post(f"{base}/desk", agui_body(thread, messages)))
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    calls = [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"]
    [snapshot] = [e["messages"] for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    return text + (f" [{', '.join(calls)}]" if calls else ""), snapshot


def agui_hang_up(base: str, thread: str, messages: list[dict[str, Any]], at: str) -> list[str]:
    """Start a run, read its events up to the first of type ``at``, then close the connection:
    a client that drops mid-stream. The types of the events it read."""
    port = int(base.rsplit(":", 1)[1])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    connection.request("POST", "/desk", json.dumps(agui_body(thread, messages)), headers)
    response = connection.getresponse()
    assert response.status == 200
    seen: list[str] = []
    while not seen or seen[-1] != at:
        line = response.readline()
        assert line, f"the stream ended before a {at} event: {seen}"
        if line.startswith(b"data: "):
            seen.append(json.loads(line[len(b"data: ") :])["type"])
    connection.close()
    return seen


def model_calls(base: str) -> dict[str, list[str]]:
    """Each agent's model calls in the server so far, as the user text each one saw."""
    return dict(get(f"{base}/calls"))


async def stored_user_messages(path: Path) -> list[str]:
    host = desk(str(path))
    [conversation] = await host.conversations()
    return [
        m.text for m in await host.history(conversation) if m.role == "user" and not m.author_name
    ]


def test_agui_serves_isolated_threads_that_remember_their_agent_after_a_restart(
    serve: Serve,
) -> None:
    base = serve("agui")
    said, alice = agui_turn(base, "alice", [user("secret account 123", 1)])
    assert said == "billing read: secret account 123 [handoff_to_billing]"
    said, bob = agui_turn(base, "bob", [user("hello", 1)])
    assert said == "billing read: hello [handoff_to_billing]"
    # The client resends its transcript with the new message, as AG-UI clients do.
    said, _ = agui_turn(base, "alice", [*alice, user("second", 2)])
    assert said == "billing read: secret account 123 | second"

    again = serve("agui")  # another server process on the same store: a restart
    said, _ = agui_turn(again, "bob", [*bob, user("again", 2)])
    assert said == "billing read: hello | again"


def test_agui_a_client_that_drops_and_resends_gets_each_message_stored_and_answered_once(
    serve: Serve, tmp_path: Path
) -> None:
    """The client drops mid-stream and sends its transcript again: the interrupted turn is
    finished, not run again; a finished turn sent again is read back, with no model call."""
    base = serve("agui")
    first = user(f"refund me {HANG}", 1)
    # triage hands off; billing's model hangs; the client drops the connection.
    cut = agui_hang_up(base, "t", [first], at="TOOL_CALL_RESULT")
    assert cut[0] == "RUN_STARTED"
    said, transcript = agui_turn(base, "t", [first])  # the client sends its transcript again
    assert said == f"billing read: refund me {HANG} [handoff_to_billing]"
    calls = {"triage": [first["content"]], "billing": [first["content"]] * 2}  # hung, finished
    assert model_calls(base) == calls
    assert asyncio.run(stored_user_messages(tmp_path / "c.db")) == [first["content"]]

    second = [*transcript, user("second", 2)]
    said, _ = agui_turn(base, "t", second)
    assert said == f"billing read: refund me {HANG} | second"
    calls["billing"].append("second")
    # The client lost the end of that run, and sends the same transcript again.
    again, snapshot = agui_turn(base, "t", second)
    assert again == said
    assert [m["content"] for m in snapshot if m["role"] == "user"] == [first["content"], "second"]
    assert model_calls(base) == calls  # read back: no model was called
    assert asyncio.run(stored_user_messages(tmp_path / "c.db")) == [first["content"], "second"]


def test_agui_refuses_a_malformed_run_with_422_naming_what_was_wrong(serve: Serve) -> None:
    base = serve("agui")
    roles = "user, assistant, system, developer, tool, reasoning, activity"
    user_content = "a user message's content is text, or a list of content parts"
    system_content = "a system message's content is text"
    refused: list[tuple[dict[str, Any], str]] = [
        ({"role": "user", "content": 5}, f"content is a number (5); {user_content}"),
        ({"role": "user", "content": None}, f"content is null; {user_content}"),
        ({"role": "user", "content": {"a": 1}}, f"content is an object; {user_content}"),
        ({"role": "user"}, f"content is missing; {user_content}"),
        ({"content": "hi"}, f"role is missing; give it one of {roles}"),
        (
            {"role": "wizard", "content": "hi"},
            f"role is a string ('wizard'); a message's role is one of {roles}",
        ),
        (
            {"role": "user", "content": "bad \ud800 text"},
            "content has a lone surrogate (U+D800) at character 4; send valid Unicode text",
        ),
        (
            {"role": "user", "content": [{"type": "text", "text": 7}]},
            "content part #0 is a text part whose text is not text",
        ),
        ({"role": "system", "content": 5}, f"content is a number (5); {system_content}"),
        (
            {"role": "tool", "content": "ok"},
            "toolCallId is missing or not text; name the tool call it answers",
        ),
    ]
    for fields, problem in refused:
        status, body = post_refused(f"{base}/desk", agui_body("t", [{"id": "m1", **fields}]))
        detail = f"Invalid AG-UI run: message #0 (id 'm1'): {problem}."
        assert (status, body) == (422, {"detail": detail}), fields
    status, body = post_refused(f"{base}/desk", agui_body("t", []))
    assert (status, body["detail"]) == (
        422,
        "Invalid AG-UI run: messages is empty; send the conversation, the new user message last.",
    )
    status, body = post_refused(f"{base}/desk", agui_body("t", [5, {"id": 7, "role": "user"}]))
    assert (status, body["detail"]) == (
        422,
        "Invalid AG-UI run (2 problems):\n"
        "  - message #0 is a number (5), not a message object\n"
        "  - message #1: id is a number (7); a message's id is a string",
    )
    status, body = post_refused(f"{base}/desk", agui_body("t\udc00", [user("hi", 1)]))
    assert body["detail"] == (
        "Invalid AG-UI run: threadId has a lone surrogate (U+DC00) at character 1; send valid "
        "Unicode text."
    )
    assert model_calls(base) == {"triage": [], "billing": []}  # nothing ran


def test_agui_a_thread_that_holds_a_lone_surrogate_serves_its_later_runs(
    serve: Serve, tmp_path: Path
) -> None:
    base = serve("agui")
    _, transcript = agui_turn(base, "t", [user("hello", 1)])

    async def store_as_received() -> None:  # as this agent stored an AG-UI message before
        host = desk(str(tmp_path / "c.db"))
        [conversation] = await host.conversations()
        await host.send(conversation, "bad \ud800 text")

    asyncio.run(store_as_received())
    said, _ = agui_turn(base, "t", [*transcript, user("next", 3)])
    assert said == "billing read: hello | bad \ufffd text | next"
    said, _ = agui_turn(base, "t", [*transcript, user("next", 3), user("again", 4)])
    assert said == "billing read: hello | bad \ufffd text | next | again"


def refund_desk(path: Path) -> tuple[ConversationHost, list[int]]:
    """billing alone, with a refund tool that needs approval and an external lookup."""
    from agent_framework import FunctionTool, tool

    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.stores import SqliteConversationStore
    from handoff_builder.testing import ModelCall, Step, call_tool, reply, scripted_agent

    paid: list[int] = []

    @tool(name="refund", description="Refund.", approval_mode="always_require")
    def refund(amount: int) -> str:
        paid.append(amount)
        return f"refunded {amount}"

    lookup = FunctionTool(
        name="lookup",
        description="Asked of the application.",
        input_model={"type": "object", "properties": {"order": {"type": "string"}}},
    )

    def billing_answer(call: ModelCall) -> Step:
        last = call.messages[-1]
        if last.role == "tool":
            return reply(f"done: {last.contents[0].result}")
        if "look" in call.user_text:
            return call_tool("lookup", order="A-1")
        return call_tool("refund", amount=5)

    billing = scripted_agent("billing", respond_with=billing_answer, tools=[refund, lookup])
    host = ConversationHost(HandoffWorkflowBuilder(billing), SqliteConversationStore(path))
    return host, paid


async def test_an_answered_turn_returns_what_came_after_the_answers(tmp_path: Path) -> None:
    from agent_framework import Message

    host, paid = refund_desk(tmp_path / "c.db")
    agent = host.as_agent(name="billing")
    session = agent.create_session(session_id="c")
    [request] = (await agent.run("refund me", session=session)).user_input_requests
    # A new message while it waits gets the same request again, streamed or not.
    again = await agent.run("hello?", session=session)
    assert [r.id for r in again.user_input_requests] == [request.id]
    stream = agent.run("hello?", session=session, stream=True)
    _ = [update async for update in stream]
    assert [r.id for r in (await stream.get_final_response()).user_input_requests] == [request.id]
    answer = Message(role="user", contents=[request.to_function_approval_response(approved=True)])
    done = await agent.run(answer, session=session)
    assert done.user_input_requests == []  # nothing is asked again
    assert [m.text for m in done.messages] == ["done: refunded 5"]
    assert paid == [5]


async def test_an_external_call_is_answered_by_a_tool_message(tmp_path: Path) -> None:
    from agent_framework import Content, Message

    host, _ = refund_desk(tmp_path / "c.db")
    agent = host.as_agent(name="billing")
    session = agent.create_session(session_id="c")
    stream = agent.run("look it up", session=session, stream=True)
    updates = [update async for update in stream]
    waiting = await stream.get_final_response()
    [request] = waiting.user_input_requests
    asked = [c for u in updates for c in u.contents if c.user_input_request]
    assert len(asked) == 1  # the request comes once
    result = Content.from_function_result(call_id=str(request.call_id), result="paid on 3 March")
    done = await agent.run(Message(role="tool", contents=[result]), session=session)
    assert done.text == "done: paid on 3 March"


async def test_a_wrong_answer_is_refused_and_not_counted_as_a_failure(tmp_path: Path) -> None:
    from agent_framework import Content

    from handoff_builder import PendingRequestsError, UnexpectedAnswersError

    host, _ = refund_desk(tmp_path / "c.db")
    with pytest.raises(PendingRequestsError):
        await host.send("c", "refund me")
    wrong = Content.from_function_result(call_id="nope", result="?")
    with pytest.raises(UnexpectedAnswersError, match="waits for no request with id 'nope'"):
        await host.respond("c", {"nope": wrong})
    record = await host.store.load("c")
    assert record is not None
    assert record.state.get("failures", 0) == 0
    assert len(await host.pending("c")) == 1


async def test_a_resent_transcript_after_a_failed_turn_stores_the_message_once(
    tmp_path: Path,
) -> None:
    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.stores import SqliteConversationStore
    from handoff_builder.testing import ModelCall, Step, reply, scripted_agent

    fail = [True]

    def answer(call: ModelCall) -> Step:
        if fail[0]:
            fail[0] = False
            raise RuntimeError("the model is down")
        users = [m.text for m in call.messages if m.role == "user"]
        return reply(" | ".join(users))

    agent_ = scripted_agent("billing", respond_with=answer)
    host = ConversationHost(
        HandoffWorkflowBuilder(agent_), SqliteConversationStore(tmp_path / "c.db")
    )
    agent = host.as_agent()
    session = agent.create_session(session_id="c")
    with pytest.raises(RuntimeError):
        await agent.run("first", session=session)
    done = await agent.run(["first", "second"], session=session)  # the client resends
    assert [m.text for m in await host.history("c") if m.role == "user"] == ["first", "second"]
    assert done.text == "first | second"


async def test_an_answered_turn_after_a_handoff_and_text_returns_only_what_is_new(
    tmp_path: Path,
) -> None:
    """The turn's messages start with a handoff (its tool result) and the asking response has
    text: the answered run returns neither again."""
    from agent_framework import Message, tool

    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.stores import SqliteConversationStore
    from handoff_builder.testing import call_tool, handoff_to, reply, respond, scripted_agent

    @tool(name="refund", description="Refund.", approval_mode="always_require")
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR."))
    billing = scripted_agent(
        "billing",
        respond("Let me refund that.", call_tool("refund", amount=5)),
        reply("Refund done."),
        tools=[refund],
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = ConversationHost(builder, SqliteConversationStore(tmp_path / "c.db"))
    agent = host.as_agent()
    session = agent.create_session(session_id="c")
    asked = await agent.run("refund me", session=session)
    [request] = asked.user_input_requests
    assert "Let me refund that." in [m.text for m in asked.messages]
    answer = Message(role="user", contents=[request.to_function_approval_response(approved=True)])
    done = await agent.run(answer, session=session)
    assert [m.text for m in done.messages] == ["Refund done."]
    assert not [c for m in done.messages for c in m.contents if c.type != "text"]


async def test_text_is_made_valid_unicode_on_the_way_in_and_on_the_way_out(tmp_path: Path) -> None:
    from handoff_builder.testing import client_of

    triage, billing = desk_agents()
    host = desk(str(tmp_path / "c.db"), (triage, billing))
    agent = host.as_agent()
    session = agent.create_session(session_id="c")
    first = await agent.run("bad \ud800 text", session=session)
    assert first.text == "billing read: bad \ufffd text"
    assert client_of(billing).calls[-1].user_text == "bad \ufffd text"  # what the model got
    # A message stored as it was received (by host.send, or by this agent before): what the
    # agent hands on is valid all the same, streamed or not.
    await host.send("c", "raw \udc00")
    stream = agent.run("next", session=session, stream=True)
    updates = [update async for update in stream]
    final = await stream.get_final_response()
    said = "billing read: bad \ufffd text | raw \ufffd | next"
    assert [u.text for u in updates if u.text] == [said]
    assert final.text == said
    history = await host.history("c")
    assert [m.text for m in history if m.role == "user" and not m.author_name] == [
        "bad \ufffd text",
        "raw \udc00",
        "next",
    ]


async def test_a_transcript_without_ids_sent_again_is_read_back_not_run_again(
    tmp_path: Path,
) -> None:
    """Without message ids, a transcript's user messages are matched by position and text."""
    from handoff_builder.testing import client_of

    triage, billing = desk_agents()
    host = desk(str(tmp_path / "c.db"), (triage, billing))
    agent = host.as_agent()
    session = agent.create_session(session_id="c")
    first = await agent.run(["hello"], session=session)
    again = await agent.run(["hello"], session=session)  # the same transcript
    assert again.text == first.text == "billing read: hello"
    assert len(client_of(billing).calls) == 1
    # The transcript as stored, and a new message: only that one runs.
    more = await agent.run([*first.conversation, "more"], session=session)
    assert more.text == "billing read: hello | more"
    # Text is always a new message, even the same words again.
    assert (await agent.run("more", session=session)).text == "billing read: hello | more | more"
    history = await host.history("c")
    assert [m.text for m in history if m.role == "user" and not m.author_name] == [
        "hello",
        "more",
        "more",
    ]


async def test_two_copies_of_a_run_at_once_run_once(tmp_path: Path) -> None:
    """A client that sends its run again while the first copy still runs: one turn, one reply."""
    from agent_framework import Message

    from handoff_builder.testing import client_of

    triage, billing = desk_agents()
    host = desk(str(tmp_path / "c.db"), (triage, billing))
    agent = host.as_agent()
    session = agent.create_session(session_id="c")
    hello = Message(role="user", contents=["hello"], message_id="m1")

    async def ran() -> str:
        response = await agent.run([hello], session=session)
        return response.text

    async def streamed() -> str:
        stream = agent.run([hello], session=session, stream=True)
        texts = [update.text async for update in stream if update.text]
        assert (await stream.get_final_response()).text == texts[-1]
        return texts[-1]

    assert await asyncio.gather(ran(), streamed()) == ["billing read: hello"] * 2
    assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (1, 1)
    history = await host.history("c")
    assert [m.text for m in history if m.role == "user" and not m.author_name] == ["hello"]


async def test_a_run_given_no_valid_message_is_refused_with_what_was_wrong(
    tmp_path: Path,
) -> None:
    from agent_framework import Message

    host = desk(str(tmp_path / "c.db"))
    agent = host.as_agent()
    session = agent.create_session(session_id="c")
    takes = "A run takes text, a Message or a Content, or a list of them"
    roles = "'user', 'assistant', 'system' or 'tool'"
    no_new = (
        "A run needs a new user message after the conversation's last reply (or answers to the "
        "requests the conversation waits for); send the user's message last."
    )
    refused: list[tuple[Any, str]] = [
        (5, f"{takes}; got int 5."),
        (["hi", 5.5], f"{takes}; item #1 is float 5.5."),
        ({"role": "user"}, f"{takes}; got dict {{'role': 'user'}}."),
        (
            Message(role="wizard", contents=["hi"]),
            f"The message has the role 'wizard'; a run takes messages with the roles {roles}.",
        ),
        ([], no_new),
        (["hi", Message(role="assistant", contents=["hello"])], no_new),
    ]
    for value, problem in refused:
        with pytest.raises(InvalidMessageError) as error:
            await agent.run(value, session=session)
        assert str(error.value) == problem
    assert await host.history("c") == []


async def test_a_resent_transcript_finishes_the_open_turn_it_started_before_keys(
    tmp_path: Path,
) -> None:
    """A turn sent without an idempotency key (by host.send, or by this agent before it kept
    them) is finished, not run again, when its transcript comes again."""
    from agent_framework import Message

    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.stores import SqliteConversationStore
    from handoff_builder.testing import ModelCall, Step, client_of, reply, scripted_agent

    down = [True]

    def answer(call: ModelCall) -> Step:
        if down.pop() if down else False:
            raise RuntimeError("the model is down")
        return reply(f"answered: {call.user_text}")

    billing = scripted_agent("billing", respond_with=answer)
    store = SqliteConversationStore(tmp_path / "c.db")
    host = ConversationHost(HandoffWorkflowBuilder(billing), store)
    hello = Message(role="user", contents=["hello"], message_id="m1")
    with pytest.raises(RuntimeError, match="the model is down"):
        await host.send("c", hello)
    done = await host.as_agent().run([hello], session=AgentSession(session_id="c"))
    assert done.text == "answered: hello"
    assert len(client_of(billing).calls) == 2
    assert [m.text for m in await host.history("c") if m.role == "user"] == ["hello"]


async def test_a_reader_that_stops_frees_the_conversation_when_it_closes_the_stream() -> None:
    """Closing the stream mid-turn closes the host's stream under it and gives the lease back
    there and then: the next message (that does not wait) finishes the turn and runs."""
    from handoff_builder import HandoffWorkflowBuilder
    from handoff_builder.stores import InMemoryConversationStore
    from handoff_builder.testing import handoff_to, never_answer, reply, scripted_agent

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing", never_answer(), reply("Refunded."), reply("Anything else?"))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = ConversationHost(builder, InMemoryConversationStore())
    agent = host.as_agent()
    stream = agent.run("refund me", session=agent.create_session(session_id="c"), stream=True)
    async for update in stream:  # triage's handoff; billing's model then hangs
        assert update.contents[0].type == "function_call"
        break
    await stream.close()
    after = await host.send("c", "thanks")
    assert after.recovered is not None
    assert (after.recovered.text, after.text) == ("Refunded.", "Anything else?")


def test_agui_refuses_a_new_message_over_the_size_limit_with_413(serve: Serve) -> None:
    base = serve("agui")
    huge = "x" * (5 * 1024 * 1024)
    status, body = post_refused(f"{base}/desk", agui_body("big", [user(huge, 1)]))
    assert status == 413
    assert body["detail"].startswith("The new message is 5,242,")
    assert body["detail"].endswith(
        "bytes as JSON; the limit is 4,194,304 bytes (max_input_bytes). Nothing was stored."
    )
    assert model_calls(base) == {"triage": [], "billing": []}
    # A long conversation resent whole is fine: only its new message counts.
    history = [user("y" * (3 * 1024 * 1024), 1), {"id": "a1", "role": "assistant", "content": "ok"}]
    events = sse(post(f"{base}/desk", agui_body("long", [*history, user("hi", 2)])))
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]


def test_the_size_limit_of_an_agui_check_is_the_hosts() -> None:
    pytest.importorskip("fastapi", reason="install handoff-builder[serve] (FastAPI)")
    from fastapi import Depends, FastAPI
    from fastapi.testclient import TestClient

    from handoff_builder import agui_request_check

    app = FastAPI()

    @app.post("/run", dependencies=[Depends(agui_request_check(max_input_bytes=100))])
    def run() -> dict[str, str]:
        return {"ran": "yes"}

    client = TestClient(app)
    small = client.post("/run", json=agui_body("t", [user("hello", 1)]))
    assert (small.status_code, small.json()) == (200, {"ran": "yes"})
    large = client.post("/run", json=agui_body("t", [user("z" * 200, 1)]))
    assert large.status_code == 413
    assert "the limit is 100 bytes" in large.json()["detail"]
