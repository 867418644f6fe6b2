"""Per-edge input filters: what the agent that receives a handoff reads of the conversation.

An edge declared with ``input_filter=fn`` (``with_handoff``) runs ``fn`` when its target is about to
read the handoff: ``fn`` is given a :class:`HandoffInput` (frozen) and returns the messages the
target reads in place of ``HandoffInput.messages``. The target's view goes on from there: what is
added to the conversation afterwards is added to the filtered messages, in every filtering mode.

The filter runs where the view is built: before the target's next run, in the process (or
Temporal worker) that runs it, and again whenever that view is built anew (a restored checkpoint,
a hosted conversation loaded by another worker), so it should be a function of its input alone.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from agent_framework import Content, Message

from ._events import HandoffEvent
from .exceptions import HandoffHookError

__all__ = ["HandoffInput", "InputFilter", "filtered_input"]


@dataclass(frozen=True)
class HandoffInput:
    """What the target of a handoff is about to read, given to its edge's input filter.

    * ``messages``: the target's view of the conversation at the handoff, ending with ``note``
      (whatever the filtering mode shows it: with ``NONE`` the handoff's call and result too);
    * ``handoff``: the handoff (``source``, ``target``, ``goal``, ``tool_name``, ``call_id``,
      ``kind``, and ``payload``, the validated model of a typed edge);
    * ``call`` and ``result``: the handoff's function call and its result as the shared
      conversation holds them, whatever the mode (``call`` is ``None`` when a history passed in
      holds only the result);
    * ``note``: the host's note that tells the target who handed it the conversation and why.
    """

    messages: tuple[Message, ...]
    handoff: HandoffEvent
    call: Content | None
    result: Content
    note: Message


InputFilter = Callable[[HandoffInput], "Sequence[Message] | Awaitable[Sequence[Message]]"]
"""``input_filter``: the messages the target reads, in place of ``HandoffInput.messages``."""


async def filtered_input(function: InputFilter, data: HandoffInput) -> list[Message]:
    """What ``function`` returns for ``data``, checked: a list of messages.

    Raises:
        HandoffHookError: the filter raised, or returned something other than messages; it
            names the edge (hook ``"input_filter"``).
    """
    handoff = data.handoff
    try:
        answer: Any = function(data)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
            raise TypeError(
                f"an input filter returns a list of Messages, not {type(answer).__name__}"
            )
        messages = list(cast(Sequence[Any], answer))
        wrong = next((m for m in messages if not isinstance(m, Message)), None)
        if wrong is not None:
            raise TypeError(
                f"an input filter returns a list of Messages; it holds a {type(wrong).__name__}"
            )
    except Exception as error:
        raise HandoffHookError(
            handoff.source, handoff.target, handoff.tool_name, "input_filter", error
        ) from error
    return cast(list[Message], messages)
