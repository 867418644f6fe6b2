"""Routing evals (handoff_builder.evals, ``handoff-builder eval``), on scripted models whose
accuracy is known before they run: a triage that always picks billing scores exactly half of a
half-billing set, a keyword triage all of it, and each figure of the summary is what those
scripts must give."""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, Content, Message, tool

from handoff_builder import (
    DEFAULT_HANDOFF_INSTRUCTIONS,
    ConversationHost,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    ModelConnectionError,
)
from handoff_builder.cli import main
from handoff_builder.evals import (
    ESCALATED,
    FAILED,
    CaseMessage,
    EdgeFigures,
    EvalCase,
    EvalCaseError,
    assert_routing_accuracy,
    evaluate,
    parse_cases,
    record_cases,
)
from handoff_builder.stores import InMemoryConversationStore
from handoff_builder.testing import (
    ModelCall,
    ScriptedChatClient,
    Step,
    call_tool,
    handoff_to,
    reply,
    respond,
)
from handoff_builder.testing import scripted_agent as agent
from tests.fake_openai import FakeOpenAI, text, tool_call

MESSAGES = {
    "b1": ("billing", "I was charged twice in March"),
    "b2": ("billing", "My invoice is wrong"),
    "b3": ("billing", "Can I change my plan?"),
    "b4": ("billing", "Why is my bill so high?"),
    "t1": ("tech", "The app crashes on start"),
    "t2": ("tech", "My router keeps rebooting"),
    "t3": ("tech", "I get an error when I log in"),
    "t4": ("tech", "My internet is slow"),
}
PATHS = {"b1", "b2", "t1", "t2"}  # the cases that also expect a path
GOALS = {"b1": ["charged twice"], "b2": ["INVOICE"]}  # ... and words of the goal


def case_line(case_id: str) -> str:
    expected, message = MESSAGES[case_id]
    expect: dict[str, object] = {"agent": expected}
    if case_id in PATHS:
        expect["path"] = ["triage", expected]
    if case_id in GOALS:
        expect["goal_contains"] = GOALS[case_id]
    return json.dumps({"id": case_id, "input": message, "expect": expect})


HALF_BILLING = "\n".join(case_line(case_id) for case_id in MESSAGES) + "\n"
CASES = parse_cases(HALF_BILLING.splitlines())
KEYWORDS = {
    "billing": ("charged", "invoice", "plan", "bill"),
    "tech": ("app", "router", "error", "internet"),
}

Script = Callable[[ModelCall], Step]


def goal(call: ModelCall) -> str:
    return f"The user says: {call.user_text}"


def always_billing(call: ModelCall) -> Step:
    return handoff_to("billing", goal=goal(call))


def by_keyword(call: ModelCall) -> Step:
    text = call.user_text.lower()
    for target, words in KEYWORDS.items():
        if any(word in text for word in words):
            return handoff_to(target, goal=goal(call))
    return reply("Hello! How can I help?")


def desk(triage: Script, *, billing: Script | None = None) -> HandoffWorkflowBuilder:
    """triage hands off to billing or tech, by its script; they answer."""
    specialists = [
        agent("billing", respond_with=billing or (lambda _: reply("Billing here."))),
        agent("tech", respond_with=lambda _: reply("Tech here.")),
    ]
    triage_agent = agent("triage", respond_with=triage)
    return HandoffWorkflowBuilder(triage_agent).with_handoffs(triage_agent, specialists)


# -- the figures ---------------------------------------------------------------------------------


async def test_a_triage_that_always_picks_billing_scores_half_of_a_half_billing_set() -> None:
    report = await evaluate(desk(always_billing), CASES)
    assert (report.correct, report.total, report.accuracy) == (4, 8, 0.5)
    assert report.confusion() == {
        "billing": {"billing": 4, "tech": 0},
        "tech": {"billing": 4, "tech": 0},
    }
    assert report.edges() == (
        EdgeFigures("triage", "billing", taken=8, right=4, expected=2, found=2),
        EdgeFigures("triage", "tech", taken=0, right=0, expected=2, found=0),
    )
    assert report.checks("path") == (2, 4)  # b1 and b2 went the expected way; t1 and t2 did not
    assert report.checks("goal") == (2, 2)  # "charged twice" and "invoice" (any case) were said
    assert [miss.case.id for miss in report.misses()] == ["t1", "t2", "t3", "t4"]
    assert [r.path for r in report.results] == [("triage", "billing")] * 8


