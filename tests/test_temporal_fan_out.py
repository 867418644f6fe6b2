"""Fan-out on Temporal: the experts of one response run as concurrent activities of their own.

Against the dev server ``.ci/with_servers.py`` starts (``HANDOFF_BUILDER_TEMPORAL_ADDRESS``;
without it the tests skip, saying so). The caller's activity returns its experts due, the
workflow asks each in an activity (at most ``with_max_parallel_delegations`` at a time), and the
caller goes on in an activity of its own with their answers in call order. Each finished
activity is in the workflow's history: a crash, or a retry, runs none of them again. Scripted
models count every call.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent

from handoff_builder import HandoffWorkflowBuilder, PendingRequestsError, UnexpectedAnswersError
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    never_answer,
    received,
    reply,
    respond,
    scripted_agent,
    slow,
)

temporalio = pytest.importorskip("temporalio")

from temporalio.client import Client  # noqa: E402

from handoff_builder.temporal import TemporalConversationHost  # noqa: E402
from tests.test_delegation import approval_tool, results_in  # noqa: E402
from tests.test_temporal import (  # noqa: E402
    Workers,
    cid,
    replays,
    retrying,
    serving,
    wait_for,
)

EXPERTS = ("policy", "legal", "ledger")


@pytest.fixture
def workers(queue: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(queue, tmp_path / "calls.jsonl")
    yield started
    for process in started.processes:
        process.kill()
        process.wait(timeout=30)


def fan_out(
    steps: dict[str, Sequence[Any]],
    *,
    triage_steps: Sequence[Any] = (),
    timeouts: dict[str, float] | None = None,
    tools: dict[str, list[Any]] | None = None,
    max_parallel: int | None = None,
) -> tuple[HandoffWorkflowBuilder, dict[str, Agent]]:
    """triage asks policy, legal and ledger in one response, then replies "All in."."""
    asks = [call_tool(f"ask_{name}", task=f"{name}?") for name in EXPERTS]
    triage = scripted_agent("triage", respond(*asks), *(triage_steps or [reply("All in.")]))
    agents: dict[str, Agent] = {"triage": triage}
    builder = HandoffWorkflowBuilder(triage)
    for name in EXPERTS:
        agents[name] = scripted_agent(name, *steps[name], tools=(tools or {}).get(name))
        timeout = (timeouts or {}).get(name)
        builder = builder.with_delegate(triage, agents[name], f"{name} questions", timeout=timeout)
    if max_parallel is not None:
        builder = builder.with_max_parallel_delegations(max_parallel)
    return builder, agents


def model_calls(agents: dict[str, Agent]) -> dict[str, int]:
    return {name: len(client_of(agent).calls) for name, agent in agents.items()}


def read_in_order(agents: dict[str, Agent]) -> list[tuple[str, str]]:
    """What triage's last model call read as its experts' results: (tool, result), in order."""
    messages = received(agents["triage"]).messages
    names = {c.call_id: c.name for m in messages for c in m.contents if c.type == "function_call"}
    return [(str(names[call]), text) for call, text in results_in(messages)]


async def activities(client: Client, conversation: str) -> list[tuple[str, str]]:
    """The workflow's activity events, in order: ("scheduled" | "completed", activity id)."""
    events = (await client.get_workflow_handle(conversation).fetch_history()).events
    ids: dict[int, str] = {}
    seen: list[tuple[str, str]] = []
    for event in events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            ids[event.event_id] = event.activity_task_scheduled_event_attributes.activity_id
            seen.append(("scheduled", ids[event.event_id]))
        elif event.HasField("activity_task_completed_event_attributes"):
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
            seen.append(("completed", ids[scheduled]))
    return seen


def most_at_once(seen: list[tuple[str, str]], kind: str) -> int:
    """The most activities named ``:kind:`` that were open at once."""
    open_now = peak = 0
    for what, activity_id in seen:
        if f":{kind}:" in activity_id:
            open_now += 1 if what == "scheduled" else -1
            peak = max(peak, open_now)
    return peak


async def test_the_experts_of_one_response_run_as_concurrent_activities(
    client: Client, queue: str
) -> None:
    # The first expert answers last: the caller still reads the answers in call order.
    builder, agents = fan_out({
        "policy": [slow("Policy: 30 days.", 0.6)],
        "legal": [slow("Legal: fine.", 0.3)],
        "ledger": [reply("Ledger: paid.")],
    })  # fmt: skip
    conversation = cid()
    async with serving(client, builder, queue) as host:
        turn = await host.send(conversation, "refund?")
        history = await host.history(conversation)
        await replays(client, conversation)
    assert turn.text == "All in."
    assert read_in_order(agents) == [
        ("ask_policy", "Policy: 30 days."),
        ("ask_legal", "Legal: fine."),
        ("ask_ledger", "Ledger: paid."),
    ]
    # in call order (in one process: as they finish)
    assert [(d.expert, d.outcome) for d in turn.delegations] == [
        ("policy", "answered"), ("legal", "answered"), ("ledger", "answered"),
    ]  # fmt: skip
    assert model_calls(agents) == {"triage": 2, "policy": 1, "legal": 1, "ledger": 1}
    seen = await activities(client, conversation)
    assert [a for what, a in seen if what == "scheduled"] == [
        "1:invoke:triage", "2:ask:policy", "3:ask:legal", "4:ask:ledger", "5:invoke:triage",
    ]  # fmt: skip
    assert most_at_once(seen, "ask") == 3  # all three at once
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


