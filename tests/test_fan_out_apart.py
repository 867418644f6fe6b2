"""A fan-out run apart (each expert asked on its own, then the caller going on) reads as one run.

The Temporal workflow runs each expert of a caller's response as an activity of its own: the
caller's run stops at the response (its experts come back due), each expert is asked alone, their
answers are put into the run (``_fanout``), and the caller goes on from there. Here the same
steps run in one process, through an agent runner that does what the workflow does, and every
scenario must come out as it does with the default runner: the same conversation, the same
results in call order, the same delegations, the same model calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from agent_framework import Agent, Message, tool

from handoff_builder import GroupChatHost, HandoffTurnResult, HandoffWorkflowBuilder
from handoff_builder._engine import AgentCall
from handoff_builder._fanout import goes_on, joined, with_answers
from handoff_builder._participant import AgentRun
from handoff_builder._runner import Streams
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    handoff_to,
    never_answer,
    received,
    reply,
    respond,
    scripted_agent,
    slow,
)
from tests.helpers import run_turn
from tests.test_delegation import (
    USER,
    answer,
    approval_tool,
    assert_valid,
    requests_of,
    result_of,
    results_in,
)


class ApartRunner:
    """Runs a caller's experts apart, as the Temporal workflow does, here in this process."""

    def __init__(self, host: GroupChatHost) -> None:
        self.host = host
        self.asked: list[str] = []  # the experts asked apart, in the order they were due

    async def run(self, call: AgentCall, streams: Streams | None) -> AgentRun:
        host = self.host
        if call.kind != "run":
            return await host.run_here(call, streams)
        run = await host.run_here(call, streams, experts_apart=True)
        while run.due is not None:
            self.asked += [frame.expert for frame in run.due.frames]
            asked = await asyncio.gather(*(host.ask_here(f, streams) for f in run.due.frames))
            answered = with_answers(run, asked)
            if not goes_on(answered, run):
                return answered
            more = await host.run_here(call, streams, experts_apart=True, so_far=answered)
            run = joined(answered, more)
        return run


Scenario = Callable[[], tuple[HandoffWorkflowBuilder, dict[str, Agent]]]


def three_experts(
    policy: Sequence[Any], legal: Sequence[Any], ledger: Sequence[Any], **options: Any
) -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """triage asks policy, legal and ledger in one response, then replies "All in."."""
    asks = [call_tool(f"ask_{name}", task=f"{name}?") for name in ("policy", "legal", "ledger")]
    triage = scripted_agent("triage", respond(*asks), reply("All in."))
    agents = {
        "triage": triage,
        "policy": scripted_agent("policy", *policy, tools=options.get("policy_tools")),
        "legal": scripted_agent("legal", *legal),
        "ledger": scripted_agent("ledger", *ledger),
    }
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, agents["policy"], "refund policy")
        .with_delegate(triage, agents["legal"], "legal", timeout=options.get("legal_timeout"))
        .with_delegate(triage, agents["ledger"], "ledger lookups")
    )
    return builder, agents


def failing_expert() -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    def broken(call: ModelCall) -> Step:
        raise RuntimeError("legal archive down")

    return three_experts([slow("Policy: 30 days.", 0.05)], [broken], [reply("Ledger: paid.")])


def expert_past_its_timeout() -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    return three_experts(
        [reply("Policy: 30 days.")], [never_answer()], [reply("Ledger: paid.")], legal_timeout=0.2
    )


def two_rounds_and_a_used_up_delegate() -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """Two responses that ask experts; the second asks policy again, past its max_calls."""

    @tool
    def look_up() -> str:
        """Look the order up."""
        return "order A-1"

    triage = scripted_agent(
        "triage",
        respond(call_tool("ask_policy", task="policy?"), call_tool("look_up")),
        respond(call_tool("ask_policy", task="again?"), call_tool("ask_legal", task="legal?")),
        reply("Done."),
        tools=[look_up],  # a tool of its own, beside the delegates
    )
    policy = scripted_agent("policy", reply("Policy: 30 days."))
    legal = scripted_agent("legal", reply("Legal: fine."))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "refund policy", max_calls=1)
        .with_delegate(triage, legal, "legal")
    )
    return builder, {"triage": triage, "policy": policy, "legal": legal}


def a_handoff_beside_the_experts() -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """A response that hands off and asks an expert: the expert answers, then billing runs."""
    triage = scripted_agent(
        "triage", respond(call_tool("ask_policy", task="policy?"), handoff_to("billing"))
    )
    policy = scripted_agent("policy", reply("Policy: 30 days."))
    billing = scripted_agent("billing", reply("Billing here."))
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_delegate(triage, policy, "refund policy")
        .with_handoff(triage, billing)
    )
    return builder, {"triage": triage, "policy": policy, "billing": billing}


