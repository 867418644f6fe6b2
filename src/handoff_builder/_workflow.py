"""The workflow type that :meth:`HandoffWorkflowBuilder.build` returns.

agent_framework records every executor invocation as an ``executor_invoked`` event whose data is
``copy.deepcopy`` of the executor's input. For a first turn that brings a long history
(``workflow.run([*prior, user])``) that copies every prior message, which costs more than the
orchestration itself. :class:`HandoffWorkflow` passes such a list to the host as a
:class:`MessageBatch`: a ``list[Message]`` whose deep copy is a new list of the same messages.
"""

import copy
from collections.abc import Awaitable
from itertools import repeat
from typing import TYPE_CHECKING, Any, Literal, cast, overload

from agent_framework import (
    Message,
    ResponseStream,
    Workflow,
    WorkflowEvent,
    WorkflowRunResult,
    register_checkpoint_type,
)
from typing_extensions import Self, override

if TYPE_CHECKING:
    from ._host import GroupChatHost

__all__ = ["HandoffWorkflow", "MessageBatch"]


class MessageBatch(list[Message]):
    """Input messages of one run, as the host receives them.

    A plain ``list[Message]`` except for one kind of copy. agent_framework deep-copies every
    executor input for its ``executor_invoked`` event; a batch copied that way, on its own
    (``copy.deepcopy(batch)``), becomes a new ``MessageBatch`` holding the **same**
    :class:`~agent_framework.Message` objects, so the event's data is the caller's messages, not a
    snapshot of them. A batch copied as part of something larger (a checkpoint that an
    ``InMemoryCheckpointStorage`` copies, say) is copied deeply, messages included, so saved
    state never shares objects with a live run.
    """

    __slots__ = ()

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # ``copy.deepcopy`` hands the root object an empty memo; a container being copied has
        # already recorded itself in the memo before it copies its items.
        if not memo:
            return type(self)(self)
        copied = type(self)()
        memo[id(self)] = copied
        copied.extend(copy.deepcopy(message, memo) for message in self)
        return copied


register_checkpoint_type(MessageBatch)  # a run's input is checkpointed before the host runs


def as_batch(message: object) -> object:
    """``message`` as a :class:`MessageBatch` when it is a list of messages; otherwise unchanged."""
    if type(message) is not list:
        return message
    items = cast(list[object], message)
    if all(map(isinstance, items, repeat(Message))):  # no Python frame per message
        return MessageBatch(cast(list[Message], items))
    return items


class HandoffWorkflow(Workflow):
    """An ``agent_framework.Workflow`` built by :class:`~handoff_builder.HandoffWorkflowBuilder`.

    It runs, streams, checkpoints and wraps as an agent (``as_agent()``) like any ``Workflow``.
    Two things differ in :meth:`run`, both for speed (see ``docs/performance.md``):

    * a ``list[Message]`` input reaches the host as a :class:`MessageBatch`, so agent_framework's
      ``executor_invoked`` event does not deep-copy the whole history the list may carry;
    * a run without ``checkpoint_storage`` (and a workflow without one of its own, see
      ``with_checkpointing``) runs a whole turn in one superstep; with it, every agent invocation
      is its own superstep, so a checkpoint is taken after every hop.
    """

    host: "GroupChatHost | None" = None
    """The start executor, which the workflow configures for each run (set by the builder)."""
    checkpoints: bool = False
    """True when the workflow has a checkpoint storage of its own (``with_checkpointing``)."""

    @overload
    def run(
        self, message: Any | None = None, *, stream: Literal[True], **kwargs: Any
    ) -> ResponseStream[WorkflowEvent, WorkflowRunResult]: ...

    @overload
    def run(
        self, message: Any | None = None, *, stream: Literal[False] = ..., **kwargs: Any
    ) -> Awaitable[WorkflowRunResult]: ...

    @override
    def run(
        self, message: Any | None = None, *, stream: bool = False, **kwargs: Any
    ) -> ResponseStream[WorkflowEvent, WorkflowRunResult] | Awaitable[WorkflowRunResult]:
        """Run the workflow; the arguments are those of ``agent_framework.Workflow.run``."""
        if self.host is not None:
            given = kwargs.get("checkpoint_storage") is not None
            self.host.superstep_per_hop = self.checkpoints or given
        return super().run(as_batch(message), stream=stream, **kwargs)


def specialise(workflow: Workflow, host: "GroupChatHost") -> HandoffWorkflow:
    """Give a workflow that ``WorkflowBuilder.build()`` made the :class:`HandoffWorkflow` type.

    ``host`` is its start executor; the workflow tells it, for each run, whether to take a
    superstep (and so a checkpoint) per hop: a run checkpoints when ``checkpoint_storage`` is
    passed, or always when the builder gave the workflow one (``with_checkpointing``).
    """
    workflow.__class__ = HandoffWorkflow
    handoff_workflow = cast(HandoffWorkflow, workflow)
    handoff_workflow.host = host
    return handoff_workflow
