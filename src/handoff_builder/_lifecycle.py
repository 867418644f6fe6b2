"""One lifecycle for hosted turns, whatever hosts them.

A hosted conversation runs every call through the same steps, on a store
(:class:`~handoff_builder.ConversationHost`) or on Temporal (its conversation workflow):

1. **The caller's input is checked** before anything is stored: the idempotency key
   (:func:`check_idempotency_key`), the message (:func:`user_messages`), the answers
   (:func:`answers_by_request`).
2. **A repeated call** (the same idempotency key) gets the turn it ran, kept as a
   :class:`Receipt` (the latest :data:`KEPT_RECEIPTS` of a conversation).
3. **An interrupted turn** (a crash, a failed agent call) is finished before anything new runs:
   retried while it has failed at most ``max_turn_retries`` times, then abandoned
   (:func:`finish_interrupted`).
4. **The turn runs**; a failure of the turn itself counts against it, and the conversation goes
   on from the state as stored before the failed attempt (:func:`failure_text` says what failed).
5. **Its result** is read from the turn's events (:func:`turn_result`).

A host is a :class:`TurnBackend` (it runs an attempt, goes back to its stored state, stores an
abandoned turn); the steps and the checks are written here, once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent_framework import Content, Message

from ._events import HANDOFF_TURN_EVENT, HandoffTurnResult, TurnAbandonedEvent
from ._host import GroupChatHost, ResumeTurn
from ._state import TurnRecord
from .exceptions import HandoffBuilderError, PendingRequestsError, UnexpectedAnswersError

logger = logging.getLogger("handoff_builder")

DEFAULT_MAX_TURN_RETRIES = 2
"""How many times the next messages retry a failed turn before it is abandoned."""
MAX_IDEMPOTENCY_KEY_LENGTH = 256
"""The longest idempotency key, in characters."""
KEPT_RECEIPTS = 64
"""How many keyed turns a conversation remembers (its latest), on a store and on Temporal."""

UserInput = str | Message | Sequence[Message]
"""What a hosted turn takes: a text, a message, or several messages."""


def check_idempotency_key(key: str | None) -> None:
    """Refuse a key that is not a non-empty string of at most the longest length.

    Raises:
        ValueError: the key is empty, blank, not a string, or too long.
    """
    if key is None:
        return
    if not isinstance(key, str) or not key.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ValueError(f"idempotency_key must be a non-empty string or None, got {key!r}.")
    if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise ValueError(
            f"idempotency_key is {len(key)} characters long; the limit is "
            f"{MAX_IDEMPOTENCY_KEY_LENGTH}."
        )


def user_messages(message: UserInput) -> list[Message]:
    """``message`` as the turn's input messages (a text is one user message).

    Raises:
        ValueError: an empty list.
    """
    if isinstance(message, str):
        return [Message(role="user", contents=[message])]
    if isinstance(message, Message):
        return [message]
    messages = list(message)
    if not messages:
        raise ValueError("A turn needs at least one input message; got an empty list.")
    return messages


def answers_by_request(
    conversation_id: str, answers: Mapping[str, Content], pending: Sequence[Content]
) -> dict[str, Content]:
    """``answers`` keyed by the id of the request each answers.

    An external call's answer may be keyed by its call id instead of its request id.

    Raises:
        UnexpectedAnswersError: the conversation waits for no answers, or for none with one of
            these ids (the caller's mistake: not a failure of the turn).
    """
    by_call = {
        str(request.call_id): str(request.id)
        for request in pending
        if request.type == "function_call" and request.call_id is not None
    }
    keyed = {by_call.get(key, key): answer for key, answer in answers.items()}
    waiting = [str(request.id) for request in pending]
    unknown = sorted(set(keyed) - set(waiting))
    if not waiting or unknown:
        raise UnexpectedAnswersError(conversation_id, unknown, sorted(waiting))
    return keyed


@dataclass(frozen=True)
class Receipt(TurnRecord):
    """A finished turn, by the idempotency keys of the calls that ran it."""

    keys: tuple[str, ...] = ()


def kept(receipts: Iterable[Any], receipt: Any) -> list[Any]:
    """``receipts`` with ``receipt`` after them, the latest :data:`KEPT_RECEIPTS` of them."""
    return [*receipts, receipt][-KEPT_RECEIPTS:]


def turn_result(
    conversation_id: str, host: GroupChatHost, events: Iterable[Any]
) -> HandoffTurnResult:
    """The result among a run's events.

    Raises:
        PendingRequestsError: the turn waits for answers instead.
        HandoffBuilderError: the run ended with no result (not expected).
    """
    found = None
    for event in events:
        if event.type == HANDOFF_TURN_EVENT and isinstance(event.data, HandoffTurnResult):
            found = event.data
    if found is not None:
        return found
    if host.pending_requests:
        raise PendingRequestsError(conversation_id, host.pending_requests)
    raise HandoffBuilderError(f"The turn of conversation {conversation_id!r} produced no result.")


def failure_text(error: BaseException) -> str:
    """What failed, as a turn keeps it: ``"TypeName: message"``, at most 500 characters."""
    return f"{type(error).__name__}: {error}"[:500]


class TurnBackend(Protocol):
    """A conversation as a host opened it: what the lifecycle's steps run on."""

    @property
    def conversation_id(self) -> str:
        """The conversation's id."""
        ...

    @property
    def host(self) -> GroupChatHost:
        """The conversation's host, loaded as stored (or as the last attempt left it)."""
        ...

    @property
    def failures(self) -> int:
        """The failed attempts of the open turn."""
        ...

    @property
    def last_error(self) -> str | None:
        """What failed last in the open turn (:func:`failure_text`)."""
        ...

    async def attempt(self, command: object) -> list[Any]:
        """Run ``command`` on the host: its events; a failure of the turn is counted, raised."""
        ...

    async def restore(self) -> bool:
        """Go back to the conversation as stored, to give up its turn after a failed last retry.

        False: this call leaves the turn open and its failure stands (the next call abandons
        it), as a backend must where an earlier release did so (a Temporal history).
        """
        ...

    async def give_up(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        """Abandon the open turn (``host.abandon_turn(event)``), stored; its result."""
        ...


async def finish_interrupted(backend: TurnBackend, max_retries: int) -> HandoffTurnResult | None:
    """Finish the turn an earlier attempt left open: its result (``None``: none is open).

    It is retried while it has failed at most ``max_retries`` times; after that, or when the last
    retry fails, it is abandoned (status ``"abandoned"``, a ``TurnAbandonedEvent`` with
    ``reason="failed"`` naming the last error).

    Raises:
        PendingRequestsError: the turn waits for answers (a person's, not a retry's).
        Exception: a retry failed, with retries left (counted; the turn stays open).
    """
    host = backend.host
    if host.pending_requests:
        raise PendingRequestsError(backend.conversation_id, host.pending_requests)
    following = host.next_agent
    if not host.turn_open or following is None:
        return None
    if backend.failures <= max_retries:
        retry = f" (retry {backend.failures} of {max_retries})" if backend.failures else ""
        logger.warning(
            "conversation %s: finishing a turn interrupted before %r answered%s",
            backend.conversation_id, following, retry,
        )  # fmt: skip
        try:
            events = await backend.attempt(ResumeTurn())
            return turn_result(backend.conversation_id, backend.host, events)
        except Exception:
            # That was the last retry: give the turn up, as stored (where the backend may now).
            if backend.failures <= max_retries or not await backend.restore():
                raise
    event = TurnAbandonedEvent("failed", following, backend.failures, backend.last_error)
    return await backend.give_up(event)


__all__ = [
    "DEFAULT_MAX_TURN_RETRIES",
    "KEPT_RECEIPTS",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "Receipt",
    "TurnBackend",
    "UserInput",
    "answers_by_request",
    "check_idempotency_key",
    "failure_text",
    "finish_interrupted",
    "kept",
    "turn_result",
]
