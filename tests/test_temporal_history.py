"""Agent calls on Temporal that carry a reference to the conversation, read from a message log.

The chain of digests and the logs are tested without a server; the workflow against the dev
server ``.ci/run`` starts (``HANDOFF_BUILDER_TEMPORAL_ADDRESS``; elsewhere those tests skip,
saying so), and the PostgreSQL log against ``HANDOFF_BUILDER_POSTGRES_DSN``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from typing_extensions import override

pytest.importorskip("temporalio")

from agent_framework import Message
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer

from handoff_builder import HandoffWorkflowBuilder
from handoff_builder.exceptions import (
    CorruptConversationError,
    HandoffBuilderError,
    StoreUnavailableError,
)
from handoff_builder.stores import ChainedMessage, InMemoryConversationStore, MessageLog
from handoff_builder.temporal import (
    ConversationWorkflow,
    TemporalConversationHost,
    TemporalTurnError,
    conversation_worker,
)
from handoff_builder.temporal._activities import AgentActivities
from handoff_builder.temporal._chain import (
    HistoryChain,
    HistoryPage,
    HistoryReference,
    chain_digest,
    last_page,
)
from handoff_builder.temporal._payloads import AgentCallPayload
from handoff_builder.testing import ModelCall, handoff_to, reply, scripted_agent

from .test_temporal import (
    RECORDED,
    ROOT,
    Workers,
    breakable_desk,
    broken_billing_desk,
    echo_desk,
    refund_desk,
    retrying,
    stopped,
    until_continued,
    wait_for,
    worker_command,
)


def said(text: str, author: str | None = None) -> Message:
    return Message(role="user", contents=[text], author_name=author)


# -- the chain of digests (no server) ----------------------------------------------------


def test_a_reference_carries_the_messages_the_log_may_lack_and_names_the_rest() -> None:
    chain = HistoryChain()
    history = [said("one"), said("two")]
    first = chain.reference(history)
    assert (first.length, [e.position for e in first.tail]) == (2, [0, 1])
    assert first.head == chain_digest(chain_digest("", history[0].to_dict()), history[1].to_dict())
    chain.logged(first)  # its call succeeded
    history += [said("three")]
    second = chain.reference(history)
    assert [(e.position, e.body["contents"][0]["text"]) for e in second.tail] == [(2, "three")]
    assert second.tail[0].previous == first.head
    assert chain.reference(history).tail == second.tail  # not logged yet: sent again


def test_a_history_loaded_anew_is_digested_again_and_a_different_message_differs() -> None:
    """After a failure the workflow loads the history anew (new objects): the digests are
    computed again, and what the log holds is still known; a turn run again differently gets
    digests of its own from where it differs."""
    chain = HistoryChain()
    history = [said("one"), said("two")]
    chain.logged(chain.reference(history))
    tried = chain.reference([*history, said("three")])
    reloaded = [Message.from_dict(m.to_dict()) for m in history]
    again = chain.reference([*reloaded, said("three, again")])
    assert [e.position for e in again.tail] == [2]  # the two logged ones are not sent again
    assert again.tail[0].previous == tried.tail[0].previous
    assert again.head != tried.head


def test_a_carried_digest_is_known_to_be_logged_in_the_next_run() -> None:
    history = [said("one"), said("two")]
    first = HistoryChain()
    first.logged(first.reference(history))
    following = HistoryChain(first.last_logged)
    assert following.reference([*history, said("three")]).tail[0].position == 2


# -- the logs ------------------------------------------------------------------------------


def entries_of(bodies: list[dict[str, Any]], previous: str = "", start: int = 0) -> list[Any]:
    made: list[ChainedMessage] = []
    for position, body in enumerate(bodies, start):
        digest = chain_digest(previous, body)
        made.append(ChainedMessage(digest, previous, position, body))
        previous = digest
    return made


async def check_a_log(log: MessageLog, conversation: str) -> None:
    """Each entry once, a history read back by its last digest, a branch nobody names ignored,
    and a missing message named by its position."""
    bodies = [{"text": f"m{n}", "n": n, "é": "ü", "odd": "a\x00b\udc80"} for n in range(5)]
    entries = entries_of(bodies)
    await log.put_chain(conversation, entries[:3])
    await log.put_chain(conversation, entries)  # a retried call: the first three again
    stale = entries_of([{"text": "abandoned"}], entries[2].digest, 3)
    await log.put_chain(conversation, stale)
    assert await log.read_chain(conversation, entries[-1].digest, 5) == entries
    assert [e.body for e in await log.read_chain(conversation, entries[2].digest, 3)] == bodies[:3]
    assert [e.body for e in await log.read_chain(conversation, stale[0].digest, 4)] == [
        *bodies[:3],
        {"text": "abandoned"},
    ]
    assert await log.read_chain(conversation, "", 0) == []
    # A range: the entries at those positions only, the first naming the history before it.
    assert await log.read_chain(conversation, entries[-1].digest, 5, start=3) == entries[3:]
    assert await log.read_chain(conversation, stale[0].digest, 4, start=3) == stale
    assert await log.read_chain(conversation, entries[1].digest, 2, start=2) == []
    with pytest.raises(CorruptConversationError) as missing:
        await log.read_chain(conversation, chain_digest(entries[-1].digest, {"x": 1}), 6)
    assert missing.value.position == 5
    assert "message 5" in str(missing.value)
    with pytest.raises(CorruptConversationError) as missing:
        await log.read_chain(conversation, entries[-1].digest, 6, start=4)  # 5 is not its head
    assert missing.value.position == 5
    await check_pages(log, conversation)


async def check_pages(log: MessageLog, conversation: str) -> None:
    """A history read back from its last page to its first: each page what fits in its bytes,
    read by its own positions, naming the history before it."""
    bodies = [{"text": "x" * (100 + n)} for n in range(1_000)]  # 111 to 1,110 bytes each
    entries = entries_of(bodies)
    await log.put_chain(conversation + "-paged", entries)
    reads: list[int] = []
    counting = CountingLog(log, reads)
    reference = HistoryReference(length=1_000, head=entries[-1].digest, tail=[])
    pages: list[HistoryPage] = []
    while reference.length:
        page = await last_page(counting, conversation + "-paged", reference, 100_000)
        pages.append(page)
        reference = HistoryReference(length=page.start, head=page.previous, tail=[])
    assert [m for page in reversed(pages) for m in page.messages] == bodies
    sizes = [
        sum(len(json.dumps(m, separators=(",", ":"))) for m in page.messages) for page in pages
    ]
    assert all(size <= 100_000 for size in sizes), sizes
    assert len(pages) == 7, [(p.start, p.end) for p in pages]
    # Each page asked for its own messages (256, then 512 when it had room), never the start.
    assert sum(reads) < 2 * 1_000 + 2 * 512, reads
    assert (pages[-1].start, pages[-1].previous) == (0, "")
    one = await last_page(log, conversation + "-paged", HistoryReference(
        length=1, head=entries[0].digest, tail=[]), 10)  # fmt: skip
    assert one.messages == bodies[:1]  # one message at least, larger than the budget or not


class CountingLog:
    """A message log that counts the messages each read asks for."""

    def __init__(self, log: MessageLog, reads: list[int]) -> None:
        self.log, self.reads = log, reads

    async def put_chain(self, conversation_id: str, entries: Sequence[ChainedMessage]) -> None:
        await self.log.put_chain(conversation_id, entries)

    async def read_chain(
        self, conversation_id: str, head: str, length: int, *, start: int = 0
    ) -> list[ChainedMessage]:
        self.reads.append(length - start)
        return await self.log.read_chain(conversation_id, head, length, start=start)

    async def delete(self, conversation_id: str) -> None:
        await self.log.delete(conversation_id)


async def test_the_in_memory_store_is_a_message_log() -> None:
    store = InMemoryConversationStore()
    assert isinstance(store, MessageLog)
    await check_a_log(store, "c1")
    await store.delete("c1")
    with pytest.raises(CorruptConversationError):
        await store.read_chain("c1", "x", 1)


async def test_the_postgres_store_is_a_message_log() -> None:
    dsn = os.environ.get("HANDOFF_BUILDER_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set HANDOFF_BUILDER_POSTGRES_DSN to run the PostgreSQL tests")
    from handoff_builder.stores import PostgresConversationStore

    store = PostgresConversationStore(dsn, table_prefix=f"t{uuid.uuid4().hex[:8]}_")
    try:
        assert isinstance(store, MessageLog)
        await check_a_log(store, "c1")
        await store.delete("c1")
        with pytest.raises(CorruptConversationError):
            await store.read_chain("c1", "x", 1)
    finally:
        await store.drop_tables()
        await store.close()


async def test_a_worker_without_a_log_refuses_a_call_by_reference_for_good() -> None:
    """Not retried: no attempt of that worker can read the history."""
    chain = HistoryChain()
    call = AgentCallPayload(
        conversation_id="c1",
        agent="triage",
        no_handoffs=False,
        history=[],
        host={},
        reference=chain.reference([said("hello")]),
    )
    calls = AgentActivities(HandoffWorkflowBuilder(scripted_agent("triage", reply("hi"))))
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(calls.invoke_agent, call)
    assert refused.value.non_retryable
    assert "messages=" in str(refused.value)
    assert "'triage'" in str(refused.value)


# -- on Temporal ---------------------------------------------------------------------------


def activity_inputs(history: WorkflowHistory) -> list[dict[str, Any]]:
    """The agent calls' inputs, in order, as the event history holds them."""
    found: list[dict[str, Any]] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            [payload] = event.activity_task_scheduled_event_attributes.input.payloads
            found.append(json.loads(payload.data))
    return found


