"""A turn as the client streams it: live updates from the relay, then the rest from its result.

:func:`follow` reads the turn's relay stream while the turn's Update runs and yields what it
reads as ``ConversationHost.stream()`` yields it: the agents' updates (``output``, and
``handoff_intermediate`` for intermediate agents and experts), and the handoffs and delegations
decided before each agent call. Once the Update has returned, it reads what is left and yields
the end of the turn from the result (:func:`closing_events`): what was decided after the last
agent call, then ``handoff_turn_completed``. The result is the truth: when the relay was lost,
or it misses part of an agent call the turn kept, a :class:`StreamIncompleteEvent` says so and
the turn's replies follow whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from agent_framework import AgentResponseUpdate, Message, WorkflowEvent

from handoff_builder._engine import HOST_ID
from handoff_builder._events import (
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_TURN_EVENT,
    DelegationEvent,
    HandoffEvent,
    HandoffTurnResult,
)
from handoff_builder._state import validated

from ._payloads import RelayedCall, TurnOutcome, decode_events
from ._relay import (
    AttemptEntry,
    FailedEntry,
    RedisRelay,
    RelayUnavailableError,
    UpdateEntry,
    read_entry,
)

logger = logging.getLogger("handoff_builder.temporal.relay")

READ_TRIES = 3  # a read of the relay that fails is tried this often in all
READ_RETRY_SECONDS = 0.1  # times the tries so far, before the next

HANDOFF_RETRY_EVENT: str = "handoff_agent_call_retried"
"""``WorkflowEvent.type`` of an agent call run again (``data``: an AgentCallRetriedEvent)."""
HANDOFF_STREAM_INCOMPLETE_EVENT: str = "handoff_stream_incomplete"
"""``WorkflowEvent.type`` of live updates that broke off (``data``: a StreamIncompleteEvent)."""


@dataclass(frozen=True)
class AgentCallRetriedEvent:
    """An agent call runs again: its worker died, or its model failed, in an earlier attempt.

    The updates of the earlier attempt that were yielded are void; the updates of ``attempt``
    follow (a model writes its reply again from the start). ``call`` is the agent call's
    activity id; ``error`` what the earlier attempt raised, when its worker could say
    (``None``: it died, or was stopped, in the middle).
    """

    event_type: ClassVar[str] = HANDOFF_RETRY_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    agent: str
    attempt: int
    call: str
    error: str | None = None


@dataclass(frozen=True)
class StreamIncompleteEvent:
    """The live updates of the turn broke off, or missed part of it; ``reason`` says why.

    Every reply of the turn follows whole, from its result (the turn itself is not affected):
    show them in place of what was streamed. The events still to come follow as usual.
    """

    event_type: ClassVar[str] = HANDOFF_STREAM_INCOMPLETE_EVENT
    """The ``WorkflowEvent.type`` it is emitted under."""

    reason: str


def _event(data: Any) -> WorkflowEvent[Any]:
    return WorkflowEvent(data.event_type, data=data)


class RelayGap(Exception):  # noqa: N818 - what it is, not an error of the turn's
    """The relay misses some of the turn's entries: its replies are read from its result."""


@dataclass
class _Attempt:
    agent: str
    updates: int = 0
    done: int | None = None  # the updates it published, once it said it finished


