"""The client side: ``TemporalConversationHost``, and connecting and serving workers."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, cast

from agent_framework import Content, Message, WorkflowEvent
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    DescribeNamespaceRequest,
)
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from typing_extensions import Unpack, override

from handoff_builder._builder import HandoffWorkflowBuilder
from handoff_builder._events import HandoffTurnResult
from handoff_builder._lifecycle import (
    UserInput,
    check_idempotency_key,
    user_messages,
)
from handoff_builder._options import settings_with
from handoff_builder.exceptions import (
    ConversationBusyError,
    HandoffBuilderError,
    PayloadTooLargeError,
    PendingRequestsError,
    UnexpectedAnswersError,
)
from handoff_builder.stores import MessageLog, check_conversation_id

from ._activities import AgentActivities, AgentCallOptions, heartbeat_throttle
from ._chain import LoggedPart
from ._failures import (
    BUSY,
    NOTHING_PENDING,
    PAYLOAD_TOO_LARGE,
    PENDING,
    READING_BACK,
    UNKNOWN_REQUEST,
)
from ._host_settings import TemporalHostOptions, TemporalHostSettings
from ._live import LiveTurn, closing_events, follow
from ._payloads import (
    DEFAULT_PAYLOAD_LIMIT,
    KEY_PREFIX,
    Answers,
    ConversationStart,
    TurnOutcome,
    UserInputPayload,
    contents,
    decode_events,
    decode_turn,
    payload_size,
)
from ._relay import RedisRelay, relay_of
from ._workflow import ConversationWorkflow, register


class ConversationAlreadyStartedError(HandoffBuilderError):
    """:meth:`TemporalConversationHost.start` for a conversation whose workflow already runs."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"Conversation {conversation_id!r} is already running on Temporal.")


class TemporalTurnError(HandoffBuilderError):
    """A turn failed on Temporal: an agent call failed after its retries.

    The turn stays open and the next message retries it, as with
    :class:`~handoff_builder.ConversationHost`.
    """


async def connect(target: str, *, namespace: str = "default", **kwargs: Any) -> Client:
    """A Temporal client for ``target`` (``HOST:PORT``) with this package's JSON payloads."""
    return await Client.connect(
        target, namespace=namespace, data_converter=pydantic_data_converter, **kwargs
    )


def conversation_worker(
    client: Client,
    builder: HandoffWorkflowBuilder,
    *,
    task_queue: str,
    agent_calls: AgentCallOptions | None = None,
    relay: RedisRelay | str | None = None,
    messages: MessageLog | None = None,
    **kwargs: Any,
) -> Worker:
    """A Temporal worker that runs ``builder``'s conversations on ``task_queue``.

    ``async with conversation_worker(...)`` (or ``await worker.run()``) serves them until it is
    stopped; run as many as you like, in as many processes. ``kwargs`` go to
    ``temporalio.worker.Worker`` (``max_concurrent_activities``, say). The worker sends an agent
    call's heartbeat to the server at most every half of ``agent_calls.heartbeat``
    (``max_heartbeat_throttle_interval``; Temporal's own default is 80 % of it, which leaves a
    busy server little time to record it).

    ``relay`` (a :class:`RedisRelay`, or a Redis URL): where the agent calls of streaming turns
    publish their updates as the agents write them (``TemporalConversationHost.stream()``).
    Without it they publish nothing, and such turns stream their replies whole, at their end.
    A relay made here from a URL is closed when the worker stops.

    ``messages`` (a :class:`~handoff_builder.stores.MessageLog`: a
    :class:`~handoff_builder.stores.PostgresConversationStore` that every worker of the queue
    points at, or an :class:`~handoff_builder.stores.InMemoryConversationStore` for workers of
    one process): where the conversations' messages live. Agent calls then carry a reference to
    the history and the messages the log lacks, not the whole conversation, so a turn's payloads
    and event history grow with what the turn adds. Every worker of a task queue must be given
    one, or none (see ``docs/temporal.md``). The store is not closed when the worker stops.

    Raises:
        HandoffConfigurationError: the builder does not build.
        ImportError: a relay URL is given, and redis-py is not installed.
    """
    options = agent_calls or AgentCallOptions()
    register(task_queue, builder, options, by_reference=messages is not None)
    made = relay_of(relay)
    calls = AgentActivities(builder, made, messages)
    kwargs.setdefault("max_heartbeat_throttle_interval", heartbeat_throttle(options))
    worker = _SettlingWorker(
        client,
        task_queue=task_queue,
        workflows=[ConversationWorkflow],
        activities=[
            calls.invoke_agent,
            calls.resolve_answers,
            calls.carry_on_delegation,
            calls.ask_expert,
            calls.read_history,
        ],
        **kwargs,
    )
    if isinstance(relay, str) and made is not None:
        worker.closing = made
    return worker


