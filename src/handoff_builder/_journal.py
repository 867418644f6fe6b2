"""What a hosted conversation's store keeps of a turn, written at the driver's one point.

:class:`StoreJournal` is a host's journal when :class:`~handoff_builder.ConversationHost` runs
the turn: handed a :class:`~handoff_builder._engine.HostSnapshot` at each step, it writes the new
messages and the state row in one fenced write, with what the hosting layer keeps beside the
host's state (:class:`HostedState`: the last activity, the open turn's keys and failed attempts,
the receipts of the last calls).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from pydantic import AwareDatetime

from ._events import HandoffTurnResult
from ._ledger import HostSnapshot
from ._lifecycle import Receipt, failure_text, kept
from ._state import TurnRecord, adapter_for, encode_host_state, validated
from .exceptions import ConversationBusyError, CorruptConversationError, CorruptStateError
from .stores import ConversationStore, LeaseHold

__all__ = ["HostedState", "StoreJournal", "decode_hosted", "encode_hosted"]


@dataclass(frozen=True)
class HostedState:
    """What the hosting layer keeps in a conversation's state row beside the host's state."""

    last_activity: AwareDatetime | None = None
    turn_keys: tuple[str, ...] = ()  # idempotency keys of the calls that ran the open turn
    failures: int = 0  # failed attempts of the open turn
    last_error: str | None = None
    receipts: tuple[Receipt, ...] = ()


class StoreJournal:
    """Writes a hosted turn's progress: the new messages and the state row, in one fenced write."""

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: str,
        *,
        version: int,
        saved: int,
        clock: Callable[[], datetime],
        written: Mapping[str, Any],
    ) -> None:
        """Start from ``written``, the stored state row (empty for a new conversation).

        Its hosting fields are checked here (``CorruptConversationError``), so the receipts are
        kept as stored and decoded only when a repeated call asks for one.
        """
        hosted = decode_hosted(HostedState, written, conversation_id) if written else HostedState()
        self._store = store
        self._conversation_id = conversation_id
        self.held: LeaseHold | None = None
        self.release_when_done = False  # this call's last turn: its last write gives the lease back
        self.version = version
        self.saved = saved
        self._clock = clock
        self.last_activity = hosted.last_activity
        self.turn_keys = list(hosted.turn_keys)
        self.failures = hosted.failures
        self.last_error = hosted.last_error
        self.receipts: list[dict[str, Any]] = list(written.get("receipts", []))
        self.key: str | None = None  # the key of the call running now
        self._written: dict[str, Any] = dict(written)  # the state row as last written
        self._receipted: HandoffTurnResult | None = None

    async def record(self, snapshot: HostSnapshot) -> None:
        history = snapshot.history
        if self.key is not None and self.key not in self.turn_keys:
            self.turn_keys.append(self.key)
        result = snapshot.last_result
        if not snapshot.turn_open:
            if result is not None and result is not self._receipted and self.turn_keys:
                self._add_receipt(result)
            self.turn_keys, self.failures, self.last_error = [], 0, None
        self.last_activity = self._clock()
        state: dict[str, Any] = {
            "host": encode_host_state(snapshot.state),
            "last_activity": self.last_activity.isoformat(),
            "receipts": self.receipts,
        }
        if self.turn_keys:
            state["turn_keys"] = list(self.turn_keys)
        if self.failures:
            state["failures"], state["last_error"] = self.failures, self.last_error
        release = self.release_when_done and not snapshot.turn_open
        new = [message.to_dict() for message in history[self.saved :]]
        await self._write(new, state, release=release)
        self.saved = len(history)

    async def record_failure(self, error: BaseException) -> bool:
        """Count a failed attempt of the open turn, as stored; False when no turn was stored open.

        The state row is written again as it was, with the count: whatever the failed attempt
        changed in memory is not stored.
        """
        host_state: Any = self._written.get("host")
        if not isinstance(host_state, dict) or cast(dict[str, Any], host_state).get("turn") is None:
            return False
        self.failures += 1
        self.last_error = failure_text(error)
        state = {**self._written, "failures": self.failures, "last_error": self.last_error}
        await self._write([], state)
        return True

    async def _write(
        self, messages: list[dict[str, Any]], state: dict[str, Any], *, release: bool = False
    ) -> None:
        held = self.held
        if held is not None and not held.taken:  # the turn's first write takes the lease
            held.asking()
            lease = await self._store.acquire_and_append(
                self._conversation_id,
                owner=held.owner,
                ttl=held.ttl,
                start=self.saved,
                messages=messages,
                state=state,
                expected_version=self.version,
                release=release,
            )
            if lease is None:
                raise ConversationBusyError(self._conversation_id)
            held.acquired(lease)
            self.version = lease.version
        else:
            self.version = await self._store.append(
                self._conversation_id,
                start=self.saved,
                messages=messages,
                state=state,
                expected_version=self.version,
                lease=None if held is None else held.lease,
                release=release and held is not None,
            )
        self._written = state
        if release and held is not None:
            held.released_by_write()

    def _add_receipt(self, result: HandoffTurnResult) -> None:
        receipt = Receipt(**vars(TurnRecord.of(result)), keys=tuple(self.turn_keys))
        self.receipts = kept(self.receipts, encode_hosted(Receipt, receipt))
        self._receipted = result

    def receipt(self, key: str) -> Receipt | None:
        for raw in reversed(self.receipts):
            keys = raw.get("keys")
            if isinstance(keys, list) and key in keys:
                return decode_hosted(Receipt, raw, self._conversation_id)
        return None


def encode_hosted(kind: type[Any], value: Any) -> dict[str, Any]:
    """``value`` of a hosting record type as the JSON of a state row."""
    return cast(dict[str, Any], adapter_for(kind).dump_python(value, mode="json"))


def decode_hosted(kind: type[Any], raw: Any, conversation_id: str) -> Any:
    """A hosting record of a state row; ``CorruptConversationError`` when it is not valid."""
    try:
        return validated(kind, raw, "the hosting state")
    except CorruptStateError as error:
        raise CorruptConversationError(
            conversation_id, f"the hosting state is not valid ({error.detail})"
        ) from error