@dataclass
class LiveTurn:
    """What the client has read of a turn's relay stream, and yielded."""

    conversation_id: str
    handoffs: int = 0  # the turn's handoffs yielded so far
    delegations: int = 0  # and its delegations
    travelled: int = 0  # and its events that travel beside its result (refusals, limits...)
    attempts: dict[tuple[str, int], _Attempt] = field(default_factory=dict[tuple[str, int], Any])
    failures: dict[str, str] = field(default_factory=dict[str, str])  # by call: the last one
    latest: dict[str, int] = field(default_factory=dict[str, int])  # by call: its last attempt

    def events(self, raw: bytes) -> list[WorkflowEvent[Any]]:
        """The events of one relay entry.

        Raises:
            RelayGap: the entry shows that the relay misses some of the turn's, or it does not
                read (a worker of another release).
        """
        try:
            entry = read_entry(raw)
            if isinstance(entry, UpdateEntry):
                return self._update(entry)
            if isinstance(entry, AttemptEntry):
                return self._began(entry)
        except (ValueError, TypeError, KeyError) as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise RelayGap(f"an entry of the relay does not read ({first})") from error
        if isinstance(entry, FailedEntry):
            self.failures[entry.call] = entry.error
            return []
        attempt = self.attempts.get((entry.call, entry.attempt))
        if attempt is not None:
            attempt.done = entry.updates
        return []

    def _update(self, entry: UpdateEntry) -> list[WorkflowEvent[Any]]:
        if entry.attempt < self.latest.get(entry.call, 0):  # void: a worker that was taken for
            return []  # dead (its heartbeat timed out) wrote on after the retry began
        attempt = self.attempts.get((entry.call, entry.attempt))
        call = f"agent call {entry.call} (attempt {entry.attempt})"
        if attempt is None:  # its start was trimmed away, or this reader came after it expired
            raise RelayGap(f"the relay misses the start of {call}")
        if entry.n != attempt.updates:
            raise RelayGap(f"the relay skips from update {attempt.updates} to {entry.n} of {call}")
        attempt.updates += 1
        update = AgentResponseUpdate.from_dict(entry.update)
        kind = "output" if entry.sink == "output" else HANDOFF_INTERMEDIATE_EVENT
        return [WorkflowEvent(cast(Any, kind), data=update)]

    def _began(self, entry: AttemptEntry) -> list[WorkflowEvent[Any]]:
        if entry.attempt < self.latest.get(entry.call, 0):  # void, as its updates: two attempts
            return []  # a stalled worker started at once may reach Redis in either order
        where = f"The relayed turn of conversation {self.conversation_id!r}"
        travelled = decode_events(entry.events[self.travelled :], where)
        self.travelled = max(self.travelled, len(entry.events))
        events = [
            _event(validated(DelegationEvent, raw, where))
            for raw in entry.delegations[self.delegations :]
        ]
        handoffs = [validated(HandoffEvent, raw, where) for raw in entry.handoffs[self.handoffs :]]
        events += _in_order(travelled, handoffs, self.handoffs)
        self.delegations = max(self.delegations, len(entry.delegations))
        self.handoffs = max(self.handoffs, len(entry.handoffs))
        self.attempts[entry.call, entry.attempt] = _Attempt(entry.agent)
        self.latest[entry.call] = entry.attempt
        if entry.attempt > 1:
            error = self.failures.get(entry.call)
            retried = AgentCallRetriedEvent(entry.agent, entry.attempt, entry.call, error)
            events.append(_event(retried))
        return events

    def missing(self, relayed: list[RelayedCall]) -> str | None:
        """What the relay misses of the agent calls the turn kept (``None``: nothing)."""
        for kept in relayed:
            attempt = self.attempts.get((kept.call, kept.attempt))
            call = f"agent call {kept.call} (attempt {kept.attempt})"
            if attempt is None:
                return (
                    f"the relay has no update of {call}: it expired, was trimmed, or its "
                    "worker has no relay"
                )
            if attempt.done is None or attempt.updates != attempt.done:
                of = "" if attempt.done is None else f" of its {attempt.done}"
                return f"the relay has {attempt.updates}{of} updates of {call}, not all"
        return None


