"""Delegation: an agent asks an expert through a tool and keeps the conversation (call and return).

A delegate edge (``with_delegate(caller, expert)``) gives the caller one tool, ``ask_<expert>``,
whose arguments are a ``task`` (or the edge's pydantic payload). The tool is never executed as a
function: :class:`DelegateToolMiddleware` intercepts each call and runs the expert, with its own
tools and instructions, on

* the task alone (``history="none"``),
* the shared conversation as the expert would see it with no filtering (``"full"``), or with the
  workflow's filtering and handoff notes (``"filtered"``), then the task.

The expert's final text is the call's result; the caller goes on. The expert's own messages stay
out of the shared conversation: they are in a :class:`~handoff_builder.DelegationEvent`. An
expert runs with no handoff tools (a delegation never passes control, and never lends the caller's
authority), and with its own delegates while the depth allows.

When an expert waits for a person (a tool of its own that needs approval, an external call, or a
delegate with ``approval=True``), the delegation waits with it: every frame from the caller's call
to the waiting expert is a :class:`~handoff_builder._state.DelegationFrame`, kept in the turn's
pending state (so it is checkpointed and stored), and the caller's call is left open, marked as
waiting for input. Once the answers are in, the innermost expert carries on, its answer goes to
the frame above, and so on out to the caller, which then runs again with its call answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    MiddlewareTermination,
)
from pydantic import BaseModel
from typing_extensions import override

from ._calls import (
    BESIDE_WAITING_RESULT,
    call_id_of,
    dangling_calls,
    delegate_result,
    requests_in,
    settle,
    unanswered,
)
from ._events import DelegationEvent, DelegationOutcome
from ._payloads import DelegateTask, payload_label, validate_arguments
from ._settings import (
    DEFAULT_MAX_DELEGATION_DEPTH,
    DELEGATE_TOOL_PREFIX,
    HistoryMode,
)
from ._state import DelegationFrame
from ._telemetry import delegation_span, settle_delegation_span
from ._timeouts import DeadlinePassedError, within
from ._tools import HandoffTool, schema_tool

__all__ = [
    "DEFAULT_MAX_DELEGATION_DEPTH",
    "DELEGATE_TOOL_PREFIX",
    "DelegateRoute",
    "DelegateToolMiddleware",
    "DelegationScope",
    "Delegations",
    "DueExperts",
    "HistoryMode",
    "Suspension",
    "delegate_key",
    "failed_delegation",
    "make_delegate_tool",
    "refused_beside_waiting",
    "settle_waiting",
    "settlement",
    "together",
    "waiting_apart",
]

DELEGATE_APPROVAL_ID_PREFIX = "delegation-approval-"
"""How the id of a delegate call's approval request starts (stored in pending state)."""

NO_ANSWER_RESULT = "{expert} gave no answer."
FAILED_RESULT = "Error: {expert} could not answer ({error}). Carry on without its answer."
TIMED_OUT_RESULT = (
    "Error: {expert} gave no answer within {seconds:g} s, its time limit, and was stopped. "
    "Carry on without its answer."
)
DELEGATE_DECLINED_RESULT = (
    "Not asked: the person who reviewed it declined the call to {tool}. Carry on without it."
)
REFUSED_RESULT = "Error: {tool} was not called: {problem}."
ONE_WAITING_PROBLEM = (
    "{waiting} is waiting for a person in this response, and one delegation waits at a time; "
    "call {tool} again once it is answered"
)
USED_UP_PROBLEM = (
    "it was already called {count} time(s) in this turn, its limit; answer with what you have"
)


class DelegateRoute(NamedTuple):
    """A compiled delegate edge: ``caller`` calls ``tool_name`` to ask ``expert``."""

    caller: str
    expert: str
    tool_name: str
    description: str
    payload: type[BaseModel] | None = None
    history: HistoryMode = "none"
    approval: bool = False
    max_calls: int | None = None
    timeout: float | None = None

    @property
    def model(self) -> type[BaseModel]:
        """What the tool takes: the payload model, else :class:`DelegateTask`."""
        return self.payload or DelegateTask


