"""GroupChatManager is a small public base: another policy reuses the host as is."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import pytest
from agent_framework import (
    Content,
    FunctionTool,
    InMemoryCheckpointStorage,
    Message,
    WorkflowBuilder,
)
from typing_extensions import override

from handoff_builder import (
    AgentReply,
    ConversationHost,
    Decision,
    EndTurn,
    EscalationEvent,
    GroupChatHost,
    GroupChatManager,
    HandoffCall,
    HandoffGoal,
    HandoffManager,
    HandoffRequest,
    HandoffRoute,
    HandoffTurnResult,
    HandoffWorkflowBuilder,
    HostSettings,
    ManagerSettings,
    NextAgent,
    Participant,
    TurnStart,
)
from handoff_builder.stores import ConversationStore
from handoff_builder.testing import (
    call_tool,
    client_of,
    handoff_to,
    received,
    reply,
    scripted_agent,
)


class RoundRobin(GroupChatManager):
    """Each agent speaks once per user message, in order."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(max_iterations=10)
        self.names = list(names)
        self.next_index = 0

    def _next(self) -> Decision:
        if self.next_index >= len(self.names):
            return EndTurn()
        name = self.names[self.next_index]
        self.next_index += 1
        return NextAgent(name)

    @override
    async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
        self.next_index = 0
        return self._next()

    @override
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        return self._next()

    @override
    def save_state(self) -> dict[str, Any]:
        return {"next_index": self.next_index}

    @override
    def restore_state(self, state: Mapping[str, Any]) -> None:
        self.next_index = int(state.get("next_index", 0))


async def test_round_robin_manager_on_the_group_chat_host() -> None:
    writer = scripted_agent("writer", reply("Draft: hello world."))
    critic = scripted_agent("critic", reply("Looks good."))
    host = GroupChatHost(
        participants={"writer": Participant(writer), "critic": Participant(critic)},
        manager=RoundRobin(["writer", "critic"]),
        apology="Sorry.",
    )
    builder = WorkflowBuilder(start_executor=host)
    cast(Any, builder).add_edge(host, host)  # agent_framework 1.26 leaves its condition untyped
    workflow = builder.build()

    result = await workflow.run("Write a greeting.")
    [turn] = [o for o in result.get_outputs() if isinstance(o, HandoffTurnResult)]
    assert [(m.author_name, m.text) for m in turn.messages] == [
        ("writer", "Draft: hello world."),
        ("critic", "Looks good."),
    ]
    assert turn.active_agent == "critic"
    assert turn.status == "completed"
    assert client_of(critic).calls[0].texts == ["Write a greeting.", "Draft: hello world."]


def test_the_hosts_former_keywords_still_work_with_a_warning() -> None:
    writer = Participant(scripted_agent("writer", reply("Draft.")))
    with pytest.warns(DeprecationWarning, match=r"GroupChatHost\(agent_timeout, experts=\.\.\.\)"):
        host = GroupChatHost(
            participants={"writer": writer},
            manager=RoundRobin(["writer"]),
            agent_timeout=5.0,
            experts=None,
        )
    assert host.agent_timeout == 5.0
    assert host.settings.experts == {}
    assert host.turn_timeout == HostSettings().turn_timeout


class EveryoneOnce(GroupChatManager):
    """Plugged in through the builder: every participant answers once, initial agent first."""

    def __init__(self, settings: ManagerSettings) -> None:
        super().__init__(max_iterations=settings.max_iterations)
        self.order = [settings.initial_agent] + [
            name for name in settings.agents if name != settings.initial_agent
        ]
        self.spoken = 0

    @override
    async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
        self.spoken = 1
        return NextAgent(self.order[0])

    @override
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        if self.spoken >= len(self.order):
            return EndTurn()
        self.spoken += 1
        return NextAgent(self.order[self.spoken - 1])


