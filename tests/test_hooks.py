"""Per-edge code: on_handoff (go or veto), is_enabled (offer the tool or not), and their errors."""

from __future__ import annotations

import asyncio

import pytest
from agent_framework import Agent, tool
from pydantic import BaseModel, ConfigDict

from handoff_builder import (
    ConversationHost,
    HandoffConfigurationError,
    HandoffContext,
    HandoffHookError,
    HandoffPredicate,
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

pytestmark = pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])


class Refund(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: float


async def test_on_handoff_sees_the_handoff_and_lets_it_go(stream: bool) -> None:
    seen: list[HandoffContext] = []

    async def audit(context: HandoffContext) -> None:
        await asyncio.sleep(0)
        seen.append(context)

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund the double charge."))
    billing = scripted_agent("billing", reply("Refunded."))
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing, on_handoff=audit).build()
    )

    turn = await run_turn(workflow, "I was charged twice", stream=stream)

    assert turn.result.text == "Refunded."
    [context] = seen
    assert (context.source, context.target, context.tool_name) == (
        "triage",
        "billing",
        "handoff_to_billing",
    )
    assert (context.goal, context.payload, context.conversation_id) == (
        "Refund the double charge.",
        None,
        None,
    )
    assert [m.text for m in context.conversation] == ["I was charged twice"]
    assert isinstance(context.conversation, tuple)  # a snapshot, not the live history


async def test_a_veto_is_the_callers_tool_error_and_a_blocked_event(stream: bool) -> None:
    def only_small_refunds(context: HandoffContext) -> str | None:
        assert isinstance(context.payload, Refund)
        if context.payload.amount > 100:
            return "Refunds over 100 EUR need a supervisor; tell the user one will call."
        return None

    billing = scripted_agent(
        "billing",
        call_tool("handoff_to_refunds", amount=500),
        reply("A supervisor will call you about the refund."),
    )
    refunds = scripted_agent("refunds")
    workflow = (
        HandoffWorkflowBuilder(billing)
        .with_handoff(billing, refunds, payload=Refund, on_handoff=only_small_refunds)
        .build()
    )

    turn = await run_turn(workflow, "refund 500", stream=stream)

    assert client_of(refunds).calls == []
    assert turn.result.text == "A supervisor will call you about the refund."
    assert turn.result.status == "completed"
    [blocked] = turn.blocked
    assert (blocked.reason, blocked.target) == ("vetoed", "refunds")
    assert (
        received(billing)
        .rendered.splitlines()[-1]
        .endswith(": Refunds over 100 EUR need a supervisor; tell the user one will call.")
    )


async def test_an_exception_in_a_hook_names_the_edge(stream: bool) -> None:
    def broken(context: HandoffContext) -> str | None:
        raise KeyError("customer")

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing, on_handoff=broken).build()
    )

    with pytest.raises(HandoffHookError) as failure:
        await run_turn(workflow, "refund", stream=stream)

    error = failure.value
    assert (error.source, error.target, error.tool_name, error.hook) == (
        "triage",
        "billing",
        "handoff_to_billing",
        "on_handoff",
    )
    assert str(error) == (
        "The on_handoff of the handoff from 'triage' to 'billing' (handoff_to_billing) raised "
        "KeyError: 'customer'. Nothing was routed."
    )
    assert isinstance(error.__cause__, KeyError)
    assert client_of(billing).calls == []


async def test_a_hook_error_leaves_the_stored_conversation_as_it_was(
    stream: bool, store: ConversationStore
) -> None:
    def broken(context: HandoffContext) -> str | None:
        raise RuntimeError("the audit service is down")

    triage = scripted_agent("triage", reply("Hello."), handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing, on_handoff=broken)
    host = ConversationHost(builder, store)
    await host.send("c", "hi")
    before = await store.load("c")

    async def send() -> None:
        if stream:
            async for _ in host.stream("c", "refund"):
                pass
        else:
            await host.send("c", "refund")

    with pytest.raises(HandoffHookError):
        await send()

    after = await store.load("c")
    assert before is not None
    assert after is not None
    # The user's message and the state before triage ran were stored; nothing after.
    assert [m["contents"][0].get("text") for m in after.messages] == ["hi", "Hello.", "refund"]
    assert after.state["host"]["next"] == "triage"
    assert after.messages[: len(before.messages)] == before.messages


