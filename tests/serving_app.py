"""A hosted support desk served over HTTP for the serving tests: ``python -m tests.serving_app
KIND PORT DB``.

KIND is ``devui`` (agent_framework's DevUI server, its OpenAI-compatible API) or ``agui`` (the
AG-UI endpoint on a FastAPI app, at ``/desk``, behind ``check_agui_request``). The desk: triage
hands every first message to billing; billing answers with every user message it has read, so a
reply shows any cross-talk. A message with ``HANG`` in it makes billing's first call for it hang
until the run is cancelled (a client that disconnects mid-stream). The AG-UI app also answers
``GET /calls``: each agent's model calls so far, as the last user text each call saw.
The conversations live in a SQLite file (DB), so a restarted server remembers them.
"""

from __future__ import annotations

import sys

from agent_framework import Agent

from handoff_builder import ConversationHost, HandoffWorkflowBuilder
from handoff_builder.stores import SqliteConversationStore
from handoff_builder.testing import (
    ModelCall,
    Step,
    client_of,
    handoff_to,
    never_answer,
    reply,
    scripted_agent,
)

TOKEN = "serving-test-token"  # noqa: S105 - a test server's bearer token
HANG = "[the line drops]"


def desk_agents() -> tuple[Agent, Agent]:
    """triage and billing; billing hangs once on each message with ``HANG`` in it."""
    hung: set[str] = set()

    def billing_answer(call: ModelCall) -> Step:
        if HANG in call.user_text and call.user_text not in hung:
            hung.add(call.user_text)
            return never_answer()
        users = [m.text for m in call.messages if m.role == "user" and m.author_name is None]
        return reply("billing read: " + " | ".join(users))

    triage = scripted_agent("triage", respond_with=lambda call: handoff_to("billing", goal="Help."))
    return triage, scripted_agent("billing", respond_with=billing_answer)


def desk(db: str, agents: tuple[Agent, Agent] | None = None) -> ConversationHost:
    triage, billing = agents or desk_agents()
    builder = HandoffWorkflowBuilder(triage).with_handoff(triage, billing)
    return ConversationHost(builder, SqliteConversationStore(db))


def main(kind: str, port: str, db: str) -> None:
    agents = desk_agents()
    agent = desk(db, agents).as_agent(name="desk", description="A support desk")
    if kind == "devui":
        from agent_framework_devui import serve

        from handoff_builder import devui_agent

        serve(entities=[devui_agent(agent)], port=int(port), auth_token=TOKEN)
        return
    import uvicorn
    from agent_framework_ag_ui import add_agent_framework_fastapi_endpoint
    from fastapi import Depends, FastAPI

    from handoff_builder import agui_agent, check_agui_request

    def scope() -> str:  # one stable scope: the conversations are found again after a restart
        return "support-desk"

    app = FastAPI()
    add_agent_framework_fastapi_endpoint(
        app, agui_agent(agent), "/desk", authorization_scope_resolver=scope,
        dependencies=[Depends(check_agui_request)],
    )  # fmt: skip

    @app.get("/calls")
    def calls() -> dict[str, list[str]]:
        return {a.name or "": [c.user_text for c in client_of(a).calls] for a in agents}

    uvicorn.run(app, host="127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    main(*sys.argv[1:4])
