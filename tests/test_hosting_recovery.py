"""Hosted turns that fail, hang or are retried: retries and abandonment, deadlines, idempotency,
ids, and records that do not decode."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, Message

from handoff_builder import (
    ABANDONED_TURN_PROPERTY,
    DEFAULT_MAX_INPUT_BYTES,
    HANDOFF_TIMEOUT_EVENT,
    HANDOFF_TURN_ABANDONED_EVENT,
    HANDOFF_TURN_EVENT,
    ConversationBusyError,
    ConversationHost,
    CorruptConversationError,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    MessageNotStoredError,
    MessageTooLargeError,
    PendingRequestsError,
    TurnAbandonedEvent,
    TurnTimeoutEvent,
)
from handoff_builder.stores import (
    MAX_CONVERSATION_ID_LENGTH,
    ConversationStore,
    InMemoryConversationStore,
    SqliteConversationStore,
    hold,
)
from handoff_builder.stores._base import record_from_rows
from handoff_builder.testing import (
    ModelCall,
    Step,
    call_tool,
    client_of,
    handoff_to,
    never_answer,
    received,
    reply,
    scripted_agent,
    slow,
)
from tests.helpers import until_called


def model_down(call: ModelCall) -> Step:
    del call
    raise RuntimeError("model down")


def desk(
    triage_steps: list[Any], billing_steps: list[Any], **timeouts: float | None
) -> tuple[HandoffWorkflowBuilder, Agent, Agent]:
    triage = scripted_agent("triage", *triage_steps)
    billing = scripted_agent("billing", *billing_steps)
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_hand_back(triage)
    if timeouts:
        builder.with_timeouts(**timeouts)
    return builder, triage, billing


def answered_everywhere(messages: list[Message] | tuple[Message, ...]) -> bool:
    """Every function call of a transcript has its result: valid input for every provider."""
    calls = {c.call_id for m in messages for c in m.contents if c.type == "function_call"}
    results = {c.call_id for m in messages for c in m.contents if c.type == "function_result"}
    return calls <= results


async def rewrite_state(
    store: ConversationStore, conversation_id: str, change: Callable[[dict[str, Any]], Any]
) -> None:
    """Replace a stored conversation's state row with ``change(state)`` (no lease held)."""
    record = await store.load(conversation_id)
    assert record is not None
    await store.append(
        conversation_id,
        start=len(record.messages),
        messages=[],
        state=change(record.state),
        expected_version=record.version,
    )


def stored_texts(record: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for message in record.messages:
        content = message["contents"][0]
        out.append((message["role"], content.get("text") or content["type"]))
    return out


# -- a turn that keeps failing -----------------------------------------------------------------


async def test_a_failing_turn_is_retried_then_abandoned_and_the_new_message_runs(
    store: ConversationStore,
) -> None:
    builder, triage, billing = desk(
        [handoff_to("billing", goal="Refund."), reply("Anything else?")],
        [model_down, model_down, model_down],
    )
    host = ConversationHost(builder, store)
    with pytest.raises(RuntimeError, match="model down"):
        await host.send("c", "refund me")
    for attempt in (2,):  # the first retry fails too, and the caller is told
        with pytest.raises(RuntimeError, match="model down"):
            await host.send("c", "hello?")
        record = await store.load("c")
        assert record is not None
        assert record.state["failures"] == attempt
        assert "RuntimeError: model down" in record.state["last_error"]

    result = await host.send("c", "still there?")  # the second retry fails: given up
    assert (result.status, result.text, result.active_agent) == (
        "completed",
        "Anything else?",
        "triage",
    )
    recovered = result.recovered
    assert recovered is not None
    assert recovered.status == "abandoned"
    assert recovered.abandoned == TurnAbandonedEvent(
        "failed", "billing", 3, "RuntimeError: model down"
    )
    assert len(client_of(billing).calls) == 3
    assert answered_everywhere(received(triage).messages)  # what the next model receives
    record = await store.load("c")
    assert record is not None
    assert "failures" not in record.state
    assert stored_texts(record) == [
        ("user", "refund me"),
        ("assistant", "function_call"),
        ("tool", "function_result"),
        ("user", "still there?"),  # the messages of the failed sends were never stored
        ("assistant", "Anything else?"),
    ]


async def test_no_retries_abandons_at_the_next_message(store: ConversationStore) -> None:
    builder, _, billing = desk([handoff_to("billing"), reply("Triage here.")], [model_down])
    host = ConversationHost(builder, store, max_turn_retries=0)
    with pytest.raises(RuntimeError):
        await host.send("c", "one")
    result = await host.send("c", "two")  # no retry: billing is not called again
    assert result.recovered is not None
    assert result.recovered.abandoned is not None
    # the new turn starts where the conversation was left: triage (billing never answered)
    assert (result.text, len(client_of(billing).calls)) == ("Triage here.", 1)


async def test_abandon_on_demand_closes_a_turn_waiting_for_an_approval(
    store: ConversationStore,
) -> None:
    from agent_framework import tool

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount}"

    triage = scripted_agent("triage", call_tool("refund", amount=5), reply("What else?"))
    triage.default_options["tools"] = [refund]
    builder = HandoffWorkflowBuilder(triage)
    host = ConversationHost(builder, store)
    with pytest.raises(PendingRequestsError):
        await host.send("c", "refund 5")
    with pytest.raises(PendingRequestsError):
        await host.send("c", "hello?")  # waits for the answer ...
    abandoned = await host.abandon("c")  # ... until it is given up
    assert abandoned is not None
    assert (abandoned.status, abandoned.abandoned) == (
        "abandoned",
        TurnAbandonedEvent("on_demand", "triage", 0, None),
    )
    assert await host.abandon("c") is None  # nothing open any more
    result = await host.send("c", "never mind")
    assert result.text == "What else?"
    assert answered_everywhere(received(triage).messages)
    record = await store.load("c")
    assert record is not None
    assert record.state["host"]["pending"] is None


