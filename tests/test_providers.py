"""Providers: real clients from the environment, one-line errors when something is missing."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from agent_framework import Agent

from handoff_builder import HandoffWorkflowBuilder, ModelConnectionError
from handoff_builder.providers import APIS, OpenAIApi, ProviderConfigurationError, chat_client
from handoff_builder.testing import reply, scripted_agent


def test_openai_client_from_the_environment() -> None:
    client = chat_client("openai", environ={"OPENAI_API_KEY": "k", "OPENAI_MODEL": "gpt-test"})
    assert type(client).__name__ == "OpenAIChatCompletionClient"
    assert client.model == "gpt-test"


@pytest.mark.parametrize(
    ("api", "variable", "client_class"),
    [
        (None, None, "OpenAIChatCompletionClient"),
        ("chat-completions", None, "OpenAIChatCompletionClient"),
        ("responses", None, "OpenAIChatClient"),
        (None, "responses", "OpenAIChatClient"),
        (None, "chat-completions", "OpenAIChatCompletionClient"),
        ("chat-completions", "responses", "OpenAIChatCompletionClient"),
    ],
)
@pytest.mark.parametrize("provider", ["openai", "azure"])
def test_the_api_picks_agent_framework_s_client(
    provider: str, api: OpenAIApi | None, variable: str | None, client_class: str
) -> None:
    """Chat Completions unless asked otherwise (``api=``, else HANDOFF_BUILDER_OPENAI_API)."""
    environ = {
        "OPENAI_API_KEY": "k",
        "AZURE_OPENAI_ENDPOINT": "https://example.openai.azure.com",
        "AZURE_OPENAI_DEPLOYMENT": "gpt-deployment",
        "AZURE_OPENAI_API_KEY": "k",
    }
    if variable is not None:
        environ["HANDOFF_BUILDER_OPENAI_API"] = variable
    client = chat_client(provider, api=api, environ=environ)
    assert type(client).__name__ == client_class
    assert client.model == ("gpt-4o-mini" if provider == "openai" else "gpt-deployment")


@pytest.mark.parametrize(
    ("api", "variable", "message"),
    [
        (
            "assistants",
            None,
            "Unknown OpenAI API 'assistants' (api); choose one of: chat-completions, responses.",
        ),
        (
            None,
            "chat_completions",
            "Unknown OpenAI API 'chat_completions' (HANDOFF_BUILDER_OPENAI_API); choose one of: "
            "chat-completions, responses.",
        ),
    ],
)
def test_an_unknown_api_is_one_line(api: Any, variable: str | None, message: str) -> None:
    environ = {"OPENAI_API_KEY": "k"}
    if variable is not None:
        environ["HANDOFF_BUILDER_OPENAI_API"] = variable
    with pytest.raises(ProviderConfigurationError) as failure:
        chat_client("openai", api=api, environ=environ)
    assert str(failure.value) == message


def test_azure_client_with_a_key() -> None:
    client = chat_client(
        "azure",
        environ={
            "AZURE_OPENAI_ENDPOINT": "https://example.openai.azure.com",
            "AZURE_OPENAI_DEPLOYMENT": "gpt-deployment",
            "AZURE_OPENAI_API_KEY": "k",
        },
    )
    assert client.model == "gpt-deployment"


@pytest.mark.parametrize(
    ("provider", "environ", "message"),
    [
        ("openai", {}, "Set OPENAI_API_KEY to use the openai provider."),
        ("openai", {"OPENAI_API_KEY": "  "}, "Set OPENAI_API_KEY to use the openai provider."),
        ("azure", {}, "Set AZURE_OPENAI_ENDPOINT to use the azure provider."),
        (
            "azure",
            {"AZURE_OPENAI_ENDPOINT": "https://x"},
            "Set AZURE_OPENAI_MODEL (or AZURE_OPENAI_CHAT_COMPLETION_MODEL, or "
            "AZURE_OPENAI_DEPLOYMENT) to use the azure provider.",
        ),
        ("gemini", {}, "Unknown provider 'gemini'; choose one of: scripted, openai, azure."),
        (
            "scripted",
            {},
            "The scripted provider has no chat client: each agent gets its own script.",
        ),
    ],
)
def test_configuration_errors_are_one_line(
    provider: str, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ProviderConfigurationError) as failure:
        chat_client(provider, environ=environ)
    assert str(failure.value) == message
    assert "\n" not in str(failure.value)


def test_azure_without_a_key_needs_azure_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real_import = importlib.import_module

    def no_identity(name: str, package: str | None = None) -> object:
        if name == "azure.identity":
            raise ImportError(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", no_identity)
    environ = {"AZURE_OPENAI_ENDPOINT": "https://x", "AZURE_OPENAI_DEPLOYMENT": "d"}
    with pytest.raises(ProviderConfigurationError, match=r"install azure-identity to sign in"):
        chat_client("azure", environ=environ)


def test_agent_options_cap_output_tokens() -> None:
    from handoff_builder.providers import (
        DEFAULT_MAX_OUTPUT_TOKENS,
        ProviderConfigurationError,
        agent_options,
    )

    assert agent_options(environ={}) == {"max_tokens": DEFAULT_MAX_OUTPUT_TOKENS}
    assert agent_options(environ={"HANDOFF_BUILDER_MAX_OUTPUT_TOKENS": "256"}) == {
        "max_tokens": 256
    }
    assert agent_options(64, environ={"HANDOFF_BUILDER_MAX_OUTPUT_TOKENS": "256"}) == {
        "max_tokens": 64
    }
    for bad in ("0", "-3", "lots"):
        with pytest.raises(ProviderConfigurationError, match="positive whole number"):
            agent_options(environ={"HANDOFF_BUILDER_MAX_OUTPUT_TOKENS": bad})


def test_agent_framework_s_own_model_names_come_first() -> None:
    environ = {"OPENAI_API_KEY": "k", "OPENAI_MODEL": "older", "OPENAI_CHAT_COMPLETION_MODEL": "m"}
    assert chat_client("openai", environ=environ).model == "m"
    azure = {
        "AZURE_OPENAI_ENDPOINT": "https://example.openai.azure.com",
        "AZURE_OPENAI_API_KEY": "k",
        "AZURE_OPENAI_MODEL": "gpt-deployment",
        "AZURE_OPENAI_DEPLOYMENT": "legacy",
    }
    assert chat_client("azure", environ=azure).model == "gpt-deployment"


@pytest.mark.parametrize("stream", [False, True], ids=["run", "stream"])
@pytest.mark.parametrize("api", APIS)
async def test_a_model_that_cannot_be_reached_is_named_with_its_url(
    api: OpenAIApi, stream: bool
) -> None:
    """Nothing listens at OPENAI_BASE_URL: the run raises ModelConnectionError, which names
    the agent and the URL its client tried, with the system's reason."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    environ = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    triage = Agent(client=chat_client("openai", api=api, environ=environ), name="triage")
    billing = scripted_agent("billing", reply("unused"))
    workflow = HandoffWorkflowBuilder(triage).with_handoff(triage, billing).build()

    async def run() -> None:
        if stream:
            async for _ in workflow.run("hello", stream=True):
                pass
        else:
            await workflow.run("hello")

    with pytest.raises(ModelConnectionError) as caught:
        await run()
    error = caught.value
    path = "chat/completions" if api == "chat-completions" else "responses"
    url = f"http://127.0.0.1:{port}/v1/{path}"
    reason = f"ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', {port})"
    assert (error.agent, error.url, error.detail) == ("triage", url, reason)
    assert str(error) == (
        f"Agent 'triage' could not reach its model at {url} ({reason}); check the address and "
        "that its server is up."
    )
    assert isinstance(error, ConnectionError)
    assert type(error.__cause__).__name__ == "ChatClientException"  # agent_framework's, kept
