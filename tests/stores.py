"""Store fixtures shared by the contract suite and the hosting tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

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


def postgres_dsn() -> str:
    """The PostgreSQL test server's address (see :func:`server_address`)."""
    return server_address(POSTGRES_DSN_VARIABLE, "PostgreSQL tests")


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}_"


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
