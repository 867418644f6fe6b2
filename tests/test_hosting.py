"""Hosted conversations: remembering the active agent, restarts, crashes, idle time, workers."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import FrozenInstanceError, fields, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agent_framework import Agent, tool
from psycopg import sql

from handoff_builder import (
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_INPUT_BYTES,
    ConversationBusyError,
    ConversationHost,
    CorruptConversationError,
    HandoffWorkflowBuilder,
    HostingSettings,
    MessageTooLargeError,
    PendingRequestsError,
    SchemaVersionError,
    StoreUnavailableError,
    UnexpectedAnswersError,
)
from handoff_builder._hosting_settings import HostingOptions
from handoff_builder.stores import (
    ConversationStore,
    InMemoryConversationStore,
    PostgresConversationStore,
    SqliteConversationStore,
    hold,
)
from handoff_builder.testing import call_tool, client_of, handoff_to, reply, scripted_agent
from tests.stores import POSTGRES_DSN_VARIABLE, postgres_dsn, unique_prefix

ROOT = Path(__file__).resolve().parent.parent


def desk(
    triage_steps: list[Any], billing_steps: list[Any]
) -> tuple[HandoffWorkflowBuilder, Agent, Agent]:
    triage = scripted_agent("triage", *triage_steps)
    billing = scripted_agent("billing", *billing_steps, description="charges, invoices, plans")
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_hand_back(triage)
    return builder, triage, billing


async def test_remembers_active_agent_seed(store: ConversationStore) -> None:
    """The seed: message 1 triage hands off to billing; on message 2 billing is called first."""
    builder, triage, billing = desk(
        [handoff_to("billing", goal="Explain the invoice.")],
        [reply("Your invoice is 42 EUR."), reply("It was paid on March 3rd.")],
    )
    host = ConversationHost(builder, store)
    first = await host.send("conv-1", "What is on my invoice?")
    assert (first.active_agent, first.text) == ("billing", "Your invoice is 42 EUR.")
    assert await host.active_agent("conv-1") == "billing"

    second = await host.send("conv-1", "When was it paid?")
    assert second.text == "It was paid on March 3rd."
    assert len(client_of(triage).calls) == 1  # triage was never called for message 2
    assert client_of(billing).calls[1].texts[-1] == "When was it paid?"


async def test_survives_a_restart(store: ConversationStore) -> None:
    """A new host (a new process, as far as the store is concerned) continues the conversation."""
    builder, _, _ = desk([handoff_to("billing", goal="Invoice.")], [reply("Invoice: 42 EUR.")])
    await ConversationHost(builder, store).send("conv-1", "invoice?")

    builder2, triage2, billing2 = desk([], [reply("Sent to your email.")])
    result = await ConversationHost(builder2, store).send("conv-1", "email it please")
    assert result.text == "Sent to your email."
    assert client_of(triage2).calls == []
    seen = client_of(billing2).calls[0].texts
    # The note with triage's goal is rebuilt from the stored history.
    assert seen == [
        "invoice?",
        "Goal: Invoice.",
        "Invoice: 42 EUR.",
        "email it please",
    ]
    assert len(result.conversation) == 6


async def test_conversations_are_isolated(store: ConversationStore) -> None:
    builder, _, billing = desk(
        [handoff_to("billing", goal="A."), reply("triage for B")], [reply("billing for A")]
    )
    host = ConversationHost(builder, store)
    a = await host.send("A", "billing question")
    b = await host.send("B", "hello")
    assert (a.active_agent, b.active_agent) == ("billing", "triage")
    assert b.text == "triage for B"
    assert [m.text for m in b.conversation] == ["hello", "triage for B"]
    assert client_of(billing).calls[0].texts == [
        "billing question",
        "Goal: A.",
    ]


async def test_the_log_is_append_only_and_written_per_hop(store: ConversationStore) -> None:
    builder, _, _ = desk([handoff_to("billing", goal="g")], [reply("done")])
    await ConversationHost(builder, store).send("c", "hi")
    record = await store.load("c")
    assert record is not None
    assert [m["role"] for m in record.messages] == ["user", "assistant", "tool", "assistant"]
    # user input (1), before billing (2), end of turn (3): the store was written before billing ran.
    assert record.version == 3
    assert record.state["host"]["turn"] is None
    assert record.state["host"]["speaker"] == "billing"
    assert record.state["host"]["schema_version"] == 5


async def test_idle_conversation_starts_again_at_the_initial_agent(
    store: ConversationStore, caplog: pytest.LogCaptureFixture
) -> None:
    now = [datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)]
    builder, triage, billing = desk(
        [handoff_to("billing", goal="Invoice."), reply("Welcome back! How can I help?")],
        [reply("Invoice: 42 EUR.")],
    )
    host = ConversationHost(builder, store, clock=lambda: now[0])
    assert await host.last_activity("c") is None  # never written
    await host.send("c", "invoice?")
    assert await host.last_activity("c") == now[0]
    assert builder.initial_agent is triage
    now[0] += timedelta(minutes=31)  # default idle timeout: 30 minutes
    with caplog.at_level(logging.INFO, logger="handoff_builder"):
        result = await host.send("c", "hi again")
    assert result.text == "Welcome back! How can I help?"
    assert len(client_of(triage).calls) == 2
    assert len(client_of(billing).calls) == 1
    assert any("was idle for 0:31:00" in r.getMessage() for r in caplog.records)


async def test_not_idle_within_the_timeout(store: ConversationStore) -> None:
    now = [datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)]
    builder, _, _ = desk([handoff_to("billing", goal="Invoice.")], [reply("one"), reply("two")])
    host = ConversationHost(builder, store, idle_timeout=timedelta(minutes=5), clock=lambda: now[0])
    await host.send("c", "a")
    now[0] += timedelta(minutes=4)
    assert (await host.send("c", "b")).text == "two"


async def test_stored_agent_that_no_longer_exists_falls_back(
    store: ConversationStore, caplog: pytest.LogCaptureFixture
) -> None:
    builder, _, _ = desk([handoff_to("billing", goal="Invoice.")], [reply("Invoice: 42 EUR.")])
    await ConversationHost(builder, store).send("c", "invoice?")

    triage = scripted_agent("triage", reply("triage here"))
    tech = scripted_agent("tech")
    without_billing = HandoffWorkflowBuilder(triage).with_handoff(triage, tech)
    with caplog.at_level(logging.WARNING, logger="handoff_builder"):
        result = await ConversationHost(without_billing, store).send("c", "hello?")
    assert result.text == "triage here"
    assert any(
        "The previous agent 'billing' is not a participant any more; starting at 'triage'"
        in r.getMessage()
        for r in caplog.records
    )


async def test_busy_conversation(store: ConversationStore) -> None:
    builder, _, _ = desk([reply("hi")], [])
    host = ConversationHost(builder, store)
    async with hold(store, "c"):
        with pytest.raises(ConversationBusyError, match="'c' is busy with another turn"):
            await host.send("c", "hello")
    assert (await host.send("c", "hello")).text == "hi"


async def test_waiting_for_a_busy_conversation(store: ConversationStore) -> None:
    builder, _, _ = desk([reply("first"), reply("second")], [])
    host = ConversationHost(builder, store)
    results = await asyncio.gather(
        host.send("c", "one", wait=True), host.send("c", "two", wait=True)
    )
    assert sorted(r.text for r in results) == ["first", "second"]
    record = await store.load("c")
    assert record is not None
    assert [m["role"] for m in record.messages] == ["user", "assistant", "user", "assistant"]


async def test_unreachable_store_fails_before_any_model_call(tmp_path: Path) -> None:
    builder, triage, _ = desk([reply("never")], [])
    host = ConversationHost(builder, SqliteConversationStore(tmp_path / "nope" / "c.db"))
    with pytest.raises(StoreUnavailableError):
        await host.send("c", "hello")
    assert client_of(triage).calls == []


async def test_streaming_form(store: ConversationStore) -> None:
    builder, _, _ = desk([handoff_to("billing", goal="g")], [reply("streamed reply")])
    host = ConversationHost(builder, store)
    texts = [
        event.data.text
        async for event in host.stream("c", "hi")
        if event.type == "output" and getattr(event.data, "text", "")
    ]
    assert texts == ["streamed reply"]
    assert await host.active_agent("c") == "billing"


def test_bad_arguments() -> None:
    builder, _, _ = desk([], [])
    for bad in (0, -1.5, float("nan"), float("inf"), 1e20, 1e-7):
        with pytest.raises(ValueError, match="idle_timeout must be a positive, finite number"):
            ConversationHost(builder, SqliteConversationStore(":memory:"), idle_timeout=bad)
    with pytest.raises(ValueError, match="idle_timeout must be positive"):
        ConversationHost(
            builder, SqliteConversationStore(":memory:"), idle_timeout=timedelta(seconds=-1)
        )


def test_settings_and_keywords_are_one_value() -> None:
    builder, _, _ = desk([], [])
    store = SqliteConversationStore(":memory:")
    settings = HostingSettings(lease_ttl=5.0, worker_id="w1", idle_timeout=timedelta(minutes=5))
    host = ConversationHost(builder, store, settings=settings, worker_id="w2", idle_timeout=90)
    assert host.settings == replace(settings, worker_id="w2", idle_timeout=timedelta(seconds=90))
    assert (host.lease_ttl, host.worker_id, host.idle_timeout) == (5.0, "w2", timedelta(seconds=90))
    assert settings.worker_id == "w1"  # the value given is not changed
    default = ConversationHost(builder, store)
    assert default.settings == HostingSettings()
    assert (default.max_input_bytes, default.max_turn_retries) == (DEFAULT_MAX_INPUT_BYTES, 2)
    assert (default.live_conversations, default.lock_timeout) == (256, 60.0)
    assert default.remember_active_agent is True
    assert default.idle_timeout == DEFAULT_IDLE_TIMEOUT
    with pytest.raises(AttributeError):
        setattr(default, "lease_ttl", 1.0)  # noqa: B010 - read-only: the settings say it
    with pytest.raises(FrozenInstanceError):
        setattr(settings, "lease_ttl", 1.0)  # noqa: B010
    # the keywords are the settings' fields, one for one
    assert set(HostingOptions.__annotations__) == {field.name for field in fields(HostingSettings)}


def test_an_unknown_keyword_names_the_settings_fields() -> None:
    builder, _, _ = desk([], [])
    options: dict[str, Any] = {"lease_tll": 3.0}
    with pytest.raises(
        TypeError,
        match=r"^ConversationHost\(\) got an unexpected keyword argument 'lease_tll'; its options "
        r"are the fields of HostingSettings: clock, idle_timeout, lease_ttl, ",
    ):
        ConversationHost(builder, SqliteConversationStore(":memory:"), **options)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"lease_ttl": 0}, "lease_ttl must be a positive number of seconds, got 0."),
        ({"max_turn_retries": -1}, "max_turn_retries must be 0 or more, got -1."),
        ({"max_input_bytes": 0}, "max_input_bytes must be positive or None, got 0."),
        ({"idle_timeout": 0}, "idle_timeout must be a positive, finite number of seconds, got 0."),
    ],
)
def test_settings_are_checked_as_keywords_are(option: dict[str, Any], message: str) -> None:
    builder, _, _ = desk([], [])
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        HostingSettings(**option)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ConversationHost(builder, SqliteConversationStore(":memory:"), **option)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):  # over valid settings too
        ConversationHost(
            builder, SqliteConversationStore(":memory:"), settings=HostingSettings(), **option
        )


async def test_settings_given_as_a_value_are_the_ones_used(store: ConversationStore) -> None:
    now = [datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)]
    builder, triage, billing = desk(
        [handoff_to("billing", goal="Invoice."), reply("Welcome back!")], [reply("42 EUR.")]
    )
    settings = HostingSettings(
        idle_timeout=timedelta(minutes=5), clock=lambda: now[0], max_input_bytes=200
    )
    host = ConversationHost(builder, store, settings=settings)
    with pytest.raises(MessageTooLargeError, match="the limit is 200 bytes"):
        await host.send("c", "é" * 100)
    assert (await host.send("c", "invoice?")).text == "42 EUR."
    now[0] += timedelta(minutes=6)
    assert (await host.send("c", "hi again")).text == "Welcome back!"
    assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (2, 1)


async def test_empty_conversation_id(store: ConversationStore) -> None:
    builder, _, _ = desk([], [])
    with pytest.raises(ValueError, match="conversation_id must not be empty or blank"):
        await ConversationHost(builder, store).send(" ", "hi")


# -- real processes ------------------------------------------------------------------------------


@pytest.fixture
async def postgres_store() -> Any:
    store = PostgresConversationStore(postgres_dsn(), table_prefix=unique_prefix())
    yield store
    await store.drop_tables()
    await store.close()


def worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOSTING_WORKER_LEASE_TTL": "1"}
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "tests.hosting_worker", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finished(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


async def test_crash_mid_turn_resumes_with_the_target(shared_store: Any, tmp_path: Path) -> None:
    """A process killed while billing runs; a new process finishes the turn with billing."""
    spec, store = shared_store
    marker = tmp_path / "billing-called"
    crashing = worker("crash", spec, "conv-crash", str(marker))
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert crashing.poll() is None, crashing.communicate()[1]
        assert time.monotonic() < deadline, "billing was never called"
        await asyncio.sleep(0.05)
    # Read from this process while billing's call runs in the worker: the conversation is with
    # billing (stored before billing was called), not with triage that ran before it.
    reader = ConversationHost(HandoffWorkflowBuilder(scripted_agent("triage")), store)
    assert await reader.active_agent("conv-crash") == "billing"
    crashing.send_signal(signal.SIGKILL)
    crashing.wait(timeout=10)

    record = await store.load("conv-crash")
    assert record is not None
    assert record.state["host"]["next"] == "billing"  # written before billing was called
    assert await reader.active_agent("conv-crash") == "billing"  # where the resume starts

    report = finished(worker("resume", spec, "conv-crash", "-"))
    assert report["text"] == "Refunded after the restart."
    assert report["active_agent"] == "billing"
    assert report["triage_calls"] == 0
    assert report["billing_calls"] == 1
    assert report["billing_saw"] == [
        "I was charged twice",
        "Goal: Refund the double charge.",
    ]
    assert report["stored_roles"] == [
        ["user", None],
        ["assistant", "triage"],
        ["tool", "triage"],
        ["assistant", "billing"],
    ]


async def test_two_processes_on_one_conversation(shared_store: Any) -> None:
    """Two workers send at once: both messages land, in some order, and nothing forks."""
    spec, store = shared_store
    processes = [worker("send", spec, "conv-shared", str(n)) for n in (1, 2)]
    reports = [finished(process) for process in processes]
    assert sorted(r["text"] for r in reports) == ["triage answers 1", "triage answers 2"]
    record = await store.load("conv-shared")
    assert record is not None
    texts = [m["contents"][0]["text"] for m in record.messages]
    assert sorted(texts[0::2]) == ["message 1", "message 2"]
    for user, answer in zip(texts[0::2], texts[1::2], strict=True):
        assert answer == "triage answers " + user.split()[-1]
    assert record.version == 4  # two writes per turn, no lost or forked write


async def test_remembers_active_agent_across_a_process_restart(shared_store: Any) -> None:
    """The seed's test, with message 2 sent by a new process."""
    spec, _ = shared_store
    first = finished(worker("seed1", spec, "conv-seed", "-"))
    assert (first["text"], first["active_agent"]) == ("Invoice: 42 EUR.", "billing")
    second = finished(worker("seed2", spec, "conv-seed", "-"))
    assert second["text"] == "Paid on March 3rd."
    assert second["triage_calls"] == 0
    assert second["billing_saw"] == [
        "What is on my invoice?",
        "Goal: Invoice.",
        "Invoice: 42 EUR.",
        "When was it paid?",
    ]


