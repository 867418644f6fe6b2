"""An agent as the host runs it: its own configuration plus what the workflow adds per run."""

from __future__ import annotations

import copy
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from agent_framework import (
    Agent,
    AgentResponse,
    AgentResponseUpdate,
    Content,
    FunctionTool,
    Message,
    MiddlewareFailure,
    MiddlewareTypes,
)

from ._decision import HandoffCall, ReviewVerdict
from ._hooks import EdgePolicy, HandoffGate
from ._instructions import render_instructions
from ._reply_tool import Replies, ReplyTool
from ._review import ReviewToolMiddleware
from ._routes import HandoffRoute
from ._strays import RunHandoffs, StrayHandoffMiddleware
from ._tools import HandoffToolMiddleware, HandoffVetter
from .exceptions import HandoffHookError, ModelConnectionError

if TYPE_CHECKING:
    from ._delegation import DelegateRoute, Delegations, DueExperts, Suspension
    from ._events import DelegationEvent

__all__ = ["AgentRun", "Participant"]

TOOL_LIMIT_TEXT = "Function invocation limit reached before a final answer could be produced."
"""What agent_framework's tool loop puts in place of the model's answer when it stopped at one of
its limits (``function_invocation_configuration``: model calls per run, failing calls in a row,
function calls, time) and the model's last response, with tools off, had nothing to show. It is
agent_framework's private text, not an answer: a run that ends with it has no answer
(``AgentRun.tool_limit``), and the text never reaches the conversation or the user (an expert
answering a delegated task gave no answer). tests/test_caps.py drives real runs into the limits,
so a change of agent_framework's text fails there."""


class AgentRun(NamedTuple):
    """One agent invocation, as the host reads it: what a runner returns for an agent call.

    Its response, its vetted handoff calls, the handoffs it was not offered, a reviewer's
    verdict, whether its tool loop stopped at agent_framework's limit without an answer, and
    the delegations it made.
    """

    response: AgentResponse
    calls: tuple[HandoffCall, ...]
    disabled: frozenset[str]
    verdict: ReviewVerdict | None = None
    tool_limit: bool = False
    delegations: tuple[DelegationEvent, ...] = ()
    """The run's finished delegations, innermost first."""
    suspension: Suspension | None = None
    """A delegation of the run that waits for answers (an expert's approval, say)."""
    due: DueExperts | None = None
    """Delegate calls of the run not carried out where it ran (``DelegationScope.defer``): their
    experts are due, and the run waits for their answers."""


