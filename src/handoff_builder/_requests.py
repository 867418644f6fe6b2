"""Human-in-the-loop requests raised by a participant: tool approvals, external calls, questions.

When an agent's response holds a request (a ``function_approval_request`` for a tool that needs
approval, a ``function_call`` to a declaration-only tool, or a remote agent's question, a
``text`` content that waits for an answer), the host surfaces each one as an
agent_framework ``request_info`` event and keeps the turn open. When every request of that agent
is answered, the answers join the shared history and the turn goes on as the manager decided
when the requests were raised: the **same** agent runs again, or, if it handed off in that
response, the agent it handed off to.

Approved calls are executed here, with the agent's own tool, and their results recorded as the
call's function result; rejected calls get an error result. A question's answer (text) joins
the history as the user's message. An approved **handoff** call (it asks
for approval when it shares a response with a call that does) is vetted like any handoff call
and routes when it is accepted. The agent then sees a complete transcript (each call with its
result) and needs no session of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent_framework import Agent, Content, FunctionTool, Message

from ._decision import TRANSFERRED_RESULT, HandoffCall, ReviewVerdict
from ._hooks import HandoffGate
from ._participant import Participant
from ._review import ONE_VERDICT_RESULT, REVIEW_TOOL_KINDS, judge
from ._routes import HandoffRoute
from ._state import Continuation, DelegationFrame, PendingState, WaitingDelegation
from ._telemetry import handoff_span, settle_handoff_span
from ._tools import HandoffVetter, handoff_request, handoff_result

if TYPE_CHECKING:
    from ._delegation import Delegations, Suspension

REJECTED_RESULT = "Error: the user did not approve this call, so it was not made."
HANDOFF_DECLINED_RESULT = (
    "Not transferred: the handoff to {target} was declined by the person who reviewed it. "
    "Carry on with the user yourself."
)
DECLINE_REASON_KEY = "reason"
"""Key, in a declining answer's ``additional_properties``, of the reviewer's reason."""


def _tool_named(agent: Agent, name: str) -> FunctionTool | None:
    options: dict[str, Any] = getattr(agent, "default_options", None) or {}
    tools: Any = options.get("tools") or []
    items: Sequence[Any] = tools if isinstance(tools, Sequence) else [tools]  # pyright: ignore[reportUnknownVariableType]
    for item in items:
        if isinstance(item, FunctionTool) and item.name == name:
            return item
    return None


@dataclass
class PendingRequests:
    """The open requests of the one agent that is waiting (their ids, in the agent's order).

    ``then`` is what happens once they are all answered. ``frames``: the requests are an
    expert's, in a delegation of ``agent`` that waits (outermost first); ``beside``: other
    delegations of the same response that wait too (their requests are theirs).
    """

    agent: str | None = None
    requests: dict[str, Content] = field(default_factory=dict[str, Content])
    answers: dict[str, Content] = field(default_factory=dict[str, Content])
    then: Continuation | None = None
    frames: tuple[DelegationFrame, ...] = ()
    beside: tuple[WaitingDelegation, ...] = ()

    def open(
        self,
        agent: str,
        requests: Sequence[Content],
        then: Continuation,
        waiting: Suspension | None = None,
    ) -> None:
        """Start waiting for ``agent``'s requests (or for its delegations' that wait)."""
        self.agent = agent
        self.requests = {str(request.id): request for request in requests}
        self.answers = {}
        self.then = then
        self.frames = waiting.frames if waiting is not None else ()
        self.beside = tuple(
            WaitingDelegation(other.frames, tuple(str(r.id) for r in other.requests))
            for other in (waiting.beside if waiting is not None else ())
        )

    @property
    def chains(self) -> tuple[tuple[DelegationFrame, ...], ...]:
        """The frames of each delegation that waits, in call order (none: the agent's own)."""
        if not self.frames:
            return ()
        return (self.frames, *(other.frames for other in self.beside))

    def apart(self) -> list[PendingRequests]:
        """Each delegation that waits, with its own requests and answers, in call order."""
        theirs = {request_id for other in self.beside for request_id in other.requests}
        parts = [(self.frames, [i for i in self.requests if i not in theirs])]
        parts += [(other.frames, list(other.requests)) for other in self.beside]
        return [
            PendingRequests(
                self.agent,
                {i: self.requests[i] for i in ids if i in self.requests},
                {i: self.answers[i] for i in ids if i in self.answers},
                self.then,
                frames,
            )
            for frames, ids in parts
        ]

    @property
    def unanswered(self) -> list[Content]:
        """The requests that have no answer yet, in order."""
        return [r for request_id, r in self.requests.items() if request_id not in self.answers]

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

    async def resolve(
        self,
        participant: Participant,
        vet: HandoffVetter,
        gate: HandoffGate,
        *,
        delegations: Delegations | None = None,
        verdicts: list[ReviewVerdict] | None = None,
    ) -> tuple[list[Message], tuple[HandoffCall, ...]]:
        """Messages that settle every request, and the answered handoff calls, vetted.

        An approved handoff call is vetted (and its ``on_handoff`` asked) like one made just
        now; a declined one gets a result that says so, with the reviewer's reason. A call to a
        handoff the agent does not have was refused with the reply that made it: approved or
        not, it gets that refusal as its result. A delegate
        call or a review verdict asks for approval when it shares a response with a call that
        does: approved, the delegation runs with ``delegations`` (a delegation that waits for a
        person in turn gets no result here: its result comes when it is answered), and the
        verdict goes to ``verdicts``.
        """
        approvals: list[Content] = []
        results: list[Content] = []
        words: list[Content] = []
        calls: list[HandoffCall] = []
        earlier = self._followed(participant)
        handoffs = await participant.handoffs(gate)
        for request_id, request in self.requests.items():
            answer = self.answers[request_id]
            if request.type == "text":  # a question: the person's words
                words.append(Content.from_text(answer.text or ""))
                continue
            if request.type != "function_approval_request":
                results.append(_external_result(request, answer))
                continue
            approvals.append(answer)
            call = request.function_call or request
            name, call_id = str(call.name), str(call.call_id)
            if handoffs.reason(name) is not None:  # refused already, counted with its reply
                refusal = handoffs.refusal(name, call_id, call.arguments)
                results.append(Content.from_function_result(call_id=call_id, result=refusal.error))
                continue
            route = handoffs.offered.get(name)
            if route is None:
                result = await _workflow_call(participant, call, answer, delegations, verdicts)
                if result is _WAITS:
                    continue
                results.append(result or await _approved_result(participant.agent, request, answer))
                continue
            with handoff_span(route, str(call.call_id)) as span:
                before = (*earlier, *calls)
                vetted = await _answered_handoff(route, call, answer, vet, gate, before)
                settle_handoff_span(span, vetted)
            calls.append(vetted)
            results.append(
                Content.from_function_result(call_id=str(call.call_id), result=vetted.result)
                if vetted.outcome == "rejected"
                else handoff_result(vetted)
            )
        # The answers are the user's, about this agent's calls: other agents' views filter them
        # with those calls.
        messages = (
            [Message(role="user", contents=approvals, author_name=participant.name)]
            if approvals
            else []
        )
        if results:
            messages.append(Message(role="tool", contents=results, author_name=participant.name))
        if words:  # the answer to a question is the user's message, for every agent to read
            messages.append(Message(role="user", contents=words))
        self.requests, self.answers, self.agent = {}, {}, None
        return messages, tuple(calls)

    def _followed(self, participant: Participant) -> tuple[HandoffCall, ...]:
        """The handoff the waiting response already made, as an earlier call of this run.

        A route decided with the requests (a safe agent a cap forced, say) counts as one: an
        approved handoff call after it is not performed.
        """
        then = self.then
        handoff = then.handoff if then is not None else None
        if then is not None and handoff is None and then.agent != participant.name:
            decided = HandoffRoute(participant.name, then.agent, f"the route to {then.agent}", "")
            return (HandoffCall(decided, "", "", "transferred", TRANSFERRED_RESULT),)
        route = participant.routes.get(handoff.tool_name) if handoff is not None else None
        if handoff is None or route is None:
            return ()
        followed = HandoffCall(
            route, handoff.goal, handoff.call_id, "transferred", TRANSFERRED_RESULT
        )
        return (followed,)

    def to_state(self) -> PendingState | None:
        """The typed record for checkpoints and stores."""
        if not self.requests or self.agent is None:
            return None
        return PendingState(
            agent=self.agent,
            requests=tuple(request.to_dict() for request in self.requests.values()),
            answers={key: answer.to_dict() for key, answer in self.answers.items()},
            then=self.then,
            delegation=self.frames,
            beside=self.beside,
        )

    @classmethod
    def from_state(cls, state: PendingState | None) -> PendingRequests:
        """Restore what :meth:`to_state` wrote."""
        if state is None:
            return cls()
        requests = [Content.from_dict(item) for item in state.requests]
        return cls(
            agent=state.agent,
            requests={str(request.id): request for request in requests},
            answers={k: Content.from_dict(v) for k, v in state.answers.items()},
            then=state.then or Continuation(state.agent),
            frames=state.delegation,
            beside=state.beside,
        )


_WAITS = Content.from_text("the delegation waits")  # a marker: the call gets no result yet


async def _workflow_call(
    participant: Participant,
    call: Content,
    answer: Content,
    delegations: Delegations | None,
    verdicts: list[ReviewVerdict] | None,
) -> Content | None:
    """The result of an answered call to a tool the workflow added (a delegate, a review tool).

    ``None`` for any other tool; :data:`_WAITS` for a delegation that waits for a person.
    """
    name, call_id = str(call.name), str(call.call_id)
    delegate = participant.delegates.get(name)
    if delegate is not None and delegations is not None:
        if not answer.approved:
            text = delegations.declined(delegate, call_id, call.arguments)
        else:
            found = await delegations.call(delegate, call_id, call.arguments, approved=True)
            if found is None:
                return _WAITS
            text = found
        return Content.from_function_result(call_id=call_id, result=text)
    if participant.reviewer and name in REVIEW_TOOL_KINDS and verdicts is not None:
        if not answer.approved:
            return Content.from_function_result(call_id=call_id, result=REJECTED_RESULT)
        if verdicts:
            text = ONE_VERDICT_RESULT.format(first=verdicts[0].kind)
            return Content.from_function_result(call_id=call_id, result=text)
        verdict, text = judge(name, call.arguments, call_id)
        if verdict is not None:
            verdicts.append(verdict)
        return Content.from_function_result(call_id=call_id, result=text)
    return None


async def _answered_handoff(
    route: HandoffRoute,
    call: Content,
    answer: Content,
    vet: HandoffVetter,
    gate: HandoffGate,
    earlier: Sequence[HandoffCall],
) -> HandoffCall:
    request = handoff_request(route, str(call.call_id), call.arguments)
    if not answer.approved:
        reason = (answer.additional_properties or {}).get(DECLINE_REASON_KEY)
        text = HANDOFF_DECLINED_RESULT.format(target=route.target)
        if isinstance(reason, str) and reason.strip():
            text = f"{text} The reviewer said: {reason.strip()}"
        return HandoffCall(
            route, request.argument, request.call_id, "rejected", text, "declined",
            payload=request.payload, arguments=request.arguments,
        )  # fmt: skip
    return await gate.vet(request, earlier, vet, approved=True)


def decline(request: Content, reason: str | None = None) -> Content:
    """The answer that declines an approval request, with the reviewer's reason.

    For a handoff, the calling agent is told that the handoff was declined, and why; it carries
    on in the same turn. ``request.to_function_approval_response(approved=False)`` declines
    without a reason.
    """
    answer = request.to_function_approval_response(approved=False)
    if reason:
        answer.additional_properties = {
            **(answer.additional_properties or {}),
            DECLINE_REASON_KEY: reason,
        }
    return answer


def _check_answer(request: Content, answer: Content) -> None:
    if not isinstance(answer, Content):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"The answer to request {request.id!r} must be a Content, not {answer!r}.")
    if request.type == "function_approval_request" and answer.type != "function_approval_response":
        raise TypeError(
            f"The answer to approval request {request.id!r} must be a function_approval_response "
            f"(use request.to_function_approval_response(approved=...)), not {answer.type!r}."
        )
    if request.type == "text" and answer.type != "text":
        raise TypeError(
            f"The answer to question {request.id!r} must be a text Content "
            f"(Content.from_text(...)), not {answer.type!r}."
        )
    if request.type == "text" and not (answer.text or "").strip():
        raise ValueError(f"The answer to question {request.id!r} is empty; say something.")
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
