"""A hosted conversation as one Temporal workflow; each agent call an activity.

The workflow runs the compiled handoff workflow itself: the host, the manager, the caps and the
counters, deterministic code with no I/O. The host's runner (:class:`_ActivityRunner`) sends each
agent call to an activity of the worker's :class:`AgentActivities`, which runs it on a host
loaded with the conversation and the host's state as they stood (``GroupChatHost.run_here``:
the agent, its vetted handoff calls, its experts) and returns the run; the decision is made back
in the workflow. The workflow is the Temporal backend of the hosted lifecycle (``_lifecycle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agent_framework import Content, Message, Workflow
from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import TimeoutError as TimeoutError_
from typing_extensions import override

from handoff_builder._builder import HandoffWorkflowBuilder
from handoff_builder._engine import AgentCall
from handoff_builder._events import HandoffTurnResult, TurnAbandonedEvent
from handoff_builder._host import GroupChatHost, ReissueRequests, UserTurn
from handoff_builder._lifecycle import (
    KEPT_RECEIPTS,
    answers_by_request,
    finish_interrupted,
    turn_result,
)
from handoff_builder._participant import AgentRun
from handoff_builder._runner import Streams
from handoff_builder._state import HostState, decode_host_state
from handoff_builder._telemetry import QUIET_WHILE
from handoff_builder._timeouts import DeadlinePassedError
from handoff_builder.exceptions import (
    CorruptStateError,
    HandoffBuilderError,
    PayloadTooLargeError,
    PendingRequestsError,
    UnexpectedAnswersError,
)

from ._payloads import (
    AgentCallPayload,
    AgentCallResult,
    Answers,
    Carried,
    ConversationStart,
    RelayedCall,
    TurnOutcome,
    UserInputPayload,
    contents,
    decode_run,
    encode_run,
    encode_turn,
    payload_size,
)
from ._relay import RedisRelay, relaying

WORKFLOW_NAME = "handoff_builder.Conversation"
ACTIVITY_NAME = "handoff_builder.invoke_agent"
RESOLVE_ACTIVITY_NAME = "handoff_builder.resolve_answers"
CARRY_ON_ACTIVITY_NAME = "handoff_builder.carry_on_delegation"

KEY_PREFIX = "key:"  # an Update id that is a client's idempotency key

# ApplicationError types the client turns back into this package's errors.
PENDING = "PendingRequests"
NOTHING_PENDING = "NothingPending"
UNKNOWN_REQUEST = "UnknownRequest"
TURN_FAILED = "TurnFailed"
CONFIGURATION = "Configuration"
PAYLOAD_TOO_LARGE = "PayloadTooLarge"  # details: what, size, limit
BUSY = "Busy"

ABANDON_AFTER_LAST_RETRY = "abandon-after-last-retry"
"""The patch under which a turn whose last retry failed is abandoned in the same Update."""


@dataclass(frozen=True)
class AgentCallOptions:
    """How each agent call runs as an activity.

    ``start_to_close`` bounds one attempt; ``retry`` retries a model error with backoff.
    ``heartbeat`` is how soon a worker that died in the middle of a call is noticed (the call is
    then retried on another worker). A live worker's call is not run again because its machine
    is busy: the worker sends a heartbeat every ``heartbeat / 2`` (records one every
    ``heartbeat / 10``), so the server may take up to half of ``heartbeat`` to record one, and the
    worker's event loop may be stalled for most of it (see ``docs/temporal.md``).

    The turn's own deadlines (``with_timeouts``) still apply around all attempts, as the
    activity's schedule-to-close timeout; not to local activities
    (``TemporalConversationHost(local_activities=True)``), where ``start_to_close`` bounds each
    attempt. Every worker of a task queue must use the same options.
    """

    start_to_close: timedelta = timedelta(seconds=120)
    heartbeat: timedelta = timedelta(seconds=20)
    retry: RetryPolicy = field(default_factory=lambda: _default_retry())


HEARTBEAT_RECORDS = 10  # heartbeats a running call records per heartbeat timeout


def heartbeat_throttle(options: AgentCallOptions) -> timedelta:
    """How often a worker sends a running call's heartbeat to the server, at most."""
    return options.heartbeat / 2


def _default_retry() -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=5,
        non_retryable_error_types=[CONFIGURATION],
    )


