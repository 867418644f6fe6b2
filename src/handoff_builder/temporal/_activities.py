"""The activity side of a hosted conversation: each agent call, run in a worker.

The conversation workflow (``_workflow``) decides; it sends each agent call to an activity of
the worker's :class:`AgentActivities`, which runs it on a host of this worker loaded with the
conversation and the host's state as they stood (``GroupChatHost.run_here``: the agent, its
vetted handoff calls, its experts) and returns the run. While it runs, the activity heartbeats,
and a tool may key its side effect with :func:`tool_call_key`. How each call runs (timeouts,
heartbeat, retries) is :class:`AgentCallOptions`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agent_framework import Workflow
from temporalio import activity
from temporalio.common import RetryPolicy

from handoff_builder._builder import HandoffWorkflowBuilder
from handoff_builder._engine import AgentCall
from handoff_builder._host import GroupChatHost
from handoff_builder._participant import AgentRun
from handoff_builder._runner import Streams
from handoff_builder.exceptions import CorruptStateError, HandoffBuilderError
from handoff_builder.stores import MessageLog

from ._chain import HistoryPage, LoggedHistory, last_page, page_of
from ._failures import CONFIGURATION, misconfigured, too_large
from ._payloads import (
    AgentCallPayload,
    AgentCallResult,
    decode_frame,
    decode_run,
    encode_run,
    load,
    payload_size,
)
from ._relay import RedisRelay, relaying

ACTIVITY_NAME = "handoff_builder.invoke_agent"
RESOLVE_ACTIVITY_NAME = "handoff_builder.resolve_answers"
CARRY_ON_ACTIVITY_NAME = "handoff_builder.carry_on_delegation"
ASK_ACTIVITY_NAME = "handoff_builder.ask_expert"
READ_ACTIVITY_NAME = "handoff_builder.read_history"


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


def host_of(built: Workflow) -> GroupChatHost:
    """The conversation host of a workflow built by :class:`HandoffWorkflowBuilder`."""
    host = built.get_start_executor()
    if not isinstance(host, GroupChatHost):  # pragma: no cover - build() always makes one
        raise TypeError("A Temporal conversation needs a workflow built by HandoffWorkflowBuilder.")
    return host


class AgentActivities:
    """The agent calls of one builder's conversations, as the activities of a worker.

    The workflow decides; these run the agents, on hosts of this worker built from ``builder``
    and loaded with the conversation as the call gives it. :func:`conversation_worker` makes
    one per worker and registers its methods. With a ``relay``, a call of a streaming turn
    publishes its agent's updates there as they come (see ``_relay``). With a ``messages`` log,
    a call that carries a reference to its history reads it there (see ``_chain``).
    """

    def __init__(
        self,
        builder: HandoffWorkflowBuilder,
        relay: RedisRelay | None = None,
        messages: MessageLog | None = None,
    ) -> None:
        self._builder = builder
        self._relay = relay
        self._messages = messages
        self._free: list[GroupChatHost] = []  # built hosts, reused one call at a time

    @activity.defn(name=ACTIVITY_NAME)
    async def invoke_agent(self, call: AgentCallPayload) -> AgentCallResult:
        """Run one agent on the conversation as it stood.

        Its experts run here too, unless the call has them apart (``experts_apart``): then
        the run stops at the response that asks them, and returns them due. With ``so_far``,
        the run goes on from there, their answers in.
        """
        run = AgentCall(call.agent, "run", call.no_handoffs)

        async def work(host: GroupChatHost, streams: Streams | None) -> AgentRun:
            so_far = None if call.so_far is None else decode_run(host, call.agent, call.so_far)
            return await host.run_here(
                run, streams, experts_apart=call.experts_apart, so_far=so_far
            )

        what = f"the reply of agent {call.agent!r}"
        # tool_call_key(): a run that goes on counts its tools' calls apart from its start's
        apart = "" if call.so_far is None else f"after/{len(call.so_far.messages)}"
        return await self._run(call, call.agent, work, what, apart)

    @activity.defn(name=ASK_ACTIVITY_NAME)
    async def ask_expert(self, call: AgentCallPayload) -> AgentCallResult:
        """Ask one due expert of a fan-out, as its caller's run would have.

        The result's one message answers the caller's delegate call; none when the expert
        waits for a person (its suspension).
        """
        if call.frame is None:
            raise misconfigured(f"An expert call of agent {call.agent!r} names no expert.")
        try:
            frame = decode_frame(call.frame)
        except CorruptStateError as error:
            raise misconfigured(str(error)) from error

        async def work(host: GroupChatHost, streams: Streams | None) -> AgentRun:
            return await host.ask_here(frame, streams)

        what = f"the answer of expert {frame.expert!r} to agent {call.agent!r}"
        return await self._run(call, frame.expert, work, what, f"ask/{frame.call_id}")

    @activity.defn(name=RESOLVE_ACTIVITY_NAME)
    async def resolve_answers(self, call: AgentCallPayload) -> AgentCallResult:
        """Carry out the answered requests of the waiting agent (approved tools run here)."""
        run = AgentCall(call.agent, "resolve")
        what = f"the approved calls of agent {call.agent!r}"
        return await self._run(call, call.agent, _running(run), what)

    @activity.defn(name=CARRY_ON_ACTIVITY_NAME)
    async def carry_on_delegation(self, call: AgentCallPayload) -> AgentCallResult:
        """An expert whose delegation waited for answers carries on, and answers its caller."""
        run = AgentCall(call.agent, "carry_on")
        what = f"the delegation of agent {call.agent!r}"
        return await self._run(call, call.agent, _running(run), what)

    @activity.defn(name=READ_ACTIVITY_NAME)
    async def read_history(self, history: LoggedHistory) -> HistoryPage:
        """A page of a conversation's history, read back from the message log in a new run."""
        conversation_id = history.conversation_id
        log = self._log(conversation_id, "is read back from the workers' message log")
        reference = history.reference
        try:
            if history.from_end:
                return await last_page(log, conversation_id, reference, history.budget)
            found = await log.read_chain(conversation_id, reference.head, reference.length)
        except CorruptStateError as error:
            raise misconfigured(str(error)) from error
        return page_of([dict(entry.body) for entry in found], history.start, history.budget)

    def _log(self, conversation_id: str, what: str) -> MessageLog:
        if self._messages is None:
            raise misconfigured(
                f"Conversation {conversation_id!r} {what}, and this worker has no message log: "
                "give every worker of the task queue the same "
                "conversation_worker(..., messages=...)."
            )
        return self._messages

    async def _run(
        self, payload: AgentCallPayload, agent: str, work: _Work, what: str, apart: str = ""
    ) -> AgentCallResult:
        """``work`` on a host loaded with the conversation, relayed as ``agent``'s attempt.

        ``apart``: what keeps its tools' keys apart from those of the same agent call's other
        activities (:func:`tool_call_key`).
        """
        async with (
            self._replica(payload, apart) as host,
            relaying(self._relay, payload.relay, host, agent, payload.events) as streams,
        ):
            run = await work(host, streams)
        result = encode_run(run)
        result.attempt = activity.info().attempt
        return _fitting(payload, what, result)

    @contextlib.asynccontextmanager
    async def _replica(
        self, call: AgentCallPayload, apart: str = ""
    ) -> AsyncGenerator[GroupChatHost, None]:
        """A host of this worker loaded with the conversation as it stood, heartbeating."""
        history = await self._history(call)
        host = self._free.pop() if self._free else host_of(self._builder.build())
        try:
            try:
                load(host, history, call.host, call.conversation_id)
            except (CorruptStateError, ValueError, TypeError, KeyError) as error:
                raise misconfigured(
                    f"The state of conversation {call.conversation_id!r} does not load: {error}"
                ) from error
            host.conversation_id = call.conversation_id
            scope = f"{call.conversation_id}/{call.length}/{activity.info().activity_type}"
            if apart:
                scope = f"{scope}/{apart}"
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

    async def _history(self, call: AgentCallPayload) -> list[dict[str, Any]]:
        """The conversation the call runs on: its own, or read from the message log by reference.

        A log that cannot be reached is an error the call is retried for; a log that lacks the
        history, or a worker without a log, is not.
        """
        reference = call.reference
        if reference is None:
            return call.history
        log = self._log(
            call.conversation_id, f"names the history of agent {call.agent!r}'s call by reference"
        )
        try:
            return await reference.read(log, call.conversation_id)
        except CorruptStateError as error:
            raise misconfigured(str(error)) from error


_Work = Callable[[GroupChatHost, "Streams | None"], Awaitable[AgentRun]]
"""What an activity does on its loaded host, with the attempt's streams."""


def _running(call: AgentCall) -> _Work:
    async def work(host: GroupChatHost, streams: Streams | None) -> AgentRun:
        return await host.run_here(call, streams)

    return work


ACTIVITY_OF_CALL = {
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
        raise too_large(call.conversation_id, what, size, call.payload_limit)
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


__all__ = [
    "ACTIVITY_NAME",
    "ACTIVITY_OF_CALL",
    "ASK_ACTIVITY_NAME",
    "CARRY_ON_ACTIVITY_NAME",
    "READ_ACTIVITY_NAME",
    "RESOLVE_ACTIVITY_NAME",
    "AgentActivities",
    "AgentCallOptions",
    "heartbeat_throttle",
    "host_of",
    "tool_call_key",
]
