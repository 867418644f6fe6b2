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


def postgres_dsn() -> str:
    """The test server's address; skips (fails in CI) when the variable is not set."""
    dsn = os.environ.get(POSTGRES_DSN_VARIABLE)
    if not dsn:
        message = f"set {POSTGRES_DSN_VARIABLE} to run the PostgreSQL tests"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI must run them, not skip them")
        pytest.skip(message)
    return dsn


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