@dataclass(frozen=True)
class _Registered:
    """What a conversation workflow needs of its worker: the builder and its calls' options."""

    builder: HandoffWorkflowBuilder
    options: AgentCallOptions


_REGISTERED: dict[str, _Registered] = {}  # by task queue: a workflow takes no constructor input


def _replaying() -> bool:
    """True while this worker replays a workflow's history (on a new worker, after eviction)."""
    return workflow.in_workflow() and workflow.unsafe.is_replaying()


class _NotWhileReplaying(logging.Filter):
    """The workflow's log records and spans were written the first time it ran."""

    @override
    def filter(self, record: logging.LogRecord) -> bool:
        return not _replaying()


_QUIET = _NotWhileReplaying()


def _quiet_while_replaying() -> None:
    """Quiet this package's and agent_framework's loggers while replaying, children included.

    A logger's filter does not apply to its children's records, so each one gets it.
    """
    names = [name for name in logging.root.manager.loggerDict if name.split(".")[0] in _QUIETED]
    for name in {*_QUIETED, *names}:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


_QUIETED = ("handoff_builder", "agent_framework")
_quiet_while_replaying()
QUIET_WHILE.append(_replaying)


def register(task_queue: str, builder: HandoffWorkflowBuilder, options: AgentCallOptions) -> None:
    """Serve ``builder``'s conversations on ``task_queue`` in this worker process.

    Raises:
        HandoffConfigurationError: the builder does not build.
    """
    _host_of(builder.build())  # every problem of the builder now, not in the first turn
    _REGISTERED[task_queue] = _Registered(builder, options)
    _quiet_while_replaying()  # the loggers the build created too


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


# -- the activities -------------------------------------------------------------------------------


class AgentActivities:
    """The agent calls of one builder's conversations, as the activities of a worker.

    The workflow decides; these run the agents, on hosts of this worker built from ``builder``
    and loaded with the conversation as the call gives it. :func:`conversation_worker` makes
    one per worker and registers its methods. With a ``relay``, a call of a streaming turn
    publishes its agent's updates there as they come (see ``_relay``).
    """

    def __init__(self, builder: HandoffWorkflowBuilder, relay: RedisRelay | None = None) -> None:
        self._builder = builder
        self._relay = relay
        self._free: list[GroupChatHost] = []  # built hosts, reused one call at a time

    @activity.defn(name=ACTIVITY_NAME)
    async def invoke_agent(self, call: AgentCallPayload) -> AgentCallResult:
        """Run one agent on the conversation as it stood (its experts too, when it delegates)."""
        run = AgentCall(call.agent, "run", call.no_handoffs)
        return await self._run(call, run, f"the reply of agent {call.agent!r}")

    @activity.defn(name=RESOLVE_ACTIVITY_NAME)
    async def resolve_answers(self, call: AgentCallPayload) -> AgentCallResult:
        """Carry out the answered requests of the waiting agent (approved tools run here)."""
        run = AgentCall(call.agent, "resolve")
        return await self._run(call, run, f"the approved calls of agent {call.agent!r}")

    @activity.defn(name=CARRY_ON_ACTIVITY_NAME)
    async def carry_on_delegation(self, call: AgentCallPayload) -> AgentCallResult:
        """An expert whose delegation waited for answers carries on, and answers its caller."""
        run = AgentCall(call.agent, "carry_on")
        return await self._run(call, run, f"the delegation of agent {call.agent!r}")

    async def _run(self, payload: AgentCallPayload, call: AgentCall, what: str) -> AgentCallResult:
        async with (
            self._replica(payload) as host,
            relaying(self._relay, payload.relay, host, call.agent) as streams,
        ):
            run = await host.run_here(call, streams)
        result = encode_run(run)
        result.attempt = activity.info().attempt
        return _fitting(payload, what, result)

    @contextlib.asynccontextmanager
    async def _replica(self, call: AgentCallPayload) -> AsyncGenerator[GroupChatHost, None]:
        """A host of this worker loaded with the conversation as it stood, heartbeating."""
        host = self._free.pop() if self._free else _host_of(self._builder.build())
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
            scope = f"{call.conversation_id}/{len(call.history)}/{activity.info().activity_type}"
            counts = _TOOL_CALLS.set(({}, scope))
            try:
                if activity.info().is_local:
                    yield host  # a local activity cannot heartbeat: its workflow task lives on
                else:
                    async with _heartbeating():
                        yield host
            finally:
                _TOOL_CALLS.reset(counts)
        finally:
            if host.model_calls is not None:  # recorded here, for span events only: keep none
                host.model_calls.clear()
            self._free.append(host)


