"""Store fixtures shared by the contract suite and the hosting tests."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from handoff_builder.stores import (
    ConversationStore,
    InMemoryConversationStore,
    PostgresConversationStore,
    SqliteConversationStore,
)

POSTGRES_DSN_VARIABLE = "HANDOFF_BUILDER_POSTGRES_DSN"


def server_address(variable: str, what: str) -> str:
    """The address of a test server from ``variable``; skips (fails in CI) when it is not set.

    ``what`` says what it is for, in the skip's reason.
    """
    address = os.environ.get(variable)
    if not address:
        message = f"set {variable} to run the {what}"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run them, not skip them")
        pytest.skip(message)
    return address


TEMPORAL_ADDRESS_VARIABLE = "HANDOFF_BUILDER_TEMPORAL_ADDRESS"


def temporal_address() -> str:
    """The Temporal dev server's address (see :func:`server_address`)."""
    return server_address(TEMPORAL_ADDRESS_VARIABLE, "Temporal tests against a Temporal dev server")


def postgres_dsn() -> str:
    """The PostgreSQL test server's address (see :func:`server_address`)."""
    return server_address(POSTGRES_DSN_VARIABLE, "PostgreSQL tests")


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}_"


def with_application_name(dsn: str, name: str) -> str:
    """``dsn`` whose connections carry ``name`` (to find them, and only them, on the server)."""
    separator = "&" if "?" in dsn else "?"
    return f"{dsn}{separator}application_name={name}"


def elsewhere(dsn: str, *, database: str | None = None, user: str | None = None,
              port: int | None = None) -> str:  # fmt: skip
    """``dsn`` with another database, user or port (the same host)."""
    parts = urlsplit(dsn)
    login = user or parts.username
    netloc = f"{login}@" if login else ""
    netloc += f"{parts.hostname}:{port or parts.port or 5432}"
    path = f"/{database}" if database is not None else parts.path
    return urlunsplit(parts._replace(netloc=netloc, path=path))


def connection_failures() -> list[Any]:
    """(what is wrong, how to get it from the test server's DSN, the server's or OS's words)."""
    missing, nobody = f"no_such_db_{uuid.uuid4().hex[:8]}", f"nobody_{uuid.uuid4().hex[:8]}"
    return [
        pytest.param(
            {"database": missing}, f'FATAL: database "{missing}" does not exist', id="database"
        ),
        pytest.param({"user": nobody}, f'FATAL: role "{nobody}" does not exist', id="user"),
        pytest.param(
            {"port": 1},
            "Connection refused Is the server running on that host and accepting TCP/IP "
            "connections?",
            id="port",
        ),
    ]


def terminate_connections(application_name: str) -> int:
    """End the server's connections named ``application_name`` (as a restart or a failover
    would), waiting until their processes are gone; how many there were.

    Only those: other tests on the same server keep theirs.
    """
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 30000)) FROM "
            "pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name = %s",
            (application_name,),
        ).fetchone()
    assert ended is not None
    return int(ended[0])


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition()`` holds (the server's state, polled); 30 s is only a backstop."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"still not {what} after 30 s"
        await asyncio.sleep(0.01)


def connections_named(application_name: str) -> int:
    """How many connections named ``application_name`` the server has."""
    with psycopg.connect(postgres_dsn(), autocommit=True) as admin:
        found = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchone()
    assert found is not None
    return int(found[0])


async def make_store(kind: str, tmp_path: Path) -> AsyncIterator[ConversationStore]:
    if kind == "memory":
        yield InMemoryConversationStore()
    elif kind == "sqlite":
        store = SqliteConversationStore(tmp_path / "conversations.db")
        yield store
        await store.close()
    else:
        postgres = PostgresConversationStore(postgres_dsn(), table_prefix=unique_prefix())
        yield postgres
        await postgres.drop_tables()
        await postgres.close()


STORE_KINDS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
]
