"""handoff_builder: multi-agent handoff orchestration on Microsoft Agent Framework.

Several agents share one conversation; the active agent answers the user or passes the
conversation on by calling a handoff tool. Start with :class:`HandoffWorkflowBuilder`.

Importing the package imports the builder, its settings and the errors. The runtime
(agent_framework's workflows, the host, the managers, the events) is imported by ``build()``, or
when one of its names is first asked for; the hosting layer (:class:`ConversationHost`,
``handoff_builder.stores``) likewise, so a program that only builds and runs workflows does not
load it (nor ``sqlite3``).
"""

import typing as _typing
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from ._builder import HandoffWorkflowBuilder
from ._instructions import (
    DEFAULT_HAND_BACK_INSTRUCTIONS,
    DEFAULT_HANDOFF_INSTRUCTIONS,
    HANDOFF_TOOLS_PLACEHOLDER,
)
from ._settings import (
    DEFAULT_AGENT_TIMEOUT,
    DEFAULT_AUTONOMOUS_PROMPT,
    DEFAULT_AUTONOMOUS_TURN_LIMIT,
    DEFAULT_ESCALATION_MESSAGE,
    DEFAULT_HOOK_TIMEOUT,
    DEFAULT_MAX_DELEGATION_DEPTH,
    DEFAULT_MAX_MODEL_CALLS,
    DEFAULT_REPLY_TOOL_DESCRIPTION,
    DEFAULT_REVIEW_ESCALATION_MESSAGE,
    DEFAULT_TURN_TIMEOUT,
    CapOutcome,
    HandoffContext,
    HandoffHook,
    HandoffPredicate,
    HandoffToolCallFiltering,
    HistoryMode,
    Redaction,
)
from .exceptions import (
    ConversationBusyError,
    ConversationConflictError,
    CorruptConversationError,
    CorruptStateError,
    HandoffArgumentError,
    HandoffBuilderError,
    HandoffConfigurationError,
    HandoffHookError,
    HookSignatureError,
    InvalidMessageError,
    LeaseLostError,
    MessageNotStoredError,
    MessageTooLargeError,
    ModelCallNotRecordedError,
    ModelConnectionError,
    PayloadTooLargeError,
    PendingRequestsError,
    RemoteAgentError,
    RemoteAgentToolsError,
    SchemaVersionError,
    ScriptExhaustedError,
    StoreUnavailableError,
    UnexpectedAnswersError,
)

if _typing.TYPE_CHECKING:
    from . import stores as stores
    from ._a2a_server import a2a_app
    from ._agui import agui_request_check, check_agui_request
    from ._agui_agent import agui_agent
    from ._decision import (
        AgentReply,
        Decision,
        EndTurn,
        Escalate,
        Event,
        HandoffCall,
        HandoffRequest,
        NextAgent,
        ReviewVerdict,
        TurnStart,
    )
    from ._events import (
        HANDOFF_BLOCKED_EVENT,
        HANDOFF_DELEGATION_EVENT,
        HANDOFF_ESCALATED_EVENT,
        HANDOFF_EVENT,
        HANDOFF_INTERMEDIATE_EVENT,
        HANDOFF_LIMIT_EVENT,
        HANDOFF_TIMEOUT_EVENT,
        HANDOFF_TURN_ABANDONED_EVENT,
        HANDOFF_TURN_EVENT,
        DecidedBy,
        DelegationEvent,
        DelegationOutcome,
        EscalationEvent,
        HandoffBlockedEvent,
        HandoffEvent,
        HandoffTurnResult,
        LimitReachedEvent,
        RoutingStep,
        StepKind,
        TurnAbandonedEvent,
        TurnStatus,
        TurnTimeoutEvent,
    )
    from ._handoff_manager import HandoffManager
    from ._host import (
        GroupChatHost,
        KeptConversation,
        ReissueRequests,
        UserTurn,
    )
    from ._host_settings import HostSettings
    from ._hosted_agent import HostedConversationAgent, devui_agent
    from ._hosting import ABANDONED_TURN_PROPERTY, ConversationHost
    from ._hosting_settings import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_INPUT_BYTES, HostingSettings
    from ._input_filters import HandoffInput, InputFilter
    from ._lifecycle import MAX_IDEMPOTENCY_KEY_LENGTH
    from ._lint import LintFinding, LintSeverity
    from ._manager import (
        AutonomousMode,
        CodeRoute,
        GroupChatManager,
        ManagerSettings,
        RouteFunction,
        TerminationCondition,
    )
    from ._model_calls import ModelCall
    from ._model_inputs import redact_patterns
    from ._participant import Participant
    from ._payloads import (
        DelegateTask,
        HandBackSummary,
        HandoffGoal,
        ReviewApproval,
        ReviewChanges,
    )
    from ._remote_input import RemoteQuestion
    from ._requests import decline
    from ._review import Review
    from ._routes import HandoffRoute, hand_back_tool_name, handoff_tool_name
    from ._routing_updates import ROUTING_EVENT_PROPERTY
    from ._state import HandoffState
    from ._workflow import HandoffWorkflow, MessageBatch