async def test_a_stream_tells_of_the_abandoned_turn_first(store: ConversationStore) -> None:
    builder, _, _ = desk([handoff_to("billing"), reply("Triage here.")], [model_down])
    host = ConversationHost(builder, store, max_turn_retries=0)
    with pytest.raises(RuntimeError):
        await host.send("c", "one")
    events = [event async for event in host.stream("c", "two")]
    assert events[0].type == HANDOFF_TURN_ABANDONED_EVENT
    assert isinstance(events[0].data, TurnAbandonedEvent)
    [done] = [e for e in events if e.type == HANDOFF_TURN_EVENT]
    assert done.data.recovered is not None
    assert done.data.text == "Triage here."


async def test_a_streamed_turn_that_fails_is_counted(store: ConversationStore) -> None:
    builder, _, _ = desk([handoff_to("billing")], [model_down, reply("ok"), reply("ok again")])
    host = ConversationHost(builder, store)
    with pytest.raises(RuntimeError):
        async for _ in host.stream("c", "one"):
            pass
    record = await store.load("c")
    assert record is not None
    assert record.state["failures"] == 1
    assert (await host.send("c", "two")).recovered is not None  # the retry works


# -- deadlines ---------------------------------------------------------------------------------


async def test_a_model_that_never_answers_ends_the_turn_at_the_agent_deadline(
    store: ConversationStore,
) -> None:
    builder, _, billing = desk(
        [handoff_to("billing", goal="Refund.")],
        [never_answer(), reply("Back now.")],
        agent_call=0.2,
    )
    host = ConversationHost(builder, store)
    result = await asyncio.wait_for(host.send("c", "refund"), 10)
    assert (result.status, result.timeout) == (
        "agent_timeout",
        TurnTimeoutEvent("agent_call", "billing", 0.2),
    )
    assert result.text == ""  # never a success, and nothing of the cancelled call is kept
    assert answered_everywhere(result.conversation)
    async with hold(store, "c"):  # the lease was released
        pass
    again = await host.send("c", "hello?")  # the conversation carries on at billing
    assert (again.status, again.text) == ("completed", "Back now.")
    assert len(client_of(billing).calls) == 2


async def test_the_turn_deadline_covers_every_hop(store: ConversationStore) -> None:
    builder, triage, billing = desk(
        [slow(handoff_to("billing"), 0.15)],
        [slow("late", 5)],
        agent_call=10,
        turn=0.3,
    )
    host = ConversationHost(builder, store)
    events = [event async for event in host.stream("c", "hi")]
    [timeout] = [e for e in events if e.type == HANDOFF_TIMEOUT_EVENT]
    assert timeout.data == TurnTimeoutEvent("turn", "billing", 0.3)
    [done] = [e for e in events if e.type == HANDOFF_TURN_EVENT]
    assert done.data.status == "turn_timeout"
    assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (1, 1)


