"""How the PostgreSQL store reaches its server: the pool, bounded statements, failures in words.

Imported by ``_postgres`` once psycopg is known to be installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from handoff_builder._timeouts import DeadlinePassedError, within
from handoff_builder.exceptions import StoreUnavailableError

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]
Pool = AsyncConnectionPool[Connection]

APPLICATION_NAME = "handoff_builder"
"""What the server shows for the store's connections (``pg_stat_activity.application_name``)
unless the DSN (or ``PGAPPNAME``) names them."""

UNAVAILABLE = (psycopg.OperationalError, PoolTimeout, TimeoutError)
"""What a failed statement can raise that means "the server or the network let us down"."""


def connection_settings(
    dsn: str, *, connect_timeout: float, statement_timeout: float, synchronous_commit: bool
) -> dict[str, Any]:
    """The keyword arguments of every connection the store makes (pooled or not).

    Server-side limits on each statement, lock and idle transaction; TCP keepalives and a TCP
    user timeout, so a silent network is noticed; the DSN's own ``options`` kept.
    """
    limit_ms = int(statement_timeout * 1000)
    options = (
        f"-c statement_timeout={limit_ms} -c lock_timeout={limit_ms} "
        f"-c idle_in_transaction_session_timeout={limit_ms * 3}"
    )
    if not synchronous_commit:
        options += " -c synchronous_commit=off"
    given = str(conninfo_to_dict(dsn).get("options") or "")
    if given:
        options = f"{given} {options}"
    settings: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": max(1, round(connect_timeout)),
        "options": options,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": limit_ms,
    }
    if "application_name" not in given:  # a name set in the options would lose to this one
        settings["fallback_application_name"] = APPLICATION_NAME
    return settings


def new_pool(
    dsn: str,
    settings: dict[str, Any],
    *,
    sizes: tuple[int, int],
    timeout: float,
    check: Callable[[Connection], Awaitable[None]],
) -> Pool:
    """A closed pool that checks each connection it lends with ``check``.

    The store opens it once a first connection of its own worked.
    """
    min_size, max_size = sizes
    return AsyncConnectionPool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=timeout,
        kwargs=settings,
        check=check,
    )


async def bounded(call: Awaitable[T], db: Connection, limit: float) -> T:
    """``call`` (a statement on ``db``), cut at ``limit`` seconds: :class:`DeadlinePassedError`.

    The server's limits apply first. A network that went silent is cut by this one: at the
    limit the connection is shut down (:func:`shut_down`), which ends the statement at once,
    instead of psycopg's polite cancel, which cannot reach the server either (10 s more).
    """
    loop = asyncio.get_running_loop()
    cut = loop.call_later(limit, shut_down, db)
    try:
        return await within(limit + 0.5, call)  # a backstop: the cut ends it sooner
    except psycopg.OperationalError as error:
        if loop.time() < cut.when():
            raise
        raise DeadlinePassedError(f"no result within {limit:g} s") from error
    finally:
        cut.cancel()


def shut_down(db: Connection) -> None:
    """End the connection at once, without closing its socket.

    The statement waiting on it fails now (the socket reads as ended) and the pool discards the
    connection when it comes back. Closing the socket here instead would free its number while
    the event loop still watches it for that statement: the next socket the process opens would
    get the number, and the loop would take one for the other.
    """
    with contextlib.suppress(OSError, psycopg.OperationalError):  # already gone
        sock = socket.socket(fileno=db.pgconn.socket)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()  # the socket stays psycopg's: only shut down, never closed here


def spoke_while_idle(db: Connection) -> bool:
    """Whether the server sent anything to an idle connection, or closed it (no round trip).

    Nothing is due on a pooled connection between statements: what arrives is nearly always
    the server saying goodbye (``terminating connection due to administrator command``, a
    shutdown) and closing it, or the kernel reporting the connection gone (a reset, or the TCP
    keepalives giving up). One ``poll(2)`` that does not wait: a microsecond or two.
    """
    fd = db.pgconn.socket
    if sys.platform == "win32":  # pragma: no cover - no poll() on Windows
        readable, _, _ = select.select([fd], [], [], 0)
        return bool(readable)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def unavailable(error: BaseException, context: str = "") -> StoreUnavailableError:
    """The typed error for a driver's failure, in its own words on one line.

    ``context`` comes first (``"no connection within 10 s: "``). A failed connection's words are
    libpq's: the server's reason (``FATAL: database "x" does not exist``) or the system's
    (``Connection refused``).
    """
    words = " ".join(str(error).split())
    detail = words or f"no answer within the time limit ({type(error).__name__})"
    return StoreUnavailableError("PostgreSQL", f"{context}{detail}")
