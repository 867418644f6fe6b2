"""OpenTelemetry: spans after the GenAI conventions, span events, metrics, through the SDK's
in-memory exporter and reader (set once for the test session: OpenTelemetry's providers are global).
"""

from __future__ import annotations

from typing import Any

import pytest
from agent_framework.observability import OBSERVABILITY_SETTINGS
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from typing_extensions import override

from handoff_builder import (
    ConversationHost,
    HandoffContext,
    HandoffHookError,
    HandoffManager,
    HandoffWorkflowBuilder,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import call_tool, handoff_to, reply, scripted_agent
from tests.helpers import AGENT_FRAMEWORK

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader(
    preferred_temporality={
        Counter: AggregationTemporality.DELTA,
        Histogram: AggregationTemporality.DELTA,
    }
)


def _install() -> None:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


_install()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    EXPORTER.clear()
    READER.get_metrics_data()  # start the metric deltas from here (and drop what was read)
    return EXPORTER


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def turns(exporter: InMemorySpanExporter, workflow: str) -> list[ReadableSpan]:
    """Our ``invoke_workflow`` spans of ``workflow``, one per user turn (per run of it).

    agent_framework 1.26 names its span of each ``workflow.run`` call alike (1.23:
    ``workflow.run``): ours are those of the ``handoff_builder`` scope.
    """
    return [
        span
        for span in named(exporter, f"invoke_workflow {workflow}")
        if span.instrumentation_scope is not None
        and span.instrumentation_scope.name == "handoff_builder"
    ]


def parent_of(exporter: InMemorySpanExporter, span: ReadableSpan) -> ReadableSpan | None:
    if span.parent is None:
        return None
    by_id = {s.context.span_id: s for s in exporter.get_finished_spans() if s.context}
    return by_id.get(span.parent.span_id)


def measured() -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Each of our metrics since the last call, per data point: (attributes, a counter's value)
    or (attributes, (a histogram's count, its sum))."""
    data: Any = READER.get_metrics_data()
    resources: list[Any] = list(data.resource_metrics) if data is not None else []
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    for resource in resources:
        scopes: list[Any] = list(resource.scope_metrics)
        for scope in scopes:
            if scope.scope.name != "handoff_builder":
                continue
            for metric in list[Any](scope.metrics):
                for point in list[Any](metric.data.data_points):
                    value = (point.count, point.sum) if hasattr(point, "count") else point.value
                    out.setdefault(str(metric.name), []).append((dict(point.attributes), value))
    return out


def desk() -> Any:
    triage = scripted_agent(
        "triage", handoff_to("billing", goal=""), handoff_to("billing", goal="Refund it.")
    )
    billing = scripted_agent("billing", reply("Refunded."))
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_name("desk")


async def test_a_turn_is_one_invoke_workflow_span_around_the_agents(
    spans: InMemorySpanExporter,
) -> None:
    await desk().build().run("I was charged twice")

    [turn] = turns(spans, "desk")
    assert turn.attributes is not None
    assert dict(turn.attributes) == {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": "desk",
        "handoff_builder.turn.status": "completed",
    }
    agents = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent ")]
    assert sorted(s.name for s in agents) == ["invoke_agent billing", "invoke_agent triage"]
    assert all(parent_of(spans, s) is turn for s in agents)
    chats = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert len(chats) == 3
    assert all(parent_of(spans, s) in agents for s in chats)
    # Around it, agent_framework's spans of the workflow.run call (docs/observability.md).
    executor = parent_of(spans, turn)
    assert executor is not None
    assert executor.name == "executor.process handoff_host"
    run = parent_of(spans, executor)
    assert run is not None
    assert run.instrumentation_scope is not None
    assert run.instrumentation_scope.name == "agent_framework"
    assert parent_of(spans, run) is None
    if AGENT_FRAMEWORK < (1, 26):
        assert run.name == "workflow.run"
    else:
        assert run.name == "invoke_workflow desk"
        attributes = dict(run.attributes or {})
        assert attributes["gen_ai.operation.name"] == "invoke_workflow"
        assert attributes["gen_ai.workflow.name"] == "desk"
        assert "handoff_builder.turn.status" not in attributes


async def test_each_handoff_call_is_an_execute_tool_transfer_span(
    spans: InMemorySpanExporter,
) -> None:
    await desk().build().run("I was charged twice")

    refused, followed = named(spans, "execute_tool handoff_to_billing")
    for span in (refused, followed):
        parent = parent_of(spans, span)
        assert parent is not None
        assert parent.name == "invoke_agent triage"
        attributes = dict(span.attributes or {})
        assert {k: attributes[k] for k in (
            "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.agent.name",
            "gen_ai.transfer.mode", "gen_ai.transfer.target.type", "gen_ai.transfer.target.name",
        )} == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "handoff_to_billing",
            "gen_ai.agent.name": "triage",
            "gen_ai.transfer.mode": "pass_control",
            "gen_ai.transfer.target.type": "agent",
            "gen_ai.transfer.target.name": "billing",
        }  # fmt: skip
        assert str(attributes["gen_ai.tool.call.id"]).startswith("call_")
        assert "gen_ai.tool.call.arguments" not in attributes  # sensitive data is off
    assert dict(refused.attributes or {})["handoff_builder.handoff.outcome"] == "rejected"
    assert [(e.name, dict(e.attributes or {})) for e in refused.events] == [
        ("handoff_builder.handoff.blocked", {"handoff_builder.reason": "empty_goal"})
    ]
    assert dict(followed.attributes or {})["handoff_builder.handoff.outcome"] == "transferred"
    assert followed.events == ()


async def test_a_hand_back_passes_control_too(spans: InMemorySpanExporter) -> None:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund it."), reply("Else?"))
    billing = scripted_agent("billing", call_tool("transfer_back_to_triage", summary="Refunded."))
    workflow = (
        HandoffWorkflowBuilder(triage).with_handoff(triage, billing).with_hand_back(triage).build()
    )
    await workflow.run("I was charged twice")

    [span] = named(spans, "execute_tool transfer_back_to_triage")
    attributes = dict(span.attributes or {})
    assert {
        k: attributes[k] for k in attributes if k.startswith(("gen_ai.", "handoff_builder."))
    } == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "transfer_back_to_triage",
        "gen_ai.tool.call.id": attributes["gen_ai.tool.call.id"],
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": attributes["gen_ai.tool.description"],
        "gen_ai.agent.name": "billing",
        "gen_ai.transfer.mode": "pass_control",
        "gen_ai.transfer.target.type": "agent",
        "gen_ai.transfer.target.name": "triage",
        "handoff_builder.handoff.kind": "hand_back",
        "handoff_builder.handoff.outcome": "transferred",
    }


async def test_the_goal_is_on_the_span_only_with_sensitive_data(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(OBSERVABILITY_SETTINGS, "enable_sensitive_data", True)
    monkeypatch.setattr(OBSERVABILITY_SETTINGS, "enable_instrumentation", True)

    await desk().build().run("I was charged twice")

    _, followed = named(spans, "execute_tool handoff_to_billing")
    assert dict(followed.attributes or {})["gen_ai.tool.call.arguments"] == (
        '{"goal":"Refund it."}'
    )


async def test_agent_frameworks_switch_turns_our_telemetry_off_with_its_own(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(OBSERVABILITY_SETTINGS, "enable_instrumentation", False)
    await desk().build().run("I was charged twice")

    assert spans.get_finished_spans() == ()
    assert measured() == {}


async def test_a_hosted_turn_carries_the_conversation_id(spans: InMemorySpanExporter) -> None:
    host = ConversationHost(desk(), InMemoryConversationStore())
    await host.send("conv-7", "I was charged twice")
    [turn] = turns(spans, "desk")
    assert dict(turn.attributes or {})["gen_ai.conversation.id"] == "conv-7"


async def test_a_cap_is_an_event_on_the_turns_span(spans: InMemorySpanExporter) -> None:
    a = scripted_agent("a", handoff_to("b", goal="One."))
    b = scripted_agent("b", handoff_to("a", goal="Two."))
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b)
        .with_handoff(b, a)
        .with_max_handoffs_per_turn(1)
        .with_name("caps")
        .build()
    )

    await workflow.run("go")

    [turn] = turns(spans, "caps")
    assert dict(turn.attributes or {})["handoff_builder.turn.status"] == "handoff_cap"
    events = [(e.name, dict(e.attributes or {})) for e in turn.events]
    assert [e for e in events if e[0] != "handoff_builder.step"] == [
        (
            "handoff_builder.escalated",
            {
                "handoff_builder.reason": "handoff_cap",
                "gen_ai.agent.name": "b",
                "handoff_builder.limit": 1,
            },
        )
    ]
    assert events[-2] == (  # the cap's step, decided by code, then its escalation event
        "handoff_builder.step",
        {
            "handoff_builder.step.kind": "escalate",
            "handoff_builder.decided_by": "code",
            "handoff_builder.decided_by.what": "handoff_cap",
            "handoff_builder.source": "b",
            "handoff_builder.limit": 1,
            "handoff_builder.count": 1,
        },
    )
    [capped] = named(spans, "execute_tool handoff_to_a")  # b's call, which tripped the cap
    assert dict(capped.attributes or {})["handoff_builder.handoff.outcome"] == "escalated"
    assert [e.name for e in capped.events] == ["handoff_builder.escalated"]
    assert measured()["handoff_builder.escalations"] == [
        ({"handoff_builder.reason": "handoff_cap"}, 1)
    ]


async def test_a_veto_is_an_event_on_its_call_span(spans: InMemorySpanExporter) -> None:
    a = scripted_agent("a", handoff_to("c", goal="Please."), reply("Fine."))
    c = scripted_agent("c")
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, c, on_handoff=lambda context: "Closed today.")
        .build()
    )
    await workflow.run("go")
    [span] = named(spans, "execute_tool handoff_to_c")
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("handoff_builder.handoff.blocked", {"handoff_builder.reason": "vetoed"})
    ]
    assert measured()["handoff_builder.handoffs.blocked"] == [
        ({"handoff_builder.reason": "vetoed"}, 1)
    ]