def test_timeouts_are_checked() -> None:
    builder, _, _ = desk([], [])
    for bad in (0, -1, True, "5"):
        with pytest.raises(ValueError, match="agent_call must be a positive number"):
            builder.with_timeouts(agent_call=bad)  # pyright: ignore[reportArgumentType]
    builder.with_timeouts(agent_call=None, turn=None)  # no limits


async def test_an_in_process_workflow_has_the_deadlines_too() -> None:
    builder, _, _ = desk([never_answer()], [], agent_call=0.1)
    result = (await builder.build().run("hi")).get_outputs()[-1]
    assert result.status == "agent_timeout"


# -- idempotency -------------------------------------------------------------------------------


async def test_a_repeated_send_returns_the_turn_it_ran_and_stores_nothing_twice(
    store: ConversationStore,
) -> None:
    builder, triage, billing = desk([handoff_to("billing", goal="Refund.")], [reply("Refunded.")])
    host = ConversationHost(builder, store)
    first = await host.send("c", "refund me", idempotency_key="msg-1")
    again = await ConversationHost(builder, store).send("c", "refund me", idempotency_key="msg-1")
    assert (again.text, again.active_agent, again.status) == ("Refunded.", "billing", "completed")
    assert [h.target for h in again.handoffs] == [h.target for h in first.handoffs] == ["billing"]
    assert [m.text for m in again.messages] == [m.text for m in first.messages]
    assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (1, 1)
    record = await store.load("c")
    assert record is not None
    assert [role for role, _ in stored_texts(record)].count("user") == 1


async def test_a_repeated_send_after_a_crash_finishes_the_turn(store: ConversationStore) -> None:
    """The worker dies while billing runs (the task is cancelled); the client sends again."""
    builder, _, hanging = desk([handoff_to("billing", goal="Refund.")], [never_answer()])
    crashed = asyncio.ensure_future(
        ConversationHost(builder, store).send("c", "refund me", idempotency_key="k")
    )
    await until_called(hanging)  # billing never answers
    crashed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crashed
    again, triage, billing = desk([], [reply("Refunded after all.")])  # a new worker
    result = await ConversationHost(again, store).send("c", "refund me", idempotency_key="k")
    assert (result.text, result.active_agent) == ("Refunded after all.", "billing")
    assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (0, 1)
    record = await store.load("c")
    assert record is not None
    assert stored_texts(record) == [
        ("user", "refund me"),
        ("assistant", "function_call"),
        ("tool", "function_result"),
        ("assistant", "Refunded after all."),
    ]
    # and once more: the finished turn is replayed from its receipt
    replay = await ConversationHost(again, store).send("c", "refund me", idempotency_key="k")
    assert replay.text == "Refunded after all."


async def test_a_new_key_is_a_new_message(store: ConversationStore) -> None:
    builder, triage, _ = desk([reply("one"), reply("two")], [])
    host = ConversationHost(builder, store)
    assert (await host.send("c", "hi", idempotency_key="a")).text == "one"
    assert (await host.send("c", "hi", idempotency_key="b")).text == "two"
    assert (await host.send("c", "hi", idempotency_key="a")).text == "one"
    assert len(client_of(triage).calls) == 2