@functools.lru_cache(maxsize=1024)
def make_delegate_tool(route: DelegateRoute) -> HandoffTool:
    """The tool ``route.caller`` calls to ask ``route.expert`` (one per distinct route, shared)."""
    return schema_tool(route.tool_name, route.description, route.model)


class Suspension(NamedTuple):
    """A delegation that waits: its frames (outermost first) and the requests it waits for.

    ``beside``: the other delegate calls of the same response that wait too, each alone, in
    call order after this one; ``requests`` then holds every one's requests.
    """

    frames: tuple[DelegationFrame, ...]
    requests: tuple[Content, ...]
    beside: tuple[Suspension, ...] = ()

    @property
    def chains(self) -> tuple[Suspension, ...]:
        """Each delegation that waits, alone: this one, then those beside it."""
        theirs = {str(r.id) for other in self.beside for r in other.requests}
        own = tuple(r for r in self.requests if str(r.id) not in theirs)
        return (Suspension(self.frames, own), *self.beside)

    def with_beside(self, other: Suspension) -> Suspension:
        """This suspension and ``other``'s delegations, waiting side by side."""
        return Suspension(
            self.frames, (*self.requests, *other.requests), (*self.beside, *other.chains)
        )

    def ordered(self, call_ids: Sequence[str]) -> Suspension:
        """The same delegations, in the order of their callers' ``call_ids``."""
        order = {call_id: n for n, call_id in enumerate(call_ids)}
        chains = sorted(self.chains, key=lambda c: order.get(c.frames[0].call_id, len(order)))
        return together(chains)


def together(chains: Sequence[Suspension]) -> Suspension:
    """One suspension of delegations that wait side by side (``chains``: at least one)."""
    first, *rest = chains
    for other in rest:
        first = first.with_beside(other)
    return first


class DueExperts(NamedTuple):
    """A caller's delegate calls that were not carried out where it ran: they are due.

    ``frames``: one per call, in call order, each with its task (not started); ``seconds``: each
    expert's own time limit (``None``: none); ``goes_on``: whether the caller's run goes on once
    they answered (``False``: another call of the response ended its loop, a handoff, a verdict
    or a request, and the answers close the run).
    """

    frames: tuple[DelegationFrame, ...]
    seconds: tuple[float | None, ...]
    goes_on: bool


class Expert(Protocol):
    """An agent as it answers a delegated task (a :class:`~handoff_builder.Participant`)."""

    @property
    def url(self) -> str:
        """The address of a remote expert, for traces (``""``: a local one)."""
        ...

    async def run_delegated(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        delegations: Delegations,
    ) -> AgentResponse:
        """One run on ``messages``: no handoff tools, its own delegates through ``delegations``."""
        ...


@dataclass
class DelegationScope:
    """What delegations need from the host that runs the turn.

    ``inputs(expert, history, end)`` is what an expert sees of the shared conversation's first
    ``end`` messages; ``on_update(expert)`` where a streaming run sends its updates (``None``: not
    streaming); ``used`` counts each delegate's calls in this turn (``caller/tool``);
    ``max_parallel``: how many experts of one response run at once (``None``: all of them);
    ``timeouts``: seconds each delegate's expert may take to answer one call, by
    ``caller/tool`` (none: no limit of its own). ``defer``: the participant's own delegate
    calls are not carried out here but are due (:meth:`Delegations.due_experts`), for a
    driver that runs each expert elsewhere; its experts' own delegations run where they run.
    """

    experts: Mapping[str, Expert]
    inputs: Callable[[str, HistoryMode, int], list[Message]]
    history_length: Callable[[], int]
    on_update: Callable[[str], Callable[[AgentResponseUpdate], Awaitable[None]] | None]
    max_depth: int = DEFAULT_MAX_DELEGATION_DEPTH
    used: dict[str, int] | None = None
    max_parallel: int | None = None
    timeouts: Mapping[str, float] = field(default_factory=dict[str, float])
    defer: bool = False


