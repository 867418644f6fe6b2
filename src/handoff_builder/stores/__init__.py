"""Conversation stores for hosted conversations.

* :class:`InMemoryConversationStore`: one process (tests, prototypes).
* :class:`SqliteConversationStore`: the embedded default: one file, processes on one machine.
* :class:`PostgresConversationStore`: several workers on several machines
  (``pip install 'handoff-builder[postgres]'``; imported on first use), and
  :class:`PostgresStoreSettings`, how it uses its database (needs no psycopg).

Every store keeps an append-only message log and a small state row per conversation, as JSON,
and a lease per conversation in that row (:class:`Lease`, held with :func:`hold`).

:class:`MessageLog` is the other contract: where a Temporal conversation's messages live when
its agent calls carry a reference to them (:class:`ChainedMessage` entries, each stored once).
The in-memory and PostgreSQL stores keep one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import (
    MAX_CONVERSATION_ID_LENGTH,
    RECORD_SCHEMA_VERSION,
    ChainedMessage,
    ConversationRecord,
    ConversationStore,
    Lease,
    MessageLog,
    check_conversation_id,
)
from ._leases import DEFAULT_LEASE_TTL, LeaseHold, hold, new_owner
from ._memory import InMemoryConversationStore
from ._postgres_settings import PostgresStoreSettings
from ._sqlite import SqliteConversationStore

if TYPE_CHECKING:
    from ._postgres import PostgresConversationStore

__all__ = [
    "DEFAULT_LEASE_TTL",
    "MAX_CONVERSATION_ID_LENGTH",
    "RECORD_SCHEMA_VERSION",
    "ChainedMessage",
    "ConversationRecord",
    "ConversationStore",
    "InMemoryConversationStore",
    "Lease",
    "LeaseHold",
    "MessageLog",
    "PostgresConversationStore",
    "PostgresStoreSettings",
    "SqliteConversationStore",
    "check_conversation_id",
    "hold",
    "new_owner",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresConversationStore":
        from ._postgres import PostgresConversationStore

        return PostgresConversationStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
