"""What each documentation page's code assumes: the names its blocks use without defining them.

``tests/test_docs.py`` runs the ```python blocks of ``docs/*.md``, ``README.md`` and
``samples/README.md``. Most pages show fragments (``builder.with_handoff(triage, billing)``)
whose agents and builder are understood; each such page says so in an HTML comment that lists
those names, and its setup here (registered under the page's path) defines exactly them:

    <!-- docs-setup: triage, billing, builder -->
    <!-- docs-setup (each block on its own): triage, billing, builder -->

With "each block on its own" every block starts from a fresh setup; otherwise the blocks of a
page run in order in one namespace, as a reader runs them one after the other. The agents are
scripted (``handoff_builder.testing``) and answer any message: a keyword hands the conversation
on (``routes``) or calls a tool (``uses``), anything else gets a short reply.

A block that needs a server (``<!-- docs-test: with Temporal -->``, ``with PostgreSQL``) runs
against the test server, with the literals of :attr:`Setup.literals` replaced (the page's address,
task queue and conversation id are the test's own). A page whose agent has a real model client
talks to a local OpenAI-compatible server that answers from a script (:class:`FakeChatCompletions`).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent_framework import Agent, Message, tool
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import override

from handoff_builder import (
    EndTurn,
    GroupChatManager,
    HandoffContext,
    HandoffManager,
    HandoffToolCallFiltering,
    HandoffWorkflowBuilder,
    NextAgent,
    RoutingStep,
    handoff_tool_name,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import (
    ModelCall,
    ScriptedChatClient,
    Step,
    call_tool,
    handoff_to,
    reply,
    respond,
)


@dataclass(frozen=True)
class Servers:
    """The test servers a page's blocks may run against (``None``: not configured)."""

    temporal: str | None
    postgres: str | None


@dataclass
class Setup:
    """What a page's code assumes: its names, literals to replace in server blocks, environment."""

    names: dict[str, object]
    literals: dict[str, str] = field(default_factory=dict[str, str])
    env: dict[str, str] = field(default_factory=dict[str, str])


SetupFactory = Callable[[Servers], AbstractAsyncContextManager[Setup]]
SETUPS: dict[str, SetupFactory] = {}
"""Each page's setup, by its path from the repository root (``docs/hosting.md``)."""


def page(path: str) -> Callable[[SetupFactory], SetupFactory]:
    def register(factory: SetupFactory) -> SetupFactory:
        SETUPS[path] = factory
        return factory

    return register


# -- scripted agents that answer anything -------------------------------------------------------


def desk_agent(
    name: str,
    *,
    routes: Mapping[str, str] | None = None,
    uses: Mapping[str, tuple[str, dict[str, Any]]] | None = None,
    answer: str | None = None,
    tools: Sequence[Any] = (),
    description: str | None = None,
) -> Agent:
    """An agent whose scripted model hands off on a keyword, calls a tool on one, else replies.

    ``routes`` maps a keyword of the user's last message to the agent to hand off to (when the
    agent has that handoff tool in this call); ``uses`` maps a keyword to a tool call. After a
    tool's result the model answers ``"Done."``.
    """

    def model(call: ModelCall) -> Step:
        if call.messages and call.messages[-1].role == "tool":
            return reply("Done.")
        said = call.user_text.lower()
        for keyword, target in (routes or {}).items():
            if keyword in said and handoff_tool_name(target) in call.tool_names:
                return handoff_to(target, goal=f"The user says: {call.user_text}")
        for keyword, (tool_name, arguments) in (uses or {}).items():
            if keyword in said and tool_name in call.tool_names:
                return call_tool(tool_name, **arguments)
        return reply(answer or "I can help with that.")

    return Agent(
        client=ScriptedChatClient(name=name, respond_with=model),
        name=name,
        instructions=f"You are the {name} agent of a support desk.",
        description=description or f"The {name} agent.",
        tools=list(tools) or None,
    )


TRIAGE_ROUTES = {
    "charge": "billing",
    "invoice": "billing",
    "refund": "billing",
    "crash": "tech",
    "error": "tech",
}


