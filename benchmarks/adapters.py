"""One adapter per framework: a scripted zero-latency fake model + the framework's own handoff feature.

Each ``make_*`` is registered with ``@adapter`` (see common.py for the contract).  Framework imports
live inside the factories so a missing framework only disables its adapter.
"""

from __future__ import annotations

import functools

from common import CHAIN, HANDOFF_TARGET, adapter, next_id, scripted_action

# ============================================================================================
# 0. hand-written floor: list of dicts, active-agent pointer, scripted async "model"

BASELINE_TOOLS = {
    a: ([{"name": f"transfer_to_{t}"}] if (t := HANDOFF_TARGET.get(a)) else []) for a in CHAIN
}


async def _baseline_model(agent: str, messages: list, tools: list, hops: int) -> dict:
    kind, val = scripted_action(agent, hops)
    if kind == "handoff":
        return {
            "role": "assistant",
            "tool_calls": [{"id": next_id(), "name": f"transfer_to_{val}", "args": {}}],
        }
    return {"role": "assistant", "content": val}


@adapter("baseline", note="hand-written loop: list of dicts + active pointer (the floor)")
async def make_baseline(prior: list, hops: int):
    messages = [dict(m) for m in prior]

    async def turn(text: str) -> str:
        messages.append({"role": "user", "content": text})
        active = CHAIN[0]
        while True:
            out = await _baseline_model(active, messages, BASELINE_TOOLS[active], hops)
            messages.append(out)
            calls = out.get("tool_calls")
            if not calls:
                return out["content"]
            call = calls[0]
            target = call["name"].removeprefix("transfer_to_")
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": f"transferred to {target}"}
            )
            active = target

    turn.state = messages  # for memory/checkpoint scripts
    return turn


# ============================================================================================
# 1. Microsoft agent-framework: HandoffBuilder workflow, custom chat client with the same layer
#    stack as OpenAIChatClient (FunctionInvocationLayer, ChatMiddlewareLayer, ChatTelemetryLayer).


@functools.cache
def _af_classes():
    from agent_framework import (
        BaseChatClient,
        ChatMiddlewareLayer,
        ChatResponse,
        Content,
        FunctionInvocationLayer,
        Message,
    )
    from agent_framework.observability import ChatTelemetryLayer

    class ScriptedChatClient(
        FunctionInvocationLayer, ChatMiddlewareLayer, ChatTelemetryLayer, BaseChatClient
    ):
        """Zero-latency scripted model; one instance per agent."""

        def __init__(self, agent: str, hops: int, **kwargs):
            super().__init__(**kwargs)
            self.agent = agent
            self.hops = hops

        def _inner_get_response(self, *, messages, stream, options, **kwargs):
            if stream:
                raise NotImplementedError("benchmarks use non-streaming runs")
            return self._respond()

        async def _respond(self):
            kind, val = scripted_action(self.agent, self.hops)
            if kind == "handoff":
                content = Content.from_function_call(
                    call_id=next_id(), name=f"handoff_to_{val}", arguments="{}"
                )
            else:
                content = Content.from_text(val)
            return ChatResponse(messages=[Message(role="assistant", contents=[content])])

    return ScriptedChatClient


def af_build_workflow(hops: int, checkpoint_storage=None):
    """Fresh HandoffBuilder workflow (a workflow instance holds one conversation's state)."""
    from agent_framework import Agent
    from agent_framework_orchestrations import HandoffBuilder

    client_cls = _af_classes()
    agents = {
        a: Agent(
            client=client_cls(a, hops),
            name=a,
            description=f"{a} agent",
            instructions=f"You are the {a} agent.",
            require_per_service_call_history_persistence=True,
        )
        for a in CHAIN
    }
    b = HandoffBuilder(participants=list(agents.values()), checkpoint_storage=checkpoint_storage)
    b = b.with_start_agent(agents[CHAIN[0]])
    for src, dst in HANDOFF_TARGET.items():
        b = b.add_handoff(agents[src], [agents[dst]])
    return b.enable_return_to_previous(False).build()  # every user turn starts at triage


def af_prior(prior: list):
    from agent_framework import Message

    return [Message(role=m["role"], contents=[m["content"]]) for m in prior]


