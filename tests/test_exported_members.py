"""The public API is exactly what __init__ exports (ruff's RUF022 keeps __all__ sorted).

It is listed here by what a user does with it, as docs/reference.md lists it; a name joins the
top level when a page of the docs needs it.
"""

import importlib
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import handoff_builder

PUBLIC_SUBMODULES = {"cli", "evals", "exceptions", "providers", "stores", "temporal", "testing"}

EVALS_PUBLIC = {
    "Cases": {
        "EvalCase", "CaseMessage", "Expectation", "EvalCaseError", "load_cases", "parse_cases",
    },
    "Run and check": {"evaluate", "assert_routing_accuracy", "run_cases", "DEFAULT_CONCURRENCY"},
    "Results and report": {
        "EvalReport", "CaseResult", "ModelCallRecord", "EdgeFigures", "ESCALATED", "NO_ANSWER",
        "FAILED", "write_report", "markdown", "confusion_svg",
    },
    "Cases from traffic": {"record_cases", "REDACTIONS"},
}  # fmt: skip
"""``handoff_builder.evals``: a subpackage of its own (docs/evals.md), not in the top level."""

SUBPACKAGES_PUBLIC = {
    "stores": {
        "ConversationStore", "ConversationRecord", "InMemoryConversationStore",
        "SqliteConversationStore", "PostgresConversationStore", "PostgresStoreSettings", "Lease",
        "LeaseHold", "hold", "new_owner", "check_conversation_id", "DEFAULT_LEASE_TTL",
        "MAX_CONVERSATION_ID_LENGTH", "RECORD_SCHEMA_VERSION", "MessageLog", "ChainedMessage",
    },
    "temporal": {
        "TemporalConversationHost", "TemporalHostSettings", "ConversationAlreadyStartedError",
        "TemporalTurnError", "connect", "conversation_worker", "dev_server", "RedisRelay",
        "AgentCallOptions", "ConversationWorkflow", "tool_call_key", "AgentCallRetriedEvent",
        "StreamIncompleteEvent", "ACTIVITY_NAME", "WORKFLOW_NAME", "DEFAULT_TURNS_PER_RUN",
        "HANDOFF_RETRY_EVENT", "HANDOFF_STREAM_INCOMPLETE_EVENT",
    },
}  # fmt: skip
"""``handoff_builder.stores`` and ``handoff_builder.temporal``: what each subpackage exports."""

PUBLIC: dict[str, set[str]] = {
    "Build a workflow": {
        "HandoffWorkflowBuilder", "HandoffWorkflow", "MessageBatch", "CapOutcome",
        "HandoffToolCallFiltering", "LintFinding", "LintSeverity", "Redaction", "redact_patterns",
        "handoff_tool_name", "hand_back_tool_name", "HistoryMode",
        "DEFAULT_HANDOFF_INSTRUCTIONS", "DEFAULT_HAND_BACK_INSTRUCTIONS",
        "HANDOFF_TOOLS_PLACEHOLDER", "DEFAULT_AUTONOMOUS_PROMPT",
        "DEFAULT_AUTONOMOUS_TURN_LIMIT", "DEFAULT_MAX_DELEGATION_DEPTH", "DEFAULT_MAX_MODEL_CALLS",
        "DEFAULT_AGENT_TIMEOUT", "DEFAULT_TURN_TIMEOUT", "DEFAULT_HOOK_TIMEOUT",
        "DEFAULT_ESCALATION_MESSAGE", "DEFAULT_REVIEW_ESCALATION_MESSAGE",
        "DEFAULT_REPLY_TOOL_DESCRIPTION",
    },
    "Code on an edge, and what the tools take": {
        "HandoffContext", "HandoffHook", "HandoffPredicate", "HandoffInput", "InputFilter",
        "RouteFunction", "TerminationCondition", "decline", "HandoffGoal", "HandBackSummary",
        "DelegateTask", "ReviewApproval", "ReviewChanges",
    },
    "Run a turn and read its result": {
        "UserTurn", "ReissueRequests", "HandoffTurnResult", "TurnStatus", "RoutingStep",
        "StepKind", "DecidedBy", "ModelCall", "RemoteQuestion",
    },
    "Events": {
        "HandoffEvent", "HandoffBlockedEvent", "EscalationEvent", "LimitReachedEvent",
        "DelegationEvent", "DelegationOutcome", "TurnTimeoutEvent", "TurnAbandonedEvent",
        "HANDOFF_EVENT", "HANDOFF_BLOCKED_EVENT", "HANDOFF_ESCALATED_EVENT", "HANDOFF_LIMIT_EVENT",
        "HANDOFF_DELEGATION_EVENT", "HANDOFF_TIMEOUT_EVENT", "HANDOFF_TURN_ABANDONED_EVENT",
        "HANDOFF_TURN_EVENT", "HANDOFF_INTERMEDIATE_EVENT",
    },
    "A manager of your own": {
        "GroupChatManager", "HandoffManager", "HandoffState", "ManagerSettings", "AutonomousMode",
        "CodeRoute", "Review", "Decision", "NextAgent", "EndTurn", "Escalate", "Event",
        "AgentReply", "TurnStart", "HandoffCall", "HandoffRequest", "HandoffRoute",
        "ReviewVerdict",
    },
    "A host of your own": {"GroupChatHost", "HostSettings", "KeptConversation", "Participant"},
    "Hosted conversations and serving": {
        "ConversationHost", "HostingSettings", "HostedConversationAgent", "devui_agent",
        "agui_agent", "a2a_app",
        "check_agui_request", "agui_request_check", "ROUTING_EVENT_PROPERTY",
        "ABANDONED_TURN_PROPERTY", "DEFAULT_IDLE_TIMEOUT", "DEFAULT_MAX_INPUT_BYTES",
        "MAX_IDEMPOTENCY_KEY_LENGTH",
    },
    "Errors": {
        "HandoffBuilderError", "HandoffArgumentError", "HookSignatureError",
        "HandoffConfigurationError", "SchemaVersionError", "CorruptStateError",
        "CorruptConversationError", "ConversationBusyError", "ConversationConflictError",
        "LeaseLostError", "StoreUnavailableError", "ModelConnectionError", "PendingRequestsError",
        "UnexpectedAnswersError",
        "MessageNotStoredError",
        "MessageTooLargeError", "InvalidMessageError", "PayloadTooLargeError", "HandoffHookError",
        "ModelCallNotRecordedError", "ScriptExhaustedError", "RemoteAgentError",
        "RemoteAgentToolsError",
    },
}  # fmt: skip

