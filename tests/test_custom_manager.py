"""GroupChatManager is a small public base: another policy reuses the host as is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_framework import Message, WorkflowBuilder
from typing_extensions import override

from handoff_builder import GroupChatHost, GroupChatManager, HandoffTurnResult, Participant
from handoff_builder.testing import client_of, reply, scripted_agent


class RoundRobin(GroupChatManager):
    """Each agent speaks once per user message, in order."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(max_iterations=10)
        self.names = list(names)
        self.next_index = 0

    @override
    async def select_next_agent(
        self, history: Sequence[Message], speaker: str | None
    ) -> str | None:
        if speaker is None:
            self.next_index = 0
        if self.next_index >= len(self.names):
            return None
        name = self.names[self.next_index]
        self.next_index += 1
        return name

    @override
    def save_state(self) -> dict[str, Any]:
        return {**super().save_state(), "next_index": self.next_index}

    @override
    def restore_state(self, state: Mapping[str, Any]) -> None:
        super().restore_state(state)
        self.next_index = int(state.get("next_index", 0))


async def test_round_robin_manager_on_the_group_chat_host() -> None:
    writer = scripted_agent("writer", reply("Draft: hello world."))
    critic = scripted_agent("critic", reply("Looks good."))
    host = GroupChatHost(
        participants={"writer": Participant(writer), "critic": Participant(critic)},
        manager=RoundRobin(["writer", "critic"]),
        apology="Sorry.",
    )
    workflow = WorkflowBuilder(start_executor=host).add_edge(host, host).build()

    result = await workflow.run("Write a greeting.")
    [turn] = [o for o in result.get_outputs() if isinstance(o, HandoffTurnResult)]
    assert [(m.author_name, m.text) for m in turn.messages] == [
        ("writer", "Draft: hello world."),
        ("critic", "Looks good."),
    ]
    assert turn.active_agent == "critic"
    assert not turn.escalated
    assert client_of(critic).calls[0].texts == ["Write a greeting.", "Draft: hello world."]
