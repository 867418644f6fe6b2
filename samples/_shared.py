"""What the samples share: a chat client for a provider, printing a turn, the seed prompts."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import sys
from collections.abc import Callable, Coroutine, Generator, Mapping
from pathlib import Path
from typing import Any, cast

from agent_framework import Workflow

from handoff_builder import HandoffBuilderError, HandoffTurnResult
from handoff_builder.providers import PROVIDERS, agent_options, chat_client
from handoff_builder.testing import ModelCall, ScriptedChatClient, ScriptStep, Step

# The seed's prompts (shared/seeds, "Handoffs"), filled in by render().
TRIAGE = """You are the front desk for {{company}}. Greet the user and work out what
they need. Do not try to solve the problem yourself.

Hand off with exactly one tool:
- transfer_to_billing: charges, invoices, plans
- transfer_to_tech: errors, bugs, how-to questions
Before you hand off, state the user's goal in one sentence so the next
agent does not have to ask again."""

SPECIALIST = """You are the {{role}} agent for {{company}}. You now own this conversation.
The full history above is yours to read.

Help the user directly. If the request belongs to another agent, hand off
with {{handoff_tools}} and say what you are passing on.
Never ask the user to repeat something already in the history."""

TRIAGE_HAND_BACK = """You are the front desk for {{company}}. Work out what the user needs.
Do not try to solve the problem yourself.

Hand off with exactly one tool:
- transfer_to_billing: charges, invoices, plans
- transfer_to_tech: errors, bugs, how-to questions
State the user's goal in one sentence when you hand off.

When a specialist hands the conversation back, read its summary. If
something is still open, hand that part to the right specialist;
otherwise ask the user whether there is anything else."""

SPECIALIST_HAND_BACK = """You are the {{role}} agent for {{company}}. You now own this conversation.
The full history above is yours to read.

Help the user with the part that is yours. When it is done, or if the
rest belongs to someone else, call transfer_back_to_triage with a
summary: what you did, and what is still open.
Never ask the user to repeat something already in the history."""


def sample_name() -> str:
    """The running sample's name (``pass_it_on``): the prefix of every line it writes to stderr."""
    return Path(sys.argv[0]).stem


class SampleSetupError(Exception):
    """Something a sample needs was not given (a server's address); ``run_sample`` prints it."""


def log_to_stderr() -> None:
    """Write log warnings (a blocked handoff, an escalation) to stderr as ``<sample>: <message>``.

    Without it Python prints them bare; the samples' other stderr lines carry the sample's name.
    """
    logging.basicConfig(format=f"{sample_name()}: %(message)s")


@contextlib.contextmanager
def extra(name: str) -> Generator[None, None, None]:
    """Imports that need the package's extra ``name``: without it, exit in one line.

    ``with extra("otel"): from opentelemetry.sdk.trace import TracerProvider`` -- an import in
    the block that fails ends the sample with exit status 1 and one line on stderr naming the
    extra to install (``pip install 'handoff-builder[otel]'``) and the missing module.
    """
    try:
        yield
    except ImportError as error:
        raise SystemExit(
            f"{sample_name()}: needs the {name} extra: "
            f"pip install 'handoff-builder[{name}]' ({_missing_module(error)} is missing)"
        ) from None


def _missing_module(error: ImportError) -> str:
    """The module whose import failed, from the first error of the chain that names one."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ImportError) and cause.name:
            return cause.name
        cause = cause.__cause__ or cause.__context__
    return str(error)


def render(template: str, **values: str) -> str:
    """Fill ``{{name}}`` placeholders; a placeholder without a value is an error."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise KeyError(f"no value for {{{{{name}}}}} in the prompt template")
        return values[name]

    return re.sub(r"\{\{(\w+)\}\}", fill, template)


def sample_client(
    provider: str,
    name: str,
    *script: ScriptStep,
    respond_with: Callable[[ModelCall], Step] | None = None,
) -> Any:
    """The chat client for an agent of a sample: ``Agent(client=sample_client(...), ...)``.

    Offline (``scripted``) it is a :class:`ScriptedChatClient` named ``name`` that plays
    ``script``, then answers with ``respond_with``; on a real provider it is that provider's
    client, and ``script`` and ``respond_with`` are not used.
    """
    if provider == "scripted":
        return ScriptedChatClient(*script, name=name, respond_with=respond_with)
    return chat_client(provider)


def sample_options() -> Any:
    """The agents' ``default_options``: a cap on output tokens (see ``agent_options``)."""
    return cast(Any, agent_options())


def run_sample(
    doc: str | None,
    main: Callable[..., Coroutine[Any, Any, object]],
    flags: Mapping[str, str] | None = None,
) -> None:
    """Run a sample's ``main`` with the ``--provider`` of the command line.

    ``flags`` are the sample's own switches (name -> help), passed to ``main`` as keyword
    arguments. ``--help`` shows the sample's first paragraph; a provider that is not set up, or
    a :class:`SampleSetupError`, is a one-line error (exit status 1), not a traceback. Every
    line on stderr starts with the sample's name.
    """
    log_to_stderr()
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument(
        "--provider",
        choices=PROVIDERS,
        default="scripted",
        help="the model behind the agents (default: scripted, offline)",
    )
    for flag, help_text in (flags or {}).items():
        parser.add_argument(f"--{flag}", action="store_true", help=help_text)
    arguments = vars(parser.parse_args())
    provider = arguments.pop("provider")
    try:
        asyncio.run(main(provider, **arguments))
    except (HandoffBuilderError, SampleSetupError) as error:
        raise SystemExit(f"{sample_name()}: {error}") from None


async def run_turn(workflow: Workflow, message: str) -> HandoffTurnResult:
    """Run one user turn of ``workflow`` and return its result."""
    result = await workflow.run(message)
    turn = result.get_outputs()[-1]
    if not isinstance(turn, HandoffTurnResult):
        raise TypeError(f"expected a HandoffTurnResult, got {turn!r}")
    return turn


def show(turn: HandoffTurnResult, start: int = 0) -> None:
    """Print a turn in the order it happened: each reply, each handoff where it was made.

    ``start``: the first of ``turn.messages`` to print (those before it were shown already).
    """
    by_call = {handoff.call_id: handoff for handoff in turn.handoffs}
    for message in turn.messages[start:]:
        if message.role == "assistant" and message.text:
            print(f"  {message.author_name}: {message.text}")
        for content in message.contents:
            handoff = by_call.get(str(content.call_id)) if content.type == "function_call" else None
            if handoff is not None:
                print(f"  [{handoff.kind}] {handoff.source} -> {handoff.target}: {handoff.goal}")
    if turn.timeout is not None:
        print(f"  [cut short: {how_it_ended(turn)}]")
    if turn.escalated:
        print("  [escalated to a human]")


def last_line(turn: HandoffTurnResult) -> str:
    """``agent: reply`` for the turn's reply, or why there is none (``(no reply: ...)``)."""
    if turn.text:
        return f"{turn.active_agent}: {turn.text}"
    return f"(no reply: {how_it_ended(turn)})"


def how_it_ended(turn: HandoffTurnResult) -> str:
    """The turn's status, and the deadline that cut it short if one did."""
    timeout = turn.timeout
    if timeout is None:
        return f"the turn ended with status {turn.status}"
    if timeout.limit == "agent_call":
        return (
            f"{timeout.agent}'s call took longer than its {timeout.seconds:g} s deadline "
            f"(status {turn.status})"
        )
    return (
        f"the turn took longer than its {timeout.seconds:g} s deadline while {timeout.agent} "
        f"ran (status {turn.status})"
    )
