"""The turn engine with plain values: no workflow, no model, no runner.

Each test drives a :class:`TurnEngine` by hand, as a driver would: it reads the step the engine
returns, makes up the agent's run, and hands it back.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from agent_framework import AgentResponse, Content, Message
from typing_extensions import override

from handoff_builder import (
    AgentReply,
    Decision,
    EndTurn,
    EscalationEvent,
    GroupChatManager,
    HandoffEvent,
    NextAgent,
    TurnStart,
    TurnTimeoutEvent,
)
from handoff_builder._engine import (
    AgentCall,
    Done,
    Hop,
    RunAgent,
    Step,
    TurnEngine,
    TurnRules,
    Wait,
)
from handoff_builder._events import RoutingStep
from handoff_builder._ledger import HostSnapshot
from handoff_builder._participant import AgentRun


class Arrows(GroupChatManager):
    """Starts at ``triage``; a reply ``-> name`` hands the conversation to ``name``.

    An agent whose reply waits for answers carries on once they are in.
    """

    def __init__(self, max_iterations: int = 10) -> None:
        super().__init__(max_iterations=max_iterations)

    @override
    async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
        return NextAgent(start.previous_agent or "triage")

    @override
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        if reply.unfinished:  # it waits for answers, then carries on
            return NextAgent(reply.agent)
        text = reply.messages[-1].text if reply.messages else ""
        if text.startswith("-> "):
            target = text.removeprefix("-> ")
            handoff = HandoffEvent(
                reply.agent, target, goal="help", tool_name=f"to_{target}", call_id="c"
            )
            return NextAgent(target, handoff, events=(handoff,))
        return EndTurn()


def engine(
    *,
    agents: Sequence[str] = ("triage", "billing"),
    max_iterations: int = 10,
    agent_timeout: float | None = 120.0,
    turn_timeout: float | None = 600.0,
) -> TurnEngine:
    rules = TurnRules(frozenset(agents))
    manager = Arrows(max_iterations)
    made = TurnEngine(manager, rules, agent_timeout=agent_timeout, turn_timeout=turn_timeout)
    made.saves = True  # as with a journal: each step carries what to save
    return made


def saved(step: Hop | Wait | Done) -> HostSnapshot:
    """The snapshot ``step`` says to save first."""
    assert step.snapshot is not None
    return step.snapshot


def said(agent: str, text: str) -> AgentRun:
    return AgentRun(
        AgentResponse(messages=[Message(role="assistant", contents=[text])]), (), frozenset()
    )


def user(text: str) -> list[Message]:
    return [Message(role="user", contents=[text])]


async def run_through(engine: TurnEngine, step: Step, replies: dict[str, str]) -> Step:
    """Carry out hops and agent runs with canned replies until the turn waits or ends."""
    now = 0.0
    while isinstance(step, Hop | RunAgent):
        if isinstance(step, Hop):
            step = engine.hop(step.agent, now, no_handoffs=step.no_handoffs)
            continue
        step = await engine.proceed(said(step.call.agent, replies[step.call.agent]), now)
    return step


async def test_a_turn_is_a_hop_a_call_and_a_result() -> None:
    turns = engine(agent_timeout=30.0, turn_timeout=100.0)
    step = await turns.begin(user("hello"), None, now=0.0)

    assert isinstance(step, Hop)
    assert (step.agent, step.no_handoffs) == ("triage", False)
    # the hop is saved before triage runs: as the turn stood, nobody has spoken yet
    assert (saved(step).state.speaker, saved(step).state.next) == (None, "triage")
    assert saved(step).turn_open
    assert [m.text for m in saved(step).history] == ["hello"]

    call = turns.hop("triage", now=5.0)
    assert isinstance(call, RunAgent)
    assert call.call == AgentCall("triage", "run", no_handoffs=False, seconds=30.0)

    done = await turns.proceed(said("triage", "Hi there."), now=6.0)
    assert isinstance(done, Done)
    assert (done.result.status, done.result.active_agent) == ("completed", "triage")
    assert [(m.author_name, m.text) for m in done.result.messages] == [("triage", "Hi there.")]
    assert not saved(done).turn_open
    assert saved(done).last_result is done.result
    assert turns.ledger.turn is None
    assert turns.ledger.speaker == "triage"


async def test_a_handoff_is_the_next_hop_with_its_event_in_the_trail() -> None:
    turns = engine()
    first = await turns.begin(user("my bill"), None, now=0.0)
    assert isinstance(first, Hop)
    ran = turns.hop(first.agent, now=0.0)
    assert isinstance(ran, RunAgent)

    step = await turns.proceed(said("triage", "-> billing"), now=1.0)

    assert isinstance(step, Hop)
    assert step.agent == "billing"
    [routing, event] = step.trail
    assert isinstance(routing, RoutingStep)
    assert (routing.source, routing.target) == ("triage", "billing")
    assert isinstance(event, HandoffEvent)
    assert (event.source, event.target) == ("triage", "billing")
    # saved with triage as the last speaker and billing about to run
    assert (saved(step).state.speaker, saved(step).state.next) == ("triage", "billing")
    assert turns.ledger.active_agent == "billing"

    done = await run_through(turns, step, {"billing": "Refunded."})
    assert isinstance(done, Done)
    assert done.result.active_agent == "billing"
    assert [h.target for h in done.result.handoffs] == ["billing"]


async def test_the_next_turn_starts_where_the_last_one_ended() -> None:
    turns = engine()
    await run_through(
        turns, await turns.begin(user("a"), None, 0.0), {"triage": "-> billing", "billing": "ok"}
    )

    step = await turns.begin(user("b"), None, now=0.0)

    assert isinstance(step, Hop)
    assert step.agent == "billing"


async def test_a_call_past_the_turns_deadline_is_not_made() -> None:
    turns = engine(agent_timeout=30.0, turn_timeout=10.0)
    first = await turns.begin(user("hello"), None, now=100.0)
    assert isinstance(first, Hop)
    ran = turns.hop("triage", now=100.0)
    assert isinstance(ran, RunAgent)
    assert ran.call.seconds == 10.0

    handed = await turns.proceed(said("triage", "-> billing"), now=111.0)
    assert isinstance(handed, Hop)
    done = turns.hop(handed.agent, now=111.0)

    assert isinstance(done, Done)
    assert done.result.status == "turn_timeout"
    [timeout] = [e for e in done.trail if isinstance(e, TurnTimeoutEvent)]
    assert (timeout.limit, timeout.agent) == ("turn", "billing")


async def test_a_call_cut_short_ends_the_turn_with_the_limit_it_hit() -> None:
    turns = engine(agent_timeout=5.0, turn_timeout=100.0)
    first = await turns.begin(user("hello"), None, now=0.0)
    assert isinstance(first, Hop)
    turns.hop("triage", now=0.0)

    done = turns.cut_short(now=5.0)

    assert isinstance(done, Done)
    assert (done.result.status, done.result.active_agent) == ("agent_timeout", "triage")


async def test_one_invocation_past_the_cap_escalates_with_an_apology() -> None:
    turns = engine(max_iterations=2)
    step = await turns.begin(user("loop"), None, now=0.0)

    done = await run_through(turns, step, {"triage": "-> billing", "billing": "-> triage"})

    assert isinstance(done, Done)
    assert done.result.status == "max_iterations"
    assert isinstance(done.result.escalation, EscalationEvent)
    assert done.result.escalation.reason == "max_iterations"
    assert done.apology is not None
    assert turns.ledger.history[-1] is done.apology
    assert done.apology.text == turns.rules.apology


async def test_an_unknown_agent_ends_the_turn_with_a_warning() -> None:
    turns = engine(agents=("triage",))
    step = await turns.begin(user("x"), None, 0.0)

    done = await run_through(turns, step, {"triage": "-> nobody"})

    assert isinstance(done, Done)
    assert "The manager selected unknown agent 'nobody'." in done.trail


async def asking_approval(turns: TurnEngine) -> tuple[Content, Step]:
    """A turn in which triage calls ``refund``, a tool that needs approval (request ``r1``)."""
    first = await turns.begin(user("refund"), None, 0.0)
    assert isinstance(first, Hop)
    turns.hop("triage", 0.0)
    call = Content.from_function_call(call_id="c1", name="refund", arguments="{}")
    request = Content.from_function_approval_request(id="r1", function_call=call)
    asking = Message(role="assistant", contents=[call, request])
    run = AgentRun(AgentResponse(messages=[asking]), (), frozenset())
    return request, await turns.proceed(run, 1.0)


async def test_a_request_makes_the_turn_wait_and_its_answer_carries_it_out() -> None:
    turns = engine()
    request, wait = await asking_approval(turns)

    assert isinstance(wait, Wait)
    assert [r.id for r in wait.requests] == ["r1"]
    assert saved(wait).state.pending is not None
    assert turns.ledger.active_agent == "triage"
    with pytest.raises(ValueError, match="No pending request with id 'r9'"):
        turns.answer("r9", request.to_function_approval_response(approved=True))
    assert turns.answer("r1", request.to_function_approval_response(approved=True))

    resolve = turns.after_answers(2.0)
    assert resolve.call.kind == "resolve"
    assert resolve.call.agent == "triage"
    result = Content.from_function_result(call_id="c1", result="refunded")
    settled = AgentRun(
        AgentResponse(messages=[Message(role="tool", contents=[result])]), (), frozenset()
    )
    step = await turns.proceed(settled, 3.0)

    # triage carries on after its approved tool ran, then the turn ends
    done = await run_through(turns, step, {"triage": "Done, refunded."})
    assert isinstance(done, Done)
    assert done.result.status == "completed"
    assert turns.ledger.pending.requests == {}


async def test_answers_whose_call_failed_wait_to_be_answered_again() -> None:
    turns = engine()
    request, _ = await asking_approval(turns)
    turns.answer("r1", request.to_function_approval_response(approved=True))
    turns.after_answers(2.0)
    turns.ledger.pending.requests.clear()  # as a local runner's resolve leaves them

    turns.failed()

    assert list(turns.ledger.pending.requests) == ["r1"]
    assert turns.ledger.pending.answers == {}


async def test_a_run_the_engine_did_not_ask_for_is_refused() -> None:
    turns = engine()
    with pytest.raises(RuntimeError, match="No agent call is in flight"):
        await turns.proceed(said("triage", "hi"), 0.0)


async def test_input_is_refused_while_a_turn_is_open() -> None:
    turns = engine()
    assert isinstance(turns.refusal([]), ValueError)
    await turns.begin(user("a"), None, 0.0)
    assert isinstance(turns.refusal(user("b")), RuntimeError)
    with pytest.raises(RuntimeError, match="already in progress"):
        await turns.begin(user("b"), None, 0.0)


async def test_a_loaded_state_carries_on_where_it_was_saved() -> None:
    first = engine()
    hop = await first.begin(user("my bill"), None, 0.0)
    assert isinstance(hop, Hop)
    first.hop("triage", 0.0)
    handed = await first.proceed(said("triage", "-> billing"), 1.0)
    assert isinstance(handed, Hop)

    second = engine()
    second.load(list(saved(handed).history), saved(handed).state)
    step = second.resume(now=50.0)

    assert isinstance(step, RunAgent)
    assert step.call.agent == "billing"
    done = await run_through(second, step, {"billing": "Sorted."})
    assert isinstance(done, Done)
    assert [m.text for m in done.result.messages] == ["-> billing", "Sorted."]


async def test_steps_carry_no_snapshot_when_nothing_saves_them() -> None:
    turns = engine()
    turns.saves = False

    hop = await turns.begin(user("hello"), None, 0.0)
    assert isinstance(hop, Hop)
    turns.hop("triage", 0.0)
    done = await turns.proceed(said("triage", "Hi."), 1.0)

    assert isinstance(done, Done)
    assert (hop.snapshot, done.snapshot) == (None, None)
    assert done.result.text == "Hi."
