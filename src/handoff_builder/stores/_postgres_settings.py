"""How a :class:`~handoff_builder.stores.PostgresConversationStore` uses its database.

:class:`PostgresStoreSettings` holds every option besides the DSN, checked when it is made (it
needs no psycopg: a configuration can be read and checked where the extra is not installed);
:class:`PostgresStoreOptions` is the same fields as keyword arguments, so that
``PostgresConversationStore(dsn, max_size=20)`` stays typed, and ``settings_with``
applies them over a settings value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from typing_extensions import TypedDict

__all__ = ["PostgresStoreOptions", "PostgresStoreSettings"]

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")


@dataclass(frozen=True)
class PostgresStoreSettings:
    """How a :class:`~handoff_builder.stores.PostgresConversationStore` uses its database.

    Pass it as ``PostgresConversationStore(dsn, settings=...)``, or give the same fields as
    keyword arguments (``max_size=...``); keywords given with ``settings`` replace its fields.
    Every field is checked when the value is made.

    * ``table_prefix``: the tables are ``<table_prefix>conversations`` and
      ``<table_prefix>messages`` (lower-case letters, digits and underscores).
    * ``min_size``, ``max_size``: how many connections the pool keeps, and opens at most.
    * ``connect_timeout``: seconds to make a connection.
    * ``statement_timeout``: seconds each statement may take, including the wait for a pooled
      connection.
    * ``synchronous_commit``: ``False`` lets a write return before the server has flushed it to
      its disk (PostgreSQL's ``synchronous_commit=off``): a worker crash still loses nothing, but
      a crash of the database server (or its machine) may lose the last writes of the last
      moment (the database stays consistent), as with the SQLite store's default
      ``synchronous="normal"``; each write saves a disk flush.

    Raises:
        ValueError: a field out of range, named in the message.
    """

    table_prefix: str = "handoff_"
    min_size: int = 1
    max_size: int = 10
    connect_timeout: float = 5.0
    statement_timeout: float = 10.0
    synchronous_commit: bool = True

    def __post_init__(self) -> None:
        if not _NAME.match(self.table_prefix):
            raise ValueError(
                f"table_prefix must match {_NAME.pattern} (lower-case letters, digits, "
                f"underscores), got {self.table_prefix!r}."
            )
        min_size, max_size = self.min_size, self.max_size
        if min_size < 0 or max_size < 1 or min_size > max_size:
            raise ValueError(f"need 0 <= min_size <= max_size and max_size >= 1, got "
                             f"min_size={min_size}, max_size={max_size}.")  # fmt: skip
        if self.connect_timeout <= 0 or self.statement_timeout <= 0:
            raise ValueError("connect_timeout and statement_timeout must be positive.")

    @property
    def tables(self) -> tuple[str, str]:
        """The store's two tables: conversations (the state rows) and messages (the log)."""
        return (f"{self.table_prefix}conversations", f"{self.table_prefix}messages")

    @property
    def chain_table(self) -> str:
        """The table of the chained message log (:class:`~handoff_builder.stores.MessageLog`)."""
        return f"{self.table_prefix}chained_messages"


class PostgresStoreOptions(TypedDict, total=False):
    """:class:`PostgresStoreSettings`'s fields as keyword arguments of the store."""

    table_prefix: str
    min_size: int
    max_size: int
    connect_timeout: float
    statement_timeout: float
    synchronous_commit: bool
