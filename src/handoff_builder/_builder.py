"""The fluent :class:`HandoffWorkflowBuilder`: it records a configuration; ``build()`` compiles.

Importing it imports none of the runtime (agent_framework's workflows, the host, the managers,
the events): what it records is made of :mod:`._settings` and :mod:`._config`. ``build()``,
``lint()`` and ``to_mermaid()`` import the runtime when first called.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast, overload

from agent_framework import Agent

from ._arguments import (
    agent_argument,
    agent_or_name,
    agents_argument,
    check_edge_hook,
    check_function,
    check_input_filter,
    int_argument,
    label,
)
from ._config import AutonomousSettings, BuildConfig, DelegateEdge, Edge, HandBack
from ._instructions import DEFAULT_HANDOFF_INSTRUCTIONS
from ._settings import (
    DEFAULT_AGENT_TIMEOUT,
    DEFAULT_AUTONOMOUS_PROMPT,
    DEFAULT_AUTONOMOUS_TURN_LIMIT,
    DEFAULT_HOOK_TIMEOUT,
    DEFAULT_LOGGED_ARGUMENT_LENGTH,
    DEFAULT_MAX_MODEL_CALLS,
    DEFAULT_MAX_REVIEW_ROUNDS,
    DEFAULT_TURN_TIMEOUT,
    HISTORY_MODES,
    ArgumentLogging,
    CapOutcome,
    EdgePolicy,
    HandoffHook,
    HandoffPredicate,
    HandoffToolCallFiltering,
    HistoryMode,
    ModelInputs,
    Redaction,
)
from .exceptions import HandoffArgumentError

if TYPE_CHECKING:
    from agent_framework import CheckpointStorage
    from pydantic import BaseModel

    from ._config import ManagerFactory
    from ._input_filters import InputFilter
    from ._lint import LintFinding
    from ._manager import RouteFunction, TerminationCondition
    from ._workflow import HandoffWorkflow

__all__ = ["HandoffWorkflowBuilder", "Outcome", "agent_names", "recording_model_inputs"]

Outcome: TypeAlias = "CapOutcome | Agent[Any]"
"""A cap's outcome: a :class:`CapOutcome`, or an agent (the safe agent)."""

logger = logging.getLogger("handoff_builder")


