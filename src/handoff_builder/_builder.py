"""The fluent :class:`HandoffWorkflowBuilder`: it records a configuration; ``build()`` compiles.

Importing it imports none of the runtime (agent_framework's workflows, the host, the managers,
the events): what it records is made of :mod:`._settings` and :mod:`._config`. ``build()``,
``lint()`` and ``to_mermaid()`` import the runtime when first called.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from agent_framework import Agent

from ._arguments import (
    agent_argument,
    agents_argument,
    check_function,
    label,
)
from ._config import BuildConfig
from ._declare import Outcome, agent_name, at_least_one
from ._declare_edges import EdgeDeclarations
from ._declare_limits import LimitDeclarations
from ._instructions import DEFAULT_HANDOFF_INSTRUCTIONS
from ._settings import (
    DEFAULT_LOGGED_ARGUMENT_LENGTH,
    DEFAULT_MAX_MODEL_CALLS,
    DEFAULT_REPLY_TOOL_DESCRIPTION,
    DEFAULT_REPLY_TOOL_NAME,
    ArgumentLogging,
    HandoffToolCallFiltering,
    ModelInputs,
    Redaction,
    ReplyToolSettings,
)
from .exceptions import HandoffArgumentError

if TYPE_CHECKING:
    from agent_framework import CheckpointStorage

    from ._config import ManagerFactory
    from ._lint import LintFinding
    from ._manager import RouteFunction
    from ._workflow import HandoffWorkflow

__all__ = ["HandoffWorkflowBuilder", "Outcome", "agent_names", "recording_model_inputs"]


logger = logging.getLogger("handoff_builder")


class HandoffWorkflowBuilder(EdgeDeclarations, LimitDeclarations):
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
        initial_agent = agent_argument(initial_agent, "initial_agent", remote=True)
        self._config = BuildConfig(initial_agent, {id(initial_agent): initial_agent})
        self._reported: set[str] = set()  # lint findings already logged by build()

    @property
    def initial_agent(self) -> Agent:
        """The agent every conversation begins at (and starts again at after an idle reset)."""
        return cast(Agent, self._config.initial)

    # -- participants and edges -------------------------------------------------------------------

    def with_instructions(self, instructions: str | None) -> HandoffWorkflowBuilder:
        """Handoff instructions added to each agent that can hand off, after its own instructions.

        ``{handoff_tools}`` in the text is replaced, for each agent, by the names of the handoff
        tools that agent has. ``None`` restores the default: :data:`DEFAULT_HANDOFF_INSTRUCTIONS`,
        and :data:`DEFAULT_HAND_BACK_INSTRUCTIONS` for an agent whose only edges are hand-backs
        (a text that is set is every agent's). ``""`` turns them off.
        """
        self._config.instructions = (
            DEFAULT_HANDOFF_INSTRUCTIONS if instructions is None else instructions
        )
        return self

    def with_reply_tool(
        self,
        *agents: Agent | Iterable[Agent],
        description: str = DEFAULT_REPLY_TOOL_DESCRIPTION,
        name: str = DEFAULT_REPLY_TOOL_NAME,
    ) -> HandoffWorkflowBuilder:
        """Give agents that hand off one more tool: ``reply_to_user(text)``, to answer in words.

        Off by default. Small models given handoff tools tend to call one for every message, a
        greeting included; a tool for the answers that are no handoff (its ``description``,
        default :data:`DEFAULT_REPLY_TOOL_DESCRIPTION`) gives them somewhere else to go. A call
        to it ends the agent's run, like a handoff: its ``text`` becomes the agent's reply, an
        assistant text message of the agent's (the conversation keeps no call of the tool, and
        streams show the text as the agent's update). A handoff that stands in the same
        response is followed as usual, with the text as the agent's words before it. A call
        without text gets a tool error, and the agent may try again.

        With no ``agents``, every agent that has handoff tools gets the tool; named agents limit
        it to them, and a named agent without handoff tools is a build error. The tool costs
        one tool schema in each model request of those agents. The last call wins.
        """
        chosen = [
            agent
            for index, item in enumerate(agents)
            for agent in agents_argument(item, f"agents[{index}]", "reply tool agents")
        ]
        if not isinstance(description, str) or not description.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "description", "The reply tool's description must be a non-blank string."
            )
        if not isinstance(name, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise HandoffArgumentError(
                "name", f"The reply tool's name must be a str, not {type(name).__name__}."
            )
        self._config.reply_tool = ReplyToolSettings(
            tuple(chosen) if chosen else None, name, description
        )
        return self

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
            include=bool(include), max_length=at_least_one("max_length", max_length)
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
            redact=redact, max_calls=at_least_one("max_calls", max_calls), trace=bool(trace)
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
    return tuple(agent_name(agent) for agent in config.participants.values())
