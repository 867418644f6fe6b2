"""Errors raised by handoff_builder.

Every error derives from :class:`HandoffBuilderError`; leaves also subclass the built-in that fits,
so ``except ValueError`` keeps working for configuration mistakes::

    HandoffBuilderError(Exception)
    ├── HandoffArgumentError(HandoffBuilderError, TypeError)         a builder method got the wrong
    │   │                                                            kind of value (at the call)
    │   ├── HookSignatureError(HandoffArgumentError)                 a function cannot take what
    │   │                                                            the workflow will pass it
    │   └── RemoteAgentToolsError(HandoffArgumentError)              a remote (A2A) agent where
    │                                                                an agent needs tools
    ├── HandoffConfigurationError(HandoffBuilderError, ValueError)   build() found problems
    ├── SchemaVersionError(HandoffBuilderError, ValueError)          state from a newer version
    ├── CorruptStateError(HandoffBuilderError, ValueError)           saved state is not valid
    │   └── CorruptConversationError(CorruptStateError)              a stored record is unreadable
    ├── ConversationBusyError(HandoffBuilderError, RuntimeError)     another turn holds it
    ├── ConversationConflictError(HandoffBuilderError, RuntimeError) it changed under this turn
    ├── LeaseLostError(HandoffBuilderError, RuntimeError)            another worker took the turn
    ├── StoreUnavailableError(HandoffBuilderError, ConnectionError)  the store cannot be reached
    ├── ModelConnectionError(HandoffBuilderError, ConnectionError)  an agent's model cannot be
    │                                                                reached (names the URL)
    ├── RemoteAgentError(HandoffBuilderError, ConnectionError)      a remote (A2A) agent failed,
    │                                                                timed out or was unreachable
    ├── PendingRequestsError(HandoffBuilderError, RuntimeError)     a hosted turn waits for answers
    ├── UnexpectedAnswersError(HandoffBuilderError, ValueError)     answers nothing waits for
    ├── MessageNotStoredError(HandoffBuilderError, RuntimeError)    a message was refused, unstored
    ├── MessageTooLargeError(HandoffBuilderError, ValueError)       an input over the size limit
    ├── InvalidMessageError(HandoffBuilderError, ValueError)       a served run's input is not valid
    ├── PayloadTooLargeError(HandoffBuilderError, ValueError)       over Temporal's payload limit
    ├── HandoffHookError(HandoffBuilderError, RuntimeError)         an edge's own code failed
    ├── ModelCallNotRecordedError(HandoffBuilderError, LookupError) no such recorded model call
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
    "HandoffArgumentError",
    "HandoffBuilderError",
    "HandoffConfigurationError",
    "HandoffHookError",
    "HookSignatureError",
    "InvalidMessageError",
    "LeaseLostError",
    "MessageNotStoredError",
    "MessageTooLargeError",
    "ModelCallNotRecordedError",
    "ModelConnectionError",
    "PayloadTooLargeError",
    "PendingRequestsError",
    "RemoteAgentError",
    "RemoteAgentToolsError",
    "SchemaVersionError",
    "ScriptExhaustedError",
    "StoreUnavailableError",
    "UnexpectedAnswersError",
]


class HandoffBuilderError(Exception):
    """Base class of every error raised by handoff_builder."""


class HandoffArgumentError(HandoffBuilderError, TypeError):
    """A builder method was given a value it cannot use; raised at the call, nothing recorded.

    ``argument`` names the parameter (``"target"``, ``"agents[1]"``, ``"on_handoff"``); the
    message says what was passed and what to pass instead.
    """

    def __init__(self, argument: str, message: str) -> None:
        self.argument = argument
        super().__init__(message)


class HookSignatureError(HandoffArgumentError):
    """A function given to the builder cannot take the arguments the workflow will call it with.

    Checked with :func:`inspect.signature` when the function is given, not when it first runs.
    ``hook`` names it (``"on_handoff"``, ``"is_enabled"``, ``"approval"``, ``"route"``,
    ``"condition"``, ``"factory"``); ``source`` and ``target`` name the edge of an edge's hook
    (``target`` is ``None`` where it is not known yet: a hand-back's specialists, a route).
    """

    def __init__(
        self, hook: str, message: str, *, source: str | None = None, target: str | None = None
    ) -> None:
        self.hook = hook
        self.source = source
        self.target = target
        super().__init__(hook, message)


class RemoteAgentToolsError(HandoffArgumentError):
    """A remote agent (agent_framework's ``A2AAgent``) was given where an agent needs tools.

    The workflow cannot add tools to a remote agent's run: the agent and its model are on another
    server, reached through the Agent2Agent protocol. So a remote agent cannot be the source of a
    handoff, a caller of delegates, a coordinator or a reviewer. It can be a handoff target, a
    hand-back specialist (its finished task hands the conversation back) and a delegate's expert
    (see docs/remote-agents.md). ``agent`` names it, ``argument`` the parameter it was given as.
    """

    def __init__(self, argument: str, agent: str, role: str) -> None:
        self.agent = agent
        super().__init__(
            argument,
            f"Agent {agent!r} is a remote A2A agent and cannot be given handoff tools, so it "
            f"cannot be {role}. A remote agent can be a handoff target, a hand-back specialist "
            "(its finished task hands the conversation back) or a delegate's expert.",
        )


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


class ModelConnectionError(HandoffBuilderError, ConnectionError):
    """An agent's model could not be reached: no answer at its address, or the connection broke.

    ``agent`` names the agent, ``url`` the address its chat client tried (the request's URL, e.g.
    ``http://127.0.0.1:8080/v1/chat/completions``), ``detail`` what went wrong, in the words of
    the system (``ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 8080)``,
    ``gaierror: [Errno -2] Name or service not known``); the chat client's
    exception is the ``__cause__``. Raised from the agent's run, after the client's own retries.
    """

    def __init__(self, agent: str, url: str, detail: str) -> None:
        self.agent = agent
        self.url = url
        self.detail = detail
        super().__init__(
            f"Agent {agent!r} could not reach its model at {url} ({detail}); check the address "
            "and that its server is up."
        )


class RemoteAgentError(HandoffBuilderError, ConnectionError):
    """A remote agent (agent_framework's ``A2AAgent``) did not answer.

    ``agent`` names it; ``kind`` says what happened: ``"unreachable"`` (no connection to its
    server), ``"timeout"`` (no answer within its client's timeout), ``"http"`` (its server
    answered with an HTTP error, such as 500), ``"failed"`` (its task ended failed, rejected or
    cancelled), ``"auth_required"`` (its task asks for authentication, A2A's ``auth-required``,
    which the workflow cannot give: ``detail`` holds its words) or ``"error"`` (anything else its
    client raised); ``url`` is the address tried (``""`` when the client did not say),
    ``detail`` the words of the system. The client's exception, if any, is the ``__cause__``.
    In a delegation it is the caller's tool error, as text.
    """

    def __init__(self, agent: str, kind: str, url: str, detail: str) -> None:
        self.agent = agent
        self.kind = kind
        self.url = url
        self.detail = detail
        where = f" at {url}" if url else ""
        what = {
            "unreachable": "could not be reached",
            "timeout": "did not answer in time",
            "http": "answered with an HTTP error",
            "failed": "could not do its task",
            "auth_required": "asks for authentication (A2A auth-required), which the workflow "
            "cannot give",
        }.get(kind, "failed")
        super().__init__(f"Remote agent {agent!r}{where} {what} ({detail}).")


class PendingRequestsError(HandoffBuilderError, RuntimeError):
    """A hosted turn waits for tool approvals, external call results or a remote agent's answer.

    ``requests`` holds the request contents (``function_approval_request``, ``function_call``,
    or a remote agent's question: a ``text`` content, see ``RemoteQuestion``); answer them with
    ``ConversationHost.respond(conversation_id, {request.id: answer})``.
    """

    def __init__(self, conversation_id: str, requests: Sequence[Any]) -> None:
        self.conversation_id = conversation_id
        self.requests: tuple[Any, ...] = tuple(requests)
        ids = ", ".join(str(getattr(request, "id", "?")) for request in self.requests)
        super().__init__(
            f"Conversation {conversation_id!r} waits for answers to {len(self.requests)} "
            f"request(s) ({ids}); answer them with ConversationHost.respond() (a message sent "
            "meanwhile is not stored)."
        )


class PayloadTooLargeError(HandoffBuilderError, ValueError):
    """What a conversation on Temporal would send is over Temporal's limit on one payload.

    ``what`` names it (the message, the conversation with the message, an agent call, a turn's
    result), ``size`` and ``limit`` are bytes. It was not sent: Temporal refuses such a payload,
    and one in a workflow's history would stop the workflow. A message is refused before it
    joins the conversation; an agent call that would be too large fails its turn, which stays
    open as after any failure.
    """

    def __init__(self, conversation_id: str, what: str, size: int, limit: int) -> None:
        self.conversation_id = conversation_id
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(
            f"Conversation {conversation_id!r}: {what} would be {size:,} bytes, over Temporal's "
            f"limit of {limit:,} bytes ({limit / 2**20:g} MiB) on one payload. Send less (keep a "
            "large document elsewhere and send a reference to it), or delete the conversation "
            "and start a new one."
        )


class UnexpectedAnswersError(HandoffBuilderError, ValueError):
    """Answers given to a hosted conversation that waits for none of them; nothing ran.

    ``unknown`` holds the ids of the answers no request of the conversation has; ``waiting``
    the ids of the requests it does wait for (empty: it waits for no answers, send a message
    instead).
    """

    def __init__(
        self, conversation_id: str, unknown: Sequence[str], waiting: Sequence[str]
    ) -> None:
        self.conversation_id = conversation_id
        self.unknown: tuple[str, ...] = tuple(unknown)
        self.waiting: tuple[str, ...] = tuple(waiting)
        if not self.waiting:
            text = f"Conversation {conversation_id!r} waits for no answers; use send()."
        else:
            text = (
                f"Conversation {conversation_id!r} waits for no request with id "
                f"{', '.join(map(repr, self.unknown))}; it waits for {list(self.waiting)}."
            )
        super().__init__(text)


class MessageNotStoredError(HandoffBuilderError, RuntimeError):
    """A user message was refused and not stored; ``reason`` says why, the cause is chained.

    Raised when a hosted conversation's interrupted turn, retried before the new message, fails
    again: send the message again (the retries are bounded, then that turn is abandoned), or
    abandon the turn first.
    """

    def __init__(self, conversation_id: str, reason: str) -> None:
        self.conversation_id = conversation_id
        self.reason = reason
        super().__init__(f"Conversation {conversation_id!r}: the message was not stored: {reason}.")


class MessageTooLargeError(HandoffBuilderError, ValueError):
    """An input is larger than the host takes; nothing was stored or sent to a model.

    ``what`` is ``"message"`` (a user turn's input) or ``"answers"``; ``size`` and ``limit`` are
    bytes of UTF-8 JSON.
    """

    def __init__(self, conversation_id: str, what: str, size: int, limit: int) -> None:
        self.conversation_id = conversation_id
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(
            f"Conversation {conversation_id!r}: the {what} is {size:,} bytes as JSON; the limit "
            f"is {limit:,} bytes (max_input_bytes). Nothing was stored."
        )


class InvalidMessageError(HandoffBuilderError, ValueError):
    """What a run of ``ConversationHost.as_agent()`` was given is not a valid message.

    ``problem`` says what was wrong and how to fix it. Nothing was stored and no model was called.
    """

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


class HandoffHookError(HandoffBuilderError, RuntimeError):
    """An edge's ``on_handoff``, ``is_enabled`` or ``approval`` failed; nothing was routed.

    It raised (its exception is the ``__cause__``), or gave no answer within ``timeout`` seconds
    (``with_timeouts(hook=...)``; the ``__cause__`` is a ``TimeoutError``). In a hosted
    conversation the store keeps the state from before the agent that made the call ran.
    """

    def __init__(
        self,
        source: str,
        target: str,
        tool_name: str,
        hook: str,
        error: BaseException,
        *,
        timeout: float | None = None,
    ) -> None:
        self.source = source
        self.target = target
        self.tool_name = tool_name
        self.hook = hook
        self.timeout = timeout
        what = (
            f"raised {type(error).__name__}: {error}"
            if timeout is None
            else f"gave no answer within {timeout:g} s (with_timeouts(hook=...))"
        )
        super().__init__(
            f"The {hook} of the handoff from {source!r} to {target!r} ({tool_name}) {what}. "
            "Nothing was routed."
        )


class ModelCallNotRecordedError(HandoffBuilderError, LookupError):
    """A turn's result has no recorded model call of ``agent`` numbered ``call``.

    The message says why: the workflow was built without ``with_model_inputs()`` (nothing is
    recorded then), the agent's model was not called in the turn, or it has fewer calls (the
    turn's first calls are not kept past ``max_calls``).
    """

    def __init__(self, agent: str, call: int, message: str) -> None:
        self.agent = agent
        self.call = call
        super().__init__(message)


class ScriptExhaustedError(HandoffBuilderError, RuntimeError):
    """A :class:`~handoff_builder.testing.ScriptedChatClient` was called after its last step."""

    def __init__(self, client_name: str, calls: int) -> None:
        self.client_name = client_name
        self.calls = calls
        super().__init__(
            f"Scripted chat client {client_name!r} has no step left for model call #{calls}: "
            "add a step to its script, or check why the workflow called this agent again."
        )
