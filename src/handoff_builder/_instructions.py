"""The handoff instructions an agent that can hand off gets, after its own instructions."""

from __future__ import annotations

import functools
from collections.abc import Sequence

__all__ = [
    "DEFAULT_HANDOFF_INSTRUCTIONS",
    "DEFAULT_HAND_BACK_INSTRUCTIONS",
    "HANDOFF_TOOLS_PLACEHOLDER",
    "render_instructions",
]

HANDOFF_TOOLS_PLACEHOLDER = "{handoff_tools}"
"""Replaced, in any handoff instructions, by the agent's own handoff tool names."""

# Measured on a small local model (docs/evals.md, "Measured on a local model"): the text that
# listed the tools' names in backticks made the model write about the handoff instead of making
# it (0 of 20 first calls handed off); this one made it call (5 of 20 right, 4 wrong). The tools
# carry their own names and descriptions, so the text repeats neither.
DEFAULT_HANDOFF_INSTRUCTIONS = (
    "Your reply is a call to the handoff function that fits the user's request. If the user "
    "only greets or thanks you, answer in words."
)

# An agent that can only hand back (a specialist) read the text above as "hand back at once" and
# called its hand-back with the work written into the summary instead of answering the user: 0 of
# 16 specialists answered; with this text (and the goal alone as its note), 14 of 16 did
# (docs/evals.md). By default it gets this text instead.
DEFAULT_HAND_BACK_INSTRUCTIONS = (
    "Answer the user yourself, in words. Call a hand-back function only if the user asks for "
    "something you cannot do."
)


def render_instructions(template: str, tool_names: Sequence[str]) -> str:
    """``template`` with :data:`HANDOFF_TOOLS_PLACEHOLDER` replaced by ``tool_names``.

    The names are listed in backticks, separated by commas; nothing else in the template is
    interpreted, so braces elsewhere stay as written. The same template and names give the same
    string object: the workflows built from one configuration (a conversation each) share it.
    """
    return _rendered(template, tuple(tool_names))


@functools.lru_cache(maxsize=256)
def _rendered(template: str, tool_names: tuple[str, ...]) -> str:
    listed = ", ".join(f"`{name}`" for name in tool_names)
    return template.replace(HANDOFF_TOOLS_PLACEHOLDER, listed)
