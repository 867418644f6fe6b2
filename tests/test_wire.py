"""The real wire path: agent_framework's OpenAI clients against a local OpenAI-compatible server.

The server (tests/fake_openai.py, started here on 127.0.0.1) answers Chat Completions and
Responses requests from a script and keeps every request body, so the tests check what a provider
receives: the handoff tool schemas, the goal in the request of the agent a conversation is handed
to, a hand-back's summary in the coordinator's request, in every filtering mode, and that every
request is one a provider accepts. Every test runs with both of agent_framework's clients:
``OpenAIChatCompletionClient`` (``/v1/chat/completions``) and ``OpenAIChatClient``
(``/v1/responses``); a Responses body is checked for what only it can get wrong, then read as the
chat-completions body it stands for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agent_framework import Agent, FunctionTool, Message, tool
from pydantic import BaseModel, ConfigDict, Field

from handoff_builder import (
    DEFAULT_HANDOFF_INSTRUCTIONS,
    HANDOFF_TURN_EVENT,
    HandoffToolCallFiltering,
    HandoffWorkflowBuilder,
    decline,
)
from handoff_builder.providers import chat_client
from tests.fake_openai import APIS, Api, FakeOpenAI, text, tool_call

StartServer = Callable[[list[dict[str, Any]]], FakeOpenAI]

STRICT_SENT: dict[Api, bool] = {"chat_completions": True, "responses": False}
"""Whether a tool whose schema allows it goes out ``"strict": true``: agent_framework's Responses
client sends every function tool with ``"strict": false`` (its choice; the arguments are still
validated strictly, and a bad call gets a tool error naming each field)."""


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> Api:
    """Each wire test runs once per OpenAI API (and client)."""
    return request.param


@pytest.fixture
def fake_openai(api: Api) -> Iterator[StartServer]:
    servers: list[FakeOpenAI] = []

    def start(replies: list[dict[str, Any]]) -> FakeOpenAI:
        server = FakeOpenAI(replies, api)
        server.thread.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.server.shutdown()
        server.server.server_close()


def assert_provider_accepts(body: dict[str, Any]) -> None:
    """The request is one a chat-completions provider accepts.

    Every assistant message with tool calls is followed at once by a tool message for each call,
    every tool message answers a call made just before it, and the input does not end with an
    assistant message.
    """
    messages = [m for m in body["messages"] if m["role"] != "system"]
    assert messages, "no messages"
    assert messages[-1]["role"] != "assistant", f"assistant-ending input: {messages[-1]}"
    waiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in waiting, f"orphan tool result: {message}"
            waiting.remove(message["tool_call_id"])
            continue
        assert not waiting, f"calls {waiting} are not answered before {message}"
        calls: list[dict[str, Any]] = message.get("tool_calls") or []
        waiting = [call["id"] for call in calls]
    assert not waiting, f"calls {waiting} are never answered"


def wire_lines(body: dict[str, Any]) -> list[str]:
    """A request's messages in the form ``ModelCall.rendered`` has, without author names."""
    lines: list[str] = []
    for message in body["messages"]:
        role = message["role"]
        if role == "system":
            continue
        if role == "tool":
            lines.append(f"tool: <- {message['tool_call_id']}: {message['content']}")
            continue
        if message.get("content"):
            lines.append(f"{role}: {message['content']}")
        calls: list[dict[str, Any]] = message.get("tool_calls") or []
        for call in calls:
            function = call["function"]
            lines.append(f"{role}: -> {function['name']}({function['arguments']})")
    return lines