class HandoffWorkflowBuilder:
    """Builds a handoff workflow: agents pass one shared conversation to each other by tool calls.

    Mirrors .NET's ``HandoffWorkflowBuilder``; every ``with_*`` method returns the builder and
    may be called in any order. ``build()`` checks the whole configuration, reports every problem
    at once (:class:`~handoff_builder.HandoffConfigurationError`), and returns an
    ``agent_framework.Workflow``. The agents passed in are never modified.

    Example:
        .. code-block:: python

            workflow = (
                HandoffWorkflowBuilder(triage)
                .with_handoff(triage, billing, reason="charges, invoices, plans")
                .with_handoffs(triage, [tech])
                .with_handoffs([billing, tech], triage)
                .build()
            )
            result = await workflow.run("I was charged twice")
    """

    def __init__(self, initial_agent: Agent) -> None:
        """Start a builder whose conversations begin at ``initial_agent``."""
        initial_agent = agent_argument(initial_agent, "initial_agent")
        self._config = BuildConfig(initial_agent, {id(initial_agent): initial_agent})
        self._reported: set[str] = set()  # lint findings already logged by build()

    @property
    def initial_agent(self) -> Agent:
        """The agent every conversation begins at (and starts again at after an idle reset)."""
        return cast(Agent, self._config.initial)

    # -- participants and edges -------------------------------------------------------------------

    def add_participants(self, *agents: Agent | Iterable[Agent]) -> HandoffWorkflowBuilder:
        """Add agents without edges (the default all-to-all mesh applies when no edge is declared).

        Adding the same agent object twice has no effect. Each must be an ``agent_framework.Agent``
        (a workflow or another kind of agent is a :class:`~handoff_builder.HandoffArgumentError`
        naming it, and none of them is added).
        """
        chosen = [
            agent
            for index, item in enumerate(agents)
            for agent in agents_argument(item, f"agents[{index}]", "agents")
        ]
        for agent in chosen:
            self._config.participants.setdefault(id(agent), agent)
        return self

    def with_handoff(
        self,
        source: Agent,
        target: Agent,
        reason: str | None = None,
        *,
        tool_name: str | None = None,
        payload: type[BaseModel] | None = None,
        on_handoff: HandoffHook | None = None,
        is_enabled: bool | HandoffPredicate = True,
        approval: bool | HandoffPredicate = False,
        input_filter: InputFilter | None = None,
    ) -> HandoffWorkflowBuilder:
        """Let ``source`` hand the conversation to ``target``.

        Args:
            source: The agent that gets the handoff tool.
            target: The agent the tool passes the conversation to.
            reason: When to use this handoff; it becomes the tool's description. Defaults to the
                target's description, else its name, else its instructions.
            tool_name: The tool's name; defaults to ``handoff_to_<target name>``.
            payload: A pydantic model the tool takes instead of the one-sentence ``goal``: its
                JSON schema is the tool's, the call's arguments are validated with it, and the
                validated instance reaches the target (in a note), ``HandoffEvent.payload``, the
                turn result, stores and checkpoints.
            on_handoff: Called (sync or async) with a :class:`HandoffContext` before the target
                runs; ``None`` lets the handoff go, a string vetoes it (the string is the calling
                agent's tool error).
            is_enabled: ``False``, or a predicate (sync or async) on a :class:`HandoffContext`
                asked before each run of ``source``: when false the tool is not offered.
            approval: ``True``, or a predicate on the call's :class:`HandoffContext`: the call
                then waits for a human's approval before anything routes (see
                ``docs/human-in-the-loop.md``).
            input_filter: Called (sync or async) with a :class:`HandoffInput` when ``target``
                is about to read this handoff: what it returns (a list of messages) is what
                ``target`` reads in place of its view so far; see
                ``docs/what-each-agent-sees.md``.
        """
        source_agent = agent_argument(source, "source")
        target_agent = agent_argument(target, "target")
        edge_name = f"the handoff from {label(source_agent)} to {label(target_agent)}"
        policy = _policy(
            on_handoff,
            is_enabled=is_enabled,
            approval=approval,
            input_filter=input_filter,
            edge=(source_agent, target_agent, edge_name),
        )
        self.add_participants(source_agent, target_agent)
        edge = Edge(source_agent, target_agent, reason, tool_name, "handoff", payload, policy)
        self._config.edges.append(edge)
        return self

    @overload
    def with_handoffs(
        self,
        source: Agent,
        targets: Iterable[Agent],
        /,
        *,
        payload: type[BaseModel] | None = None,
        on_handoff: HandoffHook | None = None,
        is_enabled: bool | HandoffPredicate = True,
        approval: bool | HandoffPredicate = False,
        input_filter: InputFilter | None = None,
    ) -> HandoffWorkflowBuilder: ...

    @overload
    def with_handoffs(
        self,
        sources: Iterable[Agent],
        target: Agent,
        /,
        reason: str | None = None,
        *,
        payload: type[BaseModel] | None = None,
        on_handoff: HandoffHook | None = None,
        is_enabled: bool | HandoffPredicate = True,
        approval: bool | HandoffPredicate = False,
        input_filter: InputFilter | None = None,
    ) -> HandoffWorkflowBuilder: ...

    def with_handoffs(
        self,
        first: Agent | Iterable[Agent],
        second: Agent | Iterable[Agent],
        /,
        reason: str | None = None,
        *,
        payload: type[BaseModel] | None = None,
        on_handoff: HandoffHook | None = None,
        is_enabled: bool | HandoffPredicate = True,
        approval: bool | HandoffPredicate = False,
        input_filter: InputFilter | None = None,
    ) -> HandoffWorkflowBuilder:
        """Declare several handoffs: one source to many targets, or many sources to one target.

        ``with_handoffs(triage, [billing, tech])`` gives triage a tool for each target;
        ``with_handoffs([billing, tech], triage, reason=...)`` gives each source a tool to
        triage. The agents are positional (``source=``/``targets=`` keywords are refused, so the
        direction of the edges can never be swapped by accident). ``payload``, ``on_handoff``,
        ``is_enabled``, ``approval`` and ``input_filter`` apply to every edge, as in
        :meth:`with_handoff`.
        """

        def declare(source: Agent, target: Agent, reason: str | None = None) -> None:
            self.with_handoff(
                source,
                target,
                reason,
                payload=payload,
                on_handoff=on_handoff,
                is_enabled=is_enabled,
                approval=approval,
                input_filter=input_filter,
            )

        if isinstance(first, Agent):
            if reason is not None:
                raise HandoffArgumentError(
                    "reason", "with_handoffs(source, targets) takes no reason; use with_handoff."
                )
            if isinstance(second, Agent):
                raise HandoffArgumentError(
                    "targets",
                    "with_handoffs(source, targets) takes a list of targets; for one target use "
                    "with_handoff(source, target).",
                )
            targets = agents_argument(second, "targets", "target agents")
            _check_hooks(
                first, targets, on_handoff=on_handoff, is_enabled=is_enabled, approval=approval,
                input_filter=input_filter,
            )  # fmt: skip
            for target in targets:
                declare(first, target)
            return self
        if _is_list(first) and _is_list(second):
            raise HandoffArgumentError(
                "targets",
                "with_handoffs takes (source, [targets]) or ([sources], target); got "
                f"{type(first).__name__} and {type(second).__name__}.",
            )
        sources = agents_argument(first, "sources", "source agents")
        target = agent_argument(second, "target")
        if reason is not None and not isinstance(reason, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "reason", f"reason must be a string, not {type(reason).__name__}."
            )
        for source in sources:
            _check_hooks(
                source, [target], on_handoff=on_handoff, is_enabled=is_enabled, approval=approval,
                input_filter=input_filter,
            )  # fmt: skip
        for source in sources:
            declare(source, target, reason)
        return self

    def with_hand_back(
        self,
        coordinator: Agent,
        specialists: Agent | Iterable[Agent] | None = None,
        reason: str | None = None,
        *,
        tool_name: str | None = None,
        payload: type[BaseModel] | None = None,
        on_handoff: HandoffHook | None = None,
        is_enabled: bool | HandoffPredicate = True,
        approval: bool | HandoffPredicate = False,
        input_filter: InputFilter | None = None,
    ) -> HandoffWorkflowBuilder:
        """Give specialists a tool to hand the conversation back to ``coordinator``.

        Each specialist gets ``transfer_back_to_<coordinator name>`` (or ``tool_name``) with a
        required ``summary``: what it did and what is still open (or ``payload``, a pydantic
        model, instead). ``specialists=None`` means every agent the coordinator can hand off to.
        The coordinator may not hand straight back to the agent that just handed back to it
        before the next user message (no ping-pong), and hand-backs count toward the per-message
        cap. ``on_handoff``, ``is_enabled``, ``approval`` and ``input_filter`` (the coordinator
        reads what it returns) are those of :meth:`with_handoff`.
        """
        coordinator_agent = agent_argument(coordinator, "coordinator")
        chosen = (
            None
            if specialists is None
            else agents_argument(specialists, "specialists", "specialist agents")
        )
        edge_name = f"the hand-back to {label(coordinator_agent)}"
        policy = _policy(
            on_handoff,
            is_enabled=is_enabled,
            approval=approval,
            input_filter=input_filter,
            edge=(coordinator_agent, None, edge_name),
        )
        self.add_participants(coordinator_agent, *(chosen or []))
        hand_back = HandBack(coordinator_agent, chosen, reason, tool_name, payload, policy)
        self._config.hand_backs.append(hand_back)
        return self

    def with_delegate(
        self,
        caller: Agent,
        expert: Agent,
        reason: str | None = None,
        *,
        tool_name: str | None = None,
        payload: type[BaseModel] | None = None,
        history: HistoryMode = "none",
        approval: bool = False,
        max_calls: int | None = None,
    ) -> HandoffWorkflowBuilder:
        """Let ``caller`` ask ``expert`` through a tool, and keep the conversation.

        Unlike a handoff, control does not pass: the caller gets a tool (``ask_<expert name>``,
        or ``tool_name``) that takes a required ``task`` (or ``payload``, a pydantic model); the
        expert runs on it with its own tools and instructions, and its final text is the tool's
        result. The caller then goes on, and may answer the user with it. The expert's messages
        are not added to the shared conversation (only the call and its result are), but they
        are in :attr:`HandoffTurnResult.delegations` and the ``handoff_delegated`` events.

        Args:
            caller: The agent that gets the tool: a participant, or another delegate's expert
                (delegates nest, up to :meth:`with_max_delegation_depth`).
            expert: The agent that answers. It need not be a participant; when it is one, it
                still runs with no handoff tools here.
            reason: When to ask; it becomes the tool's description. Defaults to the expert's
                description, else its name, else its instructions.
            tool_name: The tool's name; defaults to ``ask_<expert name>``, sanitised.
            payload: A pydantic model the tool takes instead of ``task``; the expert reads it
                as JSON after its label.
            history: What the expert reads before its task: ``"none"`` (the task alone),
                ``"full"`` (the whole shared conversation, unfiltered) or ``"filtered"`` (the
                conversation as the expert would see it as a participant, with the workflow's
                tool-call filtering and handoff notes).
            approval: The call waits for a person's approval before the expert runs; a declined
                call tells the caller so.
            max_calls: At most this many calls of the tool per user message; later calls get a
                tool error (``None``: no limit).

        A delegate cycle (an expert that, directly or through its own delegates, asks its
        caller) is refused by ``build()``.
        """
        caller_agent = agent_argument(caller, "caller")
        expert_agent = agent_argument(expert, "expert")
        if history not in HISTORY_MODES:
            raise ValueError(
                f"history must be one of {', '.join(map(repr, HISTORY_MODES))}, not {history!r}."
            )
        if not isinstance(approval, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "approval", f"approval must be a bool, not {type(approval).__name__}."
            )
        if max_calls is not None:
            max_calls = _at_least_one("max_calls", max_calls)
        self._config.delegates.append(
            DelegateEdge(
                caller_agent,
                expert_agent,
                reason,
                tool_name,
                payload,
                history,
                approval,
                max_calls,
            )
        )
        return self

    def with_review(
        self, producer: Agent, reviewer: Agent, *, max_rounds: int = DEFAULT_MAX_REVIEW_ROUNDS
    ) -> HandoffWorkflowBuilder:
        """Review each reply of ``producer`` before it goes to the user: bounded review.

        After ``producer`` replies without a handoff, ``reviewer`` runs with two tools:
        ``approve(note)`` ends the turn with the producer's reply; ``request_changes(feedback)``
        gives the turn back to the producer, which reads the feedback and writes its reply again
        (a reviewer that calls neither has not approved: its text is the feedback). The
        ``max_rounds``-th request for changes in one user message escalates the turn to a
        human (status ``"review_rounds"``), with every round's feedback in
        :attr:`EscalationEvent.evidence` and the last, still open, in ``goal``. Each review hop
        counts toward ``max_iterations`` (not toward the handoff cap), and is a ``"review"``
        step in the trace. A reviewer takes no part in the default all-to-all mesh.
        """
        producer_agent = agent_argument(producer, "producer")
        reviewer_agent = agent_argument(reviewer, "reviewer")
        self.add_participants(producer_agent, reviewer_agent)
        rounds = _at_least_one("max_rounds", max_rounds)
        self._config.reviews.append((producer_agent, reviewer_agent, rounds))
        return self

    def with_max_delegation_depth(self, depth: int) -> HandoffWorkflowBuilder:
        """How deeply delegations nest (default 3): an expert at this depth gets no delegates.

        A participant's expert is at depth 1, that expert's expert at depth 2, and so on.
        """
        self._config.max_delegation_depth = _at_least_one("depth", depth)
        return self

    # -- options ----------------------------------------------------------------------------------

    def with_instructions(self, instructions: str | None) -> HandoffWorkflowBuilder:
        """Handoff instructions added to each agent that can hand off, after its own instructions.

        ``{handoff_tools}`` in the text is replaced, for each agent, by the names of the handoff
        tools that agent has. ``None`` restores the default (.NET's text, naming the agent's
        tools); ``""`` turns them off.
        """
        self._config.instructions = (
            DEFAULT_HANDOFF_INSTRUCTIONS if instructions is None else instructions
        )
        return self

    def with_max_iterations(
        self, max_iterations: int, *, outcome: Outcome | None = None
    ) -> HandoffWorkflowBuilder:
        """At most this many agent invocations per user message; then the ``outcome``.

        Without this call the cap is 40, or, with autonomous mode, enough for every agent that
        runs in a turn to use all of its autonomous continuations (see ``docs/termination.md``).
        ``outcome`` (``None`` keeps the last one set; at first :attr:`CapOutcome.ESCALATE`): see
        :meth:`with_blocked_handoff_outcome`.
        """
        self._config.max_iterations = _at_least_one("max_iterations", max_iterations)
        self._outcome("max_iterations", outcome)
        return self

    def with_max_handoffs_per_turn(
        self,
        max_handoffs: int,
        *,
        escalation_message: str | None = None,
        outcome: Outcome | None = None,
    ) -> HandoffWorkflowBuilder:
        """At most this many handoffs per user message, hand-backs and routes included.

        One more handoff ends the turn with the ``outcome``; by default the user gets
        ``escalation_message`` (a short apology; ``None`` keeps the default) and the turn is
        escalated to a human. Without this call the cap is 4 when the workflow has hand-back
        edges (the seeds' hand-back pattern), else 3.
        """
        self._config.max_handoffs = _at_least_one("max_handoffs", max_handoffs)
        if escalation_message is not None:
            if not escalation_message.strip():
                raise ValueError("escalation_message must not be blank; the user must be told.")
            self._config.escalation_message = escalation_message
        self._outcome("handoff_cap", outcome)
        return self

    def with_max_rejected_handoffs(
        self, max_rejected: int, *, outcome: Outcome | None = None
    ) -> HandoffWorkflowBuilder:
        """At most this many refused handoff attempts per message (default 3); then ``outcome``.

        A refused attempt is a handoff call with an empty goal or summary or invalid arguments, to
        a handoff the agent does not have in that run (another agent's, one of its own not
        offered, one that does not exist), straight back after a hand-back, or one its edge's
        ``on_handoff`` vetoed. The agent gets a tool error each time, as it runs, and may try
        again; one more refused attempt ends the turn (by
        default with the apology and an escalation, ``reason="rejected_handoffs"``), so a model
        that keeps retrying cannot loop.
        """
        self._config.max_rejected = _at_least_one("max_rejected", max_rejected)
        self._outcome("rejected_handoffs", outcome)
        return self

    def with_blocked_handoff_outcome(self, outcome: Outcome | None) -> HandoffWorkflowBuilder:
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

    def with_route(
        self, source: Agent, route: Agent[Any] | str | RouteFunction, /
    ) -> HandoffWorkflowBuilder:
        """After ``source`` replies without a handoff, code picks the next agent.

        ``route`` is the agent that runs next (an agent or its name: checked when the workflow is
        built), or a function (sync or async) called with the conversation and the
        :class:`~handoff_builder.AgentReply`; it returns the next agent's name (or the agent), or
        ``None`` to end the turn. A name that is not a participant (or ``source`` itself) is
        refused at run time: a ``handoff_blocked`` event (``reason="unknown_target"``) and the
        turn ends. A route is a hop like a handoff (the handoff cap and ``max_iterations``
        count it); the trace records it as ``RoutingStep("route", "code", "route:<name>")`` and
        its ``HandoffEvent`` has ``decided_by="code"``. A handoff the model makes comes first: the
        route only runs when ``source`` answered without one, after the termination condition
        and before autonomous mode. One route per source.
        """
        source_agent = agent_argument(source, "source")
        if not isinstance(route, (Agent, str)):
            if not callable(route):
                raise HandoffArgumentError(
                    "route",
                    "route must be an agent_framework.Agent, its name or a function, not "
                    f"{type(route).__name__}.",
                )
            check_function(
                route,
                "route",
                f"The route of {label(source_agent)}",
                "two arguments, the conversation and the AgentReply",
                2,
                source=str(source_agent.name),
            )
        self.add_participants(source_agent)
        if isinstance(route, Agent):
            self.add_participants(cast("Agent", route))
        self._config.code_routes.append((source_agent, cast(Any, route)))
        return self

    def with_timeouts(
        self,
        *,
        agent_call: float | None = DEFAULT_AGENT_TIMEOUT,
        turn: float | None = DEFAULT_TURN_TIMEOUT,
        hook: float | None = DEFAULT_HOOK_TIMEOUT,
    ) -> HandoffWorkflowBuilder:
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

    def with_checkpointing(self, storage: CheckpointStorage | None) -> HandoffWorkflowBuilder:
        """Checkpoint every run of the built workflow to ``storage`` (``None``: no storage).

        As agent_framework's ``HandoffBuilder.with_checkpointing``: each agent invocation is its
        own superstep, so a checkpoint is taken after every hop, and
        ``workflow.run(checkpoint_id=...)`` restores from ``storage``. A run may still pass a
        ``checkpoint_storage`` of its own. Hosted conversations keep their state in their store
        either way, and do not read these checkpoints: give a ``ConversationHost`` a builder
        without one, or every hosted turn writes checkpoints nothing reads.
        """
        self._config.checkpoint_storage = storage
        return self

    def with_manager(self, factory: ManagerFactory) -> HandoffWorkflowBuilder:
        """Decide who speaks with another :class:`~handoff_builder.GroupChatManager`.

        ``factory`` is called once per ``build()`` with the compiled
        :class:`~handoff_builder.ManagerSettings` (agents, routes, caps) and returns the manager;
        a :class:`~handoff_builder.HandoffManager` subclass is such a factory. The agents keep
        their handoff tools, and the manager vets their calls. Hosted conversations
        (``ConversationHost``) run the manager too.
        """
        check_function(
            factory, "factory", "The manager factory", "one argument, the ManagerSettings", 1
        )
        self._config.manager_factory = factory
        return self

    def with_argument_logging(
        self, *, include: bool = True, max_length: int = DEFAULT_LOGGED_ARGUMENT_LENGTH
    ) -> HandoffWorkflowBuilder:
        """How handoff log lines show the goal or summary (events always keep all of it).

        Each handoff and hand-back is logged with its source, its target and its argument, cut to
        ``max_length`` characters (default 200) with a marker that gives the full length.
        ``include=False`` leaves arguments out of log lines, for deployments where goals carry
        personal data.
        """
        self._config.argument_logging = ArgumentLogging(
            include=bool(include), max_length=_at_least_one("max_length", max_length)
        )
        return self

    def with_model_inputs(
        self,
        *,
        redact: Redaction | None = None,
        max_calls: int = DEFAULT_MAX_MODEL_CALLS,
        trace: bool = False,
    ) -> HandoffWorkflowBuilder:
        """Keep what each model receives, with any chat client: each turn's ``model_calls``.

        Off by default (nothing is recorded and nothing kept). With it, before each model call of
        every agent run (the tool loop's calls, reviewers and delegated experts included), the
        messages the chat client is about to send, its instructions and other options and the
        tools' names are recorded as a :class:`~handoff_builder.ModelCall`: the view of
        ``handoff_builder.testing.received`` for a scripted agent, for any client.
        ``turn.model_calls`` holds the turn's calls in order, ``turn.received("billing")`` one
        agent's (``.rendered`` prints it).

        ``redact`` is applied to each recorded message (and to the instructions, as a system
        message) and returns the message to keep, e.g. :func:`~handoff_builder.redact_patterns`;
        the conversation and what the model receives are not changed. A redaction that raises
        keeps a placeholder in that message's place, never the message. ``max_calls`` (default
        :data:`~handoff_builder.DEFAULT_MAX_MODEL_CALLS`) bounds a turn's calls: the latest are
        kept, and each call's ``index`` says where it was. With ``trace=True`` each call is a
        ``handoff_builder.model_call`` span event too (the agent's span), for deployments whose
        agent calls run elsewhere (Temporal workers). The calls are kept in memory only: never in
        a store, a checkpoint or Temporal's history.
        """
        if redact is not None:
            check_function(
                redact, "redact", "The redaction of with_model_inputs", "one argument, a Message", 1
            )
        self._config.model_inputs = ModelInputs(
            redact=redact, max_calls=_at_least_one("max_calls", max_calls), trace=bool(trace)
        )
        return self

    def with_tool_call_filtering(
        self, filtering: HandoffToolCallFiltering
    ) -> HandoffWorkflowBuilder:
        """Which of the other agents' tool calls an agent sees (default ``HANDOFF_ONLY``).

        The shared history always keeps everything; only each agent's view is filtered.
        """
        if not isinstance(filtering, HandoffToolCallFiltering):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "filtering",
                f"filtering must be a HandoffToolCallFiltering, not {type(filtering).__name__}.",
            )
        self._config.filtering = filtering
        return self

    def enable_return_to_previous(self, enabled: bool = True) -> HandoffWorkflowBuilder:  # noqa: FBT001, FBT002 - .NET's and Python's signature
        """Start the next user message at the agent that ended the previous turn.

        Off by default (as in .NET): every user message starts at the initial agent.
        """
        self._config.return_to_previous = bool(enabled)
        return self

    def with_termination_condition(
        self, condition: TerminationCondition | None
    ) -> HandoffWorkflowBuilder:
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
    ) -> HandoffWorkflowBuilder:
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
                    f"Turn limit for agent {_name(agent)!r} must be greater than zero."
                )
        prompts = list((agent_continuation_prompts or {}).items())
        for agent, prompt in prompts:
            if not prompt:
                raise ValueError(
                    f"Continuation prompt for agent {_name(agent)!r} must not be empty."
                )
        self._config.autonomous = AutonomousSettings(
            turn_limit=limit,
            continuation_prompt=continuation_prompt or DEFAULT_AUTONOMOUS_PROMPT,
            agents=allow or None,
            agent_turn_limits=limits,
            agent_continuation_prompts=prompts,
        )
        return self

    def with_output_from(self, *agents: Agent | Iterable[Agent]) -> HandoffWorkflowBuilder:
        """In streaming runs, yield only these agents' updates as outputs (default: every agent).

        The others still speak and appear in the turn result and the conversation; their updates
        are not streamed unless they are listed in :meth:`with_intermediate_output_from`.
        """
        chosen = [
            agent
            for index, item in enumerate(agents)
            for agent in agents_argument(item, f"agents[{index}]", "output agents")
        ]
        self._config.output_from = (self._config.output_from or []) + chosen
        return self

    def with_intermediate_output_from(
        self, *agents: Agent | Iterable[Agent]
    ) -> HandoffWorkflowBuilder:
        """In streaming runs, send these agents' updates as ``handoff_intermediate`` events.

        Intermediate updates are not workflow outputs (``workflow.as_agent()`` does not forward
        them): use them for progress displays.
        """
        chosen = [
            agent
            for index, item in enumerate(agents)
            for agent in agents_argument(item, f"agents[{index}]", "intermediate agents")
        ]
        self._config.intermediate_from.extend(chosen)
        return self

    def with_name(self, name: str | None) -> HandoffWorkflowBuilder:
        """The workflow's name (blank values are ignored, as in .NET)."""
        if name and name.strip():
            self._config.name = name
        return self

    def with_description(self, description: str | None) -> HandoffWorkflowBuilder:
        """The workflow's description (blank values are ignored, as in .NET)."""
        if description and description.strip():
            self._config.description = description
        return self

    # -- build ------------------------------------------------------------------------------------

    def lint(self) -> list[LintFinding]:
        """Every problem at once: what ``build()`` refuses, and a graph that is likely a mistake.

        Each :class:`~handoff_builder.LintFinding` has a ``severity`` (``"error"``: the graph
        contradicts itself; ``"warning"``), a ``code``, the ``agents`` and a ``message`` saying how
        to fix it. Each problem ``build()`` refuses is an error finding (``delegate-cycle``,
        ``self-handoff``, ``tool-name-collision``...); the lint's own rules find an agent no
        handoff leads to (``unreachable-agent``, an error; not checked with a manager of your
        own), a specialist that cannot give the conversation back in a hand-back workflow
        (``no-way-back``), tools of one agent with the same description
        (``same-tool-description``), a tool name that had to be sanitised
        (``sanitised-tool-name``), and more (``docs/reference.md``). Errors come first. It never
        raises for the configuration: ``build()`` does.
        """
        from ._plan import lint

        return lint(self._config)

    def build(self, *, strict: bool = False) -> HandoffWorkflow:
        """Check the configuration and compile it into a :class:`HandoffWorkflow`.

        The result is an ``agent_framework.Workflow``: run it, stream it, checkpoint it or wrap it
        with ``as_agent()`` as usual. The :meth:`lint` findings are logged as warnings on the
        ``handoff_builder`` logger (each once per builder); with ``strict=True`` its errors make
        the build fail.

        Raises:
            HandoffConfigurationError: listing every problem found, each naming the agents.
        """
        from ._compile import compile_workflow

        return compile_workflow(self._config, strict=strict, report=self._report)

    def _report(self, findings: Sequence[LintFinding]) -> None:
        for finding in findings:
            if str(finding) not in self._reported:
                self._reported.add(str(finding))
                logger.warning("handoff workflow lint: %s", finding)

    def to_mermaid(self) -> str:
        """The handoff graph as a Mermaid flowchart.

        One node per agent (the initial agent rounded), a solid arrow per handoff and a dotted
        one per hand-back, each labelled with its tool name.

        Raises:
            HandoffConfigurationError: the same problems ``build()`` reports.
        """
        from ._compile import to_mermaid

        return to_mermaid(self._config)