SETTLE_SECONDS = 0.1
"""How long a stopped worker lets Temporal's threads run before it returns (see below)."""


class _SettlingWorker(Worker):
    """A Temporal worker that, once stopped, gives Temporal's own threads a moment.

    Right after a worker's shutdown completes, a thread of Temporal's Rust core still takes the
    GIL once. A process whose interpreter starts exiting in that moment aborts with "Fatal Python
    error: PyGILState_Release: thread state ... must be current when releasing" (exit status
    134; temporalio/sdk-python#300), with a plain temporalio worker too: 8 worker processes in
    70 that served a message and stopped. Waiting ``SETTLE_SECONDS`` after the shutdown, with
    the GIL released, lets that thread finish first: none of 176 processes aborted then (the
    measurements are in docs/temporal.md).
    """

    closing: RedisRelay | None = None
    """A relay the worker made, closed when it stops."""

    @override
    async def run(self) -> None:
        try:
            await super().run()
        finally:
            if self.closing is not None:
                await self.closing.aclose()
            await asyncio.sleep(SETTLE_SECONDS)


class TemporalConversationHost:
    """Hosted conversations on Temporal, each a durable workflow whose id is the conversation id.

    ``send``/``stream``/``respond``/``abandon``/``delete``/``active_agent`` as on
    ``ConversationHost``.

    The first message starts the conversation's workflow; later ones are Updates to it, from any
    client. Workers (:func:`conversation_worker`) run it: a worker that dies mid-turn is replaced
    by another, which goes on from the last finished agent call. Every client of a task queue
    must use the same settings.

    What travels through Temporal must fit in one payload (the namespace's limit, 2 MiB by
    default): a message or an agent call that would not is refused with
    :class:`~handoff_builder.PayloadTooLargeError` before it reaches the workflow's history.
    With workers that share a message log (``conversation_worker(..., messages=...)``), agent
    calls carry a reference to the conversation instead, and a conversation may grow past that.

    Args:
        client: A client from :func:`connect` (it needs this package's payload converter).
        task_queue: The task queue the workers serve.
        relay: Where :meth:`stream` reads a turn's updates live, as the workers publish them
            (a :class:`RedisRelay`, or a Redis URL; the workers need the same server). Without
            it, :meth:`stream` yields each reply whole once the turn is over.
        settings: How the host runs its conversations (:class:`TemporalHostSettings`: the idle
            timeout, retries, turns per run, the wait for a worker, local activities).
        messages: The workers' message log, when they have one: :meth:`history` reads the
            conversation from it (a query's answer must fit in a payload; the log's need not).
        **options: The same fields as keywords (``idle_timeout=``, ``turns_per_run=``...), in
            place of the ones of ``settings``.

    Raises:
        ValueError: an option out of range (``idle_timeout``, ``max_turn_retries``,
            ``turns_per_run``), named in the message.
        TypeError: an option that is not a field of :class:`TemporalHostSettings`.
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        relay: RedisRelay | str | None = None,
        settings: TemporalHostSettings | None = None,
        messages: MessageLog | None = None,
        **options: Unpack[TemporalHostOptions],
    ) -> None:
        self.settings = settings_with(
            TemporalHostSettings, settings, options, "TemporalConversationHost"
        )
        """How this host runs its conversations (:class:`TemporalHostSettings`)."""
        self.client = client
        self.task_queue = task_queue
        self.worker_wait = self.settings.worker_wait
        """Seconds a call waits for a worker to poll the task queue before it fails."""
        self._start = ConversationStart(
            task_queue=task_queue,
            idle_timeout=self.settings.idle_timeout.total_seconds(),
            max_turn_retries=self.settings.max_turn_retries,
            turns_per_run=self.settings.turns_per_run,
            local_activities=self.settings.local_activities,
        )
        self._payload_limit: int | None = None  # the namespace's, once read
        self.relay = relay_of(relay)
        """Where :meth:`stream` reads the live updates of a turn (``None``: nowhere)."""
        self.messages = messages
        """The workers' message log, where :meth:`history` reads (``None``: from the workflow)."""

    async def payload_limit(self) -> int:
        """Bytes one payload may take: the namespace's limit (read once), or 2 MiB.

        Temporal refuses a payload over it (``limit.blobSize.error`` on the server).
        """
        if self._payload_limit is None:
            request = DescribeNamespaceRequest(namespace=self.client.namespace)
            try:
                described = await self.client.workflow_service.describe_namespace(request)
                limit = described.namespace_info.limits.blob_size_limit_error
            except RPCError:
                limit = 0  # not allowed to read it, say: Temporal's default
            self._payload_limit = limit if limit > 0 else DEFAULT_PAYLOAD_LIMIT
            self._start = self._start.model_copy(update={"payload_limit": self._payload_limit})
        return self._payload_limit

    async def _refuse_if_too_large(
        self, conversation_id: str, what: str, payload: UserInputPayload | Answers
    ) -> None:
        limit, size = await self.payload_limit(), payload_size(payload)
        if size > limit:
            raise PayloadTooLargeError(conversation_id, what, size, limit)

    async def start(self, conversation_id: str) -> None:
        """Start the conversation's workflow; ``send`` does it by itself when needed.

        Raises:
            ConversationAlreadyStartedError: it runs already (one workflow per conversation).
        """
        check_conversation_id(conversation_id)
        await self.payload_limit()
        try:
            await self.client.start_workflow(
                ConversationWorkflow.run,
                self._start,
                id=conversation_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
        except Exception as error:
            if type(error).__name__ == "WorkflowAlreadyStartedError":
                raise ConversationAlreadyStartedError(conversation_id) from error
            raise

    async def send(
        self, conversation_id: str, message: UserInput, *, idempotency_key: str | None = None
    ) -> HandoffTurnResult:
        """Run one user turn (starting the conversation's workflow if need be); its result.

        ``idempotency_key`` marks the call: a retried call with the same key returns the turn
        it ran instead of running the message again (the conversation keeps the last 64 keys).
        When the conversation waits for a remote agent's question alone (a
        :class:`~handoff_builder.RemoteQuestion`), the message is its answer: the waiting turn
        goes on, as :meth:`respond` would (as with ``ConversationHost``).

        Raises:
            PendingRequestsError: the turn waits for answers (:meth:`respond`), or waited already
                (for anything but a remote agent's question alone).
            TemporalTurnError: the turn failed (the next message retries it), or no worker took
                the message within ``worker_wait`` seconds (send it again with the same key).
            PayloadTooLargeError: the message, or the conversation with it, would not fit in a
                Temporal payload (:meth:`payload_limit`); it was not added. An agent call that
                would not fit fails the turn with it.
        """
        check_conversation_id(conversation_id)
        payload = UserInputPayload(messages=[m.to_dict() for m in user_messages(message)])
        await self._refuse_if_too_large(conversation_id, "the message", payload)
        outcome = await self._send(conversation_id, payload, _update_id(idempotency_key))
        return _result(conversation_id, outcome)

    async def _send(
        self, conversation_id: str, payload: UserInputPayload, update_id: str | None
    ) -> TurnOutcome:
        """Send ``payload`` as an Update (with start) named ``update_id``; its outcome."""
        client: Any = self.client  # its overloads are partly untyped

        async def update() -> Any:
            operation = WithStartWorkflowOperation(
                ConversationWorkflow.run,
                self._start,
                id=conversation_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )  # one operation per attempt: the client keeps its outcome
            _read_when_done(operation)
            return await client.start_update_with_start_workflow(
                "send",
                payload,
                start_workflow_operation=operation,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                id=update_id,
                result_type=TurnOutcome,
            )

        return cast(TurnOutcome, await self._run_update(conversation_id, update))

    async def stream(
        self, conversation_id: str, message: UserInput, *, idempotency_key: str | None = None
    ) -> AsyncIterator[WorkflowEvent[Any]]:
        """One user turn as workflow events, as ``ConversationHost.stream()`` yields them.

        With a :attr:`relay`: the agents' updates as they write (``output``, and
        ``handoff_intermediate`` for intermediate agents and experts), each handoff and
        delegation once decided, then ``handoff_turn_completed``, whose ``data`` is the
        turn's result (the truth: the relay is best-effort). An agent call that runs again is
        announced (``handoff_agent_call_retried``) before the updates of its new attempt. When
        the live updates break off (Redis down, say), ``handoff_stream_incomplete`` says so
        and the turn's replies follow whole. A call with the ``idempotency_key`` of a turn that
        runs, or ran, reads that turn from its start.

        Without a relay: each reply whole and each handoff, in order, once the turn is over.

        Raises:
            As :meth:`send`, after the live updates that came before.
        """
        check_conversation_id(conversation_id)
        relay = self.relay
        payload = UserInputPayload(messages=[m.to_dict() for m in user_messages(message)])
        await self._refuse_if_too_large(conversation_id, "the message", payload)
        if relay is None:
            raw = await self._send(conversation_id, payload, _update_id(idempotency_key))
            result = _result(conversation_id, raw)
            where = f"The turn of conversation {conversation_id!r}"
            travelled = decode_events(raw.events, where)
            live = LiveTurn(conversation_id)
            for event in closing_events(result, live, whole=True, travelled=travelled):
                yield event
            return
        update_id = _update_id(idempotency_key) or uuid.uuid4().hex
        payload.relay = relay.key(conversation_id, update_id)
        outcome = asyncio.ensure_future(self._send(conversation_id, payload, update_id))
        try:
            async for event in follow(
                relay,
                payload.relay,
                LiveTurn(conversation_id),
                outcome,
                lambda raw: _result(conversation_id, raw),
            ):
                yield event
        finally:
            if not outcome.done():  # the caller stopped reading: the turn goes on without it
                outcome.cancel()
            with contextlib.suppress(BaseException):
                await outcome

    async def respond(
        self,
        conversation_id: str,
        answers: Mapping[str, Content],
        *,
        idempotency_key: str | None = None,
    ) -> HandoffTurnResult:
        """Answer the requests the turn waits for (by request id); the agent that asked carries on.

        Raises:
            PendingRequestsError: answered, and the turn waits again.
            HandoffBuilderError: nothing waits, or an answer's id is not a request's.
            PayloadTooLargeError: the answers would not fit in a Temporal payload.
        """
        check_conversation_id(conversation_id)
        payload = Answers(answers={key: value.to_dict() for key, value in answers.items()})
        await self._refuse_if_too_large(conversation_id, "the answers", payload)
        handle: Any = self.client.get_workflow_handle(conversation_id)  # partly untyped

        async def update() -> Any:
            return await handle.start_update(
                "respond",
                payload,
                wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                id=_update_id(idempotency_key),
                result_type=TurnOutcome,
            )

        return _result(conversation_id, await self._run_update(conversation_id, update))

    async def abandon(
        self, conversation_id: str, *, wait: bool = False
    ) -> HandoffTurnResult | None:
        """Give up the conversation's open turn: close it without running anything more.

        As ``ConversationHost.abandon``: requests it waited for are answered as not answered,
        its status is ``"abandoned"`` (a :class:`~handoff_builder.TurnAbandonedEvent` with
        ``reason="on_demand"``), and the next message starts a new turn. ``None`` when no turn
        is open (or no such conversation runs).

        Raises:
            ConversationBusyError: a turn is running; with ``wait=True`` this waits for it.
        """
        check_conversation_id(conversation_id)
        handle: Any = self.client.get_workflow_handle(conversation_id)  # partly untyped

        async def update() -> Any:
            return await handle.start_update(
                "abandon", wait, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )

        try:
            raw = await self._run_update(conversation_id, update)
        except HandoffBuilderError as error:
            if _not_running(error):
                return None
            raise
        return None if raw is None else decode_turn(cast(dict[str, Any], raw), conversation_id)

    async def delete(self, conversation_id: str, *, wait: bool = False) -> None:
        """Forget the conversation: its history and its state (its next message starts afresh).

        The conversation's workflow forgets it and ends (once no turn runs): from then on it
        reads as no conversation, and the next message starts a new workflow. Its executions,
        every run of it, are deleted from Temporal, which does it in the background. With the
        workers' message log (``messages``), its messages there are deleted too.

        Raises:
            ConversationBusyError: a turn is running; with ``wait=True`` the deletion waits for
                it.
        """
        check_conversation_id(conversation_id)
        await self._delete_runs(conversation_id, wait=wait)
        if self.messages is not None:
            await self.messages.delete(conversation_id)

    async def _delete_runs(self, conversation_id: str, *, wait: bool) -> None:
        while True:
            try:
                described = await self.client.get_workflow_handle(conversation_id).describe()
            except RPCError as error:
                if error.status == RPCStatusCode.NOT_FOUND:
                    return
                raise
            run_id = described.run_id
            if described.status != WorkflowExecutionStatus.RUNNING or await self._close(
                conversation_id, run_id, wait=wait
            ):
                break  # closed, and it did not continue as new in the meantime
        for run in await _runs(self.client, conversation_id, run_id):
            request = DeleteWorkflowExecutionRequest(
                namespace=self.client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=conversation_id, run_id=run),
            )
            try:
                await self.client.workflow_service.delete_workflow_execution(request)
            except RPCError as error:
                if error.status != RPCStatusCode.NOT_FOUND:
                    raise

    async def _close(self, conversation_id: str, run_id: str, *, wait: bool) -> bool:
        """End the run ``run_id`` once no turn runs; False: it had ended (continued as new)."""
        handle: Any = self.client.get_workflow_handle(conversation_id, run_id=run_id)

        async def update() -> Any:
            return await handle.start_update(
                "close", wait, wait_for_stage=WorkflowUpdateStage.ACCEPTED
            )

        try:
            await self._run_update(conversation_id, update)
        except HandoffBuilderError as error:
            if _not_running(error):
                return False
            raise
        await handle.result(follow_runs=False)
        return True

    async def _run_update(self, conversation_id: str, start: Callable[[], Awaitable[Any]]) -> Any:
        """Start an Update, which a worker must accept within ``worker_wait`` s; its result."""
        try:
            try:
                handle = await asyncio.wait_for(_with_a_worker(start), self.worker_wait)
            except (asyncio.TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError) as error:
                raise TemporalTurnError(
                    f"No worker took the message for conversation {conversation_id!r} within "
                    f"{self.worker_wait:g} s: is a worker serving task queue "
                    f"{self.task_queue!r}? (Send it again with the same idempotency_key.)"
                ) from error
            return await handle.result()
        except (
            WorkflowUpdateFailedError,
            WorkflowFailureError,
            WorkflowUpdateRPCTimeoutOrCancelledError,
            RPCError,
        ) as error:
            raise _error(conversation_id, error) from error

    async def active_agent(self, conversation_id: str) -> str | None:
        """The agent the conversation is with (``None``: no such conversation).

        In an open turn, the agent running or about to run, or the one whose requests it waits
        for; between turns, the agent that ended the last turn (as ``ConversationHost``).
        """
        return cast(
            str | None, await self._query(conversation_id, ConversationWorkflow.active_agent)
        )

    async def pending(self, conversation_id: str) -> list[Content]:
        """The requests the conversation waits for (empty when none)."""
        raw = await self._query(conversation_id, ConversationWorkflow.pending)
        return contents(cast(list[dict[str, Any]], raw or []))

    async def history(self, conversation_id: str) -> list[Message]:
        """The conversation, every message in order (empty for an unknown id).

        With the workers' message log (``messages``), the part of it the log holds is read
        from there, and only the messages after it from the workflow.

        Raises:
            CorruptConversationError: the log lacks a message the workflow names.
            StoreUnavailableError: the log cannot be reached.
        """
        if self.messages is None:
            raw = await self._query(conversation_id, ConversationWorkflow.history)
            return [Message.from_dict(item) for item in cast(Sequence[dict[str, Any]], raw or [])]
        found = await self._query(conversation_id, ConversationWorkflow.logged_history)
        if found is None:
            return []
        part = LoggedPart.model_validate(found)
        logged = await self.messages.read_chain(conversation_id, part.head, part.length)
        return [Message.from_dict(item) for item in [*(dict(e.body) for e in logged), *part.after]]

    async def _query(self, conversation_id: str, query: Any) -> Any:
        check_conversation_id(conversation_id)
        handle = self.client.get_workflow_handle(conversation_id)
        try:
            return await _with_a_worker(lambda: _asked(handle, query, self.worker_wait))
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            raise HandoffBuilderError(
                f"Conversation {conversation_id!r} cannot be read: {error.message} (is a worker "
                f"serving task queue {self.task_queue!r}?)"
            ) from error


