"""A conversation worker as a service: stopped by SIGTERM or SIGINT, drained within a bound.

Used by ``handoff-builder worker``. On the first signal the worker takes no new work and gives
the agent calls it runs up to ``grace`` seconds to finish; Temporal's SDK then cancels those still
running, and Temporal runs them again on another worker at once (they are handed back, not lost).
A second signal ends the process at once: its calls are run again elsewhere once their heartbeat
times out. Every step is said in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn

import temporalio.exceptions
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    Worker,
)
from typing_extensions import override

from handoff_builder._builder import HandoffWorkflowBuilder
from handoff_builder.stores import MessageLog

from ._client import conversation_worker

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class AgentCallsInFlight(Interceptor):
    """Counts the agent calls (activities) this worker runs, and those its shutdown cut short."""

    def __init__(self) -> None:
        self.running = 0
        self.handed_back = 0

    @override
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Counted(next, self)


class _Counted(ActivityInboundInterceptor):
    def __init__(self, inner: ActivityInboundInterceptor, calls: AgentCallsInFlight) -> None:
        super().__init__(inner)
        self.calls = calls

    @override
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        self.calls.running += 1
        try:
            return await super().execute_activity(input)
        except (asyncio.CancelledError, temporalio.exceptions.CancelledError):
            if activity.is_worker_shutdown():  # cancelled by the shutdown, past its bound
                self.calls.handed_back += 1
            raise
        finally:
            self.calls.running -= 1


async def serve(
    client: Client,
    builder: HandoffWorkflowBuilder,
    *,
    task_queue: str,
    grace: float,
    say: Callable[[str], None],
    relay: str | None = None,
    messages: MessageLog | None = None,
) -> None:
    """Serve ``builder``'s conversations on ``task_queue`` until SIGTERM or SIGINT, then drain.

    The signals are handled even where they were ignored (SIGINT in a background job of a
    non-interactive shell). Returns once the worker has stopped. ``relay``: the Redis URL where
    the agent calls of streaming turns publish their updates (``None``: nowhere). ``messages``:
    the message log the workers of the queue share (see ``conversation_worker``).
    """
    calls = AgentCallsInFlight()
    worker = conversation_worker(
        client,
        builder,
        task_queue=task_queue,
        relay=relay,
        messages=messages,
        graceful_shutdown_timeout=timedelta(seconds=grace),
        interceptors=[calls],
    )
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []

    def tell(text: str) -> None:
        with contextlib.suppress(OSError):  # a reader that has gone must not keep it running
            say(text)

    def stop(received: signal.Signals) -> None:
        if stopping:
            tell(
                f"{received.name} again: stopping now; Temporal runs the agent calls that were "
                "in flight again on another worker once their heartbeat times out"
            )
            _exit_now(128 + received.value)
        stopping.append(loop.create_task(_shut_down(worker)))  # first: whatever saying it does
        if calls.running:
            tell(
                f"{received.name}: stopping: no new work is taken; {_calls(calls.running)} in "
                f"flight may run for up to {grace:g} s more (another {received.name} stops at "
                "once)"
            )
        else:
            tell(f"{received.name}: stopping: no new work is taken; no agent call is in flight")

    handled: list[signal.Signals] = []
    for received in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError):  # no signal handlers on this platform
            loop.add_signal_handler(received, stop, received)
            handled.append(received)
    try:
        await worker.run()
    finally:
        for received in handled:
            loop.remove_signal_handler(received)
    for task in stopping:
        await task
    if calls.handed_back:
        them = "it" if calls.handed_back == 1 else "them"
        say(
            f"stopped: {_calls(calls.handed_back)} did not finish within {grace:g} s; "
            f"Temporal runs {them} again on another worker"
        )
    else:
        say("stopped: every agent call it took finished")


async def _shut_down(worker: Worker) -> None:
    await worker.shutdown()


def _calls(count: int) -> str:
    return f"{count} agent call{'' if count == 1 else 's'}"


def _exit_now(code: int) -> NoReturn:
    """Leave at once, with what was said written out."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
