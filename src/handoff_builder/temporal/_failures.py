"""The failures that cross Temporal: an ``ApplicationError`` of a type the client turns back.

The workflow fails an Update, and an activity its call, with an ``ApplicationError`` whose
``type`` is one of the names below and whose details say what was wrong; the client
(``_client._error``) turns it back into this package's error. Each error is built here, once.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from handoff_builder._host import GroupChatHost
from handoff_builder.exceptions import PayloadTooLargeError, UnexpectedAnswersError

PENDING = "PendingRequests"  # details: the requests the turn waits for
NOTHING_PENDING = "NothingPending"  # details: unknown ids, waiting ids
UNKNOWN_REQUEST = "UnknownRequest"  # details: unknown ids, waiting ids
TURN_FAILED = "TurnFailed"
CONFIGURATION = "Configuration"
PAYLOAD_TOO_LARGE = "PayloadTooLarge"  # details: what, size, limit
BUSY = "Busy"

READING_BACK = (
    "The conversation's history is being read back from the workers' message log (a new run "
    "of its workflow); ask again."
)
"""A query's failure while a run reads its conversation back: the client asks again."""


def reading_back() -> ApplicationError:
    """A query came while the run reads its conversation back from the message log."""
    return ApplicationError(READING_BACK, type=BUSY)


def too_large(conversation_id: str, what: str, size: int, limit: int) -> ApplicationError:
    """``what`` takes ``size`` bytes, over the payload ``limit``: Temporal would refuse it."""
    error = PayloadTooLargeError(conversation_id, what, size, limit)
    return ApplicationError(
        str(error), what, size, limit, type=PAYLOAD_TOO_LARGE, non_retryable=True
    )


def busy(conversation_id: str) -> ApplicationError:
    """A call that does not wait found a turn running."""
    return ApplicationError(
        f"Conversation {conversation_id!r} is busy with a turn.", type=BUSY, non_retryable=True
    )


def pending(host: GroupChatHost) -> ApplicationError:
    """A message came while the turn waits for answers to its requests."""
    return ApplicationError(
        "The conversation waits for answers to its requests; answer them with respond().",
        [request.to_dict() for request in host.pending_requests],
        type=PENDING,
        non_retryable=True,
    )


def unexpected(error: UnexpectedAnswersError) -> ApplicationError:
    """Answers to requests the turn does not wait for: the caller's mistake, nothing ran."""
    kind = UNKNOWN_REQUEST if error.waiting else NOTHING_PENDING
    details = (list(error.unknown), list(error.waiting))
    return ApplicationError(str(error), *details, type=kind, non_retryable=True)


def misconfigured(message: str) -> ApplicationError:
    """The worker cannot run the conversation as given (not retried)."""
    return ApplicationError(message, type=CONFIGURATION, non_retryable=True)


def turn_failed(conversation_id: str, error: Exception, limit: int) -> ApplicationError:
    """The Update's error for a failed attempt of a turn (the next message retries it).

    A payload too large, the workflow's own check or an activity's, says so instead.
    """
    found = innermost(error, PayloadTooLargeError)
    if isinstance(found, PayloadTooLargeError):  # the workflow's own check
        return too_large(conversation_id, found.what, found.size, limit)
    failure = innermost(error, ApplicationError)
    if isinstance(failure, ApplicationError) and failure.type == PAYLOAD_TOO_LARGE:
        return failure  # the activity's
    cause = innermost(error)
    return ApplicationError(
        f"The turn of conversation {conversation_id!r} failed "
        f"({type(error).__name__}: {str(cause) or type(cause).__name__}); the next "
        "message retries it.",
        type=TURN_FAILED,
        non_retryable=True,
    )


def described(error: BaseException) -> str:
    """``"TypeName: message"``; an activity's failure by the type of what it raised."""
    if isinstance(error, ApplicationError) and error.type:
        return f"{error.type}: {error.message}"
    return f"{type(error).__name__}: {error}"


def innermost(error: BaseException, kind: type[BaseException] = BaseException) -> BaseException:
    """The innermost cause of ``error`` that is a ``kind`` (``error``: none is).

    An activity's failure says what the agent's call raised.
    """
    found = error
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, kind):
            found = cause
        cause = cause.__cause__
    return found


__all__ = [
    "BUSY",
    "CONFIGURATION",
    "NOTHING_PENDING",
    "PAYLOAD_TOO_LARGE",
    "PENDING",
    "TURN_FAILED",
    "UNKNOWN_REQUEST",
    "busy",
    "described",
    "innermost",
    "misconfigured",
    "pending",
    "too_large",
    "turn_failed",
    "unexpected",
]
