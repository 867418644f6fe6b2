"""A hosted conversation as one Temporal workflow; each agent call an activity.

The workflow runs the compiled handoff workflow itself: the host, the manager, the caps and the
counters, deterministic code with no I/O. The host's :attr:`~GroupChatHost.invoker` sends each
agent call to the ``invoke_agent`` activity, which runs the agent in a worker on a host loaded
with the conversation and the host's state as they stood, and returns the agent's messages and
its reviewed handoff calls; the decision is made back in the workflow.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agent_framework import AgentResponse, Content, Message, Workflow
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from typing_extensions import override

from handoff_builder._builder import HandoffWorkflowBuilder
from handoff_builder._decision import HandoffCall
from handoff_builder._events import HandoffTurnResult
from handoff_builder._host import GroupChatHost, ReissueRequests, ResumeTurn, UserTurn
from handoff_builder._participant import AgentRun
from handoff_builder._state import HostState, decode_host_state
from handoff_builder._telemetry import QUIET_WHILE
from handoff_builder.exceptions import (
    CorruptStateError,
    HandoffBuilderError,
    HandoffConfigurationError,
    PendingRequestsError,
)

from ._payloads import (
    AgentCall,
    AgentCallResult,
    Answers,
    Carried,
    ConversationStart,
    TurnOutcome,
    UserInput,
    contents,
    decode_run,
    encode_run,
    encode_turn,
)

WORKFLOW_NAME = "handoff_builder.Conversation"
ACTIVITY_NAME = "handoff_builder.invoke_agent"
RESOLVE_ACTIVITY_NAME = "handoff_builder.resolve_answers"

# ApplicationError types the client turns back into this package's errors.
PENDING = "PendingRequests"
NOTHING_PENDING = "NothingPending"
UNKNOWN_REQUEST = "UnknownRequest"
TURN_FAILED = "TurnFailed"
CONFIGURATION = "Configuration"


@dataclass(frozen=True)
class AgentCallOptions:
    """How each agent call runs as an activity.

    ``start_to_close`` bounds one attempt; ``heartbeat`` is how soon a worker that died in the
    middle of a call is noticed (the call is then retried on another worker); ``retry`` retries a
    model error with backoff. The turn's own deadlines (``with_timeouts``) still apply around
    all attempts. Every worker of a task queue must use the same options.

    ``local=True`` runs each call as a *local* activity, in the worker that runs the workflow
    task: no round trip through the server per hop (much faster turns), but a worker that dies
    mid-call is noticed only when its workflow task times out (10 s by default) and ``heartbeat``
    does not apply. See ``docs/temporal.md``.
    """

    start_to_close: timedelta = timedelta(seconds=120)
    heartbeat: timedelta = timedelta(seconds=10)
    retry: RetryPolicy = field(default_factory=lambda: _default_retry())
    local: bool = False


def _default_retry() -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=5,
        non_retryable_error_types=[CONFIGURATION],
    )


@dataclass
class _Registered:
    builder: HandoffWorkflowBuilder
    options: AgentCallOptions
    free: list[GroupChatHost]  # built hosts for the activity, reused one call at a time


_REGISTERED: dict[str, _Registered] = {}


def _replaying() -> bool:
    """True while this worker replays a workflow's history (on a new worker, after eviction)."""
    return workflow.in_workflow() and workflow.unsafe.is_replaying()


