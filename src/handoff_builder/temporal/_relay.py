"""The relay: a streaming turn's live updates, from the workers that run its agents to its client.

A turn's durable result is its Update's; the relay is best-effort transport beside it. Each
relayed turn has one Redis stream, named by its client (:meth:`RedisRelay.key`), which the
activities of the turn append to and the client reads from its first entry on: a client that
connects late, or again, reads the turn from its start. Each entry is one JSON record (below):

* ``attempt``: an agent call's attempt began (the activity's id, the agent, the attempt
  number), with the turn's handoffs and delegations decided before it;
* ``update``: one of the agent's updates (``output`` or ``intermediate``, as the host streams
  them: its designations, and experts' updates as intermediate events);
* ``failed``: the attempt failed (what it raised), so that a retry follows;
* ``done``: the attempt's run finished, with how many updates it published.

A worker publishes through a :class:`_Publisher` per attempt: the agent never waits for Redis
(updates are queued and sent in batches by a task of their own), and Redis being down loses the
updates, never the turn: a warning says so once, and again once Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

from agent_framework import AgentResponseUpdate
from pydantic import BaseModel, Field, TypeAdapter
from temporalio import activity
from typing_extensions import override

from handoff_builder._events import DelegationEvent, HandoffEvent
from handoff_builder._host import GroupChatHost
from handoff_builder._host_settings import HostSettings, StreamedAs
from handoff_builder._runner import Sink
from handoff_builder._state import adapter_for
from handoff_builder.exceptions import HandoffBuilderError

if TYPE_CHECKING:
    from redis.asyncio import Redis

logger = logging.getLogger("handoff_builder.temporal.relay")

DEFAULT_RELAY_URL = "redis://127.0.0.1:6379/0"
DEFAULT_RELAY_PREFIX = "handoff_builder:relay:"
DEFAULT_RELAY_TTL = 600.0
"""Seconds a turn's stream is kept after its last entry (Redis expires it then)."""
DEFAULT_RELAY_MAX_ENTRIES = 100_000
"""Entries a turn's stream keeps at most (approximately: Redis trims whole nodes)."""

READ_BLOCK_SECONDS = 1.0  # one blocking read waits this long for new entries, then reads again
READ_COUNT = 1000  # entries one read takes at most
FLUSH_SECONDS = 2.0  # an attempt waits this long for its last entries to reach Redis
DOWN_SECONDS = 5.0  # after Redis failed a write, writes are dropped this long before one is tried


class RelayUnavailableError(HandoffBuilderError, ConnectionError):
    """The relay's Redis server did not answer (the turn goes on without it)."""


# -- the entries ----------------------------------------------------------------------------------


class AttemptEntry(BaseModel):
    """An agent call's attempt began, after the handoffs and delegations of the turn so far."""

    t: Literal["attempt"] = "attempt"
    call: str
    agent: str
    attempt: int
    handoffs: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    delegations: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    events: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    """The turn's events so far its result does not hold (refused handoffs, limits, warnings)."""


class UpdateEntry(BaseModel):
    """One update of the attempt: a participant's (``output``, ``intermediate``) or an expert's."""

    t: Literal["update"] = "update"
    call: str
    attempt: int
    n: int
    """Its number among the attempt's updates, from 0: a reader sees a gap."""
    sink: Literal["output", "intermediate"]
    update: dict[str, Any]


class FailedEntry(BaseModel):
    """The attempt failed (``error``: ``"TypeName: message"``); Temporal may run it again."""

    t: Literal["failed"] = "failed"
    call: str
    attempt: int
    error: str


class DoneEntry(BaseModel):
    """The attempt's run finished; it published ``updates`` updates."""

    t: Literal["done"] = "done"
    call: str
    attempt: int
    updates: int


Entry = Annotated[AttemptEntry | UpdateEntry | FailedEntry | DoneEntry, Field(discriminator="t")]
_ENTRY: TypeAdapter[AttemptEntry | UpdateEntry | FailedEntry | DoneEntry] = TypeAdapter(Entry)


def read_entry(raw: bytes | str) -> AttemptEntry | UpdateEntry | FailedEntry | DoneEntry:
    """An entry as a worker wrote it.

    Raises:
        ValueError: not an entry of this release (pydantic's ``ValidationError``).
    """
    return _ENTRY.validate_json(raw)


# -- the relay ------------------------------------------------------------------------------------


