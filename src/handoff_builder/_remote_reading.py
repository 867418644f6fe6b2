"""What a remote agent's answer reads as: the A2A objects ``A2AAgent`` read, as text.

agent_framework's ``A2AAgent`` turns an A2A answer into an ``AgentResponse`` whose raw
representation keeps what came over the wire (a task, or a stream's events). A remote agent's run
(:mod:`._remote_participant`) reads from both: its answer's text without the artifacts read before
in the task (:func:`answer_of`), a waiting task's question (:func:`status_of`) and what it wrote
before it (:func:`written`), and a stream as it arrives (:class:`Reading`). Nothing of a2a-sdk
is imported here but its ``Role``, when a task is read; its objects are read by name.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

from agent_framework import AgentResponse, AgentResponseUpdate, Content

__all__ = ["Reading", "answer_of", "is_task", "raw_of", "status_of", "written"]


class Reading:
    """One run's reading of a remote agent's stream: the task it names, the text streamed.

    The text of the task's artifacts goes to ``on_update`` as it arrives, as deltas of one
    message (each artifact's text on a line of its own, as in the answer): an artifact's update
    either appends to its text or replaces it (A2A's ``append``); a replacement that restates
    the text streamed so far sends only what is new, and one that changes it sends nothing (the
    answer, at the end, is the reply). The rest of the answer (all of it, from a server that does
    not stream) goes out when the run ends (:meth:`finish`).
    """

    def __init__(
        self, agent: str, on_update: Callable[[AgentResponseUpdate], Awaitable[None]] | None
    ) -> None:
        self.agent = agent
        self.on_update = on_update
        self.task_id: str | None = None
        self.read_any = False
        self.message_id = uuid.uuid4().hex
        self._artifacts: dict[str, str] = {}  # each artifact's text so far, by its id
        self._streamed = ""

    async def read(self, update: AgentResponseUpdate) -> None:
        """Read one update: the task it names; an artifact's text, streamed."""
        self.read_any = True
        raw: Any = update.raw_representation
        token = update.continuation_token
        named = token.get("task_id") if token is not None else getattr(raw, "task_id", None)
        if isinstance(named, str) and named:
            self.task_id = named
        if type(raw).__name__ != "TaskArtifactUpdateEvent":
            return
        key = str(update.message_id)
        for content in update.contents:
            if content.type != "text":
                continue
            so_far = self._artifacts.get(key, "") if content.merge_mode == "append" else ""
            self._artifacts[key] = so_far + (content.text or "")
        await self._send("\n".join(self._artifacts.values()))

    def streamed_artifacts(self, read: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
        """The text of the artifacts streamed and not ``read`` before, and every id read."""
        new = [key for key in self._artifacts if key not in read]
        return "\n".join(self._artifacts[key] for key in new if self._artifacts[key]), (
            *read,
            *new,
        )

    async def finish(self, answer: str) -> str:
        """The rest of ``answer`` streamed; the id of the message that carries it.

        All of it, under a new id, when it is not what was streamed.
        """
        if self._streamed and not answer.startswith(self._streamed):
            self.message_id, self._streamed = uuid.uuid4().hex, ""
        await self._send(answer)
        return self.message_id

    async def _send(self, text: str) -> None:
        """What ``text`` adds to the text streamed so far, streamed (nothing: it changed it)."""
        if self.on_update is None or not text.startswith(self._streamed):
            return
        delta = text[len(self._streamed) :]
        if not delta:
            return
        self._streamed = text
        await self.on_update(
            AgentResponseUpdate(
                contents=[Content.from_text(delta)],
                role="assistant",
                author_name=self.agent,
                message_id=self.message_id,
            )
        )


def answer_of(response: AgentResponse, read: tuple[str, ...] = ()) -> str:
    """The text of a remote agent's answer: its assistant messages' text parts, line by line.

    Without the artifacts ``read`` before in the same task (``A2AAgent`` reads a finished
    task's artifacts whole, those of the exchanges before its question too).
    """
    return "\n".join(
        content.text
        for message in response.messages
        if message.role == "assistant" and message.message_id not in read
        for content in message.contents
        if content.type == "text" and content.text
    )


def raw_of(response: AgentResponse) -> list[Any]:
    """The A2A objects (tasks, events, messages) ``response`` was read from, in order."""
    raw: Any = response.raw_representation
    return list(cast(list[Any], raw)) if isinstance(raw, list) else [raw]


def is_task(item: Any) -> bool:
    """True when ``item`` is an A2A ``Task`` (by its class's name: a2a-sdk's)."""
    return type(item).__name__ == "Task"


def _texts(parts: Any) -> str:
    """The text parts of an A2A message or artifact, joined by a space."""
    listed: list[Any] = list(parts or [])
    return " ".join(str(getattr(part, "text", "") or "") for part in listed).strip()


def written(task: Any, sent: str, read: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """What ``task`` holds of an exchange that started with message ``sent``, before its question.

    Its agent's messages in its history after ``sent`` (its question, the status message, left
    out), then its artifacts not ``read``, line by line; and the ids of every artifact read.
    """
    from a2a.types import Role

    asked = str(getattr(getattr(getattr(task, "status", None), "message", None), "message_id", ""))
    said: list[str] = []
    history: list[Any] = list(getattr(task, "history", None) or [])
    start = next((i + 1 for i, m in enumerate(history) if m.message_id == sent), len(history))
    for message in history[start:]:
        if message.role == Role.ROLE_AGENT and message.message_id != asked:
            said.append(_texts(message.parts))
    artifacts: list[Any] = list(getattr(task, "artifacts", None) or [])
    fresh = [a for a in artifacts if a.artifact_id not in read]
    said.extend(_texts(artifact.parts) for artifact in fresh)
    return "\n".join(t for t in said if t), (*read, *(a.artifact_id for a in fresh))


def status_of(response: AgentResponse) -> tuple[str, str]:
    """The text parts of the last A2A task's status message in ``response``, and its id.

    A failed task's words: agent_framework's ``A2AAgent`` reads a finished task's answer from
    its artifacts, and a task that failed says why in its status message, kept only in the
    response's raw A2A tasks. A waiting task's question: ``A2AAgent`` gives it as one text, its
    text parts and the JSON of its data parts (which are for programs: a desk served with
    ``a2a_app`` describes its requests in one) line by line.
    """
    for task in reversed(raw_of(response)):
        message = getattr(getattr(task, "status", None), "message", None)
        said = _texts(getattr(message, "parts", None))
        if said:
            return said, str(getattr(message, "message_id", "") or "")
    return "", ""