@tool(approval_mode="always_require")
def refund(amount: float) -> str:
    """Refund an amount in EUR to the customer's card."""
    return f"refunded {amount} EUR"


def support_desk() -> dict[str, Agent]:
    """triage, billing (with a ``refund`` tool that needs approval) and tech."""
    return {
        "triage": desk_agent("triage", routes=TRIAGE_ROUTES),
        "billing": desk_agent(
            "billing",
            uses={"refund": ("refund", {"amount": 5})},
            tools=[refund],
            description="Charges, invoices and plans.",
        ),
        "tech": desk_agent("tech", description="Errors, bugs and how-to questions."),
    }


def agents(*names: str) -> dict[str, object]:
    return {name: desk_agent(name) for name in names}


class RefundRequest(BaseModel):
    """A refund for the refunds team to pay."""

    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(description="The order to refund.")
    amount: float = Field(gt=0, description="The amount, in EUR.")


class Reason(str, Enum):
    DUPLICATE = "duplicate charge"


class TypedRefund(BaseModel):
    """A refund with its reason (typed-handoffs.md's model)."""

    model_config = ConfigDict(extra="forbid")
    order_id: str
    amount: float = Field(gt=0)
    reason: Reason


class CaseSummary(BaseModel):
    """What a specialist did, and what is still open."""

    done: str
    still_open: str


class LedgerQuery(BaseModel):
    """An account to look up in the ledger."""

    account: str


def over_100(context: HandoffContext) -> bool:
    payload = context.payload
    return isinstance(payload, RefundRequest) and payload.amount > 100


@asynccontextmanager
async def offline(names: dict[str, object], **env: str) -> AsyncGenerator[Setup]:
    yield Setup(names, env=env)


# -- the pages ----------------------------------------------------------------------------------


@page("README.md")
@asynccontextmanager
async def readme(servers: Servers) -> AsyncGenerator[Setup]:
    desk = support_desk()
    names: dict[str, object] = {
        **desk,
        **agents("refunds", "policy", "planner", "reviewer", "safe_agent"),
        "RefundRequest": RefundRequest,
        "builder": HandoffWorkflowBuilder(desk["triage"]).with_handoffs(
            desk["triage"], [desk["billing"], desk["tech"]]
        ),
    }
    async with temporal_worker(servers) as literals:
        yield Setup(names, literals=literals)


@asynccontextmanager
async def temporal_worker(
    servers: Servers, builder: HandoffWorkflowBuilder | None = None
) -> AsyncGenerator[dict[str, str]]:
    """A worker for ``builder`` (a support desk by default) on a task queue of its own; yields
    the literals that point a page's Temporal block at it. Nothing without a server."""
    from temporalio.service import RPCError

    from handoff_builder.temporal import connect, conversation_worker

    if servers.temporal is None:
        yield {}
        return
    if builder is None:
        desk = support_desk()
        builder = HandoffWorkflowBuilder(desk["triage"]).with_handoffs(
            desk["triage"], [desk["billing"], desk["tech"]]
        )
    queue, conversation = f"docs-{uuid.uuid4().hex[:8]}", f"docs-{uuid.uuid4().hex[:8]}"
    client = await connect(servers.temporal)
    async with AsyncExitStack() as stack:
        relay = os.environ.get("HANDOFF_BUILDER_REDIS_URL") or None  # for streaming turns
        await stack.enter_async_context(
            conversation_worker(client, builder, task_queue=queue, relay=relay)
        )
        literals = {"127.0.0.1:7233": servers.temporal, "desk": queue, "customer-42": conversation}
        literals["long-desk"] = f"{queue}-long"  # a queue of its own: its workers have a log
        literals["customer-77"] = f"{conversation}-long"
        if servers.postgres is not None:
            literals["postgresql://app@db.internal/support"] = servers.postgres
        if relay is not None:
            literals["redis://127.0.0.1:6379/0"] = relay
        try:
            yield literals
        finally:
            with contextlib.suppress(RPCError):  # the block may not have started it
                await client.get_workflow_handle(conversation).terminate(reason="docs test")


