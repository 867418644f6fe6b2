"""What a :class:`~handoff_builder.HandoffWorkflowBuilder` records, and the checks its parts share.

The builder's methods are grouped by what they declare: the edges (``_declare_edges.py``), the
limits of a turn (``_declare_limits.py``) and the rest (``_builder.py``); each group is a base
class of the builder over one :class:`~handoff_builder._config.BuildConfig`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeAlias

from agent_framework import Agent, BaseAgent
from typing_extensions import Self

from ._arguments import (
    agents_argument,
    int_argument,
)
from ._config import BuildConfig
from ._settings import (
    CapOutcome,
)

if TYPE_CHECKING:
    pass

__all__ = ["Declarations", "Outcome", "agent_name", "at_least_one", "is_list"]

Outcome: TypeAlias = "CapOutcome | Agent[Any]"
"""A cap's outcome: a :class:`CapOutcome`, or an agent (the safe agent)."""


class Declarations:
    """The configuration a builder records (``_config``), and its participants."""

    _config: BuildConfig

    def add_participants(self, *agents: Agent | BaseAgent | Iterable[Agent | BaseAgent]) -> Self:
        """Add agents without edges (the default all-to-all mesh applies when no edge is declared).

        Adding the same agent object twice has no effect. Each must be an ``agent_framework.Agent``
        (a workflow or another kind of agent is a :class:`~handoff_builder.HandoffArgumentError`
        naming it, and none of them is added).
        """
        chosen = [
            agent
            for index, item in enumerate(agents)
            for agent in agents_argument(item, f"agents[{index}]", "agents", remote=True)
        ]
        for agent in chosen:
            self._config.participants.setdefault(id(agent), agent)
        return self


def is_list(value: object) -> bool:
    """An iterable of agents, not one agent nor a name."""
    return isinstance(value, Iterable) and not isinstance(value, (str, Agent))


def agent_name(agent: Agent | str) -> str:
    """The agent's name (its id when it has none), or the name given."""
    return agent if isinstance(agent, str) else str(agent.name or agent.id)


def at_least_one(what: str, value: int) -> int:
    """``value``, an int of at least 1, or a ``HandoffArgumentError`` naming ``what``."""
    return int_argument(what, value)
