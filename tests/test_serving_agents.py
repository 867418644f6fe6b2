"""Which agent answered, and what routed the turn, as each way of serving shows it.

``host.as_agent()``'s stream: each update's ``author_name``, and an update for each routing
event (``ROUTING_EVENT_PROPERTY``). AG-UI (``agui_agent``): a step per agent, the agent's name
on its messages, a CUSTOM event per routing event, over HTTP. DevUI (``devui_agent``): text
labels, checked here in the stream and over HTTP in ``test_serving.py``; in a real browser in
``test_devui_browser.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, AgentResponseUpdate, AgentSession, Message

from handoff_builder import (
    ROUTING_EVENT_PROPERTY,
    ConversationHost,
    HandoffWorkflowBuilder,
    devui_agent,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import handoff_to, reply, respond, scripted_agent
from tests.serving_app import desk
from tests.serving_http import Serve, agui_body, agui_user, post, sse

HANDOFF = {
    "source": "triage",
    "target": "billing",
    "goal": "Help.",
    "tool_name": "handoff_to_billing",
    "call_id": "call_1",
    "kind": "handoff",
    "payload": None,
    "decided_by": "model",
}


def seen(updates: list[AgentResponseUpdate]) -> list[tuple[Any, ...]]:
    """Each update as (author, content types, text), or (author, routing event) for a step.

    Call ids are numbered from 1 in order of appearance (the scripted ids run on in a process).
    """
    ids: dict[str, str] = {}

    def number(call_id: Any) -> Any:
        return ids.setdefault(call_id, f"call_{len(ids) + 1}") if call_id else call_id

    out: list[tuple[Any, ...]] = []
    for update in updates:
        routing = (update.additional_properties or {}).get(ROUTING_EVENT_PROPERTY)
        if routing is not None:
            data = {**routing["data"], "call_id": number(routing["data"]["call_id"])}
            out.append((update.author_name, {**routing, "data": data}))
        else:
            contents = [(c.type, number(c.call_id)) for c in update.contents]
            out.append((update.author_name, contents, update.text))
    return out


async def test_a_streamed_turn_names_each_agent_and_carries_each_handoff(tmp_path: Path) -> None:
    agent = desk(str(tmp_path / "c.db")).as_agent(name="desk")
    alice = AgentSession(session_id="alice")
    first = Message(role="user", contents=["charged twice"], message_id="u1")
    stream = agent.run([first], session=alice, stream=True)
    updates = [update async for update in stream]
    assert seen(updates) == [
        ("triage", [("function_call", "call_1")], ""),
        ("triage", [("function_result", "call_1")], ""),
        ("triage", {"type": "handoff_sent", "data": HANDOFF}),
        ("billing", [("text", None)], "billing read: charged twice"),
    ]
    assert (await stream.get_final_response()).text == "billing read: charged twice"

    # The run sent again (a client that lost the end of the stream): read back, the same.
    resent = agent.run([first], session=alice, stream=True)
    assert seen([update async for update in resent]) == seen(updates)


async def test_devui_agent_labels_each_agents_text_and_each_routing_step() -> None:
    """A refused handoff, text and a handoff, the next agent: each one labelled."""
    triage = scripted_agent(
        "triage",
        handoff_to("nobody", goal="?"),
        respond("Passing you on.", handoff_to("billing", goal="Refund the charge.")),
    )
    billing = scripted_agent("billing", reply("Refunded."))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = ConversationHost(builder, InMemoryConversationStore())
    agent = devui_agent(host.as_agent())
    stream = agent.run("charged twice", session=AgentSession(session_id="c"), stream=True)
    text = "".join([update.text async for update in stream])
    # The host tells the routing when the agent's run ends: the refused call, then the handoff.
    assert text == (
        "**triage:** Passing you on.\n\n"
        "> blocked handoff from `triage` via `handoff_to_nobody` (unknown_target)\n\n"
        "> handoff `triage` → `billing`: Refund the charge.\n\n"
        "**billing:** Refunded."
    )
    # Only the stream is labelled: the reply and what is stored are the agents' own words.
    final = await stream.get_final_response()
    assert [m.text for m in final.messages if m.text] == ["Passing you on.", "Refunded."]
    stored = [m.text for m in await host.history("c") if m.role == "assistant" and m.text]
    assert stored == ["Passing you on.", "Refunded."]


def route_desk() -> tuple[ConversationHost, Agent, Agent]:
    """triage answers, then code routes the turn to billing (no tool call between them)."""
    triage = scripted_agent("triage", reply("Let me see."))
    billing = scripted_agent("billing", reply("Refunded."))
    builder = HandoffWorkflowBuilder(triage).with_route(triage, billing)
    return ConversationHost(builder, InMemoryConversationStore()), triage, billing


async def test_devui_agent_labels_a_route_between_two_agents_texts() -> None:
    host, _, _ = route_desk()
    agent = devui_agent(host.as_agent())
    stream = agent.run("refund me", session=AgentSession(session_id="c"), stream=True)
    assert "".join([update.text async for update in stream]) == (
        "**triage:** Let me see.\n\n> route `triage` → `billing`\n\n**billing:** Refunded."
    )


# -- AG-UI ---------------------------------------------------------------------------------------


def shown(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each AG-UI event as its type and what names it (a step, a message's agent, a tool)."""
    out: list[tuple[Any, ...]] = []
    for event in events:
        kind = event["type"]
        if kind in ("STEP_STARTED", "STEP_FINISHED"):
            out.append((kind, event["stepName"]))
        elif kind == "TEXT_MESSAGE_START":
            out.append((kind, event.get("name")))
        elif kind == "TOOL_CALL_START":
            out.append((kind, event["toolCallName"]))
        elif kind == "CUSTOM":
            out.append((kind, event["name"], event["value"]))
        else:
            out.append((kind,))
    return out


