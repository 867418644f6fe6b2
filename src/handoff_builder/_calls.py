"""Tool-call bookkeeping shared by the waiting requests and the delegations.

Which contents of a run wait for an answer from outside (:func:`requests_in`), which calls will
never get a result (:func:`dangling_calls`), and the results that close calls a turn leaves
open (:func:`settle`, :func:`unanswered`), so that no call stays without a result: the next
model call would be refused. A delegate call's answer is :func:`delegate_result`.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_framework import Content, Message

__all__ = [
    "BESIDE_WAITING_RESULT",
    "NOT_AVAILABLE_RESULT",
    "UNANSWERED_RESULT",
    "call_id_of",
    "call_of",
    "dangling_calls",
    "delegate_result",
    "requests_in",
    "settle",
    "unanswered",
]

NOT_AVAILABLE_RESULT = "Error: {tool} is not available to you now, so it was not called."
UNANSWERED_RESULT = "Error: not performed: the turn ended ({status}) before this call was answered."
BESIDE_WAITING_RESULT = (
    "Error: not performed: {tool} waits for a person in this response, and this call could not "
    "wait with it; make it again once {tool} is answered."
)


def requests_in(messages: Sequence[Message]) -> list[Content]:
    """The contents of ``messages`` that wait for an answer from outside."""
    return [
        content
        for message in messages
        for content in message.contents
        if content.user_input_request
        and content.type in ("function_approval_request", "function_call")
    ]


def dangling_calls(messages: Sequence[Message]) -> list[Content]:
    """Function calls in ``messages`` that will never get a result.

    A model can call a tool it was not given in that run (one its edge's ``is_enabled`` turned
    off, say); with no tools at all, agent_framework returns the call unanswered. Calls that wait
    for an answer (approvals, external calls) are not dangling.
    """
    answered: set[str] = set()
    for message in messages:
        for content in message.contents:
            if content.type == "function_result":
                answered.add(str(content.call_id))
            elif content.type == "function_approval_request" and content.function_call:
                answered.add(str(content.function_call.call_id))
    return [
        content
        for message in messages
        if message.role == "assistant"
        for content in message.contents
        if content.type == "function_call"
        and not content.user_input_request
        and str(content.call_id) not in answered
    ]


def settle(calls: Sequence[Content], agent: str) -> Message:
    """A result for each call that was never made, so that no call is left without one."""
    results = [
        Content.from_function_result(
            call_id=str(call.call_id), result=NOT_AVAILABLE_RESULT.format(tool=call.name)
        )
        for call in calls
    ]
    return Message(role="tool", contents=results, author_name=agent)


def unanswered(
    requests: Sequence[Content], agent: str, status: str, *, text: str | None = None
) -> list[Message]:
    """Results that settle ``requests`` when the turn ends without their answers.

    A turn never ends with a call that has no result: the next model call would be refused.
    ``text`` replaces the result's text (for calls that end while the turn goes on).
    """
    text = text or UNANSWERED_RESULT.format(status=status)
    results = [
        Content.from_function_result(call_id=str(call_of(request).call_id), result=text)
        for request in requests
    ]
    return [Message(role="tool", contents=results, author_name=agent)]


def call_of(request: Content) -> Content:
    """The function call a request is about (an approval's function call, or the call itself)."""
    if request.type == "function_approval_request" and request.function_call is not None:
        return request.function_call
    return request


def call_id_of(request: Content) -> str | None:
    """The id of the call a request is about (see :func:`call_of`)."""
    return call_of(request).call_id


def delegate_result(call_id: str, result: str, author: str) -> Message:
    """The tool message that answers a delegate call."""
    return Message(
        role="tool",
        contents=[Content.from_function_result(call_id=call_id, result=result)],
        author_name=author,
    )
