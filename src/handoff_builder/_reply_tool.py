"""The reply tool (``with_reply_tool``): an agent that may hand off answers the user through it.

Small models given handoff tools tend to call one for every message; the reply tool,
``reply_to_user(text)`` by default, is a tool of their own for the answers that are no handoff.
It is never executed: :class:`ReplyToolMiddleware`, one per run, records the text of each valid
call and ends the agent's tool loop, as a handoff that stands does. :class:`Replies` then makes
the run what the conversation keeps: each recorded call becomes the agent's text, before the
calls of its response (a handoff that stands is followed after it), and neither the call nor its
result is kept. A streamed run shows the text as the agent's update, never the call. A call
without text is refused with a tool error, and the agent's run goes on.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent_framework import (
    AgentResponse,
    AgentResponseUpdate,
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    Message,
    MiddlewareTermination,
)
from pydantic import BaseModel, ConfigDict
from typing_extensions import override

from ._settings import DEFAULT_REPLY_TOOL_DESCRIPTION, DEFAULT_REPLY_TOOL_NAME
from ._tools import HandoffTool, lean_schema, never_called, validate_own_fields

__all__ = [
    "DEFAULT_REPLY_TOOL_DESCRIPTION",
    "DEFAULT_REPLY_TOOL_NAME",
    "Replies",
    "ReplyText",
    "ReplyTool",
    "ReplyToolMiddleware",
]

INVALID_REPLY_ERROR = (
    "Error: {tool} was not called because its arguments are not valid: {problem}. Call {tool} "
    "again with your answer to the user as text."
)
EMPTY_REPLY_ERROR = "Error: {tool} was not called: text is empty. Call it with your answer."
REPLIED_RESULT = "Sent to the user."


class ReplyText(BaseModel):
    """Your answer to the user."""

    # The reply tool's arguments; its description is the builder's (with_reply_tool). The text
    # has no description of its own: on the local 1.5B model of docs/evals.md, "Your answer to
    # the user, in words." on it made triage hand 5 of 8 greetings off instead of 1.

    model_config = ConfigDict(extra="forbid", title="reply")

    text: str


_CALLS = frozenset({"function_call", "function_approval_request"})


@dataclass(frozen=True)
class ReplyTool:
    """A compiled reply tool: its name and description (one per workflow)."""

    name: str = DEFAULT_REPLY_TOOL_NAME
    description: str = DEFAULT_REPLY_TOOL_DESCRIPTION

    def tool(self) -> HandoffTool:
        """The tool an agent is offered (strict schema; never executed)."""
        return _reply_tool(self.name, self.description)

    def replies(self) -> Replies:
        """What one run of an agent says through the tool (a new record per run)."""
        return Replies(self.name)


@functools.lru_cache(maxsize=64)
def _reply_tool(name: str, description: str) -> HandoffTool:
    """One tool per name and description: it holds no state (the middleware reads its calls)."""
    schema = lean_schema(ReplyText)
    schema.pop("description", None)  # the model's docstring; the tool's description says it
    return HandoffTool(
        name=name,
        description=description,
        func=never_called,
        input_model=schema,
        approval_mode="never_require",
    )


class Replies:
    """One run's calls to the reply tool: what each said, and the run as the conversation keeps it.

    ``said`` maps each valid call's id to its text, in the order the calls were made.
    """

    def __init__(self, tool_name: str) -> None:
        self.tool_name = tool_name
        self.said: dict[str, str] = {}
        self._calls: set[str] = set()  # the ids of the reply calls streamed so far
        self._in_call = False  # the last named call streamed is a reply call

    def middleware(self) -> ReplyToolMiddleware:
        """The run's middleware: it records each valid call in ``said``."""
        return ReplyToolMiddleware(self.tool_name, self.said)

    def response(self, response: AgentResponse) -> AgentResponse:
        """The run's response with each recorded call as the agent's text; the call is not kept.

        In the message of the call, the text comes before the message's calls; the call's result
        is left out, and so is a message left empty. ``response`` is the run's own, not yet in any
        conversation: its list of messages is replaced, no message is changed.
        """
        if not self.said:
            return response
        kept: list[Message] = []
        for message in response.messages:
            contents = self._spoken(message.contents)
            if contents is message.contents:
                kept.append(message)
            elif contents:
                changed = copy.copy(message)
                changed.contents = contents
                kept.append(changed)
        response.messages = kept
        return response

    def _spoken(self, contents: list[Content]) -> list[Content]:
        """``contents`` with the recorded calls as text and their results left out."""
        if not any(self._recorded(content) for content in contents):
            return contents
        texts = [
            Content.from_text(self.said[str(c.call_id)])
            for c in contents
            if c.type == "function_call" and self._recorded(c)
        ]
        rest = [c for c in contents if not self._recorded(c)]
        first_call = next((i for i, c in enumerate(rest) if c.type in _CALLS), len(rest))
        return [*rest[:first_call], *texts, *rest[first_call:]]

    def _recorded(self, content: Content) -> bool:
        return (
            content.type in {"function_call", "function_result"}
            and str(content.call_id) in self.said
        )

    def shown(self, update: AgentResponseUpdate) -> list[AgentResponseUpdate]:
        """``update`` as a stream shows it: no reply call, and each recorded call as its text.

        The call's deltas are left out (those after the first carry no name when a client
        streams a call's arguments in pieces), and so is its result, which comes once the
        middleware has recorded the text: the text is streamed in its place, as an update of
        the agent's.
        """
        contents = update.contents
        if not any(c.type in {"function_call", "function_result"} for c in contents):
            return [update]
        kept: list[Content] = []
        texts: list[Content] = []
        for content in contents:
            if content.type == "function_call" and self._streamed_call(content):
                continue
            call_id = str(content.call_id)
            if content.type == "function_result" and call_id in self._calls:
                if call_id in self.said:
                    texts.append(Content.from_text(self.said[call_id]))
                continue
            kept.append(content)
        shown: list[AgentResponseUpdate] = []
        if kept:
            rest = copy.copy(update)
            rest.contents = kept
            shown.append(rest if len(kept) < len(contents) else update)
        if texts:
            shown.append(
                AgentResponseUpdate(
                    role="assistant",
                    contents=texts,
                    author_name=update.author_name,
                    agent_id=update.agent_id,
                    response_id=update.response_id,
                )
            )
        return shown

    def _streamed_call(self, content: Content) -> bool:
        """True for a streamed piece of a reply call (it is not shown)."""
        if content.name:
            self._in_call = content.name == self.tool_name
            if self._in_call and content.call_id:
                self._calls.add(str(content.call_id))
            return self._in_call
        if content.call_id:
            return str(content.call_id) in self._calls
        return self._in_call


