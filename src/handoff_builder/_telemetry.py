"""Traces and metrics, after the OpenTelemetry GenAI semantic conventions (development status).

Through opentelemetry-api only: with no SDK configured every call here is a no-op. What is
emitted:

* one ``invoke_workflow {workflow name}`` span per user turn (``gen_ai.operation.name``,
  ``gen_ai.workflow.name``, ``gen_ai.conversation.id`` when hosted). Every agent run of the turn
  runs inside it, so agent_framework's ``invoke_agent`` and ``chat`` spans are its children. A
  turn that waits for answers (approvals, external calls) ends its span there, with the status
  ``awaiting_input``; the run that gets the answers opens the next one, linked to it.
  agent_framework 1.26 names its span of the ``workflow.run`` call around it alike (1.23:
  ``workflow.run``); the instrumentation scope tells them apart;
* one ``execute_tool {tool name}`` span per handoff call (``gen_ai.tool.*``, ``gen_ai.agent.name``
  for the source, ``gen_ai.transfer.mode`` = ``pass_control``, ``gen_ai.transfer.target.*``);
  the call's arguments (goal or payload) only where agent_framework puts a tool call's arguments
  on its spans (its sensitive-data setting is on);
* one ``execute_tool {tool name}`` span per delegation, with ``gen_ai.transfer.mode`` =
  ``return_to_caller``: the expert's ``invoke_agent`` span is its child;
* on either, when the target or the expert is a remote (A2A) agent, its address:
  ``server.address`` and ``server.port`` (the general conventions'), and its URL;
* span events for refused handoffs, vetoes, declined approvals and every cap, with their reason,
  and an error status on a turn that fails;
* with ``with_model_inputs(trace=True)``, one ``handoff_builder.model_call`` span event per model
  call, on the span that is current as the call is made (the agent's ``invoke_agent``), with what
  the model received: the recorded, redacted input (see :mod:`._model_inputs`);
* metrics: handoffs (by source and target), blocked handoffs (by reason), escalations (by reason),
  hops per turn, and ``gen_ai.workflow.duration``.

The attribute names are constants here and nowhere else. Until an SDK's tracer provider is set,
no span is started at all (not even a no-op one), so tracing costs nothing then. agent_framework's
instrumentation switch (``ENABLE_INSTRUMENTATION``) turns ours off with its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agent_framework.observability import OBSERVABILITY_SETTINGS
from opentelemetry import metrics, trace
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    ProxyTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
)

from ._decision import Event
from ._events import (
    DelegationEvent,
    EscalationEvent,
    HandoffBlockedEvent,
    HandoffEvent,
    LimitReachedEvent,
    RoutingStep,
    TurnTimeoutEvent,
)
from ._model_calls import ModelCall

if TYPE_CHECKING:
    from ._decision import HandoffCall
    from ._routes import HandoffRoute

__all__ = [
    "TurnTrace",
    "delegation_span",
    "handoff_span",
    "model_call_event",
    "settle_delegation_span",
    "settle_handoff_span",
]

# -- names (GenAI semantic conventions; gen_ai.transfer.* are not in the Python package yet) -------
OPERATION_NAME = "gen_ai.operation.name"
WORKFLOW_NAME = "gen_ai.workflow.name"
CONVERSATION_ID = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TRANSFER_MODE = "gen_ai.transfer.mode"
TRANSFER_TARGET_TYPE = "gen_ai.transfer.target.type"
TRANSFER_TARGET_NAME = "gen_ai.transfer.target.name"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

INVOKE_WORKFLOW = "invoke_workflow"
EXECUTE_TOOL = "execute_tool"
PASS_CONTROL = "pass_control"  # noqa: S105 - a transfer mode, not a password
RETURN_TO_CALLER = "return_to_caller"
TARGET_AGENT = "agent"

# -- ours ------------------------------------------------------------------------------------------
HANDOFF_OUTCOME = "handoff_builder.handoff.outcome"
DELEGATION_OUTCOME = "handoff_builder.delegation.outcome"
DELEGATION_DEPTH = "handoff_builder.delegation.depth"
HANDOFF_KIND = "handoff_builder.handoff.kind"
TRANSFER_TARGET_URL = "handoff_builder.transfer.target.url"
REASON = "handoff_builder.reason"
SOURCE = "handoff_builder.source"
TARGET = "handoff_builder.target"
LIMIT = "handoff_builder.limit"
COUNT = "handoff_builder.count"
TURN_STATUS = "handoff_builder.turn.status"
AWAITING_INPUT = "awaiting_input"  # the turn status of a run that ends waiting for answers
BLOCKED_EVENT = "handoff_builder.handoff.blocked"
ESCALATED_EVENT = "handoff_builder.escalated"
LIMIT_EVENT = "handoff_builder.limit_reached"
TIMEOUT_EVENT = "handoff_builder.timed_out"
STEP_EVENT = "handoff_builder.step"
DECIDED_BY = "handoff_builder.decided_by"
DECIDED_BY_WHAT = "handoff_builder.decided_by.what"
STEP_KIND = "handoff_builder.step.kind"
MODEL_CALL_EVENT = "handoff_builder.model_call"
MODEL_CALL_INDEX = "handoff_builder.model_call.index"
MODEL_CALL_TOOLS = "handoff_builder.model_call.tools"
MODEL_CALL_INSTRUCTIONS = "handoff_builder.model_call.instructions"
MODEL_CALL_INPUT = "handoff_builder.model_call.input"

_tracer = trace.get_tracer("handoff_builder")
_meter = metrics.get_meter("handoff_builder")
_handoffs = _meter.create_counter(
    "handoff_builder.handoffs", unit="{handoff}", description="Handoffs and hand-backs followed."
)
_blocked = _meter.create_counter(
    "handoff_builder.handoffs.blocked",
    unit="{handoff}",
    description="Handoff calls refused, vetoed or declined.",
)
_delegations = _meter.create_counter(
    "handoff_builder.delegations", unit="{delegation}", description="Delegations, by outcome."
)
_escalations = _meter.create_counter(
    "handoff_builder.escalations", unit="{turn}", description="Turns escalated to a human."
)
_hops = _meter.create_histogram(
    "handoff_builder.turn.hops", unit="{handoff}", description="Handoffs per user turn."
)
_duration = _meter.create_histogram(
    "gen_ai.workflow.duration", unit="s", description="Duration of a user turn of the workflow."
)


QUIET_WHILE: list[Callable[[], bool]] = []
"""Checks under which nothing is traced or counted: a durable engine adds one that is true
while it replays a workflow (its spans and counts were recorded the first time)."""


def _instrumented() -> bool:
    """agent_framework's instrumentation switch: one switch for its telemetry and ours.

    On by default; ``ENABLE_INSTRUMENTATION=false`` or ``disable_instrumentation()`` turn it off.
    Off while a :data:`QUIET_WHILE` check holds.
    """
    return OBSERVABILITY_SETTINGS.ENABLED and not any(check() for check in QUIET_WHILE)


def _tracing() -> bool:
    """True once a tracer provider is set and instrumentation is on.

    opentelemetry-api's default provider is a no-op proxy: with it nothing is started at all.
    """
    return _instrumented() and not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)


_NOT_TRACED: AbstractContextManager[None] = nullcontext()


def _tool_arguments() -> bool:
    """Whether a handoff span carries the call's arguments (``gen_ai.tool.call.arguments``).

    agent_framework's rule for its own tool spans: sensitive data on, and the newer GenAI
    conventions (its default).
    """
    return OBSERVABILITY_SETTINGS.emit_tool_call_attributes


class TurnTrace:
    """The span and clock of one user turn."""

    __slots__ = ("_started", "span", "workflow")

    def __init__(
        self, workflow: str, conversation_id: str | None, resumes: SpanContext | None = None
    ) -> None:
        self.workflow = workflow
        self._started = time.perf_counter()
        self.span: Span = INVALID_SPAN
        if _tracing():
            attributes = {OPERATION_NAME: INVOKE_WORKFLOW, WORKFLOW_NAME: workflow}
            if conversation_id is not None:
                attributes[CONVERSATION_ID] = conversation_id
            links = [Link(resumes)] if resumes is not None and resumes.is_valid else None
            self.span = _tracer.start_span(
                f"{INVOKE_WORKFLOW} {workflow}",
                kind=SpanKind.INTERNAL,
                attributes=attributes,
                links=links,
            )

    def active(self) -> AbstractContextManager[object]:
        """Run an agent inside the turn's span (its own spans become the turn's children)."""
        if self.span is INVALID_SPAN:
            return _NOT_TRACED
        return trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )  # a failing turn is recorded once, by fail()

    def record(self, event: Event) -> None:
        """The metric, and the span event, of one audit event."""
        if not _instrumented():
            return
        if isinstance(event, HandoffEvent):
            _handoffs.add(1, {SOURCE: event.source, TARGET: event.target, HANDOFF_KIND: event.kind})
        elif isinstance(event, DelegationEvent):
            _delegations.add(
                1, {SOURCE: event.caller, TARGET: event.expert, DELEGATION_OUTCOME: event.outcome}
            )
        elif isinstance(event, HandoffBlockedEvent):
            _blocked.add(1, {REASON: event.reason})  # the call's own span has the event
        elif isinstance(event, EscalationEvent):
            _escalations.add(1, {REASON: event.reason})
            if self.span.is_recording():
                self.span.add_event(
                    ESCALATED_EVENT,
                    {REASON: event.reason, AGENT_NAME: event.agent, LIMIT: event.limit},
                )
        elif isinstance(event, LimitReachedEvent) and self.span.is_recording():
            self.span.add_event(
                LIMIT_EVENT, {REASON: event.kind, AGENT_NAME: event.agent, LIMIT: event.limit}
            )
        elif isinstance(event, TurnTimeoutEvent) and self.span.is_recording():
            self.span.add_event(
                TIMEOUT_EVENT, {REASON: event.limit, AGENT_NAME: event.agent, LIMIT: event.seconds}
            )

    def step(self, step: RoutingStep) -> None:
        """A span event for one routing step: what it did, and whether the model or code decided."""
        if not self.span.is_recording():
            return
        attributes: dict[str, str | int] = {
            STEP_KIND: step.kind, DECIDED_BY: step.decided_by, DECIDED_BY_WHAT: step.by
        }  # fmt: skip
        if step.source is not None:
            attributes[SOURCE] = step.source
        if step.target is not None:
            attributes[TARGET] = step.target
        if step.limit is not None:
            attributes[LIMIT] = step.limit
        if step.count is not None:
            attributes[COUNT] = step.count
        self.span.add_event(STEP_EVENT, attributes)

    def end(self, status: str, hops: int) -> None:
        """End the turn: its status, and the hop and duration metrics."""
        if _instrumented():
            _hops.record(hops, {WORKFLOW_NAME: self.workflow})
        self._close(status)

    def pause(self) -> SpanContext:
        """End this run's part of a turn that waits for answers; the answers' run links to it.

        A span is not held open while a person decides (that may take days, and the answers may
        reach another process): the turn is one span per run, and its hops are counted once, at
        the end.
        """
        self._close(AWAITING_INPUT)
        return self.span.get_span_context()

    def _close(self, status: str) -> None:
        if _instrumented():
            _duration.record(
                time.perf_counter() - self._started,
                {OPERATION_NAME: INVOKE_WORKFLOW, WORKFLOW_NAME: self.workflow},
            )
        if self.span.is_recording():
            self.span.set_attribute(TURN_STATUS, status)
        self.span.end()

    def fail(self, error: BaseException) -> None:
        """End the turn with an error status."""
        self.span.set_status(Status(StatusCode.ERROR, str(error)))
        self.span.set_attribute(ERROR_TYPE, type(error).__qualname__)
        self.span.record_exception(error)
        self.span.end()


def handoff_span(route: HandoffRoute, call_id: str) -> AbstractContextManager[Span]:
    """The ``execute_tool`` span of one handoff call (a transfer that passes control)."""
    if not _tracing():
        return nullcontext(INVALID_SPAN)
    return _handoff_span(route, call_id)


@contextmanager
def _handoff_span(route: HandoffRoute, call_id: str) -> Generator[Span, None, None]:
    attributes: dict[str, str | int] = {
        OPERATION_NAME: EXECUTE_TOOL,
        TOOL_NAME: route.tool_name,
        TOOL_CALL_ID: call_id,
        TOOL_TYPE: "function",
        TOOL_DESCRIPTION: route.description,
        AGENT_NAME: route.source,
        TRANSFER_MODE: PASS_CONTROL,
        TRANSFER_TARGET_TYPE: TARGET_AGENT,
        TRANSFER_TARGET_NAME: route.target,
        HANDOFF_KIND: route.kind,
    }
    if not route.target:  # a call to a handoff that does not exist: no target to name
        del attributes[TRANSFER_TARGET_NAME]
    attributes.update(_remote_target(route.target_url))
    with _tracer.start_as_current_span(
        f"{EXECUTE_TOOL} {route.tool_name}", kind=SpanKind.INTERNAL, attributes=attributes
    ) as span:
        yield span


def delegation_span(
    tool_name: str, call_id: str, caller: str, expert: str, depth: int, expert_url: str = ""
) -> AbstractContextManager[Span]:
    """The ``execute_tool`` span of one delegation (a transfer that returns to the caller).

    ``expert_url``: the address of a remote expert (``""``: a local one).
    """
    if not _tracing():
        return nullcontext(INVALID_SPAN)
    return _tracer.start_as_current_span(
        f"{EXECUTE_TOOL} {tool_name}",
        kind=SpanKind.INTERNAL,
        attributes={
            OPERATION_NAME: EXECUTE_TOOL,
            TOOL_NAME: tool_name,
            TOOL_CALL_ID: call_id,
            TOOL_TYPE: "function",
            AGENT_NAME: caller,
            TRANSFER_MODE: RETURN_TO_CALLER,
            TRANSFER_TARGET_TYPE: TARGET_AGENT,
            TRANSFER_TARGET_NAME: expert,
            DELEGATION_DEPTH: depth,
            **_remote_target(expert_url),
        },
    )


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _remote_target(url: str) -> dict[str, str | int]:
    """The attributes naming a remote target at ``url`` (none for a local one, ``""``).

    ``server.address`` and ``server.port`` (the scheme's port when the URL names none), and the
    URL itself (without credentials or query, as :func:`~._remote.remote_url` gives it).
    """
    if not url:
        return {}
    parts = urlsplit(url)
    attributes: dict[str, str | int] = {TRANSFER_TARGET_URL: url}
    if parts.hostname:
        attributes[SERVER_ADDRESS] = parts.hostname
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        if port is not None:
            attributes[SERVER_PORT] = port
    return attributes


def settle_delegation_span(span: Span, outcome: str, task: str) -> None:
    """What became of a delegation, on its span (and its task where arguments are recorded)."""
    if not span.is_recording():
        return
    span.set_attribute(DELEGATION_OUTCOME, outcome)
    if _tool_arguments():
        span.set_attribute(TOOL_CALL_ARGUMENTS, task)


def settle_handoff_span(span: Span, call: HandoffCall) -> None:
    """What became of the call, on its span: the outcome, and why when it was refused."""
    if not span.is_recording():
        return
    span.set_attribute(HANDOFF_OUTCOME, call.outcome)
    if _tool_arguments():
        payload = call.payload.model_dump_json() if call.payload is not None else call.argument
        span.set_attribute(TOOL_CALL_ARGUMENTS, call.arguments or payload)
    if call.blocked is not None:
        span.add_event(BLOCKED_EVENT, {REASON: call.blocked})
    if call.escalation is not None:
        span.add_event(ESCALATED_EVENT, {REASON: call.escalation})


def model_call_event(call: ModelCall) -> None:
    """A span event with what one model call received, on the span current as it is made."""
    if not _tracing():
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(
            MODEL_CALL_EVENT,
            {
                AGENT_NAME: call.agent or "",
                MODEL_CALL_INDEX: call.index if call.index is not None else -1,
                MODEL_CALL_TOOLS: list(call.tool_names),
                MODEL_CALL_INSTRUCTIONS: call.instructions,
                MODEL_CALL_INPUT: call.rendered,
            },
        )
