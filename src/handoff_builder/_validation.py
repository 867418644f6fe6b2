"""Pure checks of a handoff topology: the problems ``build()`` refuses.

Each problem is an error :class:`~handoff_builder.LintFinding`: a ``code`` naming the rule, the
agents it is about, and a sentence that says how to fix it. ``build()`` raises them all at once
(:class:`~handoff_builder.HandoffConfigurationError`); ``lint()`` returns them with its other
findings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from agent_framework import Agent
from pydantic import BaseModel

from ._arguments import label
from ._config import Edge
from ._lint import LintFinding
from ._remote import card_description, is_remote
from ._routes import MAX_TOOL_NAME_LENGTH, is_valid_tool_name


def problem(code: str, agents: Iterable[Any], message: str) -> LintFinding:
    """A problem ``build()`` refuses: an error finding about ``agents`` (agents or names)."""
    return LintFinding("error", code, tuple(_name(agent) for agent in agents), message)


def _name(agent: Any) -> str:
    if isinstance(agent, str):
        return agent
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name.strip() else label(agent)


def agent_instructions(agent: Agent[Any]) -> str | None:
    """The agent's own instructions, if it has text ones."""
    instructions = (agent.default_options or {}).get("instructions")
    return instructions if isinstance(instructions, str) else None


def own_tool_names(agent: Agent[Any]) -> set[str]:
    """Names of the tools the agent already has."""
    options: dict[str, Any] = getattr(agent, "default_options", None) or {}
    tools: Any = options.get("tools") or []
    items: Iterable[Any] = cast("Sequence[Any]", tools) if isinstance(tools, Sequence) else [tools]
    names = (getattr(item, "name", None) for item in items)
    return {name for name in names if isinstance(name, str)}