async def test_repeated_respond_and_stream(store: ConversationStore) -> None:
    from agent_framework import tool

    @tool(approval_mode="always_require")
    def refund(amount: int) -> str:
        """Refund money."""
        return f"refunded {amount}"

    triage = scripted_agent("triage", call_tool("refund", amount=5), reply("Done."), reply("Hi!"))
    triage.default_options["tools"] = [refund]
    host = ConversationHost(HandoffWorkflowBuilder(triage), store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c", "refund 5")
    [request] = waiting.value.requests
    answer = {str(request.id): request.to_function_approval_response(approved=True)}
    first = await host.respond("c", answer, idempotency_key="answer-1")
    again = await host.respond("c", answer, idempotency_key="answer-1")  # nothing waits now
    assert first.text == again.text == "Done."
    streamed = [e async for e in host.stream("c", "hello", idempotency_key="s")]
    replayed = [e async for e in host.stream("c", "hello", idempotency_key="s")]
    assert [e.type for e in replayed] == ["handoff_turn_completed"]
    [done] = [e for e in streamed if e.type == HANDOFF_TURN_EVENT]
    assert replayed[0].data.text == done.data.text == "Hi!"
    assert len(client_of(triage).calls) == 3


async def test_replay_reads_a_turn_back_or_finishes_it_and_never_runs_a_new_one(
    store: ConversationStore,
) -> None:
    builder, triage, billing = desk(
        [handoff_to("billing", goal="Refund.")], [never_answer(), reply("Refunded.")]
    )
    host = ConversationHost(builder, store)
    assert await host.replay("c", "k") is None  # no call with that key: nothing runs
    assert await host.history("c") == []
    dropped = asyncio.ensure_future(host.send("c", "refund me", idempotency_key="k"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30  # a backstop: billing's model is called after the handoff
    while not client_of(billing).calls:
        assert loop.time() < deadline, "billing's model was never called"
        await asyncio.sleep(0.01)
    dropped.cancel()  # the connection drops while billing's model runs
    with pytest.raises(asyncio.CancelledError):
        await dropped
    finished = await ConversationHost(builder, store).replay("c", "k")
    assert finished is not None
    assert (finished.text, finished.active_agent) == ("Refunded.", "billing")
    again = await ConversationHost(builder, store).replay("c", "k")
    assert again is not None
    assert (again.text, [h.target for h in again.handoffs]) == ("Refunded.", ["billing"])
    assert await host.replay("c", "another key") is None
    assert (len(client_of(triage).calls), len(client_of(billing).calls)) == (1, 2)
    record = await store.load("c")
    assert record is not None
    assert [role for role, _ in stored_texts(record)].count("user") == 1


async def test_bad_keys_are_refused_before_any_io() -> None:
    builder, _, _ = desk([], [])
    host = ConversationHost(builder, InMemoryConversationStore())
    for key in ("", " ", "k" * 257):
        with pytest.raises(ValueError, match="idempotency_key"):
            await host.send("c", "hi", idempotency_key=key)


# -- conversation ids --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("conversation_id", "problem"),
    [
        ("", "must not be empty or blank"),
        ("  ", "must not be empty or blank"),
        ("x" * (MAX_CONVERSATION_ID_LENGTH + 1), "the limit is 256"),
        ("a\x00b", "has the character '\\\\x00' at position 1"),
        ("a\nb", "has the character '\\\\n' at position 1"),
        ("a\ud800", "lone surrogates"),
        (42, "must be a string"),
    ],
    ids=["empty", "blank", "too-long", "nul", "newline", "surrogate", "not-a-string"],
)
async def test_bad_ids_are_refused_before_any_io(
    tmp_path: Path, conversation_id: Any, problem: str
) -> None:
    builder, triage, _ = desk([reply("never")], [])
    path = tmp_path / "c.db"
    host = ConversationHost(builder, SqliteConversationStore(path))
    with pytest.raises(ValueError, match=problem):
        await host.send(conversation_id, "hi")
    assert not path.exists()  # not even opened
    assert client_of(triage).calls == []


async def test_the_longest_id_and_any_printable_text_work(store: ConversationStore) -> None:
    builder, _, _ = desk([reply("a"), reply("b")], [])
    host = ConversationHost(builder, store)
    for conversation_id in ("é" * MAX_CONVERSATION_ID_LENGTH, "'; DROP TABLE x; -- 🙂 ../x"):
        assert (await host.send(conversation_id, "hi")).text in ("a", "b")
        assert await host.active_agent(conversation_id) == "triage"


# -- text that is not valid Unicode, records that do not decode --------------------------------


async def test_a_lone_surrogate_from_the_model_is_stored_and_read_back(
    store: ConversationStore,
) -> None:
    builder, _, _ = desk([reply("bad \ud83d text"), reply("fine")], [])
    host = ConversationHost(builder, store, live_conversations=0)
    assert (await host.send("c", "hi \udc00")).text == "bad \ud83d text"
    assert (await host.send("c", "again")).text == "fine"  # reloaded from the store
    record = await store.load("c")
    assert record is not None
    assert [t for _, t in stored_texts(record)] == ["hi \udc00", "bad \ud83d text", "again", "fine"]


def good_row(text: str = "hi", role: str = "user") -> str:
    return f'{{"type":"message","role":"{role}","contents":[{{"type":"text","text":"{text}"}}]}}'


def test_rows_crafted_to_shift_content_into_a_neighbour_are_refused() -> None:
    """Each row must be one complete message on its own, however its neighbours end."""
    rows = [
        (0, '{"role":"user","x":"},0],[{"},0],[{"role":"assistant"}'),
        (1, '{"role":"user","contents":[]}'),
    ]
    with pytest.raises(CorruptConversationError, match="message #0 is not valid JSON") as caught:
        record_from_rows("c1", 1, 2, "{}", rows)
    assert caught.value.position == 0


async def test_a_record_that_decodes_but_is_no_message_names_its_position(tmp_path: Path) -> None:
    store = SqliteConversationStore(tmp_path / "c.db")
    builder, triage, _ = desk([reply("hello")], [])
    host = ConversationHost(builder, store, live_conversations=0)
    await host.send("c", "hi")
    with sqlite3.connect(tmp_path / "c.db") as db:
        db.execute(
            "UPDATE handoff_messages SET body = ? WHERE position = 1",
            ('{"role":"assistant","contents":[42]}',),
        )
    corrupt = r"message #1 is not a valid message \(content #0 is not a content object"
    with pytest.raises(CorruptConversationError, match=corrupt) as e:
        await host.send("c", "again")
    assert (e.value.conversation_id, e.value.position) == ("c", 1)
    assert len(client_of(triage).calls) == 1
    await store.close()


async def test_invalid_utf8_in_a_sqlite_row_is_a_corrupt_conversation(tmp_path: Path) -> None:
    store = SqliteConversationStore(tmp_path / "c.db")
    builder, _, _ = desk([reply("hello"), reply("other")], [])
    host = ConversationHost(builder, store, live_conversations=0)
    await host.send("c", "hi")
    await host.send("other", "hi")
    with sqlite3.connect(tmp_path / "c.db") as db:
        db.execute(
            "UPDATE handoff_messages SET body = CAST(? AS BLOB) WHERE conversation_id = 'c' "
            "AND position = 0",
            (b'{"role":"user","contents":[],"x":"\xff\xfe"}',),
        )
    with pytest.raises(CorruptConversationError, match="message #0 is not valid UTF-8") as e:
        await store.load("c")
    assert e.value.position == 0
    assert await store.load("other") is not None  # other conversations keep working
    await store.close()


async def test_a_damaged_sqlite_file_is_a_corrupt_conversation(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    path.write_bytes(b"this is not a database" * 200)
    store = SqliteConversationStore(path)
    builder, triage, _ = desk([reply("never")], [])
    with pytest.raises(CorruptConversationError, match="is damaged") as e:
        await ConversationHost(builder, store).send("c", "hi")
    assert e.value.conversation_id == "c"
    assert isinstance(e.value.__cause__, sqlite3.DatabaseError)
    assert client_of(triage).calls == []


@pytest.mark.parametrize(
    "hosting_state",
    [
        {"receipts": "nope"},
        {"failures": "many"},
        {"last_activity": "yesterday"},
        {"last_activity": "2026-12-01T10:00:00"},
        {"turn_keys": [1, 2]},
    ],
    ids=["receipts", "failures", "last-activity", "last-activity-without-a-time-zone", "keys"],
)
async def test_a_bad_hosting_state_is_a_corrupt_conversation(
    store: ConversationStore, hosting_state: dict[str, Any]
) -> None:
    builder, triage, _ = desk([reply("hello")], [])
    host = ConversationHost(builder, store, live_conversations=0)
    await host.send("c", "hi")
    await rewrite_state(store, "c", lambda state: {**state, **hosting_state})
    [field] = hosting_state
    with pytest.raises(CorruptConversationError, match=f"the hosting state is not valid.*{field}"):
        await host.send("c", "again")
    assert len(client_of(triage).calls) == 1


# -- statements per turn -----------------------------------------------------------------------


class CountingStore:
    """A store that counts the calls made to it."""

    def __init__(self, inner: ConversationStore) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await method(*args, **kwargs)

        return counted


async def test_a_live_conversation_takes_its_lease_with_the_first_write(
    store: ConversationStore,
) -> None:
    """Two statements for a continuing turn: the first write takes the lease, the last gives it
    back; no separate acquire, release or load."""
    builder, _, _ = desk([handoff_to("billing")], [reply("one"), reply("two"), reply("three")])
    counting = CountingStore(store)
    host = ConversationHost(builder, counting)  # pyright: ignore[reportArgumentType]
    await host.send("c", "hi")
    counting.calls.clear()
    assert (await host.send("c", "again")).text == "two"
    assert counting.calls == ["acquire_and_append", "append"]
    async with hold(store, "c"):  # given back with the last write
        pass
    assert (await host.send("c", "and again")).text == "three"


async def test_a_live_conversation_held_elsewhere_is_busy_or_waited_for(
    store: ConversationStore,
) -> None:
    builder, _, billing = desk([handoff_to("billing")], [reply("one"), reply("two")])
    host = ConversationHost(builder, store)
    await host.send("c", "hi")
    before = await store.load("c")
    async with hold(store, "c"):  # another worker's turn
        with pytest.raises(ConversationBusyError):
            await host.send("c", "again")
        after = await store.load("c")
        assert before is not None
        assert after is not None
        assert (after.version, after.messages) == (before.version, before.messages)  # untouched
        waiting = asyncio.ensure_future(host.send("c", "again", wait=True))
        await asyncio.sleep(0.1)
        assert not waiting.done()
    assert (await waiting).text == "two"
    assert len(client_of(billing).calls) == 2  # the busy attempt called nobody
    assert [m.text for m in received(billing).messages if m.role == "user"][-1] == "again"


# -- what the review found ---------------------------------------------------------------------


class SilentAfterCommit:
    """A store whose first-write-takes-the-lease commits, then never answers (a cut network)."""

    def __init__(self, inner: ConversationStore) -> None:
        self.inner = inner
        self.committed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def acquire_and_append(self, conversation_id: str, **kwargs: Any) -> Any:
        await self.inner.acquire_and_append(conversation_id, **kwargs)
        self.committed.set()
        await asyncio.Event().wait()


async def test_a_send_cancelled_while_its_first_write_takes_the_lease_gives_it_back(
    store: ConversationStore,
) -> None:
    builder, _, _ = desk([handoff_to("billing")], [reply("one"), reply("never")])
    silent = SilentAfterCommit(store)
    host = ConversationHost(builder, silent)  # pyright: ignore[reportArgumentType]
    await host.send("c", "hi")
    sending = asyncio.ensure_future(host.send("c", "again"))
    await silent.committed.wait()
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sending
    async with hold(store, "c"):  # free at once, not after the 30 s lease
        pass


async def test_an_agents_own_timeout_error_is_a_failure_not_a_deadline(
    store: ConversationStore,
) -> None:
    def provider_timeout(call: ModelCall) -> Step:
        del call
        raise TimeoutError("the provider timed out")

    builder, _, _ = desk([handoff_to("billing")], [provider_timeout], agent_call=30)
    with pytest.raises(TimeoutError, match="the provider timed out"):
        await ConversationHost(builder, store).send("c", "hi")
    record = await store.load("c")
    assert record is not None
    assert record.state["failures"] == 1  # counted, to be retried


async def test_an_approved_tool_that_hangs_ends_the_turn_at_its_deadline(
    store: ConversationStore,
) -> None:
    from agent_framework import tool

    @tool(approval_mode="always_require")
    async def refund(amount: int) -> str:
        """Refund money."""
        await asyncio.Event().wait()
        return "never"

    triage = scripted_agent("triage", call_tool("refund", amount=5), reply("Hello again."))
    triage.default_options["tools"] = [refund]
    host = ConversationHost(HandoffWorkflowBuilder(triage).with_timeouts(turn=0.3), store)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c", "refund 5")
    [request] = waiting.value.requests
    answer = {str(request.id): request.to_function_approval_response(approved=True)}
    result = await asyncio.wait_for(host.respond("c", answer), 10)
    assert (result.status, result.timeout) == (
        "turn_timeout",
        TurnTimeoutEvent("turn", "triage", 0.3),
    )
    assert answered_everywhere(result.conversation)
    async with hold(store, "c"):
        pass
    assert (await host.send("c", "hi")).text == "Hello again."


@pytest.mark.parametrize(
    ("host_state", "problem"),
    [
        ({"pending": {"agent": "triage", "requests": [{"no": "type"}]}}, "does not load"),
        ({"speaker": 7}, "speaker"),
    ],
    ids=["pending-request-without-type", "speaker-not-a-string"],
)
async def test_a_bad_host_state_is_a_corrupt_conversation(
    store: ConversationStore, host_state: dict[str, Any], problem: str
) -> None:
    builder, triage, _ = desk([reply("hello")], [])
    host = ConversationHost(builder, store, live_conversations=0)
    await host.send("c", "hi")
    await rewrite_state(
        store, "c", lambda state: {**state, "host": {**state["host"], **host_state}}
    )
    with pytest.raises(CorruptConversationError, match=problem):
        await host.send("c", "again")
    with pytest.raises(CorruptConversationError):
        await host.abandon("c")
    assert len(client_of(triage).calls) == 1


# -- a turn that no provider takes, and what the caller is told ---------------------------------


def content_filter(call: ModelCall) -> Step:
    """A provider that refuses every request whose history holds a certain message."""
    if any("FORBIDDEN" in message.text for message in call.messages):
        raise RuntimeError("content filter: the request was refused")
    return reply(f"Hello! You said: {call.user_text}")


async def test_an_abandoned_turn_leaves_every_later_view_and_unstored_messages_say_so(
    store: ConversationStore,
) -> None:
    triage = scripted_agent("triage", respond_with=content_filter)
    host = ConversationHost(HandoffWorkflowBuilder(triage), store)
    with pytest.raises(RuntimeError, match="content filter"):
        await host.send("c", "FORBIDDEN words")  # stored; the turn failed

    with pytest.raises(MessageNotStoredError) as first:
        await host.send("c", "hello?")
    assert str(first.value) == (
        "Conversation 'c': the message was not stored: its interrupted turn was retried first "
        "and failed again (RuntimeError: content filter: the request was refused); the next "
        "message retries it (retry 2 of 2; after the last, the turn is abandoned and the message "
        "runs), or abandon() it now."
    )
    assert isinstance(first.value.__cause__, RuntimeError)

    result = await host.send("c", "hello???")  # the last retry fails: abandoned, this one runs
    assert result.text == "Hello! You said: hello???"
    assert result.recovered is not None
    assert result.recovered.status == "abandoned"
    assert [m.text for m in received(triage).messages] == ["hello???"]

    # A restarted host reads the conversation back: the abandoned turn stays out of every view.
    restarted = ConversationHost(HandoffWorkflowBuilder(triage), store)
    again = await restarted.send("c", "still there?")
    assert again.text == "Hello! You said: still there?"
    assert [m.text for m in received(triage).messages] == [
        "hello???", "Hello! You said: hello???", "still there?",
    ]  # fmt: skip

    history = await restarted.history("c")
    assert [
        (m.text, bool((m.additional_properties or {}).get(ABANDONED_TURN_PROPERTY)))
        for m in history
    ] == [
        ("FORBIDDEN words", True),  # kept, marked
        ("hello???", False),  # the refused messages were never stored; this one was
        ("Hello! You said: hello???", False),
        ("still there?", False),
        ("Hello! You said: still there?", False),
    ]


async def test_a_turn_whose_stored_payload_no_longer_fits_can_be_abandoned(
    store: ConversationStore,
) -> None:
    from pydantic import BaseModel, ConfigDict

    class Refund(BaseModel):
        model_config = ConfigDict(extra="forbid")
        amount: int

    class RefundV2(Refund):  # the model changed between deployments: a new required field
        currency: str

    def desk(model: type[BaseModel], *billing_steps: Any) -> HandoffWorkflowBuilder:
        triage = scripted_agent(
            "triage", call_tool("handoff_to_billing", amount=5), reply("Triage here.")
        )
        billing = scripted_agent("billing", *billing_steps)
        return HandoffWorkflowBuilder(triage).with_handoff(triage, billing, payload=model)

    with pytest.raises(RuntimeError, match="model down"):
        await ConversationHost(desk(Refund, model_down), store).send("c", "refund 5")
    upgraded = ConversationHost(desk(RefundV2, reply("Billing here.")), store)
    with pytest.raises(CorruptConversationError, match="does not fit RefundV2"):
        await upgraded.send("c", "hello?")  # rightly refused before any model call

    abandoned = await upgraded.abandon("c")  # but the conversation can be freed
    assert abandoned is not None
    assert abandoned.status == "abandoned"
    assert abandoned.handoffs[0].payload == {"amount": 5}  # as stored: it fits no model now
    result = await upgraded.send("c", "hello?")  # at triage: billing never answered
    assert result.text == "Triage here."
    first_call = received(upgraded.builder.initial_agent, call=0)
    assert [m.text for m in first_call.messages] == ["hello?"]  # not the abandoned turn


# -- the size of what a turn takes ---------------------------------------------------------------


async def test_an_input_larger_than_the_limit_is_refused_before_anything_is_stored(
    store: ConversationStore,
) -> None:
    triage = scripted_agent("triage", reply("hi"))
    host = ConversationHost(HandoffWorkflowBuilder(triage), store)
    huge = "x" * (20 * 1024 * 1024)
    with pytest.raises(MessageTooLargeError) as refused:
        await host.send("c", huge)
    assert refused.value.limit == DEFAULT_MAX_INPUT_BYTES
    assert refused.value.size > 20 * 1024 * 1024
    assert str(refused.value) == (
        f"Conversation 'c': the message is {refused.value.size:,} bytes as JSON; the limit is "
        "4,194,304 bytes (max_input_bytes). Nothing was stored."
    )
    with pytest.raises(MessageTooLargeError):
        [event async for event in host.stream("c", huge)]
    assert await store.load("c") is None
    assert client_of(triage).calls == []

    small = ConversationHost(HandoffWorkflowBuilder(triage), store, max_input_bytes=200)
    with pytest.raises(MessageTooLargeError, match="the limit is 200 bytes"):
        await small.send("c", "é" * 100)  # 200 bytes of UTF-8, more with the JSON around it
    assert (await small.send("c", "short")).text == "hi"
    unbounded = ConversationHost(HandoffWorkflowBuilder(triage), store, max_input_bytes=None)
    assert unbounded.max_input_bytes is None
    with pytest.raises(ValueError, match="max_input_bytes must be positive or None, got 0"):
        ConversationHost(HandoffWorkflowBuilder(triage), store, max_input_bytes=0)


async def test_answers_larger_than_the_limit_are_refused(store: ConversationStore) -> None:
    from agent_framework import Content, FunctionTool

    triage = scripted_agent("triage", call_tool("lookup", order="A-1"), reply("Found it."))
    # A tool with no function: an external call, which the application answers.
    external = FunctionTool(name="lookup", description="Look an order up.", func=None)
    triage.default_options["tools"] = [external]
    host = ConversationHost(HandoffWorkflowBuilder(triage), store, max_input_bytes=1000)
    with pytest.raises(PendingRequestsError) as waiting:
        await host.send("c", "where is A-1?")
    [request] = waiting.value.requests
    answer = Content.from_function_result(call_id=str(request.call_id), result="y" * 2000)
    with pytest.raises(MessageTooLargeError, match="the answers is"):
        await host.respond("c", {str(request.id): answer})
    small = Content.from_function_result(call_id=str(request.call_id), result="shipped")
    assert (await host.respond("c", {str(request.id): small})).text == "Found it."


# -- one record of a finished turn ---------------------------------------------------------------


def same_turn(first: HandoffTurnResult, repeated: HandoffTurnResult) -> None:
    assert [m.text for m in repeated.messages] == [m.text for m in first.messages]
    assert (repeated.status, repeated.active_agent) == (first.status, first.active_agent)
    assert (repeated.handoffs, repeated.trace) == (first.handoffs, first.trace)

    def delegations(turn: HandoffTurnResult) -> list[tuple[Any, ...]]:
        return [
            (
                d.caller,
                d.expert,
                d.call_id,
                d.task,
                d.result,
                d.outcome,
                [m.text for m in d.messages],
            )
            for d in turn.delegations
        ]

    assert delegations(repeated) == delegations(first)
    assert (repeated.start, repeated.hidden) == (first.start, first.hidden)
    assert len(repeated.conversation) == len(first.conversation)


async def test_a_repeated_call_returns_the_turn_it_ran_with_its_delegations(
    store: ConversationStore,
) -> None:
    support = scripted_agent(
        "support", call_tool("ask_policy", task="How long do refunds take?"), reply("30 days.")
    )
    policy = scripted_agent("policy", reply("Refunds take 30 days."))
    builder = HandoffWorkflowBuilder(support).with_delegate(support, policy)
    host = ConversationHost(builder, store)
    first = await host.send("c", "refund time?", idempotency_key="k1")
    assert [d.expert for d in first.delegations] == ["policy"]

    same_turn(first, await host.send("c", "refund time?", idempotency_key="k1"))  # kept live
    cold = ConversationHost(builder, store)  # read back from the store
    same_turn(first, await cold.send("c", "refund time?", idempotency_key="k1"))
    [done] = [
        event.data
        async for event in cold.stream("c", "refund time?", idempotency_key="k1")
        if event.type == HANDOFF_TURN_EVENT
    ]
    same_turn(first, done)
    assert len(client_of(policy).calls) == 1
