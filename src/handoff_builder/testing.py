"""A strict scripted chat client for tests and offline demos.

:class:`ScriptedChatClient` is built on agent_framework's chat-client layers, as its own clients are
(``FunctionInvocationLayer``, ``ChatMiddlewareLayer``, ``ChatTelemetryLayer``, ``BaseChatClient``),
so tool calls it scripts go through the real function-invocation path (middleware, tool execution,
results fed back) and each model call is traced as a ``chat`` span.

Each model call takes the next step of the script; a step is one model response::

    from handoff_builder.testing import ScriptedChatClient, handoff_to, reply, scripted_agent

    triage = scripted_agent("triage", handoff_to("billing", goal="Refund a double charge."))
    billing = scripted_agent("billing", reply("Refund issued."))
    ...
    triage.client.assert_complete()      # every step was used

A step may also be a function of the :class:`ModelCall` that returns a step. Every call is
recorded in ``client.calls`` with the messages, tool names and options it received. A call after
the last step raises :class:`~handoff_builder.ScriptExhaustedError`: nothing returns a silent
default.

A scripted model ignores what it receives, so a test that only checks who was called cannot see
a lost goal. Check what each agent's model received, too::

    assert_received(billing, "Goal: Refund a double charge.")   # its last call saw the goal
    print(received(billing).rendered)                          # the transcript it was sent

With any other chat client, a workflow built with ``with_model_inputs()`` keeps the same record on
each turn's result: ``turn.received("billing").rendered``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
)
from agent_framework.observability import ChatTelemetryLayer
from typing_extensions import override

from ._model_calls import ModelCall, render_messages
from ._routes import handoff_tool_name
from .exceptions import ScriptExhaustedError

__all__ = [
    "ModelCall",
    "ScriptStep",
    "ScriptedChatClient",
    "Step",
    "assert_received",
    "call_tool",
    "client_of",
    "handoff_to",
    "never_answer",
    "received",
    "render_messages",
    "reply",
    "respond",
    "scripted_agent",
    "slow",
]

_call_ids = itertools.count(1)


@dataclass(frozen=True)
class Step:
    """One scripted model response: its contents, in order, sent after ``delay`` seconds.

    ``delay`` is ``math.inf`` for a model that never answers (see :func:`never_answer`).
    """

    contents: tuple[Content, ...]
    delay: float = 0.0


ScriptStep = Step | Callable[[ModelCall], Step]


def _next_call_id() -> str:
    return f"call_{next(_call_ids)}"


def reply(text: str) -> Step:
    """A response with text only."""
    return Step((Content.from_text(text),))


def call_tool(name: str, /, **arguments: Any) -> Step:
    """A response that calls the tool ``name`` with ``arguments``."""
    call = Content.from_function_call(
        call_id=_next_call_id(), name=name, arguments=json.dumps(arguments)
    )
    return Step((call,))


def handoff_to(target: str, goal: str = "Help the user.", *, tool_name: str | None = None) -> Step:
    """A response that calls the handoff tool to ``target`` (``handoff_to_<target>`` by default)."""
    return call_tool(tool_name or handoff_tool_name(target), goal=goal)


def respond(*parts: Step | str | Content) -> Step:
    """One response made of several parts, in order: text (``str``), steps, or raw ``Content``."""
    contents: list[Content] = []
    for part in parts:
        if isinstance(part, str):
            contents.append(Content.from_text(part))
        elif isinstance(part, Content):
            contents.append(part)
        else:
            contents.extend(part.contents)
    return Step(tuple(contents))


def slow(step: Step | str, seconds: float) -> Step:
    """``step`` (or a text reply) sent only after ``seconds``: a slow model."""
    return replace(reply(step) if isinstance(step, str) else step, delay=seconds)


def never_answer() -> Step:
    """A model call that never returns (until it is cancelled): a hung model or network."""
    return Step((), delay=math.inf)


async def _wait(seconds: float) -> None:
    if seconds == math.inf:
        await asyncio.Event().wait()
    elif seconds > 0:
        await asyncio.sleep(seconds)


class ScriptedChatClient(
    FunctionInvocationLayer[Any],
    ChatMiddlewareLayer[Any],
    ChatTelemetryLayer[Any],
    BaseChatClient[Any],
):
    """A chat client that answers from a script, one step per model call, and records each call."""

    OTEL_PROVIDER_NAME = "scripted"

    def __init__(
        self,
        *steps: ScriptStep,
        name: str = "scripted",
        respond_with: Callable[[ModelCall], Step] | None = None,
    ) -> None:
        """Create a client that plays ``steps`` in order.

        Args:
            steps: One step per model call.
            name: Names the client in errors (``scripted_agent`` uses the agent's name).
            respond_with: Answers every call after the last step (an open-ended script, for
                demos and chats); without it, a call after the last step raises.
        """
        super().__init__()
        self.name = name
        self.model = "scripted"  # the model traces name (``chat scripted``)
        self._respond_with = respond_with
        self._steps: list[ScriptStep] = list(steps)
        self._position = 0
        self.calls: list[ModelCall] = []

    def add_steps(self, *steps: ScriptStep) -> None:
        """Append steps to the script."""
        self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        """How many steps have not been played yet."""
        return len(self._steps) - self._position

    def assert_complete(self) -> None:
        """Fail unless every step of the script was played."""
        if self.remaining:
            raise AssertionError(
                f"Scripted chat client {self.name!r} has {self.remaining} unused step(s) "
                f"after {len(self.calls)} call(s)."
            )

    def _next_step(self, messages: Sequence[Message], options: Mapping[str, Any]) -> Step:
        tools: Sequence[Any] = options.get("tools") or ()
        call = ModelCall(
            messages=tuple(messages),
            tool_names=tuple(str(getattr(tool, "name", tool)) for tool in tools),
            options=dict(options),
        )
        self.calls.append(call)
        if self._position >= len(self._steps):
            if self._respond_with is not None:
                return self._respond_with(call)
            raise ScriptExhaustedError(self.name, len(self.calls))
        step = self._steps[self._position]
        self._position += 1
        return step(call) if callable(step) else step

    @override
    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Any:
        step = self._next_step(messages, options)
        if not stream:
            return self._respond(step)
        return self._build_response_stream(self._stream(step))

    async def _respond(self, step: Step) -> ChatResponse:
        await _wait(step.delay)
        message = Message(role="assistant", contents=list(step.contents))
        return ChatResponse(messages=[message], response_id=_next_call_id())

    async def _stream(self, step: Step) -> AsyncIterator[ChatResponseUpdate]:
        await _wait(step.delay)
        for content in step.contents:
            yield ChatResponseUpdate(role="assistant", contents=[content])


def scripted_agent(
    name: str,
    *steps: ScriptStep,
    instructions: str | None = None,
    description: str | None = None,
    tools: Sequence[Any] | None = None,
    respond_with: Callable[[ModelCall], Step] | None = None,
) -> Agent:
    """An ``agent_framework.Agent`` named ``name`` answered by a new :class:`ScriptedChatClient`.

    The client is ``agent.client`` (typed as a :class:`ScriptedChatClient` via :func:`client_of`).
    """
    return Agent(
        client=ScriptedChatClient(*steps, name=name, respond_with=respond_with),
        name=name,
        instructions=instructions,
        description=description,
        tools=list(tools) if tools else None,
    )


def client_of(agent: Agent) -> ScriptedChatClient:
    """The :class:`ScriptedChatClient` of an agent made by :func:`scripted_agent`."""
    client = agent.client
    if not isinstance(client, ScriptedChatClient):
        raise TypeError(
            f"Agent {agent.name!r} does not use a ScriptedChatClient, whose own record this "
            f"reads. With any chat client, build the workflow with with_model_inputs() and read "
            f"turn.received({str(agent.name)!r}) on the turn's result."
        )
    return client


def received(agent: Agent, call: int = -1) -> ModelCall:
    """What ``agent``'s model received in one call (default: the last one).

    Raises:
        AssertionError: the agent's model was never called, or has no call ``call``.
    """
    calls = client_of(agent).calls
    try:
        return calls[call]
    except IndexError:
        raise AssertionError(
            f"Agent {agent.name!r}'s model has {len(calls)} call(s); there is no call {call}."
        ) from None


def assert_received(agent: Agent, *fragments: str, call: int = -1) -> ModelCall:
    """Fail unless every fragment appears in what ``agent``'s model received in ``call``.

    The message names the missing fragments and shows the transcript the model was sent.
    Returns the call, for further checks.
    """
    model_call = received(agent, call)
    rendered = model_call.rendered
    missing = [fragment for fragment in fragments if fragment not in rendered]
    if missing:
        raise AssertionError(
            f"Agent {agent.name!r}'s model call {call} did not receive {missing!r}. "
            f"It received:\n{rendered}"
        )
    return model_call
