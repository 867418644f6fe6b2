"""How a :class:`~handoff_builder.ConversationHost` serves its conversations, as one value.

:class:`HostingSettings` holds every option besides the builder and the store, checked when it is
made; :class:`HostingOptions` is the same fields as keyword arguments, so that
``ConversationHost(builder, store, idle_timeout=..., lease_ttl=...)`` stays typed, and
``settings_with`` applies them over a settings value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from typing_extensions import TypedDict

from ._lifecycle import DEFAULT_MAX_TURN_RETRIES
from .stores import DEFAULT_LEASE_TTL

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_INPUT_BYTES",
    "HostingOptions",
    "HostingSettings",
    "idle_timeout_of",
    "utcnow",
]

DEFAULT_IDLE_TIMEOUT = timedelta(minutes=30)
DEFAULT_MAX_INPUT_BYTES = 4 * 1024 * 1024
"""The largest user input one turn takes (or answers one call gives), in bytes of UTF-8 JSON.

A few MB of text, or an image of a few MB as a data URI; a larger input is refused before
anything is stored or sent to a model."""


def utcnow() -> datetime:
    """The current time, UTC-aware: the hosts' default clock."""
    return datetime.now(timezone.utc)


def idle_timeout_of(value: timedelta | float) -> timedelta:
    """``value`` as an idle timeout: a positive timedelta (seconds for a number).

    Raises:
        ValueError: not positive, not finite, or too large for a timedelta.
    """
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise ValueError(f"idle_timeout must be positive, got {value}.")
        return value
    problem = f"idle_timeout must be a positive, finite number of seconds, got {value}."
    if not math.isfinite(value) or value <= 0:
        raise ValueError(problem)
    try:
        timeout = timedelta(seconds=value)
    except OverflowError:
        raise ValueError(problem) from None
    if timeout <= timedelta(0):  # below a microsecond
        raise ValueError(problem)
    return timeout


@dataclass(frozen=True)
class HostingSettings:
    """How a :class:`~handoff_builder.ConversationHost` serves its conversations.

    Pass it as ``ConversationHost(builder, store, settings=HostingSettings(...))``, or give the
    same fields as keyword arguments (``idle_timeout=...``); keywords given with ``settings``
    replace its fields. Every field is checked when the value is made.

    * ``idle_timeout``: idle time after which a conversation starts again at the initial agent (a
      number is taken as seconds and kept as a ``timedelta``).
    * ``remember_active_agent``: start each message at the stored agent; with ``False`` the
      builder's ``enable_return_to_previous`` setting decides.
    * ``lock_timeout``: how long ``wait=True`` waits for a busy conversation, in seconds.
    * ``clock``: returns the current time (UTC-aware); injectable for tests.
    * ``live_conversations``: how many conversations this worker keeps live between turns
      (``0``: every turn reloads its conversation).
    * ``lease_ttl``: seconds a turn's lease lasts unless renewed (every ``lease_ttl / 3``).
    * ``worker_id``: names this worker in lease owners (``None``: host name and process id).
    * ``max_turn_retries``: how many times a failed turn is retried before it is abandoned.
    * ``max_input_bytes``: the largest input one turn takes (or answers one call gives), in bytes
      of UTF-8 JSON (``None``: no limit).

    Raises:
        ValueError: a field out of range, named in the message.
    """

    idle_timeout: timedelta = DEFAULT_IDLE_TIMEOUT
    remember_active_agent: bool = True
    lock_timeout: float = 60.0
    clock: Callable[[], datetime] = utcnow
    live_conversations: int = 256
    lease_ttl: float = DEFAULT_LEASE_TTL
    worker_id: str | None = None
    max_turn_retries: int = DEFAULT_MAX_TURN_RETRIES
    max_input_bytes: int | None = DEFAULT_MAX_INPUT_BYTES

    def __post_init__(self) -> None:
        object.__setattr__(self, "idle_timeout", idle_timeout_of(self.idle_timeout))
        if self.lease_ttl <= 0:
            raise ValueError(
                f"lease_ttl must be a positive number of seconds, got {self.lease_ttl}."
            )
        if self.max_turn_retries < 0:
            raise ValueError(f"max_turn_retries must be 0 or more, got {self.max_turn_retries}.")
        if self.max_input_bytes is not None and self.max_input_bytes < 1:
            raise ValueError(
                f"max_input_bytes must be positive or None, got {self.max_input_bytes}."
            )


class HostingOptions(TypedDict, total=False):
    """:class:`HostingSettings`'s fields as keyword arguments of ``ConversationHost``."""

    idle_timeout: timedelta | float
    remember_active_agent: bool
    lock_timeout: float
    clock: Callable[[], datetime]
    live_conversations: int
    lease_ttl: float
    worker_id: str | None
    max_turn_retries: int
    max_input_bytes: int | None