class RedisRelay:
    """Where a streaming turn's live updates travel: one Redis stream per turn.

    Give the same Redis server to the workers (``conversation_worker(..., relay=...)``) and to
    the clients (``TemporalConversationHost(..., relay=...)``); a URL string is turned into one.
    The client names each turn's stream (``prefix`` + the conversation id + the turn's Update
    id) and reads it from its first entry; the workers append to it.

    Args:
        url: The Redis server, as redis-py reads it (``redis://HOST:PORT/DB``, ``rediss://``
            for TLS, ``unix://PATH``).
        prefix: The keys of the turns' streams start with it (the client's setting).
        ttl: Seconds a turn's stream is kept after its last entry (the worker's setting);
            a client that reconnects later gets the turn's replies whole, from its result.
        max_entries: Entries a turn's stream keeps at most (approximately); a turn past it is
            read whole from its result.
        timeout: Seconds to connect to Redis, and for a command, before it counts as down.

    Raises:
        ImportError: redis-py is not installed (``handoff-builder[redis]``).
        ValueError: ``url`` is not a Redis URL, or a setting is not more than 0.
    """

    def __init__(
        self,
        url: str = DEFAULT_RELAY_URL,
        *,
        prefix: str = DEFAULT_RELAY_PREFIX,
        ttl: float = DEFAULT_RELAY_TTL,
        max_entries: int = DEFAULT_RELAY_MAX_ENTRIES,
        timeout: float = 1.0,
    ) -> None:
        for name, value in (("ttl", ttl), ("timeout", timeout), ("max_entries", max_entries)):
            if not value > 0:
                raise ValueError(f"RedisRelay's {name} must be more than 0, got {value!r}.")
        try:
            from redis.asyncio import Redis
        except ImportError as error:
            raise ImportError(
                "The relay needs redis-py: pip install 'handoff-builder[temporal,redis]' "
                f"({error})."
            ) from error
        self.url = url
        self.prefix = prefix
        self.ttl = ttl
        self.max_entries = max_entries
        self.timeout = timeout
        self._writes: Redis = Redis.from_url(  # pyright: ignore[reportUnknownMemberType] - its **kwargs
            url, socket_connect_timeout=timeout, socket_timeout=timeout
        )  # a worker's; a client's reads wait up to READ_BLOCK_SECONDS more (connected lazily)
        self._reads: Redis = Redis.from_url(  # pyright: ignore[reportUnknownMemberType] - its **kwargs
            url, socket_connect_timeout=timeout, socket_timeout=timeout + READ_BLOCK_SECONDS
        )
        self._down = False  # said once, until Redis answers again
        self._down_until = 0.0  # the loop's clock: writes are dropped until then

    @override
    def __repr__(self) -> str:
        return f"RedisRelay({self.url!r}, prefix={self.prefix!r})"

    def key(self, conversation_id: str, update_id: str) -> str:
        """The stream of one turn: the conversation and its Update's id."""
        return f"{self.prefix}{conversation_id}:{update_id}"

    async def append(self, key: str, entries: Sequence[bytes]) -> None:
        """Append ``entries`` to stream ``key`` (trimmed, its expiry pushed back), in one trip.

        Raises:
            RelayUnavailableError: Redis did not take them.
        """
        from redis.exceptions import RedisError

        now = asyncio.get_running_loop().time()
        if now < self._down_until:  # a Redis that hangs would cost each call its timeout
            raise RelayUnavailableError(f"relay {self.url}: down (tried again soon)")
        try:  # in MULTI/EXEC: a reader blocked on the stream is handed the whole batch at once
            async with self._writes.pipeline(transaction=True) as pipe:
                for entry in entries:
                    pipe.xadd(key, {"e": entry}, maxlen=self.max_entries, approximate=True)
                pipe.expire(key, math.ceil(self.ttl))
                await pipe.execute()
        except (RedisError, OSError) as error:
            self._down_until = asyncio.get_running_loop().time() + DOWN_SECONDS
            self._report_down(error)
            raise RelayUnavailableError(f"relay {self.url}: {error}") from error
        if self._down:
            self._down = False
            logger.warning("relay %s answers again: live updates are relayed", self.url)

    async def read(self, key: str, after: str, *, block: bool) -> list[tuple[str, bytes]]:
        """Entries of stream ``key`` after entry id ``after`` (``"0"``: from its start).

        With ``block``, waits up to ``READ_BLOCK_SECONDS`` for one if there is none yet.

        Raises:
            RelayUnavailableError: Redis did not answer.
        """
        from redis.exceptions import RedisError

        try:
            found: Any = await self._reads.xread(
                {key: after},
                count=READ_COUNT,
                block=int(READ_BLOCK_SECONDS * 1000) if block else None,
            )
        except (RedisError, OSError) as error:
            raise RelayUnavailableError(f"relay {self.url}: {error}") from error
        streams: list[Any] = found or []  # [[key, [(id, {b"e": entry}), ...]]] (RESP2)
        entries: list[tuple[str, bytes]] = []
        for stream in streams:
            for entry_id, fields in stream[1]:
                entries.append((_text(entry_id), fields[b"e"]))
        return entries

    async def aclose(self) -> None:
        """Close its connections to Redis (a later call connects again)."""
        await self._writes.aclose()
        await self._reads.aclose()

    def _report_down(self, error: BaseException) -> None:
        if not self._down:
            self._down = True
            logger.warning(
                "relay %s is unreachable (%s): the live updates of the agent calls are lost "
                "until it answers again; the turns and their results are not affected",
                self.url, error,
            )  # fmt: skip