def _policy(
    on_handoff: HandoffHook | None,
    *,
    is_enabled: bool | HandoffPredicate,
    approval: bool | HandoffPredicate,
    input_filter: InputFilter | None = None,
    edge: tuple[Agent, Agent | None, str],
) -> EdgePolicy:
    """The edge's code, checked at the call: each function must take a ``HandoffContext``.

    ``edge`` is the source, the target (``None``: not known yet) and the edge's name.
    """
    if on_handoff is not None and not callable(on_handoff):
        raise HandoffArgumentError(
            "on_handoff", f"on_handoff must be callable, not {type(on_handoff).__name__}."
        )
    for name, value in (("is_enabled", is_enabled), ("approval", approval)):
        if not isinstance(value, bool) and not callable(value):
            raise HandoffArgumentError(
                name, f"{name} must be a bool or a callable, not {type(value).__name__}."
            )
    for name, value in (("on_handoff", on_handoff), ("is_enabled", is_enabled),
                        ("approval", approval)):  # fmt: skip
        if callable(value):
            check_edge_hook(name, value, *edge)
    if input_filter is not None:
        if not callable(input_filter):
            raise HandoffArgumentError(
                "input_filter",
                f"input_filter must be callable, not {type(input_filter).__name__}.",
            )
        check_input_filter(input_filter, *edge)
    return EdgePolicy(on_handoff, is_enabled, approval, input_filter)


