"""The ``handoff-builder`` command line: ``demo``, ``chat``, ``graph``, ``eval`` and ``worker``."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Generator, Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO

from typing_extensions import override

from ._loading import load_builder
from .exceptions import HandoffBuilderError, HandoffConfigurationError
from .providers import PROVIDERS

if TYPE_CHECKING:
    import uvicorn

    from .stores import PostgresConversationStore

__all__ = ["main"]

_DEFAULT_GRACEFUL_SHUTDOWN = 20.0
"""Seconds a stopping worker gives its agent calls in flight (``--graceful-shutdown-timeout``):
inside Kubernetes' default grace period of 30 s and systemd's stop timeout of 90 s."""


def default_store() -> str:
    """The chat's default store: a SQLite file in the user's data directory."""
    import platformdirs

    folder = platformdirs.user_data_path("handoff-builder", appauthor=False)
    return f"sqlite:{folder / 'chat.db'}"


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="handoff-builder",
        description="Multi-agent handoff orchestration on Microsoft Agent Framework.",
    )
    parser.add_argument("--version", action="version", version=f"handoff-builder {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the whole traceback of an error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo",
        help="run the offline customer-support demo (triage -> billing -> refunds)",
        description="Play a customer-support conversation on the scripted model, offline, "
        "printing each speaking agent and each handoff.",
    )
    chat = commands.add_parser(
        "chat",
        help="chat with the support desk (triage, billing, tech) or your own workflow, "
        "remembered between runs",
        description="An interactive chat with the built-in support desk, or with your builder "
        "(module:attribute). Replies stream as they are written; every handoff is shown; a tool "
        "that needs approval or an external call asks you. The conversation (and the agent you "
        "were talking to) is kept in the store, so running the command again continues it.",
    )
    chat.add_argument(
        "builder",
        nargs="?",
        metavar="MODULE:ATTRIBUTE",
        help="your HandoffWorkflowBuilder, or a function that returns one (default: the "
        "built-in support desk)",
    )
    chat.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="the support desk's model: scripted (offline, keyword-driven; the default), openai "
        "(OPENAI_API_KEY) or azure (AZURE_OPENAI_ENDPOINT, AZURE_OPENAI_MODEL)",
    )
    chat.add_argument(
        "--store",
        default=None,
        help="where conversations live: sqlite:PATH, postgresql://..., or memory (default: "
        "sqlite:chat.db in your data directory, e.g. ~/.local/share/handoff-builder)",
    )
    chat.add_argument("--conversation", default="cli", help="the conversation id (default: cli)")
    chat.add_argument(
        "--max-output-tokens",
        type=_positive_int,
        default=None,
        metavar="N",
        help="output tokens one model response of the support desk may use (default: "
        "HANDOFF_BUILDER_MAX_OUTPUT_TOKENS, else 1024)",
    )
    chat.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="after this long without a message the conversation starts again at the initial "
        "agent (default: 30 minutes)",
    )
    graph = commands.add_parser(
        "graph",
        help="print a workflow's handoff graph as Mermaid, and lint it",
        description="Print the handoff graph of your builder (module:attribute) or of a built-in "
        "workflow as a Mermaid flowchart; every lint finding goes to stderr. Exits with status 1 "
        "when the lint finds an error (a workflow that does not build has no graph).",
    )
    graph.add_argument(
        "builder",
        nargs="?",
        metavar="MODULE:ATTRIBUTE",
        help="your HandoffWorkflowBuilder, or a function that returns one, e.g. "
        "myapp.desk:builder (imported with the current directory on the path)",
    )
    graph.add_argument(
        "--workflow",
        choices=("support-desk", "demo"),
        default="support-desk",
        help="without MODULE:ATTRIBUTE, a built-in workflow: support-desk (what chat runs; the "
        "default) or demo (what demo runs)",
    )
    _eval_parser(commands)
    _serve_parser(commands)
    worker = commands.add_parser(
        "worker",
        help="run a Temporal worker for your workflow's conversations",
        description="Serve the conversations of your builder (module:attribute) on Temporal: "
        "each conversation is a durable workflow, each agent call an activity. Run as many "
        "workers as you like. SIGTERM or SIGINT (Ctrl-C) stops this one: it takes no new work, "
        "gives the agent calls in flight up to --graceful-shutdown-timeout seconds to finish, "
        "hands the others back to Temporal (another worker runs them) and exits with status 0; "
        "a second signal stops it at once. Needs handoff-builder[temporal].",
    )
    worker.add_argument(
        "builder",
        metavar="MODULE:ATTRIBUTE",
        help="your HandoffWorkflowBuilder, or a function that returns one",
    )
    worker.add_argument(
        "--temporal",
        required=True,
        metavar="HOST:PORT",
        help="the Temporal server's frontend, e.g. 127.0.0.1:7233",
    )
    worker.add_argument("--task-queue", required=True, metavar="QUEUE", help="the task queue")
    worker.add_argument("--namespace", default="default", help="the namespace (default: default)")
    worker.add_argument(
        "--graceful-shutdown-timeout",
        type=_grace,
        default=_DEFAULT_GRACEFUL_SHUTDOWN,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, how long the agent calls in flight may run on before they "
        f"are handed back to Temporal for another worker (default: {_DEFAULT_GRACEFUL_SHUTDOWN:g})",
    )
    worker.add_argument(
        "--relay",
        metavar="REDIS_URL",
        help="stream the agents' token updates to clients through this Redis (redis://HOST:PORT/DB;"
        " needs handoff-builder[redis]); without it a client's stream() gets whole replies",
    )
    worker.add_argument(
        "--messages",
        metavar="POSTGRES_URL",
        help="keep the conversations' messages in this PostgreSQL database (postgresql://...; "
        "needs handoff-builder[postgres]), shared by every worker of the task queue: agent calls "
        "then carry a reference to the conversation, not the conversation, and it may grow past "
        "Temporal's payload limit. Give every worker of the queue the same, or none",
    )
    return parser


def _eval_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage] - argparse's own type for add_subparsers()
    """``eval``: run a case file against a workflow; ``eval record``: cases from a conversation."""
    from .evals._command import min_accuracy

    evals = commands.add_parser(
        "eval",
        help="measure how often a workflow routes each message to the right agent",
        usage="handoff-builder eval CASES.jsonl [--workflow MODULE:ATTRIBUTE] [--provider ...] "
        "[--repeat N] [--concurrency N] [--out DIR] [--min-accuracy X]\n"
        "       handoff-builder eval record --store SPEC --conversation ID [--redact]",
        description="Run every case of CASES.jsonl (one JSON object a line: the user's input and "
        "the agent expected to answer it) as a new conversation, and print the routing accuracy, "
        "the confusion matrix (expected agent x the agent that answered), each handoff edge, "
        "hops, refused handoff attempts, escalations, goal and path checks, latency and tokens. "
        "Exits with status 1 below --min-accuracy. 'eval record' prints a stored conversation's "
        "user turns as case lines instead. See docs/evals.md.",
    )
    evals.add_argument(
        "cases",
        metavar="CASES.jsonl",
        help="the case file, or the word record (to record cases from a stored conversation)",
    )
    evals.add_argument(
        "--workflow",
        metavar="MODULE:ATTRIBUTE",
        help="your HandoffWorkflowBuilder, or a function that returns one (default: the built-in "
        "support desk that chat talks to)",
    )
    evals.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="the model of the support desk (scripted, the default; openai, with OPENAI_BASE_URL "
        "for an OpenAI-compatible server; azure), or passed to your function as provider=...",
    )
    evals.add_argument(
        "--max-output-tokens",
        type=_positive_int,
        default=None,
        metavar="N",
        help="output tokens one model response may use: for the support desk, or passed to your "
        "function as max_output_tokens=...",
    )
    evals.add_argument(
        "--repeat",
        type=_positive_int,
        default=1,
        metavar="N",
        help="run every case N times (default: 1)",
    )
    evals.add_argument(
        "--concurrency",
        type=_positive_int,
        default=4,
        metavar="N",
        help="cases run at the same time (default: 4)",
    )
    evals.add_argument(
        "--out",
        metavar="DIR",
        help="write DIR/results.jsonl (every turn, with each agent call's input and output), "
        "DIR/report.md and DIR/confusion.svg",
    )
    evals.add_argument(
        "--min-accuracy",
        type=min_accuracy,
        default=None,
        metavar="X",
        help="exit with status 1 below this routing accuracy: a fraction (0.8) or a percentage "
        "(80%%)",
    )
    evals.add_argument(
        "--store",
        metavar="SPEC",
        help="eval record: where the conversation is (sqlite:PATH, postgresql://..., memory)",
    )
    evals.add_argument("--conversation", metavar="ID", help="eval record: the conversation's id")
    evals.add_argument(
        "--redact",
        action="store_true",
        help="eval record: leave personal data out (e-mail addresses, IBANs, IP addresses, "
        "numbers of six digits or more) and the conversation id out of the case ids",
    )


def _serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage] - argparse's own type for add_subparsers()
    serve = commands.add_parser(
        "serve",
        help="serve the support desk's conversations, or your workflow's, as an A2A agent",
        description="Serve the conversations of your builder (module:attribute), or of the "
        "built-in support desk, as an Agent2Agent (A2A) agent over HTTP: the A2A context id is "
        "the conversation id, kept in the store; see docs/remote-agents.md. SIGTERM or Ctrl-C "
        "stops it. Needs handoff-builder[a2a].",
    )
    serve.add_argument(
        "builder",
        nargs="?",
        metavar="MODULE:ATTRIBUTE",
        help="your HandoffWorkflowBuilder, or a function that returns one (default: the "
        "built-in support desk, on its scripted model)",
    )
    serve.add_argument(
        "--a2a", action="store_true", required=True, help="serve over A2A (JSON-RPC and SSE)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    serve.add_argument("--port", type=_positive_int, default=8000, help="the port (default: 8000)")
    serve.add_argument(
        "--url",
        default=None,
        help="the address clients reach it at, on its agent card (default: http://HOST:PORT/)",
    )
    serve.add_argument("--name", default="handoff-desk", help="the agent card's name")
    serve.add_argument(
        "--description",
        default="Conversations with a desk of agents that hand the conversation to one another.",
        help="the agent card's description",
    )
    serve.add_argument(
        "--store",
        default=None,
        help="where conversations live: sqlite:PATH, postgresql://..., or memory (default: "
        "sqlite:chat.db in your data directory, as for chat)",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _grace(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text!r}")
    return value


def _seconds(text: str) -> float:
    from ._hosting_settings import idle_timeout_of

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    try:
        idle_timeout_of(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive, finite number of seconds, got {text!r}"
        ) from None
    return value


def _graph(spec: str | None, workflow: str) -> int:
    """Print the graph and every lint finding; the exit status (1: the lint found an error)."""
    if spec is not None:
        builder = load_builder(spec)
    else:
        from ._demo import demo_builder
        from ._support_desk import support_desk

        builder = support_desk() if workflow == "support-desk" else demo_builder()
    findings = builder.lint()  # every problem, never raised
    try:
        sys.stdout.write(builder.to_mermaid())
        drawn = True
    except HandoffConfigurationError:  # the findings say why
        drawn = False
    for finding in findings:
        sys.stderr.write(f"handoff-builder: lint: {finding}\n")
    errors = sum(finding.severity == "error" for finding in findings)
    if not errors:
        return 0
    found = f"the lint found {errors} error{'s' if errors > 1 else ''}"
    why = (
        "build(strict=True) refuses this workflow"
        if drawn
        else "the workflow does not build, so no graph was drawn"
    )
    sys.stderr.write(f"handoff-builder: error: {found}; {why}.\n")
    return 1


async def _stdin_lines() -> AsyncIterator[str]:
    """Lines of standard input, read in a daemon thread.

    The event loop stays free, so Ctrl-C at the prompt reaches it at once, and a reader blocked
    on the terminal never holds up the exit.
    """
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the command ended (Ctrl-C)
            try:
                while line := sys.stdin.readline():
                    loop.call_soon_threadsafe(lines.put_nowait, line)
            except (OSError, ValueError):  # stdin closed under the reader
                pass
            loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, name="handoff-builder-stdin", daemon=True).start()
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = await lines.get()
        if line is None:
            return
        yield line


async def _chat(args: argparse.Namespace) -> None:
    from pathlib import Path

    from ._hosting import DEFAULT_IDLE_TIMEOUT, ConversationHost
    from ._support_desk import chat, open_store, support_desk

    if args.builder is not None:
        if args.provider is not None or args.max_output_tokens is not None:
            raise ValueError(
                "--provider and --max-output-tokens set up the built-in support desk; the agents "
                f"of {args.builder} bring their own clients and options"
            )
        desk = load_builder(args.builder)
    else:
        desk = support_desk(args.provider or "scripted", args.max_output_tokens)
    spec = args.store or default_store()
    if args.store is None:
        Path(spec.removeprefix("sqlite:")).parent.mkdir(parents=True, exist_ok=True)
    store = open_store(spec)
    idle = DEFAULT_IDLE_TIMEOUT if args.idle_timeout is None else args.idle_timeout
    try:
        host = ConversationHost(desk, store, idle_timeout=idle)
        await chat(host, args.conversation, _stdin_lines())
    finally:
        await store.close()


async def _serve(args: argparse.Namespace) -> None:
    from pathlib import Path

    from ._hosting import ConversationHost
    from ._support_desk import open_store, support_desk

    try:
        import uvicorn

        from ._a2a_server import a2a_app
    except ImportError as error:
        raise ValueError(
            f"serve --a2a needs a2a-sdk's server and uvicorn: pip install "
            f"'handoff-builder[a2a]' ({error})"
        ) from error
    desk = load_builder(args.builder) if args.builder is not None else support_desk("scripted")
    spec = args.store or default_store()
    if args.store is None:
        Path(spec.removeprefix("sqlite:")).parent.mkdir(parents=True, exist_ok=True)
    store = open_store(spec)
    try:
        url = args.url or f"http://{args.host}:{args.port}/"
        app = a2a_app(
            ConversationHost(desk, store), name=args.name, description=args.description, url=url
        )
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")
        _say(f"serving {args.builder or 'the support desk'} over A2A at {url} (Ctrl-C stops it)")
        await _a2a_server_type()(config).serve()
    finally:
        await store.close()


def _a2a_server_type() -> type[uvicorn.Server]:
    import signal
    from types import FrameType

    import uvicorn

    class A2AServer(uvicorn.Server):
        """uvicorn's server, which a signal stops with status 0 (as a worker), not killed by it.

        uvicorn raises a signal that stopped it again once it has shut down, so that the process
        ends by it; ``serve`` ends as ``worker`` does: drained, status 0. A second Ctrl-C stops it
        at once.
        """

        @override
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            else:
                self.should_exit = True

    return A2AServer


async def _worker(args: argparse.Namespace) -> None:
    try:
        from .temporal import connect
        from .temporal._service import serve
    except ImportError as error:
        raise ValueError(
            f"the worker needs Temporal's SDK: pip install 'handoff-builder[temporal]' ({error})"
        ) from error
    builder = load_builder(args.builder)
    messages = _message_log(args.messages)
    try:
        client = await connect(args.temporal, namespace=args.namespace)
    except Exception as error:  # the SDK's connection errors: said in one line
        raise ValueError(f"cannot connect to Temporal at {args.temporal}: {error}") from error
    _say(
        f"serving {args.builder} on task queue {args.task_queue!r} at {args.temporal} "
        "(SIGTERM or Ctrl-C stops it)"
    )
    try:
        await serve(
            client,
            builder,
            task_queue=args.task_queue,
            grace=args.graceful_shutdown_timeout,
            say=_say,
            relay=args.relay,
            messages=messages,
        )
    finally:
        if messages is not None:
            await messages.close()


def _message_log(url: str | None) -> PostgresConversationStore | None:
    """The workers' message log at ``url`` (``None``: none)."""
    if url is None:
        return None
    if not url.startswith(("postgresql://", "postgres://")):
        raise ValueError(
            f"--messages must be a PostgreSQL address (postgresql://...), which every worker of "
            f"the task queue shares; got {url!r}."
        )
    try:
        from .stores import PostgresConversationStore
    except ImportError as error:
        raise ValueError(
            f"--messages needs psycopg: pip install 'handoff-builder[postgres]' ({error})"
        ) from error
    return PostgresConversationStore(url)


