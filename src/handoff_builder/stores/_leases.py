"""Holding a conversation's lease for a block of code: the one loop every store uses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

from handoff_builder.exceptions import ConversationBusyError

from ._base import ConversationStore, Lease

__all__ = ["DEFAULT_LEASE_TTL", "LeaseHold", "hold", "new_owner"]

logger = logging.getLogger("handoff_builder")

DEFAULT_LEASE_TTL = 30.0
"""Seconds a lease lasts unless renewed; a dead worker's conversation is free again after it."""

_RELEASE_WAIT = 2.0  # seconds a release may take before the turn's caller goes on
_FIRST_POLL = 0.005
_MAX_POLL = 0.1


def new_owner(worker_id: str | None = None) -> str:
    """A lease owner unique to one acquisition: ``worker`` (host name and process id) + a nonce."""
    worker = worker_id or f"{socket.gethostname()}:{os.getpid()}"
    return f"{worker}/{uuid.uuid4().hex[:12]}"


class LeaseHold:
    """A conversation's lease as a block of code holds it; renewed while held.

    :func:`hold` takes the lease first. A host may also take it with its first write
    (``store.acquire_and_append``, then :meth:`acquired`). A turn's last write can give it back in
    the same statement (``store.append(..., release=True)``, then :meth:`released_by_write`), so
    that :meth:`close` does not release it again.
    """

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: str,
        owner: str,
        ttl: float,
        lease: Lease | None = None,
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.owner = owner
        self.ttl = ttl
        self.released = False
        self.asked = lease is not None  # the store may hold it for us: release by owner at the end
        self._lease: Lease | None = None
        self._renewer: _Renewer | None = None
        if lease is not None:
            self.acquired(lease)

    @property
    def taken(self) -> bool:
        """Whether the lease was taken (a host that takes it with its first write may not yet)."""
        return self._lease is not None

    @property
    def lease(self) -> Lease:
        """The lease; ``RuntimeError`` before it was taken."""
        if self._lease is None:
            raise RuntimeError(f"The lease on {self.conversation_id!r} was not taken yet.")
        return self._lease

    def asking(self) -> None:
        """A write that takes the lease is under way; :meth:`close` releases by owner after it.

        That covers a write that ends unclear: cancelled, or the store failing after it committed.
        """
        self.asked = True

    def acquired(self, lease: Lease) -> None:
        """The lease was taken (by :func:`hold`, or with a first write): renew it from now on."""
        self._lease = lease
        self._renewer = _Renewer(self.store, lease, self.ttl)

    def released_by_write(self) -> None:
        """The lease was given back with the last write."""
        self.released = True

    async def close(self) -> None:
        """Stop renewing and give the lease back (unless a write did, or it was never taken)."""
        if self._renewer is not None:
            await self._renewer.stop()
        if self.asked and not self.released:  # release is fenced by owner: a no-op if not ours
            self.released = True
            await _release(self.store, self.conversation_id, self.owner, taken=self.taken)


@asynccontextmanager
async def hold(
    store: ConversationStore,
    conversation_id: str,
    *,
    ttl: float = DEFAULT_LEASE_TTL,
    wait: bool = False,
    timeout: float = 30.0,
    owner: str | None = None,
) -> AsyncGenerator[LeaseHold, None]:
    """Hold the conversation's lease while the block runs; renewed every ``ttl / 3`` seconds.

    Without ``wait`` a held conversation raises :class:`~handoff_builder.ConversationBusyError`
    at once; with it, the lease is asked for again until ``timeout`` seconds have passed. The
    lease is released when the block ends, however it ends (unless the block's last write gave
    it back already), and also when the attempt to take it is cancelled midway.
    """
    if ttl <= 0:
        raise ValueError(f"ttl must be positive, got {ttl}.")
    holder = owner or new_owner()
    try:
        lease = await _acquire(store, conversation_id, holder, ttl, wait=wait, timeout=timeout)
    except BaseException:
        # Cancelled (or failed) while asking: the store may have granted it all the same.
        await _release(store, conversation_id, holder, taken=False)
        raise
    held = LeaseHold(store, conversation_id, holder, ttl, lease)
    try:
        yield held
    finally:
        await held.close()


class _Renewer:
    """Renews a lease every ``ttl / 3`` seconds: a timer, and a task only while renewing."""

    def __init__(self, store: ConversationStore, lease: Lease, ttl: float) -> None:
        self._store, self._lease, self._ttl = store, lease, ttl
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._schedule()

    def _schedule(self, delay: float | None = None) -> None:
        wait = self._ttl / 3 if delay is None else delay
        self._timer = asyncio.get_running_loop().call_later(wait, self._start)

    def _start(self) -> None:
        self._task = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        lease = self._lease
        try:
            if not await self._store.renew(lease, ttl=self._ttl):
                logger.warning(
                    "conversation %s: lease %s was lost; this worker can write nothing more",
                    lease.conversation_id, lease.owner,
                )  # fmt: skip
                return  # the next fenced write says so
        except Exception as error:  # the store is unreachable: try again soon, not in ttl / 3
            logger.warning(
                "conversation %s: could not renew lease %s: %s",
                lease.conversation_id, lease.owner, error,
            )  # fmt: skip
            self._schedule(min(1.0, self._ttl / 10))
            return
        self._schedule()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _acquire(
    store: ConversationStore,
    conversation_id: str,
    owner: str,
    ttl: float,
    *,
    wait: bool,
    timeout: float,
) -> Lease:
    lease = await store.acquire(conversation_id, owner=owner, ttl=ttl)
    if lease is not None:
        return lease
    if not wait:
        raise ConversationBusyError(conversation_id)
    started = time.monotonic()
    delay = _FIRST_POLL
    while time.monotonic() - started < timeout:
        await asyncio.sleep(delay)
        lease = await store.acquire(conversation_id, owner=owner, ttl=ttl)
        if lease is not None:
            return lease
        delay = min(delay * 2, _MAX_POLL)
    raise ConversationBusyError(conversation_id, waited=time.monotonic() - started)


async def _release(
    store: ConversationStore, conversation_id: str, owner: str, *, taken: bool = True
) -> None:
    """Release, even from a cancelled task, waiting at most a few seconds for the store.

    A release that fails or does not finish in time only logs: the lease expires by itself.
    ``taken=False``: the write that would have taken it failed, so it is most likely not held;
    a release that fails then says so, at debug level.
    """
    task = asyncio.ensure_future(store.release(conversation_id, owner))
    try:
        done, _ = await asyncio.shield(asyncio.wait({task}, timeout=_RELEASE_WAIT))
    except asyncio.CancelledError:
        await asyncio.wait({task}, timeout=_RELEASE_WAIT)
        raise
    if not done:
        task.add_done_callback(_log_failure)  # still trying; keep its error, if any, quiet
        logger.warning(
            "conversation %s: the store did not confirm the release of lease %s within %g s "
            "(it expires by itself)",
            conversation_id, owner, _RELEASE_WAIT,
        )  # fmt: skip
    elif not task.cancelled() and task.exception() is not None and not taken:
        logger.debug(
            "conversation %s: the write that would have taken lease %s failed, and so did its "
            "release (if it was taken, it expires by itself): %s",
            conversation_id, owner, task.exception(),
        )  # fmt: skip
    elif not task.cancelled() and task.exception() is not None:
        logger.warning(
            "conversation %s: could not release lease %s (it expires by itself): %s",
            conversation_id, owner, task.exception(),
        )  # fmt: skip


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.debug("a late lease release failed: %s", task.exception())