_ACTIVITIES = {
    "run": ("invoke", AgentActivities.invoke_agent),
    "resolve": ("resolve", AgentActivities.resolve_answers),
    "carry_on": ("carry_on", AgentActivities.carry_on_delegation),
}
"""The activity of each kind of agent call, with the name its id carries (``{n}:{name}:{agent}``,
as histories of earlier releases recorded it)."""


def _fitting(call: AgentCallPayload, what: str, result: AgentCallResult) -> AgentCallResult:
    """``result``, if it fits in a payload: Temporal refuses a larger one (not retried)."""
    size = payload_size(result)
    if size > call.payload_limit:
        error = PayloadTooLargeError(call.conversation_id, what, size, call.payload_limit)
        raise ApplicationError(
            str(error), what, size, call.payload_limit, type=PAYLOAD_TOO_LARGE,
            non_retryable=True,
        )  # fmt: skip
    return result


_TOOL_CALLS: contextvars.ContextVar[tuple[dict[str, int], str]] = contextvars.ContextVar(
    "tool_calls"
)  # the calls of each tool so far in this agent call, and where in the conversation it is


def tool_call_key(tool: str) -> str:
    """A key for a call of ``tool`` that stays the same when the agent call is retried.

    An agent call is an activity, and an activity runs at least once: a worker that dies in the
    middle is replaced, and the agent runs again, tools included; a turn that failed is run
    again by the next message. Give a tool with a side effect (a payment, an e-mail) this key as
    its idempotency key, and a retry is harmless: it is the conversation, where in it the agent
    call starts (its length then) and the number of this call of ``tool`` within the agent call
    (the first, the second, ...), the same in every attempt and in every retry of the turn. A
    model that orders its calls differently on a retry gets the keys in its new order.

    Raises:
        HandoffBuilderError: not called from a tool of an agent running on Temporal.
    """
    current = _TOOL_CALLS.get(None)
    if current is None or not activity.in_activity():
        raise HandoffBuilderError(
            "tool_call_key() names a call made by an agent running on Temporal; call it from "
            "the tool, while the agent runs in a worker."
        )
    counts, scope = current
    counts[tool] = number = counts.get(tool, 0) + 1
    return f"{scope}/{tool}/{number}"


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncGenerator[None, None]:
    """Heartbeat while the agent runs, so that a dead worker is noticed within the timeout.

    A heartbeat is recorded every tenth of the timeout: a stalled event loop delays the next one
    by its stall, which then still comes in time. The worker sends the latest one to the server
    at most every half of the timeout (``conversation_worker`` sets its throttle).
    """
    timeout = activity.info().heartbeat_timeout
    interval = timeout.total_seconds() / HEARTBEAT_RECORDS if timeout else None

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
        self._receipts: dict[str, dict[str, Any]] = dict(carried.receipts) if carried else {}
        self._failures = carried.failures if carried is not None else 0
        self._last_error = carried.last_error if carried is not None else None
        self._lock = asyncio.Lock()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._calls = 0  # activities scheduled in this run: their ids
        self._checkpoint: Carried | None = None  # the state the last agent call was given
        self._turns = 0
        self._closing = False  # delete(): the run ends once no handler runs
        self._too_large_to_carry = False  # the conversation stays in this run
        self._relay = ""  # the relay stream of the turn running, when it is relayed
        self._relayed: list[RelayedCall] = []  # its agent calls, with the attempts that counted

    def _open(self, carried: Carried | None) -> tuple[Workflow, GroupChatHost]:
        """A compiled workflow with the host loaded from ``carried``.

        The requests it waits for are emitted again before they are answered (``_reissue``).
        """
        self._reissue = carried is not None
        built = self._registered.builder.build()
        host = _host_of(built)
        host.conversation_id = self._conversation_id
        host.runner = _ActivityRunner(self)
        if carried is not None:
            history = [Message.from_dict(item) for item in carried.history]
            host.load(history, _state(carried.host, self._conversation_id))
        return built, host

    @workflow.run
    async def run(self, start: ConversationStart) -> None:
        if start.carried is not None and not self._lock.locked():
            self._arm_idle_timer()  # a new run of a conversation that waits for its next message

        def time_to_continue() -> bool:
            long = self._turns >= start.turns_per_run
            return (long or workflow.info().is_continue_as_new_suggested()) and not (
                self._lock.locked() or self._too_large_to_carry
            )

        while True:
            await workflow.wait_condition(lambda: time_to_continue() or self._closing)
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self._closing:
                return
            if time_to_continue():
                carried = self._carry()
                if carried is not None:
                    workflow.continue_as_new(carried)

    def _arm_idle_timer(self) -> None:
        """The durable idle timer, started when a turn ends (and stopped when one begins).

        Started from the handler itself, so its command comes in the same place on every
        replay, whatever the activations look like (local activities resolve differently).
        """
        self._disarm_idle_timer()
        self._idle_timer = asyncio.get_running_loop().call_later(
            self._start.idle_timeout, self._went_idle
        )

    def _disarm_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _went_idle(self) -> None:
        self._idle_timer = None
        if self._host.speaker is not None and not self._host.turn_open:
            workflow.logger.info(
                "conversation %s was idle for %s s; it starts again at the initial agent",
                self._conversation_id, self._start.idle_timeout,
            )  # fmt: skip
            self._idle = True

    def _carry(self) -> ConversationStart | None:
        """The next run's input; ``None`` when it would not fit in a payload.

        Receipts go first, the oldest first; a conversation too large without them stays in
        this run (it takes no more messages: they would not fit in an agent call either).
        """
        carried = Carried(
            history=[message.to_dict() for message in self._host.history],
            host=self._host.snapshot(),
            idle=self._idle,
            failures=self._failures,
            last_error=self._last_error,
            receipts=self._receipts,
        )
        start = self._start.model_copy(update={"carried": carried})
        size, limit = payload_size(start), self._start.payload_limit
        receipts = carried.receipts  # the carried copy
        if size > limit and receipts:
            for key, receipt in list(receipts.items()):
                size -= payload_size(receipt)
                del receipts[key]
                if size <= limit:
                    break
            size = payload_size(start)
            workflow.logger.warning(
                "conversation %s: %d idempotency receipt(s) are not carried into its next run, "
                "over Temporal's payload limit", self._conversation_id,
                len(self._receipts) - len(receipts),
            )  # fmt: skip
        if size > limit:
            workflow.logger.warning(
                "conversation %s does not continue as new: %s bytes, over Temporal's payload "
                "limit of %s; it takes no more messages", self._conversation_id, size, limit,
            )  # fmt: skip
            self._too_large_to_carry = True
            return None
        return start

    # -- updates and queries --------------------------------------------------------------------

    @workflow.update
    async def send(self, message: UserInputPayload) -> TurnOutcome:
        """Run one user turn; its result, or the requests it waits for."""
        async with self._turn():
            key = _client_key()
            if key in self._receipts:  # a client's retry, in this run or an earlier one
                return TurnOutcome.model_validate(self._receipts[key])
            try:
                recovered = await finish_interrupted(self, self._start.max_turn_retries)
            except PendingRequestsError:
                raise _pending(self._host) from None
            turn = UserTurn(
                [Message.from_dict(item) for item in message.messages],
                return_to_previous=not self._idle,
            )
            self._idle = False
            self._relay, self._relayed = message.relay, []
            try:
                outcome = self._outcome(await self._attempt(turn))
            finally:
                self._relay = ""
            if message.relay:
                outcome.relayed = self._relayed
            if recovered is not None:
                outcome.recovered = encode_turn(recovered)
            return self._receipted(key, outcome)

    @send.validator
    def _check_send(self, message: UserInputPayload) -> None:
        if not message.messages:
            raise ValueError("A turn needs at least one message.")
        self._refuse_if_too_large("the conversation with this message", message)

    @workflow.update
    async def respond(self, answers: Answers) -> TurnOutcome:
        """Answer the requests the turn waits for; the agent that asked carries on."""
        async with self._turn():
            key = _client_key()
            if key in self._receipts:
                return TurnOutcome.model_validate(self._receipts[key])
            host = self._host
            given = {key: Content.from_dict(value) for key, value in answers.answers.items()}
            try:
                responses = answers_by_request(self._conversation_id, given, host.pending_requests)
            except UnexpectedAnswersError as error:  # the caller's mistake: nothing ran
                kind = UNKNOWN_REQUEST if error.waiting else NOTHING_PENDING
                details = (list(error.unknown), list(error.waiting))
                raise ApplicationError(
                    str(error), *details, type=kind, non_retryable=True
                ) from None
            before = Carried(  # a failure goes back to waiting for these answers
                history=[message.to_dict() for message in host.history], host=host.snapshot()
            )
            if self._reissue:  # a workflow compiled anew: its runner knows no requests yet
                await self._workflow.run(ReissueRequests())
                self._reissue = False
            outcome = self._outcome(await self._attempt(responses=responses, checkpoint=before))
            return self._receipted(key, outcome)

    @respond.validator
    def _check_respond(self, answers: Answers) -> None:
        self._refuse_if_too_large("the conversation with these answers", answers)

    @workflow.update
    async def abandon(self, wait: bool) -> dict[str, Any] | None:  # noqa: FBT001 - an Update's argument
        """Give up the open turn: closed without running anything more (``None``: none is open)."""
        async with self._turn():
            host = self._host
            if not host.turn_open:
                return None
            event = TurnAbandonedEvent(
                "on_demand", host.next_agent or host.speaker, self._failures, self._last_error
            )
            result = host.abandon_turn(event)
            self._failures, self._last_error = 0, None
            # the compiled workflow may still wait for the requests: a new one, loaded as it is
            self._workflow, self._host = self._open(
                Carried(history=[m.to_dict() for m in host.history], host=host.snapshot())
            )
            return encode_turn(result)

    @abandon.validator
    def _check_abandon(self, wait: bool) -> None:  # noqa: FBT001 - an Update's argument
        self._refuse_if_busy(wait)

    @workflow.update
    async def close(self, wait: bool) -> None:  # noqa: FBT001 - an Update's argument
        """End this conversation's workflow once no turn runs, forgotten (``delete``).

        Its queries answer as for no conversation from then on, while Temporal deletes it.
        """
        async with self._lock:
            self._disarm_idle_timer()
            self._closing = True
            self._workflow, self._host = self._open(None)
            self._receipts, self._failures, self._last_error = {}, 0, None

    @close.validator
    def _check_close(self, wait: bool) -> None:  # noqa: FBT001 - an Update's argument
        self._refuse_if_busy(wait)

    def _refuse_if_busy(self, wait: bool) -> None:  # noqa: FBT001 - an Update's argument
        if self._lock.locked() and not wait:
            raise ApplicationError(
                f"Conversation {self._conversation_id!r} is busy with a turn.",
                type=BUSY,
                non_retryable=True,
            )

    def _refuse_if_too_large(self, what: str, joining: UserInputPayload | Answers) -> None:
        """Refuse an Update whose input would make the next agent call too large a payload."""
        size = payload_size(self._call(self._host.speaker or "")) + payload_size(joining)
        if size > self._start.payload_limit:
            raise self._too_large(what, size)

    def _too_large(self, what: str, size: int) -> ApplicationError:
        limit = self._start.payload_limit
        error = PayloadTooLargeError(self._conversation_id, what, size, limit)
        return ApplicationError(
            str(error), what, size, limit, type=PAYLOAD_TOO_LARGE, non_retryable=True
        )

    @workflow.query
    def active_agent(self) -> str | None:
        """The agent the conversation is with (:attr:`GroupChatHost.active_agent`)."""
        return self._host.active_agent

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

    def _receipted(self, key: str, outcome: TurnOutcome) -> TurnOutcome:
        """The Update's result, if it fits in a payload; a keyed call's is kept for its retries.

        Temporal deduplicates an Update's id within one run only. A result too large to return
        is an error instead (the turn ran, and is in the conversation).
        """
        size = payload_size(outcome)
        if size > self._start.payload_limit:
            raise self._too_large("the turn's result", size)
        if key:
            self._receipts[key] = outcome.model_dump(mode="json")
            while len(self._receipts) > KEPT_RECEIPTS:
                del self._receipts[next(iter(self._receipts))]
        return outcome

    # -- internals ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncGenerator[None, None]:
        async with self._lock:
            self._disarm_idle_timer()
            try:
                yield
            except ApplicationError:
                raise
            except Exception as error:  # never fail the workflow task: fail this Update
                raise self._turn_failed(error) from error
            finally:
                self._turns += 1
                self._arm_idle_timer()

    async def call_agent(self, call: AgentCall) -> AgentRun:
        """The host's agent call, as an activity (see :class:`_ActivityRunner`)."""
        return decode_run(self._host, call.agent, await self._activity(call))

    async def _activity(self, agent_call: AgentCall) -> AgentCallResult:
        """One activity for the call's agent, within the call's ``seconds``.

        Its id names the agent, so that a replay that would call another agent (a route that
        decides differently) fails with a nondeterminism error instead of mixing them up.
        """
        agent, seconds = agent_call.agent, agent_call.seconds
        name, method = _ACTIVITIES[agent_call.kind]
        call = self._call(agent, no_handoffs=agent_call.no_handoffs)
        if agent_call.kind == "run":  # a failed turn goes on from here (answers since are not)
            self._checkpoint = Carried(history=call.history, host=call.host)
        size, limit = payload_size(call), self._start.payload_limit
        if size > limit:  # Temporal would refuse the command, and the workflow task with it
            raise PayloadTooLargeError(
                self._conversation_id, f"the call of agent {agent!r}", size, limit
            )
        self._calls += 1
        options = self._registered.options
        limit = None if seconds is None else timedelta(seconds=max(seconds, 0.001))
        activity_id = f"{self._calls}:{name}:{agent}"
        try:
            if self._start.local_activities:  # no deadline: see AgentCallOptions
                result = await workflow.execute_local_activity_method(
                    method,
                    call,
                    activity_id=activity_id,
                    start_to_close_timeout=options.start_to_close,
                    retry_policy=options.retry,
                )
            else:
                result = await workflow.execute_activity_method(
                    method,
                    call,
                    activity_id=activity_id,
                    start_to_close_timeout=options.start_to_close,
                    schedule_to_close_timeout=limit,
                    heartbeat_timeout=options.heartbeat,
                    retry_policy=options.retry,
                )
        except ActivityError as error:
            cause = error.cause
            if isinstance(cause, TemporalCancelledError):  # the turn's deadline cancelled it
                raise asyncio.CancelledError from error
            if (
                isinstance(cause, TimeoutError_)
                and limit is not None
                and (
                    cause.type == TimeoutType.SCHEDULE_TO_CLOSE
                    or (
                        cause.type == TimeoutType.START_TO_CLOSE and limit <= options.start_to_close
                    )
                )
            ):  # the turn's deadline, not an attempt's own timeout
                raise DeadlinePassedError(f"no result within {seconds:g} s") from error
            raise
        if call.relay:
            self._relayed.append(RelayedCall(call=activity_id, attempt=result.attempt))
        return result

    def _call(self, agent: str, *, no_handoffs: bool = False) -> AgentCallPayload:
        """A call of ``agent`` on the conversation as it stands, for the activity."""
        return AgentCallPayload(
            conversation_id=self._conversation_id,
            agent=agent,
            no_handoffs=no_handoffs,
            history=[message.to_dict() for message in self._host.history],
            host=self._host.snapshot(),
            payload_limit=self._start.payload_limit,
            relay=self._relay,
        )

    async def _attempt(
        self, *args: Any, checkpoint: Carried | None = None, **kwargs: Any
    ) -> list[Any]:
        """Run the compiled workflow; a failure leaves the turn open for the next message.

        It goes on from ``checkpoint``, or from the state the failed agent call was given.
        """
        self._checkpoint = checkpoint
        try:
            return list(await self._workflow.run(*args, **kwargs))
        except Exception as error:
            raise self._turn_failed(error) from error

    def _turn_failed(self, error: Exception) -> ApplicationError:
        """Count a failed attempt; the Update's error.

        The conversation goes on from the state the failed call was given (the host saves it
        before every agent call, as a store would have it).
        """
        self._failures += 1
        innermost = _innermost(error)
        self._last_error = _described(innermost)
        self._workflow, self._host = self._reopen()  # the compiled workflow stopped mid-run
        too_large = _innermost(error, PayloadTooLargeError)
        if isinstance(too_large, PayloadTooLargeError):  # the workflow's own check
            return self._too_large(too_large.what, too_large.size)
        failure = _innermost(error, ApplicationError)
        if isinstance(failure, ApplicationError) and failure.type == PAYLOAD_TOO_LARGE:
            return failure  # the activity's
        return ApplicationError(
            f"The turn of conversation {self._conversation_id!r} failed "
            f"({type(error).__name__}: {str(innermost) or type(innermost).__name__}); the next "
            "message retries it.",
            type=TURN_FAILED,
            non_retryable=True,
        )

    def _reopen(self) -> tuple[Workflow, GroupChatHost]:
        if self._checkpoint is not None:
            return self._open(self._checkpoint)
        host = self._host
        return self._open(
            Carried(history=[m.to_dict() for m in host.history], host=host.snapshot())
        )

    # -- the lifecycle's backend (a TurnBackend) ------------------------------------------------

    @property
    def conversation_id(self) -> str:
        return self._conversation_id

    @property
    def host(self) -> GroupChatHost:
        return self._host

    @property
    def failures(self) -> int:
        return self._failures

    @property
    def last_error(self) -> str | None:
        return self._last_error

    async def attempt(self, command: object) -> list[Any]:
        """Run ``command``; a failure is counted and the turn goes back to where the call began."""
        events = await self._attempt(command)
        if not self._host.turn_open:
            self._failures, self._last_error = 0, None
        return events

    async def restore(self) -> bool:
        """A failed attempt already went back (``_turn_failed``); whether to give up now.

        Workflows that ran before this release failed the Update instead and gave the turn up
        with the next message: their histories replay that way (a Temporal patch).
        """
        return workflow.patched(ABANDON_AFTER_LAST_RETRY)

    async def give_up(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        self._failures, self._last_error = 0, None
        return self._host.abandon_turn(event)

    def _result(self, events: list[Any]) -> HandoffTurnResult | None:
        try:
            return turn_result(self._conversation_id, self._host, events)
        except PendingRequestsError:
            return None

    def _outcome(self, events: list[Any]) -> TurnOutcome:
        self._failures, self._last_error = 0, None
        result = self._result(events)
        if result is None:
            requests = [request.to_dict() for request in self._host.pending_requests]
            return TurnOutcome(status="waiting", requests=requests)
        return TurnOutcome(status="completed", result=encode_turn(result))


class _ActivityRunner:
    """The conversation host's runner in the workflow: each agent call is an activity.

    The workflow streams nothing itself: a relayed turn's calls carry its relay stream, where
    the worker that runs each one publishes its updates (see ``_relay``); the turn's result
    carries the replies.
    """

    def __init__(self, conversation: ConversationWorkflow) -> None:
        self._conversation = conversation

    async def run(self, call: AgentCall, streams: Streams | None) -> AgentRun:
        del streams
        return await self._conversation.call_agent(call)


def _client_key() -> str:
    """The idempotency key the client gave this Update (``""``: none)."""
    info = workflow.current_update_info()
    if info is None or not info.id.startswith(KEY_PREFIX):
        return ""
    return info.id[len(KEY_PREFIX) :]


def _pending(host: GroupChatHost) -> ApplicationError:
    return ApplicationError(
        "The conversation waits for answers to its requests; answer them with respond().",
        [request.to_dict() for request in host.pending_requests],
        type=PENDING,
        non_retryable=True,
    )


def _state(raw: dict[str, Any], conversation_id: str) -> HostState:
    return decode_host_state(raw, f"Conversation {conversation_id!r}")


def _described(error: BaseException) -> str:
    """``"TypeName: message"``; an activity's failure by the type of what it raised."""
    if isinstance(error, ApplicationError) and error.type:
        return f"{error.type}: {error.message}"
    return f"{type(error).__name__}: {error}"


def _innermost(error: BaseException, kind: type[BaseException] = BaseException) -> BaseException:
    """The innermost cause of ``error`` that is a ``kind`` (``error``: none is).

    An activity's failure says what the agent's call raised.
    """
    found = error
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, kind):
            found = cause
        cause = cause.__cause__
    return found


__all__ = [
    "ACTIVITY_NAME",
    "WORKFLOW_NAME",
    "AgentActivities",
    "AgentCallOptions",
    "ConversationWorkflow",
    "HandoffBuilderError",
    "contents",
    "register",
]
