"""The CLI's support desk: triage, billing and tech, for ``chat`` and ``graph``."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Sequence,
)
from datetime import datetime, timezone
from typing import Any, TextIO, cast

from agent_framework import Agent, AgentResponseUpdate, Content, Message
from typing_extensions import override

from ._builder import HandoffWorkflowBuilder
from ._events import HANDOFF_EVENT, HANDOFF_TURN_EVENT, HandoffEvent, HandoffTurnResult
from ._hosting import ConversationHost
from ._records import open_turn_so_far
from ._remote_input import RemoteQuestion
from .exceptions import PendingRequestsError
from .providers import agent_options, chat_client
from .stores import ConversationStore, InMemoryConversationStore, SqliteConversationStore
from .testing import ModelCall, Step, call_tool, handoff_to, reply, scripted_agent

COMPANY = "Contoso Telecom"
TOPICS = {
    "billing": ("bill", "charge", "invoice", "refund", "plan", "price", "pay"),
    "tech": ("crash", "error", "bug", "app", "router", "internet", "slow", "how do"),
}
INSTRUCTIONS = {
    "triage": (
        f"You are the front desk for {COMPANY}. Greet the user and work out what they need. "
        "Do not solve the problem yourself: hand off to billing (charges, invoices, plans) or "
        "tech (errors, bugs, how-to questions), stating the user's goal in one sentence."
    ),
    "billing": (
        f"You are the billing agent for {COMPANY}. You own this conversation now; help with "
        "charges, invoices and plans. When the user changes topic, hand back to triage with a "
        "summary of what is done and what is still open."
    ),
    "tech": (
        f"You are the tech agent for {COMPANY}. You own this conversation now; help with errors, "
        "bugs and how-to questions. When the user changes topic, hand back to triage with a "
        "summary of what is done and what is still open."
    ),
}
DESCRIPTIONS = {"billing": "charges, invoices, plans", "tech": "errors, bugs, how-to questions"}


def _topic(text: str) -> str | None:
    lowered = text.lower()
    for topic, words in TOPICS.items():
        if any(word in lowered for word in words):
            return topic
    return None


def _triage(call: ModelCall) -> Step:
    text = call.user_text
    topic = _topic(text)
    if topic is None:
        return reply("Hello! I'm the front desk. I can help with billing or technical problems.")
    return handoff_to(topic, goal=f"The user says: {text}")


def _specialist(name: str) -> Callable[[ModelCall], Step]:
    def respond(call: ModelCall) -> Step:
        text = call.user_text
        topic = _topic(text)
        if topic is not None and topic != name:
            summary = f"{name} part done; open: {text}"
            return call_tool("transfer_back_to_triage", summary=summary)
        return reply(f"({name}) I'm on it: {text}")

    return respond


def support_agents(provider: str, max_output_tokens: int | None = None) -> dict[str, Agent]:
    """triage, billing and tech: on a real provider, or keyword-driven scripts offline."""
    responders = {"triage": _triage, "billing": _specialist("billing"), "tech": _specialist("tech")}
    agents: dict[str, Agent] = {}
    for name, responder in responders.items():
        if provider == "scripted":
            agents[name] = scripted_agent(
                name,
                instructions=INSTRUCTIONS[name],
                description=DESCRIPTIONS.get(name),
                respond_with=responder,
            )
        else:
            agents[name] = Agent(
                client=chat_client(provider),
                name=name,
                instructions=INSTRUCTIONS[name],
                description=DESCRIPTIONS.get(name),
                default_options=cast(Any, agent_options(max_output_tokens)),
            )
    return agents


def support_desk(
    provider: str = "scripted", max_output_tokens: int | None = None
) -> HandoffWorkflowBuilder:
    """The support desk workflow: triage hands off; specialists hand back."""
    agents = support_agents(provider, max_output_tokens)
    triage = agents["triage"]
    return (
        HandoffWorkflowBuilder(triage)
        .with_handoffs(triage, [agents["billing"], agents["tech"]])
        .with_hand_back(triage)
        .with_max_handoffs_per_turn(4)
        .with_name("support-desk")
    )


def open_store(spec: str) -> ConversationStore:
    """``memory``, ``sqlite:PATH`` or a ``postgresql://`` address."""
    if spec == "memory":
        return InMemoryConversationStore()
    if spec.startswith("sqlite:"):
        return SqliteConversationStore(spec.removeprefix("sqlite:"))
    if spec.startswith(("postgresql://", "postgres://")):
        from .stores import PostgresConversationStore

        return PostgresConversationStore(spec)
    raise ValueError(f"--store must be memory, sqlite:PATH or postgresql://..., got {spec!r}.")


