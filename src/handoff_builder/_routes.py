"""The one table of edge kinds, the compiled route, and the one place tool names are made.

Every difference between a handoff and a hand-back (tool prefix, argument, what the model is told,
the verb in error messages, the block reason for an empty argument, the graph arrow, the note the
receiving agent reads) is a column of :data:`EDGE_KINDS`; code elsewhere reads the table instead of
branching on the kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal, NamedTuple

from pydantic import BaseModel

from ._instructions import DEFAULT_HAND_BACK_INSTRUCTIONS, DEFAULT_HANDOFF_INSTRUCTIONS
from ._payloads import HandBackSummary, HandoffGoal

__all__ = [
    "EDGE_KINDS",
    "HANDOFF",
    "HAND_BACK",
    "MAX_TOOL_NAME_LENGTH",
    "EdgeKind",
    "HandoffKind",
    "HandoffRoute",
    "default_instructions",
    "hand_back_tool_name",
    "handoff_tool_name",
    "is_valid_tool_name",
    "sanitize_tool_name",
]

HandoffKind = Literal["handoff", "hand_back"]
MAX_TOOL_NAME_LENGTH = 64

_INVALID_CHARS = re.compile(r"[^A-Za-z0-9_-]")


class EdgeKind(NamedTuple):
    """How one kind of edge looks to the model, to the user and in the graph."""

    name: HandoffKind
    tool_prefix: str
    """Default tool name: the prefix and the target's name, sanitised."""
    model: type[BaseModel]
    """What the tool takes when the edge declares no payload."""
    argument: str
    """That model's one required text field."""
    noun: str
    """How the edge is named in a sentence."""
    verb: str
    """How the edge reads in a sentence."""
    empty_reason: Literal["empty_goal", "empty_summary"]
    """The block reason when the argument is blank."""
    empty_error: str
    """The tool error for a blank argument (``{tool}``: the tool's name)."""
    returns: bool
    """True when the edge returns the conversation to a coordinator (ping-pong is guarded)."""
    arrow: str
    """The Mermaid arrow of the edge."""
    note_label: str
    """How the note of an agent that is not the target starts: "Handoff" / "Hand-back"."""
    argument_label: str
    """How the argument is labelled in the notes (a payload model: its class name instead)."""
    instructions: str
    """The default handoff instructions of an agent whose handoff tools are all of this kind."""
    received: str
    """The note the edge's target reads (``{label}``, ``{argument}``, ``{source}``, ``{target}``).

    Every other agent reads "<note_label> from <source> to <target>. <label>: <argument>"."""


HANDOFF = EdgeKind(
    name="handoff",
    tool_prefix="handoff_to_",
    model=HandoffGoal,
    argument="goal",
    noun="handoff",
    verb="hand off",
    empty_reason="empty_goal",
    empty_error=(
        "Error: the handoff was not performed because the goal is empty. State the user's goal "
        "in one sentence in the `goal` argument and call {tool} again."
    ),
    returns=False,
    arrow="-->",
    note_label="Handoff",
    argument_label="Goal",
    instructions=DEFAULT_HANDOFF_INSTRUCTIONS,
    # The goal alone: a small model that read "Handoff from triage to you" handed straight back
    # (2 of 16 specialists answered; 16 of 16 with the goal alone, docs/evals.md).
    received="{label}: {argument}",
)

HAND_BACK = EdgeKind(
    name="hand_back",
    tool_prefix="transfer_back_to_",
    model=HandBackSummary,
    argument="summary",
    noun="hand-back",
    verb="hand back",
    empty_reason="empty_summary",
    empty_error=(
        "Error: the hand-back was not performed because the summary is empty. Say what you did "
        "and what is still open in the `summary` argument and call {tool} again."
    ),
    returns=True,
    arrow="-.->",
    note_label="Hand-back",
    argument_label="Summary",
    instructions=DEFAULT_HAND_BACK_INSTRUCTIONS,
    received="Hand-back from {source} to you ({target}). {label}: {argument}",
)

EDGE_KINDS: dict[str, EdgeKind] = {kind.name: kind for kind in (HANDOFF, HAND_BACK)}
"""Every edge kind, by name."""


class HandoffRoute(NamedTuple):
    """A compiled edge: ``source`` calls ``tool_name`` to pass the conversation to ``target``.

    ``payload`` is the edge's pydantic model (``None``: the kind's built-in goal or summary);
    ``target_url`` the address of a remote target (``""``: a local one), for traces.
    """

    source: str
    target: str
    tool_name: str
    description: str
    kind: HandoffKind = "handoff"
    payload: type[BaseModel] | None = None
    target_url: str = ""

    @property
    def edge(self) -> EdgeKind:
        """The row of :data:`EDGE_KINDS` for this route's kind."""
        return EDGE_KINDS[self.kind]

    @property
    def model(self) -> type[BaseModel]:
        """What the route's tool takes: the payload model, else the built-in one."""
        return self.payload or EDGE_KINDS[self.kind].model


def default_instructions(routes: Iterable[HandoffRoute]) -> str:
    """The default handoff instructions of an agent with ``routes``.

    Their kind's text, or the handoff's when the agent has edges of both kinds.
    """
    texts = {route.edge.instructions for route in routes}
    return texts.pop() if len(texts) == 1 else HANDOFF.instructions


def sanitize_tool_name(name: str) -> str:
    """Replace characters outside ``[A-Za-z0-9_-]`` by ``_`` and cut to 64 characters."""
    return _INVALID_CHARS.sub("_", name)[:MAX_TOOL_NAME_LENGTH]


def default_tool_name(kind: EdgeKind, target_name: str) -> str:
    """The default tool name of an edge of ``kind`` to ``target_name``."""
    return sanitize_tool_name(kind.tool_prefix + target_name)


def handoff_tool_name(target_name: str) -> str:
    """The default handoff tool name for a target agent: ``handoff_to_<target name>``, sanitised."""
    return default_tool_name(HANDOFF, target_name)


def hand_back_tool_name(coordinator_name: str) -> str:
    """The default hand-back tool name: ``transfer_back_to_<coordinator name>``, sanitised."""
    return default_tool_name(HAND_BACK, coordinator_name)


def is_valid_tool_name(name: str) -> bool:
    """True when ``name`` is non-empty, uses only ``[A-Za-z0-9_-]`` and fits in 64 characters."""
    return 0 < len(name) <= MAX_TOOL_NAME_LENGTH and not _INVALID_CHARS.search(name)
