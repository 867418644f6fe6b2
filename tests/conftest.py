"""Shared fixtures: no test may reach a real model or a non-local network address."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from handoff_builder.stores import (
    ConversationStore,
    PostgresConversationStore,
    SqliteConversationStore,
)
from tests.serving_http import Serve, servers
from tests.stores import STORE_KINDS, make_store, postgres_dsn, temporal_address, unique_prefix

_LOCAL_PREFIXES = ("127.", "::1", "localhost")


@pytest.fixture(autouse=True)
def _no_remote_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any connection to a non-loopback address (a real model endpoint, say)."""
    real_connect = socket.socket.connect

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        host: object = address[0] if isinstance(address, tuple) else str(address)  # pyright: ignore[reportUnknownVariableType]
        if isinstance(host, str) and (
            host.startswith(_LOCAL_PREFIXES) or self.family == socket.AF_UNIX
        ):
            return real_connect(self, address)  # pyright: ignore[reportUnknownArgumentType]
        raise AssertionError(f"test tried to reach {host!r}; tests must stay offline")

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    for variable in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ConversationStore]:
    """Every store backend, for the contract suite and the hosting tests."""
    async for made in make_store(request.param, tmp_path):
        yield made


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def shared_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, ConversationStore]]:
    """A store spec for worker processes (``tests/hosting_worker.py``, ``tests/fault_worker.py``),
    and the same store opened here."""
    if request.param == "sqlite":
        path = tmp_path / "shared.db"
        sqlite = SqliteConversationStore(path)
        yield f"sqlite:{path}", sqlite
        await sqlite.close()
    else:
        prefix = unique_prefix()
        postgres = PostgresConversationStore(postgres_dsn(), table_prefix=prefix)
        yield f"postgres:{prefix}", postgres
        await postgres.drop_tables()
        await postgres.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Start a server of ``tests/serving_app.py`` (``serve("devui")``, ``serve("agui")``) on a
    SQLite file in ``tmp_path``; its base URL. Every server started is stopped at the end."""
    yield from servers(tmp_path)


@pytest.fixture
async def client() -> Any:
    """A Temporal client of the dev server the tests run against (the Temporal tests)."""
    from handoff_builder.temporal import connect

    return await connect(temporal_address())


@pytest.fixture
def queue() -> str:
    """A task queue of this test's own."""
    return f"q-{uuid.uuid4().hex[:10]}"
