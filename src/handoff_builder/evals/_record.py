"""Cases from real traffic: a stored hosted conversation, one case per user turn.

A turn starts at a message the user wrote (a ``user`` message with text and no author; several
in a row are one turn's input) and runs until the next. Its case's ``input`` is the conversation
before it (the user's and the agents' texts; tool calls and their results are left out) and its
own messages; ``start`` the agent it started at; ``expect.agent`` the agent it ended at (the last
handoff's target, else the agent that answered); ``expect.path`` the agent it started at and
each handoff's target. A turn still open, or given up (abandoned), is left out.

With ``redact=True`` personal data is left out of every text (:data:`REDACTIONS`), and the
case ids do not carry the conversation id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from agent_framework import Message

from handoff_builder._model_inputs import redact_patterns
from handoff_builder._records import stored_history, stored_host_state
from handoff_builder._state import transferred_handoff
from handoff_builder.stores import ConversationStore

from ._cases import CaseMessage, EvalCase, EvalCaseError, Expectation

__all__ = ["REDACTIONS", "record_cases"]

REDACTIONS: tuple[tuple[str, str], ...] = (
    (r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", "[email]"),
    (r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b", "[iban]"),
    (r"\b\d{1,3}(?:\.\d{1,3}){3}\b", "[ip]"),
    (r"\+?\(?\d(?:[\s()./-]{0,2}\d){5,}", "[number]"),
)
"""What ``redact=True`` replaces, in this order: e-mail addresses; IBANs (two capital letters,
two digits, then 11 to 30 capital letters or digits, single spaces allowed between them); IPv4
addresses; and every number of six digits or more, counted across up to two spaces, dots,
dashes, slashes or brackets between digits (phone numbers, card and account numbers, dates
written in digits), with a leading ``+`` or ``(``."""

_redactions = [redact_patterns(pattern, replacement=marker) for pattern, marker in REDACTIONS]


@dataclass(frozen=True)
class _Turn:
    """Where one user turn is in the history: its input from ``start``, its messages to ``end``."""

    start: int
    first_reply: int
    end: int


async def record_cases(
    store: ConversationStore, conversation_id: str, *, redact: bool = False
) -> list[EvalCase]:
    """One case per finished user turn of a stored conversation, in order.

    Each case expects what happened, so that running it again checks the routing stays as it
    was; where the turn went wrong, edit ``expect`` to what should have happened.

    Raises:
        EvalCaseError: the store has no such conversation, or it has no finished turn.
        CorruptConversationError: the stored record cannot be read.
    """
    record = await store.load(conversation_id)
    where = f"conversation {conversation_id!r}"
    if record is None:
        raise EvalCaseError(where, None, "not in the store")
    history = stored_history(record)
    state = stored_host_state(record)
    turns = _turns(history)
    if state.turn is not None and turns:  # the last turn is still open
        turns.pop()
    left_out = state.left_out
    name = _case_name(conversation_id, redact=redact)
    cases: list[EvalCase] = []
    for number, turn in enumerate(turns, start=1):
        if any(low <= turn.start < high for low, high in left_out):
            continue
        case = _case(history, turn, f"{name}-{number}", left_out, redact=redact)
        if case is not None:
            cases.append(case)
    if not cases:
        raise EvalCaseError(where, None, "no finished user turn to make a case of")
    return cases


def _turns(history: Sequence[Message]) -> list[_Turn]:
    starts = [
        index
        for index, message in enumerate(history)
        if _users(message) and (index == 0 or not _users(history[index - 1]))
    ]
    turns: list[_Turn] = []
    for position, start in enumerate(starts):
        end = starts[position + 1] if position + 1 < len(starts) else len(history)
        first_reply = start
        while first_reply < end and _users(history[first_reply]):
            first_reply += 1
        turns.append(_Turn(start, first_reply, end))
    return turns


def _users(message: Message) -> bool:
    """A message the user wrote: a ``user`` message with text, with no author (an agent's)."""
    return message.role == "user" and message.author_name is None and bool(message.text)


def _case(
    history: Sequence[Message],
    turn: _Turn,
    case_id: str,
    left_out: Sequence[tuple[int, int]],
    *,
    redact: bool,
) -> EvalCase | None:
    replies = history[turn.first_reply : turn.end]
    handoffs = [
        recorded.handoff
        for message in replies
        for content in message.contents
        if content.type == "function_result" and (recorded := transferred_handoff(content))
    ]
    speakers = [m.author_name for m in replies if m.role == "assistant" and m.author_name]
    if handoffs:
        path = (handoffs[0].source, *(h.target for h in handoffs))
    elif speakers:
        path = (speakers[0],)
    else:
        return None  # nobody answered: nothing to expect
    before = [
        message
        for index, message in enumerate(history[: turn.start])
        if not any(low <= index < high for low, high in left_out)
    ]
    messages = [
        *_texts(before, redact=redact),
        *_texts(history[turn.start : turn.first_reply], redact=redact),
    ]
    start = path[0] if turn.start > 0 else None
    return EvalCase(case_id, tuple(messages), Expectation(path[-1], path), start)


def _texts(messages: Sequence[Message], *, redact: bool) -> list[CaseMessage]:
    """The texts of the user's and the agents' messages (tool calls and results left out)."""
    texts: list[CaseMessage] = []
    for message in messages:
        if _users(message):
            texts.append(CaseMessage("user", _redacted(message, redact=redact)))
        elif message.role == "assistant" and message.author_name and message.text:
            text = _redacted(message, redact=redact)
            texts.append(CaseMessage("assistant", text, message.author_name))
    return texts


def _redacted(message: Message, *, redact: bool) -> str:
    if redact:
        for redaction in _redactions:
            message = redaction(message)
    return message.text


def _case_name(conversation_id: str, *, redact: bool) -> str:
    if not redact:
        return conversation_id
    digest = hashlib.sha256(conversation_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"conversation-{digest[:8]}"