async def read_back(client: Client, conversation: str) -> tuple[WorkflowHistory, Any]:
    """The latest run's history once it read its conversation back, and what it carried."""
    await until_continued(client, conversation)
    deadline = time.monotonic() + 15
    while True:
        history = await client.get_workflow_handle(conversation).fetch_history()
        attributes = history.events[0].workflow_execution_started_event_attributes
        carried = json.loads(attributes.input.payloads[0].data)["carried"]
        results: list[Any] = [
            json.loads(event.activity_task_completed_event_attributes.result.payloads[0].data)
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        ]
        pages = [cast("dict[str, Any]", r) for r in results if isinstance(r, dict) and "end" in r]
        if any(page["start"] == 0 for page in pages):  # read from the last page to the first
            return history, carried
        assert time.monotonic() < deadline, "the new run did not read its history back"
        await asyncio.sleep(0.05)


@pytest.fixture
async def log_worker(client: Client, queue: str) -> AsyncGenerator[Any, None]:
    """``start(builder)``: a worker with an in-memory message log, and a host that reads it."""
    started: list[Any] = []
    log = InMemoryConversationStore()

    async def start(
        builder: HandoffWorkflowBuilder, agent_calls: Any = None, **kwargs: Any
    ) -> TemporalConversationHost:
        worker = conversation_worker(
            client, builder, task_queue=queue, agent_calls=agent_calls, messages=log
        )
        started.append(worker)
        await worker.__aenter__()
        kwargs.setdefault("messages", log)
        return TemporalConversationHost(client, task_queue=queue, **kwargs)

    yield start
    for worker in started:
        await worker.__aexit__(None, None, None)


