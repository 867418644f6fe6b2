"""Talking to the servers of ``tests/serving_app.py`` over HTTP on 127.0.0.1.

The ``serve`` fixture (``tests/conftest.py``) starts one: ``serve("devui")`` or ``serve("agui")``
gives its base URL. Helpers here post to it and read what it sends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

Serve = Callable[[str], str]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def post(url: str, body: dict[str, Any], *, token: str | None = None) -> bytes:
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)  # noqa: S310
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
        return bytes(response.read())


def post_refused(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    """The status and JSON body of a request the server refuses."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        post(url, body)
    return refused.value.code, json.loads(refused.value.read())


def get(url: str, *, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
        return json.loads(response.read())


def sse(raw: bytes) -> list[dict[str, Any]]:
    """The JSON events of a server-sent event stream."""
    return [
        json.loads(line[len(b"data: ") :])
        for line in raw.splitlines()
        if line.startswith(b"data: ") and line[len(b"data: ") :].strip() not in (b"", b"[DONE]")
    ]


def agui_user(text: str, number: int) -> dict[str, Any]:
    """An AG-UI user message with the id ``u<number>``."""
    return {"id": f"u{number}", "role": "user", "content": text}


def agui_body(thread: str, messages: list[Any]) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": f"run-{len(messages)}",
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }


def servers(tmp_path: Path) -> Iterator[Serve]:
    """The ``serve`` fixture's body: ``start(kind)`` starts a server (``devui``, ``agui``) on a
    SQLite file in ``tmp_path`` and gives its base URL; all are stopped at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(kind: str) -> str:
        pytest.importorskip(
            "agent_framework_devui" if kind == "devui" else "agent_framework_ag_ui",
            reason="install handoff-builder[serve] (agent-framework-devui, agent-framework-ag-ui)",
        )
        port = free_port()
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "tests.serving_app", kind, str(port), str(tmp_path / "c.db")],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": path}, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        started.append(process)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    out = process.communicate()[0] if process.poll() is not None else ""
                    pytest.fail(f"the {kind} server did not start: {out}")
                time.sleep(0.1)
        return f"http://127.0.0.1:{port}"

    yield start
    for process in started:
        process.kill()
        process.communicate(timeout=30)