async def test_a_keyword_triage_scores_all_of_it_and_hands_on_the_goal() -> None:
    report = await evaluate(desk(by_keyword), CASES)
    assert (report.correct, report.total) == (8, 8)
    assert report.confusion() == {
        "billing": {"billing": 4, "tech": 0},
        "tech": {"billing": 0, "tech": 4},
    }
    assert report.checks("path") == (4, 4)
    assert report.misses() == ()


async def test_each_model_call_is_kept_with_what_it_received_and_answered() -> None:
    report = await evaluate(desk(always_billing), CASES[:1])
    [result] = report.results
    triage_call, billing_call = result.model_calls
    assert (triage_call.agent, triage_call.index) == ("triage", 0)
    assert triage_call.tools == ("handoff_to_billing", "handoff_to_tech")
    assert triage_call.input == ("user: I was charged twice in March",)
    assert triage_call.output == (
        'assistant[triage]: -> handoff_to_billing({"goal": "The user says: I was charged twice '
        'in March"})',
    )
    assert triage_call.instructions == DEFAULT_HANDOFF_INSTRUCTIONS  # the default handoff text
    assert (billing_call.agent, billing_call.index, billing_call.tools) == ("billing", 1, ())
    assert billing_call.input[0] == "user: I was charged twice in March"
    assert billing_call.input[-1].endswith("Goal: The user says: I was charged twice in March")
    assert billing_call.output == ("assistant[billing]: Billing here.",)
    assert result.reply == "Billing here."


async def test_the_builder_is_not_changed_by_an_eval() -> None:
    builder = desk(always_billing)
    await evaluate(builder, CASES[:1])
    result = await builder.build().run("My invoice is wrong")
    [turn] = [output for output in result.get_outputs() if isinstance(output, HandoffTurnResult)]
    assert turn.model_calls == ()  # the eval recorded on a copy


async def test_escalations_are_a_column_of_their_own_and_never_right() -> None:
    triage = agent("triage", respond_with=lambda call: handoff_to("billing", goal=goal(call)))
    billing = agent("billing", respond_with=lambda _: handoff_to("tech", goal="Tech part."))
    tech = agent("tech", respond_with=lambda _: handoff_to("billing", goal="Billing part."))
    bouncing = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_handoffs([billing], tech)
        .with_handoff(tech, billing)
        .with_max_handoffs_per_turn(3)
    )
    report = await evaluate(bouncing, CASES[:1])
    [result] = report.results
    assert result.answered == ESCALATED
    assert result.path == ("triage", "billing", "tech", "billing")
    assert result.escalation is not None
    assert result.escalation.reason == "handoff_cap"
    assert report.confusion() == {"billing": {"billing": 0, ESCALATED: 1}}
    lines = report.summary().splitlines()
    assert "escalations: 1 (handoff_cap 1)" in lines
    assert "hops per turn: mean 3.00, max 3 (turns by hops: 3: 1)" in lines


async def test_refused_handoff_attempts_are_counted_by_reason() -> None:
    def refunds_first(call: ModelCall) -> Step:
        if any(message.role == "tool" for message in call.messages):  # told it has no such tool
            return reply("Let me help you myself.")
        return call_tool("handoff_to_refunds", goal=goal(call))

    report = await evaluate(desk(refunds_first), CASES[:2])
    assert [r.answered for r in report.results] == ["triage", "triage"]
    assert [[a.reason for a in r.refused] for r in report.results] == [["unknown_target"]] * 2
    assert report.confusion() == {"billing": {"billing": 0, "triage": 2}}
    assert "refused handoff attempts: 2 in 2 turns (unknown_target 2)" in report.summary()


async def test_token_use_is_summed_where_the_provider_reports_it() -> None:
    def usage(tokens_in: int, tokens_out: int) -> Content:
        details = {"input_token_count": tokens_in, "output_token_count": tokens_out}
        return Content.from_usage(usage_details=details)  # pyright: ignore[reportArgumentType]

    def triage(call: ModelCall) -> Step:
        return respond(handoff_to("billing", goal=goal(call)), usage(100, 10))

    report = await evaluate(desk(triage, billing=lambda _: respond("Done.", usage(200, 20))), CASES)
    assert {(r.input_tokens, r.output_tokens) for r in report.results} == {(300, 30)}
    assert "tokens per turn: 300 in, 30 out (mean of 8 turns that reported them)" in (
        report.summary().splitlines()
    )
    plain = await evaluate(desk(always_billing), CASES[:1])
    assert "tokens per turn: not reported by the provider" in plain.summary().splitlines()