def _check_hooks(
    source: Agent,
    targets: Sequence[Agent],
    *,
    on_handoff: HandoffHook | None,
    is_enabled: bool | HandoffPredicate,
    approval: bool | HandoffPredicate,
    input_filter: InputFilter | None,
) -> None:
    """Every edge of a ``with_handoffs`` call is checked before any is declared."""
    for target in targets:
        _policy(
            on_handoff,
            is_enabled=is_enabled,
            approval=approval,
            input_filter=input_filter,
            edge=(source, target, f"the handoff from {label(source)} to {label(target)}"),
        )


def _is_list(value: object) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, Agent))


def _name(agent: Agent | str) -> str:
    return agent if isinstance(agent, str) else str(agent.name or agent.id)


def _at_least_one(what: str, value: int) -> int:
    return int_argument(what, value)


def recording_model_inputs(builder: HandoffWorkflowBuilder) -> HandoffWorkflowBuilder:
    """``builder``, or a copy of it, whose workflows keep what each model receives.

    A builder set up with ``with_model_inputs`` is returned as it is (its redaction and bound
    stay); any other gets a copy with ``with_model_inputs()``'s defaults, sharing its agents and
    every other setting. ``builder`` itself is never changed. The evals read each model call
    this way (``handoff_builder.evals``).
    """
    config = builder._config  # pyright: ignore[reportPrivateUsage] - this module's class
    if config.model_inputs is not None:
        return builder
    copied = copy.copy(builder)
    recording = dataclasses.replace(config, model_inputs=ModelInputs())
    copied._config = recording  # pyright: ignore[reportPrivateUsage] - this module's class
    return copied


def agent_names(builder: HandoffWorkflowBuilder) -> tuple[str, ...]:
    """The names of the agents that take part in ``builder``'s conversations, in the order added."""
    config = builder._config  # pyright: ignore[reportPrivateUsage] - this module's class
    return tuple(_name(agent) for agent in config.participants.values())