def delegate_key(caller: str, tool_name: str) -> str:
    """How a delegate's calls are counted for ``max_calls``: by caller and tool."""
    return f"{caller}/{tool_name}"


def task_message(frame: DelegationFrame) -> Message:
    """The expert's task, as the user message it reads (written by the caller)."""
    return Message(role="user", contents=[frame.task], author_name=frame.caller)


def final_text(messages: Sequence[Message], expert: str) -> str:
    """An expert's answer: the text of its last message that has any."""
    for message in reversed(messages):
        if message.role == "assistant" and message.text.strip():
            return message.text
    return NO_ANSWER_RESULT.format(expert=expert)


def failure(expert: str, error: Exception, seconds: float | None) -> tuple[str, DelegationOutcome]:
    """What the caller reads when ``expert`` raised ``error``, and the delegation's outcome.

    Past the delegate's own ``seconds`` (only this expert was stopped) it ``"timed_out"``;
    anything else it raised ``"failed"``.
    """
    if isinstance(error, DeadlinePassedError) and seconds is not None:
        return TIMED_OUT_RESULT.format(expert=expert, seconds=seconds), "timed_out"
    return FAILED_RESULT.format(expert=expert, error=f"{type(error).__name__}: {error}"), "failed"


def failed_delegation(
    frame: DelegationFrame, error: Exception, seconds: float | None
) -> tuple[str, DelegationEvent]:
    """What the caller reads when ``frame``'s expert raised ``error``, and its record."""
    result, outcome = failure(frame.expert, error, seconds)
    return result, delegation_event(frame, result, outcome, frame.messages)


def refused_beside_waiting(frame: DelegationFrame, waiting: str) -> tuple[str, DelegationEvent]:
    """``frame``'s expert would wait too, beside ``waiting``'s: its call is refused, and recorded.

    One delegation waits at a time; its caller may make the call again afterwards.
    """
    problem = ONE_WAITING_PROBLEM.format(waiting=waiting, tool=frame.tool_name)
    result = REFUSED_RESULT.format(tool=frame.tool_name, problem=problem)
    return result, delegation_event(frame, result, "refused", frame.messages)


def delegation_event(
    frame: DelegationFrame,
    result: str,
    outcome: DelegationOutcome,
    messages: Sequence[Message],
) -> DelegationEvent:
    """The record of ``frame``'s delegation, finished with ``result`` (``outcome``)."""
    return DelegationEvent(
        frame.caller, frame.expert, frame.tool_name, frame.call_id, frame.task, result,
        outcome, tuple(messages), frame.depth,
    )  # fmt: skip


def waiting_call(frame: DelegationFrame) -> Content:
    """The delegate call of ``frame``, as the call that waits (to settle it when the turn ends)."""
    return Content.from_function_call(call_id=frame.call_id, name=frame.tool_name)


def settle_waiting(chains: Sequence[Sequence[DelegationFrame]], status: str) -> list[Message]:
    """The results that close the waiting delegate calls when their turn ends without answers.

    ``chains``: each delegation that waits, its frames outermost first.
    """
    calls = [waiting_call(frames[0]) for frames in chains]
    return unanswered(calls, chains[0][0].caller, status)


def settlement(
    requests: Sequence[Content],
    chains: Sequence[Sequence[DelegationFrame]],
    agent: str,
    status: str,
) -> list[Message]:
    """Results for requests a turn ends without: the waiting delegate calls', or each one's."""
    if chains:
        return settle_waiting(chains, status)
    return unanswered(requests, agent, status)


