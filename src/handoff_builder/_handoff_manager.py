""":class:`HandoffManager`: follows handoff calls, within the caps. Pure: no I/O of its own.

While an agent runs, each handoff call it makes is vetted (:meth:`HandoffManager.vet_handoff`)
and gets its tool result at once: ``Transferred.``, a tool error the agent can act on, or the cap
message. After the run, :meth:`HandoffManager.decide` turns the reply and its vetted calls into
one decision. The manager's counters are one frozen :class:`~handoff_builder._state.HandoffState`,
replaced at each decision.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

from agent_framework import Agent, Message
from typing_extensions import override

from ._caps import CAPS, HOP_CAPS
from ._decision import (
    HOST_NOTE_AUTHOR,
    AgentReply,
    Decision,
    EndTurn,
    Escalate,
    Event,
    HandoffCall,
    HandoffRequest,
    NextAgent,
    TurnStart,
)
from ._events import (
    EscalationEvent,
    EscalationReason,
    HandoffBlockedEvent,
    HandoffEvent,
    LimitReachedEvent,
    RoutingStep,
    TurnStatus,
)
from ._manager import CapOutcome, CodeRoute, GroupChatManager, ManagerSettings
from ._review import Review
from ._state import HandoffState, decode_handoff_state, encode_handoff_state
from ._vetting import vet_call
from .exceptions import HandoffHookError

__all__ = ["HandoffManager"]

logger = logging.getLogger("handoff_builder")

NO_VERDICT = "The reviewer neither approved the reply nor said what must change."
SAFE_AGENT_NOTE = (
    "The conversation was passed to you ({agent}) because {why}. Answer the user yourself in "
    "this reply: you cannot hand off now."
)
"""What a safe agent is told when a cap (or a blocked handoff) passes the turn to it."""
_FRESH_TURN = HandoffState(invocations=1)  # frozen; its dict is never changed in place


class HandoffManager(GroupChatManager):
    """Follows handoff calls: after each reply, the handoff the speaker made, if one was accepted.

    A call is accepted when the speaker was granted the tool and gave a non-empty argument, the
    coordinator is not handing straight back to the agent that just handed back, nor a receiver
    handing straight back, in its first try, to the agent that just handed to it (no ping-pong),
    and the turn is within its caps: ``max_handoffs_per_turn`` handoffs (hand-backs included)
    and ``max_iterations`` agent invocations per user message. A refused call is a tool error the
    agent can act on; past ``max_rejected_handoffs`` refused attempts in one turn, the turn
    escalates. A cap that trips ends the turn with an escalation to a human.
    """

    def __init__(self, settings: ManagerSettings) -> None:
        super().__init__(max_iterations=settings.max_iterations)
        for name in ("max_handoffs_per_turn", "max_rejected_handoffs"):
            if getattr(settings, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(settings, name)}.")
        self.settings = settings
        self.initial_agent = settings.initial_agent
        self.routes = settings.routes
        self.agents = frozenset(settings.agents) | {settings.initial_agent} | set(settings.routes)
        self._state = HandoffState()
        # (from, to) of the turn's latest handoff since a hand-back, for ``with_bounce_guard``.
        # Not part of the saved state (its shape is what earlier releases read): after a restore
        # in the middle of a turn the guard lets that turn's next hand-back through.
        self._last_handoff: tuple[str, str] | None = None

    @property
    def state(self) -> HandoffState:
        """The counters of the open turn (a frozen record, replaced at each decision)."""
        return self._state

    # -- while an agent runs --------------------------------------------------------------------

    @override
    def vet_handoff(self, request: HandoffRequest, earlier: Sequence[HandoffCall]) -> HandoffCall:
        """Accept the call, refuse it with a tool error, or stop the turn at a cap (``vet_call``).

        A call to a handoff the agent does not have in this run is always refused (a refused
        attempt, even beside a call that stands).
        """
        return vet_call(self.settings, self._state, request, earlier, self._last_handoff)

    # -- decisions --------------------------------------------------------------------------------

    @override
    async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
        """A new user message: fresh counters; start at the initial or the previous agent."""
        del history
        self._state = _FRESH_TURN
        self._last_handoff = None
        first = self._first_speaker(start)
        by = "initial_agent" if first == self.initial_agent else "previous_agent"
        return NextAgent(first, step=RoutingStep("start", "code", by, None, first))

    @override
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        """The accepted handoff routes; else the turn ends (or continues, autonomously)."""
        speaker = reply.agent
        tally = self._tally(reply)
        events = tally.events
        if tally.rejected != self._state.rejected:
            self._update(rejected=tally.rejected)
        # A call tripped a cap (never in a safe agent's run: its calls are refused), or the tool
        # loop stopped before the model answered.
        stopped = "tool_limit" if reply.tool_limit else tally.cap
        if stopped is not None:
            return self._at_cap(stopped, speaker, events, tally.tripped)
        safe = self._safe_agent_replied(reply, events)
        if safe is not None:
            return safe
        if tally.accepted is not None:
            decision = self._hand_over(tally.accepted, events)
        elif self._blocked_outcome(events):
            return self._at_cap("blocked_handoff", speaker, events)
        elif self._reviews_now(speaker) and (reply.verdict is not None or not reply.unfinished):
            decision = self._reviewed(reply, events)  # a verdict stands, even beside a request
        elif reply.unfinished:
            decision = NextAgent(speaker, events=tuple(events))  # the same invocation goes on
        else:
            decision = await self._after_reply(history, reply, events)
        # Past the cap, the turn goes no further; an agent that answered keeps its answer.
        if isinstance(decision, NextAgent) and tally.rejected > self.settings.max_rejected_handoffs:
            return self._at_cap("rejected_handoffs", speaker, events)
        return decision

    def _safe_agent_replied(self, reply: AgentReply, events: list[Event]) -> Decision | None:
        """What follows a reply of the safe agent a cap forced (``None``: another agent's)."""
        safe = self._state.safe_agent
        if safe is None or safe[0] != reply.agent:
            return None
        if reply.unfinished:  # it waits for answers: it carries on, no handoffs, past caps
            return NextAgent(reply.agent, events=tuple(events), no_handoffs=True)
        # The safe agent answered: the turn ends with its reply, as the cap's outcome.
        step = RoutingStep("end", "code", "safe_agent", reply.agent)
        return EndTurn(cast(TurnStatus, safe[1]), events=tuple(events), step=step)

    def _blocked_outcome(self, events: list[Event]) -> bool:
        """A blocked handoff (not one a person declined) with an outcome of its own."""
        if (
            "blocked_handoff" not in self.settings.cap_outcomes
            or self._state.safe_agent is not None
        ):
            return False
        return any(
            isinstance(event, HandoffBlockedEvent) and event.reason != "declined"
            for event in events
        )

    def _at_cap(
        self,
        cap: EscalationReason,
        speaker: str,
        events: list[Event],
        call: HandoffCall | None = None,
        target: str | None = None,
    ) -> Decision:
        """What the cap's outcome says: escalate (the default), end the turn, or the safe agent.

        Returning to the user after a handoff call tripped the cap lets the caller answer once
        more, without handoff tools: the call ended its run before it could write a reply.
        """
        kind = CAPS[cap]
        outcome = self.settings.cap_outcomes.get(cap, CapOutcome.ESCALATE)
        limit = kind.limit_in(self.settings)
        shown = kind.step_limit(self.settings)
        count = kind.count_in(self._state)
        if outcome == CapOutcome.ESCALATE:
            return self._escalate(cap, speaker, events, call, target)
        if outcome == CapOutcome.RETURN_TO_USER and call is not None:
            events = [*events, LimitReachedEvent(cap, speaker, limit)]
            outcome = speaker
        if outcome == CapOutcome.RETURN_TO_USER:
            reached = LimitReachedEvent(cap, speaker, limit)
            step = RoutingStep("limit", "code", cap, speaker, None, shown, count)
            return EndTurn(cast(TurnStatus, cap), events=(*events, reached), step=step)
        safe = str(outcome)
        self._update(safe_agent=(safe, cap))
        step = RoutingStep("route", "code", cap, speaker, safe, shown, count)
        note = SAFE_AGENT_NOTE.format(agent=safe, why=kind.safe_agent_reason.format(limit=limit))
        return NextAgent(
            safe, input=(_host_note(note),), events=tuple(events), step=step, no_handoffs=True
        )

    def _update(self, **changes: object) -> None:
        self._state = replace(self._state, **changes)

    def _tally(self, reply: AgentReply) -> _Tally:
        """What the reply's vetted handoff calls add up to."""
        tally = _Tally(events=[], rejected=self._state.rejected)
        skipped: list[HandoffCall] = []
        for call in reply.handoff_calls:
            if call.blocked is not None:
                tally.events.append(_blocked(call))
                if call.blocked != "declined":  # a human said no; the model did nothing wrong
                    tally.rejected += 1
            if call.outcome == "transferred":
                tally.accepted = tally.accepted or call
            elif call.outcome == "escalated":
                tally.tripped = tally.tripped or call
            elif call.outcome == "not_performed":
                skipped.append(call)
            elif call.outcome == "awaiting_approval":
                tally.awaiting = tally.awaiting or call
        followed = tally.accepted or tally.tripped or tally.awaiting
        if skipped and followed is not None:
            tally.events.append(_duplicates_warning(reply.agent, followed, skipped))
        return tally

    def _hand_over(self, call: HandoffCall, events: list[Event]) -> Decision:
        route = call.route
        payload = call.payload if route.payload is not None else None
        handoff = HandoffEvent(
            route.source,
            route.target,
            call.argument,
            route.tool_name,
            call.call_id,
            route.kind,
            payload,
        )
        state = self._state
        turns = state.autonomous_turns
        if route.source in turns:
            turns = {agent: n for agent, n in turns.items() if agent != route.source}
        back = (route.source, route.target) if route.edge.returns else state.last_hand_back
        reviewing = None if self._reviews_now(route.source) else state.reviewing
        self._last_handoff = None if route.edge.returns else (route.source, route.target)
        self._state = replace(
            state,
            invocations=state.invocations + 1,
            handoffs=state.handoffs + 1,
            autonomous_turns=turns,
            last_hand_back=back,
            reviewing=reviewing,  # a reviewer that hands off ends its review: not approved
        )
        return NextAgent(route.target, handoff=handoff, events=(*events, handoff))

    async def _after_reply(
        self, history: Sequence[Message], reply: AgentReply, events: list[Event]
    ) -> Decision:
        """A finished reply without a handoff: termination, the speaker's route, autonomy."""
        speaker = reply.agent
        review = self.settings.reviews.get(speaker)
        if review is not None:  # before anything that ends the turn: the reply is held
            return self._to_review(review, events)
        condition = self.settings.termination_condition
        if condition is not None:
            verdict = condition(history)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict:
                step = RoutingStep("end", "code", "termination_condition", speaker)
                return self._end_loop(speaker, EndTurn(events=tuple(events), step=step))
        route = self.settings.code_routes.get(speaker)
        if route is not None:
            return await self._route(route, history, reply, events)
        mode = self.settings.autonomous
        if mode is None or not mode.allows(speaker):  # the agent answered: the model's choice
            return EndTurn(events=tuple(events), step=RoutingStep("end", "model", "reply", speaker))
        turns = self._state.autonomous_turns.get(speaker, 0)
        if turns >= mode.limit(speaker):
            limit = LimitReachedEvent("autonomous_turns", speaker, mode.limit(speaker))
            return self._end_loop(speaker, EndTurn("autonomous_limit", events=(*events, limit)))
        if self._state.invocations >= self.max_iterations:
            return self._at_cap("max_iterations", speaker, events)
        self._update(
            invocations=self._state.invocations + 1,
            autonomous_turns={**self._state.autonomous_turns, speaker: turns + 1},
        )
        prompt = Message(role="user", contents=[mode.prompt(speaker)])
        step = RoutingStep(
            "continue", "code", "autonomous_mode", speaker, speaker, mode.limit(speaker), turns + 1
        )
        return NextAgent(speaker, input=(prompt,), events=tuple(events), step=step)

    async def _route(
        self, route: CodeRoute, history: Sequence[Message], reply: AgentReply, events: list[Event]
    ) -> Decision:
        """Code picks the next agent (``with_route``); a hop like a handoff, counted and capped."""
        speaker, by = reply.agent, f"route:{route.name}"
        found: object = route.target
        if route.function is not None:
            try:
                found = route.function(history, reply)
                if inspect.isawaitable(found):
                    found = await found
            except Exception as error:
                raise HandoffHookError(speaker, "?", by, "route", error) from error
        if isinstance(found, Agent):
            found = found.name
        if found is None:
            return EndTurn(events=tuple(events), step=RoutingStep("end", "code", by, speaker))
        if not isinstance(found, str) or found not in self.agents or found == speaker:  # pyright: ignore[reportUnnecessaryIsInstance] - a function may return anything
            named = found if isinstance(found, str) else None  # pyright: ignore[reportUnnecessaryIsInstance]
            blocked = HandoffBlockedEvent(speaker, by, "unknown_target", "", named, repr(found))
            return EndTurn(events=(*events, blocked), step=RoutingStep("end", "code", by, speaker))
        target = found
        state = self._state
        for cap in HOP_CAPS:
            if cap.reached(self.settings, state):
                return self._at_cap(cap.name, speaker, events, target=target)
        handoff = HandoffEvent(speaker, target, "", by, "", "handoff", None, "code")
        self._update(invocations=state.invocations + 1, handoffs=state.handoffs + 1)
        step = RoutingStep("route", "code", by, speaker, target)
        return NextAgent(target, handoff=handoff, events=(*events, handoff), step=step)

    def _reviews_now(self, speaker: str) -> bool:
        """True when ``speaker`` is the reviewer the reply under review was given to."""
        reviewing = self._state.reviewing
        return reviewing is not None and reviewing[1] == speaker

    def _to_review(self, review: Review, events: list[Event]) -> Decision:
        """The producer replied: its reviewer runs next, told what to review (a code step)."""
        state = self._state
        if state.invocations >= self.max_iterations:
            return self._at_cap("max_iterations", review.producer, events)
        rounds = len(state.review_feedback)
        self._update(
            invocations=state.invocations + 1, reviewing=(review.producer, review.reviewer)
        )
        note = _host_note(review.reviewer_note(rounds + 1))
        step = RoutingStep(
            "review", "code", "review", review.producer, review.reviewer, review.max_rounds, rounds
        )
        return NextAgent(review.reviewer, input=(note,), events=tuple(events), step=step)

    def _reviewed(self, reply: AgentReply, events: list[Event]) -> Decision:
        """The reviewer's verdict: approval ends the turn; changes go back, up to the cap.

        A reviewer that answers without calling either tool has not approved: its text is taken
        as the feedback.
        """
        producer, reviewer = cast("tuple[str, str]", self._state.reviewing)
        review = self.settings.reviews[producer]
        verdict = reply.verdict
        self._update(reviewing=None)
        if verdict is not None and verdict.kind == "approve":
            return EndTurn(
                events=tuple(events), step=RoutingStep("end", "model", "approve", reviewer)
            )
        feedback = verdict.text if verdict is not None else _reply_text(reply) or NO_VERDICT
        found = (*self._state.review_feedback, feedback)
        self._update(review_feedback=found)
        rounds = len(found)
        if rounds >= review.max_rounds:
            escalation = EscalationEvent(
                "review_rounds", reviewer, review.max_rounds, producer, feedback, found
            )
            step = RoutingStep(
                "escalate", "code", "review_rounds", reviewer, None, review.max_rounds, rounds
            )
            return Escalate(escalation, events=(*events, escalation), step=step)
        if self._state.invocations >= self.max_iterations:
            return self._at_cap("max_iterations", reviewer, events)
        self._update(invocations=self._state.invocations + 1)
        note = _host_note(review.producer_note(rounds, feedback))
        step = RoutingStep(
            "review",
            "model" if verdict is not None else "code",
            "request_changes",
            reviewer,
            producer,
            review.max_rounds,
            rounds,
        )
        return NextAgent(producer, input=(note,), events=tuple(events), step=step)

    def _end_loop(self, speaker: str, decision: EndTurn) -> EndTurn:
        turns = self._state.autonomous_turns
        if speaker in turns:
            self._update(autonomous_turns={a: n for a, n in turns.items() if a != speaker})
        return decision

    def _escalate(
        self,
        cap: EscalationReason,
        speaker: str,
        events: list[Event],
        call: HandoffCall | None = None,
        target: str | None = None,
    ) -> Escalate:
        escalation = EscalationEvent(
            cap,
            speaker,
            CAPS[cap].limit_in(self.settings),
            (call.route.target or None) if call else target,  # "": no such handoff
            call.argument if call else None,
        )
        return Escalate(escalation, events=(*events, escalation))

    def _first_speaker(self, start: TurnStart) -> str:
        back = self.settings.return_to_previous
        if start.return_to_previous is not None:
            back = start.return_to_previous
        previous = start.previous_agent
        if not back or previous is None or previous == self.initial_agent:
            return self.initial_agent
        if previous not in self.agents:
            logger.warning(
                "The previous agent %r is not a participant any more; starting at %r.",
                previous, self.initial_agent,
            )  # fmt: skip
            return self.initial_agent
        return previous

    # -- state ------------------------------------------------------------------------------------

    @override
    def save_state(self) -> dict[str, object]:
        """The counters of the open turn, as JSON."""
        return encode_handoff_state(self._state)

    @override
    def restore_state(self, state: Mapping[str, object]) -> None:
        """Restore what :meth:`save_state` returned (checked)."""
        self._state = decode_handoff_state(state) if state else HandoffState()
        self._last_handoff = None


@dataclass
class _Tally:
    events: list[Event]
    rejected: int
    accepted: HandoffCall | None = None
    tripped: HandoffCall | None = None
    awaiting: HandoffCall | None = None

    @property
    def cap(self) -> EscalationReason | None:
        """The cap a call tripped, if one did."""
        return self.tripped.escalation if self.tripped is not None else None


def _host_note(text: str) -> Message:
    """A note from the host to the next agent (not part of the turn's reply to the user)."""
    return Message(role="user", contents=[text], author_name=HOST_NOTE_AUTHOR)


def _reply_text(reply: AgentReply) -> str:
    return " ".join(m.text for m in reply.messages if m.role == "assistant" and m.text).strip()


def _blocked(call: HandoffCall) -> HandoffBlockedEvent:
    route = call.route
    return HandoffBlockedEvent(
        route.source,
        route.tool_name,
        call.blocked,  # pyright: ignore[reportArgumentType]
        call.call_id,
        route.target or None,  # "": a handoff that does not exist
        call.arguments,
    )


def _duplicates_warning(speaker: str, followed: HandoffCall, skipped: list[HandoffCall]) -> str:
    names = ", ".join(call.route.tool_name for call in [followed, *skipped])
    return (
        f"Duplicate handoff requests in one response from {speaker!r} ({names}); "
        f"following the first, {followed.route.tool_name}."
    )