@dataclass(slots=True)
class Participant:
    """An agent as the host runs it: its own configuration plus what this workflow adds per run.

    The agent object is never changed; ``tools``, ``options`` and ``middleware`` are passed to
    each ``agent.run`` call and merged there with the agent's own. ``routes`` are the agent's
    handoff tools by name: each run vets the calls to them (see :meth:`run`); ``policies``
    hold the code of the edges that have some (``is_enabled``, ``approval``, ``on_handoff``).
    ``delegates`` are its delegate tools by name, carried out by the run's
    :class:`~handoff_builder._delegation.Delegations` (not offered without one, or past the
    depth cap). A ``reviewer`` also has the review tools, whose first call is its run's verdict.
    ``elsewhere`` are the workflow's handoff tools of other agents, by name: a call to one of
    them, or to any handoff the agent does not have in a run, is refused as it runs.
    """

    agent: Agent
    tools: list[FunctionTool] = field(default_factory=list[FunctionTool])
    options: dict[str, Any] | None = None
    middleware: list[MiddlewareTypes] = field(default_factory=list[MiddlewareTypes])
    routes: Mapping[str, HandoffRoute] = field(default_factory=dict[str, HandoffRoute])
    policies: dict[str, EdgePolicy] = field(default_factory=dict[str, EdgePolicy])
    delegates: Mapping[str, DelegateRoute] = field(default_factory=dict[str, "DelegateRoute"])
    reviewer: bool = False
    elsewhere: Mapping[str, HandoffRoute] = field(default_factory=dict[str, HandoffRoute])
    instructions: str = ""
    """The handoff instructions' template: a run that does not offer every tool names only those
    it offers."""
    reply: ReplyTool | None = None
    """The reply tool (``with_reply_tool``), among ``tools``: offered in a run that offers a
    handoff."""

    @property
    def name(self) -> str:
        """The agent's name: its identity in this workflow."""
        return str(self.agent.name)

    @property
    def url(self) -> str:
        """The address of a remote agent, for traces (``""``: this agent runs here)."""
        return ""

    async def run(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        vet: HandoffVetter | None,
        gate: HandoffGate,
        delegations: Delegations | None = None,
        earlier: Sequence[HandoffCall] = (),
    ) -> AgentRun:
        """One agent invocation: its response, handoff calls and the handoffs it was not offered.

        Each handoff call is vetted with ``vet`` and admitted by ``gate``; a handoff whose
        ``is_enabled`` says no is not offered in this run. A call to a handoff the agent does not
        have in this run is vetted too, as a call that can only be refused. Without ``vet``
        (an expert answering a delegated task) the run has no handoffs. Delegate calls are carried
        out by ``delegations``. Streams each update to ``on_update`` when it is given.
        ``earlier``: the handoff calls the run made before (it goes on after its experts
        answered elsewhere); the run's own are returned.
        """
        calls: list[HandoffCall] = list(earlier)
        verdicts: list[ReviewVerdict] = []
        middleware, tools = self._own_middleware(verdicts, delegations)
        options = self.options
        disabled = frozenset[str]()
        vetting: HandoffToolMiddleware | None = None
        replies = self.reply.replies() if self.reply is not None else None
        if replies is not None:
            middleware = [replies.middleware(), *middleware]
        if vet is not None:
            handoffs = await self.handoffs(gate)
            vetting = HandoffToolMiddleware(handoffs, vet, gate, calls)
            middleware = [StrayHandoffMiddleware(handoffs), vetting, *middleware]
            disabled = frozenset(self.routes).difference(handoffs.offered)
            if disabled:
                tools, options = self._offering(tools, disabled, any_handoff=bool(handoffs.offered))
        kwargs: dict[str, Any] = {
            "tools": tools or None,
            "options": options,
            "middleware": middleware or None,
        }
        response = await self._invoke(messages, on_update, kwargs, replies)
        if vetting is not None:
            await _refuse_waiting(response, vetting)
        if replies is not None:
            response = replies.response(response)
        tool_limit = _drop_tool_limit_text(response)
        verdict = verdicts[0] if verdicts else None
        own = tuple(calls[len(earlier) :])
        return AgentRun(response, own, disabled, verdict, tool_limit)

    async def _invoke(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        kwargs: dict[str, Any],
        replies: Replies | None = None,
    ) -> AgentResponse:
        """``agent.run``, streamed to ``on_update`` when it is given.

        A stream shows the run's reply-tool calls as the agent's text (``replies``). An edge's
        hook that failed is raised as its :class:`HandoffHookError`, a model that could not be
        reached as a :class:`ModelConnectionError` naming its URL.
        """
        try:
            if on_update is None:
                return await self.agent.run(messages, **kwargs)
            stream = self.agent.run(messages, stream=True, **kwargs)
            restated = RestatedText()
            async for update in stream:
                if not _is_tool_limit_text(update.contents) and not _closes_the_run(update):
                    news = restated.news(update)
                    shown = [] if news is None else [news]
                    if replies is not None and news is not None:
                        shown = replies.shown(news)
                    for each in shown:
                        await on_update(each)
            return await stream.get_final_response()
        except MiddlewareFailure as failure:
            if isinstance(failure.__cause__, HandoffHookError):
                raise failure.__cause__ from failure.__cause__.__cause__
            raise
        except Exception as error:
            unreachable = _unreachable_model(self.name, error)
            if unreachable is None:
                raise
            raise unreachable from error

    def route_of(self, tool_name: str) -> HandoffRoute:
        """The route a call to ``tool_name`` reads as.

        One of the agent's, or, for a handoff it does not have, the one it would be.
        """
        return RunHandoffs(self.name, self.routes, self.routes, self.elsewhere).route(tool_name)

    async def handoffs(self, gate: HandoffGate) -> RunHandoffs:
        """The agent's handoffs in a run that ``gate`` admits: those offered, and the others.

        A handoff whose ``is_enabled`` says no is not offered; a ``no_handoffs`` gate offers none.
        """
        disabled = frozenset[str]()
        if self.routes and (self.policies or gate.no_handoffs):
            disabled = await gate.disabled(list(self.routes.values()))
        offered = {name: r for name, r in self.routes.items() if name not in disabled}
        return RunHandoffs(self.name, self.routes, offered, self.elsewhere)

    def _own_middleware(
        self, verdicts: list[ReviewVerdict], delegations: Delegations | None
    ) -> tuple[list[MiddlewareTypes], list[FunctionTool]]:
        """The run's middleware and tools for a reviewer's verdicts and for delegates.

        Delegate tools are not offered without ``delegations`` or past the depth cap.
        """
        middleware = self.middleware
        tools = self.tools
        if self.reviewer:
            middleware = [ReviewToolMiddleware(verdicts), *middleware]
        if self.delegates:
            if delegations is not None and delegations.allowed:
                middleware = [delegations.middleware(self.delegates), *middleware]
            else:
                tools = [tool for tool in tools if tool.name not in self.delegates]
        return middleware, tools

    async def run_delegated(
        self,
        messages: Sequence[Message],
        on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None,
        delegations: Delegations,
    ) -> AgentResponse:
        """One run as an expert answering a delegated task: no handoff tools, its own delegates."""
        run = await self.run(messages, on_update, None, _NO_GATE, delegations)
        return run.response

    def _offering(
        self, tools: list[FunctionTool], disabled: frozenset[str], *, any_handoff: bool
    ) -> tuple[list[FunctionTool], dict[str, Any]]:
        """The run's tools and options when the ``disabled`` handoffs are not offered.

        The reply tool goes with the handoffs: a run that offers none does not offer it either.
        """
        reply = self.reply.name if self.reply is not None else None
        gone = disabled if any_handoff or reply is None else disabled | {reply}
        tools = [tool for tool in tools if tool.name not in gone]
        return tools, self._options_offering([tool.name for tool in tools if tool.name != reply])

    def _options_offering(self, tool_names: Sequence[str]) -> dict[str, Any]:
        """The run's options when only ``tool_names`` are offered.

        The instructions name just those; an agent offered none gets no handoff instructions.
        """
        options = {k: v for k, v in (self.options or {}).items() if k != "instructions"}
        text = render_instructions(self.instructions, tool_names) if tool_names else ""
        if text.strip():
            options["instructions"] = text
        return options