async def _with_a_worker(call: Callable[[], Awaitable[Any]]) -> Any:
    """``call()``, again while no worker polls the task queue (one restarting, say)."""
    delay = 0.05
    while True:
        try:
            return await call()
        except RPCError as error:
            no_worker = error.status == RPCStatusCode.FAILED_PRECONDITION and (
                "no poller" in error.message
            )
            if not no_worker:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)


async def _asked(handle: Any, query: Any, seconds: float) -> Any:
    """The answer to ``query``, asked again while a new run reads its history back (briefly).

    Raises:
        HandoffBuilderError: the query failed, or the history was not read back in ``seconds``.
    """
    delay, waited = 0.02, 0.0
    while True:
        try:
            return await handle.query(query, rpc_timeout=timedelta(seconds=seconds))
        except WorkflowQueryFailedError as error:
            if error.message != READING_BACK or waited >= seconds:
                raise HandoffBuilderError(
                    f"Conversation {handle.id!r} cannot be read: {error.message}"
                ) from error
        await asyncio.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.5)


async def _runs(client: Client, conversation_id: str, run_id: str) -> list[str]:
    """``run_id`` and the runs before it, that continued as new into it."""
    runs: list[str] = []
    while run_id:
        runs.append(run_id)
        handle = client.get_workflow_handle(conversation_id, run_id=run_id)
        run_id = ""
        try:
            async for event in handle.fetch_history_events(page_size=1):
                started = event.workflow_execution_started_event_attributes
                run_id = started.continued_execution_run_id
                break
        except RPCError as error:
            if error.status != RPCStatusCode.NOT_FOUND:
                raise
    return runs