async def test_postgres_corrupt_and_newer_records(
    postgres_store: PostgresConversationStore,
) -> None:
    builder, triage, _ = desk([reply("hello")], [])
    host = ConversationHost(builder, postgres_store)
    await host.send("good", "hi")
    await postgres_store.append("bad", start=0, messages=[], state={}, expected_version=0)
    await postgres_store.append("newer", start=0, messages=[], state={}, expected_version=0)
    async with await psycopg.AsyncConnection.connect(postgres_dsn(), autocommit=True) as db:
        table = postgres_store.tables[0]
        await db.execute(
            sql.SQL("UPDATE {} SET state = '[1' WHERE conversation_id = 'bad'").format(
                sql.Identifier(table)
            )
        )
        await db.execute(
            sql.SQL("UPDATE {} SET schema_version = 9 WHERE conversation_id = 'newer'").format(
                sql.Identifier(table)
            )
        )
    corrupt = "Conversation 'bad' is corrupt: the state row is not valid JSON"
    with pytest.raises(CorruptConversationError, match=corrupt):
        await host.send("bad", "hi")
    with pytest.raises(SchemaVersionError, match="Conversation 'newer' has schema version 9"):
        await host.send("newer", "hi")
    assert len(client_of(triage).calls) == 1  # only the good conversation reached the model
    record = await postgres_store.load("good")
    assert record is not None
    assert record.version == 2