async def test_max_parallel_delegations_bounds_the_activities_of_a_fan_out(
    client: Client, queue: str
) -> None:
    builder, agents = fan_out(
        {name: [slow(f"{name}: yes.", 0.2)] for name in EXPERTS}, max_parallel=2
    )
    conversation = cid()
    async with serving(client, builder, queue) as host:
        turn = await host.send(conversation, "refund?")
        await replays(client, conversation)
    assert turn.text == "All in."
    assert read_in_order(agents) == [(f"ask_{name}", f"{name}: yes.") for name in EXPERTS]
    assert most_at_once(await activities(client, conversation), "ask") == 2


async def test_a_retried_caller_does_not_ask_its_finished_experts_again(
    client: Client, queue: str
) -> None:
    """The caller's model fails once as it goes on after its experts answered: Temporal retries
    that activity alone, and no expert runs again."""
    failed: list[bool] = []

    def once_down(call: ModelCall) -> Step:
        if not failed:
            failed.append(True)
            raise ConnectionError("the model is down")
        return reply("All in.")

    builder, agents = fan_out(
        {name: [reply(f"{name}: yes.")] for name in EXPERTS}, triage_steps=[once_down, once_down]
    )
    conversation = cid()
    async with serving(client, builder, queue, agent_calls=retrying(3)) as host:
        turn = await host.send(conversation, "refund?")
        await replays(client, conversation)
    assert turn.text == "All in."
    assert model_calls(agents) == {"triage": 3, "policy": 1, "legal": 1, "ledger": 1}
    assert read_in_order(agents) == [(f"ask_{name}", f"{name}: yes.") for name in EXPERTS]


async def test_one_experts_failure_or_timeout_is_that_calls_tool_error(
    client: Client, queue: str
) -> None:
    def broken(call: ModelCall) -> Step:
        raise RuntimeError("legal archive down")

    builder, agents = fan_out(
        {
            "policy": [reply("Policy: 30 days.")],
            "legal": [broken],
            "ledger": [never_answer(), reply("never read")],
        },
        timeouts={"ledger": 0.5},
    )
    conversation = cid()
    started = time.monotonic()
    async with serving(client, builder, queue) as host:
        turn = await host.send(conversation, "refund?")
        await replays(client, conversation)
    assert time.monotonic() - started < 15
    assert turn.text == "All in."
    assert read_in_order(agents) == [
        ("ask_policy", "Policy: 30 days."),
        (
            "ask_legal",
            "Error: legal could not answer (RuntimeError: legal archive down). "
            "Carry on without its answer.",
        ),
        (
            "ask_ledger",
            "Error: ledger gave no answer within 0.5 s, its time limit, and was stopped. "
            "Carry on without its answer.",
        ),
    ]
    assert sorted((d.expert, d.outcome) for d in turn.delegations) == [
        ("ledger", "timed_out"), ("legal", "failed"), ("policy", "answered"),
    ]  # fmt: skip
    assert model_calls(agents) == {"triage": 2, "policy": 1, "legal": 1, "ledger": 1}


async def test_an_approval_inside_one_expert_keeps_the_others_answers(
    client: Client, queue: str
) -> None:
    ran: list[str] = []
    builder, agents = fan_out(
        {
            "policy": [call_tool("lookup_order", order="A-1"), reply("Policy: A-1 is paid.")],
            "legal": [reply("Legal: fine.")],
            "ledger": [reply("Ledger: paid.")],
        },
        tools={"policy": [approval_tool(ran)]},
    )
    conversation = cid()
    async with serving(client, builder, queue) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "refund?")
        [request] = waiting.value.requests
        assert model_calls(agents) == {"triage": 1, "policy": 1, "legal": 1, "ledger": 1}
        answer = request.to_function_approval_response(approved=True)
        turn = await host.respond(conversation, {str(request.id): answer})
        await replays(client, conversation)
    assert ran == ["A-1"]
    assert turn.text == "All in."
    assert model_calls(agents) == {"triage": 2, "policy": 2, "legal": 1, "ledger": 1}
    assert read_in_order(agents) == [
        ("ask_policy", "Policy: A-1 is paid."),
        ("ask_legal", "Legal: fine."),
        ("ask_ledger", "Ledger: paid."),
    ]
    assert sorted((d.expert, d.outcome) for d in turn.delegations) == [
        ("ledger", "answered"), ("legal", "answered"), ("policy", "answered"),
    ]  # fmt: skip


