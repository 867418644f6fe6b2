"""The group-chat host: the driver of a turn engine, as one agent_framework executor.

:class:`GroupChatHost` decides nothing and runs no agent itself. Its :class:`TurnEngine`
(``_engine.py``) holds the conversation and returns each next step as a value; the host saves a
snapshot through its journal, emits the step's events, and carries the step out: an agent call
goes to its :class:`AgentRunner` (``_runner.py``), requests go out as agent_framework requests,
a result is yielded. See docs/architecture.md.

No ``from __future__ import annotations`` here: agent_framework reads handler annotations.
"""

import asyncio
import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent_framework import (
    AgentResponseUpdate,
    Content,
    Executor,
    Message,
    WorkflowContext,
    WorkflowEvent,
    handler,
    register_checkpoint_type,
    response_handler,
)
from typing_extensions import Self, override

if TYPE_CHECKING:
    pass

from ._engine import (
    DEFAULT_AGENT_TIMEOUT,
    DEFAULT_ESCALATION_MESSAGE,
    DEFAULT_REVIEW_ESCALATION_MESSAGE,
    DEFAULT_TURN_TIMEOUT,
    HOST_ID,
    AgentCall,
    Hop,
    RunAgent,
    Step,
    TurnEngine,
    Wait,
)
from ._events import (
    HandoffTurnResult,
    TurnAbandonedEvent,
)
from ._host_settings import HostSettings, settings_of
from ._ledger import HostSnapshot
from ._manager import GroupChatManager
from ._model_inputs import ModelCallLog
from ._outlet import TurnOutlet
from ._participant import AgentRun, Participant
from ._routes import HandoffRoute
from ._runner import (
    AgentRunner,
    LocalAgentRunner,
    Streams,
    Views,
)
from ._state import DelegationFrame, HostState, decode_checkpoint, encode_host_state
from ._timeouts import DeadlinePassedError
from ._workflow import MessageBatch

__all__ = [
    "DEFAULT_AGENT_TIMEOUT",
    "DEFAULT_ESCALATION_MESSAGE",
    "DEFAULT_REVIEW_ESCALATION_MESSAGE",
    "DEFAULT_TURN_TIMEOUT",
    "GroupChatHost",
    "KeptConversation",
    "Participant",
    "ReissueRequests",
    "ResumeTurn",
    "TurnJournal",
    "UserTurn",
]

logger = logging.getLogger("handoff_builder")


class _Command:
    """A frozen message to the host; agent_framework's copy of it for its events is itself."""

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        # ``copy.deepcopy`` hands the root object an empty memo (agent_framework's
        # executor_invoked event); inside something larger (a checkpoint) copy it field by field.
        if not memo:
            return self
        fields = {name: copy.deepcopy(value, memo) for name, value in vars(self).items()}
        return type(self)(**fields)


@dataclass(frozen=True)
class UserTurn(_Command):
    """A user turn, with the caller's instruction for where it starts.

    ``return_to_previous``: ``True`` starts at the agent that ended the last turn, ``False`` at
    the initial agent, ``None`` leaves it to the workflow's setting. Hosted conversations send
    their messages this way. The host never changes the messages.
    """

    messages: list[Message]
    return_to_previous: bool | None = None


@dataclass(frozen=True)
class ResumeTurn(_Command):
    """Finish an interrupted turn: run the agent that was about to answer (a no-op otherwise)."""


@dataclass(frozen=True)
class ReissueRequests(_Command):
    """Emit the requests the open turn waits for again, under their ids, so they can be answered."""


