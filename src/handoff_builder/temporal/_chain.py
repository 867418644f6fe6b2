"""Agent calls that carry a reference to the conversation instead of the conversation.

A worker given a message log (``conversation_worker(..., messages=store)``, a
:class:`~handoff_builder.stores.MessageLog` every worker of the task queue shares) runs its
conversations' agent calls on histories read from that log. The workflow still decides with the
whole history in memory, and it alone names what a history is: each message gets a digest that
covers it and every message before it (a hash chain), so a history is named by its length and its
last digest. An agent call carries that name, and the messages the log may not have yet (the
*tail*: what came since the last call that succeeded); the activity stores the tail (each entry
once, so a retried call writes nothing new) and reads the history back by its name.

So an agent call's payload, and the event history a turn adds, grow with what the turn adds,
not with the conversation. A turn that is run again after a failure starts from an earlier
history, whose new messages get digests of their own: entries of the abandoned attempt stay in
the log, unread, and never mix with the history the workflow names.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_framework import Message
from pydantic import BaseModel

from handoff_builder.stores import ChainedMessage, MessageLog

HISTORY_BY_REFERENCE = "history-by-reference"
"""The patch under which agent calls carry a reference to the history (workflows that started
before it keep sending the history itself until their next run)."""

READ_BACK_FROM_THE_END = "read-back-from-the-end"
"""The patch under which a new run reads its history back from the last page to the first, each
page read by its own positions; before it, every page read the history from its start."""

READ_WINDOW = 256
"""How many messages a page read back asks the log for at first (doubled until the page is
full): a page takes what fits in its bytes, from its end back."""


def chain_digest(previous: str, body: Mapping[str, Any]) -> str:
    """The digest of a history: that of the history before its last message, and that message."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{previous}\n{text}".encode("utf-8", "surrogatepass")).hexdigest()


class ChainEntry(BaseModel):
    """A message of the tail, as it crosses Temporal (a ``ChainedMessage``)."""

    digest: str
    previous: str
    position: int
    body: dict[str, Any]


class HistoryReference(BaseModel):
    """The history an agent call runs on: its length, its last digest, and the tail to store."""

    length: int
    head: str
    tail: list[ChainEntry]

    async def read(self, log: MessageLog, conversation_id: str) -> list[dict[str, Any]]:
        """Store the tail in ``log``, then read the whole history from it.

        Raises:
            CorruptConversationError: the log lacks a message of the history.
            StoreUnavailableError: the log cannot be reached.
        """
        entries = [ChainedMessage(e.digest, e.previous, e.position, e.body) for e in self.tail]
        await log.put_chain(conversation_id, entries)
        found = await log.read_chain(conversation_id, self.head, self.length)
        return [dict(entry.body) for entry in found]


DIGEST_CHARACTERS = 64
"""The length of a digest (SHA-256, in hex)."""


def joining_tail(position: int, bodies: Sequence[dict[str, Any]]) -> list[ChainEntry]:
    """The entries messages ``bodies`` become in an agent call's tail, joining at ``position``.

    Their digests are placeholders of a digest's length: what an Update that adds ``bodies``
    adds to the next call's payload is measured with them before the messages join.
    """
    placeholder = "0" * DIGEST_CHARACTERS
    return [
        ChainEntry(digest=placeholder, previous=placeholder, position=position + number, body=body)
        for number, body in enumerate(bodies)
    ]


class LoggedHistory(BaseModel):
    """A history in the workers' message log, for the activity that reads it back.

    Continue-as-new carries a reference to the part of the conversation the log holds (and
    the messages after it); the run that follows reads it back in pages of about ``budget``
    bytes. With ``from_end``, a page is the last messages of ``reference`` that fit (the
    reference of the next page is the history before them); without, the messages from
    ``start`` on (runs that began before :data:`READ_BACK_FROM_THE_END`).
    """

    conversation_id: str
    reference: HistoryReference
    start: int = 0
    budget: int = 0
    from_end: bool = False


class HistoryPage(BaseModel):
    """Messages ``start`` up to ``end`` (exclusive) of a history read back.

    ``previous`` is the digest of the history before them (``""`` at the first message).
    """

    messages: list[dict[str, Any]]
    end: int
    start: int = 0
    previous: str = ""


def page_of(history: Sequence[dict[str, Any]], start: int, budget: int) -> HistoryPage:
    """The messages of ``history`` from ``start`` that fit in ``budget`` bytes (one at least).

    Bytes of UTF-8, as a payload holds them (text in Chinese takes three a character).
    """
    end, used = start, 0
    while end < len(history):
        size = _size(history[end])
        if end > start and used + size > budget:
            break
        used += size
        end += 1
    return HistoryPage(messages=list(history[start:end]), end=end)


