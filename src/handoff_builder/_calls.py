"""Tool-call bookkeeping shared by the waiting requests and the delegations.

Which contents of a run wait for an answer from outside (:func:`requests_in`), which calls will
never get a result (:func:`dangling_calls`), and the results that close calls a turn leaves
open (:func:`settle`, :func:`unanswered`), so that no call stays without a result: the next
model call would be refused. A delegate call's answer is :func:`delegate_result`; a response's
results that came in several messages read in call order (:func:`in_call_order`).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_framework import Content, Message

__all__ = [
    "BESIDE_WAITING_RESULT",
    "NOT_AVAILABLE_RESULT",
    "REQUEST_TYPES",
    "UNANSWERED_RESULT",
    "call_id_of",
    "call_of",
    "calls_in",
    "dangling_calls",
    "delegate_result",
    "in_call_order",
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


REQUEST_TYPES = frozenset({"function_approval_request", "function_call", "text"})
"""The contents that wait for an answer from outside, when their ``user_input_request`` is set:
an approval, an external call, a remote agent's question (text, answered with text)."""


def requests_in(messages: Sequence[Message]) -> list[Content]:
    """The contents of ``messages`` that wait for an answer from outside."""
    return [
        content
        for message in messages
        for content in message.contents
        if content.user_input_request and content.type in REQUEST_TYPES
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
    ``text`` replaces the result's text (for calls that end while the turn goes on). A question
    (a remote agent's) is no call: it needs no result.
    """
    text = text or UNANSWERED_RESULT.format(status=status)
    results = [
        Content.from_function_result(call_id=str(call_of(request).call_id), result=text)
        for request in requests
        if request.type != "text"
    ]
    return [Message(role="tool", contents=results, author_name=agent)] if results else []


def call_of(request: Content) -> Content:
    """The function call a request is about (an approval's function call, or the call itself)."""
    if request.type == "function_approval_request" and request.function_call is not None:
        return request.function_call
    return request


def call_id_of(request: Content) -> str | None:
    """The id of the call a request is about (see :func:`call_of`)."""
    return call_of(request).call_id


def calls_in(messages: Sequence[Message]) -> list[str]:
    """The call ids of the function calls in ``messages``, in call order."""
    return [str(c.call_id) for m in messages for c in m.contents if c.type == "function_call"]


def delegate_result(call_id: str, result: str, author: str) -> Message:
    """The tool message that answers a delegate call."""
    return Message(
        role="tool",
        contents=[Content.from_function_result(call_id=call_id, result=result)],
        author_name=author,
    )


def in_call_order(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with each response's results, split over several tool messages, in one.

    A response whose call waited (a delegation waiting for a person) has the results of its
    other calls in one tool message and the waiting call's, later, in another. Read back, they
    are one tool message in the order of the response's calls, as if all had answered at once.
    Messages are copied where they change, never modified. It runs on every agent's input, so
    a history with nothing to merge costs one look at each message's role and is returned as
    it is.
    """
    merges: list[tuple[int, int, dict[str, int]]] = []  # (first result, end, call order)
    index, count = 0, len(messages)
    while index < count:
        message = messages[index]
        index += 1
        if message.role != "assistant":
            continue
        order = {
            str(c.call_id): n for n, c in enumerate(message.contents) if c.type == "function_call"
        }
        if len(order) < 2:  # a response with several calls
            continue
        end = index
        while end < count and _only_results(messages[end]):
            end += 1
        if end - index >= 2:  # not already one message
            merges.append((index, end, order))
        index = end
    if not merges:
        return messages if isinstance(messages, list) else list(messages)
    out: list[Message] = []
    done = 0
    for first, end, order in merges:
        out.extend(messages[done:first])
        results = [c for m in messages[first:end] for c in m.contents]
        results.sort(key=lambda c: order.get(str(c.call_id), len(order)))  # stable
        out.append(Message(role="tool", contents=results, author_name=messages[first].author_name))
        done = end
    out.extend(messages[done:])
    return out


def _only_results(message: Message) -> bool:
    return message.role == "tool" and all(c.type == "function_result" for c in message.contents)
