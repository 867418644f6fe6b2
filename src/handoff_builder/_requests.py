"""Human-in-the-loop requests raised by a participant: tool approvals and external function calls.

When an agent's response holds a request (a ``function_approval_request`` for a tool that needs
approval, or a ``function_call`` to a declaration-only tool), the host surfaces each one as an
agent_framework ``request_info`` event and keeps the turn open. When every request of that agent
is answered, the answers join the shared history and the **same** agent runs again.

Approved calls are executed here, with the agent's own tool, and their results recorded as the
call's function result; rejected calls get an error result. The agent then sees a complete
transcript (each call with its result) and needs no session of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_framework import Agent, Content, FunctionTool, Message

REJECTED_RESULT = "Error: the user did not approve this call, so it was not made."


def requests_in(messages: Sequence[Message]) -> list[Content]:
    """The contents of ``messages`` that wait for an answer from outside."""
    return [
        content
        for message in messages
        for content in message.contents
        if content.user_input_request
        and content.type in ("function_approval_request", "function_call")
    ]


def _tool_named(agent: Agent, name: str) -> FunctionTool | None:
    tools: Any = (agent.default_options or {}).get("tools") or []
    items: Sequence[Any] = tools if isinstance(tools, Sequence) else [tools]  # pyright: ignore[reportUnknownVariableType]
    for item in items:
        if isinstance(item, FunctionTool) and item.name == name:
            return item
    return None


@dataclass
class PendingRequests:
    """The open requests of the one agent that is waiting (their ids, in the agent's order)."""

    agent: str | None = None
    requests: dict[str, Content] = field(default_factory=dict[str, Content])
    answers: dict[str, Content] = field(default_factory=dict[str, Content])

    def __bool__(self) -> bool:
        return bool(self.requests)

    def open(self, agent: str, requests: Sequence[Content]) -> None:
        """Start waiting for ``agent``'s requests."""
        self.agent = agent
        self.requests = {str(request.id): request for request in requests}
        self.answers = {}

    def answer(self, request_id: str, response: Content) -> bool:
        """Record one answer; True when every request is answered."""
        request = self.requests.get(request_id)
        if request is None:
            raise ValueError(
                f"No pending request with id {request_id!r}; pending: {sorted(self.requests)}."
            )
        _check_answer(request, response)
        self.answers[request_id] = response
        return len(self.answers) == len(self.requests)

    async def resolve(self, agent: Agent) -> list[Message]:
        """Messages that settle every request: approval answers and each call's result."""
        approvals: list[Content] = []
        results: list[Content] = []
        for request_id, request in self.requests.items():
            answer = self.answers[request_id]
            if request.type == "function_approval_request":
                approvals.append(answer)
                results.append(await _approved_result(agent, request, answer))
            else:
                results.append(_external_result(request, answer))
        messages = [Message(role="user", contents=approvals)] if approvals else []
        messages.append(Message(role="tool", contents=results, author_name=agent.name))
        self.requests, self.answers, self.agent = {}, {}, None
        return messages

    def to_state(self) -> dict[str, Any] | None:
        """JSON for checkpoints."""
        if not self.requests:
            return None
        return {
            "agent": self.agent,
            "requests": [request.to_dict() for request in self.requests.values()],
            "answers": {key: answer.to_dict() for key, answer in self.answers.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None) -> PendingRequests:
        """Restore what :meth:`to_state` wrote."""
        if not state:
            return cls()
        requests = [Content.from_dict(item) for item in state.get("requests", [])]
        return cls(
            agent=state.get("agent"),
            requests={str(request.id): request for request in requests},
            answers={k: Content.from_dict(v) for k, v in state.get("answers", {}).items()},
        )


def _check_answer(request: Content, answer: Content) -> None:
    if not isinstance(answer, Content):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"The answer to request {request.id!r} must be a Content, not {answer!r}.")
    if request.type == "function_approval_request" and answer.type != "function_approval_response":
        raise TypeError(
            f"The answer to approval request {request.id!r} must be a function_approval_response "
            f"(use request.to_function_approval_response(approved=...)), not {answer.type!r}."
        )
    if request.type == "function_call" and answer.type != "function_result":
        raise TypeError(
            f"The answer to function call {request.call_id!r} ({request.name}) must be a "
            f"function_result Content, not {answer.type!r}."
        )


async def _approved_result(agent: Agent, request: Content, answer: Content) -> Content:
    call = request.function_call
    if call is None or call.call_id is None:
        raise ValueError(f"Approval request {request.id!r} carries no function call.")
    if not answer.approved:
        return Content.from_function_result(call_id=call.call_id, result=REJECTED_RESULT)
    tool = _tool_named(agent, str(call.name))
    if tool is None:
        message = f"Error: agent {agent.name!r} has no tool named {call.name!r}."
        return Content.from_function_result(call_id=call.call_id, result=message)
    try:
        result = await tool.invoke(arguments=call.parse_arguments() or {})
    except Exception as error:
        message = f"Error: {call.name} failed: {error}"
        return Content.from_function_result(
            call_id=call.call_id, result=message, exception=str(error)
        )
    return Content.from_function_result(call_id=call.call_id, result=result)


def _external_result(request: Content, answer: Content) -> Content:
    if answer.call_id != request.call_id:
        return Content.from_function_result(call_id=str(request.call_id), result=answer.result)
    return answer