def snapshot_names(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    [snapshot] = [e["messages"] for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    return [(m["role"], m.get("name")) for m in snapshot]


def test_agui_names_the_agent_of_each_reply_and_each_handoff_over_http(serve: Serve) -> None:
    base = serve("agui")
    first = [agui_user("charged twice", 1)]
    events = sse(post(f"{base}/desk", agui_body("t", first)))
    assert shown(events) == [
        ("RUN_STARTED",),
        ("STEP_STARTED", "triage"),
        ("TEXT_MESSAGE_START", "triage"),
        ("TOOL_CALL_START", "handoff_to_billing"),
        ("TOOL_CALL_ARGS",),
        ("TOOL_CALL_END",),
        ("TOOL_CALL_RESULT",),
        ("TEXT_MESSAGE_END",),
        ("CUSTOM", "handoff_sent", HANDOFF),
        ("STEP_FINISHED", "triage"),
        ("STEP_STARTED", "billing"),
        ("TEXT_MESSAGE_START", "billing"),
        ("TEXT_MESSAGE_CONTENT",),
        ("TEXT_MESSAGE_END",),
        ("STEP_FINISHED", "billing"),
        ("MESSAGES_SNAPSHOT",),
        ("RUN_FINISHED",),
    ]
    names = [("user", None), ("assistant", "triage"), ("tool", None), ("assistant", "billing")]
    assert snapshot_names(events) == names

    # The same run sent again is read back from the store, with the same names and handoff.
    again = sse(post(f"{base}/desk", agui_body("t", first)))
    assert shown(again) == shown(events)

    # The next message starts at billing: its step, its name, no handoff.
    [snapshot] = [e["messages"] for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    later = sse(post(f"{base}/desk", agui_body("t", [*snapshot, agui_user("and now?", 2)])))
    assert shown(later) == [
        ("RUN_STARTED",),
        ("STEP_STARTED", "billing"),
        ("TEXT_MESSAGE_START", "billing"),
        ("TEXT_MESSAGE_CONTENT",),
        ("TEXT_MESSAGE_END",),
        ("STEP_FINISHED", "billing"),
        ("MESSAGES_SNAPSHOT",),
        ("RUN_FINISHED",),
    ]
    assert snapshot_names(later)[-1] == ("assistant", "billing")


def test_agui_gives_two_agents_text_that_a_route_runs_together_a_message_each() -> None:
    """AG-UI alone would send triage's and billing's text as one message (no tool call ends
    triage's): each gets its own, named, in the stream and in the snapshot."""
    pytest.importorskip("agent_framework_ag_ui", reason="install handoff-builder[serve]")
    from agent_framework_ag_ui import add_agent_framework_fastapi_endpoint
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from handoff_builder import agui_agent

    host, _, _ = route_desk()
    app = FastAPI()
    add_agent_framework_fastapi_endpoint(
        app,
        agui_agent(host.as_agent(name="desk")),
        "/desk",
        authorization_scope_resolver=lambda: "t",
    )
    response = TestClient(app).post("/desk", json=agui_body("t", [agui_user("refund me", 1)]))
    events = sse(response.content)
    route = {
        "source": "triage",
        "target": "billing",
        "goal": "",
        "tool_name": "route:billing",
        "call_id": "",
        "kind": "handoff",
        "payload": None,
        "decided_by": "code",
    }
    assert shown(events) == [
        ("RUN_STARTED",),
        ("STEP_STARTED", "triage"),
        ("TEXT_MESSAGE_START", "triage"),
        ("TEXT_MESSAGE_CONTENT",),
        ("TEXT_MESSAGE_END",),
        ("CUSTOM", "handoff_sent", route),
        ("STEP_FINISHED", "triage"),
        ("STEP_STARTED", "billing"),
        ("TEXT_MESSAGE_START", "billing"),
        ("TEXT_MESSAGE_CONTENT",),
        ("TEXT_MESSAGE_END",),
        ("STEP_FINISHED", "billing"),
        ("MESSAGES_SNAPSHOT",),
        ("RUN_FINISHED",),
    ]
    messages = [e for e in events if e["type"].startswith("TEXT_MESSAGE")]
    ids = [e["messageId"] for e in messages]
    assert ids[0] == ids[1] == ids[2] != ids[3] == ids[4] == ids[5]  # two messages
    assert [e.get("delta") for e in messages if "delta" in e] == ["Let me see.", "Refunded."]
    [snapshot] = [e["messages"] for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    assert [(m["id"], m.get("name"), m.get("content")) for m in snapshot[1:]] == [
        (ids[0], "triage", "Let me see."),
        (ids[3], "billing", "Refunded."),
    ]