def test_postgres_variable_name_is_documented() -> None:
    """CI's servers (.ci/run, make test-all) set the variable the PostgreSQL tests read."""
    assert POSTGRES_DSN_VARIABLE in (ROOT / ".ci" / "with_servers.py").read_text(encoding="utf-8")
    assert POSTGRES_DSN_VARIABLE in (ROOT / "README.md").read_text(encoding="utf-8")


async def test_hosted_turn_with_an_approval(store: ConversationStore) -> None:
    """A hosted turn that needs an approval: send raises with the request, respond carries on."""
    refunded: list[int] = []

    @tool(name="refund", description="Refund an amount.", approval_mode="always_require")
    def refund(amount: int) -> str:
        refunded.append(amount)
        return f"refunded {amount}"

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund 5 EUR."))
    billing = scripted_agent(
        "billing", call_tool("refund", amount=5), reply("Refunded 5 EUR."), tools=[refund]
    )
    host = ConversationHost(HandoffWorkflowBuilder(triage).with_handoff(triage, billing), store)
    with pytest.raises(PendingRequestsError, match="'c' waits for answers to 1 request") as pending:
        await host.send("c", "refund 5 please")
    [request] = pending.value.requests
    assert request.type == "function_approval_request"
    assert await host.active_agent("c") == "billing"  # its request waits; triage ran before
    with pytest.raises(PendingRequestsError, match="a message sent meanwhile is not stored"):
        await host.send("c", "hello?")  # a new message cannot jump the queue

    answer = request.to_function_approval_response(approved=True)
    result = await host.respond("c", {str(request.id): answer})
    assert result.text == "Refunded 5 EUR."
    assert refunded == [5]
    assert len(client_of(triage).calls) == 1
    record = await store.load("c")
    assert record is not None
    assert record.state["host"]["pending"] is None
    with pytest.raises(UnexpectedAnswersError, match="waits for no answers") as refused:
        await host.respond("c", {str(request.id): answer})
    assert (refused.value.unknown, refused.value.waiting) == ((str(request.id),), ())