async def test_a_call_to_a_handoff_the_agent_does_not_have_has_its_span(
    spans: InMemorySpanExporter,
) -> None:
    """Refused as the agent runs, like any refused call: its own span, with the blocked event."""
    triage = scripted_agent(
        "triage",
        handoff_to("refunds", goal="Refund."),
        call_tool("handoff_to_nobody", goal="Anyone."),
        reply("I can help."),
    )
    billing, refunds = scripted_agent("billing"), scripted_agent("refunds")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds)
        .with_name("desk")
        .build()
    )
    await workflow.run("refund")

    [granted_elsewhere] = named(spans, "execute_tool handoff_to_refunds")
    [invented] = named(spans, "execute_tool handoff_to_nobody")
    for span, reason in ((granted_elsewhere, "not_granted"), (invented, "unknown_target")):
        parent = parent_of(spans, span)
        assert parent is not None
        assert parent.name == "invoke_agent triage"
        assert dict(span.attributes or {})["handoff_builder.handoff.outcome"] == "rejected"
        assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
            ("handoff_builder.handoff.blocked", {"handoff_builder.reason": reason})
        ]
    assert dict(granted_elsewhere.attributes or {})["gen_ai.transfer.target.name"] == "refunds"
    assert "gen_ai.transfer.target.name" not in dict(invented.attributes or {})
    [turn] = turns(spans, "desk")
    assert not [e for e in turn.events if e.name == "handoff_builder.handoff.blocked"]