async def test_a_turn_that_fails_is_an_error_and_the_others_run() -> None:
    def broken_on_plans(call: ModelCall) -> Step:
        if "plan" in call.user_text:
            raise RuntimeError("the model broke")
        return handoff_to("billing", goal=goal(call))

    report = await evaluate(desk(broken_on_plans), CASES[:4])
    assert [r.answered for r in report.results] == ["billing", "billing", FAILED, "billing"]
    failed = report.results[2]
    assert failed.error is not None
    assert "the model broke" in failed.error
    assert failed.status == "error"
    assert "  b3: expected billing, answered (error) via -: " in report.summary()


async def test_the_spread_across_repeated_runs() -> None:
    seen: set[str] = set()

    def changes_its_mind(call: ModelCall) -> Step:
        """Right the first time it reads a tech message, billing the next."""
        text = call.user_text
        if text in seen or "tech" not in {t for t, m in MESSAGES.values() if m == text}:
            return always_billing(call)
        seen.add(text)
        return handoff_to("tech", goal=goal(call))

    report = await evaluate(desk(changes_its_mind), CASES, repeat=2, concurrency=1)
    assert report.run_accuracies == (1.0, 0.5)
    assert (report.correct, report.total) == (12, 16)
    assert report.unsteady() == ("t1", "t2", "t3", "t4")
    lines = report.summary().splitlines()
    assert lines[0] == "routing accuracy: 12/16 (75.0%)"
    assert (
        "runs: 2 (accuracy per run: 100.0%, 50.0%; spread 50.0 points, standard deviation 25.0 "
        "points)"
    ) in lines
    assert "cases answered differently across runs: 4 (t1, t2, t3, t4)" in lines
    assert "  t1 (run 2): expected tech, answered billing via triage -> billing" in lines


async def test_the_conversation_before_the_turn_and_the_agent_it_starts_at() -> None:
    """The earlier messages are the conversation's, the turn starts where the case says, and the
    agent that starts it reads them."""
    received: list[ModelCall] = []

    def billing(call: ModelCall) -> Step:
        received.append(call)
        return reply("Your plan is changed.")

    context = EvalCase.of(
        "c1",
        [
            CaseMessage("user", "The app crashes"),
            CaseMessage("assistant", "Which version do you have?", agent="tech"),
            CaseMessage("user", "Also, change my plan"),
        ],
        "billing",
        path=["billing"],
        start="billing",
    )
    report = await evaluate(desk(always_billing, billing=billing), [context])
    [result] = report.results
    assert (result.answered, result.path, result.path_ok) == ("billing", ("billing",), True)
    [call] = received
    assert call.texts == ["The app crashes", "Which version do you have?", "Also, change my plan"]
    assert call.messages[1].author_name == "tech"


# -- the pytest helper --------------------------------------------------------------------------


async def test_the_pytest_helper_fails_below_its_threshold_with_the_summary() -> None:
    with pytest.raises(AssertionError) as failed:
        await assert_routing_accuracy(desk(always_billing), CASES, 0.75)
    lines = str(failed.value).splitlines()
    assert lines[:2] == ["routing accuracy 50.0% is below 75%", "routing accuracy: 4/8 (50.0%)"]
    assert "  tech                       4     0" in lines  # the matrix's row
    assert "  t4: expected tech, answered billing via triage -> billing" in lines

    report = await assert_routing_accuracy(desk(always_billing), CASES, 0.5)  # at it: passes
    assert report.accuracy == 0.5
    with pytest.raises(ValueError, match=r"minimum must be from 0 to 1 \(0.8 for 80%\), got 80"):
        report.assert_accuracy(80)


# -- the command line ---------------------------------------------------------------------------

EVAL_DESK = """\
from handoff_builder import (
    ConversationHost,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    ModelConnectionError,
)
from handoff_builder.cli import main
from handoff_builder.testing import handoff_to, reply, scripted_agent

PROVIDERS = []


def make(provider: str = "scripted") -> HandoffWorkflowBuilder:
    PROVIDERS.append(provider)
    triage = scripted_agent("triage", respond_with=lambda call: handoff_to(
        "billing", goal=f"The user says: {call.user_text}"))
    billing = scripted_agent("billing", respond_with=lambda call: reply("Billing here."))
    tech = scripted_agent("tech", respond_with=lambda call: reply("Tech here."))
    return HandoffWorkflowBuilder(triage).with_handoffs(triage, [billing, tech])


always_billing = make()
"""