async def test_live_conversation_is_reused_until_another_worker_writes(
    store: ConversationStore,
) -> None:
    loads: list[str] = []
    real_load = store.load

    async def counting_load(conversation_id: str) -> Any:
        loads.append(conversation_id)
        return await real_load(conversation_id)

    store.load = counting_load
    builder, _, billing = desk(
        [handoff_to("billing", goal="Invoice.")],
        [reply("one"), reply("two"), reply("three")],
    )
    worker_a = ConversationHost(builder, store)
    await worker_a.send("c", "first")
    await worker_a.send("c", "second")
    assert loads == ["c"]  # the second turn reused the live conversation

    other_builder, _, other_billing = desk([], [reply("from worker b")])
    await ConversationHost(other_builder, store).send("c", "via b")  # another worker writes
    result = await worker_a.send("c", "third")
    assert loads == ["c", "c", "c"]  # worker a saw the new version and reloaded
    assert result.text == "three"
    seen = client_of(billing).calls[-1].texts
    assert "via b" in seen
    assert "from worker b" in seen
    assert client_of(other_billing).calls[0].texts.count("second") == 1


async def test_read_and_delete_a_conversation_through_the_host(store: ConversationStore) -> None:
    builder, _, _ = desk(
        [handoff_to("billing", goal="Explain the invoice."), reply("Hello again.")],
        [reply("Your invoice is 42 EUR.")],
    )
    host = ConversationHost(builder, store)
    await host.send("conv-1", "What is on my invoice?")
    history = await host.history("conv-1")
    assert [(m.role, m.author_name, m.text) for m in history][-1] == (
        "assistant",
        "billing",
        "Your invoice is 42 EUR.",
    )
    assert await host.history("nobody") == []
    assert await host.conversations() == ["conv-1"]
    await host.delete("conv-1")
    assert await host.conversations() == []
    assert await host.history("conv-1") == []
    assert await store.load("conv-1") is None
    assert await host.active_agent("conv-1") is None
    again = await host.send("conv-1", "hi")  # a new conversation, at triage
    assert again.text == "Hello again."
    assert [m.text for m in await host.history("conv-1")] == ["hi", "Hello again."]


