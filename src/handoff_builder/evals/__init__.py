"""Routing evals: how often a handoff workflow sends a user's message to the right agent.

A case is one user turn and the agent expected to answer it (JSON Lines, one case a line; see
docs/evals.md). :func:`evaluate` runs each case as a new conversation and returns an
:class:`EvalReport`: the routing accuracy, the confusion matrix (expected agent by the agent that
answered), each handoff edge, hops, refused handoff attempts, escalations, goal and path checks,
latency and token use, and the spread across repeated runs. :func:`write_report` writes
``results.jsonl`` (every agent call's input and output), ``report.md`` and the matrix as an SVG
picture. :func:`assert_routing_accuracy` fails a test below a threshold, and
:func:`record_cases` turns a stored hosted conversation into cases. The command line is
``handoff-builder eval``::

    from handoff_builder.evals import EvalCase, evaluate

    report = await evaluate(builder, [EvalCase.of("b1", "I was charged twice", "billing")])
    print(report.summary())
"""

from ._cases import CaseMessage, EvalCase, EvalCaseError, Expectation, load_cases, parse_cases
from ._evaluate import assert_routing_accuracy, evaluate
from ._record import REDACTIONS, record_cases
from ._report import confusion_svg, markdown, write_report
from ._run import (
    DEFAULT_CONCURRENCY,
    ESCALATED,
    FAILED,
    NO_ANSWER,
    CaseResult,
    ModelCallRecord,
    run_cases,
)
from ._summary import EdgeFigures, EvalReport

__all__ = [
    "DEFAULT_CONCURRENCY",
    "ESCALATED",
    "FAILED",
    "NO_ANSWER",
    "REDACTIONS",
    "CaseMessage",
    "CaseResult",
    "EdgeFigures",
    "EvalCase",
    "EvalCaseError",
    "EvalReport",
    "Expectation",
    "ModelCallRecord",
    "assert_routing_accuracy",
    "confusion_svg",
    "evaluate",
    "load_cases",
    "markdown",
    "parse_cases",
    "record_cases",
    "run_cases",
    "write_report",
]
