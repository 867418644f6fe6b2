"""The agent-runner seam: an agent call goes out as a value and its run comes back as a value.

:class:`AgentRunner` is the seam (as a transport is to an HTTP client): the driver hands it each
:class:`~handoff_builder._engine.AgentCall` the turn engine asks for and gives the engine the
``AgentRun`` it returns. :class:`LocalAgentRunner`, the default, runs the call in this process on
the conversation as the engine holds it: the agent reads its view (with its edges' input
filters), its handoff calls are vetted by the manager and admitted by its gate, and its
delegations run its experts. The Temporal workflow's runner sends the call to an activity
instead, where a host loaded with the same conversation runs it with its own local runner. See
docs/architecture.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from agent_framework import AgentResponse, AgentResponseUpdate, Content, Message

from ._calls import call_id_of, calls_in, delegate_result, in_call_order, requests_in
from ._decision import ReviewVerdict
from ._delegation import (
    DEFAULT_MAX_DELEGATION_DEPTH,
    Delegations,
    DelegationScope,
    DueExperts,
    HistoryMode,
    Suspension,
    delegate_key,
    together,
)
from ._hooks import DEFAULT_HOOK_TIMEOUT, HandoffGate
from ._input_filters import HandoffInput, filtered_input
from ._participant import AgentRun, Participant
from ._payloads import validate_arguments
from ._requests import PendingRequests
from ._state import Continuation, DelegationFrame
from ._timeouts import within
from ._views import AgentView, HandoffToolCallFiltering

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ._engine import AgentCall, TurnEngine
    from ._events import DelegationEvent

__all__ = ["AgentRunner", "LocalAgentRunner", "RunnerSetup", "Sink", "Streams", "Views"]

Sink = Callable[[AgentResponseUpdate], Awaitable[None]]
"""Where a streaming run sends an agent's updates as they come."""


class Streams(Protocol):
    """Where a streaming run's updates go, by who writes them (``None``: not streamed)."""

    def agent(self, name: str) -> Sink | None:
        """The sink of participant ``name``'s updates."""
        ...

    def expert(self, name: str) -> Sink | None:
        """The sink of expert ``name``'s updates, in a delegation."""
        ...


class AgentRunner(Protocol):
    """Where a host's agents run: the one seam between deciding and running.

    The host sends each agent call out as an ``AgentCall`` and reads its run back as an
    ``AgentRun``; it never runs an agent itself. :class:`LocalAgentRunner`, the default, runs
    the call in this process; the Temporal workflow's runner sends it to an activity, where a
    host loaded with the same conversation runs it locally.
    """

    async def run(self, call: AgentCall, streams: Streams | None) -> AgentRun:
        """Run ``call`` on the conversation as it stands (the host's history and state)."""
        ...


@dataclass(frozen=True)
class RunnerSetup:
    """What a local runner is told once: the agents, how they read the history, their limits.

    ``filtering``: which of the other agents' tool calls an agent sees; ``handoff_tools``: the
    tools that count as handoffs; ``experts``: the agents as they answer delegated tasks;
    ``hook_timeout``: seconds an edge's hook may take (``None``: no limit of its own);
    ``author``: the host's id, whose notes the views know.
    """

    participants: Mapping[str, Participant]
    experts: Mapping[str, Participant] = field(default_factory=dict[str, Participant])
    filtering: HandoffToolCallFiltering = HandoffToolCallFiltering.HANDOFF_ONLY
    handoff_tools: frozenset[str] = frozenset()
    hook_timeout: float | None = DEFAULT_HOOK_TIMEOUT
    max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH
    author: str = "handoff_host"
    max_parallel_delegations: int | None = None

    @functools.cached_property
    def delegate_timeouts(self) -> dict[str, float]:
        """Each delegate's own time limit, by ``caller/tool`` (those that have one)."""
        agents = (*self.participants.values(), *self.experts.values())
        return {
            delegate_key(route.caller, route.tool_name): route.timeout
            for agent in agents
            for route in agent.delegates.values()
            if route.timeout is not None
        }


