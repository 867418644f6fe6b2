"""A fan-out run apart: a caller's run whose experts answered elsewhere, put back together.

A driver that runs each expert of a fan-out on its own (the Temporal workflow: an activity
each) asks for the caller's run with its experts apart (``GroupChatHost.run_here(...,
experts_apart=True)``). That run stops at the response whose delegate calls are due
(:class:`~handoff_builder._delegation.DueExperts`); the driver asks each expert
(``GroupChatHost.ask_here``), puts their answers into the run with :func:`with_answers`, and,
when the run goes on (:func:`goes_on`), runs the caller again from there (``so_far=``) and
adds what it did with :func:`joined`. The run it hands to the engine is the one a local runner
would have returned: the same messages, with each answer in its call's place, in call order.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from agent_framework import AgentResponse, Content, Message

from ._calls import calls_in
from ._delegation import together
from ._events import DelegationEvent
from ._participant import AgentRun

__all__ = ["goes_on", "joined", "with_answers"]


def with_answers(run: AgentRun, asked: Sequence[AgentRun]) -> AgentRun:
    """``run`` with its due experts' runs (``asked``, in the order of ``run.due``) in place.

    Each answer becomes its call's result where the call waited. An expert that waits for a
    person holds the caller's call open (the run's suspension), beside any other delegation
    of the response that waits, as when they run in one process.
    """
    due = run.due
    if due is None:
        return run
    waiting = [run.suspension] if run.suspension is not None else []
    results: dict[str, Content] = {}
    records: list[DelegationEvent] = list(run.delegations)
    for frame, answer in zip(due.frames, asked, strict=True):
        records.extend(answer.delegations)
        found = [c for m in answer.response.messages for c in m.contents]
        if found:
            results[frame.call_id] = found[0]
        elif answer.suspension is not None:
            waiting.append(answer.suspension)
    held = together(waiting).ordered(calls_in(run.response.messages)) if waiting else None
    messages = _answered_in_place(run.response.messages, results)
    return run._replace(
        response=AgentResponse(messages=messages),
        delegations=tuple(records),
        suspension=held,
        due=None,
    )


def goes_on(run: AgentRun, before: AgentRun) -> bool:
    """Whether the caller's run goes on, now that the experts due in ``before`` answered.

    ``run`` is ``before`` :func:`with_answers`: not when another call of the response ended
    the run's tool loop, nor when an expert waits for a person.
    """
    return before.due is not None and before.due.goes_on and run.suspension is None


def joined(first: AgentRun, then: AgentRun) -> AgentRun:
    """One run: ``first`` (its experts answered) and ``then``, the caller going on from it."""
    return AgentRun(
        AgentResponse(messages=[*first.response.messages, *then.response.messages]),
        (*first.calls, *then.calls),
        first.disabled | then.disabled,
        then.verdict or first.verdict,
        then.tool_limit,
        (*first.delegations, *then.delegations),
        then.suspension,
        then.due,
    )


def _answered_in_place(messages: Sequence[Message], results: dict[str, Content]) -> list[Message]:
    """``messages`` with each waiting call of ``results`` answered by its result.

    A call that waited is a function call marked as waiting for input, in its response's
    message: it stays there, unmarked, and its result goes into the tool message after that
    message (with the other calls' results, in call order). Messages are copied where they
    change, never modified.
    """
    out: list[Message] = []
    held: list[Content] = []  # the results of the message last answered, not yet placed
    order: dict[str, int] = {}  # that message's call order
    author: str | None = None  # and its author
    for message in messages:
        answered = {id(c): c for c in message.contents if _waiting(c) and str(c.call_id) in results}
        if held and not answered and _only_results(message):
            out.append(_results_message([*held, *message.contents], order, author))
            held = []
            continue
        if held:
            out.append(_results_message(held, order, author))
            held = []
        if not answered:
            out.append(message)
            continue
        contents = [_unmarked(c) if id(c) in answered else c for c in message.contents]
        author = message.author_name
        out.append(Message(role=message.role, contents=contents, author_name=author))
        order = {str(c.call_id): n for n, c in enumerate(contents) if c.type == "function_call"}
        held = [results[str(c.call_id)] for c in answered.values()]
    if held:
        out.append(_results_message(held, order, author))
    return out


def _results_message(results: list[Content], order: dict[str, int], author: str | None) -> Message:
    ordered = sorted(results, key=lambda c: order.get(str(c.call_id), len(order)))  # stable
    return Message(role="tool", contents=ordered, author_name=author)


def _unmarked(call: Content) -> Content:
    """A copy of a waiting call, no longer waiting: it has its result."""
    copied = copy.copy(call)
    copied.user_input_request = False
    return copied


def _waiting(content: Content) -> bool:
    return content.type == "function_call" and bool(content.user_input_request)


def _only_results(message: Message) -> bool:
    return message.role == "tool" and all(c.type == "function_result" for c in message.contents)