async def test_calls_in_one_response_wait_for_an_async_hook_of_an_earlier_call(
    stream: bool,
) -> None:
    """agent_framework runs a response's calls concurrently: the second must see the first."""
    asked: list[str] = []

    async def slow_audit(context: HandoffContext) -> None:
        asked.append(context.target)
        await asyncio.sleep(0.01)  # a database call, say

    triage = scripted_agent(
        "triage",
        respond(
            call_tool("handoff_to_billing", goal="Refund it."),
            call_tool("handoff_to_tech", goal="Fix the app."),
        ),
    )
    billing = scripted_agent("billing", reply("Refunded."))
    tech = scripted_agent("tech")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoffs(triage, [billing, tech], on_handoff=slow_audit)
        .build()
    )

    turn = await run_turn(workflow, "refund, and the app crashes", stream=stream)

    assert asked == ["billing"]  # the second call was not performed, so not asked about
    assert [(h.source, h.target) for h in turn.result.handoffs] == [("triage", "billing")]
    results = [
        c.result for m in turn.result.messages for c in m.contents if c.type == "function_result"
    ]
    assert results == [
        "Transferred.",
        "Not performed: only one handoff per response is followed (handoff_to_billing was "
        "followed).",
    ]
    assert client_of(tech).calls == []


async def test_a_veto_keeps_the_arguments_it_refused(stream: bool) -> None:
    a = scripted_agent("a", handoff_to("c", goal="Please."), reply("Fine."))
    c = scripted_agent("c")
    workflow = (
        HandoffWorkflowBuilder(a).with_handoff(a, c, on_handoff=lambda context: "Closed.").build()
    )
    turn = await run_turn(workflow, "go", stream=stream)
    [blocked] = turn.blocked
    assert (blocked.reason, blocked.arguments) == ("vetoed", '{"goal": "Please."}')


async def test_a_disabled_handoff_is_not_offered_and_a_call_to_it_is_blocked(
    stream: bool,
) -> None:
    open_hours = {"refunds": False}

    async def staffed(context: HandoffContext) -> bool:
        return open_hours[context.target]

    billing = scripted_agent(
        "billing",
        handoff_to("refunds", goal="Refund it."),  # the model calls it anyway
        reply("Refunds are closed now; I have noted your request."),
        handoff_to("refunds", goal="Refund it."),
    )
    refunds = scripted_agent("refunds", reply("Refunded."))
    vouchers = scripted_agent("vouchers")
    workflow = (
        HandoffWorkflowBuilder(billing)
        .with_handoff(billing, refunds, is_enabled=staffed)
        .with_handoff(billing, vouchers)
        .with_instructions("Your handoffs: {handoff_tools}.")
        .build()
    )

    closed = await run_turn(workflow, "refund please", stream=stream)

    assert received(billing, 0).tool_names == ("handoff_to_vouchers",)
    instructions = str(received(billing, 0).options["instructions"])
    assert "`handoff_to_vouchers`" in instructions  # only what the model is offered is named
    assert "handoff_to_refunds" not in instructions
    assert client_of(refunds).calls == []
    assert [(b.reason, b.target) for b in closed.blocked] == [("disabled", "refunds")]
    assert (
        received(billing, 1)
        .rendered.splitlines()[-1]
        .endswith(
            ": Error: handoff_to_refunds is not available to you now, so it was not called. The "
            "handoff tools you have now: handoff_to_vouchers (to vouchers). Use one of them if it "
            "fits, or answer the user yourself."
        )
    )
    assert received(billing, 1).tool_names == ("handoff_to_vouchers",)
    assert closed.result.text == "Refunds are closed now; I have noted your request."

    open_hours["refunds"] = True
    opened = await run_turn(workflow, "refund please", stream=stream)

    assert received(billing).tool_names == ("handoff_to_refunds", "handoff_to_vouchers")
    assert "`handoff_to_refunds`, `handoff_to_vouchers`" in str(
        received(billing).options["instructions"]
    )
    assert opened.result.text == "Refunded."