def payload_models(
    participants: Mapping[str, Participant],
) -> dict[tuple[str, str], type[BaseModel]]:
    """The typed payload of each edge that has one, by source and tool name.

    By source and tool: two sources may name their tools to one target alike.
    """
    return {
        (route.source, name): route.payload
        for participant in participants.values()
        for name, route in participant.routes.items()
        if route.payload is not None
    }


@dataclass(frozen=True)
class Views:
    """A conversation's views, by agent and by expert and mode: what a runner keeps of it."""

    agents: dict[str, AgentView] = field(default_factory=dict[str, AgentView])
    experts: dict[tuple[str, HandoffToolCallFiltering], AgentView] = field(
        default_factory=dict[tuple[str, HandoffToolCallFiltering], AgentView]
    )


class LocalAgentRunner:
    """Runs agent calls here, in this process, on the conversation ``engine`` holds.

    It keeps each agent's view of the history between calls (rebuilt when the engine's
    ``epoch`` changes: a history loaded, a turn left out of every view).
    """

    def __init__(self, engine: TurnEngine, setup: RunnerSetup) -> None:
        self._engine = engine
        self.setup = setup
        self._payload_models = engine.rules.payload_models
        self._input_filters = {
            (participant.name, name): (participant.routes[name].target, policy.input_filter)
            for participant in setup.participants.values()
            for name, policy in participant.policies.items()
            if policy.input_filter is not None
        }  # by source and tool: the target and the filter of each edge that has one
        self._views: dict[str, AgentView] = {}
        self._expert_views: dict[tuple[str, HandoffToolCallFiltering], AgentView] = {}
        self._epoch = engine.ledger.epoch

    async def run(
        self,
        call: AgentCall,
        streams: Streams | None,
        *,
        experts_apart: bool = False,
        so_far: AgentRun | None = None,
    ) -> AgentRun:
        """Run ``call`` here, on the conversation as it stands, within ``call.seconds``.

        The conversation is not changed: whoever asked for the call gives the engine the run.
        ``experts_apart``: the agent's delegate calls are not carried out here; they come back
        due (``AgentRun.due``) for a driver that runs each expert elsewhere. ``so_far``: the
        call's run goes on from there (its due experts answered, see ``_fanout``): the run
        returned is what it adds.
        """
        if call.kind == "run":
            work = self._invoke(call, streams, experts_apart, so_far)
        elif call.kind == "resolve":
            work = self._resolve(streams)
        else:
            work = self._carry_on(streams)
        return await within(call.seconds, work)

    def kept_views(self) -> Views:
        """Hand over the views of the conversation as it stands (for :meth:`keep_views`)."""
        self._fresh()
        views = Views(self._views, self._expert_views)
        self._views, self._expert_views = {}, {}  # handed over: this runner builds new ones
        return views

    def keep_views(self, views: Views) -> None:
        """Read the engine's conversation with ``views``, kept from an earlier host of it.

        Call it right after the engine loaded that conversation as it was when they were kept.
        """
        self._views, self._expert_views = views.agents, views.experts
        self._epoch = self._engine.ledger.epoch

    def view_of(self, agent: str) -> list[Message]:
        """What ``agent`` would receive if it ran now, without its edges' input filters."""
        return list(self._new_view(agent, self.setup.filtering).update(self._engine.ledger.history))

    # -- the three kinds of call -----------------------------------------------------------------

    async def ask(self, frame: DelegationFrame, streams: Streams | None) -> AgentRun:
        """Ask ``frame``'s expert here, as its caller's run would have (a due expert).

        Its run's one message is the result of the caller's delegate call; none when the
        expert waits for answers (``suspension``).
        """
        delegations = self._delegations(streams)
        answer = await delegations.run(frame)
        messages = [] if answer is None else [delegate_result(frame.call_id, answer, frame.caller)]
        sink = None if streams is None else streams.agent(frame.caller)
        if sink is not None and messages:  # the caller's stream shows the result, as it would
            result = messages[0]
            update = AgentResponseUpdate(
                role="tool", contents=list(result.contents), author_name=frame.caller
            )
            await sink(update)
        run = AgentRun(AgentResponse(messages=messages), (), frozenset())
        return _with_delegations(run, delegations)

    async def _invoke(
        self,
        call: AgentCall,
        streams: Streams | None,
        experts_apart: bool,  # noqa: FBT001 - passed through from run()
        so_far: AgentRun | None,
    ) -> AgentRun:
        participant = self.setup.participants.get(call.agent)
        if participant is None:
            raise ValueError(f"No agent named {call.agent!r} in this workflow.")
        before = so_far.delegations if so_far is not None else ()
        delegations = (
            self._delegations(streams, defer=experts_apart, earlier=before)
            if participant.delegates
            else None
        )
        view = await self._agent_view(call.agent)
        if so_far is not None:  # its own messages so far, as its tool loop would send them
            view = in_call_order([*view, *so_far.response.messages])
        sink = None if streams is None else streams.agent(call.agent)
        if sink is not None and delegations is not None and experts_apart:
            sink = _without_due_calls(sink, delegations)
        run = await participant.run(
            view,
            sink,
            self._engine.manager.vet_handoff,
            self._gate_for(participant, no_handoffs=call.no_handoffs),
            delegations,
            earlier=so_far.calls if so_far is not None else (),
        )
        return _with_delegations(run, delegations)

    async def _resolve(self, streams: Streams | None) -> AgentRun:
        """The waiting agent's answered requests carried out.

        Its run: the messages that settle them (approved tools run, declined ones refused), its
        answered handoff calls, vetted, a reviewer's verdict among them, and the delegations
        that approved delegate calls made.
        """
        pending = self._engine.ledger.pending
        name = str(pending.agent)
        then = pending.then or Continuation(name)
        participant = self.setup.participants[name]
        gate = self._gate_for(participant, no_handoffs=then.no_handoffs and then.agent == name)
        delegations = None
        if participant.delegates:  # an expert reads the history as it was before the calls
            start = self._message_with(list(pending.requests.values()))
            delegations = self._delegations(streams, history_end=start)
        verdicts: list[ReviewVerdict] = []
        vet = self._engine.manager.vet_handoff
        messages, calls = await pending.resolve(
            participant, vet, gate, delegations=delegations, verdicts=verdicts
        )
        verdict = verdicts[0] if verdicts else None
        run = AgentRun(AgentResponse(messages=messages), calls, frozenset(), verdict)
        return _with_delegations(run, delegations)

    async def _carry_on(self, streams: Streams | None) -> AgentRun:
        """The answers are experts', in delegations that waited: each expert carries on.

        Each answer goes out through the frames above it, one delegation after the other, in
        call order. The run's messages are the results of the caller's delegate calls for the
        shared history; a delegation whose expert waits again has none (``suspension``).
        """
        messages: list[Message] = []
        records: list[DelegationEvent] = []
        again: list[Suspension] = []
        for part in self._engine.ledger.pending.apart():
            result, delegations = await self._carry_on_one(part, streams)
            records.extend(delegations.records)
            outer = part.frames[0]
            if result is None and delegations.suspension is not None:
                again.append(delegations.suspension)
            else:
                messages.append(delegate_result(outer.call_id, str(result), outer.caller))
        run = AgentRun(AgentResponse(messages=messages), (), frozenset())
        return run._replace(
            delegations=tuple(records), suspension=together(again) if again else None
        )

    async def _carry_on_one(
        self, pending: PendingRequests, streams: Streams | None
    ) -> tuple[str | None, Delegations]:
        """One delegation that waited, carried on with its answers.

        The outermost call's result (``None``: it waits again, see the delegations'
        ``suspension``), and the delegations that made it.
        """
        frames = pending.frames
        inner = frames[-1]
        delegations = self._delegations(streams, frames, history_end=frames[0].history_end)
        if not inner.started:  # the delegate call itself waited for approval
            answer = next(iter(pending.answers.values()))
            if answer.approved:
                result = await delegations.run(replace(inner, started=True))
            else:
                result = delegations.decline(inner)
            return await delegations.carry_on(frames, result), delegations
        expert = self.setup.experts[inner.expert]
        nested = Delegations(delegations.scope, inner.depth, delegations.records)
        vet = self._engine.manager.vet_handoff
        resolved, _ = await pending.resolve(expert, vet, self._gate_for(expert), delegations=nested)
        moved = replace(inner, messages=(*inner.messages, *resolved))
        if nested.suspension is not None:  # an approved delegate of the expert waits in turn
            inside = nested.suspension
            delegations.suspension = Suspension(
                (*frames[:-1], moved, *inside.frames), inside.requests
            )
            return None, delegations
        return await delegations.carry_on(frames, await delegations.run(moved)), delegations

    # -- what an agent reads ---------------------------------------------------------------------

    def _fresh(self) -> None:
        """Drop the views of an earlier epoch of the engine's conversation."""
        if self._epoch != self._engine.ledger.epoch:  # new dicts: kept ones may be held elsewhere
            self._views, self._expert_views = {}, {}
            self._epoch = self._engine.ledger.epoch

    def _new_view(
        self, name: str, mode: HandoffToolCallFiltering, *, filtered: bool = False
    ) -> AgentView:
        """A view of the history for ``name``, without the abandoned turns.

        ``filtered``: it stops at the handoffs into ``name`` whose edge has an input filter
        (an agent's own view; :meth:`_agent_view` runs the filters).
        """
        stops = (
            frozenset(edge for edge, (target, _) in self._input_filters.items() if target == name)
            if filtered
            else frozenset[tuple[str, str]]()
        )
        setup = self.setup
        left_out = self._engine.ledger.left_out
        return AgentView(
            name, mode, setup.handoff_tools, setup.author, left_out=left_out, stops=stops
        )

    async def _agent_view(self, name: str) -> list[Message]:
        """What agent ``name`` reads when it runs now: its view, with its edges' input filters."""
        self._fresh()
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = self._new_view(name, self.setup.filtering, filtered=True)
        history = self._engine.ledger.history
        messages = view.update(history)
        while view.due is not None:
            due = view.due
            handoff = due.handoff.handoff
            _, function = self._input_filters[(handoff.source, handoff.tool_name)]
            model = self._payload_models.get((handoff.source, handoff.tool_name))
            if model is not None:
                payload, _ = validate_arguments(model, json.loads(handoff.goal or "{}"))
                handoff = replace(handoff, payload=payload)
            data = HandoffInput(due.messages, handoff, due.call, due.result, due.note)
            view.apply(await filtered_input(function, data))
            messages = view.update(history)
        return in_call_order(messages)

    def _expert_input(self, expert: str, history: HistoryMode, end: int) -> list[Message]:
        """What ``expert`` reads of the first ``end`` shared messages before its task."""
        if history == "none":
            return []
        shared = self._engine.ledger.history
        mode = self.setup.filtering if history == "filtered" else HandoffToolCallFiltering.NONE
        if end < len(shared):  # a delegation carried on later: read that prefix afresh
            return in_call_order(self._new_view(expert, mode).update(shared[:end]))
        self._fresh()
        view = self._expert_views.get((expert, mode))
        if view is None:
            view = self._expert_views[expert, mode] = self._new_view(expert, mode)
        return in_call_order(view.update(shared))

    def _message_with(self, requests: Sequence[Content]) -> int:
        """The index of the first history message holding a call one of ``requests`` is about.

        The end of the history if none does.
        """
        wanted = {call_id_of(request) for request in requests}
        history = self._engine.ledger.history
        for index, message in enumerate(history):
            if any(c.type == "function_call" and c.call_id in wanted for c in message.contents):
                return index
        return len(history)

    # -- what a run may do -----------------------------------------------------------------------

    def _gate_for(self, participant: Participant, *, no_handoffs: bool = False) -> HandoffGate:
        """What the participant's edges allow in this run, asked with the conversation so far."""
        return HandoffGate(
            participant.policies,
            self._engine.ledger.history,
            self._engine.ledger.conversation_id,
            no_handoffs=no_handoffs,
            timeout=self.setup.hook_timeout,
        )

    def _delegations(
        self,
        streams: Streams | None,
        waiting: Sequence[DelegationFrame] = (),
        *,
        history_end: int | None = None,
        defer: bool = False,
        earlier: Sequence[DelegationEvent] = (),
    ) -> Delegations:
        """What one run's delegations need, with this turn's calls of each delegate counted.

        ``waiting``: the frames of a delegation that carries on; their calls count too, as do
        ``earlier`` delegations of the same run (it goes on after its due experts answered).
        ``defer``: the run's own delegate calls are due, not carried out (``DueExperts``).
        ``history_end``: experts read the shared history up to there, not to its end (the
        caller's response that made the calls is in the history by then).
        """
        used: dict[str, int] = {}
        turn = self._engine.ledger.turn
        finished = [*(turn.delegations if turn is not None else ()), *earlier]
        calls = [(r.caller, r.tool_name) for r in finished if r.outcome != "refused"]
        calls += [(frame.caller, frame.tool_name) for frame in waiting]
        for caller, tool_name in calls:
            key = delegate_key(caller, tool_name)
            used[key] = used.get(key, 0) + 1
        engine = self._engine

        def on_update(expert: str) -> Sink | None:
            return None if streams is None else streams.expert(expert)

        scope = DelegationScope(
            experts=self.setup.experts,
            inputs=self._expert_input,
            history_length=(
                (lambda: len(engine.ledger.history))
                if history_end is None
                else (lambda: history_end)
            ),
            on_update=on_update,
            max_depth=self.setup.max_delegation_depth,
            used=used,
            max_parallel=self.setup.max_parallel_delegations,
            timeouts=self.setup.delegate_timeouts,
            defer=defer,
        )
        return Delegations(scope)


