"""The one place where handoff tool names and the default handoff instructions are made."""

from __future__ import annotations

import re

HANDOFF_PREFIX = "handoff_to_"
HAND_BACK_PREFIX = "transfer_back_to_"
MAX_TOOL_NAME_LENGTH = 64

_INVALID_CHARS = re.compile(r"[^A-Za-z0-9_-]")

# .NET's HandoffWorkflowBuilder default, word for word, with its `handoff_to_<agent_id>` naming.
DEFAULT_HANDOFF_INSTRUCTIONS = (
    "You are one agent in a multi-agent system. You can hand off the conversation to another agent "
    "if appropriate. Handoffs are achieved\n"
    "by calling a handoff function, named in the form `handoff_to_<agent_id>`; the description of "
    "the function provides details on the\n"
    "target agent of that handoff. Handoffs between agents are handled seamlessly in the "
    "background; never mention or narrate these handoffs\n"
    "in your conversation with the user."
)


def sanitize_tool_name(name: str) -> str:
    """Replace characters outside ``[A-Za-z0-9_-]`` by ``_`` and cut to 64 characters."""
    return _INVALID_CHARS.sub("_", name)[:MAX_TOOL_NAME_LENGTH]


def handoff_tool_name(target_name: str) -> str:
    """The default handoff tool name for a target agent: ``handoff_to_<target name>``, sanitised."""
    return sanitize_tool_name(HANDOFF_PREFIX + target_name)


def hand_back_tool_name(coordinator_name: str) -> str:
    """The default hand-back tool name: ``transfer_back_to_<coordinator name>``, sanitised."""
    return sanitize_tool_name(HAND_BACK_PREFIX + coordinator_name)


def is_valid_tool_name(name: str) -> bool:
    """True when ``name`` is non-empty, uses only ``[A-Za-z0-9_-]`` and fits in 64 characters."""
    return 0 < len(name) <= MAX_TOOL_NAME_LENGTH and not _INVALID_CHARS.search(name)