async def test_a_worker_killed_mid_fan_out_runs_only_the_unfinished_expert_again(
    client: Client, queue: str, workers: Workers
) -> None:
    """SIGKILL once policy answered and while legal answers: a new worker runs legal's
    activity again, once, and the caller goes on; triage's first call and policy's answer,
    finished, are not run again."""
    first = workers.start(TEMPORAL_WORKER_DESK="fan_out", TEMPORAL_WORKER_HANG="legal")
    host = TemporalConversationHost(client, task_queue=queue)
    conversation = cid()
    turn = asyncio.ensure_future(host.send(conversation, "what is the policy?"))

    async def policy_answered() -> bool:
        return ("completed", "2:ask:policy") in await activities(client, conversation)

    await wait_for(lambda: any(c.get("agent") == "legal" for c in workers.calls()))
    deadline = time.monotonic() + 30
    while not await policy_answered():
        assert time.monotonic() < deadline, "policy's answer never reached the history"
        await asyncio.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = workers.start(TEMPORAL_WORKER_DESK="fan_out")
    result = await asyncio.wait_for(turn, timeout=120)  # the heartbeat timeout (20 s), and more
    assert result.text == (
        "triage: policy: what is the policy? | legal: what is the policy?"
    )  # in call order
    calls = [(c["pid"], c["agent"]) for c in workers.calls()]
    assert calls[0] == (first.pid, "triage")
    assert sorted(calls[1:3]) == sorted([(first.pid, "policy"), (first.pid, "legal")])
    assert calls[3:] == [
        (second.pid, "legal"),  # its activity, run again once, elsewhere
        (second.pid, "triage"),  # the caller goes on with both answers
    ]
    history = await host.history(conversation)
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("local", [False, True], ids=["activities", "local_activities"])
async def test_two_experts_that_need_approval_both_wait_on_temporal(
    client: Client, queue: str, local: bool
) -> None:
    """Each expert an activity: two delegate calls that need approval both wait (the
    workflow's requests), the third expert answers once; one ``respond`` with both answers
    lets each expert run, and triage reads the three answers in call order."""
    from tests.test_experts_waiting import desk, results_read

    builder, agents = desk()
    conversation = cid()
    async with serving(client, builder, queue, local_activities=local) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "go")
        pending = await host.pending(conversation)
        answers = {str(r.id): r.to_function_approval_response(approved=True) for r in pending}
        result = await host.respond(conversation, answers)
        await replays(client, conversation)

    names = [r.function_call.name for r in waiting.value.requests if r.function_call]
    assert names == ["ask_policy", "ask_legal"]
    assert [r.to_dict() for r in pending] == [r.to_dict() for r in waiting.value.requests]
    assert result.text == "All answered."
    assert results_read(agents["triage"]) == [
        ("ask_policy", "P."),
        ("ask_legal", "L."),
        ("ask_facts", "F."),
    ]
    calls = {name: len(client_of(agent).calls) for name, agent in agents.items()}
    assert calls == {"triage": 2, "policy": 1, "legal": 1, "facts": 1}


async def test_two_experts_that_need_approval_answered_one_at_a_time_on_temporal(
    client: Client, queue: str
) -> None:
    """One ``respond`` answers one of the two requests: the turn still waits for the other
    alone, and the worker that answers it (a new one: the first was stopped) carries the turn
    on with both answers; no expert runs before."""
    from tests.test_experts_waiting import desk, results_read

    builder, agents = desk()
    conversation = cid()
    async with serving(client, builder, queue) as host:
        with pytest.raises(PendingRequestsError) as waiting:
            await host.send(conversation, "go")
        policy, legal = waiting.value.requests
        with pytest.raises(PendingRequestsError) as still:
            await host.respond(
                conversation, {str(legal.id): legal.to_function_approval_response(approved=True)}
            )
        assert [str(r.id) for r in still.value.requests] == [str(policy.id)]
        assert [str(r.id) for r in await host.pending(conversation)] == [str(policy.id)]
    assert model_calls(agents) == {"triage": 1, "policy": 0, "legal": 0, "facts": 1}

    async with serving(client, builder, queue) as host:  # a new worker, replaying the history
        with pytest.raises(UnexpectedAnswersError) as again:
            await host.respond(
                conversation, {str(legal.id): legal.to_function_approval_response(approved=True)}
            )
        assert again.value.unknown == (str(legal.id),)
        assert again.value.waiting == (str(policy.id),)
        result = await host.respond(
            conversation, {str(policy.id): policy.to_function_approval_response(approved=True)}
        )
        await replays(client, conversation)

    assert result.text == "All answered."
    assert results_read(agents["triage"]) == [
        ("ask_policy", "P."),
        ("ask_legal", "L."),
        ("ask_facts", "F."),
    ]
    assert model_calls(agents) == {"triage": 2, "policy": 1, "legal": 1, "facts": 1}
