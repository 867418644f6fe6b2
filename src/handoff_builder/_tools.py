"""Handoff tools, and the function middleware that vets each call to them as it is made.

Each agent gets one :class:`HandoffTool` per granted target, added to its run (the agent object is
never changed). Its JSON schema is the edge's pydantic model. The tools are never executed:
:class:`HandoffToolMiddleware`, made for one run of one agent, intercepts every call to them (and
to the run's refusal tools: handoffs the agent does not have, see :mod:`._strays`), validates the
arguments, has the manager vet the call and the edge's code admit it, records the vetted
call (:class:`~handoff_builder._decision.HandoffCall`) in the run's list, and

* refuses it: a tool error goes back to the agent, which keeps the turn and may try again;
* asks for approval: the call becomes a function-approval request and the run waits; or
* settles it (followed, not performed, or stopped at a cap): the function result carries the
  call's record (:func:`~handoff_builder._state.handoff_record`) and the agent's tool loop ends.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, cast

from agent_framework import (
    Content,
    FunctionInvocationContext,
    FunctionMiddleware,
    FunctionTool,
    MiddlewareFailure,
    MiddlewareTermination,
)
from pydantic import BaseModel
from typing_extensions import override

from ._decision import HandoffCall, HandoffRequest
from ._hooks import HandoffGate
from ._payloads import (
    DelegateTask,
    HandBackSummary,
    HandoffGoal,
    ReviewApproval,
    ReviewChanges,
    is_strict_schema,
    validate_arguments,
)
from ._routes import HandoffRoute
from ._state import handoff_record
from ._strays import RefusalTool, RunHandoffs
from ._telemetry import handoff_span, settle_handoff_span
from .exceptions import HandoffHookError

HANDOFF_APPROVAL_ID_PREFIX = "handoff-approval-"
"""How the id of a handoff call's approval request starts (stored in pending state)."""


class HandoffVetter(Protocol):
    """Vets one handoff call (the manager's :meth:`~GroupChatManager.vet_handoff`)."""

    def __call__(self, request: HandoffRequest, earlier: Sequence[HandoffCall]) -> HandoffCall:
        """Decide what becomes of the call."""
        ...


def handoff_request(route: HandoffRoute, call_id: str, arguments: Any) -> HandoffRequest:
    """The call's arguments, validated with the route's model.

    The built-in goal and summary (an edge without ``payload=``) take their one field and ignore
    any other key: small models copy keys of the schema (``"type"``, ``"title"``,
    ``"required"``) beside the argument, and refusing the call for them only made them retry
    with the error's text. A payload model of the user's is validated as it is declared.
    """
    if isinstance(arguments, BaseModel):
        arguments = arguments.model_dump(mode="json")
    if route.payload is None:
        payload, problem = validate_own_fields(route.model, arguments)
    else:
        payload, problem = validate_arguments(route.model, arguments)
    return HandoffRequest(route, call_id, payload, arguments, problem)


def validate_own_fields(
    model: type[BaseModel], arguments: Any
) -> tuple[BaseModel | None, str | None]:
    """``arguments`` validated with one of the package's own models, other keys ignored.

    Small models copy keys of the schema (``"type"``, ``"title"``) beside the argument; the
    built-in goal, summary and reply text take their field and leave the rest.
    """
    if isinstance(arguments, BaseModel):
        arguments = arguments.model_dump(mode="json")
    return validate_arguments(model, own_fields(model, arguments))


def own_fields(model: type[BaseModel], arguments: Any) -> Any:
    """``arguments`` (a JSON object, as text or a mapping) with only ``model``'s fields.

    Anything that is not a JSON object is returned as it came, for validation to name.
    """
    found: Any = arguments
    if isinstance(found, str):
        try:
            found = json.loads(found) if found.strip() else {}
        except json.JSONDecodeError:
            return arguments
    if not isinstance(found, Mapping):
        return arguments
    fields = model.model_fields
    return {key: value for key, value in cast("Mapping[str, Any]", found).items() if key in fields}


def handoff_result(call: HandoffCall) -> Content:
    """The function result of a settled handoff call, carrying the call's record."""
    return Content.from_function_result(
        call_id=call.call_id, result=call.result, additional_properties=handoff_record(call)
    )


def approval_request(call: HandoffCall, arguments: str) -> Content:
    """The function-approval request a handoff call that needs a human's approval becomes."""
    function_call = Content.from_function_call(
        call_id=call.call_id, name=call.route.tool_name, arguments=arguments
    )
    return Content.from_function_approval_request(
        id=HANDOFF_APPROVAL_ID_PREFIX + call.call_id, function_call=function_call
    )


def never_called(**_: Any) -> str:  # pragma: no cover - the middleware intercepts every call
    raise RuntimeError("this tool is read by a middleware of the workflow and never executed")


class HandoffTool(FunctionTool):
    """A handoff tool: its schema is the edge's model, strict when the model allows it.

    OpenAI's strict function calling (``"strict": true``) constrains the model to the schema; it
    is declared when every object in the schema is closed and every property required (a model
    with ``extra="forbid"`` and no defaults, as the built-in goal and summary are), and the call's
    arguments are then validated strictly (:func:`~handoff_builder._payloads.validate_arguments`).
    """

    @override
    def to_json_schema_spec(self) -> dict[str, Any]:
        spec = super().to_json_schema_spec()
        if is_strict_schema(self.parameters()):
            spec["function"]["strict"] = True
        return spec