def _size(body: Mapping[str, Any]) -> int:
    """A message's bytes in a payload: UTF-8 (text in Chinese takes three a character)."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


async def last_page(
    log: MessageLog, conversation_id: str, reference: HistoryReference, budget: int
) -> HistoryPage:
    """The last messages of ``reference``'s history that fit in ``budget`` bytes (one at least).

    Read from the log by position, from the end back, :data:`READ_WINDOW` messages at first
    and twice as many each time the page has room for more: a page costs the messages it holds,
    not the history before them.

    Raises:
        CorruptConversationError: the log lacks one of them.
    """
    head, end = reference.head, reference.length
    taken: list[ChainedMessage] = []  # the page, its last message first
    used, window = 0, READ_WINDOW
    while end > 0:
        start = max(0, end - window)
        entries = await log.read_chain(conversation_id, head, end, start=start)
        for entry in reversed(entries):
            size = _size(entry.body)
            if taken and used + size > budget:
                return _page(taken, reference.length)
            taken.append(entry)
            used += size
        head, end, window = entries[0].previous, start, window * 2
    return _page(taken, reference.length)


def _page(taken: list[ChainedMessage], end: int) -> HistoryPage:
    first = taken[-1] if taken else None
    return HistoryPage(
        messages=[dict(entry.body) for entry in reversed(taken)],
        end=end,
        start=first.position if first is not None else end,
        previous=first.previous if first is not None else "",
    )


class LoggedPart(BaseModel):
    """A conversation as a client with the message log reads it.

    The part the log holds (its ``length`` and its ``head`` digest), and the messages ``after``.
    """

    length: int
    head: str
    after: list[dict[str, Any]]


class HistoryChain:
    """The digests of a workflow host's history, kept up to date as it grows.

    ``logged`` are the digests of histories the log is known to hold (the last message of each
    agent call's history that succeeded); a history's tail is what came after the latest of them.
    A history that is not the one the digests were computed for (the host was loaded anew after
    a failure, or in a new run) is digested again from its start.
    """

    def __init__(self, logged: str = "") -> None:
        self._digests: list[str] = []
        self._bodies: list[dict[str, Any]] = []  # each message as it was digested
        self._last: Message | None = None  # the history's message the last digest is of
        self._logged: set[str] = {logged} if logged else set()
        self.last_logged = logged
        """The digest of the latest history logged (carried into the workflow's next run)."""

    def reference(self, history: Sequence[Message]) -> HistoryReference:
        """The reference an agent call on ``history`` carries."""
        digests = self._digests
        known = len(digests)
        if known > len(history) or (known and history[known - 1] is not self._last):
            digests.clear()
            self._bodies.clear()
            known = 0
        for message in history[known:]:
            body = message.to_dict()
            digests.append(chain_digest(digests[-1] if digests else "", body))
            self._bodies.append(body)
        self._last = history[-1] if history else None
        start = len(history)
        while start and digests[start - 1] not in self._logged:
            start -= 1
        tail = [
            ChainEntry(
                digest=digests[position],
                previous=digests[position - 1] if position else "",
                position=position,
                body=history[position].to_dict(),
            )
            for position in range(start, len(history))
        ]
        return HistoryReference(length=len(history), head=self.head, tail=tail)

    def bodies(self) -> list[dict[str, Any]]:
        """The history as last referenced, each message as it was digested (a new list).

        What an agent call's activities read from the log, without serializing the history
        again (the workflow keeps it to go back to when a turn fails).
        """
        return list(self._bodies)

    @property
    def head(self) -> str:
        """The digest of the history as last referenced (``""``: an empty one)."""
        return self._digests[-1] if self._digests else ""

    def logged_part(self, history: Sequence[Message]) -> tuple[str, int]:
        """The digest and the length of the longest start of ``history`` the log holds."""
        reference = self.reference(history)
        length = reference.length - len(reference.tail)
        return (self._digests[length - 1] if length else ""), length

    def logged(self, reference: HistoryReference) -> None:
        """The log holds the history of ``reference`` (its agent call succeeded)."""
        if reference.head:
            self._logged.add(reference.head)
            self.last_logged = reference.head


__all__ = [
    "HISTORY_BY_REFERENCE",
    "READ_BACK_FROM_THE_END",
    "HistoryChain",
    "HistoryPage",
    "HistoryReference",
    "LoggedHistory",
    "LoggedPart",
    "chain_digest",
    "joining_tail",
    "last_page",
    "page_of",
]