async def follow(
    relay: RedisRelay,
    key: str,
    live: LiveTurn,
    outcome: asyncio.Future[TurnOutcome],
    result_of: Callable[[TurnOutcome], HandoffTurnResult],
) -> AsyncIterator[WorkflowEvent[Any]]:
    """The turn's events, live from relay stream ``key`` while ``outcome`` is awaited.

    Then the end of the turn, from its result (``result_of`` reads it).

    Raises:
        Whatever the turn's Update raised (``result_of`` too), after the live events it had.
    """
    reader = _Reader(relay, key, live)
    lost = None
    try:
        async for event in reader.while_running(outcome):
            yield event
        for event in await reader.rest():  # all of the turn's calls wrote before it ended
            yield event
    except RelayUnavailableError as error:
        lost = f"the relay did not answer ({error})"
    except RelayGap as gap:
        lost = str(gap)
    if lost is not None:  # said at once; the replies follow whole once the turn is over
        _warn(live, lost)
        yield _event(StreamIncompleteEvent(lost))
    await asyncio.wait({outcome})
    raw = outcome.result()
    result = result_of(raw)
    if lost is None:
        lost = _unread(live, raw)
        if lost is not None:
            yield _event(StreamIncompleteEvent(lost))
    where = f"The turn of conversation {live.conversation_id!r}"
    travelled = decode_events(raw.events, where)
    for event in closing_events(result, live, whole=lost is not None, travelled=travelled):
        yield event