async def test_a_declined_approval_is_an_event_on_its_call_span(
    spans: InMemorySpanExporter,
) -> None:
    from handoff_builder import decline

    a = scripted_agent("a", call_tool("handoff_to_b", goal="Refund."), reply("Declined, ok."))
    b = scripted_agent("b")
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b, approval=True).build()
    [request] = (await workflow.run("go")).get_request_info_events()
    await workflow.run(responses={request.request_id: decline(request.data, "No.")})

    asked, declined = named(spans, "execute_tool handoff_to_b")
    assert dict(asked.attributes or {})["handoff_builder.handoff.outcome"] == "awaiting_approval"
    assert [(e.name, dict(e.attributes or {})) for e in declined.events] == [
        ("handoff_builder.handoff.blocked", {"handoff_builder.reason": "declined"})
    ]


async def test_a_turn_that_waits_for_approval_is_one_span_per_run_linked(
    spans: InMemorySpanExporter,
) -> None:
    a = scripted_agent("a", call_tool("handoff_to_b", goal="Refund."))
    b = scripted_agent("b", reply("Refunded."))
    workflow = HandoffWorkflowBuilder(a).with_handoff(a, b, approval=True).with_name("w").build()
    [request] = (await workflow.run("go")).get_request_info_events()
    waiting = turns(spans, "w")
    assert [dict(s.attributes or {})["handoff_builder.turn.status"] for s in waiting] == [
        "awaiting_input"  # ended: no span is held open while a person decides
    ]
    first = measured()
    assert "handoff_builder.turn.hops" not in first  # the turn is not over

    approve = request.data.to_function_approval_response(approved=True)
    await workflow.run(responses={request.request_id: approve})

    paused, resumed = turns(spans, "w")
    assert dict(resumed.attributes or {})["handoff_builder.turn.status"] == "completed"
    assert paused.context is not None
    assert [link.context.span_id for link in resumed.links] == [paused.context.span_id]
    asked, approved = named(spans, "execute_tool handoff_to_b")
    agent_a = parent_of(spans, asked)
    assert agent_a is not None
    assert (agent_a.name, parent_of(spans, agent_a)) == ("invoke_agent a", paused)
    assert dict(approved.attributes or {})["handoff_builder.handoff.outcome"] == "transferred"
    assert parent_of(spans, approved) is resumed
    [agent_b] = named(spans, "invoke_agent b")
    assert parent_of(spans, agent_b) is resumed
    assert measured()["handoff_builder.turn.hops"] == [({"gen_ai.workflow.name": "w"}, (1, 1))]