def waiting_apart(
    waiting: Suspension, requests: Sequence[Content], agent: str
) -> tuple[list[Message], list[Content]]:
    """The caller's delegate calls wait with their experts: what settles the rest, what waits.

    The results that settle the caller's other requests, and the experts' requests, which the
    turn waits for.
    """
    held = {chain.frames[0].call_id for chain in waiting.chains}
    others = [r for r in requests if call_id_of(r) not in held]
    text = BESIDE_WAITING_RESULT.format(tool=waiting.frames[0].tool_name)
    settled = unanswered(others, agent, "waiting", text=text) if others else []
    return settled, list(waiting.requests)


class Delegations:
    """The delegations made in one agent run, at ``depth`` (0: a participant's own run).

    ``records`` is shared by every nested level: each finished delegation, innermost first.
    ``suspension`` is set when a delegation of this run waits for answers.
    """

    def __init__(
        self, scope: DelegationScope, depth: int = 0, records: list[DelegationEvent] | None = None
    ) -> None:
        self.scope = scope
        self.depth = depth
        self.records: list[DelegationEvent] = [] if records is None else records
        self.suspension: Suspension | None = None
        self.due: list[tuple[DelegationFrame, float | None]] = []  # with ``scope.defer``
        self.stopped = False  # another call of the response ended the run's tool loop
        if scope.used is None:
            scope.used = {}
        # The calls of this run's response share its slots; an expert's own delegations have
        # theirs (an expert holding a slot never waits for one its delegates need).
        limit = scope.max_parallel
        self._slots = contextlib.nullcontext() if limit is None else asyncio.Semaphore(limit)

    @property
    def allowed(self) -> bool:
        """True when an agent at this depth may delegate (the depth cap is not reached)."""
        return self.depth < self.scope.max_depth

    def middleware(self, delegates: Mapping[str, DelegateRoute]) -> DelegateToolMiddleware:
        """The middleware that carries out this run's delegate calls."""
        return DelegateToolMiddleware(delegates, self)

    async def call(
        self, route: DelegateRoute, call_id: str, arguments: Any, *, approved: bool = False
    ) -> str | None:
        """Carry out one delegate call: its result, or ``None`` when it waits (``suspension``).

        ``approved``: a person already approved this call (it shared a response with a call
        that needed approval), so a delegate with ``approval=True`` does not ask again.
        """
        if isinstance(arguments, BaseModel):
            arguments = arguments.model_dump(mode="json")
        payload, problem = validate_arguments(route.model, arguments)
        task = ""
        if payload is not None:
            task = (
                str(getattr(payload, "task", ""))
                if route.payload is None
                else f"{payload_label(route.payload)}: {payload.model_dump_json()}"
            )
            if not task.strip():
                problem = "the task is empty; say what the expert should do"
        used = self.scope.used if self.scope.used is not None else {}
        count = used.get(delegate_key(route.caller, route.tool_name), 0)
        if problem is None and route.max_calls is not None and count >= route.max_calls:
            problem = USED_UP_PROBLEM.format(count=count)
        asks = route.approval and not approved
        if problem is None and asks and self.suspension is not None and self.depth > 0:
            problem = self._one_waiting(route.tool_name)
        frame = DelegationFrame(
            route.caller, route.expert, route.tool_name, call_id, task, self.depth + 1,
            route.history, self.scope.history_length(), started=not asks,
        )  # fmt: skip
        if problem is not None:
            result = REFUSED_RESULT.format(tool=route.tool_name, problem=problem)
            self._record(frame, result, "refused", ())
            return result
        used[delegate_key(route.caller, route.tool_name)] = count + 1
        frame = replace(frame, messages=(task_message(frame),))
        if asks:
            call = Content.from_function_call(
                call_id=call_id, name=route.tool_name, arguments=payload_json(payload)
            )
            request = Content.from_function_approval_request(
                id=DELEGATE_APPROVAL_ID_PREFIX + call_id, function_call=call
            )
            return self._wait(Suspension((frame,), (request,)), frame)
        if self.scope.defer and self.depth == 0:  # run elsewhere: the call waits for it
            seconds = self.scope.timeouts.get(delegate_key(route.caller, route.tool_name))
            self.due.append((frame, seconds))
            return None
        return await self.run(frame)

    def due_experts(self, calls: Sequence[str], *, goes_on: bool) -> DueExperts | None:
        """The delegate calls of this run that are due (``None``: none).

        In the order of ``calls`` (the response's call ids); ``goes_on``: nothing else of the
        response ended the run.
        """
        if not self.due:
            return None
        order = {call_id: n for n, call_id in enumerate(calls)}
        due = sorted(self.due, key=lambda item: order.get(item[0].call_id, len(order)))
        return DueExperts(
            tuple(frame for frame, _ in due),
            tuple(seconds for _, seconds in due),
            goes_on and not self.stopped and self.suspension is None,
        )

    async def run(self, frame: DelegationFrame) -> str | None:
        """Run (or run again) ``frame``'s expert: its answer, or ``None`` when it waits."""
        participant = self.scope.experts[frame.expert]
        nested = Delegations(self.scope, frame.depth, self.records)
        seconds = self.scope.timeouts.get(delegate_key(frame.caller, frame.tool_name))
        shared = self.scope.inputs(frame.expert, frame.history, frame.history_end)
        with delegation_span(
            frame.tool_name,
            frame.call_id,
            frame.caller,
            frame.expert,
            frame.depth,
            participant.url,
        ) as span:
            try:
                async with self._slots:  # the time limit starts once the expert has a slot
                    response = await within(
                        seconds,
                        participant.run_delegated(
                            [*shared, *frame.messages], self.scope.on_update(frame.expert), nested
                        ),
                    )
            except Exception as error:  # the caller gets the error and carries on
                result, outcome = failure(frame.expert, error, seconds)
                settle_delegation_span(span, outcome, frame.task)
                self._record(frame, result, outcome, frame.messages)
                return result
            delta = list(response.messages)
            for message in delta:
                if message.author_name is None:
                    message.author_name = frame.expert
            dangling = dangling_calls(delta)
            if dangling:
                delta.append(settle(dangling, frame.expert))
            transcript = (*frame.messages, *delta)
            requests = requests_in(delta)
            inner = nested.suspension
            if inner is not None:  # a delegate of the expert waits: the rest of its calls end
                waiting = inner.frames[0].call_id
                others = [r for r in requests if call_id_of(r) != waiting]
                if others:
                    text = BESIDE_WAITING_RESULT.format(tool=inner.frames[0].tool_name)
                    settled = unanswered(others, frame.expert, "waiting", text=text)
                    transcript = (*transcript, *settled)
                settle_delegation_span(span, "waiting", frame.task)
                own = replace(frame, messages=transcript, started=True)
                return self._wait(Suspension((own, *inner.frames), inner.requests), frame)
            if requests:
                settle_delegation_span(span, "waiting", frame.task)
                own = replace(frame, messages=transcript, started=True)
                return self._wait(Suspension((own,), tuple(requests)), frame)
            result = final_text(delta, frame.expert)
            settle_delegation_span(span, "answered", frame.task)
            self._record(frame, result, "answered", transcript)
            return result

    def _wait(self, suspension: Suspension, frame: DelegationFrame) -> str | None:
        """Let ``frame`` wait (``None``).

        agent_framework runs one response's tool calls concurrently: a participant's calls
        that wait all wait, side by side (``Suspension.beside``). Inside an expert, where one
        delegation of a response waits at a time, a later one is refused, and its caller may
        call it again afterwards.
        """
        if self.suspension is None:
            self.suspension = suspension
            return None
        if self.depth == 0:
            self.suspension = self.suspension.with_beside(suspension)
            return None
        result, record = refused_beside_waiting(frame, self.suspension.frames[0].tool_name)
        self.records.append(record)
        return result

    def _one_waiting(self, tool_name: str) -> str:
        waiting = self.suspension.frames[0].tool_name if self.suspension else "another call"
        return ONE_WAITING_PROBLEM.format(waiting=waiting, tool=tool_name)

    def declined(self, route: DelegateRoute, call_id: str, arguments: Any) -> str:
        """A person declined a delegate call before the expert ran: the caller is told."""
        payload, _ = validate_arguments(route.model, arguments)
        task = str(getattr(payload, "task", "")) if route.payload is None else payload_json(payload)
        frame = DelegationFrame(
            route.caller,
            route.expert,
            route.tool_name,
            call_id,
            task,
            self.depth + 1,
            route.history,
            self.scope.history_length(),
            started=False,
        )
        return self.decline(frame)

    def decline(self, frame: DelegationFrame) -> str:
        """A person declined ``frame``'s delegate call (``approval=True``): the caller is told."""
        result = DELEGATE_DECLINED_RESULT.format(tool=frame.tool_name)
        self._record(frame, result, "declined", frame.messages)
        return result

    async def carry_on(self, frames: Sequence[DelegationFrame], answer: str | None) -> str | None:
        """Take the innermost frame's ``answer`` out through the frames above it.

        Each expert above runs again with its delegate call answered. Returns the answer to the
        outermost call, or ``None`` when an expert waits again (``suspension``, with every frame).
        """
        outer = list(frames[:-1])
        current = frames[-1]
        while True:
            if answer is None:
                inner = self.suspension
                assert inner is not None  # noqa: S101 - set by run() whenever it returns None
                self.suspension = Suspension((*outer, *inner.frames), inner.requests)
                return None
            if not outer:
                return answer
            parent = outer.pop()
            self.suspension = None
            messages = (*parent.messages, delegate_result(current.call_id, answer, parent.expert))
            answer = await self.run(replace(parent, messages=messages))
            current = parent

    def _record(
        self,
        frame: DelegationFrame,
        result: str,
        outcome: DelegationOutcome,
        messages: Sequence[Message],
    ) -> None:
        self.records.append(delegation_event(frame, result, outcome, messages))


