"""Log lines for handoff events, on the ``handoff_builder`` logger.

Every handoff and hand-back is logged at INFO with its source, its target and its argument; blocked
handoffs, escalations and warnings at WARNING. The argument (a goal or summary the model wrote, of
any length, possibly personal data) is cut to :data:`DEFAULT_LOGGED_ARGUMENT_LENGTH` characters
with a marker that says how long it was, or left out altogether
(``HandoffWorkflowBuilder.with_argument_logging``). Events keep the full value.
"""

from __future__ import annotations

import logging

from ._decision import Event
from ._events import (
    DelegationEvent,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffEvent,
    TurnTimeoutEvent,
)
from ._routes import EDGE_KINDS
from ._settings import DEFAULT_LOGGED_ARGUMENT_LENGTH, ArgumentLogging

__all__ = ["DEFAULT_LOGGED_ARGUMENT_LENGTH", "ArgumentLogging", "log_event"]

logger = logging.getLogger("handoff_builder")


def log_event(event: Event, settings: ArgumentLogging) -> None:
    """Write the log line of one event."""
    if isinstance(event, HandoffEvent):
        if not logger.isEnabledFor(logging.INFO):
            return
        logger.info(
            "%s %s -> %s: %s",
            EDGE_KINDS[event.kind].noun,
            event.source,
            event.target,
            settings.shown(event.goal),
        )
    elif isinstance(event, DelegationEvent):
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "delegation %s -> %s (%s, %s): %s",
                event.caller, event.expert, event.tool_name, event.outcome,
                settings.shown(event.task),
            )  # fmt: skip
    elif isinstance(event, HandoffBlockedEvent):
        logger.warning(
            "blocked handoff from %s via %s (%s): %s",
            event.source,
            event.tool_name,
            event.reason,
            settings.shown(event.arguments),
        )
    elif isinstance(event, EscalationEvent):
        logger.warning(
            "escalated to a human: %s at %s (limit %d)", event.reason, event.agent, event.limit
        )
    elif isinstance(event, str):
        logger.warning("%s", event)
    elif isinstance(event, TurnTimeoutEvent):
        logger.warning(
            "turn cut short: the %s deadline (%g s) passed while %s ran",
            event.limit.replace("_", " "), event.seconds, event.agent,
        )  # fmt: skip
    else:
        logger.info("limit reached: %s for %s (limit %d)", event.kind, event.agent, event.limit)
