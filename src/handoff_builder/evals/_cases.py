"""Eval cases: one user turn each, with the agent expected to answer it, read from JSON Lines.

A case line is a JSON object::

    {"id": "b1", "input": "I was charged twice", "expect": {"agent": "billing"}}
    {"input": [{"role": "user", "text": "My app crashes"},
               {"role": "assistant", "text": "Which version?", "agent": "tech"},
               {"role": "user", "text": "And my bill is wrong too"}],
     "start": "tech",
     "expect": {"agent": "billing", "path": ["tech", "triage", "billing"],
                "goal_contains": ["bill"]}}

Every problem is an :class:`EvalCaseError` that names the file, the line and what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from handoff_builder.exceptions import HandoffBuilderError

__all__ = [
    "CaseMessage",
    "EvalCase",
    "EvalCaseError",
    "Expectation",
    "check_agents",
    "load_cases",
    "parse_cases",
]

Role = Literal["user", "assistant"]
_CASE_FIELDS = ("id", "input", "expect", "start")
_EXPECT_FIELDS = ("agent", "path", "goal_contains")
_MESSAGE_FIELDS = ("role", "text", "agent")


class EvalCaseError(HandoffBuilderError, ValueError):
    """A case file, or a case, that cannot be run: ``source``, ``line`` (1-based) and ``problem``.

    The message reads ``cases.jsonl, line 3: expect.agent is missing``.
    """

    def __init__(self, source: str, line: int | None, problem: str) -> None:
        self.source = source
        self.line = line
        self.problem = problem
        where = source if line is None else f"{source}, line {line}"
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class CaseMessage:
    """One message of a case's input: ``role`` (``"user"`` or ``"assistant"``) and ``text``.

    ``agent`` names the agent that wrote an assistant message (its ``author_name``).
    """

    role: Role
    text: str
    agent: str | None = None

    def to_json(self) -> dict[str, str]:
        """The message as a case line writes it."""
        shown = {"role": self.role, "text": self.text}
        if self.agent is not None:
            shown["agent"] = self.agent
        return shown


@dataclass(frozen=True)
class Expectation:
    """What a case expects of its turn.

    ``agent`` must answer it (the agent the turn ends at); ``path``, when given, is every agent
    that holds the conversation in the turn, in order (the one it starts at, then each handoff's
    target); each of ``goal_contains`` must appear, ignoring case, in the goal (or hand-back
    summary) of the turn's last handoff.
    """

    agent: str
    path: tuple[str, ...] | None = None
    goal_contains: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The expectation as a case line writes it."""
        shown: dict[str, Any] = {"agent": self.agent}
        if self.path is not None:
            shown["path"] = list(self.path)
        if self.goal_contains:
            shown["goal_contains"] = list(self.goal_contains)
        return shown


@dataclass(frozen=True)
class EvalCase:
    """One user turn to route, run as a new conversation.

    ``input`` ends with the user's message(s) that make the turn; the messages before them are
    the conversation so far (stored before the turn, as a hosted conversation keeps them).
    ``start`` is the agent the turn starts at (default: the workflow's initial agent), as a
    hosted conversation remembers the agent that answered last. ``line`` is where the case was
    read (``None`` for a case made in code).
    """

    id: str
    input: tuple[CaseMessage, ...]
    expect: Expectation
    start: str | None = None
    line: int | None = None

    @classmethod
    def of(
        cls,
        id: str,  # noqa: A002 - the case's field
        input: str | Sequence[CaseMessage],  # noqa: A002 - the case's field
        agent: str,
        *,
        path: Sequence[str] | None = None,
        goal_contains: Sequence[str] = (),
        start: str | None = None,
    ) -> EvalCase:
        """A case made in code: ``EvalCase.of("b1", "I was charged twice", "billing")``.

        Raises:
            EvalCaseError: the case is not valid (as a case line would be refused).
        """
        messages = [m.to_json() for m in input] if not isinstance(input, str) else input
        raw: dict[str, Any] = {"id": id, "input": messages, "expect": {"agent": agent}}
        if path is not None:
            raw["expect"]["path"] = list(path)
        if goal_contains:
            raw["expect"]["goal_contains"] = list(goal_contains)
        if start is not None:
            raw["start"] = start
        return _case(raw, f"case {id!r}", None, id)

    @property
    def turn(self) -> tuple[CaseMessage, ...]:
        """The user's messages that make the turn: the last ones of ``input``."""
        first = len(self.input)
        while first > 0 and self.input[first - 1].role == "user":
            first -= 1
        return self.input[first:]

    @property
    def context(self) -> tuple[CaseMessage, ...]:
        """The conversation before the turn (``input`` without :attr:`turn`)."""
        return self.input[: len(self.input) - len(self.turn)]

    def to_json(self) -> dict[str, Any]:
        """The case as one line of a case file writes it (``json.dumps`` it)."""
        only = self.input[0] if len(self.input) == 1 and self.input[0].agent is None else None
        shown: dict[str, Any] = {
            "id": self.id,
            "input": only.text
            if only and only.role == "user"
            else [m.to_json() for m in self.input],
        }
        if self.start is not None:
            shown["start"] = self.start
        shown["expect"] = self.expect.to_json()
        return shown