async def test_a_custom_manager_through_the_builder_is_hosted(store: ConversationStore) -> None:
    a = scripted_agent("a", reply("A speaks."), reply("A again."))
    b = scripted_agent("b", reply("B speaks."), reply("B again."))
    builder = HandoffWorkflowBuilder(a).add_participants(b).with_manager(EveryoneOnce)
    host = ConversationHost(builder, store)

    first = await host.send("c1", "Hello")
    second = await host.send("c1", "Again")

    assert [m.text for m in first.messages] == ["A speaks.", "B speaks."]
    assert [m.text for m in second.messages] == ["A again.", "B again."]
    # The manager runs in the hosted conversation: b read the whole stored history.
    assert client_of(b).calls[1].texts == ["Hello", "A speaks.", "B speaks.", "Again", "A again."]


class CountingHandoffs(HandoffManager):
    """A HandoffManager subclass is a factory too; it sees every decision."""

    decisions: ClassVar[list[str]] = []

    @override
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        decision = await super().decide(history, reply)
        CountingHandoffs.decisions.append(f"{reply.agent}: {type(decision).__name__}")
        return decision


async def test_a_handoff_manager_subclass_through_the_builder() -> None:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."))
    billing = scripted_agent("billing", reply("Refunded."))
    CountingHandoffs.decisions = []
    workflow = (
        HandoffWorkflowBuilder(triage)
        .with_handoff(triage, billing)
        .with_manager(CountingHandoffs)
        .build()
    )

    result = await workflow.run("I was charged twice")

    assert result.get_outputs()[-1].text == "Refunded."
    assert CountingHandoffs.decisions == ["triage: NextAgent", "billing: EndTurn"]


def test_with_manager_needs_a_callable_that_makes_a_manager() -> None:
    triage = scripted_agent("triage")
    builder = HandoffWorkflowBuilder(triage)
    with pytest.raises(TypeError, match=r"^factory must be callable, not str\.$"):
        builder.with_manager("round robin")  # type: ignore[arg-type]
    builder.with_manager(lambda settings: object())  # type: ignore[arg-type, return-value]
    with pytest.raises(
        TypeError, match=r"^The manager factory returned a object, not a GroupChatManager\.$"
    ):
        builder.build()


class OneAgent(GroupChatManager):
    """Every turn starts at the initial agent; subclasses decide what follows."""

    def __init__(self, settings: ManagerSettings, max_iterations: int | None = None) -> None:
        super().__init__(max_iterations=max_iterations or settings.max_iterations)
        self.agent = settings.initial_agent

    @override
    async def start_turn(self, history: Sequence[Message], start: TurnStart) -> Decision:
        return NextAgent(self.agent)


class Forever(OneAgent):
    """A manager with a bug: it never ends the turn."""

    def __init__(self, settings: ManagerSettings) -> None:
        super().__init__(settings, max_iterations=5)

    @override
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        return NextAgent(self.agent)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["one-superstep", "checkpointed"])
async def test_the_host_enforces_max_iterations_whatever_the_manager(checkpointed: bool) -> None:
    looping = scripted_agent("looping", respond_with=lambda call: reply("again"))
    workflow = HandoffWorkflowBuilder(looping).with_manager(Forever).build()
    storage = InMemoryCheckpointStorage() if checkpointed else None

    result = await workflow.run("go", checkpoint_storage=storage)

    turn = result.get_outputs()[-1]
    assert isinstance(turn, HandoffTurnResult)
    assert len(client_of(looping).calls) == 5
    assert turn.status == "max_iterations"
    assert turn.escalation == EscalationEvent("max_iterations", "looping", 5, "looping")


class NotesOnAnswers(OneAgent):
    """When an agent waits for answers, it carries on with a note from the manager first."""

    @override
    async def decide(self, history: Sequence[Message], reply: AgentReply) -> Decision:
        if reply.unfinished:
            note = Message(role="user", contents=["(the back office answered)"])
            return NextAgent(reply.agent, input=(note,))
        return EndTurn()