def print_turn(turn: HandoffTurnResult, out: TextIO) -> None:
    """Each handoff and each agent reply of a turn."""
    _print_messages(turn.messages, turn.handoffs, out)
    if turn.escalated:
        print("  [escalated to a human]", file=out)


def _print_messages(
    messages: Sequence[Message], handoffs: Sequence[HandoffEvent], out: TextIO
) -> None:
    """Each agent reply, and each handoff where its call was made."""
    by_call = {handoff.call_id: handoff for handoff in handoffs}
    for message in messages:
        if message.role == "assistant" and message.text:
            print(f"{message.author_name}: {message.text}", file=out)
        for content in message.contents:
            handoff = by_call.get(str(content.call_id)) if content.type == "function_call" else None
            if handoff is not None:
                print(f"  [{handoff.source} -> {handoff.target}] {handoff.goal}", file=out)


class _Printer:
    """Prints a streamed turn as it happens: each agent's text as it comes, each handoff."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.speaking: str | None = None  # the agent whose text is being printed

    def text(self, update: AgentResponseUpdate) -> None:
        if not update.text:
            return
        if update.author_name != self.speaking:
            self.end_line()
            self.out.write(f"{update.author_name}: ")
            self.speaking = update.author_name
        self.out.write(update.text)
        self.out.flush()

    def handoff(self, handoff: HandoffEvent) -> None:
        self.end_line()
        self.out.write(f"  [{handoff.source} -> {handoff.target}] {handoff.goal}\n")
        self.out.flush()

    def end_line(self) -> None:
        if self.speaking is not None:
            self.out.write("\n")
            self.speaking = None


async def stream_turn(
    host: ConversationHost, conversation_id: str, text: str, out: TextIO
) -> HandoffTurnResult | None:
    """One turn, printed as it happens (``chat`` prints a turn it finished first itself)."""
    printer = _Printer(out)
    result: HandoffTurnResult | None = None
    async for event in host.stream(conversation_id, text, wait=True):
        if event.type == "output" and isinstance(event.data, AgentResponseUpdate):
            printer.text(event.data)
        elif event.type == HANDOFF_EVENT and isinstance(event.data, HandoffEvent):
            printer.handoff(event.data)
        elif event.type == HANDOFF_TURN_EVENT and isinstance(event.data, HandoffTurnResult):
            result = event.data
    printer.end_line()
    if result is not None and result.escalated:
        print("  [escalated to a human]", file=out)
    return result


async def chat(
    host: ConversationHost,
    conversation_id: str,
    lines: Iterable[str] | AsyncIterable[str],
    out: TextIO | None = None,
) -> int:
    """Send each line as a user message and print the turn as it happens; returns the turns run.

    Stops at "exit" or the end of the input. A turn an earlier run left unfinished (Ctrl-C,
    a crash) is finished first, and its reply printed. A turn that waits for an approval or an
    external call asks for each answer (the next line) and carries on.
    """
    sink = out or sys.stdout
    inputs = aiter(_each(lines))
    requests = await host.pending(conversation_id)
    if requests:
        print("(the last turn waits for your answers)", file=sink)
        if not await _answer(host, conversation_id, requests, inputs, sink):
            return 0
    else:
        with _not_logged_twice():
            recovered = await host.resume(conversation_id, wait=True)
        if recovered is not None:
            print("(finishing the turn that was interrupted)", file=sink)
            print_turn(recovered, sink)
    print(await _banner(host, conversation_id), file=sink)
    turns = 0
    while (line := await anext(inputs, None)) is not None:
        text = line.strip()
        if text.lower() in ("exit", "quit"):
            break
        if not text:
            continue
        await stream_turn(host, conversation_id, text, sink)
        turns += 1
        requests = await host.pending(conversation_id)
        if requests and not await _answer(host, conversation_id, requests, inputs, sink):
            break
    return turns


class _InterruptedTurnSaid(logging.Filter):
    """Drops the host's warning that it finishes an interrupted turn: ``chat`` prints that."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("conversation %s: finishing a turn interrupted")


