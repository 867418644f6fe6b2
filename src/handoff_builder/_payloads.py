"""What a handoff tool takes: a pydantic model per edge, validated when the model calls the tool.

Without ``payload=`` a handoff tool takes :class:`HandoffGoal` (a required one-sentence ``goal``)
and a hand-back tool :class:`HandBackSummary` (a required ``summary``). With ``payload=Model`` the
tool's JSON schema is ``Model``'s (title, field descriptions, required fields, enums, nested
models), and the call's arguments are validated with it: an invalid call is a tool error that names
each bad field, and nothing routes. A tool declared strict (:func:`declares_strict`) takes its
arguments exactly as typed: nothing is converted ("25" is not an integer).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "DelegateTask",
    "HandBackSummary",
    "HandoffGoal",
    "ReviewApproval",
    "ReviewChanges",
    "declares_strict",
    "describe_errors",
    "is_strict_schema",
    "payload_label",
    "validate_arguments",
]


class HandoffGoal(BaseModel):
    """The handoff: the user's goal, for the agent that takes over."""

    # A handoff tool's arguments without ``payload=``; the docstring is the schema's description.

    model_config = ConfigDict(extra="forbid", title="handoff")

    # Without a description a small model wrote the tool's description or one word as the goal.
    goal: str = Field(description="The user's goal in one sentence.")


class HandBackSummary(BaseModel):
    """The hand-back: what was done, and what is still open."""

    # A hand-back tool's arguments without ``payload=``; the docstring is the schema's description.

    model_config = ConfigDict(extra="forbid", title="hand-back")

    summary: str = Field(description="What you did, and what is still open.")


class DelegateTask(BaseModel):
    """The task, for the expert to carry out; its answer comes back to you."""

    # A delegate tool's arguments without ``payload=``; the docstring is the schema's description.

    model_config = ConfigDict(extra="forbid", title="task")

    task: str = Field(
        description=(
            "What the expert should do or answer, with everything it needs to know to do it."
        )
    )


class ReviewApproval(BaseModel):
    """Approve the reply under review: it goes to the user as it is."""

    # The reviewer's approve tool (with_review); the docstring is the schema's description.

    model_config = ConfigDict(extra="forbid", title="approve")

    note: str = Field(description="Why the reply can go to the user, in one sentence.")


class ReviewChanges(BaseModel):
    """Send the reply under review back to its author, with what must change."""

    # The reviewer's request_changes tool (with_review).

    model_config = ConfigDict(extra="forbid", title="request_changes")

    feedback: str = Field(
        description="What is wrong with the reply and what must change before it can go out."
    )


def validate_arguments(
    model: type[BaseModel], arguments: Any, *, strict: bool | None = None
) -> tuple[BaseModel | None, str | None]:
    """``arguments`` (a JSON string, a mapping or a model) validated by ``model``, as JSON.

    A model's arguments are JSON, so they are validated in pydantic's JSON mode: a strict model
    (``strict=True``) takes an enum's value or an ISO date as the model wrote them. ``strict``
    (``None``: as the tool of ``model`` is declared, :func:`declares_strict`) turns pydantic's
    strict mode on: no value is converted to its field's type ("25" is not an integer).
    Returns the payload, or ``None`` and a sentence that names each bad field.
    """
    if isinstance(arguments, BaseModel):
        arguments = arguments.model_dump(mode="json")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            return None, f"the arguments are not JSON ({error.msg})"
    if not isinstance(arguments, Mapping):
        return None, f"the arguments are a {type(arguments).__name__}, not an object"
    try:
        text = json.dumps(cast(Mapping[str, Any], arguments), ensure_ascii=False)
    except (TypeError, ValueError) as error:  # not JSON values: not something a model sent
        return None, f"the arguments are not JSON values ({error})"
    try:
        strict = declares_strict(model) if strict is None else strict
        return model.model_validate_json(text, strict=strict or None), None
    except ValidationError as error:
        return None, describe_errors(error)


def describe_errors(error: ValidationError) -> str:
    """One ``field: what was wrong`` per problem, joined with ``; ``."""
    parts: list[str] = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(part) for part in problem["loc"]) or "the arguments"
        parts.append(f"{where}: {problem['msg']}")
    return "; ".join(parts)


def payload_label(model: type[BaseModel]) -> str:
    """How a payload of ``model`` is labelled in a note: its title, else its class name."""
    title = model.model_config.get("title")
    return title if isinstance(title, str) and title else model.__name__


@functools.lru_cache(maxsize=256)
@functools.cache
def declares_strict(model: type[BaseModel]) -> bool:
    """True when a tool that takes ``model`` is declared ``"strict": true`` (its schema allows it).

    Such a tool's arguments are validated in strict mode: a provider that enforces the schema sends
    nothing else, and one that does not must not have its mistakes converted silently. Known once
    per model: building its JSON schema costs more than a handoff's own bookkeeping.
    """
    return is_strict_schema(model.model_json_schema())


def is_strict_schema(schema: Mapping[str, Any]) -> bool:
    """True when OpenAI's strict function calling accepts ``schema`` as it is.

    Strict mode needs every object closed (``additionalProperties: false``) and every property
    required, in nested models too; a model declares that with ``extra="forbid"`` and no
    defaults. Nothing is rewritten to make a schema qualify.
    """
    return _strict(schema)


def _closed(node: Mapping[str, Any]) -> bool:
    """An object node that strict mode accepts: closed, every property required, no default."""
    if "default" in node:
        return False
    if node.get("type") != "object" and "properties" not in node:
        return True
    properties = cast(Mapping[str, Any], node.get("properties") or {})
    required = set(cast(list[str], node.get("required") or []))
    return node.get("additionalProperties") is False and required == set(properties)


def _children(node: Mapping[str, Any]) -> list[Any]:
    """The schemas nested in ``node``: its properties, definitions, items and alternatives."""
    children: list[Any] = []
    for key in ("properties", "$defs"):
        children += cast(Mapping[str, Any], node.get(key) or {}).values()
    for key in ("items", "anyOf", "oneOf", "allOf"):
        sub = node.get(key)
        children += cast(list[Any], sub) if isinstance(sub, list) else [sub]
    return children


def _strict(node: Any) -> bool:
    if not isinstance(node, Mapping):
        return True
    fields = cast(Mapping[str, Any], node)
    return _closed(fields) and all(_strict(child) for child in _children(fields))