WITHDRAWN = {
    "ResumeTurn": "handoff_builder._host",
    "TurnJournal": "handoff_builder._host",
    "AgentRun": "handoff_builder._participant",
    "DelegateRoute": "handoff_builder._delegation",
    "Outcome": None,  # a type alias
    "DEFAULT_LOGGED_ARGUMENT_LENGTH": None,
    "DEFAULT_MAX_HANDOFFS_PER_TURN": None,
    "DEFAULT_MAX_ITERATIONS": None,
    "DEFAULT_MAX_REJECTED_HANDOFFS": None,
    "DEFAULT_MAX_REVIEW_ROUNDS": None,
    "DEFAULT_MAX_TURN_RETRIES": None,
}
"""Exported before the surface was curated: importable, with a DeprecationWarning."""


def test_the_public_names_are_the_listed_groups() -> None:
    listed = [name for group in PUBLIC.values() for name in group]
    assert len(listed) == len(set(listed))  # each name in one group
    assert set(handoff_builder.__all__) == set(listed)
    # 122 before the surface was curated; four errors (two of them a remote agent's),
    # HostSettings, KeptConversation and HostingSettings since, a2a_app, RemoteQuestion, and
    # DEFAULT_REPLY_TOOL_DESCRIPTION
    assert len(listed) == 122


def test_the_evals_subpackage_exports_its_listed_names_each_documented() -> None:
    import handoff_builder.evals as evals

    listed = [name for group in EVALS_PUBLIC.values() for name in group]
    assert len(listed) == len(set(listed))
    assert set(evals.__all__) == set(listed)
    assert not set(listed) & set(handoff_builder.__all__)
    page = (Path(__file__).parents[1] / "docs" / "evals.md").read_text(encoding="utf-8")
    for name in listed:
        value = getattr(evals, name)
        if callable(value):
            assert value.__doc__, name
        assert f"`{name}" in page, f"docs/evals.md does not name {name}"


@pytest.mark.parametrize("subpackage", sorted(SUBPACKAGES_PUBLIC))
def test_the_stores_and_temporal_subpackages_export_their_listed_names(subpackage: str) -> None:
    module = importlib.import_module(f"handoff_builder.{subpackage}")
    assert set(module.__all__) == SUBPACKAGES_PUBLIC[subpackage]
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        value = getattr(module, name)
        if isinstance(value, type):
            assert value.__doc__, name


def test_the_reference_lists_the_same_groups() -> None:
    reference = Path(__file__).parents[1] / "docs" / "reference.md"
    section = reference.read_text(encoding="utf-8").split("## What `handoff_builder` exports")[1]
    groups = re.findall(r"^\* \*\*(.+?)\*\*(.*?)(?=^\* |^\S|\Z)", section, re.M | re.S)
    documented = {
        title: set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", text)) - PUBLIC_SUBMODULES
        for title, text in groups
    }
    assert documented == PUBLIC


