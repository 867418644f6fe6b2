"""The edges a builder declares: handoffs, hand-backs, delegations and reviews."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, overload

from agent_framework import Agent, BaseAgent
from typing_extensions import Self

from ._arguments import (
    agent_argument,
    agents_argument,
    check_edge_hook,
    check_input_filter,
    label,
)
from ._config import DelegateEdge, Edge, HandBack
from ._declare import Declarations, at_least_one, is_list
from ._remote import is_remote
from ._settings import (
    DEFAULT_MAX_REVIEW_ROUNDS,
    HISTORY_MODES,
    EdgePolicy,
    HandoffHook,
    HandoffPredicate,
    HistoryMode,
)
from .exceptions import HandoffArgumentError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ._input_filters import InputFilter


__all__ = ["EdgeDeclarations", "check_hooks", "edge_policy"]


class EdgeDeclarations(Declarations):
    """The builder's methods that declare who may pass the conversation (or a task) to whom."""

    def with_handoff(
        self,
        source: Agent,
        target: Agent | BaseAgent,
        reason: str | None = None,
        *,
        tool_name: str | None = None,
        payload: type[BaseModel] | None = None,
        on_handoff: HandoffHook | None = None,
        is_enabled: bool | HandoffPredicate = True,
        approval: bool | HandoffPredicate = False,
        input_filter: InputFilter | None = None,
    ) -> Self:
        """Let ``source`` hand the conversation to ``target``.

        Args:
            source: The agent that gets the handoff tool.
            target: The agent the tool passes the conversation to: an ``Agent``, or a remote
                agent (agent_framework's ``A2AAgent``; see docs/remote-agents.md).
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
        target_agent = agent_argument(target, "target", remote=True)
        edge_name = f"the handoff from {label(source_agent)} to {label(target_agent)}"
        policy = edge_policy(
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
    ) -> Self: ...

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
    ) -> Self: ...

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
    ) -> Self:
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

        if isinstance(first, Agent):  # a remote agent as the source is refused below
            if reason is not None:
                raise HandoffArgumentError(
                    "reason", "with_handoffs(source, targets) takes no reason; use with_handoff."
                )
            if isinstance(second, Agent) or is_remote(second):
                raise HandoffArgumentError(
                    "targets",
                    "with_handoffs(source, targets) takes a list of targets; for one target use "
                    "with_handoff(source, target).",
                )
            targets = agents_argument(second, "targets", "target agents", remote=True)
            check_hooks(
                first, targets, on_handoff=on_handoff, is_enabled=is_enabled, approval=approval,
                input_filter=input_filter,
            )  # fmt: skip
            for target in targets:
                declare(first, target)
            return self
        if is_list(first) and is_list(second):
            raise HandoffArgumentError(
                "targets",
                "with_handoffs takes (source, [targets]) or ([sources], target); got "
                f"{type(first).__name__} and {type(second).__name__}.",
            )
        sources = agents_argument(first, "sources", "source agents")
        target = agent_argument(second, "target", remote=True)
        if reason is not None and not isinstance(reason, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "reason", f"reason must be a string, not {type(reason).__name__}."
            )
        for source in sources:
            check_hooks(
                source, [target], on_handoff=on_handoff, is_enabled=is_enabled, approval=approval,
                input_filter=input_filter,
            )  # fmt: skip
        for source in sources:
            declare(source, target, reason)
        return self

    def with_hand_back(
        self,
        coordinator: Agent,
        specialists: Agent | BaseAgent | Iterable[Agent | BaseAgent] | None = None,
        reason: str | None = None,
        *,
        tool_name: str | None = None,
        payload: type[BaseModel] | None = None,
        on_handoff: HandoffHook | None = None,
        is_enabled: bool | HandoffPredicate = True,
        approval: bool | HandoffPredicate = False,
        input_filter: InputFilter | None = None,
    ) -> Self:
        """Give specialists a tool to hand the conversation back to ``coordinator``.

        Each specialist gets ``transfer_back_to_<coordinator name>`` (or ``tool_name``) with a
        required ``summary``: what it did and what is still open (or ``payload``, a pydantic
        model, instead). ``specialists=None`` means every agent the coordinator can hand off to.
        The coordinator may not hand straight back to the agent that just handed back to it
        before the next user message (no ping-pong), and hand-backs count toward the per-message
        cap. ``on_handoff``, ``is_enabled``, ``approval`` and ``input_filter`` (the coordinator
        reads what it returns) are those of :meth:`with_handoff`. A remote specialist
        (``A2AAgent``) gets no tool: its task's completion hands back, with its answer as the
        summary (docs/remote-agents.md).
        """
        coordinator_agent = agent_argument(coordinator, "coordinator")
        chosen = (
            None
            if specialists is None
            else agents_argument(specialists, "specialists", "specialist agents", remote=True)
        )
        edge_name = f"the hand-back to {label(coordinator_agent)}"
        policy = edge_policy(
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
        expert: Agent | BaseAgent,
        reason: str | None = None,
        *,
        tool_name: str | None = None,
        payload: type[BaseModel] | None = None,
        history: HistoryMode = "none",
        approval: bool = False,
        max_calls: int | None = None,
        timeout: float | None = None,
    ) -> Self:
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
            expert: The agent that answers: an ``Agent``, or a remote agent (``A2AAgent``, see
                docs/remote-agents.md). It need not be a participant; when it is one, it still
                runs with no handoff tools here.
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
            timeout: Seconds the expert may take to answer one call (``None``: no limit of its
                own; the caller's ``with_timeouts(agent_call=...)`` still bounds it). Past it,
                the expert's run is cancelled and the caller gets a tool error naming the expert
                and the limit (``outcome="timed_out"``); the other experts of the same response
                keep running, and the caller carries on. Time spent waiting for a slot
                (:meth:`with_max_parallel_delegations`) or for a person does not count.

        A delegate cycle (an expert that, directly or through its own delegates, asks its
        caller) is refused by ``build()``.
        """
        caller_agent = agent_argument(caller, "caller")
        expert_agent = agent_argument(expert, "expert", remote=True)
        if history not in HISTORY_MODES:
            raise ValueError(
                f"history must be one of {', '.join(map(repr, HISTORY_MODES))}, not {history!r}."
            )
        if not isinstance(approval, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "approval", f"approval must be a bool, not {type(approval).__name__}."
            )
        if max_calls is not None:
            max_calls = at_least_one("max_calls", max_calls)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)  # pyright: ignore[reportUnnecessaryIsInstance]
            or not timeout > 0
        ):
            raise HandoffArgumentError(
                "timeout", f"timeout must be a positive number of seconds or None, not {timeout!r}."
            )
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
                None if timeout is None else float(timeout),
            )
        )
        return self

    def with_review(
        self, producer: Agent, reviewer: Agent, *, max_rounds: int = DEFAULT_MAX_REVIEW_ROUNDS
    ) -> Self:
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
        rounds = at_least_one("max_rounds", max_rounds)
        self._config.reviews.append((producer_agent, reviewer_agent, rounds))
        return self

    def with_max_delegation_depth(self, depth: int) -> Self:
        """How deeply delegations nest (default 3): an expert at this depth gets no delegates.

        A participant's expert is at depth 1, that expert's expert at depth 2, and so on.
        """
        self._config.max_delegation_depth = at_least_one("depth", depth)
        return self

    def with_max_parallel_delegations(self, limit: int) -> Self:
        """How many experts of one response run at once (default: all of them).

        A model that calls several delegates in one response fans out: their experts run
        concurrently, and each answer is its own call's result, in call order. ``limit`` bounds
        how many run at a time (the rest wait for a slot); each expert's own delegates have a
        bound of their own, so nested delegations never wait on their caller's slot.
        """
        self._config.max_parallel_delegations = at_least_one("limit", limit)
        return self


def edge_policy(
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


def check_hooks(
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
        edge_policy(
            on_handoff,
            is_enabled=is_enabled,
            approval=approval,
            input_filter=input_filter,
            edge=(source, target, f"the handoff from {label(source)} to {label(target)}"),
        )