def relay_of(relay: RedisRelay | str | None) -> RedisRelay | None:
    """``relay``, a URL made into a :class:`RedisRelay`."""
    return RedisRelay(relay) if isinstance(relay, str) else relay


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# -- the worker's side ----------------------------------------------------------------------------


class _Publisher:
    """One attempt's entries, sent to the relay in order by a task of their own.

    ``put`` never waits: the agent writes on while earlier updates travel. The first failure
    loses the rest of the attempt's entries (the client sees them missing, and reads the turn's
    replies from its result).
    """

    def __init__(self, relay: RedisRelay, key: str) -> None:
        self._relay = relay
        self._key = key
        self._pending: list[bytes] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.lost = False

    def put(self, entry: BaseModel) -> None:
        if self.lost or self._closing:
            return
        self._pending.append(entry.model_dump_json().encode())
        if self._task is None:
            self._task = asyncio.ensure_future(self._send())
        self._wake.set()

    async def _send(self) -> None:
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._pending = self._pending, []
            try:
                await self._relay.append(self._key, batch)
            except RelayUnavailableError:
                self._lose()
                return
            except Exception:  # best effort: nothing of the relay may fail the agent's call
                logger.exception("relay %s: the live updates of %s are lost", self._relay.url,
                                 self._key)  # fmt: skip
                self._lose()
                return

    def _lose(self) -> None:
        self.lost = True
        self._pending = []

    async def close(self) -> None:
        """Send what is left, within ``FLUSH_SECONDS``; give up on it after that."""
        self._closing = True
        self._wake.set()
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), FLUSH_SECONDS)
        except asyncio.TimeoutError:
            task.cancel()
            self._lose()
            logger.warning(
                "relay %s: the last live updates of %s did not reach Redis within %g s",
                self._relay.url, self._key, FLUSH_SECONDS,
            )  # fmt: skip


class _PublishingStreams:
    """A relayed attempt's sinks (a ``Streams``): each update becomes an ``update`` entry.

    A participant's updates go out as the host would stream them (its output designations);
    an expert's as intermediate updates under its name, as ``GroupChatHost`` sends them.
    """

    def __init__(self, publisher: _Publisher, settings: HostSettings, call: str, attempt: int):
        self._publisher = publisher
        self._settings = settings
        self._call = call
        self._attempt = attempt
        self.updates = 0

    def agent(self, name: str) -> Sink | None:
        streamed_as = self._settings.streamed_as(name)
        return None if streamed_as is None else self._sink(streamed_as, None)

    def expert(self, name: str) -> Sink | None:
        return self._sink("intermediate", name)

    def _sink(self, sink: StreamedAs, author: str | None) -> Sink:
        async def publish(update: AgentResponseUpdate) -> None:
            if author is not None and update.author_name is None:
                update.author_name = author
            try:
                entry = UpdateEntry(
                    call=self._call,
                    attempt=self._attempt,
                    n=self.updates,
                    sink=sink,
                    update=update.to_dict(),
                )
                self._publisher.put(entry)
            except Exception:  # best effort: the update is lost, counted so, the call goes on
                logger.exception("relay: an update of %s does not encode", self._call)
            self.updates += 1

        return publish


@contextlib.asynccontextmanager
async def relaying(
    relay: RedisRelay | None,
    key: str,
    host: GroupChatHost,
    agent: str,
    events: list[dict[str, Any]] | None = None,
) -> AsyncGenerator[_PublishingStreams | None, None]:
    """Relay the attempt that runs in the block (``None``: no relay, or the turn is not relayed).

    Its ``attempt`` entry first (with the turn's handoffs and delegations so far, from the
    state the call was given, and its ``events`` so far), its updates as they come, then
    ``done``, or ``failed`` with what it raised; the block waits at its end for them to reach
    Redis, ``FLUSH_SECONDS`` at most.
    """
    if relay is None or not key:
        yield None
        return
    info = activity.info()
    call, attempt = info.activity_id, info.attempt
    publisher = _Publisher(relay, key)
    turn = host.state().turn
    publisher.put(
        AttemptEntry(
            call=call,
            agent=agent,
            attempt=attempt,
            handoffs=[_encode(HandoffEvent, h) for h in turn.handoffs] if turn else [],
            delegations=[_encode(DelegationEvent, d) for d in turn.delegations] if turn else [],
            events=list(events or []),
        )
    )
    streams = _PublishingStreams(publisher, host.settings, call, attempt)
    try:
        yield streams
    except asyncio.CancelledError:
        await publisher.close()  # cancelled: a deadline, or the worker's shutdown hands it back
        raise
    except BaseException as error:
        failure = f"{type(error).__name__}: {error}"[:500]
        publisher.put(FailedEntry(call=call, attempt=attempt, error=failure))
        await publisher.close()
        raise
    publisher.put(DoneEntry(call=call, attempt=attempt, updates=streams.updates))
    await publisher.close()


def _encode(kind: type[Any], value: Any) -> dict[str, Any]:
    return adapter_for(kind).dump_python(value, mode="json")