class ReplyToolMiddleware(FunctionMiddleware):
    """Records each valid call to the reply tool and ends the run; other calls pass through.

    A call whose arguments are not valid, or whose text is blank, gets a tool error instead,
    and the agent's run goes on. Keys other than ``text`` are ignored, as for the built-in
    goal of a handoff (small models copy keys of the schema beside the argument).
    """

    def __init__(self, tool_name: str, said: dict[str, str]) -> None:
        self.tool_name = tool_name
        self.said = said

    @override
    async def process(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
    ) -> None:
        """Record the call's text and end the tool loop, or refuse the call with a tool error."""
        if context.function.name != self.tool_name:
            await call_next()
            return
        call_id = str(context.metadata.get("call_id") or "")
        payload, problem = validate_own_fields(ReplyText, context.arguments)
        text = payload.text.strip() if isinstance(payload, ReplyText) else ""
        if problem is not None:
            context.result = INVALID_REPLY_ERROR.format(tool=self.tool_name, problem=problem)
            return
        if not text:
            context.result = EMPTY_REPLY_ERROR.format(tool=self.tool_name)
            return
        self.said[call_id] = text
        raise MiddlewareTermination(
            REPLIED_RESULT,
            result=Content.from_function_result(call_id=call_id, result=REPLIED_RESULT),
        )
