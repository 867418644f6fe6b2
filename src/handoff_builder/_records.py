"""A stored conversation read back: its messages and the host's state, checked.

Every reader of a :class:`~handoff_builder.stores.ConversationRecord` goes through here, so a
row that does not convert is named the same way everywhere (``CorruptConversationError`` with
the message's position, or the state's field).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from agent_framework import Message

from ._events import HandoffEvent
from ._state import HostState, decode_host_state
from .exceptions import CorruptConversationError, CorruptStateError

if TYPE_CHECKING:
    from .stores import ConversationRecord, ConversationStore


def stored_history(record: ConversationRecord) -> list[Message]:
    """The stored messages as Messages; one that does not convert is named."""
    history: list[Message] = []
    for position, item in enumerate(record.messages):
        problem = _shape_problem(item)
        if problem is not None:
            raise _not_a_message(record.conversation_id, position, problem)
        try:
            history.append(Message.from_dict(item))
        except Exception as error:  # any failure to convert is a corrupt row
            problem = f"{type(error).__name__}: {error}"
            raise _not_a_message(record.conversation_id, position, problem) from error
    return history


def _not_a_message(conversation_id: str, position: int, problem: str) -> CorruptConversationError:
    detail = f"message #{position} is not a valid message ({problem})"
    return CorruptConversationError(conversation_id, detail, position)


def _shape_problem(item: Mapping[str, Any]) -> str | None:
    """What is wrong with a stored message's shape (``Message.to_dict()``), if anything."""
    if not isinstance(item.get("role"), str):
        return "its role is not a string"
    contents = item.get("contents", [])
    if not isinstance(contents, list):
        return "its contents are not a list"
    for index, content in enumerate(cast(list[Any], contents)):
        if not isinstance(content, dict) or not isinstance(
            cast(dict[str, Any], content).get("type"), str
        ):
            return f"content #{index} is not a content object with a type"
    return None


def stored_host_state(record: ConversationRecord) -> HostState:
    """The stored host state, checked; a bad one is a CorruptConversationError."""
    where = f"Conversation {record.conversation_id!r}"
    try:
        return decode_host_state(record.state.get("host", {}), where)
    except CorruptStateError as error:
        raise CorruptConversationError(record.conversation_id, error.detail) from error


@dataclass(frozen=True)
class OpenTurn:
    """What a conversation's open turn has done so far (a turn that waits for answers)."""

    input: list[Message]  # the user's messages that started it
    messages: list[Message]  # what came after them: the requests it waits for among them
    handoffs: tuple[HandoffEvent, ...]


async def open_turn_so_far(store: ConversationStore, conversation_id: str) -> OpenTurn | None:
    """The conversation's open turn so far; ``None`` when no turn is open."""
    record = await store.load(conversation_id)
    if record is None:
        return None
    turn = stored_host_state(record).turn
    if turn is None:
        return None
    history = stored_history(record)
    first = turn.input_from(history)
    return OpenTurn(history[first : turn.start], history[turn.start :], turn.handoffs)


__all__ = ["OpenTurn", "open_turn_so_far", "stored_history", "stored_host_state"]
