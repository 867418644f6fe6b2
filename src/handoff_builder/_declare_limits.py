"""The limits of a turn a builder declares: caps and their outcomes, deadlines, autonomy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast

from agent_framework import Agent
from typing_extensions import Self

from ._arguments import (
    agent_or_name,
    check_function,
)
from ._config import AutonomousSettings
from ._declare import Declarations, Outcome, agent_name, at_least_one
from ._settings import (
    DEFAULT_AGENT_TIMEOUT,
    DEFAULT_AUTONOMOUS_PROMPT,
    DEFAULT_AUTONOMOUS_TURN_LIMIT,
    DEFAULT_HOOK_TIMEOUT,
    DEFAULT_TURN_TIMEOUT,
    CapOutcome,
)
from .exceptions import HandoffArgumentError

if TYPE_CHECKING:
    from ._manager import TerminationCondition


__all__ = ["LimitDeclarations"]


class LimitDeclarations(Declarations):
    """The builder's methods that bound a turn: how many hops, how long, what then."""

    def with_max_iterations(self, max_iterations: int, *, outcome: Outcome | None = None) -> Self:
        """At most this many agent invocations per user message; then the ``outcome``.

        Without this call the cap is 40, or, with autonomous mode, enough for every agent that
        runs in a turn to use all of its autonomous continuations (see ``docs/termination.md``).
        ``outcome`` (``None`` keeps the last one set; at first :attr:`CapOutcome.ESCALATE`): see
        :meth:`with_blocked_handoff_outcome`.
        """
        self._config.max_iterations = at_least_one("max_iterations", max_iterations)
        self._outcome("max_iterations", outcome)
        return self

    def with_max_handoffs_per_turn(
        self,
        max_handoffs: int,
        *,
        escalation_message: str | None = None,
        outcome: Outcome | None = None,
    ) -> Self:
        """At most this many handoffs per user message, hand-backs and routes included.

        One more handoff ends the turn with the ``outcome``; by default the user gets
        ``escalation_message`` (a short apology; ``None`` keeps the default) and the turn is
        escalated to a human. Without this call the cap is 4 when the workflow has hand-back
        edges (the seeds' hand-back pattern), else 3.
        """
        self._config.max_handoffs = at_least_one("max_handoffs", max_handoffs)
        if escalation_message is not None:
            if not escalation_message.strip():
                raise ValueError("escalation_message must not be blank; the user must be told.")
            self._config.escalation_message = escalation_message
        self._outcome("handoff_cap", outcome)
        return self

    def with_max_rejected_handoffs(
        self, max_rejected: int, *, outcome: Outcome | None = None
    ) -> Self:
        """At most this many refused handoff attempts per message (default 3); then ``outcome``.

        A refused attempt is a handoff call with an empty goal or summary or invalid arguments, to
        a handoff the agent does not have in that run (another agent's, one of its own not
        offered, one that does not exist), straight back after a hand-back, or one its edge's
        ``on_handoff`` vetoed. The agent gets a tool error each time, as it runs, and may try
        again; one more refused attempt ends the turn (by
        default with the apology and an escalation, ``reason="rejected_handoffs"``), so a model
        that keeps retrying cannot loop.
        """
        self._config.max_rejected = at_least_one("max_rejected", max_rejected)
        self._outcome("rejected_handoffs", outcome)
        return self

    def with_bounce_guard(self, *, enabled: bool = True) -> Self:
        """Refuse a receiver's first hand-back straight to the agent that just handed to it.

        With the guard, when ``a`` hands the conversation to ``b`` and ``b``'s first hand-back
        call goes straight back to ``a`` (no new user message), that call is refused with a tool
        error that tells ``b`` to answer the user's request itself (``reason="ping_pong"``, one
        refused attempt). A second hand-back in the same run stands: ``b`` was told and still
        finds nothing of the request its own. Off by default; small models tend to hand a
        conversation straight back instead of answering it (docs/evals.md). What the guard
        remembers is not saved with the conversation's state: after a restore in the middle of
        a turn, that turn's next hand-back is not refused.
        """
        self._config.bounce_guard = enabled
        return self

    def with_blocked_handoff_outcome(self, outcome: Outcome | None) -> Self:
        """What a blocked handoff does to the turn (by default: nothing, the agent carries on).

        A blocked handoff is a refused handoff call (the agent was not granted the tool, it does
        not exist, its arguments were invalid, a hook vetoed it...; not one a person declined).
        The outcome, like a cap's:

        * :attr:`CapOutcome.ESCALATE`: the turn goes to a human, with the apology;
        * :attr:`CapOutcome.RETURN_TO_USER`: the turn ends with the last reply;
        * an agent (the safe agent): it runs once, with no handoff tools, and the turn ends with
          its reply (status ``"blocked_handoff"``), so a run that tried to leave the graph still
          answers;
        * ``None``: back to the default (the agent carries on); an agent an earlier call named
          stays a participant.
        """
        if outcome is None:
            self._config.cap_outcomes.pop("blocked_handoff", None)
            return self
        self._outcome("blocked_handoff", outcome)
        return self

    def _outcome(self, cap: str, outcome: Outcome | None) -> None:
        if outcome is None:
            return
        if isinstance(outcome, Agent):
            self.add_participants(cast("Agent", outcome))
        elif not isinstance(outcome, CapOutcome):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "outcome",
                f"outcome must be a CapOutcome or an agent_framework.Agent (the safe agent), not "
                f"{type(outcome).__name__}.",
            )
        self._config.cap_outcomes[cap] = outcome

    def with_timeouts(
        self,
        *,
        agent_call: float | None = DEFAULT_AGENT_TIMEOUT,
        turn: float | None = DEFAULT_TURN_TIMEOUT,
        hook: float | None = DEFAULT_HOOK_TIMEOUT,
    ) -> Self:
        """Deadlines: seconds one agent call may take, one user turn, one hook (``None``: no limit).

        The defaults are :data:`~handoff_builder.DEFAULT_AGENT_TIMEOUT` (120 s: one model
        response with its own tool calls) and :data:`~handoff_builder.DEFAULT_TURN_TIMEOUT`
        (600 s: every hop of the turn). Past either, the running call is cancelled and the turn
        ends with status ``"agent_timeout"`` or ``"turn_timeout"`` and a
        :class:`~handoff_builder.TurnTimeoutEvent`; nothing of the cancelled call is kept, so the
        conversation stays valid and the next message carries on. A turn's deadline starts again
        where it resumes (after a restore, or once its requests were answered).

        ``hook`` (default :data:`~handoff_builder.DEFAULT_HOOK_TIMEOUT`, 30 s) bounds each answer
        of an edge's async ``is_enabled``, ``approval`` and ``on_handoff``: one that gives none in
        time is cancelled and raises :class:`~handoff_builder.HandoffHookError` naming its edge,
        as if it had failed. Hooks run inside the agent call, so its deadline bounds them too.
        """
        for name, value in (("agent_call", agent_call), ("turn", turn), ("hook", hook)):
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)  # pyright: ignore[reportUnnecessaryIsInstance]
                or value <= 0
            ):
                raise ValueError(f"{name} must be a positive number of seconds or None, got "
                                 f"{value!r}.")  # fmt: skip
        self._config.agent_timeout = None if agent_call is None else float(agent_call)
        self._config.turn_timeout = None if turn is None else float(turn)
        self._config.hook_timeout = None if hook is None else float(hook)
        return self

    def with_termination_condition(self, condition: TerminationCondition | None) -> Self:
        """End the turn when ``condition(conversation)`` is true (sync or async).

        It is evaluated on the whole conversation after each agent reply without a handoff (a
        handoff always routes). It matters with autonomous mode; the last call wins, ``None``
        removes it.
        """
        if condition is not None:
            check_function(
                condition, "condition", "The termination condition",
                "one argument, the conversation", 1,
            )  # fmt: skip
        self._config.termination_condition = condition
        return self

    def with_autonomous_mode(
        self,
        turn_limit: int | None = None,
        continuation_prompt: str | None = None,
        agents: Iterable[Agent | str] | None = None,
        agent_turn_limits: Mapping[Agent | str, int] | None = None,
        agent_continuation_prompts: Mapping[Agent | str, str] | None = None,
    ) -> Self:
        """Run an agent that replies without a handoff again, with a continuation prompt.

        Args:
            turn_limit: Continuations per agent per user message (default 50), for agents
                without their own limit. An agent that never hands off runs 1 + limit times.
            continuation_prompt: The user message added before each continuation (default
                "User did not respond. Continue assisting autonomously.").
            agents: Only these agents loop (``None`` or empty: every participant).
            agent_turn_limits: Per-agent limits, keyed by agent or name.
            agent_continuation_prompts: Per-agent prompts, keyed by agent or name.

        Each call replaces every earlier autonomous setting. Counters are per agent and reset
        when that agent hands off, when its loop ends, and on every new user message.
        """
        limit = DEFAULT_AUTONOMOUS_TURN_LIMIT if turn_limit is None else turn_limit
        if limit <= 0:
            raise ValueError("Turn limit must be greater than zero.")
        allow = list(agents) if agents is not None else None
        if allow is not None and any(agent is None for agent in allow):  # pyright: ignore[reportUnnecessaryComparison]
            raise HandoffArgumentError("agents", "One or more autonomous agents are None.")
        allow = (
            None
            if allow is None
            else [agent_or_name(agent, f"agents[{i}]") for i, agent in enumerate(allow)]
        )
        for argument, mapping in (
            ("agent_turn_limits", agent_turn_limits),
            ("agent_continuation_prompts", agent_continuation_prompts),
        ):
            for key in mapping or {}:
                agent_or_name(key, f"a key of {argument}")
        limits = list((agent_turn_limits or {}).items())
        for agent, value in limits:
            if value <= 0:
                raise ValueError(
                    f"Turn limit for agent {agent_name(agent)!r} must be greater than zero."
                )
        prompts = list((agent_continuation_prompts or {}).items())
        for agent, prompt in prompts:
            if not prompt:
                raise ValueError(
                    f"Continuation prompt for agent {agent_name(agent)!r} must not be empty."
                )
        self._config.autonomous = AutonomousSettings(
            turn_limit=limit,
            continuation_prompt=continuation_prompt or DEFAULT_AUTONOMOUS_PROMPT,
            agents=allow or None,
            agent_turn_limits=limits,
            agent_continuation_prompts=prompts,
        )
        return self