class Done:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Iterator[Callable[..., Done]]:
    """``handoff-builder ...`` in this process, in ``tmp_path`` (eval_desk.py and cases.jsonl)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "eval_desk.py").write_text(EVAL_DESK, encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text(HALF_BILLING, encoding="utf-8")

    def run(*args: str, stdin: str = "") -> Done:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        out = capsys.readouterr()
        return Done(code, out.out, out.err)

    yield run
    sys.modules.pop("eval_desk", None)


SUMMARY = [
    "routing accuracy: 4/8 (50.0%)",
    "confusion matrix (rows: the expected agent; columns: the agent that answered):",
    "  expected \\ answered  billing  tech",
    "  billing                    4     0",
    "  tech                       4     0",
    "per expected agent: billing 4/4 (100.0%), tech 0/4 (0.0%)",
    "handoff edges (right: taken in turns the expected agent answered; expected: in "
    "expect.path; found: taken where expected):",
    "  edge               taken  right  expected  found",
    "  triage -> billing      8      4         2      2",
    "  triage -> tech         0      0         2      0",
    "hops per turn: mean 1.00, max 1 (turns by hops: 1: 8)",
    "refused handoff attempts: 0",
    "escalations: 0",
    "goal checks: 2/2 passed (100.0%)",
    "path checks: 2/4 passed (50.0%)",
    "latency per turn: mean <s> s, median <s> s, p95 <s> s, max <s> s",
    "tokens per turn: not reported by the provider",
    "runs: 1",
    "wrong answers (4):",
    "  t1: expected tech, answered billing via triage -> billing",
    "  t2: expected tech, answered billing via triage -> billing",
    "  t3: expected tech, answered billing via triage -> billing",
    "  t4: expected tech, answered billing via triage -> billing",
]


def seconds_hidden(lines: list[str]) -> list[str]:
    return [re.sub(r"\b\d+\.\d\d s\b", "<s> s", line) for line in lines]


def test_eval_prints_the_summary_writes_the_files_and_fails_below_the_minimum(
    cli: Callable[..., Done], tmp_path: Path
) -> None:
    done = cli(
        "eval", "cases.jsonl", "--workflow", "eval_desk:always_billing", "--out", "out",
        "--min-accuracy", "60%",
    )  # fmt: skip
    assert done.code == 1
    assert seconds_hidden(done.out.splitlines()) == [
        *SUMMARY,
        "report: out/report.md (with results.jsonl and confusion.svg)",
    ]
    assert done.err.splitlines() == [
        "handoff-builder: error: routing accuracy 50.0% is below --min-accuracy 60%"
    ]

    lines = (tmp_path / "out" / "results.jsonl").read_text(encoding="utf-8").splitlines()
    results = [json.loads(line) for line in lines]
    assert [(r["id"], r["run"], r["answered"], r["correct"]) for r in results] == [
        (case_id, 1, "billing", case_id.startswith("b")) for case_id in MESSAGES
    ]
    first = results[0]
    assert first["input"] == [{"role": "user", "text": "I was charged twice in March"}]
    assert first["handoffs"] == [
        {
            "source": "triage",
            "target": "billing",
            "goal": "The user says: I was charged twice in March",
            "tool": "handoff_to_billing",
        }
    ]
    assert [call["agent"] for call in first["model_calls"]] == ["triage", "billing"]
    assert first["model_calls"][1]["output"] == ["assistant[billing]: Billing here."]

    page = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "**Routing accuracy: 4/8 (50.0%)**" in page
    picture_link = (
        "![Confusion matrix: rows are the expected agent, columns the agent that answered]"
        "(confusion.svg)"
    )
    assert picture_link in page.splitlines()
    assert "| billing | **4** | 0 | 100.0% |" in page.splitlines()
    assert "| tech | 4 | **0** | 0.0% |" in page.splitlines()
    assert "| t3 | 1 | I get an error when I log in | tech | billing | triage → billing |" in page

    picture = ET.parse(tmp_path / "out" / "confusion.svg").getroot()  # noqa: S314 - our own file
    svg = "{http://www.w3.org/2000/svg}"
    counts = [t.text for t in picture.iter(f"{svg}text") if t.get("font-weight") == "bold"]
    assert counts == ["answered by →", "expected ↓", "4", "0", "4", "0"]
    fills = [r.get("fill") for r in picture.iter(f"{svg}rect")][1:]  # after the background
    assert fills == ["rgb(22,128,61)", "rgb(255,255,255)", "rgb(200,40,40)", "rgb(255,255,255)"]


def test_eval_at_or_above_the_minimum_exits_0(cli: Callable[..., Done]) -> None:
    done = cli(
        "eval", "cases.jsonl", "--workflow", "eval_desk:always_billing", "--min-accuracy", "0.5"
    )
    assert (done.code, done.err) == (0, "")
    assert done.out.splitlines()[0] == "routing accuracy: 4/8 (50.0%)"


def test_eval_without_a_workflow_runs_the_support_desk(cli: Callable[..., Done]) -> None:
    """The built-in desk's scripted triage routes by keywords (bills, plans and charges to
    billing; the app, errors, the router and the internet to tech): all eight are right."""
    done = cli("eval", "cases.jsonl")
    assert done.code == 0, done.err
    assert done.out.splitlines()[:5] == [
        "routing accuracy: 8/8 (100.0%)",
        "confusion matrix (rows: the expected agent; columns: the agent that answered):",
        "  expected \\ answered  billing  tech",
        "  billing                    4     0",
        "  tech                       0     4",
    ]


def test_provider_is_passed_to_a_function_that_takes_it(cli: Callable[..., Done]) -> None:
    done = cli("eval", "cases.jsonl", "--workflow", "eval_desk:make", "--provider", "scripted")
    assert done.code == 0, done.err
    made = getattr(sys.modules["eval_desk"], "PROVIDERS")  # noqa: B009 - a module of the test's
    assert made == ["scripted", "scripted"]  # at its import (always_billing), then for the eval

    done = cli(
        "eval", "cases.jsonl", "--workflow", "eval_desk:always_billing", "--provider", "openai"
    )
    assert (done.code, done.err.splitlines()) == (
        1,
        [
            "handoff-builder: error: --provider is passed to a function that makes the workflow; "
            "eval_desk:always_billing is a builder"
        ],
    )


def test_progress_goes_to_standard_error_on_long_runs(
    cli: Callable[..., Done], monkeypatch: pytest.MonkeyPatch
) -> None:
    from handoff_builder.evals import _command

    monkeypatch.setattr(_command, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(_command, "PROGRESS_EVERY", 0.0)
    done = cli(
        "eval", "cases.jsonl", "--workflow", "eval_desk:always_billing", "--concurrency", "1"
    )
    assert done.code == 0
    progress = [re.sub(r", \d+ s$", ", <n> s", line) for line in done.err.splitlines()]
    assert progress == [
        "handoff-builder: eval: 1/8 turns run, 1 right (100.0%), <n> s",
        "handoff-builder: eval: 2/8 turns run, 2 right (100.0%), <n> s",
        "handoff-builder: eval: 3/8 turns run, 3 right (100.0%), <n> s",
        "handoff-builder: eval: 4/8 turns run, 4 right (100.0%), <n> s",
        "handoff-builder: eval: 5/8 turns run, 4 right (80.0%), <n> s",
        "handoff-builder: eval: 6/8 turns run, 4 right (66.7%), <n> s",
        "handoff-builder: eval: 7/8 turns run, 4 right (57.1%), <n> s",
    ]
    assert done.out.splitlines()[0] == "routing accuracy: 4/8 (50.0%)"


BAD_LINES = [
    ("not json", "line 2: not valid JSON (Expecting value at column 1)"),
    ("[1]", "line 2: a case must be a JSON object, got [1]"),
    ('{"input": "hi"}', 'line 2: expect is missing (e.g. "expect": {"agent": "billing"})'),
    (
        '{"expect": {"agent": "billing"}}',
        "line 2: input is missing (a user message, or a list of {role, text} messages)",
    ),
    (
        '{"input": "hi", "expect": {}}',
        "line 2: expect.agent is missing (the agent that should answer the turn)",
    ),
    (
        '{"input": "hi", "expect": {"agent": "billing"}, "expected": 1}',
        "line 2: a case has no field 'expected' (its fields: id, input, expect, start)",
    ),
    (
        '{"input": "hi", "expect": {"agent": "billing", "goal": "x"}}',
        "line 2: expect has no field 'goal' (its fields: agent, path, goal_contains)",
    ),
    (
        '{"input": [], "expect": {"agent": "billing"}}',
        "line 2: input must be a message or a non-empty list of messages, got []",
    ),
    ('{"input": " ", "expect": {"agent": "billing"}}', "line 2: input is an empty message"),
    (
        '{"input": [{"role": "system", "text": "x"}], "expect": {"agent": "billing"}}',
        'line 2: input[0].role must be "user" or "assistant", got "system"',
    ),
    (
        '{"input": [{"role": "user", "text": "a"}, {"role": "assistant", "text": "b"}], '
        '"expect": {"agent": "billing"}}',
        "line 2: input must end with a user message (the turn to route)",
    ),
    (
        '{"input": "hi", "expect": {"agent": "billing", "path": ["triage", "tech"]}}',
        "line 2: expect.path ends at 'tech', but expect.agent is 'billing'",
    ),
    (
        '{"input": "hi", "expect": {"agent": "billing", "goal_contains": "bill"}}',
        'line 2: expect.goal_contains must be a list of texts, got "bill"',
    ),
    ('{"id": "b1", "input": "hi", "expect": {"agent": "billing"}}', "line 2: the id 'b1' is "
     "the id of line 1 too"),
    (
        '{"input": "hi", "expect": {"agent": "bililng"}}',
        "line 2: expect.agent names 'bililng', which is not an agent of the workflow (billing, "
        "tech, triage)",
    ),
    (
        '{"input": "hi", "start": "refunds", "expect": {"agent": "billing"}}',
        "line 2: start names 'refunds', which is not an agent of the workflow (billing, tech, "
        "triage)",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("line", "problem"), BAD_LINES)
def test_a_bad_case_file_is_one_line_naming_the_line_and_the_problem(
    cli: Callable[..., Done], tmp_path: Path, line: str, problem: str
) -> None:
    (tmp_path / "bad.jsonl").write_text(f"{case_line('b1')}\n{line}\n", encoding="utf-8")
    done = cli("eval", "bad.jsonl", "--workflow", "eval_desk:always_billing")
    assert (done.code, done.out) == (1, "")
    assert done.err.splitlines() == [f"handoff-builder: error: bad.jsonl, {problem}"]


def test_an_empty_or_missing_case_file_is_one_line(
    cli: Callable[..., Done], tmp_path: Path
) -> None:
    (tmp_path / "empty.jsonl").write_text("\n  \n", encoding="utf-8")
    done = cli("eval", "empty.jsonl")
    assert (
        done.err == "handoff-builder: error: empty.jsonl: holds no case (one JSON object a line)\n"
    )
    done = cli("eval", "missing.jsonl")
    assert done.err.startswith("handoff-builder: error: missing.jsonl: cannot be read ([Errno 2]")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--redact"], "--redact is not an option of eval CASES.jsonl (they are eval record's)"),
        (["record", "--store", "memory"], "eval record needs --store and --conversation"),
        (
            ["record", "--store", "memory", "--conversation", "c", "--out", "d", "--provider",
             "openai"],
            "--provider, --out are not options of eval record",
        ),
        (
            ["record", "--store", "sqlite:nowhere.db", "--conversation", "c"],
            "--store sqlite:nowhere.db: there is no file nowhere.db",
        ),
        (
            ["record", "--store", "memory", "--conversation", "c"],
            "conversation 'c': not in the store",
        ),
    ],
)  # fmt: skip
def test_options_that_do_not_go_together_are_one_line(
    cli: Callable[..., Done], args: list[str], error: str
) -> None:
    done = cli("eval", *([] if args[0] == "record" else ["cases.jsonl"]), *args)
    assert (done.code, done.err) == (1, f"handoff-builder: error: {error}\n")


@pytest.mark.parametrize("value", ["1.5", "120%", "most", "-0.1"])
def test_min_accuracy_is_a_fraction_or_a_percentage(cli: Callable[..., Done], value: str) -> None:
    done = cli("eval", "cases.jsonl", "--min-accuracy", value)
    assert done.code == 2
    assert (
        f"--min-accuracy: expected a fraction from 0 to 1 (0.8) or a percentage (80%), got "
        f"{value!r}"
    ) in done.err


# -- a model behind an OpenAI-compatible server --------------------------------------------------


@pytest.fixture
def openai_server(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[list[dict[str, Any]]], FakeOpenAI]]:
    """A local Chat Completions server answering from a script; the environment points to it."""
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


def test_eval_on_an_openai_compatible_server_counts_the_tokens_it_reports(
    cli: Callable[..., Done],
    tmp_path: Path,
    openai_server: Callable[[list[dict[str, Any]]], FakeOpenAI],
) -> None:
    """The support desk on ``--provider openai`` (a local server, as llama.cpp's): what the
    models were sent is what results.jsonl says they received, and the usage the server reports
    in its last streamed chunk is the eval's token use."""
    server = openai_server(
        [
            tool_call("call_1", "handoff_to_billing", {"goal": "Refund the double charge."}),
            text("The refund is on its way."),
        ]
    )
    (tmp_path / "one.jsonl").write_text(case_line("b1") + "\n", encoding="utf-8")
    done = cli("eval", "one.jsonl", "--provider", "openai", "--max-output-tokens", "64",
               "--out", "out")  # fmt: skip
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0] == "routing accuracy: 1/1 (100.0%)"
    assert "tokens per turn: 2 in, 2 out (mean of 1 turn that reported them)" in lines
    assert (
        "goal checks: 0/1 passed (0.0%)" in lines
    )  # the model's goal does not say "charged twice"

    first, second = server.bodies()
    assert (first["stream"], first["max_completion_tokens"]) == (True, 64)
    assert [m["content"] for m in first["messages"] if m["role"] == "user"] == [
        "I was charged twice in March"
    ]
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "handoff_to_billing",
        "handoff_to_tech",
    ]
    said = json.dumps(second["messages"])
    assert "Goal: Refund the double charge." in said

    [result] = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").open()]
    assert (result["input_tokens"], result["output_tokens"]) == (1 + 1, 1 + 1)
    billing_call = result["model_calls"][1]
    assert billing_call["input"][-1].endswith("Goal: Refund the double charge.")
    assert billing_call["output"] == ["assistant[billing]: The refund is on its way."]