def load_cases(path: str | Path) -> list[EvalCase]:
    """The cases of a JSON Lines file (blank lines are skipped).

    Raises:
        EvalCaseError: the file cannot be read, holds no case, or a line is not a valid case
            (the first such line, with what is wrong).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise EvalCaseError(str(path), None, f"cannot be read ({error})") from error
    return parse_cases(text.splitlines(), source=str(path))


def parse_cases(lines: Iterable[str], *, source: str = "<cases>") -> list[EvalCase]:
    """The cases of JSON Lines text, one case a line (blank lines are skipped).

    A case without an ``id`` is named after its line (``line-3``).

    Raises:
        EvalCaseError: a line is not a valid case, two cases share an id, or there is no case.
    """
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            problem = f"not valid JSON ({error.msg} at column {error.colno})"
            raise EvalCaseError(source, number, problem) from None
        case = _case(raw, source, number, f"line-{number}")
        if case.id in seen:
            problem = f"the id {case.id!r} is the id of line {seen[case.id]} too"
            raise EvalCaseError(source, number, problem)
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise EvalCaseError(source, None, "holds no case (one JSON object a line)")
    return cases


def check_agents(cases: Sequence[EvalCase], agents: Sequence[str], *, source: str) -> None:
    """Refuse a case that names an agent the workflow does not have.

    Raises:
        EvalCaseError: naming the case's line (or id), the field and the workflow's agents.
    """
    known = set(agents)
    listed = ", ".join(sorted(known))
    for case in cases:
        named = [("expect.agent", case.expect.agent)]
        named += [("expect.path", agent) for agent in case.expect.path or ()]
        named += [("start", case.start)] if case.start is not None else []
        for field, agent in named:
            if agent not in known:
                where = source if case.line is not None else f"case {case.id!r}"
                problem = (
                    f"{field} names {agent!r}, which is not an agent of the workflow ({listed})"
                )
                raise EvalCaseError(where, case.line, problem)


# -- one case, checked ---------------------------------------------------------------------------


def _case(raw: object, source: str, line: int | None, default_id: str) -> EvalCase:
    def fail(problem: str) -> EvalCaseError:
        return EvalCaseError(source, line, problem)

    fields = _object(raw, "a case", _CASE_FIELDS, fail)
    case_id = fields.get("id", default_id)
    if isinstance(case_id, int) and not isinstance(case_id, bool):
        case_id = str(case_id)
    if not isinstance(case_id, str) or not case_id.strip():
        raise fail(f"id must be a non-empty string, got {_shown(case_id)}")
    if "input" not in fields:
        raise fail("input is missing (a user message, or a list of {role, text} messages)")
    messages = _input(fields["input"], fail)
    if "expect" not in fields:
        raise fail('expect is missing (e.g. "expect": {"agent": "billing"})')
    expect = _expectation(fields["expect"], fail)
    start = fields.get("start")
    if start is not None and (not isinstance(start, str) or not start.strip()):
        raise fail(f"start must be an agent's name, got {_shown(start)}")
    return EvalCase(case_id, messages, expect, start, line)


def _object(raw: object, what: str, allowed: Sequence[str], fail: Any) -> Mapping[str, object]:
    if not isinstance(raw, dict):
        raise fail(f"{what} must be a JSON object, got {_shown(raw)}")
    fields = cast(dict[str, object], raw)
    unknown = [key for key in fields if key not in allowed]
    if unknown:
        raise fail(f"{what} has no field {unknown[0]!r} (its fields: {', '.join(allowed)})")
    return fields


def _input(raw: object, fail: Any) -> tuple[CaseMessage, ...]:
    if isinstance(raw, str):
        if not raw.strip():
            raise fail("input is an empty message")
        return (CaseMessage("user", raw),)
    items: list[object] = cast(list[object], raw) if isinstance(raw, list) else []
    if not items:
        shown = _shown(cast(object, raw))
        raise fail(f"input must be a message or a non-empty list of messages, got {shown}")
    messages: list[CaseMessage] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        fields = _object(item, where, _MESSAGE_FIELDS, fail)
        role, text, agent = fields.get("role"), fields.get("text"), fields.get("agent")
        if role not in ("user", "assistant"):
            raise fail(f'{where}.role must be "user" or "assistant", got {_shown(role)}')
        if not isinstance(text, str) or not text.strip():
            raise fail(f"{where}.text must be a non-empty string, got {_shown(text)}")
        if agent is not None and (role != "assistant" or not isinstance(agent, str) or not agent):
            raise fail(
                f"{where}.agent names the agent of an assistant message, got {_shown(agent)}"
            )
        messages.append(CaseMessage(role, text, agent))
    if messages[-1].role != "user":
        raise fail("input must end with a user message (the turn to route)")
    return tuple(messages)


def _expectation(raw: object, fail: Any) -> Expectation:
    fields = _object(raw, "expect", _EXPECT_FIELDS, fail)
    agent = fields.get("agent")
    if agent is None:
        raise fail("expect.agent is missing (the agent that should answer the turn)")
    if not isinstance(agent, str) or not agent.strip():
        raise fail(f"expect.agent must be an agent's name, got {_shown(agent)}")
    raw_path = fields.get("path")
    path = None if raw_path is None else _strings(raw_path)
    if raw_path is not None:
        if not path:
            shown = _shown(raw_path)
            raise fail(f"expect.path must be a non-empty list of agent names, got {shown}")
        if path[-1] != agent:
            raise fail(f"expect.path ends at {path[-1]!r}, but expect.agent is {agent!r}")
    raw_goal = fields.get("goal_contains", [])
    goal = _strings(raw_goal)
    if goal is None:
        raise fail(f"expect.goal_contains must be a list of texts, got {_shown(raw_goal)}")
    return Expectation(agent, path, goal)


def _strings(value: object) -> tuple[str, ...] | None:
    """``value`` as texts, if it is a list of non-blank strings."""
    if not isinstance(value, list):
        return None
    items = cast(list[object], value)
    texts = tuple(item for item in items if isinstance(item, str) and item.strip())
    return texts if len(texts) == len(items) else None


def _shown(value: object) -> str:
    """A JSON value as the message shows it: its JSON, cut short."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."