async def test_a_call_to_a_tool_the_agent_was_not_offered_is_answered(stream: bool) -> None:
    """With no tool offered at all, the call is still refused as the agent runs: it reads why,
    and answers in the same run."""
    billing = scripted_agent("billing", handoff_to("refunds", goal="Refund it."), reply("Sure."))
    refunds = scripted_agent("refunds")
    workflow = (
        HandoffWorkflowBuilder(billing).with_handoff(billing, refunds, is_enabled=False).build()
    )

    turn = await run_turn(workflow, "refund", stream=stream)

    assert [b.reason for b in turn.blocked] == ["disabled"]
    assert (turn.result.status, turn.result.text) == ("completed", "Sure.")
    assert received(billing).tool_names == ()
    assert "instructions" not in received(billing).options  # no handoff offered, none described
    contents = [c for m in received(billing).messages for c in m.contents]
    calls = [c.call_id for c in contents if c.type == "function_call"]
    results = [c for c in contents if c.type == "function_result"]
    assert calls == [r.call_id for r in results]
    assert results[0].result == (
        "Error: handoff_to_refunds is not available to you now, so it was not called. You have "
        "no handoff tools now: answer the user yourself."
    )


async def test_is_enabled_false_removes_the_tool(stream: bool) -> None:
    triage = scripted_agent("triage", reply("I'll help you myself."))
    billing = scripted_agent("billing")
    tech = scripted_agent("tech")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, is_enabled=False)
        .with_handoff(triage, tech)
        .build()
    )
    await run_turn(workflow, "hi", stream=stream)
    assert received(triage).tool_names == ("handoff_to_tech",)


async def test_the_hooks_get_the_hosted_conversation_id(
    stream: bool, store: ConversationStore
) -> None:
    ids: list[str | None] = []
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing", reply("Refunded."))

    def note(context: HandoffContext) -> None:
        ids.append(context.conversation_id)

    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing, on_handoff=note)
    host = ConversationHost(builder, store)
    if stream:
        async for _ in host.stream("conv-42", "refund"):
            pass
    else:
        await host.send("conv-42", "refund")
    assert ids == ["conv-42"]


def test_hook_arguments_are_checked_at_the_call(stream: bool) -> None:
    del stream
    a, b = scripted_agent("a"), scripted_agent("b")
    builder = HandoffWorkflowBuilder(a)
    with pytest.raises(TypeError, match=r"^on_handoff must be callable, not str\.$"):
        builder.with_handoff(a, b, on_handoff="audit")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^is_enabled must be a bool or a callable, not str\.$"):
        builder.with_handoff(a, b, is_enabled="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^approval must be a bool or a callable, not int\.$"):
        builder.with_handoff(a, b, approval=1)  # type: ignore[arg-type]


# -- is_enabled predicates run together, each within the hook limit ---------------------------


def two_targets(
    first: HandoffPredicate, second: HandoffPredicate
) -> tuple[HandoffWorkflowBuilder, Agent, Agent, Agent]:
    triage = scripted_agent("triage", reply("I'll help you myself."))
    billing, tech = scripted_agent("billing"), scripted_agent("tech")
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, is_enabled=first)
        .with_handoff(triage, tech, is_enabled=second)
        .with_timeouts(agent_call=60)  # a backstop: nothing here waits for it
    )
    return builder, triage, billing, tech


async def test_is_enabled_predicates_run_together(stream: bool) -> None:
    """Each waits until the other has started: asked one after another, neither would answer."""
    started = {"billing": asyncio.Event(), "tech": asyncio.Event()}

    async def after_the_other(context: HandoffContext) -> bool:
        started[context.target].set()
        other = "tech" if context.target == "billing" else "billing"
        await started[other].wait()
        return context.target == "tech"

    builder, triage, _, _ = two_targets(after_the_other, after_the_other)

    turn = await run_turn(builder.build(), "hi", stream=stream)

    assert turn.result.status == "completed"
    assert received(triage).tool_names == ("handoff_to_tech",)


async def test_an_error_surfaces_while_another_predicate_hangs(stream: bool) -> None:
    never = asyncio.Event()
    cancelled: list[str] = []

    async def hangs(context: HandoffContext) -> bool:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(context.target)
            raise
        return True

    def broken(context: HandoffContext) -> bool:
        raise LookupError("no such roster")

    builder, triage, _, _ = two_targets(hangs, broken)

    with pytest.raises(HandoffHookError) as failure:
        await run_turn(builder.build(), "hi", stream=stream)

    error = failure.value
    assert (error.hook, error.source, error.target) == ("is_enabled", "triage", "tech")
    assert str(error) == (
        "The is_enabled of the handoff from 'triage' to 'tech' (handoff_to_tech) raised "
        "LookupError: no such roster. Nothing was routed."
    )
    assert cancelled == ["billing"]  # the one still waiting was stopped, not left behind
    assert client_of(triage).calls == []