# The names imported on first use, by the module they come from ("stores" is a module itself).
# The same names are imported above for type checkers.
_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    # the runtime: what build() imports
    "._decision": (
        "AgentReply", "Decision", "EndTurn", "Escalate", "Event", "HandoffCall", "HandoffRequest",
        "NextAgent", "ReviewVerdict", "TurnStart",
    ),
    "._events": (
        "HANDOFF_BLOCKED_EVENT", "HANDOFF_DELEGATION_EVENT", "HANDOFF_ESCALATED_EVENT",
        "HANDOFF_EVENT", "HANDOFF_INTERMEDIATE_EVENT", "HANDOFF_LIMIT_EVENT",
        "HANDOFF_TIMEOUT_EVENT", "HANDOFF_TURN_ABANDONED_EVENT", "HANDOFF_TURN_EVENT", "DecidedBy",
        "DelegationEvent", "DelegationOutcome", "EscalationEvent", "HandoffBlockedEvent",
        "HandoffEvent", "HandoffTurnResult", "LimitReachedEvent", "RoutingStep", "StepKind",
        "TurnAbandonedEvent", "TurnStatus", "TurnTimeoutEvent",
    ),
    "._handoff_manager": ("HandoffManager",),
    "._host": ("GroupChatHost", "KeptConversation", "ReissueRequests", "UserTurn"),
    "._host_settings": ("HostSettings",),
    "._input_filters": ("HandoffInput", "InputFilter"),
    "._lint": ("LintFinding", "LintSeverity"),
    "._manager": (
        "AutonomousMode", "CodeRoute", "GroupChatManager", "ManagerSettings", "RouteFunction",
        "TerminationCondition",
    ),
    "._model_calls": ("ModelCall",),
    "._model_inputs": ("redact_patterns",),
    "._participant": ("Participant",),
    "._payloads": (
        "DelegateTask", "HandBackSummary", "HandoffGoal", "ReviewApproval", "ReviewChanges",
    ),
    "._remote_input": ("RemoteQuestion",),
    "._requests": ("decline",),
    "._review": ("Review",),
    "._routes": ("HandoffRoute", "hand_back_tool_name", "handoff_tool_name"),
    "._routing_updates": ("ROUTING_EVENT_PROPERTY",),
    "._state": ("HandoffState",),
    "._workflow": ("HandoffWorkflow", "MessageBatch"),
    # the hosting layer
    "._hosting": ("ConversationHost", "ABANDONED_TURN_PROPERTY"),
    "._hosting_settings": ("HostingSettings", "DEFAULT_IDLE_TIMEOUT", "DEFAULT_MAX_INPUT_BYTES"),
    "._hosted_agent": ("HostedConversationAgent", "devui_agent"),
    "._agui_agent": ("agui_agent",),  # needs agent-framework-ag-ui (the serve extra)
    "._agui": ("check_agui_request", "agui_request_check"),  # needs FastAPI (the serve extra)
    "._a2a_server": ("a2a_app",),  # needs a2a-sdk[http-server] (the a2a extra)
    "._lifecycle": ("MAX_IDEMPOTENCY_KEY_LENGTH",),
    ".stores": ("stores",),
}  # fmt: skip
_LAZY = {name: module for module, names in _LAZY_MODULES.items() for name in names}

# Names that were exported before the public surface was curated (issue 23): still importable
# from here, with a DeprecationWarning; not in __all__ nor dir(). name -> (module, why).
_WITHDRAWN: dict[str, tuple[str, str]] = {
    "ResumeTurn": ("._host", "the input ConversationHost sends to finish an interrupted turn"),
    "TurnJournal": ("._host", "how ConversationHost saves a turn's progress"),
    "AgentRun": ("._participant", "what Participant.run returns to the host"),
    "DelegateRoute": ("._delegation", "a compiled delegate edge"),
    "Outcome": ("._builder", "the type of a cap's outcome= (a CapOutcome or an agent)"),
    "DEFAULT_LOGGED_ARGUMENT_LENGTH": ("._settings", "with_logging's default argument_length"),
    "DEFAULT_MAX_HANDOFFS_PER_TURN": ("._settings", "with_max_handoffs_per_turn's default"),
    "DEFAULT_MAX_ITERATIONS": ("._settings", "with_max_iterations's default"),
    "DEFAULT_MAX_REJECTED_HANDOFFS": ("._settings", "with_max_rejected_handoffs's default"),
    "DEFAULT_MAX_REVIEW_ROUNDS": ("._settings", "with_review's default max_rounds"),
    "DEFAULT_MAX_TURN_RETRIES": ("._lifecycle", "ConversationHost's default max_turn_retries"),
}


