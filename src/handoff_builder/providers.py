"""Chat clients for samples and the CLI: ``scripted`` (offline), ``openai`` and ``azure``.

Real providers use agent_framework's own OpenAI clients (install ``handoff-builder[openai]``, or
``handoff-builder[azure]`` for Azure OpenAI with ``azure-identity``). Configuration comes from
environment variables; a missing one is a one-line :class:`ProviderConfigurationError` that says
what to set.

Which client: agent_framework has one per OpenAI API. ``OpenAIChatCompletionClient`` posts to
``/chat/completions``, which OpenAI, Azure OpenAI and every OpenAI-compatible server (llama.cpp,
vLLM, Ollama, LM Studio) speak: it is the default here. ``OpenAIChatClient`` posts to
``/responses``, OpenAI's newer API (OpenAI and Azure OpenAI); choose it with ``api="responses"`` or
``HANDOFF_BUILDER_OPENAI_API=responses``. A workflow sends each agent its whole view with either
(``store`` false), so nothing depends on what a server keeps (see docs/models.md).

=============  ==========================================================================
provider       environment
=============  ==========================================================================
``openai``     ``OPENAI_API_KEY`` (required), the model: ``OPENAI_CHAT_COMPLETION_MODEL``, else
               ``OPENAI_MODEL`` (agent_framework's names; default ``gpt-4o-mini``),
               ``OPENAI_BASE_URL`` (optional: an OpenAI-compatible server)
both           ``HANDOFF_BUILDER_OPENAI_API`` (optional): ``chat-completions`` (the default) or
               ``responses``
``azure``      ``AZURE_OPENAI_ENDPOINT`` and the deployment: ``AZURE_OPENAI_CHAT_COMPLETION_MODEL``,
               else ``AZURE_OPENAI_MODEL``, else ``AZURE_OPENAI_DEPLOYMENT`` (required);
               ``AZURE_OPENAI_API_KEY`` (optional: without it, azure-identity's
               ``DefaultAzureCredential`` signs in); ``AZURE_OPENAI_API_VERSION`` (optional)
=============  ==========================================================================
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any, Literal

from .exceptions import HandoffBuilderError

__all__ = [
    "APIS",
    "API_VARIABLE",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "MAX_OUTPUT_TOKENS_VARIABLE",
    "PROVIDERS",
    "OpenAIApi",
    "ProviderConfigurationError",
    "agent_options",
    "chat_client",
]

PROVIDERS = ("scripted", "openai", "azure")
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_MAX_OUTPUT_TOKENS = 1024
"""Output tokens one model response may use, unless set: a model that does not stop (a small
local one can generate until its context is full) is cut off there."""
MAX_OUTPUT_TOKENS_VARIABLE = "HANDOFF_BUILDER_MAX_OUTPUT_TOKENS"

OpenAIApi = Literal["chat-completions", "responses"]
"""The OpenAI API a client speaks: ``"chat-completions"`` (``OpenAIChatCompletionClient``, every
OpenAI-compatible server) or ``"responses"`` (``OpenAIChatClient``, OpenAI and Azure OpenAI)."""
APIS: tuple[OpenAIApi, ...] = ("chat-completions", "responses")
API_VARIABLE = "HANDOFF_BUILDER_OPENAI_API"
"""Chooses the API when ``chat_client`` is not given one (the samples and the CLI)."""
_CLIENT_CLASSES: dict[OpenAIApi, str] = {
    "chat-completions": "OpenAIChatCompletionClient",
    "responses": "OpenAIChatClient",
}


class ProviderConfigurationError(HandoffBuilderError, ValueError):
    """A provider was chosen but not configured; the message says what to set or install."""


def chat_client(
    provider: str,
    *,
    api: OpenAIApi | None = None,
    environ: Mapping[str, str] | None = None,
) -> Any:
    """A chat client for ``openai`` or ``azure``; ``scripted`` has none (agents bring scripts).

    ``api`` picks agent_framework's client: ``"chat-completions"`` (the default:
    ``OpenAIChatCompletionClient``, for OpenAI, Azure OpenAI and OpenAI-compatible servers) or
    ``"responses"`` (``OpenAIChatClient``, OpenAI's Responses API: OpenAI and Azure OpenAI only);
    without it, ``HANDOFF_BUILDER_OPENAI_API`` decides.

    Raises:
        ProviderConfigurationError: unknown provider or API, missing variable or missing package.
    """
    env = os.environ if environ is None else environ
    if provider == "openai":
        key = _required(env, "OPENAI_API_KEY", "openai")
        client_class = _openai_client_class("openai", _api(api, env))
        return client_class(
            model=_first(env, "OPENAI_CHAT_COMPLETION_MODEL", "OPENAI_MODEL")
            or DEFAULT_OPENAI_MODEL,
            api_key=key,
            base_url=env.get("OPENAI_BASE_URL") or None,
        )
    if provider == "azure":
        endpoint = _required(env, "AZURE_OPENAI_ENDPOINT", "azure")
        names = (
            "AZURE_OPENAI_CHAT_COMPLETION_MODEL",
            "AZURE_OPENAI_MODEL",
            "AZURE_OPENAI_DEPLOYMENT",
        )
        deployment = _first(env, *names)
        if deployment is None:
            raise ProviderConfigurationError(
                "Set AZURE_OPENAI_MODEL (or AZURE_OPENAI_CHAT_COMPLETION_MODEL, or "
                "AZURE_OPENAI_DEPLOYMENT) to use the azure provider."
            )
        client_class = _openai_client_class("azure", _api(api, env))
        key = env.get("AZURE_OPENAI_API_KEY")
        credentials: dict[str, Any] = (
            {"api_key": key} if key else {"credential": _azure_credential()}
        )
        return client_class(
            model=deployment,
            azure_endpoint=endpoint,
            api_version=env.get("AZURE_OPENAI_API_VERSION") or None,
            **credentials,
        )
    if provider == "scripted":
        raise ProviderConfigurationError(
            "The scripted provider has no chat client: each agent gets its own script."
        )
    raise ProviderConfigurationError(
        f"Unknown provider {provider!r}; choose one of: {', '.join(PROVIDERS)}."
    )


def agent_options(
    max_output_tokens: int | None = None, *, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The options the samples and the CLI give their agents: a cap on output tokens.

    ``max_output_tokens``, else ``HANDOFF_BUILDER_MAX_OUTPUT_TOKENS``, else
    :data:`DEFAULT_MAX_OUTPUT_TOKENS`; pass the result as ``Agent(default_options=...)``
    (agent_framework sends it as ``max_completion_tokens`` to OpenAI).

    Raises:
        ProviderConfigurationError: the variable is not a positive whole number.
    """
    env = os.environ if environ is None else environ
    if max_output_tokens is None:
        raw = env.get(MAX_OUTPUT_TOKENS_VARIABLE, "").strip()
        try:
            max_output_tokens = int(raw) if raw else DEFAULT_MAX_OUTPUT_TOKENS
        except ValueError:
            max_output_tokens = 0
    if max_output_tokens < 1:
        raise ProviderConfigurationError(
            f"The maximum number of output tokens must be a positive whole number "
            f"({MAX_OUTPUT_TOKENS_VARIABLE} or --max-output-tokens)."
        )
    return {"max_tokens": max_output_tokens}


def _first(env: Mapping[str, str], *names: str) -> str | None:
    """The first of ``names`` that is set (agent_framework's own names come first)."""
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return None


def _required(env: Mapping[str, str], name: str, provider: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ProviderConfigurationError(f"Set {name} to use the {provider} provider.")
    return value


def _api(api: str | None, env: Mapping[str, str]) -> OpenAIApi:
    """The API asked for, else ``HANDOFF_BUILDER_OPENAI_API``'s, else Chat Completions."""
    chosen = api if api is not None else env.get(API_VARIABLE, "").strip() or "chat-completions"
    for known in APIS:
        if chosen == known:
            return known
    where = "api" if api is not None else API_VARIABLE
    raise ProviderConfigurationError(
        f"Unknown OpenAI API {chosen!r} ({where}); choose one of: {', '.join(APIS)}."
    )


def _openai_client_class(provider: str, api: OpenAIApi) -> Any:
    try:
        module = importlib.import_module("agent_framework.openai")
        return getattr(module, _CLIENT_CLASSES[api])
    except (ImportError, AttributeError) as missing:
        raise ProviderConfigurationError(
            f"The {provider} provider needs agent-framework-openai: "
            f"pip install 'handoff-builder[{provider}]'."
        ) from missing


def _azure_credential() -> Any:
    try:
        identity = importlib.import_module("azure.identity")
    except ImportError as missing:
        raise ProviderConfigurationError(
            "Set AZURE_OPENAI_API_KEY, or install azure-identity to sign in: "
            "pip install 'handoff-builder[azure]'."
        ) from missing
    return identity.DefaultAzureCredential()