def _read_when_done(operation: WithStartWorkflowOperation[Any, Any]) -> None:
    """Read the start's outcome that ``operation`` keeps, whatever it is, once it has one.

    An Update with start that fails (no worker took it in time, say) leaves its failure in the
    operation, which asyncio would otherwise report at exit as never retrieved.
    """
    waiting = asyncio.ensure_future(operation.workflow_handle())
    waiting.add_done_callback(lambda done: done.cancelled() or done.exception())


def _update_id(idempotency_key: str | None) -> str | None:
    """The Update's id for a call: the client's key, marked as one (``None``: a fresh id)."""
    if idempotency_key is None:
        return None
    check_idempotency_key(idempotency_key)
    return KEY_PREFIX + idempotency_key


def _result(conversation_id: str, raw: Any) -> HandoffTurnResult:
    outcome = cast(TurnOutcome, raw)
    if outcome.status == "waiting" or outcome.result is None:
        raise PendingRequestsError(conversation_id, contents(outcome.requests))
    result = decode_turn(outcome.result, conversation_id)
    if outcome.recovered is not None:
        result.recovered = decode_turn(outcome.recovered, conversation_id)
    return result


def _not_running(error: HandoffBuilderError) -> bool:
    """The Update found no running workflow: none was started, or it has ended."""
    cause = error.__cause__
    return isinstance(cause, RPCError) and cause.status == RPCStatusCode.NOT_FOUND


def _error(conversation_id: str, error: Exception) -> Exception:
    if isinstance(error, RPCError) and error.status == RPCStatusCode.NOT_FOUND:
        return HandoffBuilderError(
            f"No conversation {conversation_id!r} runs on Temporal: send it a message first."
        )
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    if isinstance(cause, ApplicationError):
        if cause.type == PENDING:
            details = cast(list[dict[str, Any]], cause.details[0] if cause.details else [])
            return PendingRequestsError(conversation_id, contents(details))
        if cause.type in (NOTHING_PENDING, UNKNOWN_REQUEST):
            if len(cause.details) != 2:  # a worker of an earlier release gives the text alone
                return HandoffBuilderError(cause.message)
            unknown, waiting = cause.details
            return UnexpectedAnswersError(conversation_id, unknown, waiting)
        if cause.type == PAYLOAD_TOO_LARGE:
            what, size, limit = cause.details
            return PayloadTooLargeError(conversation_id, str(what), int(size), int(limit))
        if cause.type == BUSY:
            return ConversationBusyError(conversation_id)
        return TemporalTurnError(cause.message)
    return TemporalTurnError(f"The turn of conversation {conversation_id!r} failed: {error}")
