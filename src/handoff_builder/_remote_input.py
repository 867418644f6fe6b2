"""A remote agent's question: its A2A task waits for input, and the turn waits for the answer.

When a remote agent's task ends ``input-required``, its run's reply holds its question as a
request, as agent_framework's own ``A2AAgent`` gives one: a ``text`` content whose
``user_input_request`` is set, with an id. The turn waits for it as for an approval or an
external call (a ``request_info`` event; a hosted turn's ``PendingRequestsError``), and it is
answered with a ``text`` content: the person's words, which join the conversation as the user's
message and go to the remote agent in the same A2A task.

:class:`RemoteQuestion` reads such a request (who asks, in which A2A context and task);
:func:`question_request` makes one; :func:`message_answers` reads a new user message as the
answer to the one question a conversation waits for (``ConversationHost.send``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import Content, Message

__all__ = [
    "REMOTE_QUESTION_KEY",
    "RemoteQuestion",
    "is_question",
    "message_answers",
    "question_request",
]

REMOTE_QUESTION_KEY = "handoff_builder_a2a_question"
"""Where a question request keeps who asks, in which context and task
(``Content.additional_properties``)."""


def is_question(request: Content) -> bool:
    """True when ``request`` is a question to answer with text (a remote agent's)."""
    return request.type == "text" and bool(request.user_input_request)


@dataclass(frozen=True)
class RemoteQuestion:
    """A remote agent's question a turn waits for: its A2A task is ``input-required``.

    ``request_id`` is the request's id (answer it under that id), ``agent`` the remote agent
    that asks, ``text`` its words, ``context_id`` and ``task_id`` the A2A context and task the
    answer continues. Read one from a pending request with :meth:`of`; answer it with
    :meth:`answer` (or ``Content.from_text(...)``, as agent_framework's ``A2AAgent``'s requests
    are answered).
    """

    request_id: str
    agent: str
    text: str
    context_id: str
    task_id: str | None

    @classmethod
    def of(cls, request: Content) -> RemoteQuestion | None:
        """The question ``request`` is, or ``None`` (an approval, an external call...)."""
        if not is_question(request):
            return None
        kept: Any = (request.additional_properties or {}).get(REMOTE_QUESTION_KEY)
        if not isinstance(kept, Mapping):
            return None
        kept = cast(Mapping[str, Any], kept)
        task_id = kept.get("task_id")
        return cls(
            request_id=str(request.id),
            agent=str(kept.get("agent", "")),
            text=request.text or "",
            context_id=str(kept.get("context_id", "")),
            task_id=task_id if isinstance(task_id, str) else None,
        )

    @staticmethod
    def answer(text: str) -> Content:
        """The answer that says ``text`` (a ``text`` content)."""
        return Content.from_text(text)


def question_request(
    agent: str, question: str, context_id: str, task_id: str | None, asked: str
) -> Content:
    """The request for ``agent``'s ``question``, in A2A context ``context_id``, task ``task_id``.

    Its id is made from the agent, the task and ``asked`` (the id of the A2A message that asks,
    so the same question read twice is one request).
    """
    request = Content.from_text(
        question,
        additional_properties={
            REMOTE_QUESTION_KEY: {"agent": agent, "context_id": context_id, "task_id": task_id}
        },
    )
    occurrence = f"{agent}/{task_id or context_id}/{asked or uuid.uuid4().hex}"
    request.id = f"a2a-input-{uuid.uuid5(uuid.NAMESPACE_URL, occurrence)}"
    request.user_input_request = True
    return request


def message_answers(
    pending: Sequence[Content], messages: Sequence[Message]
) -> dict[str, Content] | None:
    """The answer ``messages`` give when the conversation waits for one question alone.

    Their text (the user messages', with any words) answers it; ``None`` when the conversation
    waits for anything else (or for nothing), or the messages have no words.
    """
    if len(pending) != 1 or not is_question(pending[0]):
        return None
    said = "\n".join(m.text.strip() for m in messages if m.role == "user" and m.text.strip())
    if not said:
        return None
    return {str(pending[0].id): Content.from_text(said)}
