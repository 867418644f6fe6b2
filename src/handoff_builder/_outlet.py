"""What a turn sends out on its workflow context, and the turn's trace.

A :class:`TurnOutlet` is the group-chat host's side that faces agent_framework and
OpenTelemetry: it emits a step's trail (events, logged and traced), streams the agents'
updates, asks for answers and yields the turn's result, and keeps the turn's span open across
the steps (paused while the turn waits for people). It decides nothing and holds no
conversation: the host's :class:`~handoff_builder._engine.TurnEngine` does.

No ``from __future__ import annotations`` here, as in ``_host.py``: agent_framework reads
annotations of what it is handed.
"""

from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from agent_framework import AgentResponseUpdate, Content, WorkflowContext, WorkflowEvent

from ._engine import Done
from ._events import (
    HANDOFF_INTERMEDIATE_EVENT,
    HANDOFF_TURN_EVENT,
    RoutingStep,
    TurnAbandonedEvent,
)
from ._host_settings import HostSettings
from ._ledger import Trail
from ._logging import log_event
from ._runner import Sink, Streams
from ._telemetry import TurnTrace

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

__all__ = ["KeptEvents", "TurnOutlet"]

Context = WorkflowContext[Any, Any]


class KeptEvents:
    """The events a host emits (and its warnings), in order, once :meth:`keep` was called.

    For a host whose events travel further than its workflow's own stream: the Temporal
    workflow hands them on with its agent calls and its turn's outcome.
    """

    def __init__(self) -> None:
        self._items: list[object] | None = None

    def keep(self) -> None:
        """Keep the events emitted from now on."""
        self._items = []

    def add(self, item: object) -> None:
        if self._items is not None:
            self._items.append(item)

    def take(self) -> list[object]:
        """The events kept since the last take, in order."""
        items = self._items
        if not items:
            return []
        self._items = []
        return items


class TurnOutlet:
    """A host's events, outputs, requests and turn span (see the module docstring).

    ``author``: the name the host's own messages (an escalation's apology) are streamed under.
    ``conversation_id``: the hosted conversation's, for the turn's span.
    """

    def __init__(self, settings: HostSettings, author: str) -> None:
        self.settings = settings
        self.author = author
        self.conversation_id: str | None = None
        self._trace: TurnTrace | None = None
        self._paused: SpanContext | None = None  # the span of the run that waits for answers
        self.kept = KeptEvents()

    # -- the turn's span ---------------------------------------------------------------------

    def open(self) -> None:
        """A new user turn: its span starts."""
        self._trace = TurnTrace(self.settings.workflow_name, self.conversation_id)

    def trace(self) -> TurnTrace:
        """The open turn's trace (a turn restored from a checkpoint or a store starts a new one)."""
        if self._trace is None:
            name = self.settings.workflow_name
            self._trace = TurnTrace(name, self.conversation_id, self._paused)
            self._paused = None
        return self._trace

    @contextmanager
    def failing(self) -> Generator[None, None, None]:
        """End the turn's span with the error that escapes a step of the turn."""
        try:
            yield
        except BaseException as error:
            if self._trace is not None:
                self._trace.fail(error)
                self._trace = None
            raise

    # -- what goes out ---------------------------------------------------------------------------

    async def emit(self, trail: Sequence[Trail], ctx: Context) -> None:
        """The routing steps into the turn's trace; the events out, logged and traced."""
        trace = self.trace() if trail else None
        for item in trail:
            if isinstance(item, RoutingStep):
                cast(TurnTrace, trace).step(item)
                continue
            log_event(item, self.settings.argument_logging)
            cast(TurnTrace, trace).record(item)
            self.kept.add(item)
            if isinstance(item, str):
                await ctx.add_event(WorkflowEvent.warning(item))
            else:
                await ctx.add_event(WorkflowEvent(cast(Any, item.event_type), data=item))

    async def wait(self, requests: Sequence[Content], ctx: Context) -> None:
        """The turn waits for ``requests``: its span pauses till a later run, they go out."""
        self._paused = self.trace().pause()
        self._trace = None
        await self.ask(requests, ctx)

    @staticmethod
    async def ask(requests: Sequence[Content], ctx: Context) -> None:
        """Emit ``requests`` as agent_framework requests, under their own ids."""
        for request in requests:
            await ctx.request_info(request, Content, request_id=str(request.id))

    async def finish(self, done: Done, ctx: Context) -> None:
        """Yield the turn's result; in streaming runs the messages went out as updates already."""
        result = done.result
        if done.apology is not None and ctx.is_streaming():
            contents = list(done.apology.contents)
            update = AgentResponseUpdate(
                role="assistant", contents=contents, author_name=self.author
            )
            await ctx.yield_output(update)
        self.trace().end(result.status, len(result.handoffs))
        self._trace = None
        await ctx.add_event(WorkflowEvent(cast(Any, HANDOFF_TURN_EVENT), data=result))
        if not ctx.is_streaming():
            await ctx.yield_output(result)

    def abandoned(self, event: TurnAbandonedEvent) -> None:
        """Log the turn that is closed without running anything more (its result is returned)."""
        why = f"{event.reason}, {event.attempts} failed attempt(s)"
        log_event(
            f"turn abandoned ({why}): {event.error or 'no error'}", self.settings.argument_logging
        )

    def streams(self, ctx: Context) -> Streams | None:
        """Where this run's updates go: the run's output and events (``None``: not streamed)."""
        return _ContextStreams(self.settings, ctx) if ctx.is_streaming() else None


class _ContextStreams:
    """A streaming run's sinks, on its workflow context.

    A participant's updates go where the host streams them (its output, an intermediate event,
    or nowhere: :meth:`HostSettings.streamed_as`); an expert's are intermediate events under its
    name.
    """

    def __init__(self, settings: HostSettings, ctx: Context) -> None:
        self._settings = settings
        self._ctx = ctx

    def agent(self, name: str) -> Sink | None:
        streamed_as = self._settings.streamed_as(name)
        if streamed_as == "output":
            return self._ctx.yield_output
        return None if streamed_as is None else self._intermediate(None)

    def expert(self, name: str) -> Sink | None:
        return self._intermediate(name)

    def _intermediate(self, author: str | None) -> Sink:
        ctx = self._ctx

        async def as_event(update: AgentResponseUpdate) -> None:
            if author is not None and update.author_name is None:
                update.author_name = author
            await ctx.add_event(WorkflowEvent(cast(Any, HANDOFF_INTERMEDIATE_EVENT), data=update))

        return as_event
