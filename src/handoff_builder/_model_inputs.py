"""What each model received, with any chat client: the record ``with_model_inputs`` keeps.

Off by default: a workflow built without ``with_model_inputs()`` adds nothing to an agent's run,
records nothing and keeps nothing. Built with it, every agent run of the workflow (a handoff
participant, a reviewer, an expert answering a delegated task) gets one more chat middleware,
:class:`ModelInputRecorder`, the innermost of the workflow's: before each model call, the tool
loop's calls included, it records what the chat client is about to send (the messages, the
instructions and other options, the tools' names) as a :class:`~._model_calls.ModelCall`, through a
redaction if one is given. The host keeps the calls of the open turn in a :class:`ModelCallLog`,
bounded (the latest ``max_calls``), and hands them to the turn's result.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent_framework import ChatContext, ChatMiddleware, Content, Message
from typing_extensions import override

from ._model_calls import ModelCall
from ._settings import DEFAULT_MAX_MODEL_CALLS, ModelInputs, Redaction
from ._telemetry import model_call_event

__all__ = [
    "DEFAULT_MAX_MODEL_CALLS",
    "ModelCallLog",
    "ModelInputRecorder",
    "ModelInputs",
    "Redaction",
    "redact_patterns",
]

logger = logging.getLogger("handoff_builder")

NOT_RECORDED = "[not recorded: the redaction raised {error}]"
"""What a recorded message says instead when the redaction raised or returned no message."""


class ModelCallLog:
    """The model calls of one host's open turn: the latest ``max_calls``, and how many were made."""

    __slots__ = ("_calls", "_count", "_settings")

    def __init__(self, settings: ModelInputs) -> None:
        self._settings = settings
        self._calls: deque[ModelCall] = deque(maxlen=settings.max_calls)
        self._count = 0

    def record(
        self, agent: str, messages: Sequence[Message], options: Mapping[str, Any]
    ) -> ModelCall:
        """Keep what ``agent``'s model is about to receive: the one place a record is made."""
        redact = self._settings.redact
        tools: Sequence[Any] = options.get("tools") or ()
        kept = {k: v for k, v in options.items() if k not in ("tools", "instructions")}
        instructions = options.get("instructions")
        if isinstance(instructions, str) and instructions:
            if redact is not None:
                system = _redacted(Message(role="system", contents=[instructions]), redact)
                instructions = system.text
            kept["instructions"] = instructions
        if redact is not None:
            messages = [_redacted(message, redact) for message in messages]
        call = ModelCall(
            messages=tuple(messages),
            tool_names=tuple(_tool_name(tool) for tool in tools),
            options=kept,
            agent=agent,
            index=self._count,
        )
        self._count += 1
        self._calls.append(call)
        if self._settings.trace:
            model_call_event(call)
        return call

    def take(self) -> tuple[ModelCall, ...]:
        """The turn's calls, in order; the log is empty again."""
        calls = tuple(self._calls)
        self.clear()
        return calls

    def clear(self) -> None:
        """Forget every call (a new turn, or a host loaded with another state)."""
        self._calls.clear()
        self._count = 0


class ModelInputRecorder(ChatMiddleware):
    """Records each model call of one agent's runs in the host's :class:`ModelCallLog`."""

    def __init__(self, agent: str, log: ModelCallLog) -> None:
        self._agent = agent
        self._log = log

    @override
    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        """Record what the chat client is sent, then send it."""
        self._log.record(self._agent, context.messages, context.options or {})
        await call_next()


def _redacted(message: Message, redact: Redaction) -> Message:
    """``message`` through ``redact``; a placeholder (never ``message``) if the redaction fails."""
    try:
        result = redact(message)
        if not isinstance(result, Message):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"it returned a {type(result).__name__}, not a Message")
    except Exception as error:
        logger.warning(
            "with_model_inputs: the redaction raised %s on a %s message; the record keeps a "
            "placeholder instead",
            type(error).__name__,
            message.role,
        )
        text = NOT_RECORDED.format(error=type(error).__name__)
        return Message(role=message.role, contents=[text], author_name=message.author_name)
    return result


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        spec: Mapping[str, Any] = tool  # pyright: ignore[reportUnknownVariableType]
        function = spec.get("function")
        named: Mapping[str, Any] = function if isinstance(function, Mapping) else spec  # pyright: ignore[reportUnknownVariableType]
        return str(named.get("name") or "")
    return str(getattr(tool, "name", None) or getattr(tool, "__name__", None) or tool)


def redact_patterns(*patterns: str | re.Pattern[str], replacement: str = "[redacted]") -> Redaction:
    r"""A redaction that replaces every match of ``patterns`` with ``replacement``.

    It masks the text of each text content, each function call's arguments and each function
    result (as text); other contents (images, files) are kept as they are. A message without a
    match is returned as it is; one with a match is a copy, so the conversation is not changed::

        card = r"\b\d(?:[ -]?\d){12,18}\b"
        email = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
        builder.with_model_inputs(redact=redact_patterns(card, email))
    """
    compiled = [re.compile(p) if isinstance(p, str) else p for p in patterns]

    def mask(text: str) -> str:
        for pattern in compiled:
            text = pattern.sub(replacement, text)
        return text

    def redact(message: Message) -> Message:
        contents = [_masked(content, mask) for content in message.contents]
        if all(new is old for new, old in zip(contents, message.contents, strict=True)):
            return message
        masked = copy.copy(message)
        masked.contents = contents
        return masked

    return redact


def _masked(content: Content, mask: Callable[[str], str]) -> Content:
    """``content`` with its text, arguments or result masked (itself when nothing changed)."""
    if content.type == "text" and content.text:
        text = mask(content.text)
        return content if text == content.text else Content.from_text(text)
    if content.type == "function_call":
        arguments = content.arguments
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        masked = mask(shown)
        if masked == shown:
            return content
        return Content.from_function_call(
            call_id=str(content.call_id), name=str(content.name), arguments=masked
        )
    if content.type == "function_result" and content.result is not None:
        shown = str(content.result)
        masked = mask(shown)
        if masked == shown:
            return content
        return Content.from_function_result(call_id=str(content.call_id), result=masked)
    return content
