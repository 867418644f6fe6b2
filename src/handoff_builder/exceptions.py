"""Errors raised by handoff_builder.

Every error derives from :class:`HandoffBuilderError`; leaves also subclass the built-in that fits,
so ``except ValueError`` keeps working for configuration mistakes::

    HandoffBuilderError(Exception)
    ├── HandoffConfigurationError(HandoffBuilderError, ValueError)   build() found problems
    ├── SchemaVersionError(HandoffBuilderError, ValueError)          state from a newer version
    ├── CorruptStateError(HandoffBuilderError, ValueError)           saved state is not valid
    │   └── CorruptConversationError(CorruptStateError)              a stored record is unreadable
    ├── ConversationBusyError(HandoffBuilderError, RuntimeError)     another turn holds it
    ├── ConversationConflictError(HandoffBuilderError, RuntimeError) it changed under this turn
    ├── LeaseLostError(HandoffBuilderError, RuntimeError)            another worker took the turn
    ├── StoreUnavailableError(HandoffBuilderError, ConnectionError)  the store cannot be reached
    ├── PendingRequestsError(HandoffBuilderError, RuntimeError)     a hosted turn waits for answers
    ├── HandoffHookError(HandoffBuilderError, RuntimeError)         an edge's own code failed
    └── ScriptExhaustedError(HandoffBuilderError, RuntimeError)      a scripted model ran out

Errors that happen inside an agent's run (an empty goal, a handoff to an agent that is not granted)
are never raised: they are returned to the calling agent as tool errors, and reported as events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ConversationBusyError",
    "ConversationConflictError",
    "CorruptConversationError",
    "CorruptStateError",
    "HandoffBuilderError",
    "HandoffConfigurationError",
    "HandoffHookError",
    "LeaseLostError",
    "PendingRequestsError",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "StoreUnavailableError",
]


class HandoffBuilderError(Exception):
    """Base class of every error raised by handoff_builder."""


class HandoffConfigurationError(HandoffBuilderError, ValueError):
    """The workflow configuration is invalid; ``problems`` lists every problem found.

    ``build()`` checks the whole configuration and reports all problems at once, each naming the
    agents involved and saying how to fix it.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        if len(self.problems) == 1:
            message = f"Invalid handoff workflow: {self.problems[0]}"
        else:
            lines = "\n".join(f"  - {problem}" for problem in self.problems)
            message = f"Invalid handoff workflow ({len(self.problems)} problems):\n{lines}"
        super().__init__(message)


class SchemaVersionError(HandoffBuilderError, ValueError):
    """Persisted state was written by a newer handoff_builder; it is refused, never overwritten."""

    def __init__(self, where: str, found: int, supported: int) -> None:
        self.where = where
        self.found = found
        self.supported = supported
        super().__init__(
            f"{where} has schema version {found}; this version of handoff_builder reads up to "
            f"{supported}. Upgrade handoff_builder to read it."
        )


class CorruptStateError(HandoffBuilderError, ValueError):
    """Saved state (a checkpoint's host state, a stored record) is not valid; nothing was changed.

    ``where`` names the state, ``detail`` says what is wrong with it.
    """

    def __init__(self, where: str, detail: str, *, advice: str = "") -> None:
        self.where = where
        self.detail = detail
        super().__init__(f"{where} is corrupt: {detail}.{advice}")


class CorruptConversationError(CorruptStateError):
    """A stored conversation cannot be read; other conversations are not affected.

    ``position`` is the message of the log that is damaged, when one is (``None``: the state row,
    or the store itself).
    """

    def __init__(self, conversation_id: str, detail: str, position: int | None = None) -> None:
        self.conversation_id = conversation_id
        self.position = position
        super().__init__(
            f"Conversation {conversation_id!r}",
            detail,
            advice=" It was left untouched; repair or delete it in the store.",
        )