def _with_delegations(run: AgentRun, delegations: Delegations | None) -> AgentRun:
    """``run`` with what ``delegations`` did in it.

    Its finished delegations, one that waits, and the experts that are due.
    """
    if delegations is None:
        return run
    waiting = delegations.suspension
    if waiting is not None and waiting.beside:  # they waited as their experts ran: call order
        waiting = waiting.ordered(calls_in(run.response.messages))
    return run._replace(
        delegations=tuple(delegations.records),
        suspension=waiting,
        due=_due_experts(run, delegations),
    )


def _without_due_calls(sink: Sink, delegations: Delegations) -> Sink:
    """``sink`` without the updates that only mark due delegate calls as waiting.

    Those calls are answered once their experts, run elsewhere, answer; the stream shows their
    results then (:meth:`LocalAgentRunner.ask`), as it would have in one run.
    """

    async def send(update: AgentResponseUpdate) -> None:
        due = {frame.call_id for frame, _ in delegations.due}
        contents = update.contents
        if contents and all(
            c.type == "function_call" and c.user_input_request and str(c.call_id) in due
            for c in contents
        ):
            return
        await sink(update)

    return send


def _due_experts(run: AgentRun, delegations: Delegations) -> DueExperts | None:
    """The run's due experts, in call order, and whether the run goes on once they answered.

    It does not when another call of the response ended its tool loop: a handoff that stands
    (only a refused one lets the agent go on), a reviewer's verdict, a call that waits for a
    person, or a tool whose middleware ended the loop.
    """
    if not delegations.due:
        return None
    messages = run.response.messages
    calls = [
        str(c.call_id)
        for m in messages
        for c in m.contents
        if c.type == "function_call" and not c.user_input_request
    ]
    due = {frame.call_id for frame, _ in delegations.due}
    others = [r for r in requests_in(messages) if call_id_of(r) not in due]
    ended = (
        any(call.outcome != "rejected" for call in run.calls)
        or run.verdict is not None
        or run.tool_limit
        or bool(others)
    )
    return delegations.due_experts(calls, goes_on=not ended)
