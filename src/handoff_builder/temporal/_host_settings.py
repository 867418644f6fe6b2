"""How a :class:`~handoff_builder.temporal.TemporalConversationHost` runs its conversations.

:class:`TemporalHostSettings` holds every option besides the client, the task queue and the
relay, checked when it is made; :class:`TemporalHostOptions` is the same fields as keyword
arguments, so that ``TemporalConversationHost(client, task_queue=..., turns_per_run=...)`` stays
typed, and ``settings_with`` applies them over a settings value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from typing_extensions import TypedDict

from handoff_builder._hosting import DEFAULT_IDLE_TIMEOUT, idle_timeout_of
from handoff_builder._lifecycle import DEFAULT_MAX_TURN_RETRIES

__all__ = [
    "DEFAULT_TURNS_PER_RUN",
    "TemporalHostOptions",
    "TemporalHostSettings",
]

DEFAULT_TURNS_PER_RUN = 100
"""User turns one workflow run takes before it continues as new (its event history stays small)."""


@dataclass(frozen=True)
class TemporalHostSettings:
    """How a :class:`~handoff_builder.temporal.TemporalConversationHost` runs its conversations.

    Pass it as ``TemporalConversationHost(client, task_queue=..., settings=...)``, or give the
    same fields as keyword arguments (``turns_per_run=...``); keywords given with ``settings``
    replace its fields. Every field is checked when the value is made. Every client of a task
    queue must use the same settings (all but ``worker_wait`` are fixed for a conversation when
    its workflow starts).

    * ``idle_timeout``: idle time after which a conversation starts again at the initial agent,
      a durable timer in the workflow (a number is taken as seconds and kept as a ``timedelta``).
    * ``max_turn_retries``: how many times a failed turn is retried before it is abandoned.
    * ``turns_per_run``: user turns one workflow run takes before it continues as new.
    * ``worker_wait``: seconds a call waits for a worker of the task queue to take it.
    * ``local_activities``: run the agent calls as *local* activities, in the worker that runs
      the workflow: no server round trip per hop (much faster turns), but a worker that dies
      mid-call is noticed only when its workflow task times out (10 s by default).

    Raises:
        ValueError: a field out of range, named in the message.
    """

    idle_timeout: timedelta = DEFAULT_IDLE_TIMEOUT
    max_turn_retries: int = DEFAULT_MAX_TURN_RETRIES
    turns_per_run: int = DEFAULT_TURNS_PER_RUN
    worker_wait: float = 30.0
    local_activities: bool = False

    def __post_init__(self) -> None:
        if self.max_turn_retries < 0:
            raise ValueError(f"max_turn_retries must be 0 or more, got {self.max_turn_retries}.")
        if self.turns_per_run < 1:
            raise ValueError(f"turns_per_run must be 1 or more, got {self.turns_per_run}.")
        object.__setattr__(self, "idle_timeout", idle_timeout_of(self.idle_timeout))


class TemporalHostOptions(TypedDict, total=False):
    """:class:`TemporalHostSettings`'s fields as keyword arguments of the host."""

    idle_timeout: timedelta | float
    max_turn_retries: int
    turns_per_run: int
    worker_wait: float
    local_activities: bool