class ConversationBusyError(HandoffBuilderError, RuntimeError):
    """Another turn of the same conversation is running (in this process or another one)."""

    def __init__(self, conversation_id: str, waited: float | None = None) -> None:
        self.conversation_id = conversation_id
        self.waited = waited
        detail = "" if waited is None else f" (waited {waited:.1f} s)"
        super().__init__(
            f"Conversation {conversation_id!r} is busy with another turn{detail}; send again "
            "later, or pass wait=True to wait for it."
        )


class ConversationConflictError(HandoffBuilderError, RuntimeError):
    """The stored conversation changed while this turn ran; nothing was written."""

    def __init__(self, conversation_id: str, expected: int, found: int | None) -> None:
        self.conversation_id = conversation_id
        self.expected = expected
        self.found = found
        super().__init__(
            f"Conversation {conversation_id!r} changed under this turn: expected version "
            f"{expected}, found {found}. Nothing was written; send the message again."
        )


class LeaseLostError(HandoffBuilderError, RuntimeError):
    """This worker no longer holds the conversation's lease; nothing was written.

    The lease expired and another worker took the turn over (or it was released). This worker
    stops the turn before its next agent call, and the worker that holds the lease now finishes it.
    """

    def __init__(self, conversation_id: str, owner: str) -> None:
        self.conversation_id = conversation_id
        self.owner = owner
        super().__init__(
            f"Conversation {conversation_id!r}: the lease of {owner!r} was lost (it expired and "
            "another worker took the turn over); nothing was written."
        )


class StoreUnavailableError(HandoffBuilderError, ConnectionError):
    """The conversation store cannot be reached; raised before any model is called.

    ``store`` names the backend (``"PostgreSQL"``), ``detail`` says why, in the words of the
    server or the system where they are known (``FATAL: database "x" does not exist``,
    ``Connection refused``); the driver's exception is the ``__cause__``.
    """

    def __init__(self, store: str, detail: str) -> None:
        self.store = store
        self.detail = detail
        super().__init__(f"The {store} conversation store is unavailable: {detail}")


class PendingRequestsError(HandoffBuilderError, RuntimeError):
    """A hosted turn waits for tool approvals or external call results.

    ``requests`` holds the request contents (``function_approval_request`` or ``function_call``);
    answer them with ``ConversationHost.respond(conversation_id, {request.id: answer})``.
    """

    def __init__(self, conversation_id: str, requests: Sequence[Any]) -> None:
        self.conversation_id = conversation_id
        self.requests: tuple[Any, ...] = tuple(requests)
        ids = ", ".join(str(getattr(request, "id", "?")) for request in self.requests)
        super().__init__(
            f"Conversation {conversation_id!r} waits for answers to {len(self.requests)} "
            f"request(s) ({ids}); answer them with ConversationHost.respond()."
        )


class HandoffHookError(HandoffBuilderError, RuntimeError):
    """An edge's ``on_handoff``, ``is_enabled`` or ``approval`` raised; nothing was routed.

    The exception it raised is the ``__cause__``. In a hosted conversation the store keeps the
    state from before the agent that made the call ran.
    """

    def __init__(
        self, source: str, target: str, tool_name: str, hook: str, error: BaseException
    ) -> None:
        self.source = source
        self.target = target
        self.tool_name = tool_name
        self.hook = hook
        super().__init__(
            f"The {hook} of the handoff from {source!r} to {target!r} ({tool_name}) raised "
            f"{type(error).__name__}: {error}. Nothing was routed."
        )


class ScriptExhaustedError(HandoffBuilderError, RuntimeError):
    """A :class:`~handoff_builder.testing.ScriptedChatClient` was called after its last step."""

    def __init__(self, client_name: str, calls: int) -> None:
        self.client_name = client_name
        self.calls = calls
        super().__init__(
            f"Scripted chat client {client_name!r} has no step left for model call #{calls}: "
            "add a step to its script, or check why the workflow called this agent again."
        )