@pytest.mark.parametrize("name", sorted(WITHDRAWN))
def test_a_withdrawn_name_still_imports_with_a_deprecation_warning(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"handoff_builder.{name} .* is no longer part"):
        value = getattr(handoff_builder, name)
    assert value is not None
    if WITHDRAWN[name] is not None:
        assert value.__module__ == WITHDRAWN[name]
    assert name not in handoff_builder.__all__
    assert name not in dir(handoff_builder)  # not kept once asked for


def test_a_public_name_imports_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in handoff_builder.__all__:
            getattr(handoff_builder, name)


def test_all_lists_every_public_name() -> None:
    exported = handoff_builder.__all__
    assert len(exported) == len(set(exported))
    public = {name for name in dir(handoff_builder) if not name.startswith("_")}
    modules = {n for n in public if isinstance(getattr(handoff_builder, n), types.ModuleType)}
    assert modules <= PUBLIC_SUBMODULES  # imported submodules show up as attributes
    assert public - modules == set(exported)


def test_every_exported_name_resolves() -> None:
    for name in handoff_builder.__all__:
        assert getattr(handoff_builder, name) is not None, name


def test_an_unknown_name_is_an_attribute_error_that_names_it() -> None:
    with pytest.raises(AttributeError, match="no attribute 'HandoffBuilder'"):
        _ = handoff_builder.HandoffBuilder


def test_importing_the_package_leaves_the_hosting_layer_unloaded() -> None:
    """Building workflows does not pay for ConversationHost, the stores or sqlite3."""
    script = (
        "import sys, handoff_builder\n"
        "loaded = [m for m in ('handoff_builder._hosting', 'handoff_builder.stores', 'sqlite3')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from handoff_builder import ConversationHost\n"
        "assert ConversationHost.__module__ == 'handoff_builder._hosting'\n"
        "assert 'handoff_builder.stores' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)  # noqa: S603 - our script


def test_configuring_a_builder_leaves_the_runtime_unloaded() -> None:
    """The builder and its settings import without agent_framework's workflows, the host, the
    managers and the events; build() imports them (the import cost, benchmarks/bench_import)."""
    script = (
        "import sys\n"
        "from agent_framework import Agent, FunctionInvocationLayer, BaseChatClient\n"
        "from handoff_builder import CapOutcome, HandoffToolCallFiltering, HandoffWorkflowBuilder\n"
        "class Client(FunctionInvocationLayer, BaseChatClient):\n"
        "    async def _inner_get_response(self, **kwargs): raise NotImplementedError\n"
        "runtime = ('agent_framework._workflows', 'handoff_builder._host', "
        "'handoff_builder._events', 'handoff_builder._manager', 'handoff_builder._payloads')\n"
        "a, b = (Agent(client=Client(), name=n) for n in 'ab')\n"
        "builder = (HandoffWorkflowBuilder(a).with_handoff(a, b, is_enabled=lambda c: True)\n"
        "    .with_max_handoffs_per_turn(2, outcome=CapOutcome.RETURN_TO_USER)\n"
        "    .with_tool_call_filtering(HandoffToolCallFiltering.ALL).with_timeouts(turn=60))\n"
        "loaded = [m for m in runtime if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "workflow = builder.build()\n"
        "assert all(m in sys.modules for m in runtime)\n"
        "assert type(workflow).__name__ == 'HandoffWorkflow'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)  # noqa: S603 - our script


def test_each_default_is_defined_once() -> None:
    """The runtime's modules take the builder's defaults from _settings, not copies of them."""
    from handoff_builder import _engine, _host, _settings  # pyright: ignore[reportPrivateUsage]

    for name in (
        "DEFAULT_AGENT_TIMEOUT", "DEFAULT_TURN_TIMEOUT", "DEFAULT_ESCALATION_MESSAGE",
        "DEFAULT_REVIEW_ESCALATION_MESSAGE",
    ):  # fmt: skip
        assert getattr(_host, name) is getattr(_settings, name), name
        assert getattr(_engine, name) is getattr(_settings, name), name


def test_the_stores_module_is_an_attribute_of_the_package() -> None:
    script = (
        "import sys, handoff_builder\n"
        "assert 'handoff_builder.stores' not in sys.modules\n"
        "store = handoff_builder.stores.InMemoryConversationStore\n"
        "assert store.__module__.startswith('handoff_builder.stores')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)  # noqa: S603 - our script
