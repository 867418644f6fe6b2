"""A FastAPI dependency for the AG-UI endpoint: a malformed run is refused before AG-UI takes it.

AG-UI's endpoint starts its event stream (HTTP 200) before it reads a run's messages, and reads
what it cannot use as something else: content that is a number becomes its digits, a missing or
unknown role becomes ``user``, an empty message list runs nothing. Some of it fails later, as an
"internal error" in the stream: AG-UI sends the request's messages back (its messages snapshot),
and its encoder cannot write a number where text belongs, nor a lone surrogate. So a run is
checked here first, against the AG-UI protocol's message shapes (``ag_ui.core``), and refused
with HTTP 422 and every problem found; a new message larger than the host takes is refused with
HTTP 413 (:func:`agui_request_check` sets the limit).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

try:
    from fastapi import HTTPException, Request
except ImportError as missing:  # pragma: no cover - the serve extra is not installed
    raise ImportError(
        "check_agui_request needs FastAPI: pip install 'handoff-builder[serve]'."
    ) from missing

from ._unicode import surrogate_at, valid_text

__all__ = ["agui_request_check", "agui_run_problems", "check_agui_request"]

_DEFAULT_MAX_INPUT_BYTES = 4 * 1024 * 1024  # ConversationHost's default (DEFAULT_MAX_INPUT_BYTES)


def _is_text(content: Any) -> bool:
    return isinstance(content, str)


# What the content of a message of each role may be: a test, and how to say it.
_CONTENT: dict[str, tuple[Callable[[Any], bool], str]] = {
    "user": (lambda content: isinstance(content, str | list), "text, or a list of content parts"),
    "assistant": (lambda content: content is None or _is_text(content), "text (or null)"),
    "system": (_is_text, "text"),
    "developer": (_is_text, "text"),
    "tool": (
        lambda content: isinstance(content, str | dict | list),
        "the tool's result (text or JSON)",
    ),
    "reasoning": (_is_text, "text"),
    "activity": (lambda content: isinstance(content, dict), "an object"),
}
_ROLES = tuple(_CONTENT)
_PART_TYPES = ("text", "image", "audio", "video", "document", "binary", "input_text", "input_image")


async def check_agui_request(request: Request) -> None:
    r"""Refuse a malformed AG-UI run with HTTP 422, naming each problem; let a valid one through.

    Add it to the AG-UI endpoint of :meth:`ConversationHost.as_agent`'s agent::

        add_agent_framework_fastapi_endpoint(
            app, agent, "/desk", dependencies=[Depends(check_agui_request)], ...
        )

    A run needs at least one message. Each message is an object with a role of the AG-UI
    protocol, a string ``id`` when it has one, and the content its role takes: text, or a list of
    content parts, for ``user``; text or nothing for ``assistant``; text for ``system``,
    ``developer`` and ``reasoning``; the result (text or JSON) and its ``toolCallId`` for
    ``tool``; an object for ``activity``. No text anywhere in the request may hold a lone
    surrogate (``"\ud800"``): AG-UI sends the messages back, and could not encode one. The new
    input (the messages after the last assistant message) larger than ``ConversationHost``'s
    default ``max_input_bytes`` (4 MiB of JSON) is refused with HTTP 413; for a host with another
    limit, use :func:`agui_request_check`.
    """
    await _check(request, _DEFAULT_MAX_INPUT_BYTES)


def agui_request_check(*, max_input_bytes: int | None) -> Callable[[Request], Awaitable[None]]:
    """:func:`check_agui_request` with the new input's size limit of your host.

    ``Depends(agui_request_check(max_input_bytes=host.max_input_bytes))``; ``None``: no limit.
    """

    async def check(request: Request) -> None:
        await _check(request, max_input_bytes)

    return check


async def _check(request: Request, max_input_bytes: int | None) -> None:
    try:
        body: Any = await request.json()
    except ValueError:  # not JSON (or not UTF-8): FastAPI's own validation answers
        return
    problems = agui_run_problems(body)
    if problems:
        raise HTTPException(status_code=422, detail=_detail(problems))
    size = _new_input_size(body)
    if max_input_bytes is not None and size > max_input_bytes:
        raise HTTPException(
            status_code=413,
            detail=(
                f"The new message is {size:,} bytes as JSON; the limit is {max_input_bytes:,} "
                "bytes (max_input_bytes). Nothing was stored."
            ),
        )


def _new_input_size(body: dict[str, Any]) -> int:
    """Bytes of UTF-8 JSON of the run's new input: its messages after the last assistant one."""
    messages = cast(list[dict[str, Any]], body["messages"])
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return len(json.dumps(messages[last + 1 :], ensure_ascii=False).encode("utf-8"))