@contextlib.contextmanager
def _not_logged_twice() -> Generator[None, None, None]:
    """While ``chat`` resumes: its own line says a turn is finished, not a log record too."""
    logger, said = logging.getLogger("handoff_builder"), _InterruptedTurnSaid()
    logger.addFilter(said)
    try:
        yield
    finally:
        logger.removeFilter(said)


async def _banner(host: ConversationHost, conversation_id: str) -> str:
    """Who the next message goes to: the remembered agent, or the initial one after a rest."""
    initial = host.builder.initial_agent.name or "the initial agent"
    active = await host.active_agent(conversation_id)
    last = await host.last_activity(conversation_id)
    if (
        active not in (None, initial)
        and last is not None
        and datetime.now(timezone.utc) - last > host.idle_timeout
    ):
        since = last.astimezone().strftime("%Y-%m-%d %H:%M")
        return (
            f"conversation {conversation_id!r}: idle since {since}, so it starts again at "
            f"{initial} (exit to quit)"
        )
    return f"conversation {conversation_id!r}: talking to {active or initial} (exit to quit)"


async def _answer(
    host: ConversationHost,
    conversation_id: str,
    requests: list[Content],
    inputs: AsyncIterator[str],
    out: TextIO,
) -> bool:
    """Ask for each request's answer, one line each, until the turn waits no more.

    Returns ``False`` when the input ended before every request was answered (the turn stays
    waiting in the store; the next ``chat`` asks again).
    """
    seen = len(await host.history(conversation_id))  # printed already, up to here
    while requests:
        answers: dict[str, Content] = {}
        for request in requests:
            line = await _ask(request, inputs, out)
            if line is None:
                return False
            answers[str(request.id)] = _answer_to(request, line)
        try:
            turn = await host.respond(conversation_id, answers, wait=True)
        except PendingRequestsError as waiting:  # answered, and the turn asks again
            requests, handoffs, escalated = list(waiting.requests), None, False
        else:
            requests, handoffs, escalated = [], turn.handoffs, turn.escalated
        history = await host.history(conversation_id)
        if handoffs is None:  # the open turn's handoffs so far
            turn_so_far = await open_turn_so_far(host.store, conversation_id)
            handoffs = () if turn_so_far is None else turn_so_far.handoffs
        _print_messages(history[seen:], handoffs, out)
        seen = len(history)
        if escalated:
            print("  [escalated to a human]", file=out)
    return True


async def _ask(request: Content, inputs: AsyncIterator[str], out: TextIO) -> str | None:
    """The user's answer to one request; ``None``: the input ended, or they typed exit."""
    while True:
        print(f"  {_question(request)}", file=out)
        out.flush()
        line = await anext(inputs, None)
        if line is None or line.strip().lower() in ("exit", "quit"):
            return None
        if line.strip() or request.type == "function_approval_request":  # Enter: "no"
            return line.strip()


def _question(request: Content) -> str:
    if request.type == "function_approval_request":
        call = cast(Content, request.function_call)
        return f"[approval] {_call_text(call)}: approve? [y/N]"
    asked = RemoteQuestion.of(request)
    if asked is not None:
        return f"[{asked.agent} asks] {asked.text}: type your answer"
    return f"[external call] {_call_text(request)}: type its result"


def _call_text(call: Content) -> str:
    try:
        arguments = call.parse_arguments() or {}
    except ValueError:
        return f"{call.name}({call.arguments})"
    return f"{call.name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def _answer_to(request: Content, line: str) -> Content:
    if request.type == "function_approval_request":
        return request.to_function_approval_response(approved=line.lower() in ("y", "yes"))
    if request.type == "text":  # a remote agent's question
        return RemoteQuestion.answer(line)
    return Content.from_function_result(call_id=str(request.call_id), result=line)


async def _each(lines: Iterable[str] | AsyncIterable[str]) -> AsyncIterator[str]:
    if isinstance(lines, AsyncIterable):
        async for line in lines:
            yield line
    else:
        for line in lines:
            yield line