async def test_a_model_that_cannot_be_reached_stops_the_eval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    from handoff_builder.providers import chat_client

    triage = Agent(client=chat_client("openai"), name="triage")
    billing = agent("billing", respond_with=lambda _: reply("Billing here."))
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    with pytest.raises(ModelConnectionError, match=f"127.0.0.1:{port}"):
        await evaluate(builder, CASES[:3])


# -- cases from a stored conversation ------------------------------------------------------------

CHAT = "my invoice is wrong, mail me at jo@example.com\nthe app crashes, call +49 170 1234567\nhi\n"


def test_record_turns_a_stored_conversation_into_cases_that_pass(
    cli: Callable[..., Done], tmp_path: Path
) -> None:
    """A chat on the support desk, kept in SQLite; each user turn becomes a case that expects
    what happened (the agent, and the path from its handoffs), with the conversation before it
    and the agent it started at; run again, every case passes."""
    store = f"sqlite:{tmp_path / 'chat.db'}"
    assert cli("chat", "--store", store, "--conversation", "c-42", stdin=CHAT).code == 0
    done = cli("eval", "record", "--store", store, "--conversation", "c-42")
    assert (done.code, done.err) == (0, "")
    invoice = "my invoice is wrong, mail me at jo@example.com"
    crash = "the app crashes, call +49 170 1234567"
    so_far = [
        {"role": "user", "text": invoice},
        {"role": "assistant", "text": f"(billing) I'm on it: {invoice}", "agent": "billing"},
        {"role": "user", "text": crash},
    ]
    assert [json.loads(line) for line in done.out.splitlines()] == [
        {
            "id": "c-42-1",
            "input": invoice,
            "expect": {"agent": "billing", "path": ["triage", "billing"]},
        },
        {
            "id": "c-42-2",
            "input": so_far,
            "start": "billing",
            "expect": {"agent": "tech", "path": ["billing", "triage", "tech"]},
        },
        {
            "id": "c-42-3",
            "input": [
                *so_far,
                {"role": "assistant", "text": f"(tech) I'm on it: {crash}", "agent": "tech"},
                {"role": "user", "text": "hi"},
            ],
            "start": "tech",
            "expect": {"agent": "tech", "path": ["tech"]},
        },
    ]  # fmt: skip
    (tmp_path / "recorded.jsonl").write_text(done.out, encoding="utf-8")
    replayed = cli("eval", "recorded.jsonl")
    assert replayed.code == 0, replayed.err
    lines = replayed.out.splitlines()
    assert lines[0] == "routing accuracy: 3/3 (100.0%)"
    assert "path checks: 3/3 passed (100.0%)" in lines