def agui_run_problems(body: Any) -> list[str]:
    """Every problem of an AG-UI run's request body (``RunAgentInput`` as JSON), in order."""
    if not isinstance(body, dict):
        return [f"the request body is {_kind(body)}, not a JSON object (an AG-UI run)"]
    run = cast(dict[str, Any], body)
    messages: Any = run.get("messages")
    problems: list[str] = []
    if not isinstance(messages, list):
        problems.append(
            "messages is missing"
            if messages is None
            else f"messages is {_kind(messages)}, not a list of messages"
        )
    elif not messages:
        problems.append("messages is empty; send the conversation, the new user message last")
    else:
        for position, message in enumerate(cast(list[Any], messages)):
            problems.extend(_message_problems(position, message))
    for name, value in run.items():
        if name != "messages":
            problems.extend(_surrogates(name, value))
    return problems


def _message_problems(position: int, message: Any) -> list[str]:
    if not isinstance(message, dict):
        return [f"message #{position} is {_kind(message)}, not a message object"]
    fields = cast(dict[str, Any], message)
    message_id: Any = fields.get("id")
    if message_id is not None and not isinstance(message_id, str):
        return [f"message #{position}: id is {_kind(message_id)}; a message's id is a string"]
    which = f"message #{position}" + ("" if message_id is None else f" (id {message_id!r})")
    role: Any = fields.get("role")
    if role is None:
        return [f"{which}: role is missing; give it one of {', '.join(_ROLES)}"]
    if role not in _ROLES:
        known = ", ".join(_ROLES)
        return [f"{which}: role is {_kind(role)}; a message's role is one of {known}"]
    problems = [f"{which}: {problem}" for problem in _content_problems(role, fields)]
    return problems + [f"{which}: {problem}" for problem in _surrogates("", fields)]


def _content_problems(role: str, fields: dict[str, Any]) -> list[str]:
    content: Any = fields.get("content")
    accepts, takes = _CONTENT[role]
    problems: list[str] = []
    if not accepts(content):
        what = "content is missing" if "content" not in fields else f"content is {_kind(content)}"
        article = "an" if role in ("assistant", "activity") else "a"
        problems.append(f"{what}; {article} {role} message's content is {takes}")
    elif role == "user" and isinstance(content, list):
        problems.extend(_part_problems(cast(list[Any], content)))
    if role == "tool" and not isinstance(fields.get("toolCallId"), str):
        problems.append("toolCallId is missing or not text; name the tool call it answers")
    return problems


def _part_problems(parts: list[Any]) -> list[str]:
    problems: list[str] = []
    for index, part in enumerate(parts):
        if isinstance(part, str):
            continue  # AG-UI takes a plain string as a text part
        kind: Any = cast(dict[str, Any], part).get("type") if isinstance(part, dict) else None
        if kind not in _PART_TYPES:
            shown = f"of type {_shown(kind)}" if isinstance(kind, str) else _kind(part)
            problems.append(
                f"content part #{index} is {shown}; a part is text, or an object whose type is "
                f"one of {', '.join(_PART_TYPES)}"
            )
        elif kind in ("text", "input_text") and not isinstance(
            cast(dict[str, Any], part).get("text"), str
        ):
            problems.append(f"content part #{index} is a text part whose text is not text")
    return problems


def _surrogates(path: str, value: Any) -> list[str]:
    """A problem for each text in ``value`` with a lone surrogate, named by its path."""
    if isinstance(value, str):
        at = surrogate_at(value)
        if at is None:
            return []
        return [
            f"{path or 'the text'} has a lone surrogate (U+{ord(value[at]):04X}) at character "
            f"{at}; send valid Unicode text"
        ]
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in cast(dict[Any, Any], value).items():
            name = f"{path}.{key}" if path else str(key)
            found.extend(_surrogates(name, key) if isinstance(key, str) else [])
            found.extend(_surrogates(name, item))
    elif isinstance(value, list):
        for index, item in enumerate(cast(list[Any], value)):
            found.extend(_surrogates(f"{path}[{index}]", item))
    return found


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({_shown(value)})"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _shown(value: str) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def _detail(problems: list[str]) -> str:
    if len(problems) == 1:
        detail = f"Invalid AG-UI run: {problems[0]}."
    else:
        lines = "".join(f"\n  - {problem}" for problem in problems)
        detail = f"Invalid AG-UI run ({len(problems)} problems):{lines}"
    return valid_text(detail)  # a key named in it may hold a lone surrogate too