async def test_agent_calls_carry_what_is_new_and_agents_see_the_whole_conversation(
    client: Client, log_worker: Any
) -> None:
    seen: list[list[str]] = []

    def billing_answer(call: ModelCall) -> Any:
        seen.append([m.text for m in call.messages if m.role == "user" and m.text])
        return reply(f"billing: {call.user_text}")

    triage = scripted_agent("triage", handoff_to("billing", goal="Billing."))
    billing = scripted_agent("billing", respond_with=billing_answer)
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    host = await log_worker(builder)
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    for n in range(6):
        result = await host.send(conversation, f"message {n} " + "x" * 2000)
        assert result.text.startswith(f"billing: message {n}")
    assert [m.split(" x")[0][:9] for m in seen[-1] if m.startswith("message")] == [
        f"message {n}" for n in range(6)
    ]  # the last call read every earlier message from the log
    history = await client.get_workflow_handle(conversation).fetch_history()
    inputs = activity_inputs(history)
    assert len(inputs) == 7  # triage, then billing for each message
    assert all(i["history"] == [] and i["reference"] for i in inputs)
    tails = [[e["position"] for e in i["reference"]["tail"]] for i in inputs]
    assert tails[0] == [0]  # the first message
    assert tails[1] == [1, 2]  # billing's: triage's handoff call and its result
    sizes = [len(json.dumps(i)) for i in inputs[2:]]
    assert max(sizes) - min(sizes) < 600, sizes  # flat: each carries one turn's messages
    assert (await host.history(conversation))[-1].text.startswith("billing: message 5")