async def test_a_decisions_input_survives_the_wait_for_answers() -> None:
    lookup = FunctionTool(
        name="lookup",
        description="Answered by the application.",
        input_model={"type": "object", "properties": {}, "required": []},
    )
    clerk = scripted_agent("clerk", call_tool("lookup"), reply("Found it."), tools=[lookup])
    workflow = HandoffWorkflowBuilder(clerk).with_manager(NotesOnAnswers).build()

    first = await workflow.run("find my order")
    [request] = first.get_request_info_events()
    answer = Content.from_function_result(call_id=request.data.call_id, result="order 7")
    second = await workflow.run(responses={request.request_id: answer})

    assert second.get_outputs()[-1].messages[-1].text == "Found it."
    assert received(clerk).texts[-1] == "(the back office answered)"
    assert received(clerk).rendered.splitlines()[-2].endswith(": order 7")


# -- review_handoff, the earlier name of vet_handoff -----------------------------------------------

REFUSED = "Error: this manager refuses every handoff."


def refuse(request: HandoffRequest) -> HandoffCall:
    return HandoffCall(
        request.route, request.argument, request.call_id, "rejected", REFUSED, "vetoed"
    )


def two_desks() -> tuple[HandoffWorkflowBuilder, Any, Any]:
    triage = scripted_agent("triage", handoff_to("billing", goal="Refund."), reply("Mine, then."))
    billing = scripted_agent("billing", reply("Refunded."))
    return HandoffWorkflowBuilder(triage).with_handoff(triage, billing), triage, billing


async def test_a_manager_that_overrides_review_handoff_warns_once_and_is_still_asked() -> None:
    with pytest.warns(DeprecationWarning, match="OldStyle overrides") as warned:

        class OldStyle(HandoffManager):
            def review_handoff(  # pyright: ignore[reportImplicitOverride]
                self, request: HandoffRequest, earlier: Sequence[HandoffCall]
            ) -> HandoffCall:
                return refuse(request)

    assert [str(w.message) for w in warned] == [
        "test_a_manager_that_overrides_review_handoff_warns_once_and_is_still_asked.<locals>."
        "OldStyle overrides GroupChatManager.review_handoff, which is now vet_handoff: rename the "
        "method (review_handoff goes in a later release)."
    ]
    assert warned[0].filename == __file__  # it points at the class, not at handoff_builder
    builder, triage, billing = two_desks()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # running it warns no more
        result = (await builder.with_manager(OldStyle).build().run("refund")).get_outputs()[-1]

    assert (result.status, result.active_agent, result.text) == (
        "completed",
        "triage",
        "Mine, then.",
    )
    assert REFUSED in received(triage).rendered
    assert client_of(billing).calls == []


async def test_an_old_override_that_calls_super_review_handoff_gets_the_managers_own_vetting() -> (
    None
):
    """super().review_handoff() runs HandoffManager.vet_handoff: the handoff goes."""
    asked: list[str] = []
    with pytest.warns(DeprecationWarning, match="Counting overrides"):

        class Counting(HandoffManager):
            def review_handoff(  # pyright: ignore[reportImplicitOverride]
                self, request: HandoffRequest, earlier: Sequence[HandoffCall]
            ) -> HandoffCall:
                asked.append(request.route.tool_name)
                return super().review_handoff(request, earlier)

    builder, _, _ = two_desks()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = (await builder.with_manager(Counting).build().run("refund")).get_outputs()[-1]

    assert (result.active_agent, result.text) == ("billing", "Refunded.")
    assert asked == ["handoff_to_billing"]


def test_calling_review_handoff_warns_and_vets() -> None:
    class Vetting(RoundRobin):
        @override
        def vet_handoff(
            self, request: HandoffRequest, earlier: Sequence[HandoffCall]
        ) -> HandoffCall:
            return refuse(request)

    route = HandoffRoute("triage", "billing", "handoff_to_billing", "")
    request = HandoffRequest(route, "call_1", HandoffGoal(goal="Refund."))

    with pytest.warns(DeprecationWarning, match="review_handoff is now vet_handoff") as warned:
        call = Vetting(["triage"]).review_handoff(request, ())

    assert (call.outcome, call.result) == ("rejected", REFUSED)
    assert warned[0].filename == __file__
