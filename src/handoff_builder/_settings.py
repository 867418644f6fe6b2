"""What a builder's settings are made of: their defaults and the small value types it records.

A leaf of the package: it imports nothing of the package when it runs, so that
:class:`~handoff_builder.HandoffWorkflowBuilder` and what a program passes to it import without the
runtime (agent_framework's workflows, the host, the managers, the events, the payload models).
``build()`` imports the runtime. The modules that use these names at run time (``_hooks``,
``_views``, ``_manager``...) import them from here and name them again in their ``__all__``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from agent_framework import Message
from pydantic import BaseModel

if TYPE_CHECKING:
    from ._input_filters import InputFilter

__all__ = [
    "DEFAULT_AGENT_TIMEOUT",
    "DEFAULT_AUTONOMOUS_PROMPT",
    "DEFAULT_AUTONOMOUS_TURN_LIMIT",
    "DEFAULT_ESCALATION_MESSAGE",
    "DEFAULT_HOOK_TIMEOUT",
    "DEFAULT_LOGGED_ARGUMENT_LENGTH",
    "DEFAULT_MAX_DELEGATION_DEPTH",
    "DEFAULT_MAX_HANDOFFS_PER_TURN",
    "DEFAULT_MAX_ITERATIONS",
    "DEFAULT_MAX_MODEL_CALLS",
    "DEFAULT_MAX_REJECTED_HANDOFFS",
    "DEFAULT_MAX_REVIEW_ROUNDS",
    "DEFAULT_REPLY_TOOL_DESCRIPTION",
    "DEFAULT_REPLY_TOOL_NAME",
    "DEFAULT_REVIEW_ESCALATION_MESSAGE",
    "DEFAULT_TURN_TIMEOUT",
    "DELEGATE_TOOL_PREFIX",
    "HISTORY_MODES",
    "PLAIN",
    "ArgumentLogging",
    "CapOutcome",
    "EdgePolicy",
    "HandoffContext",
    "HandoffHook",
    "HandoffPredicate",
    "HandoffToolCallFiltering",
    "HistoryMode",
    "ModelInputs",
    "Redaction",
    "ReplyToolSettings",
]

# -- deadlines and apologies (with_timeouts, with_escalation_message) ------------------------------

DEFAULT_AGENT_TIMEOUT = 120.0
"""Seconds one agent call may take, its own tool calls included, before the turn is cut short."""
DEFAULT_TURN_TIMEOUT = 600.0
"""Seconds one user turn may take, every agent call and handoff included."""
DEFAULT_HOOK_TIMEOUT = 30.0
"""Seconds an edge's hook may take to answer (``with_timeouts(hook=...)``): shorter than an agent
call's limit, so that a hook that hangs is reported as itself, not as a slow agent."""
DEFAULT_REVIEW_ESCALATION_MESSAGE = (
    "I'm sorry, I couldn't get an answer ready that passed its review. I'm passing this "
    "conversation to a human colleague, who will get back to you."
)
"""What the user reads when a review escalates (unless ``escalation_message`` was given)."""
DEFAULT_ESCALATION_MESSAGE = (
    "I'm sorry, I wasn't able to get your request to the right place. I'm passing this "
    "conversation to a human colleague, who will get back to you."
)

# -- caps and autonomous mode ---------------------------------------------------------------------

DEFAULT_MAX_ITERATIONS = 40
DEFAULT_MAX_HANDOFFS_PER_TURN = 3
DEFAULT_MAX_REJECTED_HANDOFFS = 3
DEFAULT_AUTONOMOUS_TURN_LIMIT = 50
DEFAULT_AUTONOMOUS_PROMPT = "User did not respond. Continue assisting autonomously."
DEFAULT_MAX_REVIEW_ROUNDS = 2


class CapOutcome(str, Enum):
    """What a cap (or a blocked handoff) does to the turn, unless a safe agent is named.

    ``ESCALATE``: the turn goes to a human, the user gets the apology (the default for caps).
    ``RETURN_TO_USER``: the turn ends with the last reply, no apology, no escalation.
    Naming an agent instead (the safe agent) runs it once, with no handoff tools, and the turn
    ends with its reply.
    """

    ESCALATE = "escalate"
    RETURN_TO_USER = "return_to_user"


# -- delegates ------------------------------------------------------------------------------------