_NO_GATE = HandoffGate({}, [], None)


async def _refuse_waiting(response: AgentResponse, vetting: HandoffToolMiddleware) -> None:
    """Refuse the calls to handoffs the agent does not have that wait for a person's approval.

    agent_framework turns every call of a response into an approval request when one of them
    needs approval, so such a call was not refused as the agent ran. It is refused now, so its
    refusal counts with this reply (its approval request is answered with the refusal).
    """
    handoffs = vetting.handoffs
    for message in response.messages:
        for content in message.contents:
            call = content.function_call if content.type == "function_approval_request" else None
            name = str(call.name) if call is not None else ""
            if call is not None and handoffs.reason(name) is not None:
                request = handoffs.refusal(name, str(call.call_id), call.arguments)
                await vetting.decide(request)


class RestatedText:
    """Takes out of a run's stream the text a client restates once it has streamed it.

    agent_framework's Responses client (``OpenAIChatClient``) sends each text of a response
    twice: as deltas (``merge_mode="append"``), then whole once it is done (``"replace"``), which
    agent_framework's own finaliser merges. A caller that prints each update, and the serving
    adapters, would show the text twice. Of the whole text, only what the deltas did not carry
    is passed on (nothing, normally); the run's final response is built from the updates as
    they came.
    """

    def __init__(self) -> None:
        self._streamed = ""  # the text streamed since the last restatement

    def news(self, update: AgentResponseUpdate) -> AgentResponseUpdate | None:
        """``update`` as the caller gets it: without restated text (``None``: nothing left)."""
        contents = update.contents
        if not any(c.type == "text" and c.merge_mode == "replace" for c in contents):
            self._streamed += "".join(c.text or "" for c in contents if c.type == "text")
            return update
        kept: list[Content] = []
        for content in contents:
            if content.type != "text":
                kept.append(content)
            elif content.merge_mode != "replace":
                self._streamed += content.text or ""
                kept.append(content)
            else:
                whole = content.text or ""
                if whole.startswith(self._streamed):
                    whole = whole[len(self._streamed) :]
                self._streamed = ""
                if whole:
                    kept.append(Content.from_text(whole, merge_mode="append"))
        if not kept:
            return None
        news = copy.copy(update)
        news.contents = kept
        return news