async def test_a_failed_turn_run_again_reads_the_history_the_workflow_names(
    client: Client, log_worker: Any
) -> None:
    """billing's model is down, then up: the turn run again gets the conversation without the
    failed attempt's leftovers, from the log."""
    builder, _triage, broken = breakable_desk()
    broken[0] = False
    host = await log_worker(builder, retrying(1), max_turn_retries=3)
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    assert (await host.send(conversation, "hello")).text == "billing: hello"
    broken[0] = True
    with pytest.raises(Exception):  # noqa: B017, PT011 - the turn failure's own type is tested elsewhere
        await host.send(conversation, "second")
    broken[0] = False
    result = await host.send(conversation, "third")
    assert result.text == "billing: third"
    texts = [m.text for m in await host.history(conversation)]
    assert texts.count("second") == 1
    assert texts[-1] == "billing: third"


@pytest.mark.parametrize(
    ("recorded", "desk"),
    [
        ("temporal-history-last-retry-failed-f9d3a5a.json", broken_billing_desk),
        ("temporal-history-approval-a0c0c53.json", refund_desk),
    ],
)
async def test_a_history_recorded_before_the_log_replays_on_workers_with_a_log(
    client: Client, recorded: str, desk: Any
) -> None:
    """Conversations that started before agent calls carried references keep sending the
    history itself (a Temporal patch): their histories replay on workers given a log."""
    replayed = await replay_with_a_log(client, (RECORDED / recorded).read_text("utf-8"), desk())
    assert replayed.replay_failure is None


async def replay_with_a_log(client: Client, text: str, builder: HandoffWorkflowBuilder) -> Any:
    """Replay a recorded history on a worker of its task queue that has a message log."""
    started = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]
    conversation_worker(
        client,
        builder,
        task_queue=started["taskQueue"]["name"],
        messages=InMemoryConversationStore(),
    )
    history = WorkflowHistory.from_json("recorded", text)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter)
    return await replayer.replay_workflow(history, raise_on_replay_failure=False)


async def test_a_run_that_read_its_history_back_from_the_first_page_replays(
    client: Client,
) -> None:
    """Runs that began reading back before pages were read from the last one back (a Temporal
    patch) replay: recorded at c593189, two pages of a 20 KB payload limit, read from the
    first on, then a turn."""
    text = (RECORDED / "temporal-history-read-back-c593189.json").read_text("utf-8")
    recorded = json.loads(text)["events"]
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityId"]
        for e in recorded
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    ]
    assert scheduled == ["1:read", "2:read", "3:invoke:triage"]  # what the replay covers
    replayed = await replay_with_a_log(client, text, echo_desk())
    assert replayed.replay_failure is None


async def test_a_conversation_by_reference_replays(client: Client, log_worker: Any) -> None:
    """Its own history replays (the digests are computed the same way on replay)."""
    host = await log_worker(refund_desk())
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    from handoff_builder import PendingRequestsError

    with pytest.raises(PendingRequestsError) as waiting:
        await host.send(conversation, "refund my 5 EUR")
    [request] = waiting.value.requests
    answer = request.to_function_approval_response(approved=True)
    assert (await host.respond(conversation, {str(request.id): answer})).text == "Done."
    history = await client.get_workflow_handle(conversation).fetch_history()
    assert all(i["reference"] for i in activity_inputs(history))
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


