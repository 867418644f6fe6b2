"""with_model_inputs: what each model received, kept on the turn's result for any chat client.

The scripted client records what it receives by itself (``client.calls``); a recorded call must
be that same view. Off by default: nothing recorded, nothing kept, nothing added to a run.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from agent_framework import Agent, ChatContext, Message, tool

from handoff_builder import (
    ConversationHost,
    GroupChatHost,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    HookSignatureError,
    ModelCall,
    ModelCallNotRecordedError,
    redact_patterns,
)
from handoff_builder._model_inputs import ModelInputRecorder
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import call_tool, client_of, handoff_to, reply, scripted_agent
from tests.helpers import run_turn

CARD = r"\b\d(?:[ -]?\d){12,18}\b"
EMAIL = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"


def desk(*, goal: str = "Refund the duplicate charge.") -> tuple[Agent, Agent]:
    triage = scripted_agent(
        "triage",
        handoff_to("billing", goal=""),  # refused: the tool loop calls the model again
        handoff_to("billing", goal=goal),
        instructions="Route the user.",
    )
    billing = scripted_agent("billing", reply("Refunded."), instructions="Fix charges.")
    return triage, billing


def same_view(recorded: ModelCall, scripted: ModelCall) -> None:
    """A recorded call is what the scripted client received itself."""
    assert recorded.rendered == scripted.rendered
    assert recorded.tool_names == scripted.tool_names
    assert recorded.instructions == scripted.instructions
    assert [m.to_dict() for m in recorded.messages] == [m.to_dict() for m in scripted.messages]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_each_model_call_is_recorded_as_the_model_received_it(stream: bool) -> None:
    triage, billing = desk()
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_model_inputs().build()
    )

    turn = (await run_turn(workflow, "I was charged twice.", stream=stream)).result

    assert [(c.index, c.agent) for c in turn.model_calls] == [
        (0, "triage"),
        (1, "triage"),
        (2, "billing"),
    ]
    scripted = [*client_of(triage).calls, *client_of(billing).calls]
    for recorded, received_call in zip(turn.model_calls, scripted, strict=True):
        same_view(recorded, received_call)
    assert turn.received("billing").rendered == (
        "user: I was charged twice.\nuser[handoff_host]: Goal: Refund the duplicate charge."
    )
    assert turn.received("triage", call=0).tool_names == ("handoff_to_billing",)
    assert "goal is empty" in turn.received("triage").rendered  # the tool loop's second call
    assert "tools" not in turn.received("triage").options  # named in tool_names instead


async def test_nothing_is_recorded_or_kept_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """No recorder in any run, no log on the host, no calls on the result."""

    async def never(self: ModelInputRecorder, context: ChatContext, call_next: Any) -> None:
        raise AssertionError("a recorder ran in a workflow built without with_model_inputs")

    monkeypatch.setattr(ModelInputRecorder, "process", never)
    triage, billing = desk()
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()
    host = workflow.get_start_executor()
    assert isinstance(host, GroupChatHost)
    assert host.model_calls is None

    turn = (await run_turn(workflow, "I was charged twice.", stream=True)).result

    assert turn.text == "Refunded."
    assert turn.model_calls == ()
    with pytest.raises(ModelCallNotRecordedError) as failure:
        turn.received("billing")
    assert str(failure.value) == (
        "No model call was recorded in this turn: build the workflow with with_model_inputs() "
        "to keep what each model receives."
    )
    assert (failure.value.agent, failure.value.call) == ("billing", -1)
    assert isinstance(failure.value, LookupError)


async def test_a_redaction_masks_the_record_and_nothing_else() -> None:
    card = "4111 1111 1111 1111"
    triage = scripted_agent(
        "triage",
        call_tool("lookup", card=card),
        handoff_to("billing", goal=f"Refund card {card}."),
        instructions=f"Route the user. Test card: {card}.",
        tools=[lookup],
    )
    billing = scripted_agent("billing", reply("Refunded."))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_model_inputs(redact=redact_patterns(CARD))
        .build()
    )

    turn = (await workflow.run(f"I paid with {card} twice.")).get_outputs()[-1]

    assert isinstance(turn, HandoffTurnResult)
    for call in turn.model_calls:
        assert card not in call.rendered
        assert card not in call.instructions
    recorded = turn.received("triage")
    call_id = recorded.messages[1].contents[0].call_id
    assert recorded.rendered == (
        "user: I paid with [redacted] twice.\n"
        'assistant: -> lookup({"card": "[redacted]"})\n'
        f"tool: <- {call_id}: Card [redacted]: 2 charges of 24.90 EUR."
    )
    assert turn.received("triage").instructions.startswith("Route the user. Test card: [redacted].")
    assert turn.received("billing").texts[-1] == ("Goal: Refund card [redacted].")
    # The models received the card, and the conversation keeps it: only the record is masked.
    assert card in client_of(billing).calls[0].rendered
    assert card in client_of(triage).calls[0].instructions
    assert card in turn.conversation[0].text


@tool(name="lookup", description="Look a card up.")
def lookup(card: str) -> str:
    return f"Card {card}: 2 charges of 24.90 EUR."


def _divide_by_zero(message: Message) -> Message:
    raise ZeroDivisionError(message.text)


def _text_only(message: Message) -> Any:
    return message.text


@pytest.mark.parametrize(
    ("redact", "error"),
    [(_divide_by_zero, "ZeroDivisionError"), (_text_only, "TypeError")],
    ids=["raises", "not-a-message"],
)
async def test_a_failing_redaction_keeps_a_placeholder_and_the_turn_goes_on(
    redact: Any, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    triage, billing = desk()
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_model_inputs(redact=redact)
        .build()
    )
    with caplog.at_level(logging.WARNING, logger="handoff_builder"):
        turn = (await workflow.run("My card is 4111 1111 1111 1111.")).get_outputs()[-1]

    assert turn.text == "Refunded."
    placeholder = f"[not recorded: the redaction raised {error}]"
    assert turn.received("billing").texts == [placeholder, placeholder]
    assert turn.received("billing").instructions == placeholder
    assert "4111" not in "".join(c.rendered + c.instructions for c in turn.model_calls)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        f"with_model_inputs: the redaction raised {error} on a user message; the record keeps a "
        "placeholder instead"
    ) in warnings


async def test_a_turn_keeps_its_latest_calls_up_to_max_calls() -> None:
    triage, billing = desk()
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_model_inputs(max_calls=2)
        .build()
    )
    turn = (await workflow.run("I was charged twice.")).get_outputs()[-1]

    assert [(c.index, c.agent) for c in turn.model_calls] == [(1, "triage"), (2, "billing")]
    with pytest.raises(ModelCallNotRecordedError) as failure:
        turn.received("triage", call=1)
    assert str(failure.value) == (
        "Agent 'triage''s model has 1 recorded call(s) in this turn; there is no call 1. "
        "The turn's first 1 call(s) were not kept (max_calls)."
    )


async def test_each_turn_has_its_own_calls_and_names_the_agents_that_ran() -> None:
    triage, billing = desk()
    client_of(billing).add_steps(reply("Anything else?"))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .enable_return_to_previous()
        .with_model_inputs()
        .build()
    )
    await workflow.run("I was charged twice.")
    second = (await workflow.run("Thanks.")).get_outputs()[-1]

    assert [(c.index, c.agent) for c in second.model_calls] == [(0, "billing")]
    assert second.received("billing").user_text == "Thanks."
    with pytest.raises(ModelCallNotRecordedError) as failure:
        second.received("triage")
    assert str(failure.value) == (
        "Agent 'triage''s model has no recorded call in this turn; recorded: billing (1)."
    )


async def test_an_expert_s_calls_are_recorded_under_its_name() -> None:
    triage = scripted_agent(
        "triage", call_tool("ask_policy", task="Is a return after 40 days refunded?"), reply("Yes.")
    )
    policy = scripted_agent("policy", reply("Within 60 days: a full refund."))
    workflow = (
        HandoffWorkflowBuilder(triage).with_delegate(triage, policy).with_model_inputs().build()
    )
    turn = (await workflow.run("Refund after 40 days?")).get_outputs()[-1]

    assert [c.agent for c in turn.model_calls] == ["triage", "policy", "triage"]
    same_view(turn.received("policy"), client_of(policy).calls[0])
    assert turn.received("policy").texts == ["Is a return after 40 days refunded?"]


async def test_a_hosted_turn_carries_its_calls() -> None:
    triage, billing = desk(goal="Refund card 4111 1111 1111 1111.")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = ConversationHost(
        builder.with_model_inputs(redact=redact_patterns(CARD)), InMemoryConversationStore()
    )

    turn = await host.send("c-1", "I was charged twice.")

    assert turn.received("billing").texts[-1] == ("Goal: Refund card [redacted].")


def test_the_settings_are_checked_where_they_are_given() -> None:
    triage, _ = desk()
    builder = HandoffWorkflowBuilder(triage)
    with pytest.raises(HookSignatureError) as failure:
        builder.with_model_inputs(redact=lambda message, agent: message)  # pyright: ignore[reportUnknownLambdaType, reportArgumentType] - the wrong signature on purpose
    assert str(failure.value).startswith(
        "The redaction of with_model_inputs is called with one argument, a Message; "
        "<lambda>(message, agent) cannot take it"
    )
    with pytest.raises(ValueError, match=r"^max_calls must be at least 1, got 0\.$"):
        builder.with_model_inputs(max_calls=0)


def test_redact_patterns_returns_an_unchanged_message_as_it_is() -> None:
    redact = redact_patterns(CARD, EMAIL, replacement="***")
    plain = Message(role="user", contents=["Hello."])
    assert redact(plain) is plain
    mixed = Message(role="user", contents=["Mail me at a.b@example.com."], author_name="x")
    masked = redact(mixed)
    assert (masked.text, masked.author_name, masked.role) == ("Mail me at ***.", "x", "user")
    assert mixed.text == "Mail me at a.b@example.com."