def test_record_with_redact_leaves_personal_data_out(
    cli: Callable[..., Done], tmp_path: Path
) -> None:
    store = f"sqlite:{tmp_path / 'chat.db'}"
    assert cli("chat", "--store", store, "--conversation", "jo@example.com", stdin=CHAT).code == 0
    done = cli("eval", "record", "--store", store, "--conversation", "jo@example.com", "--redact")
    assert done.code == 0, done.err
    cases = [json.loads(line) for line in done.out.splitlines()]
    digest = hashlib.sha256(b"jo@example.com").hexdigest()[:8]
    assert [case["id"] for case in cases] == [f"conversation-{digest}-{n}" for n in (1, 2, 3)]
    assert cases[1]["input"] == [
        {"role": "user", "text": "my invoice is wrong, mail me at [email]"},
        {
            "role": "assistant",
            "text": "(billing) I'm on it: my invoice is wrong, mail me at [email]",
            "agent": "billing",
        },
        {"role": "user", "text": "the app crashes, call [number]"},
    ]
    assert "jo@" not in done.out
    assert "1234567" not in done.out


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        ("write to jo.doe+desk@mail.example.co.uk", "write to [email]"),
        ("IBAN DE89 3704 0044 0532 0130 00, please", "IBAN [iban], please"),
        ("card 4111 1111 1111 1111 expired", "card [number] expired"),
        ("call +49 (170) 123-4567 or (030) 1234567", "call [number] or [number]"),
        ("born 1990-03-15, from 10.0.0.1", "born [number], from [ip]"),
        ("order 12345 for 24.90 EUR on March 3rd", "order 12345 for 24.90 EUR on March 3rd"),
    ],
)
def test_what_redact_removes(said: str, kept: str) -> None:
    from handoff_builder import redact_patterns
    from handoff_builder.evals import REDACTIONS

    message = Message(role="user", contents=[said])
    for pattern, marker in REDACTIONS:
        message = redact_patterns(pattern, replacement=marker)(message)
    assert message.text == kept


