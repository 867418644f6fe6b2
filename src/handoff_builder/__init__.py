"""handoff_builder: multi-agent handoff orchestration on Microsoft Agent Framework.

Several agents share one conversation; the active agent answers the user or passes the
conversation on by calling a handoff tool. Start with :class:`HandoffWorkflowBuilder`.
"""

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
from ._hosting import DEFAULT_IDLE_TIMEOUT, ConversationHost
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