def af_turn_fn(wf, prior_msgs: list):
    """Return turn(text) driving ``wf``: first turn = run(message), later turns answer the request_info."""
    from agent_framework import Message

    state = {"pending": None}

    async def turn(text: str) -> str:
        user = [Message(role="user", contents=[text])]
        if state["pending"] is None:
            res = await wf.run([*prior_msgs, *user])
        else:
            res = await wf.run(responses={state["pending"]: user})
        reqs = res.get_request_info_events()
        state["pending"] = reqs[-1].request_id if reqs else None
        outs = res.get_outputs()
        return outs[-1].text if outs else ""

    turn.state = wf
    turn.pending = state
    return turn


@adapter(
    "agent_framework",
    packages=("agent-framework-core", "agent-framework-orchestrations"),
    note="HandoffBuilder workflow per conversation, return_to_previous=False",
)
async def make_agent_framework(prior: list, hops: int):
    return af_turn_fn(af_build_workflow(hops), af_prior(prior))


# ============================================================================================
# 2. openai-agents: Agent(handoffs=[...]) + Runner.run, custom Model; history kept by the app
#    (result.to_input_list() + new user message), i.e. the SDK's documented manual-history mode.


@functools.cache
def _oa_agents(hops: int):
    from agents import Agent
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class ScriptedModel(Model):
        def __init__(self, agent: str):
            self.agent = agent

        async def get_response(
            self,
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            *,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
            **kwargs,
        ):
            kind, val = scripted_action(self.agent, hops)
            if kind == "handoff":
                tool_name = next(h.tool_name for h in handoffs if h.agent_name == val)
                out = [
                    ResponseFunctionToolCall(
                        type="function_call",
                        call_id=next_id(),
                        name=tool_name,
                        arguments="{}",
                        id=next_id("fc"),
                        status="completed",
                    )
                ]
            else:
                out = [
                    ResponseOutputMessage(
                        id=next_id("msg"),
                        type="message",
                        role="assistant",
                        status="completed",
                        content=[ResponseOutputText(type="output_text", text=val, annotations=[])],
                    )
                ]
            return ModelResponse(output=out, usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    built = {}
    for a in reversed(CHAIN):
        t = HANDOFF_TARGET.get(a)
        built[a] = Agent(
            name=a,
            instructions=f"You are the {a} agent.",
            model=ScriptedModel(a),
            handoff_description=f"{a} agent",
            handoffs=[built[t]] if t else [],
        )
    return built[CHAIN[0]]


def _oa_make(tracing: bool):
    async def make(prior: list, hops: int):
        from agents import RunConfig, Runner

        start = _oa_agents(hops)
        cfg = RunConfig(tracing_disabled=not tracing)
        history = [dict(m) for m in prior]

        async def turn(text: str) -> str:
            nonlocal history
            result = await Runner.run(
                start, [*history, {"role": "user", "content": text}], run_config=cfg
            )
            history = result.to_input_list()
            return result.final_output

        turn.state = lambda: history
        return turn

    return make


adapter(
    "openai_agents",
    packages=("openai-agents",),
    note="Runner.run, default RunConfig (tracing ON: spans built; export skipped, no API key)",
)(_oa_make(True))
adapter(
    "openai_agents_notrace",
    packages=("openai-agents",),
    note="Runner.run with RunConfig(tracing_disabled=True)",
)(_oa_make(False))


# ============================================================================================
# 3. LangGraph swarm: create_swarm over langchain.agents.create_agent agents, create_handoff_tool,
#    custom BaseChatModel with bind_tools; no checkpointer (app passes history back in).


@functools.cache
def _lg_model_cls():
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ScriptedChatModel(BaseChatModel):
        agent: str
        hops: int

        @property
        def _llm_type(self) -> str:
            return "scripted-fake"

        def bind_tools(self, tools, **kwargs):
            return self.bind(**kwargs)  # a real model also returns a RunnableBinding here

        def _generate(self, messages, stop=None, run_manager=None, **kwargs):
            kind, val = scripted_action(self.agent, self.hops)
            if kind == "handoff":
                msg = AIMessage(
                    content="",
                    tool_calls=[
                        {
                            "name": f"transfer_to_{val}",
                            "args": {},
                            "id": next_id(),
                            "type": "tool_call",
                        }
                    ],
                )
            else:
                msg = AIMessage(content=val)
            return ChatResult(generations=[ChatGeneration(message=msg)])

        async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
            return self._generate(messages, stop, None, **kwargs)

    return ScriptedChatModel


def lg_swarm_graph(hops: int, checkpointer=None):
    from langchain.agents import create_agent
    from langgraph_swarm import create_handoff_tool, create_swarm

    model_cls = _lg_model_cls()
    agents = []
    for a in CHAIN:
        t = HANDOFF_TARGET.get(a)
        tools = [create_handoff_tool(agent_name=t, description=f"Transfer to {t}")] if t else []
        agents.append(
            create_agent(
                model_cls(agent=a, hops=hops),
                tools=tools,
                system_prompt=f"You are the {a} agent.",
                name=a,
            )
        )
    return create_swarm(agents, default_active_agent=CHAIN[0]).compile(checkpointer=checkpointer)


_lg_graph = functools.cache(lg_swarm_graph)


def lg_prior(prior: list):
    from langchain_core.messages import AIMessage, HumanMessage

    cls = {"user": HumanMessage, "assistant": AIMessage}
    return [cls[m["role"]](content=m["content"], id=next_id("m")) for m in prior]


@adapter(
    "langgraph_swarm",
    packages=("langgraph", "langgraph-swarm", "langchain"),
    note="create_swarm + create_handoff_tool, compiled once, no checkpointer",
)
async def make_langgraph_swarm(prior: list, hops: int):
    from langchain_core.messages import HumanMessage

    graph = _lg_graph(hops)
    history = lg_prior(prior)

    async def turn(text: str) -> str:
        nonlocal history
        out = await graph.ainvoke(
            {"messages": [*history, HumanMessage(content=text)], "active_agent": CHAIN[0]}
        )
        history = out["messages"]
        return history[-1].content

    turn.state = lambda: history
    return turn


# ============================================================================================
# 4. Our package (handoff_builder) and its floor.  Both use the same zero-latency fake chat client
#    as the agent_framework adapter (FunctionInvocationLayer, ChatMiddlewareLayer,
#    ChatTelemetryLayer, BaseChatClient), except that a handoff call carries a non-empty
#    ``{"goal": ...}`` argument: our handoff tools take a required ``goal`` and reject an empty one.

HB_GOAL_ARGS = '{"goal": "Refund a double charge."}'
HB_TOOL_PREFIX = "handoff_to_"  # handoff_builder's default tool name is handoff_to_<target name>


@functools.cache
def _hb_client_cls():
    from agent_framework import ChatResponse, Content, Message

    class GoalScriptedChatClient(_af_classes()):
        """ScriptedChatClient whose handoff calls state a goal (one instance per agent)."""

        async def _respond(self):
            kind, val = scripted_action(self.agent, self.hops)
            if kind == "handoff":
                content = Content.from_function_call(
                    call_id=next_id(), name=f"{HB_TOOL_PREFIX}{val}", arguments=HB_GOAL_ARGS
                )
            else:
                content = Content.from_text(val)
            return ChatResponse(messages=[Message(role="assistant", contents=[content])])

    return GoalScriptedChatClient


def _hb_agent(name: str, hops: int, **kwargs):
    from agent_framework import Agent

    return Agent(
        client=_hb_client_cls()(name, hops),
        name=name,
        description=f"{name} agent",
        instructions=f"You are the {name} agent.",
        **kwargs,
    )


@functools.cache
def _hb_agents(hops: int) -> dict:
    """Plain agents, shared by every conversation: handoff_builder never modifies the agents it
    is given and they run without a session, so (like openai_agents) only the workflow is built
    per conversation."""
    return {a: _hb_agent(a, hops) for a in CHAIN}


def hb_builder(hops: int):
    """The scenario's HandoffWorkflowBuilder over the shared agents (not built yet)."""
    from handoff_builder import HandoffWorkflowBuilder

    ag = _hb_agents(hops)
    b = HandoffWorkflowBuilder(ag[CHAIN[0]])  # every user message starts at the initial agent
    for src, dst in HANDOFF_TARGET.items():
        b = b.with_handoff(ag[src], ag[dst])
    return b


def hb_build_workflow(hops: int):
    """Fresh handoff_builder workflow (a built workflow holds one conversation's shared history)."""
    return hb_builder(hops).build()


def hb_turn_fn(wf, prior_msgs: list):
    """turn(text): the first turn passes [*prior, user] (a list of Message), later turns the new
    user Message alone; the workflow keeps the conversation between runs."""
    from agent_framework import Message

    first = [True]

    async def turn(text: str) -> str:
        user = Message(role="user", contents=[text])
        if first[0]:
            first[0] = False
            res = await wf.run([*prior_msgs, user])
        else:
            res = await wf.run(user)
        return res.get_outputs()[-1].text  # a HandoffTurnResult (an AgentResponse)

    turn.state = wf
    return turn


@adapter(
    "handoff_builder",
    packages=("handoff-builder", "agent-framework-core"),
    note="HandoffWorkflowBuilder(triage).with_handoff(...).build(), one workflow per conversation",
)
async def make_handoff_builder(prior: list, hops: int):
    return hb_turn_fn(hb_build_workflow(hops), af_prior(prior))


# --------------------------------------------------------------------------------------------
# The floor for handoff_builder: the agent_framework calls one turn makes, with no orchestration.
#
# What the floor does, exactly:
#   * the app keeps a plain ``list[Message]`` (prior messages converted once, untimed);
#   * a turn appends the user Message, then calls ``await agent.run(history, tools=[tool])`` on
#     triage, then billing, then refunds (hops decides who replies): three bare
#     ``agent_framework.Agent.run`` calls, no session, no workflow, no executor, no events;
#   * each agent that can hand off gets ONE real ``FunctionTool`` per run, ``handoff_to_<target>``
#     with a required string parameter ``goal``, whose function returns "Transferred."; refunds
#     gets no tool (tools=None);
#   * the model's handoff call therefore goes through the real function-invocation loop: argument
#     parsing/validation, a function middleware pipeline, the tool function itself;
#   * the one function middleware (given to the Agent at construction, shared) lets the tool run
#     (``await call_next()``) and then raises ``MiddlewareTermination`` so the tool loop ends after
#     the handoff call with the tool's result (no second model call in that hop) -- the same
#     mechanism handoff_builder and agent-framework's HandoffBuilder use to end a hop;
#   * the response messages (function call + function result, or the reply) are appended to the
#     list and the next agent is the target named by the function call (``handoff_to_<target>``);
#     the turn returns ``response.text`` of the agent that replied.
#   Agents and tools are built once per ``hops`` (untimed) and shared by all conversations.


@functools.cache
def _floor_agents(hops: int) -> tuple[dict, dict]:
    from agent_framework import FunctionTool, MiddlewareTermination, function_middleware

    @function_middleware
    async def stop_after_handoff(context, call_next):
        await call_next()  # run the tool ("Transferred.")
        raise MiddlewareTermination("handoff", result=context.result)

    def transferred(goal: str) -> str:
        return "Transferred."

    schema = {"type": "object", "properties": {"goal": {"type": "string"}}, "required": ["goal"]}
    tools = {
        a: (
            [
                FunctionTool(
                    name=f"{HB_TOOL_PREFIX}{t}",
                    description=f"Transfer to {t}",
                    func=transferred,
                    input_model=schema,
                    approval_mode="never_require",
                )
            ]
            if (t := HANDOFF_TARGET.get(a))
            else None
        )
        for a in CHAIN
    }
    agents = {a: _hb_agent(a, hops, middleware=[stop_after_handoff]) for a in CHAIN}
    return agents, tools


@adapter(
    "floor",
    packages=("agent-framework-core",),
    note="3 bare agent_framework Agent.run calls per turn over a list[Message] (no orchestration)",
)
async def make_floor(prior: list, hops: int):
    from agent_framework import Message

    agents, tools = _floor_agents(hops)
    history = af_prior(prior)

    async def turn(text: str) -> str:
        history.append(Message(role="user", contents=[text]))
        active = CHAIN[0]
        while True:
            response = await agents[active].run(history, tools=tools[active])
            history.extend(response.messages)
            target = None
            for message in response.messages:
                for content in message.contents:
                    if content.type == "function_call" and (content.name or "").startswith(
                        HB_TOOL_PREFIX
                    ):
                        target = content.name[len(HB_TOOL_PREFIX) :]
            if target is None:
                return response.text
            active = target

    turn.state = history
    return turn
