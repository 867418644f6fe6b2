"""The support desk's eval set (evals/support_desk.jsonl) and the desks it runs against
(evals/desks.py): the set is valid and balanced as docs/evals.md says, both desks run every case
offline, and the seed desk sends a real model the seed's prompts, its tool names and the SDK's
default handoff instructions."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from evals.desks import builtin_desk, seed_desk, seed_desk_reply_tool

from handoff_builder import DEFAULT_HANDOFF_INSTRUCTIONS, HandoffWorkflowBuilder
from handoff_builder.evals import ESCALATED, FAILED, EvalCase, evaluate, load_cases
from tests.fake_openai import FakeOpenAI, text, tool_call

SET = Path(__file__).resolve().parents[1] / "evals" / "support_desk.jsonl"
DESKS: dict[str, Callable[..., HandoffWorkflowBuilder]] = {
    "builtin": builtin_desk,
    "seed": seed_desk,
    "seed-reply-tool": seed_desk_reply_tool,
}
KINDS = {"billing": 16, "tech": 16, "two-part": 12, "topic": 12, "stay": 8, "triage": 8}
SPECIALISTS = ("billing", "tech")


def kind_of(case: EvalCase) -> str:
    """``billing-03: a copy of an invoice is an invoice`` -> ``billing``."""
    return case.id.split(":")[0].rsplit("-", 1)[0]


@pytest.fixture(scope="module")
def cases() -> list[EvalCase]:
    return load_cases(SET)


def test_the_set_has_each_kind_as_docs_evals_counts_it(cases: list[EvalCase]) -> None:
    assert Counter(kind_of(case) for case in cases) == KINDS
    assert Counter(case.expect.agent for case in cases) == {"billing": 32, "tech": 32, "triage": 8}
    assert all(":" in case.id and case.id.split(": ", 1)[1] for case in cases)  # the reasoning


def test_each_kind_expects_the_path_its_name_says(cases: list[EvalCase]) -> None:
    for case in cases:
        kind, path, agent = kind_of(case), case.expect.path, case.expect.agent
        assert path is not None, case.id
        assert path[0] == (case.start or "triage"), case.id
        if kind in SPECIALISTS:
            assert (case.start, path) == (None, ("triage", kind)), case.id
        elif kind == "two-part":  # the part mentioned first goes first; the other answers
            first = path[1]
            assert (len(case.input), path) == (1, ("triage", first, "triage", agent)), case.id
            assert {first, agent} == set(SPECIALISTS), case.id
        elif kind == "topic":  # a specialist's conversation, then the other's topic
            assert path == (case.start, "triage", agent), case.id
            assert case.start != agent, case.id
            assert [m.agent for m in case.input] == [None, case.start, None], case.id
        elif kind == "stay":
            assert path == (agent,) == (case.start,), case.id
            assert agent in SPECIALISTS, case.id
            assert [m.agent for m in case.input] == [None, agent, None], case.id
        else:
            assert path == ("triage",), case.id
            assert not case.expect.goal_contains, case.id


@pytest.mark.parametrize("desk", sorted(DESKS))
async def test_both_desks_run_every_case_offline(cases: list[EvalCase], desk: str) -> None:
    """On their keyword scripts: every case runs to an answer (the scripts' judgement is not
    measured here); ``evaluate`` refuses a case that names an agent the desk does not have."""
    report = await evaluate(DESKS[desk](), cases)
    assert report.total == len(cases) == 72
    assert [r.case.id for r in report.results if r.answered == FAILED] == []
    assert {r.status for r in report.results} == {"completed"}


@pytest.fixture
def openai_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeOpenAI]]:
    servers: list[FakeOpenAI] = []

    def start(replies: list[dict[str, Any]]) -> FakeOpenAI:
        server = FakeOpenAI(replies)
        server.thread.start()
        servers.append(server)
        for variable, value in server.environ.items():
            monkeypatch.setenv(variable, value)
        return server

    yield start
    for server in servers:
        server.server.shutdown()
        server.server.server_close()


async def test_the_seed_desk_sends_the_seed_prompts_its_tools_and_the_default_instructions(
    cases: list[EvalCase], openai_server: Callable[..., FakeOpenAI]
) -> None:
    server = openai_server(
        [
            tool_call("call_1", "transfer_to_billing", {"goal": "Refund the March charge."}),
            text("I have refunded the second March charge."),
        ]
    )
    first = next(case for case in cases if case.id.startswith("billing-01"))
    report = await evaluate(seed_desk("openai", max_output_tokens=256), [first])
    assert report.correct == 1
    triage, billing = server.bodies()
    assert triage["max_completion_tokens"] == billing["max_completion_tokens"] == 256

    system = triage["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith(
        "You are the front desk for Contoso Telecom. Work out what the user needs.\n"
        "Do not try to solve the problem yourself.\n\nHand off with exactly one tool:\n"
        "- transfer_to_billing: charges, invoices, plans\n"
    )
    assert system["content"].endswith("\n" + DEFAULT_HANDOFF_INSTRUCTIONS)
    tools = {t["function"]["name"]: t["function"]["description"] for t in triage["tools"]}
    assert tools == {
        "transfer_to_billing": "charges, invoices, plans",
        "transfer_to_tech": "errors, bugs, how-to questions",
    }

    assert billing["messages"][0]["content"].startswith(
        "You are the billing agent for Contoso Telecom. You now own this conversation.\n"
    )
    assert [t["function"]["name"] for t in billing["tools"]] == ["transfer_back_to_triage"]
    assert "Goal: Refund the March charge." in json.dumps(billing["messages"])


async def test_agent_framework_handoff_builder_runs_the_same_cases(
    cases: list[EvalCase], openai_server: Callable[..., FakeOpenAI]
) -> None:
    """agent_framework's own HandoffBuilder, on the seed desk's agents: the answering agent is the
    one that asks the user next, each handoff_sent event is a hop, and the models get the seed
    prompts with agent_framework's tool names."""
    pytest.importorskip("agent_framework_orchestrations")
    from evals.agent_framework_desk import run_case

    server = openai_server(
        [
            tool_call("call_1", "handoff_to_triage", {}),
            tool_call("call_2", "handoff_to_tech", {}),
            text("Restart the router, please."),
        ]
    )
    topic = next(case for case in cases if case.id.startswith("topic-01"))
    result = await run_case(topic, "openai", 256)
    assert (result.answered, result.correct, result.error) == ("tech", True, None)
    assert result.path == ("billing", "triage", "tech")
    assert [call.agent for call in result.model_calls] == ["billing", "triage", "tech"]
    billing, triage, tech = server.bodies()
    assert "call handoff_to_triage with a\nsummary" in billing["messages"][0]["content"]
    tools = {t["function"]["name"] for t in triage["tools"]}  # in an order that varies by process
    assert tools == {"handoff_to_billing", "handoff_to_tech"}
    assert tech["messages"][-1] == {"role": "user", "content": topic.input[-1].text}