try:
    __version__: str = _version("handoff-builder")
    """The installed version of handoff_builder."""
except _PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> object:
    """Import the runtime or the hosting layer when one of their names is first asked for."""
    from importlib import import_module

    if name in _WITHDRAWN:
        module_name, what = _WITHDRAWN[name]
        import warnings

        warnings.warn(
            f"handoff_builder.{name} ({what}) is no longer part of the public API; it leaves "
            "the package's namespace in a later release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(import_module(module_name, __name__), name)
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'handoff_builder' has no attribute {name!r}")
    module = import_module(module_name, __name__)
    value = module if module_name == f".{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ABANDONED_TURN_PROPERTY",
    "DEFAULT_AGENT_TIMEOUT",
    "DEFAULT_AUTONOMOUS_PROMPT",
    "DEFAULT_AUTONOMOUS_TURN_LIMIT",
    "DEFAULT_ESCALATION_MESSAGE",
    "DEFAULT_HANDOFF_INSTRUCTIONS",
    "DEFAULT_HAND_BACK_INSTRUCTIONS",
    "DEFAULT_HOOK_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_DELEGATION_DEPTH",
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_MODEL_CALLS",
    "DEFAULT_REPLY_TOOL_DESCRIPTION",
    "DEFAULT_REVIEW_ESCALATION_MESSAGE",
    "DEFAULT_TURN_TIMEOUT",
    "HANDOFF_BLOCKED_EVENT",
    "HANDOFF_DELEGATION_EVENT",
    "HANDOFF_ESCALATED_EVENT",
    "HANDOFF_EVENT",
    "HANDOFF_INTERMEDIATE_EVENT",
    "HANDOFF_LIMIT_EVENT",
    "HANDOFF_TIMEOUT_EVENT",
    "HANDOFF_TOOLS_PLACEHOLDER",
    "HANDOFF_TURN_ABANDONED_EVENT",
    "HANDOFF_TURN_EVENT",
    "MAX_IDEMPOTENCY_KEY_LENGTH",
    "ROUTING_EVENT_PROPERTY",
    "AgentReply",
    "AutonomousMode",
    "CapOutcome",
    "CodeRoute",
    "ConversationBusyError",
    "ConversationConflictError",
    "ConversationHost",
    "CorruptConversationError",
    "CorruptStateError",
    "DecidedBy",
    "Decision",
    "DelegateTask",
    "DelegationEvent",
    "DelegationOutcome",
    "EndTurn",
    "Escalate",
    "EscalationEvent",
    "Event",
    "GroupChatHost",
    "GroupChatManager",
    "HandBackSummary",
    "HandoffArgumentError",
    "HandoffBlockedEvent",
    "HandoffBuilderError",
    "HandoffCall",
    "HandoffConfigurationError",
    "HandoffContext",
    "HandoffEvent",
    "HandoffGoal",
    "HandoffHook",
    "HandoffHookError",
    "HandoffInput",
    "HandoffManager",
    "HandoffPredicate",
    "HandoffRequest",
    "HandoffRoute",
    "HandoffState",
    "HandoffToolCallFiltering",
    "HandoffTurnResult",
    "HandoffWorkflow",
    "HandoffWorkflowBuilder",
    "HistoryMode",
    "HookSignatureError",
    "HostSettings",
    "HostedConversationAgent",
    "HostingSettings",
    "InputFilter",
    "InvalidMessageError",
    "KeptConversation",
    "LeaseLostError",
    "LimitReachedEvent",
    "LintFinding",
    "LintSeverity",
    "ManagerSettings",
    "MessageBatch",
    "MessageNotStoredError",
    "MessageTooLargeError",
    "ModelCall",
    "ModelCallNotRecordedError",
    "ModelConnectionError",
    "NextAgent",
    "Participant",
    "PayloadTooLargeError",
    "PendingRequestsError",
    "Redaction",
    "ReissueRequests",
    "RemoteAgentError",
    "RemoteAgentToolsError",
    "RemoteQuestion",
    "Review",
    "ReviewApproval",
    "ReviewChanges",
    "ReviewVerdict",
    "RouteFunction",
    "RoutingStep",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "StepKind",
    "StoreUnavailableError",
    "TerminationCondition",
    "TurnAbandonedEvent",
    "TurnStart",
    "TurnStatus",
    "TurnTimeoutEvent",
    "UnexpectedAnswersError",
    "UserTurn",
    "a2a_app",
    "agui_agent",
    "agui_request_check",
    "check_agui_request",
    "decline",
    "devui_agent",
    "hand_back_tool_name",
    "handoff_tool_name",
    "redact_patterns",
]