async def test_a_conversation_past_the_payload_limit_runs_by_reference(
    client: Client, log_worker: Any
) -> None:
    """Eight 300 KB messages: 2.4 MB, more than one payload holds (without a log the seventh is
    refused); by reference every one is answered, and a message larger than a payload is still
    refused, naming the limit."""
    from handoff_builder import PayloadTooLargeError

    host = await log_worker(echo_desk())
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    for i in range(8):
        assert (await host.send(conversation, str(i) * 300_000)).text == "300000 characters"
    with pytest.raises(PayloadTooLargeError) as refused:
        await host.send(conversation, "x" * 2_200_000)
    assert refused.value.limit == 2 * 1024 * 1024 < refused.value.size
    assert (await host.send(conversation, "a short one")).text == "11 characters"
    history = await client.get_workflow_handle(conversation).fetch_history()
    assert max(len(json.dumps(i)) for i in activity_inputs(history)) < 320_000
    read = await host.history(conversation)  # from the log: 2.4 MB is more than a query answers
    assert [len(m.text) for m in read if m.role == "user"] == [300_000] * 8 + [11]
    assert read[-1].text == "11 characters"
    asked = TemporalConversationHost(client, task_queue=host.task_queue)  # no log: a query
    with pytest.raises(HandoffBuilderError) as unread:
        await asked.history(conversation)
    assert f"Conversation {conversation!r} cannot be read" in str(unread.value)
    head = activity_inputs(history)[-1]["reference"]
    assert host.messages is not None
    await host.delete(conversation)  # the log's copies too
    with pytest.raises(CorruptConversationError):
        await host.messages.read_chain(conversation, head["head"], head["length"])


async def test_many_short_messages_whose_tail_would_not_fit_are_refused_before_they_join(
    client: Client, log_worker: Any
) -> None:
    """By reference each new message goes to the next call with its digests (some 150 bytes):
    a list of 5,000 messages of 200 characters is a 1.6 MB Update but a 2.5 MB call. It is
    refused, naming the limit, before it joins; it used to join, fail its turn and leave every
    later message refused, the unlogged tail staying too large. 3,000 of them are taken."""
    from handoff_builder import PayloadTooLargeError

    host = await log_worker(echo_desk())
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    assert (await host.send(conversation, "hello")).text == "5 characters"
    before = await host.history(conversation)
    many = [said(f"{n:05d} " + "x" * 194) for n in range(5_000)]
    with pytest.raises(PayloadTooLargeError) as refused:
        await host.send(conversation, many)
    assert refused.value.what == "the conversation with this message"
    assert refused.value.limit == 2 * 1024 * 1024 < refused.value.size
    assert len(await host.history(conversation)) == len(before)
    assert (await host.send(conversation, "still there?")).text == "12 characters"
    assert (await host.send(conversation, many[:3_000])).text == "200 characters"
    assert len(await host.history(conversation)) == len(before) + 2 + 3_001


