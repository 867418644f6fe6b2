"""Remote agents as the builder meets them: which agents are remote, and what of them is trusted.

A remote agent is agent_framework's ``A2AAgent`` (``agent-framework-a2a``): an agent on another
server, reached through the Agent2Agent protocol. The builder takes one where an agent needs no
tools of the workflow's (a handoff target, a hand-back specialist, a delegate's expert) and
refuses it elsewhere (:class:`~handoff_builder.RemoteAgentToolsError`). How it runs is
:mod:`._remote_participant`'s.

Its name and description come from its agent card, written by whoever runs the server: they are
text from outside. The name is the agent's identity in the workflow, so it must be a short plain
line (:data:`REMOTE_NAME_LIMIT` characters; pass ``name=`` to ``A2AAgent`` otherwise); the
description reaches a model's prompt (as the tool's description, when the edge gives no reason)
only cut to :data:`REMOTE_DESCRIPTION_LIMIT` characters, on one line, and marked as the card's
words. This module imports nothing of the runtime, nor ``agent_framework_a2a`` itself.
"""

from __future__ import annotations

import sys
import unicodedata
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .exceptions import HandoffArgumentError, RemoteAgentToolsError

__all__ = [
    "REMOTE_DESCRIPTION_LIMIT",
    "REMOTE_NAME_LIMIT",
    "card_description",
    "check_remote",
    "is_remote",
    "remote_role_error",
    "remote_url",
]

REMOTE_NAME_LIMIT = 64
"""The longest name a remote agent may have (the length of a tool name)."""

REMOTE_DESCRIPTION_LIMIT = 200
"""How many characters of a remote agent's card description reach a prompt."""

CARD_DESCRIPTION = "A remote agent (A2A). Its own card, unchecked, says: \u201c{text}\u201d"
"""How a remote agent's card description reaches a prompt: marked as its card's words."""


def is_remote(value: object) -> bool:
    """True when ``value`` is agent_framework's ``A2AAgent`` (a remote agent).

    No ``A2AAgent`` exists unless ``agent_framework_a2a`` was imported, so nothing is imported
    here.
    """
    module = sys.modules.get("agent_framework_a2a")
    kind = getattr(module, "A2AAgent", None) if module is not None else None
    return isinstance(kind, type) and isinstance(value, kind)


def remote_url(agent: Any) -> str:
    """The address a remote agent's requests go to, for traces (``""``: a local agent, or unknown).

    The URL its A2A client sends to (its transport's, else its agent card's first interface's),
    without credentials, query or fragment. ``A2AAgent`` keeps no address of its own: it is read
    from a2a-sdk's client by name, and an agent made with a client of another kind has none.
    """
    if not is_remote(agent):
        return ""
    client: Any = getattr(agent, "client", None)
    url: Any = getattr(getattr(client, "_transport", None), "url", None)
    if not isinstance(url, str) or not url:
        card: Any = getattr(client, "_card", None)
        interfaces: list[Any] = list(getattr(card, "supported_interfaces", None) or [])
        url = getattr(interfaces[0], "url", None) if interfaces else None
    if not isinstance(url, str) or not url:
        return ""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:  # not a URL (a bad port)
        return ""
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def one_line(text: str, limit: int) -> str:
    """``text`` on one line: control and format characters dropped, spaces collapsed, cut.

    A cut text ends with an ellipsis, within ``limit`` characters.
    """
    kept = "".join(
        " " if ch.isspace() else ch
        for ch in text
        if ch.isspace() or unicodedata.category(ch)[0] != "C"
    )
    line = " ".join(kept.split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "\u2026"


def card_description(agent: Any) -> str:
    """What a prompt reads of a remote agent's card: its description (else name), cut and marked.

    Quotation marks in the card's text become plain apostrophes, so the card cannot close the
    quotation it is put in.
    """
    for candidate in (getattr(agent, "description", None), getattr(agent, "name", None)):
        if isinstance(candidate, str) and candidate.strip():
            text = one_line(candidate, REMOTE_DESCRIPTION_LIMIT)
            for mark in ('"', "\u201c", "\u201d"):
                text = text.replace(mark, "'")
            return CARD_DESCRIPTION.format(text=text)
    return CARD_DESCRIPTION.format(text="")


def check_remote(agent: Any, argument: str) -> Any:
    """``agent``, a remote agent whose name can be its identity in a workflow.

    Raises:
        HandoffArgumentError: the name is blank, longer than :data:`REMOTE_NAME_LIMIT`, or not
            one plain line.
    """
    name = getattr(agent, "name", None)
    plain = isinstance(name, str) and name.strip() and one_line(name, len(name) + 1) == name
    if not plain or len(str(name)) > REMOTE_NAME_LIMIT:
        shown = one_line(str(name), 80) if isinstance(name, str) else repr(name)
        raise HandoffArgumentError(
            argument,
            f"The remote agent given as {argument} is named {shown!r} (from its agent card, "
            f"perhaps): a remote agent's name must be one plain line of at most "
            f"{REMOTE_NAME_LIMIT} characters, its identity in the workflow. Pass name= to "
            "A2AAgent.",
        )
    return agent


ROLES = {
    "source": "the source of a handoff",
    "sources": "the source of a handoff",
    "caller": "the caller of a delegate",
    "coordinator": "a coordinator (it hands off to its specialists)",
    "producer": "a reviewed producer",
    "reviewer": "a reviewer",
}
"""What a remote agent cannot be, by the builder argument it was given as."""


def remote_role_error(argument: str, agent: Any) -> RemoteAgentToolsError:
    """The error for a remote agent given as ``argument`` (``"source"``, ``"sources[0]"``...)."""
    role = ROLES.get(argument.split("[", 1)[0], "an agent with tools")
    return RemoteAgentToolsError(argument, str(getattr(agent, "name", "") or "?"), role)
