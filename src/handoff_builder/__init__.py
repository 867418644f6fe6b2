"""handoff_builder: multi-agent handoff orchestration on Microsoft Agent Framework.

Several agents share one conversation; the active agent answers the user or passes the
conversation on by calling a handoff tool. Start with :class:`HandoffWorkflowBuilder`.

The hosting layer (:class:`ConversationHost`, ``handoff_builder.stores``) is imported on first
use, so a program that only builds and runs workflows does not load it (nor ``sqlite3``).
"""

import typing as _typing

from ._builder import HandoffWorkflowBuilder
from ._events import (
    HANDOFF_BLOCKED_EVENT,
    HANDOFF_ESCALATED_EVENT,
    HANDOFF_EVENT,
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_TURN_EVENT,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffEvent,
    HandoffTurnResult,
)
from ._filtering import HandoffToolCallFiltering
from ._group_chat import GroupChatManager, TerminationCondition
from ._host import DEFAULT_ESCALATION_MESSAGE, GroupChatHost, Participant, TurnJournal
from ._manager import (
    DEFAULT_AUTONOMOUS_PROMPT,
    DEFAULT_AUTONOMOUS_TURN_LIMIT,
    AutonomousMode,
    HandoffManager,
)
from ._naming import DEFAULT_HANDOFF_INSTRUCTIONS, hand_back_tool_name, handoff_tool_name
from ._workflow import HandoffWorkflow, MessageBatch
from .exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    CorruptConversationError,
    HandoffBuilderError,
    HandoffConfigurationError,
    PendingRequestsError,
    SchemaVersionError,
    ScriptExhaustedError,
    StoreUnavailableError,
)

if _typing.TYPE_CHECKING:
    from . import stores as stores
    from ._hosting import DEFAULT_IDLE_TIMEOUT, ConversationHost

# name -> (module, attribute of it; None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "ConversationHost": ("._hosting", "ConversationHost"),
    "DEFAULT_IDLE_TIMEOUT": ("._hosting", "DEFAULT_IDLE_TIMEOUT"),
    "stores": (".stores", None),
}


def __getattr__(name: str) -> object:
    """Import the hosting layer when one of its names is first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module 'handoff_builder' has no attribute {name!r}")
    from importlib import import_module

    module_name, attribute = _LAZY[name]
    module = import_module(module_name, __name__)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "DEFAULT_AUTONOMOUS_PROMPT",
    "DEFAULT_AUTONOMOUS_TURN_LIMIT",
    "DEFAULT_ESCALATION_MESSAGE",
    "DEFAULT_HANDOFF_INSTRUCTIONS",
    "DEFAULT_IDLE_TIMEOUT",
    "HANDOFF_BLOCKED_EVENT",
    "HANDOFF_ESCALATED_EVENT",
    "HANDOFF_EVENT",
    "HANDOFF_INTERMEDIATE_EVENT",
    "HANDOFF_TURN_EVENT",
    "AutonomousMode",
    "ConversationBusyError",
    "ConversationConflictError",
    "ConversationHost",
    "CorruptConversationError",
    "EscalationEvent",
    "GroupChatHost",
    "GroupChatManager",
    "HandoffBlockedEvent",
    "HandoffBuilderError",
    "HandoffConfigurationError",
    "HandoffEvent",
    "HandoffManager",
    "HandoffToolCallFiltering",
    "HandoffTurnResult",
    "HandoffWorkflow",
    "HandoffWorkflowBuilder",
    "MessageBatch",
    "Participant",
    "PendingRequestsError",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "StoreUnavailableError",
    "TerminationCondition",
    "TurnJournal",
    "hand_back_tool_name",
    "handoff_tool_name",
]