def contents(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m["role"] != "system"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_handoff_conversation_over_the_wire(fake_openai: StartServer, stream: bool) -> None:
    """Triage's empty goal is refused, its second call hands off; billing answers.

    Streamed too: every request asks for a stream, and the reply reaches the caller update by
    update, under billing's name.
    """
    server = fake_openai(
        [
            tool_call("call_a", "handoff_to_billing", {"goal": ""}),
            tool_call("call_b", "handoff_to_billing", {"goal": "Refund the double charge."}),
            text("Refund issued."),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.", description="charges, invoices, plans")
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()

    if stream:
        events = [event async for event in workflow.run("I was charged twice.", stream=True)]
        [turn] = [event.data for event in events if event.type == HANDOFF_TURN_EVENT]
        updates = [event.data for event in events if event.type == "output"]
        assert [(u.author_name, u.text) for u in updates if u.text] == [
            ("billing", "Refund issued.")
        ]
    else:
        turn = (await workflow.run("I was charged twice.")).get_outputs()[-1]
    assert turn.text == "Refund issued."
    assert [(h.source, h.target, h.goal) for h in turn.handoffs] == [
        ("triage", "billing", "Refund the double charge.")
    ]

    first, second, third = server.bodies()
    # The handoff tool's JSON schema, with its required goal.
    [tool] = first["tools"]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "handoff_to_billing"
    assert tool["function"]["description"] == "charges, invoices, plans"
    parameters = tool["function"]["parameters"]
    assert parameters["required"] == ["goal"]
    assert parameters["properties"]["goal"]["type"] == "string"
    # A lean schema: no pydantic titles, and the tool's description is not repeated.
    assert "title" not in json.dumps(parameters)
    assert "description" not in parameters
    # Parallel tool calls left to the agent's options (unset here), and the default handoff
    # instructions, which list no tool.
    assert "parallel_tool_calls" not in first
    [system] = [m["content"] for m in first["messages"] if m["role"] == "system"]
    assert system.endswith(DEFAULT_HANDOFF_INSTRUCTIONS)
    assert "handoff_to_billing" not in system
    # The empty goal's tool error went back to the model, answering its call.
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_a"]
    assert "goal is empty" in tool_messages[0]["content"]
    # Billing got the user's message and the goal, verbatim, from the host; no handoff call or
    # result, and no tools of its own.
    assert [m["role"] for m in third["messages"] if m["role"] != "system"] == ["user", "user"]
    assert contents(third) == [
        "I was charged twice.",
        "Goal: Refund the double charge.",
    ]
    assert "tools" not in third or not third["tools"]
    assert "Transferred." not in json.dumps(third["messages"])
    for body in (first, second, third):
        assert_provider_accepts(body)
        assert bool(body.get("stream")) is stream


async def test_a_handoff_the_agent_does_not_have_is_refused_over_the_wire(
    fake_openai: StartServer,
) -> None:
    """The model's next request answers the call with our refusal, and still offers only the
    handoff the agent has."""
    server = fake_openai(
        [
            tool_call("call_a", "handoff_to_refunds", {"goal": "Refund it."}),
            text("Billing can refund it: shall I send you there?"),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.")
    refunds = server.agent("refunds", "Refund.")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_handoff(billing, refunds)
    ).build()

    turn = (await workflow.run("Refund me.")).get_outputs()[-1]

    assert turn.status == "completed"
    assert turn.text == "Billing can refund it: shall I send you there?"
    first, second = server.bodies()
    for body in (first, second):
        assert [t["function"]["name"] for t in body["tools"]] == ["handoff_to_billing"]
        assert_provider_accepts(body)
    [call] = [m for m in second["messages"] if m.get("tool_calls")]
    assert call["tool_calls"][0]["function"]["name"] == "handoff_to_refunds"
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert result == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "Error: handoff_to_refunds is not one of your tools, so it was not called: you "
        "cannot hand the conversation to refunds. The handoff tools you have now: "
        "handoff_to_billing (to billing). Use one of them if it fits, or answer the user "
        "yourself.",
    }


@pytest.mark.parametrize("mode", list(HandoffToolCallFiltering), ids=lambda m: m.value)
async def test_goal_and_summary_reach_the_receivers_in_every_mode(
    fake_openai: StartServer, mode: HandoffToolCallFiltering
) -> None:
    """The seed's hand-back: triage -> billing -> (summary) -> triage -> tech, over HTTP."""
    goal = "Refund the double charge; the app also crashes."
    summary = "refund done; crash still open"
    # Billing says something and hands back in one response, as in the seed.
    says_and_hands_back = {
        **text("I've refunded the double charge."),
        "tool_calls": tool_call("call_2", "transfer_back_to_triage", {"summary": summary})[
            "tool_calls"
        ],
    }
    server = fake_openai(
        [
            tool_call("call_1", "transfer_to_billing", {"goal": goal}),
            says_and_hands_back,
            tool_call("call_3", "transfer_to_tech", {"goal": "The app crashes on opening a bill."}),
            text("Update to version 4.2."),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.", description="charges")
    tech = server.agent("tech", "Fix bugs.", description="bugs")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, tool_name="transfer_to_billing")
        .with_handoff(triage, tech, tool_name="transfer_to_tech")
        .with_hand_back(triage)
        .with_tool_call_filtering(mode)
        .build()
    )

    turn = (await workflow.run("Refund the double charge. Also the app crashes.")).get_outputs()[-1]

    assert turn.text.endswith("Update to version 4.2.")
    assert [h.target for h in turn.handoffs] == ["billing", "triage", "tech"]
    to_triage, to_billing, back_at_triage, to_tech = server.bodies()
    # The goal reaches billing, the summary reaches triage, verbatim, in every mode.
    assert f"Goal: {goal}" in contents(to_billing)
    assert f"Hand-back from billing to you (triage). Summary: {summary}" in contents(back_at_triage)
    assert "I've refunded the double charge." in json.dumps(back_at_triage["messages"])
    # Tech reads every handoff of the turn, its own last.
    notes = [c for c in contents(to_tech) if c.startswith(("Handoff ", "Hand-back ", "Goal: "))]
    assert notes == [
        f"Handoff from triage to billing. Goal: {goal}",
        f"Hand-back from billing to triage. Summary: {summary}",
        "Goal: The app crashes on opening a bill.",
    ]
    assert contents(to_tech)[-1] == notes[-1]
    for body in (to_triage, to_billing, back_at_triage, to_tech):
        assert_provider_accepts(body)
    # In NONE the handoff calls themselves are visible too; in the other modes they are not.
    calls_seen_by_billing = json.dumps(to_billing["messages"]).count("transfer_to_billing")
    assert calls_seen_by_billing == (1 if mode is HandoffToolCallFiltering.NONE else 0)


@tool(name="refund", description="Refund an amount.", approval_mode="always_require")
def refund(amount: float) -> str:
    return f"Refunded {amount} EUR."


async def test_an_approved_call_after_a_handoff_goes_out_valid(
    fake_openai: StartServer,
) -> None:
    """Billing asks to refund, the user approves, billing goes on: the request a provider gets."""
    server = fake_openai(
        [
            tool_call("call_1", "handoff_to_billing", {"goal": "Refund the duplicate charge."}),
            tool_call("call_2", "refund", {"amount": 24.9}),
            text("Refunded 24.90 EUR."),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.", description="charges", tools=[refund])
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()

    first = await workflow.run("I was charged twice.")
    [request] = first.get_request_info_events()
    approved = request.data.to_function_approval_response(approved=True)
    second = await workflow.run(responses={request.request_id: approved})

    assert second.get_outputs()[-1].text == "Refunded 24.90 EUR."
    _, asks, goes_on = server.bodies()
    assert "Goal: Refund the duplicate charge." in (contents(asks))
    roles = [m["role"] for m in goes_on["messages"] if m["role"] != "system"]
    assert roles == ["user", "user", "assistant", "tool"]
    assert goes_on["messages"][-1]["content"] == "Refunded 24.9 EUR."
    for body in server.bodies():
        assert_provider_accepts(body)


async def test_a_turn_that_ends_with_a_call_unanswered_leaves_a_valid_history(
    fake_openai: StartServer,
) -> None:
    """Billing asks the back office and hands off in one response, past the cap: the turn ends.

    The open call gets a result, so the next turn's request is valid input.
    """
    lookup = FunctionTool(
        name="order_status",
        description="Answered by the application.",
        input_model={"type": "object", "properties": {"order": {"type": "string"}}},
    )
    server = fake_openai(
        [
            tool_call("call_1", "handoff_to_billing", {"goal": "Refund order A-1."}),
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "order_status", "arguments": '{"order": "A-1"}'},
                    },
                    {
                        "id": "call_3",
                        "type": "function",
                        "function": {
                            "name": "handoff_to_refunds",
                            "arguments": '{"goal": "Refund A-1."}',
                        },
                    },
                ],
            },
            text("Hello again, how can I help?"),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.", description="charges", tools=[lookup])
    refunds = server.agent("refunds", "Refund.", description="refunds")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds)
        .with_max_handoffs_per_turn(1)
        .build()
    )

    first = (await workflow.run("Refund order A-1.")).get_outputs()[-1]
    second = (await workflow.run("Hello?")).get_outputs()[-1]

    assert first.status == "handoff_cap"
    assert second.text == "Hello again, how can I help?"
    *_, next_turn = server.bodies()
    assert_provider_accepts(next_turn)
    answered = [m for m in next_turn["messages"] if m.get("tool_call_id") == "call_2"]
    assert [m["content"] for m in answered] == [
        "Error: not performed: the turn ended (handoff_cap) before this call was answered."
    ]


class RefundRequest(BaseModel):
    """A refund for the refunds team."""

    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(description="The order to refund.")
    amount: float = Field(gt=0, description="In EUR.")


async def test_a_typed_handoff_behind_an_approval_over_the_wire(
    fake_openai: StartServer,
) -> None:
    """The strict schema goes out; a bad call, a decline and an approval come back as the model
    and the target receive them."""
    good = {"order_id": "A-1", "amount": 240.0}
    server = fake_openai(
        [
            tool_call("call_1", "send_to_refunds", {"order_id": "A-1", "amount": -1}),
            tool_call("call_2", "send_to_refunds", good),
            tool_call("call_3", "send_to_refunds", good),
            text("Refunded 240 EUR."),
        ]
    )
    billing = server.agent("billing", "Route refunds.")
    refunds = server.agent("refunds", "Pay refunds.")
    workflow = (
        HandoffWorkflowBuilder(billing)
        .with_handoff(
            billing,
            refunds,
            "pays refunds",
            tool_name="send_to_refunds",
            payload=RefundRequest,
            approval=True,
        )
        .build()
    )

    [request] = (await workflow.run("Refund A-1, 240 EUR.")).get_request_info_events()
    declined = decline(request.data, "Needs the receipt.")
    [again] = (
        await workflow.run(responses={request.request_id: declined})
    ).get_request_info_events()
    approved = again.data.to_function_approval_response(approved=True)
    turn = (await workflow.run(responses={again.request_id: approved})).get_outputs()[-1]

    assert (turn.active_agent, turn.text) == ("refunds", "Refunded 240 EUR.")
    first, after_invalid, after_decline, to_refunds = server.bodies()
    [tool_spec] = first["tools"]
    assert tool_spec["function"]["strict"] is STRICT_SENT[server.api]
    # The model's schema without pydantic's titles (a lean schema).
    expected = RefundRequest.model_json_schema()
    del expected["title"]
    for field in expected["properties"].values():
        del field["title"]
    assert tool_spec["function"]["parameters"] == expected
    invalid = after_invalid["messages"][-1]
    assert (invalid["role"], invalid["tool_call_id"]) == ("tool", "call_1")
    assert "amount: Input should be greater than 0" in invalid["content"]
    told = after_decline["messages"][-1]
    assert (told["role"], told["tool_call_id"]) == ("tool", "call_2")
    assert told["content"].endswith("The reviewer said: Needs the receipt.")
    assert contents(to_refunds) == [
        "Refund A-1, 240 EUR.",
        'RefundRequest: {"order_id":"A-1","amount":240.0}',
    ]
    for body in server.bodies():
        assert_provider_accepts(body)


async def test_a_delegation_over_the_wire(
    fake_openai: StartServer,
) -> None:
    """What the expert's provider gets (its task, after the filtered conversation), and the
    caller's next request (its call answered with the expert's text); all valid requests."""
    server = fake_openai(
        [
            tool_call("call_1", "ask_policy", {"task": "Is a return after 40 days refunded?"}),
            text("Within 60 days: a full refund."),
            text("Yes, you get a full refund."),
        ]
    )
    triage = server.agent("triage", "Answer customers; ask the policy expert about rules.")
    policy = server.agent("policy", "You know the refund policy.", description="refund policy")
    workflow = (
        HandoffWorkflowBuilder(triage).with_delegate(triage, policy, history="filtered").build()
    )
    turn = (await workflow.run("I returned it after 40 days. Refund?")).get_outputs()[-1]
    assert turn.text == "Yes, you get a full refund."

    asks, expert, answers = server.bodies()
    [tool] = asks["tools"]
    assert tool["function"]["name"] == "ask_policy"
    assert tool["function"]["description"] == "refund policy"
    assert tool["function"]["parameters"]["required"] == ["task"]
    assert tool["function"].get("strict") is STRICT_SENT[server.api]
    # The expert: its own instructions, no tools, the user's message, then the task.
    [system] = [m["content"] for m in expert["messages"] if m["role"] == "system"]
    assert system == "You know the refund policy."
    assert "tools" not in expert or not expert["tools"]
    assert contents(expert) == [
        "I returned it after 40 days. Refund?",
        "Is a return after 40 days refunded?",
    ]
    # The caller goes on with its call answered by the expert's text.
    tool_messages = [m for m in answers["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_1", "Within 60 days: a full refund.")
    ]
    for body in server.bodies():
        assert_provider_accepts(body)


async def test_an_approval_inside_an_expert_goes_out_valid(
    fake_openai: StartServer,
) -> None:
    """The expert's tool waits for a person; after the answer both requests are valid input."""
    server = fake_openai(
        [
            tool_call("call_1", "ask_billing", {"task": "Refund 24.90 EUR."}),
            tool_call("call_2", "refund", {"amount": 24.9}),
            text("Refunded 24.90 EUR."),
            text("Done: your refund is on its way."),
        ]
    )
    triage = server.agent("triage", "Answer customers.")
    billing = server.agent("billing", "Refund.", description="refunds", tools=[refund])
    workflow = HandoffWorkflowBuilder(triage).with_delegate(triage, billing).build()

    first = await workflow.run("Refund my duplicate charge.")
    [request] = first.get_request_info_events()
    assert request.data.function_call.name == "refund"
    approved = request.data.to_function_approval_response(approved=True)
    second = await workflow.run(responses={request.request_id: approved})
    assert second.get_outputs()[-1].text == "Done: your refund is on its way."

    _, _, expert_goes_on, caller_goes_on = server.bodies()
    assert [m["role"] for m in expert_goes_on["messages"] if m["role"] != "system"] == [
        "user",
        "assistant",
        "tool",
    ]
    assert expert_goes_on["messages"][-1]["content"] == "Refunded 24.9 EUR."
    assert caller_goes_on["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Refunded 24.90 EUR.",
    }
    for body in server.bodies():
        assert_provider_accepts(body)


async def test_a_review_over_the_wire(
    fake_openai: StartServer,
) -> None:
    """The reviewer's request holds the reply and its tools; the producer reads the feedback."""
    server = fake_openai(
        [
            text("Plan: flush the whole cache."),
            tool_call("call_1", "request_changes", {"feedback": "Too broad: scope it."}),
            text("Plan: expire catalog:v7:* only."),
            tool_call("call_2", "approve", {"note": "Scoped."}),
        ]
    )
    planner = server.agent("planner", "Plan remediations.")
    reviewer = server.agent("reviewer", "Review plans for safety.")
    workflow = HandoffWorkflowBuilder(planner).with_review(planner, reviewer).build()
    turn = (await workflow.run("The cache is stale.")).get_outputs()[-1]
    assert turn.text == "Plan: expire catalog:v7:* only."

    _, review, rework, _ = server.bodies()
    assert sorted(t["function"]["name"] for t in review["tools"]) == ["approve", "request_changes"]
    assert "Plan: flush the whole cache." in contents(review)
    assert any("review the reply of planner above" in c for c in contents(review))
    assert any("asked planner for changes (round 1 of 2): Too broad: scope it." in c
               for c in contents(rework))  # fmt: skip
    assert "tools" not in rework or not rework["tools"]
    for body in server.bodies():
        assert_provider_accepts(body)


@pytest.mark.parametrize(("setting", "sent"), [(None, 1024), ("300", 300)])
async def test_the_support_desk_caps_each_response_s_output_tokens(
    fake_openai: StartServer,
    monkeypatch: pytest.MonkeyPatch,
    setting: str | None,
    sent: int,
) -> None:
    """A model that does not stop is cut off: every request carries the cap."""
    from handoff_builder._support_desk import support_desk

    server = fake_openai([text("Hello, how can I help?")])
    for variable, value in server.environ.items():
        monkeypatch.setenv(variable, value)
    if setting is None:
        monkeypatch.delenv("HANDOFF_BUILDER_MAX_OUTPUT_TOKENS", raising=False)
    else:
        monkeypatch.setenv("HANDOFF_BUILDER_MAX_OUTPUT_TOKENS", setting)
    workflow = support_desk("openai").build()
    await workflow.run("hello")
    [body] = server.bodies()
    assert body["max_completion_tokens"] == sent


@pytest.mark.postgres
async def test_the_end_to_end_sample_over_the_wire(
    fake_openai: StartServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/end-to-end.md on the openai provider: the orders agent's own tool goes out beside
    its handoff tool, and after the restart its model receives the whole stored conversation."""
    from samples.order_desk_postgres import MESSAGES, main

    from handoff_builder.stores import PostgresConversationStore
    from tests.stores import postgres_dsn, unique_prefix

    server = fake_openai(
        [
            tool_call("c1", "handoff_to_orders", {"goal": "Where is order 1234?"}),
            tool_call("c2", "order_status", {"order_id": "1234"}),
            text("It arrives on 2 December."),
            text("Yes, I told the courier."),
        ]
    )
    for variable, value in server.environ.items():
        monkeypatch.setenv(variable, value)
    monkeypatch.delenv("HANDOFF_BUILDER_MAX_OUTPUT_TOKENS", raising=False)
    prefix = unique_prefix()
    try:
        first, second = await main("openai", dsn=postgres_dsn(), table_prefix=prefix)
    finally:
        async with PostgresConversationStore(postgres_dsn(), table_prefix=prefix) as store:
            await store.drop_tables()
    assert (first.text, first.active_agent) == ("It arrives on 2 December.", "orders")
    assert (second.text, list(second.handoffs)) == ("Yes, I told the courier.", [])
    _, asks, answers, after_restart = server.bodies()
    assert sorted(t["function"]["name"] for t in asks["tools"]) == [
        "handoff_to_triage",
        "order_status",
    ]
    [result] = [m for m in answers["messages"] if m["role"] == "tool"]
    assert result["tool_call_id"] == "c2"
    assert "shipped on 28 November" in result["content"]
    # a new host on a new connection: the model gets the stored conversation, then the message
    sent = json.dumps(after_restart["messages"])
    for fragment in (MESSAGES[0], "Goal: Where is order 1234?", "shipped on 28 November"):
        assert fragment in sent
    assert contents(after_restart)[-1] == MESSAGES[1]
    assert after_restart["max_completion_tokens"] == 1024
    for body in server.bodies():
        assert_provider_accepts(body)


async def test_an_input_filter_decides_what_the_target_receives_over_the_wire(
    fake_openai: StartServer,
) -> None:
    from handoff_builder import HandoffInput

    def note_only(data: HandoffInput) -> list[Message]:
        return [data.note]

    server = fake_openai(
        [
            text("Hello, how can I help?"),
            tool_call("call_a", "handoff_to_billing", {"goal": "Refund the double charge."}),
            text("Refund issued."),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, input_filter=note_only)
        .with_tool_call_filtering(HandoffToolCallFiltering.NONE)
        .build()
    )
    await workflow.run("hi")
    await workflow.run("I was charged twice; my card number is 4111 1111 1111 1111.")

    billing_request = server.bodies()[-1]
    assert [m["role"] for m in billing_request["messages"]] == ["system", "user"]
    assert contents(billing_request) == ["Goal: Refund the double charge."]
    assert "4111" not in json.dumps(billing_request)


async def test_an_agent_s_own_store_setting_is_kept(fake_openai: StartServer) -> None:
    """The workflow sends ``store: false`` only where the agent left ``store`` unset."""
    server = fake_openai([text("Stored at the provider, as asked.")])
    agent = Agent(
        client=chat_client("openai", environ=server.environ),
        name="triage",
        instructions="Answer.",
        default_options={"store": True},
    )
    await HandoffWorkflowBuilder(agent).build().run("hello")
    [body] = server.raw_bodies()
    assert body["store"] is True


async def test_an_agent_s_own_parallel_tool_calls_setting_is_kept(fake_openai: StartServer) -> None:
    """An agent with handoff tools sends ``parallel_tool_calls`` only as its own options say."""
    server = fake_openai([text("One call at a time, as asked.")])
    triage = Agent(
        client=chat_client("openai", environ=server.environ),
        name="triage",
        instructions="Route.",
        default_options={"allow_multiple_tool_calls": False},
    )
    billing = server.agent("billing", "Fix charges.")
    await HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build().run("hello")
    [body] = server.bodies()
    assert [tool["function"]["name"] for tool in body["tools"]] == ["handoff_to_billing"]
    assert body["parallel_tool_calls"] is False


async def test_recorded_model_inputs_are_what_went_over_the_wire(fake_openai: StartServer) -> None:
    """with_model_inputs with a real client: each recorded call is the request that was sent."""
    server = fake_openai(
        [
            tool_call("call_a", "handoff_to_billing", {"goal": ""}),
            tool_call("call_b", "handoff_to_billing", {"goal": "Refund the double charge."}),
            text("Refund issued."),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.", description="charges, invoices, plans")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_model_inputs().build()
    )

    turn = (await workflow.run("I was charged twice.")).get_outputs()[-1]

    bodies = server.bodies()
    assert [(c.index, c.agent) for c in turn.model_calls] == [
        (0, "triage"),
        (1, "triage"),
        (2, "billing"),
    ]
    for call, body in zip(turn.model_calls, bodies, strict=True):
        [system] = [m["content"] for m in body["messages"] if m["role"] == "system"]
        assert system == call.instructions
        assert wire_lines(body) == [re.sub(r"^(\w+)\[[^\]]*\]:", r"\1:", line)
                                    for line in call.rendered.splitlines()]  # fmt: skip
        tools: list[dict[str, Any]] = body.get("tools") or []
        sent_tools = [t["function"]["name"] for t in tools]
        assert list(call.tool_names) == sent_tools
    assert turn.received("billing").rendered == (
        "user: I was charged twice.\nuser[handoff_host]: Goal: Refund the double charge."
    )
    assert contents(bodies[-1])[-1] == turn.received("billing").texts[-1]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_reply_tool_over_the_wire(fake_openai: StartServer, stream: bool) -> None:
    """The reply tool goes out strict beside the handoff; its call comes back as the agent's text.

    The next request carries that text as an assistant message, with no call of the tool.
    """
    server = fake_openai(
        [
            tool_call("call_a", "reply_to_user", {"text": "Hello! How can I help?"}),
            text("Glad to help."),
        ]
    )
    triage = server.agent("triage", "Route the user.")
    billing = server.agent("billing", "Fix charges.", description="charges, invoices, plans")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_reply_tool().build()
    )

    if stream:
        events = [event async for event in workflow.run("Hi there!", stream=True)]
        [turn] = [event.data for event in events if event.type == HANDOFF_TURN_EVENT]
        updates = [event.data for event in events if event.type == "output"]
        assert [(u.author_name, u.text) for u in updates if u.text] == [
            ("triage", "Hello! How can I help?")
        ]
        assert not [c for u in updates for c in u.contents if c.type.startswith("function")]
    else:
        turn = (await workflow.run("Hi there!")).get_outputs()[-1]
    assert (turn.active_agent, turn.text, turn.handoffs) == ("triage", "Hello! How can I help?", ())
    await workflow.run([*turn.conversation, Message("user", ["Thanks!"])])

    first, second = server.bodies()
    names = [t["function"]["name"] for t in first["tools"]]
    assert names == ["handoff_to_billing", "reply_to_user"]
    function = first["tools"][1]["function"]
    assert function["description"] == "A greeting, a thanks, no request yet: answer in words."
    assert function["parameters"] == {
        "additionalProperties": False,
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "type": "object",
    }
    assert function.get("strict", False) is STRICT_SENT[server.api]
    assert wire_lines(second) == [
        "user: Hi there!",
        "assistant: Hello! How can I help?",
        "user: Thanks!",
    ]
    for body in (first, second):
        assert_provider_accepts(body)
