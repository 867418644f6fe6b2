"""How a group-chat host runs its turns, besides its agents and manager: :class:`HostSettings`."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._delegation import DEFAULT_MAX_DELEGATION_DEPTH
from ._engine import TurnRules
from ._hooks import DEFAULT_HOOK_TIMEOUT
from ._logging import ArgumentLogging
from ._model_inputs import ModelCallLog
from ._participant import Participant
from ._runner import RunnerSetup, payload_models
from ._settings import DEFAULT_AGENT_TIMEOUT, DEFAULT_TURN_TIMEOUT
from ._views import HandoffToolCallFiltering

__all__ = ["HostSettings", "StreamedAs", "settings_of"]

StreamedAs = Literal["output", "intermediate"]
"""How a streaming run yields an agent's updates: as the run's output, or as intermediate events."""


@dataclass(frozen=True)
class HostSettings:
    """How a :class:`GroupChatHost` runs its turns, besides its agents and manager.

    * ``filtering``: which of the other agents' tool calls an agent sees
      (:class:`HandoffToolCallFiltering`); ``handoff_tools``: the tools that count as handoffs.
    * ``output_agents``: the agents whose updates a streaming run yields (``None``: all);
      ``intermediate_agents``: those whose updates are intermediate events instead.
    * ``agent_timeout``, ``turn_timeout``, ``hook_timeout``: seconds (``None``: no limit).
    * ``experts``: the agents as they answer delegated tasks (no handoff tools), by name;
      ``max_delegation_depth``: how deep delegations may nest; ``max_parallel_delegations``: how
      many experts of one response run at once (``None``: all of them).
    * ``reviewed``: the agents whose replies a reviewer must approve; ``apologies``: the
      message of an escalation by its reason, where it is not the host's ``apology``.
    * ``model_calls``: where the participants' recorders write what each model received
      (``with_model_inputs``; ``None``: nothing is recorded).
    * ``argument_logging``, ``workflow_name``: what the logs and the turn's span say.
    """

    filtering: HandoffToolCallFiltering = HandoffToolCallFiltering.HANDOFF_ONLY
    handoff_tools: frozenset[str] = frozenset()
    output_agents: frozenset[str] | None = None
    intermediate_agents: frozenset[str] = frozenset()
    agent_timeout: float | None = DEFAULT_AGENT_TIMEOUT
    turn_timeout: float | None = DEFAULT_TURN_TIMEOUT
    hook_timeout: float | None = DEFAULT_HOOK_TIMEOUT
    experts: Mapping[str, Participant] = field(default_factory=dict[str, Participant])
    max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH
    max_parallel_delegations: int | None = None
    reviewed: frozenset[str] = frozenset()
    apologies: Mapping[str, str] = field(default_factory=dict[str, str])
    model_calls: ModelCallLog | None = None
    argument_logging: ArgumentLogging = field(default_factory=ArgumentLogging)
    workflow_name: str = "handoff"

    def streamed_as(self, agent: str) -> StreamedAs | None:
        """How a streaming run yields ``agent``'s updates (``None``: not at all; it runs whole)."""
        if agent in self.intermediate_agents:
            return "intermediate"
        if self.output_agents is None or agent in self.output_agents:
            return "output"
        return None

    def turn_rules(
        self, participants: Mapping[str, Participant], apology: str, author: str
    ) -> TurnRules:
        """What a host's engine is told once, with these agents (``author``: the host's id)."""
        models = payload_models(participants)
        return TurnRules(
            frozenset(participants), self.reviewed, apology, self.apologies, models, author
        )

    def runner_setup(self, participants: Mapping[str, Participant], author: str) -> RunnerSetup:
        """What a host's local runner is told once, with these agents."""
        return RunnerSetup(
            participants, self.experts, self.filtering, self.handoff_tools, self.hook_timeout,
            self.max_delegation_depth, author, self.max_parallel_delegations,
        )  # fmt: skip


_NONE_MEANT = frozenset({"argument_logging", "apologies", "experts"})
"""Keywords of the constructor before ``HostSettings`` whose ``None`` meant their default."""


def settings_of(settings: HostSettings | None, options: Mapping[str, Any]) -> HostSettings:
    """``settings`` with the keyword arguments ``HostSettings`` replaced, which still count.

    Those are deprecated: a ``DeprecationWarning`` names them, at the caller of the host.
    """
    if not options:
        return settings or HostSettings()
    warnings.warn(
        f"GroupChatHost({', '.join(sorted(options))}=...) is deprecated: pass "
        "settings=HostSettings(...).",
        DeprecationWarning,
        stacklevel=3,
    )
    given: dict[str, Any] = {**vars(settings or HostSettings())}
    given.update((k, v) for k, v in options.items() if not (v is None and k in _NONE_MEANT))
    return HostSettings(**given)
