"""Bounded review (``with_review``): a reviewer approves a reply, or sends it back with feedback.

After the producer replies without a handoff, the manager gives the turn to the reviewer, which
has two tools of its own in that run: ``approve(note)`` and ``request_changes(feedback)``. Neither
is executed as a function: :class:`ReviewToolMiddleware` records the first call as the run's
:class:`~handoff_builder.ReviewVerdict` and ends the reviewer's tool loop; the manager decides
from the verdict (:meth:`HandoffManager.decide`): approval ends the turn with the producer's
reply, a request for changes gives the turn back to the producer with the feedback, and the
``max_rounds``-th request escalates with every round's feedback as evidence.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from agent_framework import (
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    MiddlewareTermination,
)
from pydantic import BaseModel
from typing_extensions import override

from ._decision import ReviewVerdict
from ._payloads import ReviewApproval, ReviewChanges, validate_arguments
from ._settings import DEFAULT_MAX_REVIEW_ROUNDS
from ._tools import HandoffTool, schema_tool

__all__ = [
    "APPROVE_TOOL",
    "DEFAULT_MAX_REVIEW_ROUNDS",
    "REQUEST_CHANGES_TOOL",
    "Review",
    "ReviewToolMiddleware",
    "judge",
    "review_tools",
]

APPROVE_TOOL = "approve"
REQUEST_CHANGES_TOOL = "request_changes"

VerdictKind = Literal["approve", "request_changes"]

APPROVED_RESULT = "Approved: the reply goes to the user."
SENT_BACK_RESULT = "Sent back to its author with your feedback."
EMPTY_FEEDBACK_ERROR = (
    "Error: request_changes needs feedback: say what must change, then call it again."
)
ONE_VERDICT_RESULT = "Not performed: one verdict per review ({first} was already called)."

REVIEW_NOTE = (
    "{reviewer}: review the reply of {producer} above before it goes to the user (round "
    "{round} of {rounds}). Call {approve} if it can go out as it is, or {request_changes} with "
    "what must change."
)
"""What the reviewer reads before each review."""
CHANGES_NOTE = (
    "{reviewer} asked {producer} for changes (round {round} of {rounds}): {feedback} "
    "{producer}: write the reply again with these changes."
)
"""What the producer reads when its reply is sent back."""


@dataclass(frozen=True)
class Review:
    """A compiled review: ``reviewer`` reviews each reply of ``producer`` (``with_review``)."""

    producer: str
    reviewer: str
    max_rounds: int = DEFAULT_MAX_REVIEW_ROUNDS

    def reviewer_note(self, round_number: int) -> str:
        """The note the reviewer reads before the review of round ``round_number``."""
        return REVIEW_NOTE.format(
            reviewer=self.reviewer,
            producer=self.producer,
            round=round_number,
            rounds=self.max_rounds,
            approve=APPROVE_TOOL,
            request_changes=REQUEST_CHANGES_TOOL,
        )

    def producer_note(self, round_number: int, feedback: str) -> str:
        """The note the producer reads when the reviewer sends its reply back."""
        return CHANGES_NOTE.format(
            reviewer=self.reviewer,
            producer=self.producer,
            round=round_number,
            rounds=self.max_rounds,
            feedback=feedback,
        )


REVIEW_TOOL_KINDS: Mapping[str, VerdictKind] = {
    APPROVE_TOOL: "approve",
    REQUEST_CHANGES_TOOL: "request_changes",
}
_MODELS: Mapping[str, type[BaseModel]] = {
    APPROVE_TOOL: ReviewApproval,
    REQUEST_CHANGES_TOOL: ReviewChanges,
}


@functools.lru_cache(maxsize=1)
def review_tools() -> tuple[HandoffTool, ...]:
    """The reviewer's two tools (one pair, shared: they hold no state)."""
    return tuple(schema_tool(name, model.__doc__ or name, model) for name, model in _MODELS.items())


def judge(name: str, arguments: object, call_id: str) -> tuple[ReviewVerdict | None, str]:
    """A call to a review tool: its verdict (``None`` when the call is refused) and its result."""
    kind = REVIEW_TOOL_KINDS[name]
    payload, problem = validate_arguments(_MODELS[name], arguments)
    text = str(getattr(payload, "note" if kind == "approve" else "feedback", "") or "")
    if problem is not None:
        return None, f"Error: {name} was not called: {problem}; fix the arguments."
    if kind == "request_changes" and not text.strip():
        return None, EMPTY_FEEDBACK_ERROR
    verdict = ReviewVerdict(kind, text.strip(), call_id)
    return verdict, APPROVED_RESULT if kind == "approve" else SENT_BACK_RESULT


class ReviewToolMiddleware(FunctionMiddleware):
    """Records a reviewer's verdict and ends its tool loop; other calls pass through."""

    def __init__(self, verdicts: list[ReviewVerdict]) -> None:
        self.verdicts = verdicts

    @override
    async def process(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
    ) -> None:
        """The first valid verdict stands and ends the run; a second one is not performed."""
        name = context.function.name
        if name not in REVIEW_TOOL_KINDS:
            await call_next()
            return
        if self.verdicts:
            context.result = ONE_VERDICT_RESULT.format(first=self.verdicts[0].kind)
            return
        call_id = str(context.metadata.get("call_id") or "")
        verdict, result = judge(name, context.arguments, call_id)
        if verdict is None:
            context.result = result
            return
        self.verdicts.append(verdict)
        raise MiddlewareTermination(
            result, result=Content.from_function_result(call_id=call_id, result=result)
        )