def payload_json(payload: BaseModel | None) -> str:
    """A validated payload as the call's JSON arguments."""
    return payload.model_dump_json() if payload is not None else "{}"


class DelegateToolMiddleware(FunctionMiddleware):
    """Carries out one run's delegate calls; other tool calls pass through untouched."""

    def __init__(self, delegates: Mapping[str, DelegateRoute], delegations: Delegations) -> None:
        self._delegates = delegates
        self._delegations = delegations

    @override
    async def process(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
    ) -> None:
        """Run the expert and give its answer as the call's result; or leave the call waiting."""
        route = self._delegates.get(context.function.name)
        if route is None:
            try:
                await call_next()
            except MiddlewareTermination:  # a handoff, a verdict: the tool loop ends after it
                self._delegations.stopped = True
                raise
            return
        call_id = str(context.metadata.get("call_id") or "")
        result = await self._delegations.call(route, call_id, context.arguments)
        if result is not None:
            context.result = result
            return
        # The delegation waits for a person: the call stays open, marked as waiting for input
        # (as a call to a declaration-only tool is), and the run ends here.
        waiting = Content.from_function_call(
            call_id=call_id,
            name=route.tool_name,
            arguments=_arguments_text(context.arguments),
        )
        waiting.user_input_request = True
        waiting.id = str(context.metadata.get("function_call_occurrence_id") or call_id)
        raise MiddlewareTermination("the delegation waits for answers", result=waiting)


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, BaseModel):
        return arguments.model_dump_json()
    if isinstance(arguments, Mapping):
        import json

        return json.dumps(dict(arguments), ensure_ascii=False)  # pyright: ignore[reportUnknownArgumentType]
    return str(arguments or "{}")
