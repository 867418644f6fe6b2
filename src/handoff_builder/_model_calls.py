"""What one model call received, and the transcript form every page and error shows it in."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_framework import Content, Message

__all__ = ["ModelCall", "render_messages"]


@dataclass(frozen=True)
class ModelCall:
    """What one model call received.

    Recorded by the scripted client of :mod:`handoff_builder.testing` (``client.calls``) and, with
    any chat client, by a workflow built with
    :meth:`~handoff_builder.HandoffWorkflowBuilder.with_model_inputs`
    (:attr:`~handoff_builder.HandoffTurnResult.model_calls`).

    ``messages`` are the messages the model was sent (without the system message: the
    instructions are in ``options``), ``tool_names`` the tools it was offered, ``options`` the
    call's other options. A recorded call also names its ``agent`` and its ``index``: its place
    among the turn's model calls, from 0.
    """

    messages: tuple[Message, ...]
    tool_names: tuple[str, ...]
    options: Mapping[str, Any]
    agent: str | None = None
    index: int | None = None

    @property
    def instructions(self) -> str:
        """The instructions sent with the call ("" when none)."""
        value = self.options.get("instructions")
        return value if isinstance(value, str) else ""

    @property
    def texts(self) -> list[str]:
        """The text of each message received, in order."""
        return [message.text for message in self.messages]

    @property
    def user_text(self) -> str:
        """The text of the last message the user wrote ("" when none).

        Other agents' words reach a model as ``user`` messages too, and so do the host's handoff
        notes; they carry an ``author_name``, the user's own messages do not.
        """
        for message in reversed(self.messages):
            if message.role == "user" and message.author_name is None and message.text:
                return message.text
        return ""

    @property
    def rendered(self) -> str:
        """The messages received, one line per content (see :func:`render_messages`)."""
        return render_messages(self.messages)

    def sees(self, text: str) -> bool:
        """True when ``text`` appears in what the call received (:attr:`rendered`)."""
        return text in self.rendered


def render_messages(messages: Sequence[Message]) -> str:
    """Messages as readable lines: ``role[author]: text``, tool calls and results included.

    A function call reads ``-> name(arguments)``, a result ``<- call_id: result``; other
    contents show their type.
    """
    lines: list[str] = []
    for message in messages:
        who = f"{message.role}[{message.author_name}]" if message.author_name else message.role
        for content in message.contents:
            lines.append(f"{who}: {_render_content(content)}")
    return "\n".join(lines)


def _render_content(content: Content) -> str:
    if content.type == "text":
        return content.text or ""
    if content.type == "function_call":
        arguments = content.arguments
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        return f"-> {content.name}({shown})"
    if content.type == "function_result":
        return f"<- {content.call_id}: {content.result}"
    return f"({content.type})"