HistoryMode = Literal["none", "full", "filtered"]
"""What an expert sees besides its task: nothing, the shared conversation, or its filtered view."""
HISTORY_MODES: tuple[HistoryMode, ...] = ("none", "full", "filtered")
DELEGATE_TOOL_PREFIX = "ask_"
DEFAULT_MAX_DELEGATION_DEPTH = 3
"""How deep delegations nest by default: a participant's expert's expert's expert."""

# -- what each agent sees -------------------------------------------------------------------------


class HandoffToolCallFiltering(str, Enum):
    """Which tool calls of other agents an agent sees (.NET's ``HandoffToolCallFilteringBehavior``).

    * ``NONE``: every call and result.
    * ``HANDOFF_ONLY`` (default): all but handoff calls and their results.
    * ``ALL``: no tool calls and no tool results at all.

    In every mode the agent also reads a note for each handoff another agent made.
    """

    NONE = "none"
    HANDOFF_ONLY = "handoff_only"
    ALL = "all"


# -- code on an edge ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HandoffContext:
    """What a handoff's hooks and predicates are given.

    ``goal`` is the call's goal or summary, or its payload as JSON, and ``payload`` the validated
    payload (``None`` for an edge without one); both are empty for ``is_enabled``, which is asked
    before the agent runs. ``conversation`` is the shared conversation so far (read-only) and
    ``conversation_id`` the hosted conversation's id (``None`` outside ``ConversationHost``).
    """

    source: str
    target: str
    tool_name: str
    goal: str
    payload: BaseModel | None
    conversation: Sequence[Message]
    conversation_id: str | None


HandoffHook = Callable[[HandoffContext], "str | Awaitable[str | None] | None"]
"""``on_handoff``: ``None`` lets the handoff go; a string vetoes it."""

HandoffPredicate = Callable[[HandoffContext], "bool | Awaitable[bool]"]
"""``is_enabled`` / ``approval`` as a function of the handoff."""


class EdgePolicy(NamedTuple):
    """The code one edge runs around its handoffs (``input_filter``: see ``_input_filters``)."""

    on_handoff: HandoffHook | None = None
    is_enabled: bool | HandoffPredicate = True
    approval: bool | HandoffPredicate = False
    input_filter: InputFilter | None = None

    @property
    def is_plain(self) -> bool:
        """True when the edge runs no code of its own (the common case: nothing to ask)."""
        return (
            self.on_handoff is None
            and self.is_enabled is True
            and self.approval is False
            and self.input_filter is None
        )


PLAIN = EdgePolicy()

# -- logs and what the models received ------------------------------------------------------------

DEFAULT_LOGGED_ARGUMENT_LENGTH = 200
"""Characters of a handoff's argument kept in a log line (the event keeps all of it)."""


class ArgumentLogging(NamedTuple):
    """Whether log lines carry handoff arguments, and how much of them."""

    include: bool = True
    max_length: int = DEFAULT_LOGGED_ARGUMENT_LENGTH

    def shown(self, argument: str | None) -> str:
        """``argument`` as a log line shows it."""
        if not self.include:
            return "(argument not logged)"
        text = argument or ""
        if len(text) <= self.max_length:
            return text
        return f"{text[: self.max_length]}... [cut: {len(text)} characters]"


DEFAULT_MAX_MODEL_CALLS = 50
"""Model calls a turn's result keeps at most (the latest), unless ``max_calls`` says otherwise."""

Redaction = Callable[[Message], Message]
"""A function that returns a recorded message as it may be kept (the same message if it has
nothing to hide); ``with_model_inputs(redact=...)``. It must not change the message it is given:
that one is the conversation's."""


class ModelInputs(NamedTuple):
    """``with_model_inputs`` settings: the redaction, the bound, and whether to trace too."""

    redact: Redaction | None = None
    max_calls: int = DEFAULT_MAX_MODEL_CALLS
    trace: bool = False


# -- the reply tool (with_reply_tool) --------------------------------------------------------------

DEFAULT_REPLY_TOOL_NAME = "reply_to_user"
"""The reply tool's name unless ``with_reply_tool(name=...)`` gives another."""
DEFAULT_REPLY_TOOL_DESCRIPTION = "A greeting, a thanks, no request yet: answer in words."
"""The reply tool's description unless ``with_reply_tool(description=...)`` gives another: what a
small model reads beside the handoff tools' descriptions, so that a greeting or a thanks has a
tool of its own instead of a handoff."""


class ReplyToolSettings(NamedTuple):
    """``with_reply_tool`` arguments: the agents (``None``: every agent with handoff tools).

    And the tool's name and description.
    """

    agents: tuple[Any, ...] | None
    name: str
    description: str
