"""A hosted conversation as one Temporal workflow; each agent call an activity.

The workflow runs the compiled handoff workflow itself: the host, the manager, the caps and the
counters, deterministic code with no I/O. The host's runner (:class:`_ActivityRunner`) sends each
agent call to an activity of the worker's ``AgentActivities`` (``_activities``), and the decision
is made back in the workflow. The workflow is the Temporal backend of the hosted lifecycle
(``_lifecycle``): its Updates are the lifecycle's calls, its queries read the host.

A workflow takes no constructor input but its start's, so it finds its builder by task queue:
:func:`register` (``conversation_worker`` calls it) records the builder of a queue in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from agent_framework import AgentResponse, Content, Message, Workflow
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import CancelledError as TemporalCancelledError
from temporalio.exceptions import TimeoutError as TimeoutError_
from typing_extensions import override

from handoff_builder._builder import HandoffWorkflowBuilder
from handoff_builder._calls import delegate_result
from handoff_builder._delegation import DueExperts, failed_delegation
from handoff_builder._engine import AgentCall
from handoff_builder._events import HandoffTurnResult, TurnAbandonedEvent
from handoff_builder._fanout import goes_on, joined, with_answers
from handoff_builder._host import GroupChatHost, ReissueRequests, UserTurn
from handoff_builder._lifecycle import (
    KEPT_RECEIPTS,
    answers_by_request,
    finish_interrupted,
    turn_result,
)
from handoff_builder._participant import AgentRun
from handoff_builder._remote_input import message_answers
from handoff_builder._runner import Streams
from handoff_builder._state import DelegationFrame
from handoff_builder._telemetry import QUIET_WHILE
from handoff_builder._timeouts import DeadlinePassedError
from handoff_builder.exceptions import (
    HandoffBuilderError,
    PayloadTooLargeError,
    PendingRequestsError,
    UnexpectedAnswersError,
)

from ._activities import ACTIVITY_OF_CALL, AgentActivities, AgentCallOptions, host_of
from ._chain import (
    HISTORY_BY_REFERENCE,
    READ_BACK_FROM_THE_END,
    HistoryChain,
    HistoryPage,
    HistoryReference,
    LoggedHistory,
    LoggedPart,
    joining_tail,
)
from ._failures import (
    busy,
    described,
    innermost,
    misconfigured,
    pending,
    reading_back,
    too_large,
    turn_failed,
    unexpected,
)
from ._payloads import (
    KEY_PREFIX,
    TURN_ALLOWANCE,
    AgentCallPayload,
    AgentCallResult,
    Answers,
    Carried,
    ConversationStart,
    RelayedCall,
    TurnOutcome,
    UserInputPayload,
    carried,
    decode_run,
    encode_events,
    encode_frame,
    encode_run,
    encode_turn,
    load,
    payload_size,
)

WORKFLOW_NAME = "handoff_builder.Conversation"

CARRY_AFTER_BYTES = 4 * 1024 * 1024
"""How much a run of a conversation read back from the message log adds to its event history
before it continues as new when Temporal suggests it: the history read back counts once."""

CARRY_AFTER_EVENTS = 10_000
"""Or once it added this many events."""

READ_BACK_RETRY_SECONDS = 1.0
"""The first wait before a run reads its history back again after a failure (doubled each time,
up to a minute)."""

ABANDON_AFTER_LAST_RETRY = "abandon-after-last-retry"
"""The patch under which a turn whose last retry failed is abandoned in the same Update."""

EXPERTS_APART = "experts-apart"
"""The patch under which the experts of a caller's response run as activities of their own
(before it, inside the caller's activity)."""

NEXT_MESSAGE_ANSWERS = "next-message-answers"
"""The patch under which a message answers the remote agent's question the turn waits for
alone (before it, the message was refused: the turn waited)."""

EXPERT_GRACE = 1.0
"""Seconds an expert's activity has past the expert's own time limit: the worker stops the
expert at its limit and returns the call's tool error; the activity's timeout is the backstop."""


@dataclass(frozen=True)
class _Registered:
    """What a conversation workflow needs of its worker: the builder and its calls' options.

    ``by_reference``: the workers share a message log, so agent calls carry a reference to the
    history instead of the history (``_chain``).
    """

    builder: HandoffWorkflowBuilder
    options: AgentCallOptions
    by_reference: bool = False


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


def register(
    task_queue: str,
    builder: HandoffWorkflowBuilder,
    options: AgentCallOptions,
    *,
    by_reference: bool = False,
) -> None:
    """Serve ``builder``'s conversations on ``task_queue`` in this worker process.

    ``by_reference``: the workers of the queue share a message log (see ``_chain``).

    Raises:
        HandoffConfigurationError: the builder does not build.
    """
    host_of(builder.build())  # every problem of the builder now, not in the first turn
    _REGISTERED[task_queue] = _Registered(builder, options, by_reference)
    _quiet_while_replaying()  # the loggers the build created too


def _registered(task_queue: str) -> _Registered:
    registered = _REGISTERED.get(task_queue)
    if registered is None:
        raise misconfigured(
            f"No handoff workflow is registered for task queue {task_queue!r} in this worker."
        )
    return registered


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
        self._runner = _ActivityRunner(start, self._registered.options, self._conversation_id)
        was = start.carried
        if self._registered.by_reference and workflow.patched(HISTORY_BY_REFERENCE):
            self._runner.chain = HistoryChain(was.logged if was is not None else "")
        self._reading = was if was is not None and was.by_reference else None
        self._read_at: tuple[int, int] | None = None  # the event history's size and length then
        self._read_error: str | None = None  # why the last read-back failed
        self._workflow, self._host = self._open(None if self._reading is not None else was)
        self._idle = was.idle if was is not None else False
        self._receipts: dict[str, dict[str, Any]] = dict(was.receipts) if was else {}
        self._failures = was.failures if was is not None else 0
        self._last_error = was.last_error if was is not None else None
        self._lock = asyncio.Lock()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._turns = 0
        self._closing = False  # delete(): the run ends once no handler runs
        self._too_large_to_carry = False  # the conversation stays in this run

    def _open(self, was: Carried | None) -> tuple[Workflow, GroupChatHost]:
        """A compiled workflow with the host loaded from ``was``, the runner's host.

        The requests it waits for are emitted again before they are answered (``_reissue``).
        """
        self._reissue = was is not None
        built = self._registered.builder.build()
        host = host_of(built)
        host.conversation_id = self._conversation_id
        host.runner = self._runner
        host.kept_events.keep()  # they travel with the agent calls and the turn's outcome
        if was is not None:
            load(host, was.history, was.host, self._conversation_id)
        self._runner.host = host
        return built, host

    @workflow.run
    async def run(self, start: ConversationStart) -> None:
        if self._reading is not None:
            await self._read_back(self._reading)
        if start.carried is not None and not self._lock.locked():
            self._arm_idle_timer()  # a new run of a conversation that waits for its next message

        def time_to_continue() -> bool:
            long = self._turns >= start.turns_per_run
            return (long or self._suggested()) and not (
                self._lock.locked() or self._too_large_to_carry
            )

        while True:
            await workflow.wait_condition(lambda: time_to_continue() or self._closing)
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self._closing:
                return
            if time_to_continue():
                state = carried(
                    self._host, idle=self._idle, failures=self._failures,
                    last_error=self._last_error, receipts=self._receipts,
                    logged=self._runner.logged_part(),
                )  # fmt: skip
                following = _next_run(self._start, state, self._conversation_id)
                self._too_large_to_carry = following is None
                if following is not None:
                    workflow.continue_as_new(following)

    def _suggested(self) -> bool:
        """Whether Temporal suggests continuing as new, and it is time to.

        A run that read its history back waits until it added :data:`CARRY_AFTER_BYTES` itself,
        so that it does not read it back again at once.
        """
        info = workflow.info()
        if not info.is_continue_as_new_suggested():
            return False
        if not self._read_at:
            return True
        size, length = self._read_at
        return (
            info.get_current_history_size() - size >= CARRY_AFTER_BYTES
            or info.get_current_history_length() - length >= CARRY_AFTER_EVENTS
        )

    async def _read_back(self, was: Carried) -> None:
        """The history of a conversation carried by reference, whole again.

        The part the log held is read back from it; the messages after it came with the
        reference.
        """
        delay = READ_BACK_RETRY_SECONDS
        while True:  # the conversation is only in this run's input and the log: never give up
            try:
                messages = await self._runner.read(was.logged, was.length)
                break
            except ActivityError as error:
                self._read_error = described(innermost(error))
                workflow.logger.warning(
                    "conversation %s: its history could not be read back from the message log "
                    "(%s); trying again in %s s", self._conversation_id, self._read_error, delay,
                )  # fmt: skip
            await workflow.sleep(delay)
            delay = min(delay * 2, READ_BACK_RETRY_SECONDS * 60)
        whole = was.model_copy(update={"history": [*messages, *was.history], "length": 0})
        self._workflow, self._host = self._open(whole)
        self._reading, self._read_error = None, None
        info = workflow.info()
        self._read_at = (info.get_current_history_size(), info.get_current_history_length())

    async def _read(self) -> None:
        """Wait until the history of a conversation carried by reference was read back.

        Raises:
            ApplicationError: reading it back failed (it is tried again): the caller's turn
                fails, and the next message is taken once it is read.
        """
        await workflow.wait_condition(lambda: self._reading is None or self._read_error is not None)
        if self._reading is not None:
            raise turn_failed(
                self._conversation_id,
                HandoffBuilderError(
                    "its history could not be read back from the workers' message log "
                    f"({self._read_error}); it is tried again"
                ),
                self._start.payload_limit,
            )

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

    # -- updates and queries --------------------------------------------------------------------

    @workflow.update
    async def send(self, message: UserInputPayload) -> TurnOutcome:
        """Run one user turn; its result, or the requests it waits for.

        When the turn waits for a remote agent's question alone, the message is its answer
        (``message_answers``, as for ``ConversationHost``): the waiting turn goes on.
        """
        async with self._turn():
            key = _client_key()
            if key in self._receipts:  # a client's retry, in this run or an earlier one
                return TurnOutcome.model_validate(self._receipts[key])
            messages = [Message.from_dict(item) for item in message.messages]
            answers = message_answers(self._host.pending_requests, messages)
            if answers is not None and workflow.patched(NEXT_MESSAGE_ANSWERS):
                with self._runner.relaying(message.relay) as relayed:
                    outcome = await self._answered(answers)
                if message.relay:
                    outcome.relayed = relayed
                return self._receipted(key, outcome)
            try:
                recovered = await finish_interrupted(self, self._start.max_turn_retries)
            except PendingRequestsError:
                raise pending(self._host) from None
            turn = UserTurn(messages, return_to_previous=not self._idle)
            self._idle = False
            with self._runner.relaying(message.relay) as relayed:
                outcome = self._outcome(await self._attempt(turn))
            if message.relay:
                outcome.relayed = relayed
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
                raise unexpected(error) from None
            return self._receipted(key, await self._answered(responses))

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
            self._workflow, self._host = self._open(carried(host))
            return encode_turn(result)

    @abandon.validator
    def _check_abandon(self, wait: bool) -> None:  # noqa: FBT001 - an Update's argument
        self._refuse_if_busy(wait)

    @workflow.update
    async def close(self, wait: bool) -> None:  # noqa: FBT001 - an Update's argument
        """End this conversation's workflow once no turn runs, forgotten (``delete``).

        Its queries answer as for no conversation from then on, while Temporal deletes it.
        """
        await self._read()
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
            raise busy(self._conversation_id)

    def _refuse_if_too_large(self, what: str, joining: UserInputPayload | Answers) -> None:
        """Refuse an Update whose input would make the next agent call too large a payload.

        The call is the conversation as it stands, the input and what the turn's state adds
        (``TURN_ALLOWANCE``): an input that passes here fits the call it starts.
        """
        call = self._runner.payload(self._host.speaker or "")
        size = payload_size(call) + self._joining_size(joining) + TURN_ALLOWANCE
        limit = self._start.payload_limit
        if size > limit:
            raise too_large(self._conversation_id, what, size, limit)

    def _joining_size(self, joining: UserInputPayload | Answers) -> int:
        """The bytes ``joining`` adds to the next agent call.

        By reference, its messages join the call's tail, each with the digests that chain it
        (some 150 bytes a message: a list of many short messages grows by half and more).
        """
        if self._runner.chain is None or not isinstance(joining, UserInputPayload):
            return payload_size(joining)
        return payload_size(joining_tail(len(self._host.history), joining.messages))

    @workflow.query
    def active_agent(self) -> str | None:
        """The agent the conversation is with (:attr:`GroupChatHost.active_agent`)."""
        return self._loaded().active_agent

    @workflow.query
    def idle(self) -> bool:
        """True once the idle timer fired: the next message starts at the initial agent."""
        return self._idle

    @workflow.query
    def pending(self) -> list[dict[str, Any]]:
        """The requests the open turn waits for (``Content.to_dict()``)."""
        return [request.to_dict() for request in self._loaded().pending_requests]

    @workflow.query
    def history(self) -> list[dict[str, Any]]:
        """The conversation, every message (``Message.to_dict()``)."""
        return [message.to_dict() for message in self._loaded().history]

    @workflow.query
    def logged_history(self) -> dict[str, Any]:
        """The conversation as the part the workers' message log holds, and the messages after.

        A :class:`LoggedPart` (with no log, every message is after it).
        """
        history = self._loaded().history
        head, length = self._runner.logged_part()
        after = [message.to_dict() for message in history[length:]]
        return LoggedPart(length=length, head=head, after=after).model_dump(mode="json")

    def _loaded(self) -> GroupChatHost:
        """The host, once its history is read back (a query meanwhile fails: asked again)."""
        if self._reading is not None:
            raise reading_back()
        return self._host

    def _receipted(self, key: str, outcome: TurnOutcome) -> TurnOutcome:
        """The Update's result, if it fits in a payload; a keyed call's is kept for its retries.

        Temporal deduplicates an Update's id within one run only. A result too large to return
        is an error instead (the turn ran, and is in the conversation).
        """
        size, limit = payload_size(outcome), self._start.payload_limit
        if size > limit:
            raise too_large(self._conversation_id, "the turn's result", size, limit)
        if key:
            self._receipts = _kept(self._receipts, key, outcome)
        return outcome

    # -- internals ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncGenerator[None, None]:
        await self._read()
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

    async def _answered(self, responses: dict[str, Content]) -> TurnOutcome:
        """The waiting turn carried on with ``responses`` (by request id): what it came to.

        A failure goes back to waiting for these answers.
        """
        before = carried(self._host)
        if self._reissue:  # a workflow compiled anew: its runner knows no requests yet
            await self._workflow.run(ReissueRequests())
            self._reissue = False
        return self._outcome(await self._attempt(responses=responses, checkpoint=before))

    async def _attempt(
        self, *args: Any, checkpoint: Carried | None = None, **kwargs: Any
    ) -> list[Any]:
        """Run the compiled workflow; a failure leaves the turn open for the next message.

        It goes on from ``checkpoint``, or from the state the failed agent call was given.
        """
        self._runner.checkpoint = checkpoint
        self._runner.forget_events()
        try:
            return list(await self._workflow.run(*args, **kwargs))
        except Exception as error:
            raise self._turn_failed(error) from error

    def _turn_failed(self, error: Exception) -> ApplicationError:
        """Count a failed attempt; the Update's error (:func:`turn_failed`).

        The conversation goes on from the state the failed call was given (the host saves it
        before every agent call, as a store would have it).
        """
        self._failures += 1
        self._last_error = described(innermost(error))
        was = self._runner.checkpoint
        if was is None:
            was = carried(self._host)
        self._workflow, self._host = self._open(was)  # the compiled workflow stopped mid-run
        return turn_failed(self._conversation_id, error, self._start.payload_limit)

    def _outcome(self, events: list[Any]) -> TurnOutcome:
        self._failures, self._last_error = 0, None
        outcome = _outcome_of(self._conversation_id, self._host, events)
        outcome.events = self._runner.turn_events()
        return outcome

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


class _ActivityRunner:
    """The conversation host's runner in the workflow: each agent call is an activity.

    One for the workflow's run, whichever compiled workflow its ``host`` is now: it numbers the
    activities (their ids), keeps the state the last agent call was given (``checkpoint``:
    where a failed turn goes on from) and the calls of a relayed turn. The workflow streams
    nothing itself: a relayed turn's calls carry its relay stream, where the worker that runs
    each one publishes its updates (see ``_relay``); the turn's result carries the replies.
    """

    host: GroupChatHost  # the host whose calls these are (set as the workflow opens one)

    def __init__(
        self, start: ConversationStart, options: AgentCallOptions, conversation_id: str
    ) -> None:
        self._start = start
        self._options = options
        self._conversation_id = conversation_id
        self._calls = 0  # activities scheduled in this run: their ids
        self.checkpoint: Carried | None = None  # the state the last agent call was given
        self._relay = ""  # the relay stream of the turn running, when it is relayed
        self._relayed: list[RelayedCall] = []  # its agent calls, with the attempts that counted
        self.chain: HistoryChain | None = None  # calls carry a reference to the history
        self.events: list[dict[str, Any]] = []  # the turn's events that travel, so far
        self.events_handoffs = 0  # the turn's handoffs before the events kept next

    async def run(self, call: AgentCall, streams: Streams | None) -> AgentRun:
        del streams
        if call.kind != "run" or not workflow.patched(EXPERTS_APART):
            return decode_run(self.host, call.agent, await self._activity(call))
        return await self._fan_out(call)

    async def _fan_out(self, call: AgentCall) -> AgentRun:
        """``call``'s run, each expert it asks an activity of its own (see ``_fanout``).

        The caller's activity returns the experts of a response as due; they run at once (at
        most ``max_parallel_delegations`` at a time), and the caller goes on in an activity
        that carries its run so far. Each finished activity is in the workflow's history: after
        a crash, or a retry of one of them, the others are not run again. ``call.seconds``
        bounds them all.
        """
        end = None if call.seconds is None else workflow.time() + call.seconds
        result = await self._activity(call, experts_apart=True)
        run = decode_run(self.host, call.agent, result)
        while run.due is not None:
            asked = await self._ask_all(call.agent, run.due, end)
            answered = with_answers(run, asked)
            if not goes_on(answered, run):
                return answered
            more = await self._activity(
                call, experts_apart=True, so_far=encode_run(answered), seconds=_left(end)
            )
            run = joined(answered, decode_run(self.host, call.agent, more))
        return run

    async def _ask_all(self, caller: str, due: DueExperts, end: float | None) -> list[AgentRun]:
        """Ask every due expert, each in an activity; their runs, in call order.

        A turn's deadline that passes (or a cancellation) stops those still running.
        """
        limit = self.host.settings.max_parallel_delegations
        slots = asyncio.Semaphore(limit) if limit is not None else contextlib.nullcontext()

        async def ask(frame: DelegationFrame, seconds: float | None) -> AgentRun:
            async with slots:  # its own time limit starts once it has a slot
                return await self._ask(caller, frame, seconds, end)

        tasks = [
            asyncio.ensure_future(ask(frame, seconds))
            for frame, seconds in zip(due.frames, due.seconds, strict=True)
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def _ask(
        self, caller: str, frame: DelegationFrame, seconds: float | None, end: float | None
    ) -> AgentRun:
        """One due expert's run, from its activity.

        An expert past its own ``seconds``, or whose activity failed after its retries, is
        its call's tool error (``timed_out``, ``failed``), as in one process; the turn's
        deadline passing is the whole call's (``DeadlinePassedError``).
        """
        left = _left(end)
        own = seconds is not None and (left is None or seconds < left)
        limit = min(seconds + EXPERT_GRACE, left or math.inf) if own and seconds else left
        call = self.payload(caller)
        call.frame = encode_frame(frame)
        call.events = self.turn_events()
        try:
            result = await self._execute(
                AgentActivities.ask_expert, f"ask:{frame.expert}", call, limit
            )
        except DeadlinePassedError as error:
            if not own:
                raise
            return _failed(frame, error, seconds)
        except ActivityError as error:
            return _failed(frame, innermost(error), seconds)
        return decode_run(self.host, caller, result)

    @contextlib.contextmanager
    def relaying(self, relay: str) -> Generator[list[RelayedCall], None, None]:
        """A turn relayed on ``relay`` (``""``: not relayed): its calls, as they ran."""
        self._relay, self._relayed = relay, []
        try:
            yield self._relayed
        finally:
            self._relay = ""

    async def read(self, head: str, length: int) -> list[dict[str, Any]]:
        """The ``length`` messages of the history ending at ``head``.

        Read in pages of half a payload, each an activity, from the last page back (each
        page names the history before it); runs that began earlier read from the first on.
        """
        budget = self._start.payload_limit // 2
        if not workflow.patched(READ_BACK_FROM_THE_END):
            return await self._read_from_the_start(head, length, budget)
        pages: list[list[dict[str, Any]]] = []
        while length > 0:
            page = await self._read_page(
                HistoryReference(length=length, head=head, tail=[]), budget, from_end=True
            )
            pages.append(page.messages)
            head, length = page.previous, page.start
        return [message for page in reversed(pages) for message in page]

    async def _read_from_the_start(
        self, head: str, length: int, budget: int
    ) -> list[dict[str, Any]]:
        reference = HistoryReference(length=length, head=head, tail=[])
        messages: list[dict[str, Any]] = []
        while len(messages) < length:
            page = await self._read_page(reference, budget, start=len(messages))
            messages.extend(page.messages)
        return messages

    async def _read_page(
        self, reference: HistoryReference, budget: int, *, start: int = 0, from_end: bool = False
    ) -> HistoryPage:
        self._calls += 1
        return await workflow.execute_activity_method(
            AgentActivities.read_history,
            LoggedHistory(
                conversation_id=self._conversation_id,
                reference=reference,
                start=start,
                budget=budget,
                from_end=from_end,
            ),
            activity_id=f"{self._calls}:read",
            start_to_close_timeout=self._options.start_to_close,
            retry_policy=self._options.retry,
        )

    def turn_events(self) -> list[dict[str, Any]]:
        """The turn's events that travel (``encode_events``), all of them."""
        new, self.events_handoffs = encode_events(
            self.host.kept_events.take(), self.events_handoffs
        )
        self.events += new
        return list(self.events)

    def forget_events(self) -> None:
        """A new run of the compiled workflow: its turn's events so far are not known yet."""
        self.host.kept_events.take()
        turn = self.host.state().turn
        self.events, self.events_handoffs = [], len(turn.handoffs) if turn is not None else 0

    @property
    def logged(self) -> str:
        """The digest of the latest history the message log holds (``""``: none, or no log)."""
        return self.chain.last_logged if self.chain is not None else ""

    def logged_part(self) -> tuple[str, int]:
        """How much of the history the message log holds: its digest and its length.

        ``("", 0)``: none, or no log.
        """
        if self.chain is None:
            return "", 0
        return self.chain.logged_part(self.host.history)

    def payload(self, agent: str, *, no_handoffs: bool = False) -> AgentCallPayload:
        """A call of ``agent`` on the conversation as it stands, for the activity.

        With a message log, the call carries a reference to the history (and its tail).
        """
        history = self.host.history
        reference = self.chain.reference(history) if self.chain is not None else None
        return AgentCallPayload(
            conversation_id=self._conversation_id,
            agent=agent,
            no_handoffs=no_handoffs,
            history=[] if reference is not None else [m.to_dict() for m in history],
            host=self.host.snapshot(),
            payload_limit=self._start.payload_limit,
            relay=self._relay,
            reference=reference,
        )

    async def _activity(
        self,
        agent_call: AgentCall,
        *,
        experts_apart: bool = False,
        so_far: AgentCallResult | None = None,
        seconds: float | Literal["call"] | None = "call",
    ) -> AgentCallResult:
        """One activity for the call's agent, within the call's ``seconds`` (or ``seconds``).

        ``experts_apart``, ``so_far``: see ``AgentCallPayload``; a run that goes on
        (``so_far``) is not where a failed turn goes back to.
        """
        agent = agent_call.agent
        name, method = ACTIVITY_OF_CALL[agent_call.kind]
        call = self.payload(agent, no_handoffs=agent_call.no_handoffs)
        call.events = self.turn_events()  # the worker relays them before the call's updates
        call.experts_apart, call.so_far = experts_apart, so_far
        if agent_call.kind == "run" and so_far is None:  # a failed turn goes on from here
            history = call.history  # (answers since are not)
            if call.reference is not None and self.chain is not None:
                history = self.chain.bodies()  # as digested: not serialized again every call
            self.checkpoint = Carried(history=history, host=call.host, logged=self.logged)
        limit = agent_call.seconds if seconds == "call" else seconds
        return await self._execute(method, f"{name}:{agent}", call, limit)

    async def _execute(
        self, method: Any, name: str, call: AgentCallPayload, seconds: float | None
    ) -> AgentCallResult:
        """One activity of ``method`` on ``call``, within ``seconds`` (``None``: no deadline).

        Its id (``{n}:{name}``) names the agent, so that a replay that would call another
        agent (a route that decides differently) fails with a nondeterminism error instead of
        mixing them up.

        Raises:
            DeadlinePassedError: no result within ``seconds``.
            PayloadTooLargeError: the call would not fit in a payload.
        """
        agent = call.agent
        size, limit = payload_size(call), self._start.payload_limit
        if size > limit:  # Temporal would refuse the command, and the workflow task with it
            raise PayloadTooLargeError(
                self._conversation_id, f"the call of agent {agent!r}", size, limit
            )
        if seconds is not None and seconds <= 0:
            raise DeadlinePassedError(f"no time left for {name}")
        self._calls += 1
        options = self._options
        limit = None if seconds is None else timedelta(seconds=max(seconds, 0.001))
        activity_id = f"{self._calls}:{name}"
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
        if self.chain is not None and call.reference is not None:
            self.chain.logged(call.reference)
        return result


def _left(end: float | None) -> float | None:
    """Seconds until ``end`` on the workflow's clock (``None``: no end)."""
    return None if end is None else end - workflow.time()


def _failed(frame: DelegationFrame, error: BaseException, seconds: float | None) -> AgentRun:
    """A due expert that gave no answer: its call's tool error, and its record."""
    failure = error if isinstance(error, Exception) else HandoffBuilderError(str(error))
    text, record = failed_delegation(frame, failure, seconds)
    answer = delegate_result(frame.call_id, text, frame.caller)
    return AgentRun(AgentResponse(messages=[answer]), (), frozenset(), delegations=(record,))


def _next_run(
    start: ConversationStart, state: Carried, conversation_id: str
) -> ConversationStart | None:
    """The next run's input, carrying ``state``; ``None`` when it would not fit in a payload.

    Receipts go first, the oldest first; a conversation too large without them stays in
    this run (it takes no more messages: they would not fit in an agent call either).
    """
    following = start.model_copy(update={"carried": state})
    size, limit = payload_size(following), start.payload_limit
    receipts = state.receipts
    if size > limit and receipts:
        had = len(receipts)
        for key, receipt in list(receipts.items()):
            size -= payload_size(receipt)
            del receipts[key]
            if size <= limit:
                break
        size = payload_size(following)
        workflow.logger.warning(
            "conversation %s: %d idempotency receipt(s) are not carried into its next run, "
            "over Temporal's payload limit", conversation_id, had - len(receipts),
        )  # fmt: skip
    if size > limit:
        workflow.logger.warning(
            "conversation %s does not continue as new: %s bytes, over Temporal's payload "
            "limit of %s; it takes no more messages", conversation_id, size, limit,
        )  # fmt: skip
        return None
    return following


def _outcome_of(conversation_id: str, host: GroupChatHost, events: list[Any]) -> TurnOutcome:
    """What the turn came to: its result, or the requests it waits for."""
    try:
        result = turn_result(conversation_id, host, events)
    except PendingRequestsError:
        requests = [request.to_dict() for request in host.pending_requests]
        return TurnOutcome(status="waiting", requests=requests)
    return TurnOutcome(status="completed", result=encode_turn(result))


def _kept(
    receipts: dict[str, dict[str, Any]], key: str, outcome: TurnOutcome
) -> dict[str, dict[str, Any]]:
    """``receipts`` with ``outcome``'s under ``key``, the latest :data:`KEPT_RECEIPTS` of them."""
    kept = {**receipts, key: outcome.model_dump(mode="json")}
    return dict(list(kept.items())[-KEPT_RECEIPTS:])


def _client_key() -> str:
    """The idempotency key the client gave this Update (``""``: none)."""
    info = workflow.current_update_info()
    if info is None or not info.id.startswith(KEY_PREFIX):
        return ""
    return info.id[len(KEY_PREFIX) :]


__all__ = [
    "WORKFLOW_NAME",
    "ConversationWorkflow",
    "register",
]
