"""The builder's argument checks: each mistake is reported at the call that makes it.

A value of the wrong kind (a workflow where an agent goes, a function that cannot take what the
workflow will pass it) is a :class:`~handoff_builder.HandoffArgumentError` (a ``TypeError``) raised
by the builder method it was given to, naming the argument, what it got and what to pass instead;
nothing is recorded. ``build()`` then checks the whole configuration.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, cast

from agent_framework import Agent

from ._remote import check_remote, is_remote, remote_role_error
from .exceptions import HandoffArgumentError, HookSignatureError

__all__ = [
    "agent_argument",
    "agent_or_name",
    "agents_argument",
    "check_edge_hook",
    "check_function",
    "check_input_filter",
    "int_argument",
    "label",
]


def label(agent: Any) -> str:
    """How an agent is named in error messages."""
    name = getattr(agent, "name", None)
    if isinstance(name, str) and name.strip():
        return repr(name)
    return f"<unnamed agent id={getattr(agent, 'id', '?')!r}>"


def agent_argument(value: object, argument: str, *, remote: bool = False) -> Agent:
    """``value``, which must be an ``agent_framework.Agent``.

    With ``remote``, a remote agent (``A2AAgent``) too, whose name is checked; without it, a
    remote agent is a :class:`~handoff_builder.RemoteAgentToolsError`: the argument's agent
    needs tools of the workflow's.
    """
    if isinstance(value, Agent):
        return cast(Agent, value)
    if is_remote(value):
        if remote:
            return cast(Agent, check_remote(value, argument))
        raise remote_role_error(argument, value)
    raise _not_an_agent(argument, value)


def agents_argument(
    value: object, argument: str, noun: str, *, remote: bool = False
) -> list[Agent]:
    """An agent, or an iterable of agents, as a list; a wrong element is named (``targets[1]``).

    ``noun`` names the agents in the .NET-style message for ``None`` elements ("One or more
    target agents are None."); ``remote`` is :func:`agent_argument`'s.
    """
    if isinstance(value, Agent):
        return [cast(Agent, value)]
    if is_remote(value):
        return [agent_argument(value, argument, remote=remote)]
    if value is None or isinstance(value, str) or not isinstance(value, Iterable):
        raise _not_an_agent(argument, value, several=True)
    agents = list(cast(Iterable[object], value))
    if any(agent is None for agent in agents):
        raise HandoffArgumentError(argument, f"One or more {noun} are None.")
    return [
        agent_argument(agent, f"{argument}[{index}]", remote=remote)
        for index, agent in enumerate(agents)
    ]


def agent_or_name(value: object, argument: str) -> Agent | str:
    """An agent, or an agent's name (resolved at build time)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Agent):
        return cast(Agent, value)
    if is_remote(value):
        return cast(Agent, check_remote(value, argument))
    if value is None:
        raise HandoffArgumentError(argument, f"{argument} must be an agent or its name, not None.")
    raise HandoffArgumentError(
        argument,
        f"{argument} must be an agent_framework.Agent or an agent's name, not "
        f"{type(value).__name__}.",
    )


def _not_an_agent(argument: str, value: object, *, several: bool = False) -> HandoffArgumentError:
    wanted = "an agent_framework.Agent" + (" or a list of them" if several else "")
    kind = type(value).__name__
    if value is None:
        return HandoffArgumentError(argument, f"{argument} must be {wanted}, not None.")
    if isinstance(value, str):
        return HandoffArgumentError(
            argument,
            f"{argument} must be {wanted}, not a str ({value!r}): pass the agent itself, not "
            "its name.",
        )
    return HandoffArgumentError(
        argument,
        f"{argument} must be {wanted}, not {kind}: a handoff workflow runs each agent with its "
        "own handoff tools and middleware, which only an Agent takes. Pass the Agent itself, or "
        f"give an Agent a tool that runs the {kind}.",
    )


def int_argument(argument: str, value: object, *, minimum: int = 1) -> int:
    """``value``, an int (not a bool) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise HandoffArgumentError(
            argument, f"{argument} must be an int, not {type(value).__name__}."
        )
    if value < minimum:
        raise ValueError(f"{argument} must be at least {minimum}, got {value}.")
    return value


def check_function(
    function: object,
    hook: str,
    what: str,
    arguments: str,
    count: int,
    *,
    source: str | None = None,
    target: str | None = None,
) -> Callable[..., Any]:
    """``function``, which must be callable with ``count`` positional arguments.

    ``what`` names it in a sentence ("The on_handoff of the handoff from 'a' to 'b'") and
    ``arguments`` says what it is given ("one argument, a HandoffContext"). A function whose
    signature cannot be read (some built-ins) is taken as it is.
    """
    if not callable(function):
        raise HandoffArgumentError(hook, f"{hook} must be callable, not {type(function).__name__}.")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read: it is called as it is
        return function
    try:
        signature.bind(*([None] * count))
    except TypeError as error:
        raise HookSignatureError(
            hook,
            f"{what} is called with {arguments}; {_shown(function, signature)} cannot take "
            f"{'it' if count == 1 else 'them'} ({error}).",
            source=source,
            target=target,
        ) from None
    return function


def _shown(function: Callable[..., Any], signature: inspect.Signature) -> str:
    """``name(parameters)`` as written, without annotations: ``audit(context, ticket)``."""
    name = getattr(function, "__name__", None) or type(function).__name__
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()]
    return name + str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


def check_input_filter(function: object, source: Agent, target: Agent | None, edge: str) -> None:
    """An edge's ``input_filter`` takes the :class:`HandoffInput` its target is about to read."""
    check_function(
        function,
        "input_filter",
        f"The input_filter of {edge}",
        "one argument, a HandoffInput",
        1,
        source=str(source.name),
        target=None if target is None else str(target.name),
    )


def check_edge_hook(
    hook: str, function: object, source: Agent, target: Agent | None, edge: str
) -> None:
    """An edge's ``on_handoff``, ``is_enabled`` or ``approval`` function takes its context.

    ``edge`` names the edge ("the handoff from 'a' to 'b'").
    """
    check_function(
        function,
        hook,
        f"The {hook} of {edge}",
        "one argument, a HandoffContext",
        1,
        source=str(source.name),
        target=None if target is None else str(target.name),
    )