async def test_deleting_a_conversation_whose_turn_runs_is_busy(store: ConversationStore) -> None:
    builder, _, _ = desk([reply("hi")], [])
    host = ConversationHost(builder, store)
    async with hold(store, "conv-2", ttl=30, owner="another-worker"):
        with pytest.raises(ConversationBusyError):
            await host.delete("conv-2")


async def test_live_conversations_share_built_workflows_and_keep_their_own_views() -> None:
    """A live conversation keeps its history, state and views, not a built workflow: the
    built ones go from conversation to conversation, and each agent still reads only its own
    conversation, handoff notes included."""
    triage = scripted_agent(
        "triage",
        respond_with=lambda call: handoff_to("billing", goal=f"About: {call.texts[-1]}"),
    )
    billing = scripted_agent("billing", respond_with=lambda call: reply(f"{len(call.texts)} read"))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    builds = 0
    build = builder.build

    def counted() -> Any:
        nonlocal builds
        builds += 1
        return build()

    builder.build = counted  # type: ignore[method-assign]
    host = ConversationHost(builder, InMemoryConversationStore())

    for turn in range(3):
        for name in ("alice", "bob"):
            result = await host.send(name, f"{name} message {turn}")
            assert result.active_agent == "billing"

    assert builds == 1  # one built workflow served both conversations, turn after turn
    billing_calls = client_of(billing).calls
    assert billing_calls[0].texts == [
        "alice message 0",
        "Goal: About: alice message 0",
    ]
    # Bob's third turn: billing reads Bob's turns only (it answered the first one itself)
    assert billing_calls[-1].texts == [
        "bob message 0",
        "Goal: About: bob message 0",
        "2 read",
        "bob message 1",
        "4 read",
        "bob message 2",
    ]