class _NotWhileReplaying(logging.Filter):
    """The workflow's log records and spans were written the first time it ran."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not _replaying()


for _name in ("handoff_builder", "agent_framework"):
    logging.getLogger(_name).addFilter(_NotWhileReplaying())
QUIET_WHILE.append(_replaying)


def unsupported(builder: HandoffWorkflowBuilder) -> list[str]:
    """What a builder uses that does not run on Temporal yet."""
    config = builder._config  # pyright: ignore[reportPrivateUsage] - our own builder
    problems: list[str] = []
    if config.delegates:
        problems.append(
            "with_delegate() does not run on Temporal yet: an expert's run cannot be carried "
            "over an activity; host this workflow with ConversationHost."
        )
    if config.reviews:
        problems.append(
            "with_review() does not run on Temporal yet; host this workflow with ConversationHost."
        )
    return problems


def register(task_queue: str, builder: HandoffWorkflowBuilder, options: AgentCallOptions) -> None:
    """Serve ``builder``'s conversations on ``task_queue`` in this worker process.

    Raises:
        HandoffConfigurationError: the builder does not build, or uses what Temporal cannot run.
    """
    problems = unsupported(builder)
    if problems:
        raise HandoffConfigurationError(problems)
    _host_of(builder.build())  # every problem of the builder now, not in the first turn
    _REGISTERED[task_queue] = _Registered(builder, options, [])


def _registered(task_queue: str) -> _Registered:
    registered = _REGISTERED.get(task_queue)
    if registered is None:
        raise ApplicationError(
            f"No handoff workflow is registered for task queue {task_queue!r} in this worker.",
            type=CONFIGURATION,
            non_retryable=True,
        )
    return registered


def _host_of(built: Workflow) -> GroupChatHost:
    host = built.get_start_executor()
    if not isinstance(host, GroupChatHost):  # pragma: no cover - build() always makes one
        raise TypeError("A Temporal conversation needs a workflow built by HandoffWorkflowBuilder.")
    return host


# -- the activity ---------------------------------------------------------------------------------


@activity.defn(name=ACTIVITY_NAME)
async def invoke_agent(call: AgentCall) -> AgentCallResult:
    """Run one agent on the conversation as it stood: its messages and reviewed handoff calls."""
    async with _replica(call) as host:
        return encode_run(await host.invoke(call.agent, closed=call.closed))


@activity.defn(name=RESOLVE_ACTIVITY_NAME)
async def resolve_answers(call: AgentCall) -> AgentCallResult:
    """Carry out the answered requests of the waiting agent (approved tools run here)."""
    async with _replica(call) as host:
        messages, calls = await host.resolve()
    return encode_run(AgentRun(AgentResponse(messages=messages), calls, frozenset()))


@contextlib.asynccontextmanager
async def _replica(call: AgentCall) -> AsyncGenerator[GroupChatHost, None]:
    """A host of this worker loaded with the conversation as it stood, heartbeating."""
    registered = _registered(activity.info().task_queue)
    host = registered.free.pop() if registered.free else _host_of(registered.builder.build())
    try:
        try:
            history = [Message.from_dict(item) for item in call.history]
            host.load(history, _state(call.host, call.conversation_id))
        except (CorruptStateError, ValueError, TypeError, KeyError) as error:
            raise ApplicationError(
                f"The state of conversation {call.conversation_id!r} does not load: {error}",
                type=CONFIGURATION,
                non_retryable=True,
            ) from error
        host.conversation_id = call.conversation_id
        counts = _TOOL_CALLS.set({})
        try:
            if activity.info().is_local:
                yield host  # a local activity cannot heartbeat: its workflow task is kept alive
            else:
                async with _heartbeating():
                    yield host
        finally:
            _TOOL_CALLS.reset(counts)
    finally:
        registered.free.append(host)


_TOOL_CALLS: contextvars.ContextVar[dict[str, int]] = contextvars.ContextVar("tool_calls")


def tool_call_key(tool: str) -> str:
    """A key for a call of ``tool`` that stays the same when the agent call is retried.

    An agent call is an activity, and an activity runs at least once: a worker that dies in the
    middle is replaced, and the agent runs again, tools included. Give a tool with a side effect
    (a payment, an e-mail) this key as its idempotency key, and the retry is harmless: it is the
    conversation, the agent call and the number of this call of ``tool`` within it (the first,
    the second, ...), the same in every attempt.

    Raises:
        HandoffBuilderError: not called from a tool of an agent running on Temporal.
    """
    counts = _TOOL_CALLS.get(None)
    if counts is None or not activity.in_activity():
        raise HandoffBuilderError(
            "tool_call_key() names a call made by an agent running on Temporal; call it from "
            "the tool, while the agent runs in a worker."
        )
    counts[tool] = number = counts.get(tool, 0) + 1
    info = activity.info()
    return f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}/{tool}/{number}"


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncGenerator[None, None]:
    """Heartbeat while the agent runs, so that a dead worker is noticed within the timeout."""
    timeout = activity.info().heartbeat_timeout
    interval = max(0.2, timeout.total_seconds() / 3) if timeout else None

    async def beat() -> None:
        while interval is not None:
            activity.heartbeat()
            await asyncio.sleep(interval)

    task = asyncio.ensure_future(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# -- the workflow ---------------------------------------------------------------------------------


@workflow.defn(name=WORKFLOW_NAME, sandboxed=False)
class ConversationWorkflow:
    """One conversation: its user turns are Updates, each agent call an activity.

    The workflow id is the conversation id, so one conversation runs once however many workers
    there are; the history and the host's state live in the workflow (and in the state it
    carries into a new run every ``turns_per_run`` turns).
    """

    @workflow.init
    def __init__(self, start: ConversationStart) -> None:
        self._start = start
        self._registered = _registered(start.task_queue)
        self._conversation_id = workflow.info().workflow_id
        carried = start.carried
        self._workflow, self._host = self._open(carried)
        self._idle = carried.idle if carried is not None else False
        self._failures = carried.failures if carried is not None else 0
        self._lock = asyncio.Lock()
        self._changes = 0  # turns started and ended: each restarts the idle timer
        self._turns = 0

    def _open(self, carried: Carried | None) -> tuple[Workflow, GroupChatHost]:
        """A compiled workflow with the host loaded from ``carried``.

        The requests it waits for are emitted again before they are answered (``_reissue``).
        """
        self._reissue = carried is not None
        built = self._registered.builder.build()
        host = _host_of(built)
        host.conversation_id = self._conversation_id
        host.invoker = self
        if carried is not None:
            history = [Message.from_dict(item) for item in carried.history]
            host.load(history, _state(carried.host, self._conversation_id))
        return built, host

    @workflow.run
    async def run(self, start: ConversationStart) -> None:
        idle = timedelta(seconds=start.idle_timeout)
        while True:
            seen = self._changes

            def changed(seen: int = seen) -> bool:
                return self._changes != seen

            try:
                await workflow.wait_condition(changed, timeout=idle)
            except asyncio.TimeoutError:  # the durable idle timer
                if self._host.speaker is not None and not self._host.turn_open:
                    workflow.logger.info(
                        "conversation %s was idle for %s; it starts again at the initial agent",
                        self._conversation_id, idle,
                    )  # fmt: skip
                    self._idle = True
                await workflow.wait_condition(changed)
            if self._turns >= start.turns_per_run and not self._lock.locked():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self._lock.locked():
                    workflow.continue_as_new(self._carry())

    def _carry(self) -> ConversationStart:
        carried = Carried(
            history=[message.to_dict() for message in self._host.history],
            host=self._host.snapshot(),
            idle=self._idle,
            failures=self._failures,
        )
        return self._start.model_copy(update={"carried": carried})

    # -- updates and queries --------------------------------------------------------------------

    @workflow.update
    async def send(self, message: UserInput) -> TurnOutcome:
        """Run one user turn; its result, or the requests it waits for."""
        async with self._turn():
            if self._host.pending_requests:
                raise _pending(self._host)
            recovered = await self._finish_interrupted()
            turn = UserTurn(
                [Message.from_dict(item) for item in message.messages],
                return_to_previous=not self._idle,
            )
            self._idle = False
            outcome = self._outcome(await self._attempt(turn))
            if recovered is not None:
                outcome.recovered = encode_turn(recovered)
            return outcome

    @send.validator
    def _check_send(self, message: UserInput) -> None:
        if not message.messages:
            raise ValueError("A turn needs at least one message.")

    @workflow.update
    async def respond(self, answers: Answers) -> TurnOutcome:
        """Answer the requests the turn waits for; the agent that asked carries on."""
        async with self._turn():
            host = self._host
            if not host.pending_requests:
                raise ApplicationError(
                    f"Conversation {self._conversation_id!r} waits for no answers; use send().",
                    type=NOTHING_PENDING,
                    non_retryable=True,
                )
            responses = _by_request_id(answers.answers, host.pending_requests)
            waiting = {str(request.id) for request in host.pending_requests}
            unknown = sorted(set(responses) - waiting)
            if unknown:
                raise ApplicationError(
                    f"Conversation {self._conversation_id!r} waits for no request with id "
                    f"{', '.join(map(repr, unknown))}; it waits for {sorted(waiting)}.",
                    type=UNKNOWN_REQUEST,
                    non_retryable=True,
                )
            if self._reissue:  # a workflow compiled anew: its runner knows no requests yet
                await self._workflow.run(ReissueRequests())
                self._reissue = False
            return self._outcome(await self._attempt(responses=responses))

    @workflow.query
    def active_agent(self) -> str | None:
        """The agent that ran last."""
        return self._host.speaker

    @workflow.query
    def idle(self) -> bool:
        """True once the idle timer fired: the next message starts at the initial agent."""
        return self._idle

    @workflow.query
    def pending(self) -> list[dict[str, Any]]:
        """The requests the open turn waits for (``Content.to_dict()``)."""
        return [request.to_dict() for request in self._host.pending_requests]

    @workflow.query
    def history(self) -> list[dict[str, Any]]:
        """The conversation, every message (``Message.to_dict()``)."""
        return [message.to_dict() for message in self._host.history]

    # -- internals ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncGenerator[None, None]:
        async with self._lock:
            self._changes += 1
            try:
                yield
            finally:
                self._changes += 1
                self._turns += 1

    async def invoke(self, name: str, closed: bool) -> AgentRun:  # noqa: FBT001 - AgentInvoker
        """The host's agent call, as an activity."""
        return decode_run(self._host, name, await self._activity(invoke_agent, name, closed=closed))

    async def resolve(self) -> tuple[list[Message], tuple[HandoffCall, ...]]:
        """The host's approved calls carried out, as an activity."""
        agent = str(self._host.pending_agent)
        run = decode_run(self._host, agent, await self._activity(resolve_answers, agent))
        return list(run.response.messages), run.calls

    async def _activity(self, kind: Any, agent: str, *, closed: bool = False) -> AgentCallResult:
        host = self._host
        call = AgentCall(
            conversation_id=self._conversation_id,
            agent=agent,
            closed=closed,
            history=[message.to_dict() for message in host.history],
            host=host.snapshot(),
        )
        options = self._registered.options
        if options.local:
            return await workflow.execute_local_activity(
                kind,
                call,
                start_to_close_timeout=options.start_to_close,
                retry_policy=options.retry,
            )
        return await workflow.execute_activity(
            kind,
            call,
            start_to_close_timeout=options.start_to_close,
            heartbeat_timeout=options.heartbeat,
            retry_policy=options.retry,
        )

    async def _attempt(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Run the compiled workflow; a failure leaves the turn open for the next message."""
        try:
            return list(await self._workflow.run(*args, **kwargs))
        except Exception as error:
            self._failures += 1
            # The compiled workflow stopped mid-run: go on from the host's state as it stands.
            self._workflow, self._host = self._reopen()
            raise ApplicationError(
                f"The turn of conversation {self._conversation_id!r} failed "
                f"({type(error).__name__}: {_cause(error)}); the next message retries it.",
                type=TURN_FAILED,
                non_retryable=True,
            ) from error

    def _reopen(self) -> tuple[Workflow, GroupChatHost]:
        host = self._host
        return self._open(
            Carried(history=[m.to_dict() for m in host.history], host=host.snapshot())
        )

    async def _finish_interrupted(self) -> HandoffTurnResult | None:
        """A turn an earlier failure left open: retried, or given up past the retries."""
        host = self._host
        if not host.turn_open or host.next_agent is None:
            return None
        if self._failures <= self._start.max_turn_retries:
            result = self._result(await self._attempt(ResumeTurn()))
            self._failures = 0
            return result
        from handoff_builder._events import TurnAbandonedEvent

        event = TurnAbandonedEvent("failed", host.next_agent, self._failures, None)
        self._failures = 0
        return host.abandon_turn(event)

    def _result(self, events: list[Any]) -> HandoffTurnResult | None:
        from handoff_builder._hosting import _turn_result  # pyright: ignore[reportPrivateUsage]

        try:
            return _turn_result(self._conversation_id, self._host, events)
        except PendingRequestsError:
            return None

    def _outcome(self, events: list[Any]) -> TurnOutcome:
        self._failures = 0
        result = self._result(events)
        if result is None:
            requests = [request.to_dict() for request in self._host.pending_requests]
            return TurnOutcome(status="waiting", requests=requests)
        return TurnOutcome(status="completed", result=encode_turn(result))


def _pending(host: GroupChatHost) -> ApplicationError:
    return ApplicationError(
        "The conversation waits for answers to its requests; answer them with respond().",
        [request.to_dict() for request in host.pending_requests],
        type=PENDING,
        non_retryable=True,
    )


def _state(raw: dict[str, Any], conversation_id: str) -> HostState:
    return decode_host_state(raw, f"Conversation {conversation_id!r}")


def _by_request_id(
    answers: Mapping[str, dict[str, Any]], pending: list[Content]
) -> dict[str, Content]:
    from handoff_builder._hosting import _by_request_id as by_id  # pyright: ignore[reportPrivateUsage]

    return by_id({key: Content.from_dict(value) for key, value in answers.items()}, pending)


def _cause(error: BaseException) -> str:
    """The innermost message: an activity's failure says what the agent's call raised."""
    while error.__cause__ is not None:
        error = error.__cause__
    return str(error) or type(error).__name__


__all__ = [
    "ACTIVITY_NAME",
    "WORKFLOW_NAME",
    "AgentCallOptions",
    "ConversationWorkflow",
    "HandoffBuilderError",
    "contents",
    "invoke_agent",
    "register",
]