SCENARIOS: dict[str, Scenario] = {
    "failing-expert": failing_expert,
    "expert-past-its-timeout": expert_past_its_timeout,
    "two-rounds-used-up": two_rounds_and_a_used_up_delegate,
    "handoff-beside-experts": a_handoff_beside_the_experts,
}


def outcome(
    result: HandoffTurnResult, agents: dict[str, Agent]
) -> tuple[list[Any], list[Any], list[Any], dict[str, int]]:
    """What must not depend on where the experts ran."""
    conversation = [(m.role, m.author_name, m.text) for m in result.conversation]
    messages = received(agents["triage"]).messages
    names = {c.call_id: c.name for m in messages for c in m.contents if c.type == "function_call"}
    seen = [(names[call], text) for call, text in results_in(messages)]  # ids differ per run
    delegations = [(d.expert, d.outcome, d.result) for d in result.delegations]
    calls = {name: len(client_of(agent).calls) for name, agent in agents.items()}
    return conversation, seen, sorted(delegations), calls


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_a_fan_out_run_apart_reads_as_one_run(scenario: str) -> None:
    builder, agents = SCENARIOS[scenario]()
    expected = outcome((await run_turn(builder.build(), USER)).result, agents)

    builder, agents = SCENARIOS[scenario]()
    workflow = builder.build()
    host = workflow.get_start_executor()
    assert isinstance(host, GroupChatHost)
    runner = host.runner = ApartRunner(host)
    result = (await run_turn(workflow, USER)).result

    assert runner.asked  # its experts were asked apart
    assert outcome(result, agents) == expected
    assert_valid(result.conversation)


async def test_an_approval_inside_one_expert_run_apart_keeps_the_others_answers() -> None:
    ran: list[str] = []
    lookup = call_tool("lookup_order", order="A-1")
    builder, agents = three_experts(
        [lookup, reply("Policy: A-1 is paid.")],
        [reply("Legal: fine.")],
        [reply("Ledger: paid.")],
        policy_tools=[approval_tool(ran)],
    )
    workflow = builder.build()
    host = workflow.get_start_executor()
    assert isinstance(host, GroupChatHost)
    runner = host.runner = ApartRunner(host)

    [request] = requests_of(list(await workflow.run(USER)))
    assert request.data.function_call.name == "lookup_order"
    result = result_of(await answer(workflow, request, approved=True))

    assert runner.asked == ["policy", "legal", "ledger"]
    assert ran == ["A-1"]
    calls = {name: len(client_of(agent).calls) for name, agent in agents.items()}
    assert calls == {"triage": 2, "policy": 2, "legal": 1, "ledger": 1}
    asks = [
        c.call_id
        for m in received(agents["triage"]).messages
        for c in m.contents
        if c.type == "function_call"
    ]
    assert results_in(received(agents["triage"]).messages) == list(
        zip(asks, ["Policy: A-1 is paid.", "Legal: fine.", "Ledger: paid."], strict=True)
    )
    assert result.text == "All in."
    assert_valid(result.conversation)


def test_answers_go_where_their_calls_waited_in_call_order() -> None:
    """The results of one response's calls read as one tool message, in call order."""
    from agent_framework import AgentResponse, Content

    from handoff_builder._delegation import DueExperts
    from handoff_builder._state import DelegationFrame

    def waiting(call_id: str) -> Content:
        call = Content.from_function_call(call_id=call_id, name=f"ask_{call_id}", arguments="{}")
        call.user_input_request = True
        return call

    plain = Content.from_function_call(call_id="b", name="look_up", arguments="{}")
    response = [
        Message(role="assistant", contents=[waiting("a"), plain, waiting("c")]),
        Message(role="tool", contents=[Content.from_function_result(call_id="b", result="B")]),
    ]
    frames = tuple(
        DelegationFrame("triage", f"x{c}", f"ask_{c}", c, "?", 1, started=False) for c in "ac"
    )
    run = AgentRun(
        AgentResponse(messages=response),
        (),
        frozenset(),
        due=DueExperts(frames, (None, None), goes_on=True),
    )
    answers = [
        AgentRun(
            AgentResponse(
                messages=[
                    Message(
                        role="tool",
                        contents=[Content.from_function_result(call_id=c, result=c.upper())],
                    )
                ]
            ),
            (),
            frozenset(),
        )
        for c in "ac"
    ]
    answered = with_answers(run, answers)
    messages = answered.response.messages
    assert [m.role for m in messages] == ["assistant", "tool"]
    assert [(c.call_id, bool(c.user_input_request)) for c in messages[0].contents] == [
        ("a", False), ("b", False), ("c", False),
    ]  # fmt: skip
    assert results_in(messages) == [("a", "A"), ("b", "B"), ("c", "C")]
    assert response[0].contents[0].user_input_request  # the run's own messages are not changed
    assert goes_on(answered, run)
