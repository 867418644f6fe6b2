"""A typed refund handoff behind an approval gate, traced with OpenTelemetry.

Run with: python samples/refund_approval.py [--provider scripted|openai|azure] [--decline]
Extras: otel; openai or azure for that --provider

Billing hands the conversation to refunds with a typed ``RefundRequest`` (order id, amount, reason):
the handoff tool's schema is the pydantic model, and an invalid call is refused field by field.
A refund over 100 EUR waits for a person's approval. The sample prints the approval prompt, answers
it (``--decline`` declines, with a reason), then prints the turn and its trace: one workflow span
per run (the first ends waiting for the approval), agent_framework's agent and chat spans, and an
``execute_tool`` span per handoff call.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

from agent_framework import Agent, Content
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict, Field

from handoff_builder import HandoffContext, HandoffTurnResult, HandoffWorkflowBuilder, decline
from handoff_builder.testing import call_tool, reply

if __package__ in (None, ""):  # python samples/<name>.py: the samples package is one level up
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from samples._shared import extra, run_sample, sample_client, sample_options

with extra("otel"):  # the OpenTelemetry SDK: opentelemetry-api alone records no spans
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

QUESTION = "I was charged twice for order A-1 (240 EUR). Please refund the duplicate."


class Reason(str, Enum):
    DUPLICATE = "duplicate charge"
    DAMAGED = "damaged goods"
    OTHER = "other"


class RefundRequest(BaseModel):
    """A refund for the refunds team to pay."""

    model_config = ConfigDict(extra="forbid")  # closed, every field required: strict for OpenAI

    order_id: str = Field(description="The order to refund, as the user gave it (e.g. A-1).")
    amount: float = Field(gt=0, description="The amount to refund, in EUR.")
    reason: Reason = Field(description="Why the user is refunded.")


def needs_approval(context: HandoffContext) -> bool:
    """Refunds over 100 EUR need a person's approval."""
    return isinstance(context.payload, RefundRequest) and context.payload.amount > 100


def tracing() -> InMemorySpanExporter:
    """An in-memory exporter on the global tracer provider (set one up if there is none)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def print_trace(spans: tuple[ReadableSpan, ...]) -> None:
    """The spans of the turn as a tree, with the attributes that tell a handoff apart."""
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    ids = {span.context.span_id for span in spans if span.context}
    for span in spans:
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        by_parent.setdefault(parent, []).append(span)

    def show(parent: int | None, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: s.start_time or 0):
            attributes = span.attributes or {}
            extra = ""
            if "gen_ai.transfer.mode" in attributes:
                extra = (
                    f"  [{attributes['gen_ai.transfer.mode']} -> "
                    f"{attributes['gen_ai.transfer.target.name']}: "
                    f"{attributes.get('handoff_builder.handoff.outcome')}]"
                )
            print(f"  {'  ' * depth}{span.name}{extra}")
            if span.context:
                show(span.context.span_id, depth + 1)

    roots = [  # our turn spans (agent_framework 1.26 names its span of a workflow.run alike)
        s
        for s in spans
        if s.name.startswith("invoke_workflow")
        and s.instrumentation_scope is not None
        and s.instrumentation_scope.name == "handoff_builder"
    ]
    for root in roots:
        status = (root.attributes or {}).get("handoff_builder.turn.status")
        linked = "  (linked to the run it resumes)" if root.links else ""
        print(f"  {root.name}  [{status}]{linked}")
        if root.context:
            show(root.context.span_id, 1)


async def main(provider: str = "scripted", *, approve: bool = True) -> HandoffTurnResult:
    exporter = tracing()
    options = sample_options()  # a cap on output tokens
    billing = Agent(
        client=sample_client(
            provider,
            "billing",
            call_tool("send_to_refunds", order_id="A-1", amount=-240, reason="duplicate charge"),
            call_tool("send_to_refunds", order_id="A-1", amount=240, reason="duplicate charge"),
            reply("The refund was not approved: a person will review it and call you."),
        ),
        name="billing",
        instructions=(
            "You are the billing agent. When a charge must be refunded, call send_to_refunds "
            "with the order id, the amount in EUR and the reason."
        ),
        default_options=options,
    )
    refunds = Agent(
        client=sample_client(
            provider,
            "refunds",
            reply("Refunded 240.00 EUR for order A-1; you will see it in 3 days."),
        ),
        name="refunds",
        instructions="You are the refunds team. Confirm the refund you were handed.",
        description="pays refunds",
        default_options=options,
    )
    workflow = (
        HandoffWorkflowBuilder(billing)
        .with_handoff(
            billing,
            refunds,
            "pays refunds",
            tool_name="send_to_refunds",
            payload=RefundRequest,
            approval=needs_approval,
        )
        .with_name("refund-desk")
        .build()
    )
    print(f"user: {QUESTION}")
    first = await workflow.run(QUESTION)
    requests = first.get_request_info_events()
    answers: dict[str, Content] = {}
    for request in requests:
        call = request.data.function_call
        print(f"  approval needed: {call.name}({call.arguments})")
        answers[request.request_id] = (
            request.data.to_function_approval_response(approved=True)
            if approve
            else decline(request.data, "Refunds over 200 EUR need the receipt.")
        )
        print(f"  -> {'approved' if approve else 'declined'}")
    result = await workflow.run(responses=answers) if answers else first
    turn = result.get_outputs()[-1]
    if not isinstance(turn, HandoffTurnResult):
        raise TypeError(f"expected a HandoffTurnResult, got {turn!r}")
    for message in turn.messages:
        if message.role == "assistant" and message.text:
            print(f"  {message.author_name}: {message.text}")
    for handoff in turn.handoffs:
        payload = handoff.payload.model_dump(mode="json") if handoff.payload else None
        print(f"  handoff {handoff.source} -> {handoff.target}: {payload}")
    print("trace:")
    print_trace(exporter.get_finished_spans())
    return turn


async def from_command_line(provider: str, **flags: bool) -> HandoffTurnResult:
    return await main(provider, approve=not flags["decline"])


if __name__ == "__main__":
    run_sample(__doc__, from_command_line, {"decline": "decline the refund, with a reason"})
