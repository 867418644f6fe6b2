"""The handoff instructions an agent that can hand off gets, after its own instructions."""

from __future__ import annotations

import functools
from collections.abc import Sequence

__all__ = ["DEFAULT_HANDOFF_INSTRUCTIONS", "HANDOFF_TOOLS_PLACEHOLDER", "render_instructions"]

HANDOFF_TOOLS_PLACEHOLDER = "{handoff_tools}"
"""Replaced, in any handoff instructions, by the agent's own handoff tool names."""

# Measured on a small local model (docs/evals.md, "Measured on a local model"): a list of tool names
# in the text invited the model to write a call instead of making one, and a receiver that could
# hand back did so at once. The default says to call, not write, and to answer what is one's own;
# the tools' names and descriptions are in the tools themselves, so the text does not repeat them.
DEFAULT_HANDOFF_INSTRUCTIONS = (
    "To pass the conversation to another agent, call its handoff function: never write a "
    "handoff, a function name or JSON in your reply, nor tell the user about it. Answer what is "
    "yours yourself."
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