def handoff_description(edge: Edge) -> str | None:
    """The edge reason, else the target's description, name or instructions (first non-blank).

    A remote target's description and name are its agent card's: they reach the prompt cut and
    marked (:func:`~handoff_builder._remote.card_description`).
    """
    target = edge.target
    if is_remote(target) and not (isinstance(edge.reason, str) and edge.reason.strip()):
        return card_description(target)
    for candidate in (
        edge.reason,
        getattr(target, "description", None),
        getattr(target, "name", None),
        agent_instructions(cast("Agent[Any]", target)) if isinstance(target, Agent) else None,
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate
    return None


def remote_problems(edges: Sequence[Edge]) -> list[LintFinding]:
    """A remote agent is no edge's source but a hand-back's, whose summary is its answer.

    The builder refuses a remote source at the call; the default all-to-all mesh would make one.
    A hand-back from a remote agent cannot take a payload model or wait for approval.
    """
    problems: list[LintFinding] = []
    meshed: set[int] = set()
    for edge in edges:
        source = edge.source
        if not is_remote(source):
            continue
        name = _name(source)
        if edge.kind == "handoff" and id(source) not in meshed:
            meshed.add(id(source))
            problems.append(
                problem(
                    "remote-handoff-tools",
                    [source],
                    f"Agent {name!r} is a remote A2A agent and cannot be given handoff tools, "
                    "but the default all-to-all mesh gives it some (no handoff edge is "
                    f"declared). Declare the edges: with_handoff(<coordinator>, {name}) and "
                    f"with_hand_back(<coordinator>, [{name}]).",
                )
            )
        elif edge.kind == "hand_back" and (
            edge.payload is not None or edge.policy.approval is not False
        ):
            problems.append(
                problem(
                    "remote-hand-back",
                    [source],
                    f"The hand-back of the remote agent {name!r} hands back its answer as the "
                    "summary when its task completes: it cannot fill a payload model or wait "
                    "for approval. Declare a plain with_hand_back for it.",
                )
            )
    return problems


def participant_problems(participants: Sequence[Any]) -> list[LintFinding]:
    """Every participant has a unique, non-blank name.

    (Each is an ``agent_framework.Agent``: the builder refuses anything else at the call.)
    """
    problems: list[LintFinding] = []
    for agent in participants:
        if not (isinstance(agent.name, str) and agent.name.strip()):
            problems.append(
                problem(
                    "unnamed-agent",
                    [agent],
                    f"Agent {label(agent)} has no name; give every participant a unique name "
                    "(it names the agent's handoff tool and the messages it writes).",
                )
            )
    counts = Counter(getattr(agent, "name", None) for agent in participants)
    for name, count in counts.items():
        if isinstance(name, str) and name.strip() and count > 1:
            problems.append(
                problem(
                    "duplicate-name",
                    [name],
                    f"{count} different agents are named {name!r}; participant names must be "
                    "unique.",
                )
            )
    return problems


def edge_problems(edges: Sequence[Edge]) -> list[LintFinding]:
    """No self-handoff, no duplicate edge, and every target can be described to the model."""
    problems: list[LintFinding] = []
    seen: set[tuple[int, int, str]] = set()
    for edge in edges:
        source, target = label(edge.source), label(edge.target)
        pair = (edge.source, edge.target)
        key = (id(edge.source), id(edge.target), edge.kind)
        if edge.source is edge.target:
            problems.append(
                problem(
                    f"self-{edge.kind.replace('_', '-')}",
                    [edge.source],
                    f"Agent {source} cannot {edge.edge.verb} to itself; remove that "
                    f"{edge.edge.noun}.",
                )
            )
        elif key in seen:
            problems.append(
                problem(
                    "duplicate-edge",
                    pair,
                    f"The {edge.edge.noun} from {source} to {target} is declared twice; "
                    "keep one declaration.",
                )
            )
        seen.add(key)
        if handoff_description(edge) is None:
            problems.append(
                problem(
                    "no-description",
                    pair,
                    f"Target agent {target} has no description, name or instructions, and the "
                    f"handoff from {source} gives no reason; pass reason= or describe the agent.",
                )
            )
        problems += _payload_problems(edge.edge.noun, pair, edge.payload)
        problems += _tool_name_problems(edge.edge.noun, pair, edge.tool_name)
    return problems


def _payload_problems(noun: str, pair: tuple[Any, Any], payload: Any) -> list[LintFinding]:
    if payload is None or (isinstance(payload, type) and issubclass(payload, BaseModel)):
        return []
    return [
        problem(
            "invalid-payload",
            pair,
            f"The payload of the {noun} from {label(pair[0])} to {label(pair[1])} is "
            f"{payload!r}; pass a pydantic BaseModel subclass (the class, not an instance).",
        )
    ]


def _tool_name_problems(noun: str, pair: tuple[Any, Any], name: str | None) -> list[LintFinding]:
    if name is None or is_valid_tool_name(name):
        return []
    return [
        problem(
            "invalid-tool-name",
            pair,
            f"Tool name {name!r} for the {noun} from {label(pair[0])} to {label(pair[1])} "
            f"must use only [A-Za-z0-9_-] and be 1 to {MAX_TOOL_NAME_LENGTH} characters long.",
        )
    ]


def tool_name_problems(
    tool_names: Mapping[Any, Sequence[tuple[str, Any, str]]],
) -> list[LintFinding]:
    """Per agent: the tools the workflow gives it have unique names, unlike its own tools.

    ``tool_names`` maps each agent to its ``(tool name, target, kind)`` triples; ``kind`` is
    ``"handoff"``, ``"delegate"``, ``"review"`` or ``"reply"`` (the review and reply tools have no
    target).
    """
    problems: list[LintFinding] = []
    for source, triples in tool_names.items():
        own = (
            own_tool_names(cast("Agent[Any]", source)) if isinstance(source, Agent) else set[str]()
        )
        by_name: dict[str, list[tuple[Any, str]]] = {}
        for name, target, kind in triples:
            by_name.setdefault(name, []).append((target, kind))
        for name, found in by_name.items():
            kinds = {kind for _, kind in found}
            if len(found) > 1 and "reply" in kinds:
                problems.append(
                    problem(
                        "tool-name-collision",
                        [source, *(target for target, _ in found if target is not None)],
                        f"Agent {label(source)} would get two tools named {name!r}, one of "
                        "them the reply tool; pass name= to with_reply_tool.",
                    )
                )
            elif len(found) > 1:
                names = " and ".join(label(target) for target, _ in found)
                how = " or ".join(f"with_{kind}" for kind in sorted(kinds) if kind != "review")
                noun = "handoff tools" if kinds == {"handoff"} else "tools"
                problems.append(
                    problem(
                        "tool-name-collision",
                        [source, *(target for target, _ in found if target is not None)],
                        f"Agent {label(source)} would get two {noun} named {name!r} (to "
                        f"{names}); pass tool_name= to {how or 'with_handoff'} for one of them.",
                    )
                )
            if name in own:
                target, kind = found[0]
                problems.append(
                    problem(
                        "tool-name-collision",
                        [source],
                        f"Agent {label(source)} already has a tool named {name!r}, the name of "
                        f"{_workflow_tool(kind, target)}",
                    )
                )
    return problems


def _workflow_tool(kind: str, target: Any) -> str:
    """The tool of the workflow's that an agent's own tool is named like, and how to fix it."""
    if kind == "review":
        return "the review tool; rename its tool."
    if kind == "reply":
        return "the reply tool; rename its tool or pass name= to with_reply_tool."
    return f"its {kind} tool to {label(target)}; rename its tool or pass tool_name=."


def delegate_problems(delegates: Sequence[Any], in_graph: set[int]) -> list[LintFinding]:
    """Delegate edges: a caller in the workflow, no self-delegation or duplicate, no cycle.

    ``delegates`` are the declared ``DelegateEdge`` records; ``in_graph`` the ids of the
    participants. A caller may also be another delegate's expert (delegates nest).
    """
    problems: list[LintFinding] = []
    experts = {id(d.expert) for d in delegates}
    seen: set[tuple[int, int]] = set()
    asks: dict[int, tuple[Any, list[Any]]] = {}
    for delegate in delegates:
        caller, expert = label(delegate.caller), label(delegate.expert)
        key = (id(delegate.caller), id(delegate.expert))
        pair = (delegate.caller, delegate.expert)
        if delegate.caller is delegate.expert:
            problems.append(
                problem(
                    "self-delegate",
                    [delegate.caller],
                    f"Agent {caller} cannot delegate to itself; remove that delegate.",
                )
            )
            continue
        if key in seen:
            problems.append(
                problem(
                    "duplicate-edge",
                    pair,
                    f"The delegate from {caller} to {expert} is declared twice; keep one "
                    "declaration.",
                )
            )
            continue
        seen.add(key)
        asks.setdefault(id(delegate.caller), (delegate.caller, []))[1].append(delegate.expert)
        if id(delegate.caller) not in in_graph | experts:
            problems.append(
                problem(
                    "not-a-participant",
                    pair,
                    f"The delegate from {caller} to {expert}: {caller} is not in this workflow; "
                    "add it with add_participants or a handoff, or make it another agent's "
                    "expert.",
                )
            )
        if handoff_description(Edge(delegate.caller, delegate.expert, delegate.reason)) is None:
            problems.append(
                problem(
                    "no-description",
                    pair,
                    f"Expert agent {expert} has no description, name or instructions, and the "
                    f"delegate from {caller} gives no reason; pass reason= or describe the agent.",
                )
            )
        problems += _payload_problems("delegate", pair, delegate.payload)
        problems += _tool_name_problems("delegate", pair, delegate.tool_name)
    problems += _delegate_cycles(asks)
    return problems


def _delegate_cycles(asks: Mapping[int, tuple[Any, Sequence[Any]]]) -> list[LintFinding]:
    """One problem per delegate cycle: an expert that, through its delegates, asks its caller.

    ``asks`` maps each caller's id to the caller and the experts it asks.
    """
    problems: list[LintFinding] = []
    done: set[int] = set()
    reported: set[frozenset[int]] = set()

    def visit(path: list[Any]) -> None:
        agent = path[-1]
        if id(agent) in done:
            return
        for expert in asks.get(id(agent), (None, ()))[1]:
            ids = [id(a) for a in path]
            if id(expert) in ids:
                cycle = [*path[ids.index(id(expert)) :], expert]
                members = frozenset(id(a) for a in cycle)
                if members not in reported:
                    reported.add(members)
                    chain = " -> ".join(label(a) for a in cycle)
                    problems.append(
                        problem(
                            "delegate-cycle",
                            cycle[:-1],
                            f"Delegates form a cycle ({chain}): an expert would ask its own "
                            "caller, without end. Remove one of these delegates, or make it a "
                            "handoff.",
                        )
                    )
            else:
                visit([*path, expert])
        done.add(id(agent))

    for caller, _ in asks.values():
        visit([caller])
    return problems


def review_problems(
    reviews: Sequence[tuple[Any, Any, int]], safe_agents: Mapping[str, Any] | None = None
) -> list[LintFinding]:
    """Reviews (producer, reviewer, rounds): two agents, one review per producer, no chains.

    A reviewed producer cannot be a cap's safe agent (``safe_agents``: cap -> agent): a safe
    agent's reply ends the turn, without a review.
    """
    problems: list[LintFinding] = []
    for cap, safe in (safe_agents or {}).items():
        for producer, reviewer, _ in reviews:
            if safe is producer:
                problems.append(
                    problem(
                        "reviewed-safe-agent",
                        [producer, reviewer],
                        f"Agent {label(producer)} is the safe agent of {cap} and "
                        f"{label(reviewer)} reviews its replies: a safe agent's reply ends the "
                        "turn without a review. Name another safe agent, or remove the review.",
                    )
                )
            elif safe is reviewer:
                problems.append(
                    problem(
                        "reviewer-safe-agent",
                        [reviewer, producer],
                        f"Agent {label(reviewer)} is the safe agent of {cap} and reviews the "
                        f"replies of {label(producer)}: a reviewer's run is a verdict, not an "
                        "answer to the user. Name another safe agent.",
                    )
                )
    producers: set[int] = set()
    reviewers = {id(reviewer) for _, reviewer, _ in reviews}
    for producer, reviewer, _ in reviews:
        if producer is reviewer:
            problems.append(problem("self-review", [producer], f"Agent {label(producer)} cannot "
                                    "review its own replies; pick another reviewer."))  # fmt: skip
            continue
        if id(producer) in producers:
            problems.append(
                problem(
                    "two-reviewers",
                    [producer],
                    f"Agent {label(producer)} has two reviewers (with_review); keep one: one "
                    "reviewer decides whether a reply goes out.",
                )
            )
        producers.add(id(producer))
        if id(producer) in reviewers:
            problems.append(
                problem(
                    "review-chain",
                    [producer],
                    f"Agent {label(producer)} both reviews and is reviewed; a reviewer's verdict "
                    "is not a reply to review. Give the review to another agent.",
                )
            )
    return problems