def _leave_after_temporal(code: int) -> NoReturn:
    """End a ``worker`` with ``code``: the exit handlers run, the interpreter's teardown not.

    The teardown can abort in Temporal's threads (temporalio/sdk-python#300), and it collects
    what was left of the conversation runs the worker handed back, whose agent_framework
    generators print tracebacks as they go. What the exit handlers do (logging's flush, an
    OpenTelemetry exporter's) is done first.
    """
    atexit._run_exitfuncs()  # pyright: ignore[reportPrivateUsage] - what exit() would run
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _say(text: str) -> None:
    """One line of what the command does, on stdout, at once (a service's log reads it)."""
    sys.stdout.write(f"handoff-builder: {text}\n")
    sys.stdout.flush()


_STDOUT_CLOSED = 141
"""The exit status when standard output was closed under the command (``... | head -1``): the
shell's status of a command that SIGPIPE ended, 128 + 13, as ``cat`` or ``yes`` get there."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code.

    Every error is one line on stderr and exit status 1 (``--debug`` shows the traceback), as is
    a lint error found by ``graph``;
    Ctrl-C ends the command quietly with status 130: a chat turn it interrupted is finished by
    the next ``chat``. ``worker`` stops on SIGTERM or SIGINT, drains and exits with status 0.
    A standard output closed by its reader ends a command quietly with status 141 (as a command
    that SIGPIPE ended, in a shell).
    """
    args = _parser().parse_args(argv)
    if args.command == "chat":
        _interruptible()
    code = _run(args)
    if args.command == "worker":  # whatever its end, a worker leaves without the teardown
        _leave_after_temporal(code)
    return code