@dataclass(frozen=True)
class _Hop(_Command):
    """Self-addressed message: run ``agent`` next (one superstep, so one checkpoint, per hop)."""

    agent: str
    no_handoffs: bool = False  # run it with no handoff tools (a safe agent)

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into checkpoints under the flag's earlier name, which earlier releases read.
        return {"agent": self.agent, "closed": self.no_handoffs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        flag = state.get("no_handoffs", state.get("closed", False))
        object.__setattr__(self, "agent", state["agent"])
        object.__setattr__(self, "no_handoffs", flag)


for _command in (UserTurn, ResumeTurn, ReissueRequests, _Hop):
    register_checkpoint_type(_command)

HostContext = WorkflowContext[_Hop, HandoffTurnResult | AgentResponseUpdate]


class TurnJournal(Protocol):
    """Saves a host's progress, handed a :class:`HostSnapshot` each time.

    After the user's input, before every agent call, at a wait and at the end of the turn.
    """

    async def record(self, snapshot: HostSnapshot) -> None:
        """Persist what changed: the new messages of ``snapshot.history`` and its state."""
        ...


class GroupChatHost(Executor):
    """Runs a group chat: keeps the shared, append-only history and carries out decisions.

    A user message (``str``, ``Message``, ``list[Message]`` or a :class:`UserTurn`) starts a turn.
    With ``superstep_per_hop`` each agent invocation is one superstep (so one checkpoint); without
    it the turn runs in one superstep. After each agent reply the manager returns one decision;
    the host adds the decision's input to the conversation, emits its events, and runs the next
    agent, or ends the turn and yields a :class:`HandoffTurnResult`. In streaming runs every agent
    update is yielded as it arrives, with the agent's name as ``author_name``.

    Each agent reads its own view of the history (see :class:`HandoffToolCallFiltering`); every
    handoff is shown to the agents that did not make it as a note with its goal. ``settings``
    (:class:`HostSettings`) says the rest; the keyword arguments it replaces are still read, with
    a ``DeprecationWarning``.
    """

    def __init__(
        self,
        *,
        participants: Mapping[str, Participant],
        manager: GroupChatManager,
        apology: str = DEFAULT_ESCALATION_MESSAGE,
        settings: HostSettings | None = None,
        id: str = HOST_ID,  # noqa: A002 - the Executor API's name
        **options: Any,
    ) -> None:
        super().__init__(id)
        settings = settings_of(settings, options)
        self.settings = settings
        """How the host runs its turns (:class:`HostSettings`)."""
        rules = settings.turn_rules(participants, apology, id)
        timeouts = {"agent_timeout": settings.agent_timeout, "turn_timeout": settings.turn_timeout}
        self._engine = TurnEngine(manager, rules, model_calls=settings.model_calls, **timeouts)
        self._participants = participants
        self._local = LocalAgentRunner(self._engine, settings.runner_setup(participants, id))
        self.runner: AgentRunner = self._local
        """Where the agents run (:class:`AgentRunner`): here by default. A durable engine runs
        each agent call as an activity instead (:meth:`run_here` on a host loaded with this one's
        history and state, in a worker); the decisions are still made here."""
        self._journal: TurnJournal | None = None
        self.superstep_per_hop = True
        """Run each agent in its own superstep, so that a checkpoint is taken after every hop.

        :class:`HandoffWorkflow` sets it for each run: on when the run checkpoints, off otherwise
        (the whole turn then runs in one superstep, which saves agent_framework's superstep
        machinery, about 0.2 ms per hop). A host in a workflow of your own keeps it on.
        """
        self._saved: list[dict[str, Any]] = []  # to_dict() of history[: len(_saved)], reused
        self._outlet = TurnOutlet(settings, id)
        self.kept_events = self._outlet.kept  # kept when asked: the Temporal workflow's host

    @property
    def journal(self) -> TurnJournal | None:
        """Where the host's progress is saved (a hosted conversation's store), if anywhere."""
        return self._journal

    @journal.setter
    def journal(self, journal: TurnJournal | None) -> None:
        self._journal = journal
        self._engine.saves = journal is not None  # steps carry snapshots only for it

    # -- what it holds ----------------------------------------------------------------------------

    @property
    def history(self) -> Sequence[Message]:
        """The shared conversation so far (read-only view)."""
        return self._engine.ledger.history

    @property
    def manager(self) -> GroupChatManager:
        """The manager that decides who speaks."""
        return self._engine.manager

    @property
    def conversation_id(self) -> str | None:
        """The hosted conversation's id, given to handoff hooks (``ConversationHost`` sets it)."""
        return self._engine.ledger.conversation_id

    @conversation_id.setter
    def conversation_id(self, value: str | None) -> None:
        self._engine.ledger.conversation_id = self._outlet.conversation_id = value

    @property
    def agent_timeout(self) -> float | None:
        """Seconds one agent call may take (``None``: no limit); past it the turn ends."""
        return self._engine.agent_timeout

    @agent_timeout.setter
    def agent_timeout(self, value: float | None) -> None:
        self._engine.agent_timeout = value

    @property
    def turn_timeout(self) -> float | None:
        """Seconds a turn may take (``None``: no limit), from its start or where it resumed.

        It resumes after a restore, or once its requests were answered.
        """
        return self._engine.turn_timeout

    @turn_timeout.setter
    def turn_timeout(self, value: float | None) -> None:
        self._engine.turn_timeout = value

    @property
    def hook_timeout(self) -> float | None:
        """Seconds an edge's hook may take to answer (``None``: no limit of its own)."""
        return self.settings.hook_timeout

    @property
    def max_delegation_depth(self) -> int:
        """How deep delegations may nest."""
        return self.settings.max_delegation_depth

    @property
    def model_calls(self) -> ModelCallLog | None:
        """What each model received in the open turn, when the workflow records it.

        With ``with_model_inputs`` its participants' recorders write here, each turn's result
        takes the calls. ``None``: nothing is recorded.
        """
        return self._engine.ledger.model_calls

    @property
    def last_result(self) -> HandoffTurnResult | None:
        """The result of the last turn that ended in this host."""
        return self._engine.ledger.last_result

    @property
    def pending_agent(self) -> str | None:
        """The agent whose requests the open turn waits for (``None``: it waits for none)."""
        agent = self._engine.ledger.pending.agent
        return None if agent is None else str(agent)

    @property
    def pending_requests(self) -> list[Content]:
        """The requests (approvals, external calls) the open turn waits for."""
        return self._engine.ledger.pending.unanswered

    @property
    def next_agent(self) -> str | None:
        """The agent that runs next in the open turn (``None`` between turns)."""
        return self._engine.ledger.next

    @property
    def turn_open(self) -> bool:
        """True while a user turn has started and not yet ended."""
        return self._engine.ledger.turn is not None

    @property
    def speaker(self) -> str | None:
        """The agent that ran last (it ended the last turn, between turns)."""
        return self._engine.ledger.speaker

    @property
    def active_agent(self) -> str | None:
        """The agent the conversation is with: where the open turn goes on, or the next starts.

        In an open turn, the agent whose requests it waits for, else the one about to run (saved
        before it is called); between turns, the agent that ended the last one.
        """
        return self._engine.ledger.active_agent

    def view_of(self, agent: str) -> list[Message]:
        """What ``agent`` would receive if it ran now: its view of the conversation.

        Without its edges' input filters, which run (they may wait) when the agent runs.
        """
        return self._local.view_of(agent)

    def routes_of(self, name: str) -> Mapping[str, HandoffRoute]:
        """Agent ``name``'s handoff routes, by tool name."""
        return self._participants[name].routes

    def route_of(self, name: str, tool_name: str) -> HandoffRoute:
        """The route a call of agent ``name`` to ``tool_name`` reads as.

        One of its handoff routes, or, for a handoff it does not have, the route it would be.
        """
        return self._participants[name].route_of(tool_name)

    async def run_here(
        self,
        call: AgentCall,
        streams: Streams | None = None,
        *,
        experts_apart: bool = False,
        so_far: AgentRun | None = None,
    ) -> AgentRun:
        """Run ``call`` here, on the conversation as it stands, within ``call.seconds``.

        What :class:`LocalAgentRunner` does, and a worker does for a durable engine. The
        conversation is not changed: the host that sent the call takes the run and decides.
        ``experts_apart``: the agent's delegate calls come back due instead of running here
        (``AgentRun.due``); ``so_far``: the run goes on from there, once they answered.
        """
        return await self._local.run(call, streams, experts_apart=experts_apart, so_far=so_far)

    async def ask_here(self, frame: DelegationFrame, streams: Streams | None = None) -> AgentRun:
        """Ask the due expert of ``frame`` here, as its caller's run would have.

        A worker does this for a durable engine that runs each expert of a fan-out apart.
        """
        return await self._local.ask(frame, streams)

    # -- handlers ---------------------------------------------------------------------------------

    @handler
    async def handle_text(self, message: str, ctx: HostContext) -> None:
        """A user message as plain text."""
        await self._begin_turn([Message(role="user", contents=[message])], None, ctx)

    @handler
    async def handle_message(self, message: Message, ctx: HostContext) -> None:
        """One user message."""
        await self._begin_turn([message], None, ctx)

    @handler
    async def handle_messages(self, messages: list[Message], ctx: HostContext) -> None:
        """Several input messages (e.g. prior history plus the new user message)."""
        await self._begin_turn(messages, None, ctx)

    @handler
    async def handle_batch(self, message: MessageBatch, ctx: HostContext) -> None:
        """Several input messages, as :class:`HandoffWorkflow` passes a list.

        Found before ``handle_messages``: its type check is one ``isinstance``, not one per message.
        """
        await self._begin_turn(message, None, ctx)

    @handler
    async def handle_user_turn(self, turn: UserTurn, ctx: HostContext) -> None:
        """A user turn with the caller's instruction for where it starts."""
        await self._begin_turn(turn.messages, turn.return_to_previous, ctx)

    @handler
    async def handle_hop(self, hop: _Hop, ctx: HostContext) -> None:
        """Run the next speaker of the current turn."""
        with self._outlet.failing():
            step = self._engine.hop(hop.agent, _now(), no_handoffs=hop.no_handoffs)
            await self._drive(step, ctx)

    @handler
    async def handle_resume(self, message: ResumeTurn, ctx: HostContext) -> None:
        """Run the agent the open turn was about to call, if there is one."""
        del message
        step = self._engine.resume(_now())
        if step is not None:
            with self._outlet.failing():
                await self._drive(step, ctx)

    @handler
    async def handle_reissue(self, message: ReissueRequests, ctx: HostContext) -> None:
        """Emit the pending requests again, under their ids, so that they can be answered."""
        del message
        await self._outlet.ask(self._engine.ledger.pending.unanswered, ctx)

    @response_handler
    async def handle_response(
        self, original_request: Content, response: Content, ctx: HostContext
    ) -> None:
        """An answer to a tool approval or an external function call; the turn goes on.

        A wrong answer (the wrong content type) is reported as an ``error`` event and the request
        stays pending under the same id, so nothing is lost: answer it again. An answer that
        leaves other requests waiting is saved (a hosted conversation's store), and the turn
        waits for the others.
        """
        request_id = str(original_request.id)
        try:
            complete = self._engine.answer(request_id, response)
        except (TypeError, ValueError) as error:
            logger.warning("rejected an answer to request %s: %s", request_id, error)
            await ctx.add_event(WorkflowEvent.error(error))
            if request_id in self._engine.ledger.pending.requests:
                await ctx.request_info(original_request, Content, request_id=request_id)
            return
        if not complete:  # saved, so that a restart or the next call keeps this answer
            await self._record(self._engine.answered_so_far())
            return
        with self._outlet.failing():
            await self._drive(self._engine.after_answers(_now()), ctx)

    # -- the driver ---------------------------------------------------------------------------

    async def _begin_turn(
        self,
        messages: Sequence[Message],
        return_to_previous: bool | None,  # noqa: FBT001 - a tri-state, passed through
        ctx: HostContext,
    ) -> None:
        engine = self._engine
        refusal = engine.refusal(messages)
        if refusal is not None:
            raise refusal
        self._outlet.open()
        with self._outlet.failing():
            step = await engine.begin(messages, return_to_previous, _now())
            await self._drive(step, ctx)

    async def _drive(self, step: Step, ctx: HostContext) -> None:
        """Carry out the engine's steps until the turn ends, waits or moves to a new superstep.

        A decided hop, a wait and the turn's end are saved first; each step's trail is emitted
        before it is carried out. With ``superstep_per_hop`` an agent decided after another
        ran in this superstep starts in the next.
        """
        engine, outlet = self._engine, self._outlet
        ran_agent = False
        while isinstance(step, Hop | RunAgent):
            if isinstance(step, Hop):
                await self._record(step.snapshot)
                await outlet.emit(step.trail, ctx)
                if self.superstep_per_hop and ran_agent:
                    await ctx.send_message(_Hop(step.agent, step.no_handoffs))
                    return
                step = engine.hop(step.agent, _now(), no_handoffs=step.no_handoffs)
                continue
            await outlet.emit(step.trail, ctx)
            ran_agent = ran_agent or step.call.kind == "run"
            try:
                with outlet.trace().active():
                    run = await self.runner.run(step.call, outlet.streams(ctx))
            except DeadlinePassedError:  # not a TimeoutError of the agent's own: that is raised
                step = engine.cut_short(_now())
                continue
            except BaseException:
                engine.failed()  # answers it carried out wait again, to be answered again
                raise
            step = await engine.proceed(run, _now())
        await self._record(step.snapshot)
        await outlet.emit(step.trail, ctx)
        if isinstance(step, Wait):
            await outlet.wait(step.requests, ctx)
        else:
            await outlet.finish(step, ctx)

    async def _record(self, snapshot: HostSnapshot | None) -> None:
        """Let the journal (a hosted conversation's store) save ``snapshot``, if there is one."""
        if self._journal is not None and snapshot is not None:
            await self._journal.record(snapshot)

    # -- state: checkpoints and hosted conversations ---------------------------------------------

    def abandon_turn(self, event: TurnAbandonedEvent) -> HandoffTurnResult:
        """Close the open turn without running anything more; its result (status ``abandoned``).

        Requests it waited for get a "not answered" result, so that no call is left without one
        and the history stays valid for every provider. The turn, from the user's input on,
        stays in the history but leaves every agent's view: whatever made it fail (a message
        a provider refuses, say) does not reach a model again. Used by ``ConversationHost`` for
        a turn that keeps failing, and by ``ConversationHost.abandon``.
        """
        result = self._engine.abandon(event)
        self._outlet.abandoned(event)
        return result

    def state(self) -> HostState:
        """The host's small state: everything but the history (which is append-only)."""
        return self._engine.state()

    def progress(self) -> HostSnapshot:
        """The conversation and the state as they stand: what the journal is handed."""
        return self._engine.snapshot()

    def snapshot(self) -> dict[str, Any]:
        """:meth:`state` as JSON."""
        return encode_host_state(self._engine.state())

    def release(self) -> "KeptConversation":
        """Give the conversation up, between turns: what to :meth:`take` it back with.

        The host then holds no conversation (an empty one), ready for another. What is kept is
        the history, the state and the agents' views of it (so they are not rebuilt).
        """
        engine = self._engine
        kept = KeptConversation(engine.ledger.history, engine.state(), self._local.kept_views())
        self.load([], HostState())  # a new list: the kept one is the conversation's own
        self.journal, self.conversation_id = None, None
        return kept

    def take(self, kept: "KeptConversation") -> None:
        """Hold the conversation another host released (:meth:`release`), as it was."""
        self.load(kept.history, kept.state)
        self._local.keep_views(kept.views)

    def load(self, history: Sequence[Message], state: HostState, *, strict: bool = True) -> None:
        """Replace the host's conversation and state with saved ones (see :meth:`state`).

        With ``strict=False`` an open turn whose handoff payloads no longer fit their models keeps
        them as saved (JSON), and a manager state that no longer loads starts afresh: enough to
        abandon that turn (the manager's state is reset at every new turn anyway).

        Raises:
            CorruptStateError: (``strict``) a payload or the manager's state does not load.
        """
        self._engine.load(history, state, strict=strict)
        self._saved = []

    @override
    async def on_checkpoint_save(self) -> dict[str, Any]:
        """History (each message serialised once) and :meth:`snapshot`, as JSON."""
        history = self._engine.ledger.history
        self._saved.extend(message.to_dict() for message in history[len(self._saved) :])
        return {**self.snapshot(), "history": list(self._saved)}

    @override
    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`on_checkpoint_save` wrote.

        Raises:
            SchemaVersionError: the state was written by a newer version of handoff_builder.
            CorruptStateError: the state is not valid.
        """
        saved, host_state = decode_checkpoint(state, f"Saved state of executor {self.id!r}")
        self.load([Message.from_dict(item) for item in saved], host_state)
        self._saved = saved


@dataclass(frozen=True)
class KeptConversation:
    """A conversation a host released between turns: its history, its state, its views."""

    history: list[Message]
    state: HostState
    views: Views


def _now() -> float:
    """The driver's clock, the event loop's (a Temporal workflow's is its own deterministic one)."""
    return asyncio.get_running_loop().time()