async def test_a_failing_turn_ends_its_span_with_an_error(spans: InMemorySpanExporter) -> None:
    def broken(context: HandoffContext) -> None:
        raise ValueError("audit down")

    a = scripted_agent("a", handoff_to("b", goal="Go."))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a).with_handoff(a, b, on_handoff=broken).with_name("w").build()
    )
    with pytest.raises(HandoffHookError):
        await workflow.run("go")

    [turn] = turns(spans, "w")
    assert turn.status.status_code is StatusCode.ERROR
    assert dict(turn.attributes or {})["error.type"] == "HandoffHookError"


async def test_a_hook_failing_after_an_approval_ends_the_answering_runs_span(
    spans: InMemorySpanExporter,
) -> None:
    def broken(context: HandoffContext) -> None:
        raise ValueError("audit down")

    a = scripted_agent("a", call_tool("handoff_to_b", goal="Go."))
    b = scripted_agent("b")
    workflow = (
        HandoffWorkflowBuilder(a)
        .with_handoff(a, b, approval=True, on_handoff=broken)
        .with_name("w")
        .build()
    )
    [request] = (await workflow.run("go")).get_request_info_events()
    approve = request.data.to_function_approval_response(approved=True)
    with pytest.raises(HandoffHookError):
        await workflow.run(responses={request.request_id: approve})

    paused, failed = turns(spans, "w")
    assert paused.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert [e.name for e in failed.events] == ["exception"]  # recorded once


