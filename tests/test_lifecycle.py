"""The hosted lifecycle's steps, on a backend of plain values: no store, no workflow, no model.

ConversationHost and the Temporal workflow run the same steps (``handoff_builder._lifecycle``);
tests/test_hosting*.py and tests/test_temporal.py check each backend end to end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from agent_framework import Content, Message, WorkflowEvent

from handoff_builder import (
    HANDOFF_TURN_EVENT,
    HandoffTurnResult,
    PendingRequestsError,
    TurnAbandonedEvent,
    UnexpectedAnswersError,
)
from handoff_builder._host import ResumeTurn
from handoff_builder._lifecycle import (
    KEPT_RECEIPTS,
    answers_by_request,
    check_idempotency_key,
    finish_interrupted,
    kept,
    user_messages,
)
from handoff_builder._state import TurnRecord


@dataclass
class Backend:
    """A conversation whose turn ``next_agent`` left open; ``outcomes`` are its attempts' ends."""

    next_agent: str | None = "billing"
    pending: list[Content] = field(default_factory=list[Content])
    failures: int = 0
    last_error: str | None = None
    outcomes: list[BaseException | str] = field(default_factory=list[BaseException | str])
    done: list[str] = field(default_factory=list[str])  # what the lifecycle did, in order
    conversation_id: str = "c-1"
    may_give_up: bool = True  # restore()'s answer

    @property
    def host(self) -> Any:
        return SimpleNamespace(
            pending_requests=self.pending,
            next_agent=self.next_agent,
            turn_open=self.next_agent is not None,
        )

    async def attempt(self, command: object) -> list[Any]:
        self.done.append(f"attempt {type(command).__name__}")
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            self.failures += 1
            self.last_error = f"{type(outcome).__name__}: {outcome}"
            raise outcome
        self.next_agent = None
        reply = TurnRecord(0, 1, "completed", "billing").result([Message("assistant", [outcome])])
        return [WorkflowEvent(HANDOFF_TURN_EVENT, data=reply)]  # pyright: ignore[reportArgumentType]

    async def restore(self) -> bool:
        self.done.append("restore")
        return self.may_give_up

    async def give_up(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        self.done.append(f"give up {event.reason} at {event.agent} after {event.attempts}")
        self.next_agent = None
        return TurnRecord(0, 0, "abandoned", "billing", abandoned=event).result([])


async def test_nothing_to_finish_when_no_turn_is_open() -> None:
    backend = Backend(next_agent=None)
    assert await finish_interrupted(backend, 2) is None
    assert backend.done == []


async def test_an_interrupted_turn_is_resumed_and_its_result_returned() -> None:
    backend = Backend(outcomes=["Your refund is on its way."])
    result = await finish_interrupted(backend, 2)
    assert result is not None
    assert result.text == "Your refund is on its way."
    assert backend.done == [f"attempt {ResumeTurn.__name__}"]


async def test_a_retry_that_fails_with_retries_left_is_raised_and_the_turn_stays_open() -> None:
    backend = Backend(failures=1, outcomes=[ConnectionError("the model is down")])
    with pytest.raises(ConnectionError):
        await finish_interrupted(backend, 2)
    assert backend.done == ["attempt ResumeTurn"]
    assert (backend.failures, backend.next_agent) == (2, "billing")


async def test_the_last_retry_failing_abandons_the_turn_from_its_stored_state() -> None:
    backend = Backend(failures=2, outcomes=[ConnectionError("the model is down")])
    result = await finish_interrupted(backend, 2)
    assert result is not None
    assert result.abandoned == TurnAbandonedEvent(
        "failed", "billing", 3, "ConnectionError: the model is down"
    )
    assert backend.done == ["attempt ResumeTurn", "restore", "give up failed at billing after 3"]


async def test_a_backend_may_keep_the_failure_of_the_last_retry() -> None:
    """A backend that cannot give the turn up in this call (a Temporal history recorded before)
    keeps it open: the failure is raised, the next call abandons it."""
    backend = Backend(failures=2, outcomes=[ConnectionError("the model is down")])
    backend.may_give_up = False
    with pytest.raises(ConnectionError):
        await finish_interrupted(backend, 2)
    assert backend.done == ["attempt ResumeTurn", "restore"]
    assert (backend.failures, backend.next_agent) == (3, "billing")


async def test_a_turn_past_its_retries_is_abandoned_without_running() -> None:
    backend = Backend(failures=3, last_error="TimeoutError: slow")
    result = await finish_interrupted(backend, 2)
    assert result is not None
    assert result.abandoned is not None
    assert result.abandoned.error == "TimeoutError: slow"
    assert backend.done == ["give up failed at billing after 3"]


async def test_a_turn_that_waits_for_a_person_is_not_retried() -> None:
    request = Content.from_function_call(call_id="call-1", name="lookup", arguments="{}")
    backend = Backend(pending=[request])
    with pytest.raises(PendingRequestsError) as waiting:
        await finish_interrupted(backend, 2)
    assert waiting.value.requests == (request,)
    assert backend.done == []


def test_answers_are_keyed_by_request_id_or_by_an_external_calls_call_id() -> None:
    call = Content.from_function_call(call_id="call-1", name="lookup", arguments="{}")
    call.id = "request-1"
    answer = Content.from_function_result(call_id="call-1", result="shipped")
    assert answers_by_request("c", {"call-1": answer}, [call]) == {"request-1": answer}
    assert answers_by_request("c", {"request-1": answer}, [call]) == {"request-1": answer}
    with pytest.raises(UnexpectedAnswersError) as refused:
        answers_by_request("c", {"nope": answer, "call-1": answer}, [call])
    assert (refused.value.unknown, refused.value.waiting) == (("nope",), ("request-1",))
    assert str(refused.value) == (
        "Conversation 'c' waits for no request with id 'nope'; it waits for ['request-1']."
    )
    with pytest.raises(UnexpectedAnswersError, match="waits for no answers; use send"):
        answers_by_request("c", {"call-1": answer}, [])


@pytest.mark.parametrize(
    ("key", "problem"),
    [("", "non-empty string"), ("  ", "non-empty string"), ("k" * 257, "257 characters long")],
)
def test_an_idempotency_key_is_checked(key: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        check_idempotency_key(key)
    check_idempotency_key("k" * 256)
    check_idempotency_key(None)


def test_user_input_becomes_messages() -> None:
    [text] = user_messages("hello")
    assert (text.role, text.text) == ("user", "hello")
    message = Message("user", ["hi"])
    assert user_messages(message) == [message]
    assert user_messages([message, message]) == [message, message]
    with pytest.raises(ValueError, match="at least one input message"):
        user_messages([])


def test_a_conversation_keeps_its_latest_receipts() -> None:
    receipts: list[int] = []
    for number in range(KEPT_RECEIPTS + 3):
        receipts = kept(receipts, number)
    assert receipts == list(range(3, KEPT_RECEIPTS + 3))