async def test_record_cases_reads_turns_hand_backs_and_several_messages_at_once() -> None:
    def triage(call: ModelCall) -> Step:
        return (
            by_keyword(call)
            if "bill" in call.user_text or "app" in call.user_text
            else reply("Hello! How can I help?")
        )

    def billing(call: ModelCall) -> Step:
        if "app" in call.user_text:
            return call_tool("transfer_back_to_triage", summary="Billing done; the app is open.")
        return reply("Billing here.")

    triage_agent = agent("triage", respond_with=triage)
    billing_agent = agent("billing", respond_with=billing)
    tech_agent = agent("tech", respond_with=lambda _: reply("Tech here."))
    builder = (
        HandoffWorkflowBuilder(triage_agent)
        .with_handoffs(triage_agent, [billing_agent, tech_agent])
        .with_hand_back(triage_agent)
    )
    store = InMemoryConversationStore()
    host = ConversationHost(builder, store)
    await host.send("c", "hello")
    await host.send(
        "c",
        [
            Message(role="user", contents=["hi again"]),
            Message(role="user", contents=["my bill is too high"]),
        ],
    )
    await host.send("c", "and the app crashes")
    cases = await record_cases(store, "c")
    assert [(c.id, c.start, c.expect.agent, c.expect.path) for c in cases] == [
        ("c-1", None, "triage", ("triage",)),
        ("c-2", "triage", "billing", ("triage", "billing")),
        ("c-3", "billing", "tech", ("billing", "triage", "tech")),
    ]
    assert [m.text for m in cases[1].turn] == ["hi again", "my bill is too high"]
    assert [m.text for m in cases[2].context] == [
        "hello", "Hello! How can I help?", "hi again", "my bill is too high", "Billing here."
    ]  # fmt: skip
    report = await evaluate(builder, cases)
    assert (report.correct, report.checks("path")) == (3, (3, 3))
    with pytest.raises(EvalCaseError, match=r"^conversation 'nobody': not in the store$"):
        await record_cases(store, "nobody")


@tool(approval_mode="always_require")
def refund(amount: float) -> str:
    """Refund an amount in EUR."""
    return f"refunded {amount} EUR"


async def test_a_turn_that_waits_for_an_approval_is_answered_by_the_agent_that_asks(
    tmp_path: Path,
) -> None:
    """The eval answers no approval: the turn waits at billing, which routing reached."""

    def billing_refunds(call: ModelCall) -> Step:
        return call_tool("refund", amount=5)

    triage = agent("triage", respond_with=always_billing)
    billing = Agent(
        client=ScriptedChatClient(name="billing", respond_with=billing_refunds),
        name="billing",
        tools=[refund],
    )
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    (tmp_path / "one.jsonl").write_text(case_line("b1") + "\n", encoding="utf-8")
    report = await evaluate(builder, tmp_path / "one.jsonl")  # a case file's path
    [result] = report.results
    assert (result.answered, result.status, result.correct) == ("billing", "waiting", True)
    assert result.path == ("triage", "billing")
    assert result.model_calls == ()  # a turn's calls come with its result, which waits