_CONNECTION_ERRORS = (
    ("openai", "APIConnectionError"),  # agent_framework's OpenAI and Azure OpenAI clients
    ("anthropic", "APIConnectionError"),
    ("httpx", "TransportError"),
    ("httpx2", "TransportError"),  # what openai 3 sends its requests with
)
"""The errors of the model SDKs and HTTP libraries that mean "the request did not get through",
each knowing its request (``error.request.url``). None is a dependency of this package: a client
that uses one has imported it already."""


def _unreachable_model(agent: str, error: BaseException) -> ModelConnectionError | None:
    """``error`` as a :class:`ModelConnectionError`, if the model's request did not get through.

    That is, if a connection error of the client's SDK caused it (agent_framework wraps it, e.g.
    in ``ChatClientException``); its reason is the last cause, the system's own words.
    """
    kinds = tuple(
        kind
        for module, name in _CONNECTION_ERRORS
        if isinstance(kind := getattr(sys.modules.get(module), name, None), type)
    )
    chain: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in chain:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for failed in chain:
        if kinds and isinstance(failed, kinds):
            try:
                url = str(cast(Any, failed).request.url)
            except (AttributeError, RuntimeError):  # raised without its request: no address
                return None
            root = chain[-1]  # refused, no such host, timed out...
            detail = " ".join(str(root).split())
            reason = f"{type(root).__name__}: {detail}" if detail else type(root).__name__
            return ModelConnectionError(agent, url, reason)
    return None


def _closes_the_run(update: AgentResponseUpdate) -> bool:
    """True for the update agent_framework's ``Agent`` ends a streamed run with (1.26; not 1.23).

    It has no contents, no role and no author (every update of the model names the agent): it
    carries the run's metadata (the tools' schemas kept for evaluations, a continuation token),
    which the run's final response carries too. Passed on, it would show the caller an empty
    update of no agent at the end of each agent's run.
    """
    return not update.contents and update.author_name is None and update.role is None


def _is_tool_limit_text(contents: Sequence[Content]) -> bool:
    """True when ``contents`` are agent_framework's text in place of an answer, and only that."""
    return (
        bool(contents)
        and "".join(c.text or "" if c.type == "text" else "\0" for c in contents) == TOOL_LIMIT_TEXT
    )


def _drop_tool_limit_text(response: AgentResponse) -> bool:
    """Take agent_framework's text in place of an answer out of the run's response.

    Returns True when it was there: the run's tool loop stopped at a limit without an answer.
    The response is this run's own, not yet in any conversation.
    """
    messages = response.messages
    if not messages or messages[-1].role != "assistant":
        return False
    last = messages[-1]
    if not _is_tool_limit_text([c for c in last.contents if c.type == "text"]):
        return False
    rest = [c for c in last.contents if c.type != "text"]
    if rest:
        kept = copy.copy(last)
        kept.contents = rest
        response.messages = [*messages[:-1], kept]
    else:
        response.messages = list(messages[:-1])
    return True