def _run(args: argparse.Namespace) -> int:
    """The command ``args`` names; its exit code (see :func:`main`)."""
    code = 0
    try:
        with _reported(debug=args.debug):
            if args.command == "demo":
                from ._demo import run_demo

                asyncio.run(run_demo(sys.stdout))
            elif args.command == "chat":
                asyncio.run(_chat(args))
            elif args.command == "eval":
                from .evals._command import eval_command

                code = eval_command(args)
            elif args.command == "worker":
                asyncio.run(_worker(args))
            elif args.command == "serve":
                asyncio.run(_serve(args))
            else:
                code = _graph(args.builder, args.workflow)
            sys.stdout.flush()  # a closed stdout is noticed here, not by the interpreter's exit
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        return 130
    except Exception as error:
        if isinstance(error, BrokenPipeError) and _stdout_closed():
            return _STDOUT_CLOSED
        if args.debug:
            raise
        sys.stderr.write(f"handoff-builder: error: {_one_line(error)}\n")
        return 1
    return code


def _interruptible() -> None:
    """Ctrl-C interrupts the command, also when whoever started it ignored SIGINT.

    A process started by a script in the background inherits an ignored SIGINT, and Python then
    leaves it ignored: ``chat`` would wait at its prompt through every Ctrl-C.
    """
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone; if so, it is quieted.

    A pipe without a reader polls as ``POLLERR`` (POSIX; elsewhere a broken pipe is taken to be
    standard output's). Standard output then writes to ``os.devnull``, so that what is still
    buffered does not fail again when the interpreter exits.
    """
    import select

    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (captured): it cannot be a closed pipe
        return False
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, 0)
        if not any(events & select.POLLERR for _, events in poller.poll(0)):
            return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return True


@contextlib.contextmanager
def _reported(*, debug: bool) -> Generator[None, None, None]:
    """While the command runs, log records and Python warnings are one line each on stderr.

    ``handoff-builder: warning: ...`` for our warnings and the libraries'; the PostgreSQL
    driver's connection retries are left out (the error that ends them says it all) unless
    ``debug``, which also shows this package's informational records (each handoff, say).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLineFormatter(debug=debug))
    root, ours, driver = (logging.getLogger(n) for n in ("", "handoff_builder", "psycopg"))
    saved = root.level, ours.level, driver.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    if debug:
        ours.setLevel(logging.INFO)
    else:
        driver.setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            yield
        finally:
            root.removeHandler(handler)
            for logger, level in zip((root, ours, driver), saved, strict=True):
                logger.setLevel(level)


class _OneLineFormatter(logging.Formatter):
    """A log record as ``handoff-builder: warning from LOGGER: message``.

    Never ``handoff-builder: error:``, which is the command's own failure (exit status 1). The
    traceback of a record that has one follows with ``--debug`` only.
    """

    def __init__(self, *, debug: bool) -> None:
        super().__init__()
        self.debug = debug

    @override
    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname.lower()
        line = f"handoff-builder: {level} from {record.name}: {_squeezed(record.getMessage())}"
        if self.debug and record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    del filename, lineno, file, line
    sys.stderr.write(f"handoff-builder: warning: {category.__name__}: {_squeezed(str(message))}\n")


def _squeezed(text: str) -> str:
    return " ".join(text.split())


def _one_line(error: BaseException) -> str:
    """An error in one line: its message (the type too, for errors that are not ours).

    A missing module is said in its message alone (``No module named ...``, or what to install).
    """
    text = _squeezed(str(error)) or type(error).__name__
    if isinstance(error, (HandoffBuilderError, ValueError, ImportError)):
        return text
    return f"{type(error).__name__}: {text}"


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