def schema_tool(name: str, description: str, model: type[BaseModel]) -> HandoffTool:
    """A tool that takes ``model`` and is never executed: a middleware reads every call to it.

    agent_framework gets the model's JSON schema (:func:`lean_schema`), not the model: it then
    hands the middleware the arguments as the model sent them, without converting them first (a
    model given as a class is validated, leniently, before any middleware runs). Validating them
    is the middleware's.
    """
    return HandoffTool(
        name=name,
        description=description,
        func=never_called,
        input_model=lean_schema(model),
        approval_mode="never_require",
    )


# The package's own argument models: their docstring says what the tool's description says.
_BUILT_IN_MODELS = frozenset(
    {HandoffGoal, HandBackSummary, DelegateTask, ReviewApproval, ReviewChanges}
)
# The keys of a JSON schema whose value is a schema, a list of schemas, or a map of them.
_SUBSCHEMA = frozenset({"items", "additionalProperties", "not", "contains"})
_SUBSCHEMA_LISTS = frozenset({"anyOf", "allOf", "oneOf", "prefixItems"})
_SUBSCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})


@functools.lru_cache(maxsize=256)
def _lean_schema(model: type[BaseModel]) -> str:
    schema = _untitled(model.model_json_schema())
    if model in _BUILT_IN_MODELS:
        schema.pop("description", None)
    return json.dumps(schema)


def lean_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema as a tool's parameters, without what the model does not need.

    Pydantic's ``title`` of every model and field is left out (the names say it, and small
    models copied them into their arguments), and so is the description of the package's own
    models, which repeats the tool's. Field descriptions, types, enums, required fields and
    ``additionalProperties`` stay. A fresh dict each time: callers may change it.
    """
    return cast("dict[str, Any]", json.loads(_lean_schema(model)))


def _untitled(node: Any) -> Any:
    """A schema node without ``title`` keywords (a property named ``title`` stays)."""
    if not isinstance(node, Mapping):
        return node
    schema: dict[str, Any] = {}
    for key, value in cast("Mapping[str, Any]", node).items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SUBSCHEMA:
            value = _untitled(value)
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            value = [_untitled(item) for item in cast("list[Any]", value)]
        elif key in _SUBSCHEMA_MAPS and isinstance(value, Mapping):
            items = cast("Mapping[str, Any]", value).items()
            value = {name: _untitled(item) for name, item in items}
        schema[key] = value
    return schema


@functools.lru_cache(maxsize=1024)
def make_handoff_tool(route: HandoffRoute) -> HandoffTool:
    """The tool an agent calls to hand the conversation to ``route.target``.

    One tool per distinct route, shared by every workflow built with it: the tool holds no
    per-conversation state (it is never executed; :class:`HandoffToolMiddleware` intercepts every
    call), so a built conversation does not carry its own copy.
    """
    return schema_tool(route.tool_name, route.description, route.model)


class HandoffToolMiddleware(FunctionMiddleware):
    """Vets one agent run's handoff tool calls; other tool calls pass through untouched.

    ``handoffs`` are the run's: a call to a handoff tool the agent has in this run is vetted
    as it is; a call to a refusal tool (a handoff it does not have) as a call that can only be
    refused. ``calls`` receives every vetted call, in the order the calls were made.
    """

    def __init__(
        self,
        handoffs: RunHandoffs,
        vet: HandoffVetter,
        gate: HandoffGate,
        calls: list[HandoffCall],
    ) -> None:
        self.handoffs = handoffs
        self._vet = vet
        self._gate = gate
        self.calls = calls
        # agent_framework runs one response's tool calls concurrently: while an edge's async hook
        # waits, a later call must not be vetted as if the earlier one had not been made.
        self._one_at_a_time = asyncio.Lock() if gate.runs_code else None

    @override
    async def process(
        self,
        context: FunctionInvocationContext,
        call_next: Callable[[], Awaitable[None]],
    ) -> None:
        """Vet a handoff call: refuse it, ask for approval, or settle it and end the loop."""
        name = context.function.name
        call_id = str(context.metadata.get("call_id") or "")
        route = self.handoffs.offered.get(name)
        if route is not None:
            request = handoff_request(route, call_id, context.arguments)
        elif isinstance(context.function, RefusalTool):
            request = self.handoffs.refusal(name, call_id, context.arguments)
        else:
            await call_next()
            return
        call = await self.decide(request)
        if call.outcome == "rejected":
            context.result = call.result
            return
        if call.outcome == "awaiting_approval":
            context.result = approval_request(call, request.arguments)
            return
        raise MiddlewareTermination(call.result, result=handoff_result(call))

    async def decide(self, request: HandoffRequest) -> HandoffCall:
        """Vet the call, let the edge's gate admit it, and record it as made."""
        if self._one_at_a_time is None:
            return await self._decide(request)
        async with self._one_at_a_time:
            return await self._decide(request)

    async def _decide(self, request: HandoffRequest) -> HandoffCall:
        with handoff_span(request.route, request.call_id) as span:
            try:
                call = await self._gate.vet(request, tuple(self.calls), self._vet)
            except HandoffHookError as error:  # fail the run, not a tool error to the agent
                raise MiddlewareFailure(str(error)) from error
            settle_handoff_span(span, call)
        self.calls.append(call)
        return call
