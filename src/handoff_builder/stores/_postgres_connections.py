"""How the PostgreSQL store reaches its server: connections, and how a statement on one is bounded.

Imported by ``_postgres`` once psycopg is known to be installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable
from typing import Any, TypeVar

import psycopg

from handoff_builder._timeouts import DeadlinePassedError, within

T = TypeVar("T")
Connection = psycopg.AsyncConnection[Any]


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
