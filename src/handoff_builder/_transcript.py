"""What a run of a served conversation asks for: its messages, checked, and which of them are new.

``HostedConversationAgent.run`` takes text (always a new message) or messages. Messages are a
transcript: AG-UI clients send the whole conversation every time, and send it again after a
dropped connection. So a transcript is read against the stored conversation:

* its new input is the user messages after its last assistant or tool message;
* of those, the ones the conversation has stored already are not stored again: a message with an
  id is stored when a stored user message has that id; one without, when the transcript's user
  messages line up with the stored ones (same ids where both have one, otherwise the same role
  and text, in the same positions) and it is one of them;
* what is left is a new turn (:class:`NewTurn`); when nothing is left, the client sent a turn
  again (:class:`ResentTurn`), and gets that turn, not a new one.

Each turn of a transcript carries an idempotency key made from its last user message (its id,
or its position and text), so that a resent turn is found again (``ConversationHost.replay``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import Content, Message

from .exceptions import InvalidMessageError

__all__ = [
    "ROLES",
    "NewTurn",
    "ResentTurn",
    "messages_of",
    "new_input",
    "read_transcript",
    "same_message",
]

ROLES = ("user", "assistant", "system", "tool")
"""The roles of the messages a run takes."""

_ANSWERS = frozenset({"function_approval_response", "function_result"})


@dataclass(frozen=True)
class NewTurn:
    """Messages to send as a new turn, with its idempotency key (``None`` for text)."""

    messages: list[Message]
    key: str | None


@dataclass(frozen=True)
class ResentTurn:
    """Every new message of the run is stored already: the turn ``last`` started, again."""

    last: Message  # the stored user message the turn started with (its last one)
    key: str  # the idempotency key that turn was sent with


def messages_of(value: Any) -> list[Message]:
    """The messages of a run's input: text, a Message or a Content, or a list of them.

    Text and a Content are user messages; ``None`` is no message.

    Raises:
        InvalidMessageError: an item is none of these, or a message's role is not one of
            :data:`ROLES`.
    """
    if value is None:
        return []
    listed = isinstance(value, (list, tuple))
    items = list(cast(Sequence[Any], value)) if listed else [value]
    messages: list[Message] = []
    for position, item in enumerate(items):
        which = f"item #{position}" if listed else "the message"
        if isinstance(item, str | Content):
            messages.append(Message(role="user", contents=[item]))
        elif not isinstance(item, Message):
            shown = f"{type(item).__name__} {_shown(item)}"
            raise InvalidMessageError(
                "A run takes text, a Message or a Content, or a list of them; "
                + (f"{which} is {shown}." if listed else f"got {shown}.")
            )
        elif item.role not in ROLES:
            raise InvalidMessageError(
                f"{which.capitalize()} has the role {item.role!r}; a run takes messages with "
                f"the roles {', '.join(map(repr, ROLES[:-1]))} or {ROLES[-1]!r}."
            )
        else:
            messages.append(item)
    return messages


def read_transcript(given: Sequence[Message], stored: Sequence[Message]) -> NewTurn | ResentTurn:
    """What the transcript ``given`` asks of the conversation that has ``stored``.

    Raises:
        InvalidMessageError: no user message follows the transcript's last reply.
    """
    trailing = new_input(given)
    client, saved = _user_inputs(given), _user_inputs(stored)
    positions = {id(message): position for position, message in enumerate(client)}
    ids = {message.message_id for message in saved if message.message_id}
    lined_up = all(same_message(a, b) for a, b in zip(client, saved, strict=False))

    def is_stored(message: Message) -> bool:
        if message.message_id and message.message_id in ids:
            return True
        return lined_up and positions[id(message)] < len(saved)

    inputs = [message for message in trailing if id(message) in positions]
    if not inputs:  # answers to nothing that waits, or other agents' words: sent as they are
        return NewTurn(trailing, None)
    fresh = [message for message in inputs if not is_stored(message)]
    if fresh:
        new = [m for m in trailing if id(m) not in positions or not is_stored(m)]
        return NewTurn(new, _key(fresh[-1], len(saved) + len(fresh) - 1))
    last = inputs[-1]
    return ResentTurn(last, _key(last, positions[id(last)]))


def new_input(given: Sequence[Message]) -> list[Message]:
    """The messages after the last assistant or tool message of ``given``: the new input.

    Raises:
        InvalidMessageError: they hold no user message.
    """
    last = max((i for i, m in enumerate(given) if m.role in ("assistant", "tool")), default=-1)
    trailing = list(given[last + 1 :])
    if not any(message.role == "user" for message in trailing):
        raise InvalidMessageError(
            "A run needs a new user message after the conversation's last reply (or answers to "
            "the requests the conversation waits for); send the user's message last."
        )
    return trailing


def _user_inputs(messages: Sequence[Message]) -> list[Message]:
    """What the user wrote, in order.

    User messages without an author (the host's notes have one) that answer no request
    (approvals and results are matched by their request ids instead).
    """
    return [
        message
        for message in messages
        if message.role == "user"
        and message.author_name is None
        and not any(content.type in _ANSWERS for content in message.contents)
    ]


def same_message(a: Message, b: Message) -> bool:
    """The same message: the same id when both have one, otherwise the same role and text."""
    if a.message_id and b.message_id:
        return a.message_id == b.message_id
    return a.role == b.role and a.text == b.text


def _key(message: Message, position: int) -> str:
    """The idempotency key of the turn whose input ``message`` ends.

    Made from its id, or failing that from its position among the user's messages and its text.
    """
    if message.message_id:
        return f"message id {_digest(message.message_id)}"
    return f"user message #{position} {_digest(message.text)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