async def test_a_turn_by_reference_serializes_what_it_adds_not_the_history(
    client: Client, log_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workflow serializes each message once, as it digests it; the state a failed turn goes
    back to is made of those bodies. A continuing turn serializes as many messages (workflow and
    worker, in this process) at 400 messages as at 40; it used to serialize the whole history
    for every agent call: 0.4 s of workflow task at 10,000 messages, enough on a busy machine for
    Temporal's deadlock detector (2 s) to fail the task."""
    host = await log_worker(echo_desk())
    counted: list[int] = []
    to_dict = Message.to_dict

    def counting(self: Message, *args: Any, **kwargs: Any) -> dict[str, Any]:
        counted.append(1)
        return to_dict(self, *args, **kwargs)

    turns: list[int] = []
    for length in (40, 400):
        conversation = f"c-{uuid.uuid4().hex[:10]}"
        await host.send(conversation, [said(f"message {n}") for n in range(length)])
        await host.send(conversation, "warm")  # the worker's host, the digests: as they will be
        monkeypatch.setattr(Message, "to_dict", counting)
        counted.clear()
        assert (await host.send(conversation, "how long?")).text == "9 characters"
        turns.append(len(counted))
        monkeypatch.setattr(Message, "to_dict", to_dict)
    assert turns[1] - turns[0] < 20, turns


async def test_continue_as_new_carries_a_reference_and_the_next_run_reads_the_history_back(
    client: Client, log_worker: Any
) -> None:
    """Two turns a run, 300 KB messages: each run starts with a reference (a few hundred bytes,
    where the conversation is megabytes) and reads the history back in pages; the agents see
    every earlier message, and the runs replay."""
    seen: list[int] = []

    def answer(call: ModelCall) -> Any:
        seen.append(sum(1 for m in call.messages if m.role == "user" and len(m.text) >= 300_000))
        return reply(f"{len(call.user_text)} characters")

    triage = scripted_agent("triage", respond_with=answer)
    builder = HandoffWorkflowBuilder(triage).add_participants(scripted_agent("billing"))
    host = await log_worker(builder, turns_per_run=2)
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    for i in range(10):
        assert (await host.send(conversation, str(i) * 300_000)).text == "300000 characters"
    assert seen == list(range(1, 11))  # each call read all the messages before it
    history, carried = await read_back(client, conversation)
    [start] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    assert len(start.data) < 2_000  # where the conversation is 3 MB and more
    assert carried["length"] >= 6  # carried by reference: the messages the log held
    assert [m["contents"][0]["text"] for m in carried["history"]] == ["300000 characters"]
    pages = [i for i in activity_inputs(history) if "budget" in i]
    assert len(pages) >= 2  # at least 1.8 MB, in pages of at most 1 MiB
    assert all(page["budget"] == 1024 * 1024 for page in pages)
    assert all(page["from_end"] for page in pages)
    lengths = [page["reference"]["length"] for page in pages]  # each page's end: from the last
    assert lengths[0] == carried["length"]
    assert lengths == sorted(lengths, reverse=True)
    replayer = Replayer(workflows=[ConversationWorkflow], data_converter=pydantic_data_converter)
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None


@pytest.fixture
def processes(queue: str, tmp_path: Path) -> Iterator[Workers]:
    """Worker processes of this test (``tests/temporal_worker.py``), killed at its end."""
    started = Workers(queue, tmp_path / "calls.jsonl")
    yield started
    for process in started.processes:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture
async def postgres_log() -> AsyncGenerator[tuple[str, Any], None]:
    """A PostgreSQL message log of this test's own tables: its spec for worker processes
    (``"DSN TABLE_PREFIX"``) and the store."""
    dsn = os.environ.get("HANDOFF_BUILDER_POSTGRES_DSN")
    if not dsn:
        pytest.skip("set HANDOFF_BUILDER_POSTGRES_DSN to run the PostgreSQL tests")
    from handoff_builder.stores import PostgresConversationStore

    prefix = f"t{uuid.uuid4().hex[:8]}_"
    store = PostgresConversationStore(dsn, table_prefix=prefix)
    yield f"{dsn} {prefix}", store
    await store.drop_tables()
    await store.close()


async def test_a_worker_killed_mid_call_by_reference(
    client: Client, queue: str, processes: Workers, postgres_log: tuple[str, Any]
) -> None:
    """Two worker processes share a PostgreSQL log. SIGKILL while billing answers: the other
    worker runs billing's call again on the history read from the log; triage is not run again,
    nothing is stored twice, and the next turn reads the whole conversation from the log."""
    spec, store = postgres_log
    first = processes.start(TEMPORAL_WORKER_HANG="billing", TEMPORAL_WORKER_MESSAGES=spec)
    host = TemporalConversationHost(client, task_queue=queue)
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    turn = asyncio.ensure_future(host.send(conversation, "why was I charged twice?"))
    await wait_for(lambda: any(c["agent"] == "billing" for c in processes.calls()))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    second = processes.start(TEMPORAL_WORKER_MESSAGES=spec)
    result = await asyncio.wait_for(turn, timeout=120)  # the heartbeat timeout (20 s), and more
    assert result.text == "billing: why was I charged twice?"
    again = await host.send(conversation, "and my invoice?")
    assert again.text == "billing: and my invoice?"
    calls = [(c["pid"], c["agent"]) for c in processes.calls()]
    assert calls == [
        (first.pid, "triage"),
        (first.pid, "billing"),  # killed in the middle of this one
        (second.pid, "billing"),  # retried once, elsewhere; triage's hop stands
        (second.pid, "billing"),  # the next turn
    ]
    history = await host.history(conversation)
    texts = [m.text for m in history if m.text]
    assert texts == [
        "why was I charged twice?",
        "billing: why was I charged twice?",
        "and my invoice?",
        "billing: and my invoice?",
    ]
    events = await client.get_workflow_handle(conversation).fetch_history()
    inputs = activity_inputs(events)
    assert all(i["reference"] for i in inputs)
    head = inputs[-1]["reference"]
    logged = [
        dict(e.body) for e in await store.read_chain(conversation, head["head"], head["length"])
    ]
    assert [Message.from_dict(m).text for m in logged if Message.from_dict(m).text] == texts[:3]


async def test_the_worker_command_keeps_messages_in_postgres(
    client: Client, queue: str, tmp_path: Path, postgres_log: tuple[str, Any]
) -> None:
    """``handoff-builder worker --messages postgresql://...``: the agent calls carry references,
    the messages are in the database, and Ctrl-C still stops it with status 0."""
    spec, _ = postgres_log
    dsn = spec.split(" ")[0]
    from handoff_builder.stores import PostgresConversationStore

    process = worker_command(queue, tmp_path / "calls.jsonl", "--messages", dsn)
    store = PostgresConversationStore(dsn)  # the default tables, as the command uses them
    conversation = f"c-{uuid.uuid4().hex[:10]}"
    try:
        host = TemporalConversationHost(client, task_queue=queue, messages=store)
        turn = await host.send(conversation, "hello from the terminal")
        assert turn.text == "billing: hello from the terminal"
        texts = [m.text for m in await host.history(conversation) if m.text]
        assert texts == ["hello from the terminal", "billing: hello from the terminal"]
        events = await client.get_workflow_handle(conversation).fetch_history()
        assert all(i["reference"] and not i["history"] for i in activity_inputs(events))
        process.send_signal(signal.SIGINT)
    finally:
        code, _lines, err = stopped(process, timeout=60)
        await store.delete(conversation)
        await store.close()
    assert (code, err) == (0, "")


def test_the_worker_command_takes_only_a_postgres_message_log() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handoff_builder.cli", "worker", "--temporal", "127.0.0.1:1",
         "--task-queue", "q", "--messages", "memory", "tests.temporal_worker:builder"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "handoff-builder: error: --messages must be a PostgreSQL address (postgresql://...), "
        "which every worker of the task queue shares; got 'memory'."
    ]