class _Reader:
    """Reads a turn's relay stream into ``live``, from its first entry on."""

    def __init__(self, relay: RedisRelay, key: str, live: LiveTurn) -> None:
        self._relay = relay
        self._key = key
        self._live = live
        self._after = "0"  # the id of the last entry read

    async def while_running(
        self, outcome: asyncio.Future[TurnOutcome]
    ) -> AsyncIterator[WorkflowEvent[Any]]:
        """The events of the entries that come until ``outcome`` is done.

        Raises:
            RelayUnavailableError: Redis did not answer.
        """
        reading: asyncio.Task[list[tuple[str, bytes]]] | None = None
        try:
            while not outcome.done():
                reading = reading or asyncio.ensure_future(self._read(block=True))
                await asyncio.wait({reading, outcome}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    return  # the turn is over; the read waits for nothing more
                done, reading = reading, None
                for event in self._events(done.result()):
                    yield event
        finally:
            if reading is not None:
                reading.cancel()
                with contextlib.suppress(BaseException):
                    await reading

    async def rest(self) -> list[WorkflowEvent[Any]]:
        """The events of the entries not read yet, without waiting for more.

        Raises:
            RelayUnavailableError: Redis did not answer.
        """
        events: list[WorkflowEvent[Any]] = []
        while entries := await self._read(block=False):
            events.extend(self._events(entries))
        return events

    async def _read(self, *, block: bool) -> list[tuple[str, bytes]]:
        """The next entries, tried ``READ_TRIES`` times in all.

        A retry reads from the same entry: a dropped connection, or an event loop that stalled
        past the read's timeout, loses nothing.
        """
        tried = 1
        while True:
            try:
                return await self._relay.read(self._key, self._after, block=block)
            except RelayUnavailableError:
                if tried >= READ_TRIES:
                    raise
            await asyncio.sleep(READ_RETRY_SECONDS * tried)
            tried += 1

    def _events(self, entries: list[tuple[str, bytes]]) -> list[WorkflowEvent[Any]]:
        """The events of ``entries`` (see :meth:`LiveTurn.events`)."""
        events: list[WorkflowEvent[Any]] = []
        for entry_id, raw in entries:
            self._after = entry_id
            events.extend(self._live.events(raw))
        return events


def _unread(live: LiveTurn, outcome: TurnOutcome) -> str | None:
    """What the relay missed of the turn's agent calls (``None``: nothing)."""
    if outcome.relayed is None:  # a receipt of a turn that was sent, not streamed
        return "the turn was not relayed"
    missing = live.missing(outcome.relayed)
    if missing is not None:
        _warn(live, missing)
    return missing


def _warn(live: LiveTurn, why: str) -> None:
    logger.warning(
        "conversation %s: the live updates of its turn are incomplete (%s); its replies are "
        "yielded whole, from its result", live.conversation_id, why,
    )  # fmt: skip


def closing_events(
    result: HandoffTurnResult,
    live: LiveTurn,
    *,
    whole: bool,
    travelled: Sequence[tuple[int, WorkflowEvent[Any]]] = (),
) -> Iterator[WorkflowEvent[Any]]:
    """The end of a turn, from its result, after what ``live`` yielded of it.

    ``whole``: the turn's replies too, each as one update, with its handoffs (those not yielded
    yet) where they were made, each after the ``travelled`` events before it (the events its
    outcome carried beside its result, each with the number of handoffs before it); without a
    relay, this is the whole stream. Then the travelled events, delegations and handoffs not
    yielded yet, the escalation or the deadline, the apology, and ``handoff_turn_completed``. A
    turn given up before this one ran comes first.
    """
    recovered = result.recovered
    if recovered is not None and recovered.abandoned is not None:
        yield _event(recovered.abandoned)
    messages = list(result.messages)
    apology: Message | None = None
    if result.escalation is not None and messages and messages[-1].author_name == HOST_ID:
        apology = messages.pop()
    if whole:
        yield from _replies(result, messages, live, travelled)
    for delegation in result.delegations[live.delegations :]:
        yield _event(delegation)
    live.delegations = len(result.delegations)
    handoffs = result.handoffs[live.handoffs :]
    yield from _in_order(travelled[live.travelled :], handoffs, live.handoffs)
    live.travelled = max(live.travelled, len(travelled))
    live.handoffs = len(result.handoffs)
    for ending in (result.escalation, result.timeout):
        if ending is not None:
            yield _event(ending)
    if apology is not None:
        update = AgentResponseUpdate(
            role="assistant", contents=list(apology.contents), author_name=apology.author_name
        )
        yield WorkflowEvent(cast(Any, "output"), data=update)
    yield WorkflowEvent(cast(Any, HANDOFF_TURN_EVENT), data=result)


def _in_order(
    travelled: Sequence[tuple[int, WorkflowEvent[Any]]],
    handoffs: Sequence[HandoffEvent],
    first: int,
) -> list[WorkflowEvent[Any]]:
    """``handoffs`` (the turn's from number ``first`` on), with the ``travelled`` events.

    Each event goes before the first of them that came after it.
    """
    events: list[WorkflowEvent[Any]] = []
    waiting = list(travelled)
    for number, handoff in enumerate(handoffs, first):
        while waiting and waiting[0][0] <= number:
            events.append(waiting.pop(0)[1])
        events.append(_event(handoff))
    events += [event for _, event in waiting]
    return events


def _replies(
    result: HandoffTurnResult,
    messages: list[Message],
    live: LiveTurn,
    travelled: Sequence[tuple[int, WorkflowEvent[Any]]],
) -> Iterator[WorkflowEvent[Any]]:
    """Each reply whole, and each handoff not yielded yet after the reply that made it.

    The delegations of the agent that made a handoff come before it, and so do the travelled
    events that came before it.
    """
    by_call = {h.call_id: n for n, h in enumerate(result.handoffs) if n >= live.handoffs}
    for message in messages:
        if message.role == "assistant" and message.text:
            update = AgentResponseUpdate(
                role="assistant", contents=list(message.contents), author_name=message.author_name
            )
            yield WorkflowEvent(cast(Any, "output"), data=update)
        for content in message.contents:
            number = by_call.get(str(content.call_id)) if content.type == "function_call" else None
            if number is None or number < live.handoffs:
                continue
            handoff = result.handoffs[number]
            while live.travelled < len(travelled) and travelled[live.travelled][0] <= number:
                yield travelled[live.travelled][1]
                live.travelled += 1
            while (
                live.delegations < len(result.delegations)
                and result.delegations[live.delegations].caller == handoff.source
            ):
                yield _event(result.delegations[live.delegations])
                live.delegations += 1
            for earlier in result.handoffs[live.handoffs : number + 1]:
                yield _event(earlier)
            live.handoffs = number + 1


__all__ = [
    "HANDOFF_RETRY_EVENT",
    "HANDOFF_STREAM_INCOMPLETE_EVENT",
    "AgentCallRetriedEvent",
    "LiveTurn",
    "StreamIncompleteEvent",
    "closing_events",
    "follow",
]