async def test_a_manager_failing_at_the_start_of_a_turn_ends_its_span(
    spans: InMemorySpanExporter,
) -> None:
    class Broken(HandoffManager):
        @override
        async def start_turn(self, history: Any, start: Any) -> Any:
            raise RuntimeError("no speaker")

    a = scripted_agent("a")
    workflow = HandoffWorkflowBuilder(a).with_name("w").with_manager(Broken).build()
    with pytest.raises(RuntimeError, match="no speaker"):
        await workflow.run("go")

    [turn] = turns(spans, "w")
    assert turn.status.status_code is StatusCode.ERROR
    assert dict(turn.attributes or {})["error.type"] == "RuntimeError"


async def test_metrics_count_handoffs_blocks_and_hops(spans: InMemorySpanExporter) -> None:
    await desk().build().run("I was charged twice")

    now = measured()
    assert now["handoff_builder.handoffs"] == [
        (
            {
                "handoff_builder.source": "triage",
                "handoff_builder.target": "billing",
                "handoff_builder.handoff.kind": "handoff",
            },
            1,
        )
    ]
    assert now["handoff_builder.handoffs.blocked"] == [
        ({"handoff_builder.reason": "empty_goal"}, 1)
    ]
    assert now["handoff_builder.turn.hops"] == [({"gen_ai.workflow.name": "desk"}, (1, 1))]
    [(attributes, (count, seconds))] = now["gen_ai.workflow.duration"]
    assert (attributes, count) == (
        {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "desk"},
        1,
    )
    assert 0 < seconds < 60


async def test_each_routing_step_is_an_event_of_the_turns_span(
    spans: InMemorySpanExporter,
) -> None:
    await desk().build().run("I was charged twice")
    [turn] = turns(spans, "desk")
    steps = [dict(e.attributes or {}) for e in turn.events if e.name == "handoff_builder.step"]
    assert [(s["handoff_builder.step.kind"], s["handoff_builder.decided_by"]) for s in steps] == [
        ("start", "code"),
        ("blocked", "code"),
        ("handoff", "model"),
        ("end", "model"),
    ]
    assert steps[1]["handoff_builder.decided_by.what"] == "empty_goal"
    assert steps[2]["handoff_builder.decided_by.what"] == "handoff_to_billing"
    assert (steps[2]["handoff_builder.source"], steps[2]["handoff_builder.target"]) == (
        "triage",
        "billing",
    )


@pytest.mark.parametrize("trace_them", [True, False])
async def test_recorded_model_inputs_are_span_events_with_trace(
    spans: InMemorySpanExporter, trace_them: bool
) -> None:
    """with_model_inputs(trace=True): one event per model call, on the agent's span, with what
    the model received, redacted; without trace=True, no such event."""
    from handoff_builder import redact_patterns

    triage = scripted_agent(
        "triage", handoff_to("billing", goal="Refund card 4111 1111 1111 1111."), instructions="Go."
    )
    billing = scripted_agent("billing", reply("Refunded."))
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_model_inputs(redact=redact_patterns(r"\b\d(?:[ -]?\d){12,18}\b"), trace=trace_them)
        .build()
    )
    turn = (await workflow.run("I was charged twice.")).get_outputs()[-1]

    events = [
        (span.name, dict(event.attributes or {}))
        for span in spans.get_finished_spans()
        for event in span.events
        if event.name == "handoff_builder.model_call"
    ]
    if not trace_them:
        assert events == []
        return
    assert events == [
        (
            "invoke_agent triage",
            {
                "gen_ai.agent.name": "triage",
                "handoff_builder.model_call.index": 0,
                "handoff_builder.model_call.tools": ("handoff_to_billing",),
                "handoff_builder.model_call.instructions": turn.model_calls[0].instructions,
                "handoff_builder.model_call.input": "user: I was charged twice.",
            },
        ),
        (
            "invoke_agent billing",
            {
                "gen_ai.agent.name": "billing",
                "handoff_builder.model_call.index": 1,
                "handoff_builder.model_call.tools": (),
                "handoff_builder.model_call.instructions": "",
                "handoff_builder.model_call.input": "user: I was charged twice.\n"
                "user[handoff_host]: Goal: Refund card "
                "[redacted].",
            },
        ),
    ]
    assert turn.model_calls[0].instructions.startswith("Go.")