async def test_a_predicate_that_never_answers_is_an_error_naming_its_edge(stream: bool) -> None:
    never = asyncio.Event()

    async def hangs(context: HandoffContext) -> bool:
        await never.wait()
        return True

    builder, triage, _, _ = two_targets(lambda context: True, hangs)

    with pytest.raises(HandoffHookError) as failure:
        await run_turn(builder.with_timeouts(hook=0.05).build(), "hi", stream=stream)

    error = failure.value
    assert (error.hook, error.source, error.target, error.tool_name) == (
        "is_enabled",
        "triage",
        "tech",
        "handoff_to_tech",
    )
    assert str(error) == (
        "The is_enabled of the handoff from 'triage' to 'tech' (handoff_to_tech) gave no answer "
        "within 0.05 s (with_timeouts(hook=...)). Nothing was routed."
    )
    assert isinstance(error.__cause__, TimeoutError)
    assert client_of(triage).calls == []


async def test_an_on_handoff_that_never_answers_is_an_error_naming_its_edge(stream: bool) -> None:
    never = asyncio.Event()

    async def hangs(context: HandoffContext) -> None:
        await never.wait()

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing, on_handoff=hangs)
        .with_timeouts(hook=0.05)
        .build()
    )

    with pytest.raises(HandoffHookError, match=r"^The on_handoff of .* gave no answer within"):
        await run_turn(workflow, "refund", stream=stream)
    assert client_of(billing).calls == []


def test_the_hook_limit_is_checked_at_the_call(stream: bool) -> None:
    del stream
    builder = HandoffWorkflowBuilder(scripted_agent("a"))
    with pytest.raises(ValueError, match=r"^hook must be a positive number of seconds or None"):
        builder.with_timeouts(hook=0)
    builder.with_timeouts(hook=None)  # no limit of its own: the agent call's bounds it


# -- a handoff that is never offered does not take its name ---------------------------------------


async def test_a_disabled_handoff_leaves_its_tool_name_to_the_enabled_one(stream: bool) -> None:
    """A flag picks which of two agents `transfer_to_billing` leads to."""
    new_billing_live = True
    triage = scripted_agent("triage", call_tool("transfer_to_billing", goal="Refund A-1."))
    old, new = scripted_agent("old_billing"), scripted_agent("new_billing", reply("Refunded."))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, old, tool_name="transfer_to_billing",
                      is_enabled=not new_billing_live)
        .with_handoff(triage, new, tool_name="transfer_to_billing", is_enabled=new_billing_live)
        .build()
    )  # fmt: skip

    turn = await run_turn(workflow, "refund A-1", stream=stream)

    assert received(triage).tool_names == ("transfer_to_billing",)
    assert [(h.source, h.target) for h in turn.result.handoffs] == [("triage", "new_billing")]
    assert client_of(old).calls == []


async def test_a_disabled_handoff_leaves_its_tool_name_to_the_agents_own_tool(
    stream: bool,
) -> None:
    @tool(name="handoff_to_billing", description="Opens a billing ticket.")
    def open_ticket() -> str:
        return "Ticket T-1 opened."

    triage = scripted_agent(
        "triage", call_tool("handoff_to_billing"), reply("Done."), tools=[open_ticket]
    )
    billing = scripted_agent("billing")
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing, is_enabled=False).build()
    )

    turn = await run_turn(workflow, "open a ticket", stream=stream)

    assert received(triage, 0).tool_names == ("handoff_to_billing",)  # its own tool
    assert turn.blocked == []
    assert received(triage).rendered.splitlines()[-1].endswith(": Ticket T-1 opened.")
    assert turn.result.text == "Done."


def test_two_handoffs_with_one_name_still_collide_when_both_may_be_offered(stream: bool) -> None:
    del stream
    triage, old, new = scripted_agent("triage"), scripted_agent("old"), scripted_agent("new")
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, old, tool_name="transfer_to_billing", is_enabled=lambda c: True)
        .with_handoff(triage, new, tool_name="transfer_to_billing")
    )
    with pytest.raises(HandoffConfigurationError) as failure:
        builder.build()
    assert failure.value.problems == (
        "Agent 'triage' would get two handoff tools named 'transfer_to_billing' (to 'old' and "
        "'new'); pass tool_name= to with_handoff for one of them.",
    )
