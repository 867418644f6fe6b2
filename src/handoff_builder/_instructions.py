"""The handoff instructions an agent that can hand off gets, after its own instructions."""

from __future__ import annotations

import functools
from collections.abc import Sequence

__all__ = ["DEFAULT_HANDOFF_INSTRUCTIONS", "HANDOFF_TOOLS_PLACEHOLDER", "render_instructions"]

HANDOFF_TOOLS_PLACEHOLDER = "{handoff_tools}"
"""Replaced, in any handoff instructions, by the agent's own handoff tool names."""

# .NET's default text, with its `handoff_to_<agent_id>` naming replaced by the tools the agent has.
DEFAULT_HANDOFF_INSTRUCTIONS = (
    "You are one agent in a multi-agent system. You can hand off the conversation to another agent "
    "if appropriate. Handoffs are achieved by calling one of your handoff functions: "
    f"{HANDOFF_TOOLS_PLACEHOLDER}. The description of each function says which agent it reaches "
    "and when to use it. Handoffs between agents are handled seamlessly in the background; never "
    "mention or narrate these handoffs in your conversation with the user."
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