class FlakyLog(InMemoryConversationStore):
    """An in-memory log whose next ``failing`` reads back fail, as a log that is down would.

    A read back is a read with no write before it (an agent call writes its tail first).
    """

    failing = 0
    _wrote = False

    @override
    async def put_chain(self, conversation_id: str, entries: Sequence[ChainedMessage]) -> None:
        self._wrote = True
        await super().put_chain(conversation_id, entries)

    @override
    async def read_chain(
        self, conversation_id: str, head: str, length: int, *, start: int = 0
    ) -> list[ChainedMessage]:
        wrote, self._wrote = self._wrote, False
        if self.failing and not wrote:
            self.failing -= 1
            raise StoreUnavailableError("PostgreSQL", "the server is restarting")
        return await super().read_chain(conversation_id, head, length, start=start)


async def test_a_run_whose_history_cannot_be_read_back_tries_again_and_loses_nothing(
    client: Client, queue: str
) -> None:
    """The log is down while the next run reads the conversation back: a message sent then
    fails, saying why; the run tries again, and the conversation goes on whole."""
    log = FlakyLog()
    async with conversation_worker(
        client, echo_desk(), task_queue=queue, messages=log, agent_calls=retrying(1)
    ):
        host = TemporalConversationHost(client, task_queue=queue, messages=log, turns_per_run=1)
        conversation = f"c-{uuid.uuid4().hex[:10]}"
        log.failing = 2  # the first read-back and its retry fail
        assert (await host.send(conversation, "first")).text == "5 characters"
        await until_continued(client, conversation)
        reading = (await client.get_workflow_handle(conversation).describe()).run_id
        failed: list[str] = []
        deadline = time.monotonic() + 30
        while True:
            try:
                turn = await host.send(conversation, "second")
                break
            except TemporalTurnError as error:
                failed.append(str(error))
            assert time.monotonic() < deadline, failed
            await asyncio.sleep(0.2)
        history = await host.history(conversation)
        handle = client.get_workflow_handle(conversation, run_id=reading)
        events = (await handle.fetch_history()).events
    kinds = [event.event_type for event in events]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED in kinds  # the read back, twice
    assert EventType.EVENT_TYPE_TIMER_STARTED in kinds  # the wait before trying again
    assert turn.text == "6 characters"
    assert [m.text for m in history] == ["first", "5 characters", "second", "6 characters"]
    assert all("could not be read back" in text for text in failed), failed