async def test_agent_framework_handoff_builder_ends_a_bouncing_turn_at_the_seed_cap(
    cases: list[EvalCase], openai_server: Callable[..., FakeOpenAI]
) -> None:
    pytest.importorskip("agent_framework_orchestrations")
    from evals.agent_framework_desk import run_case

    bounces = ["handoff_to_billing", "handoff_to_triage"] * 3
    openai_server([tool_call(f"call_{n}", name, {}) for n, name in enumerate(bounces)])
    first = next(case for case in cases if case.id.startswith("billing-01"))
    result = await run_case(first, "openai", 256)
    assert (result.answered, result.status) == (ESCALATED, "escalated")
    assert len(result.model_calls) == 5  # the fifth handoff ends the turn (the seed's cap is 4)


async def test_the_reply_tool_desk_answers_a_greeting_through_the_tool(
    cases: list[EvalCase], openai_server: Callable[..., FakeOpenAI]
) -> None:
    server = openai_server(
        [tool_call("call_1", "reply_to_user", {"text": "Hello! How can I help?"})]
    )
    greeting = next(case for case in cases if case.id.startswith("triage-01"))
    report = await evaluate(seed_desk_reply_tool("openai", max_output_tokens=256), [greeting])
    assert report.correct == 1
    [result] = report.results
    assert (result.answered, result.reply) == ("triage", "Hello! How can I help?")
    [triage] = server.bodies()
    names = [tool["function"]["name"] for tool in triage["tools"]]
    assert names == ["transfer_to_billing", "transfer_to_tech", "reply_to_user"]