@page("docs/autonomous-mode.md")
def autonomous_mode(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    return offline(
        {"HandoffWorkflowBuilder": HandoffWorkflowBuilder, **agents("researcher", "writer")}
    )


class MyManager(HandoffManager):
    """A manager of your own (here: the handoff manager as it is)."""


@page("docs/builder.md")
def builder_page(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    desk = support_desk()
    return offline(
        {
            "HandoffWorkflowBuilder": HandoffWorkflowBuilder,
            "HandoffToolCallFiltering": HandoffToolCallFiltering,
            **desk,
            **agents(
                "refunds",
                "intake",
                "flights",
                "hotels",
                "researcher",
                "writer",
                "reviewer",
                "policy",
                "ledger",
                "planner",
            ),
            "builder": HandoffWorkflowBuilder(desk["triage"]).with_handoffs(
                desk["triage"], [desk["billing"], desk["tech"]]
            ),
            "RefundRequest": RefundRequest,
            "over_100": over_100,
            "CaseSummary": CaseSummary,
            "MyManager": MyManager,
        }
    )


class FakeChatCompletions:
    """An OpenAI-compatible chat-completions endpoint on 127.0.0.1 that answers from a script
    (one message per request, in order) and keeps each request's body."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                message = fake.replies.pop(0)
                answer = json.dumps({
                    "id": f"chatcmpl-{len(fake.requests)}", "object": "chat.completion",
                    "created": 0, "model": body.get("model", "fake"),
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if "tool_calls" in message
                                 else "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            @override
            def log_message(self, format: str, *args: Any) -> None:
                del format, args

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeChatCompletions:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


ORDER_SHIPPED = "Your order was shipped on 28 November; the courier delivers it on 2 December."


@page("docs/end-to-end.md")
@asynccontextmanager
async def end_to_end(servers: Servers) -> AsyncGenerator[Setup]:
    """The orders agent's model is a local OpenAI-compatible server: it looks the order up with
    its tool, then answers; the conversation is kept on the test PostgreSQL server."""
    from handoff_builder.stores import PostgresConversationStore

    orders_model = [
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "order_status", "arguments": json.dumps({"order_id": "1234"})},
        }]},
        {"role": "assistant", "content": ORDER_SHIPPED},
    ]  # fmt: skip
    conversation = f"order-desk-{uuid.uuid4().hex[:8]}"
    with FakeChatCompletions(orders_model) as model:
        yield Setup(
            {
                "ORDERS": {"1234": "Shipped on 28 November; delivery on 2 December."},
                "triage": desk_agent("triage", routes={"order": "orders"}),
                "dsn": servers.postgres or "postgresql://postgres@127.0.0.1:5432/postgres",
            },
            literals={"order-desk-1827643d": conversation},
            env={"OPENAI_API_KEY": "sk-docs-test", "OPENAI_BASE_URL": model.url},
        )
        if servers.postgres:
            async with PostgresConversationStore(servers.postgres) as store:
                await store.delete(conversation)
    if servers.postgres:  # the block ran: orders' model was asked, and read what it was handed
        assert not model.replies, "the orders agent's model was not asked"
        assert "Goal: The user says: Hi, where is my order" in (json.dumps(model.requests[0]))


@page("docs/evals.md")
def evals_page(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    """triage hands off on a keyword; billing and tech hand what belongs to the other back."""
    del servers
    triage = desk_agent("triage", routes=TRIAGE_ROUTES)
    billing = desk_agent("billing", routes={"crash": "triage", "error": "triage"})
    tech = desk_agent("tech", routes={"charge": "triage", "invoice": "triage"})
    builder = (
        HandoffWorkflowBuilder(triage)
        .with_handoffs(triage, [billing, tech])
        .with_handoffs([billing, tech], triage)
    )
    return offline({"builder": builder})


@page("docs/graphs.md")
def graphs(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    desk = support_desk()
    return offline(
        {
            "triage": desk["triage"],
            **agents(
                "policy",
                "ledger",
                "legal",
                "writer",
                "reviewer",
                "sre",
                "investigator",
                "planner",
                "safe_agent",
            ),
            "LedgerQuery": LedgerQuery,
            "workflow": HandoffWorkflowBuilder(desk["triage"])
            .with_handoff(desk["triage"], desk["billing"])
            .build(),
        }
    )


@page("docs/hand-back.md")
def hand_back(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    return offline(
        {"HandoffWorkflowBuilder": HandoffWorkflowBuilder, **agents("triage", "billing", "tech")}
    )


@page("docs/hosting.md")
def hosting(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    return offline(
        {**support_desk(), "text": "When will I see the money?", "request_id": "request-7f3a"}
    )


@page("docs/human-in-the-loop.md")
def human_in_the_loop(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    desk = support_desk()
    workflow = (
        HandoffWorkflowBuilder(desk["triage"]).with_handoff(desk["triage"], desk["billing"]).build()
    )
    return offline({"workflow": workflow})


@page("docs/next-turn-routing.md")
def next_turn_routing(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    return offline(
        {"HandoffWorkflowBuilder": HandoffWorkflowBuilder, **agents("triage", "billing")}
    )


@page("docs/outputs-and-streaming.md")
def outputs_and_streaming(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    triage = desk_agent("triage", routes=TRIAGE_ROUTES)
    billing = Agent(  # streams its reply in three parts, as a model does in many
        client=ScriptedChatClient(
            respond("I found", " the duplicate charge", " and refunded it."), name="billing"
        ),
        name="billing",
        instructions="You handle charges.",
    )
    return offline(
        {"workflow": HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()}
    )


class RoundRobin(GroupChatManager):
    """Each agent in turn, once per user message."""

    def __init__(self, order: list[str]) -> None:
        super().__init__(max_iterations=len(order))
        self.order = order
        self.spoken = 0

    @override
    async def start_turn(self, history: Sequence[Message], start: Any) -> NextAgent:
        del history, start
        self.spoken = 1
        return NextAgent(self.order[0])

    @override
    async def decide(self, history: Sequence[Message], reply: Any) -> NextAgent | EndTurn:
        del history, reply
        if self.spoken == len(self.order):
            return EndTurn()
        self.spoken += 1
        return NextAgent(self.order[self.spoken - 1])


@page("docs/reference.md")
def reference(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    desk = support_desk()
    builder = HandoffWorkflowBuilder(desk["triage"]).with_handoff(desk["triage"], desk["billing"])
    return offline(
        {
            "initial_agent": desk["triage"],
            "RoutingStep": RoutingStep,
            **agents("writer", "critic"),
            "store": InMemoryConversationStore(),
            "RoundRobin": RoundRobin,
            "builder": builder,
            "workflow": builder.build(),
        }
    )


@page("docs/serving.md")
def serving(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    triage = desk_agent("triage", routes=TRIAGE_ROUTES)
    billing = desk_agent("billing", answer="I found the duplicate charge and refunded it.")
    return offline({"builder": HandoffWorkflowBuilder(triage).with_handoff(triage, billing)})


class Payments:
    """A payment provider's client: pays each idempotency key once."""

    def __init__(self) -> None:
        self.paid: dict[str, int] = {}

    def refund(self, amount: int, *, idempotency_key: str) -> None:
        self.paid.setdefault(idempotency_key, amount)


@page("docs/temporal.md")
@asynccontextmanager
async def temporal(servers: Servers) -> AsyncGenerator[Setup]:
    desk = support_desk()
    builder = HandoffWorkflowBuilder(desk["triage"]).with_handoffs(
        desk["triage"], [desk["billing"], desk["tech"]]
    )
    async with temporal_worker(servers, builder) as literals:
        yield Setup({"builder": builder, "payments": Payments()}, literals=literals)


@page("docs/termination.md")
def termination(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    return offline(agents("triage", "billing"))


class Crm:
    """Which conversations have an open case."""

    def has_case(self, conversation_id: str | None) -> bool:
        return conversation_id is not None


@page("docs/typed-handoffs.md")
def typed_handoffs(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    del servers
    triage = desk_agent("triage", routes=TRIAGE_ROUTES)
    billing = Agent(
        client=ScriptedChatClient(
            call_tool("send_to_refunds", order_id="A-1", amount=240, reason="duplicate charge"),
            name="billing",
        ),
        name="billing",
        instructions="You handle charges; refunds go to the refunds team.",
    )
    refunds = Agent(
        client=ScriptedChatClient(reply("Refunded 240 EUR for A-1."), name="refunds"),
        name="refunds",
        instructions="You pay refunds.",
    )
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoff(billing, refunds, tool_name="send_to_refunds", payload=TypedRefund,
                      approval=True)
        .build()
    )  # fmt: skip
    return offline(
        {
            "builder": HandoffWorkflowBuilder(triage).with_handoff(triage, billing),
            "triage": triage,
            "billing": billing,
            "refunds": refunds,
            **agents("escalations", "old_billing", "new_billing"),
            "crm": Crm(),
            "new_live": True,
            "HandoffContext": HandoffContext,
            "RefundRequest": RefundRequest,
            "workflow": workflow,
        }
    )


@page("docs/what-each-agent-sees.md")
@asynccontextmanager
async def what_each_agent_sees(servers: Servers) -> AsyncGenerator[Setup]:
    """The page's example conversation, run: triage -> billing -> (hand-back) triage -> tech."""
    del servers
    triage = Agent(
        client=ScriptedChatClient(
            handoff_to("billing", goal="Refund the duplicate charge."),
            handoff_to("tech", goal="Fix the app's crash."),
            handoff_to(
                "billing", goal="Refund the double charge on the card."
            ),  # with_model_inputs
            name="triage",
        ),
        name="triage",
        instructions="You are the front desk.",
    )
    billing = Agent(
        client=ScriptedChatClient(
            call_tool("transfer_back_to_triage", summary="refund done; crash still open"),
            reply("I see two charges on your card."),  # the with_model_inputs example
            name="billing",
        ),
        name="billing",
        instructions="You handle charges.",
    )
    tech = desk_agent("tech")
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoffs(triage, [billing, tech])
        .with_hand_back(triage)
        .build()
    )
    await workflow.run("I was charged twice for my March bill, and the app crashes.")
    yield Setup({"triage": triage, "billing": billing, "builder": HandoffWorkflowBuilder(triage)})


@page("docs/porting-from-python-handoffbuilder.md")
def porting_from_python(servers: Servers) -> AbstractAsyncContextManager[Setup]:
    """The ported sample's agents, offline."""
    del servers
    from samples.python_handoff import support_agents

    triage, refund, order, returns = support_agents("scripted")
    return offline({"triage": triage, "refund": refund, "order": order, "returns": returns})


@page("docs/remote-agents.md")
@asynccontextmanager
async def remote_agents(servers: Servers) -> AsyncGenerator[Setup]:
    """Two remote agents on A2A servers of 127.0.0.1, and a scripted triage that uses them."""
    del servers
    from tests.a2a_servers import A2AServer, Answer, Received

    def policy(received: Received) -> Answer:
        del received
        return Answer("Damaged parcels can be refunded within 30 days.")

    def returns(received: Received) -> Answer:
        if received.continued:
            return Answer(f"Refund of {received.text.split()[-1].rstrip('.')} started.")
        return Answer("Which order is it?", "input_required")

    def front_desk(call: ModelCall) -> Step:
        last = call.messages[-1]
        results = [str(c.result) for c in last.contents if c.type == "function_result"]
        if results:
            return reply(f"Our policy: {results[0]}")
        if last.text.startswith("Hand-back from returns"):
            return reply("Your refund is on its way. Anything else?")
        said = call.user_text.lower()
        if "window" in said:
            return call_tool("ask_policy", task="What is the refund window for a damaged parcel?")
        if "refund" in said:
            return handoff_to("returns", goal="Refund a broken parcel.")
        return reply("How can I help?")

    triage = Agent(
        client=ScriptedChatClient(name="triage", respond_with=front_desk),
        name="triage",
        instructions="You are the front desk.",
    )
    async with (
        A2AServer(policy, name="policy") as policy_server,
        A2AServer(returns, name="returns") as returns_server,
    ):
        yield Setup(
            {"triage": triage, "policy_url": policy_server.url, "returns_url": returns_server.url}
        )
