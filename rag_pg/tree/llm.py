"""A small client for OpenAI-compatible chat endpoints (``POST …/chat/completions``).

ragpg's job is retrieval; it talks to an LLM only for ``ask`` and ``summarize``, and only
when ``[llm] url`` and ``model`` are configured — nothing is ever sent by default. The API
key is read from the environment variable *named* by ``llm.api_key_env`` (so the key itself
is in no config file), sent as a bearer header, and scrubbed from every error message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from rag_pg.config import LLMSettings, env_secret, redact_url
from rag_pg.errors import ConfigError, LLMError

MAX_RESPONSE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Completion:
    """One answer: its text, the model that wrote it, and the token usage when reported."""

    text: str
    model: str
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None


def completions_url(url: str) -> str:
    """``…/v1`` → ``…/v1/chat/completions``; a URL already ending that way is kept."""
    base = url.rstrip("/")
    return base if base.endswith("/chat/completions") else base + "/chat/completions"


class ChatClient:
    """Sends chat messages and returns the first choice's text; one httpx client, reused."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.3,
        max_tokens: int = 2048,
        timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"llm.url must be an http(s) URL (got {url!r})")
        if not 0.0 <= temperature <= 2.0:
            raise ConfigError(f"llm.temperature must be between 0 and 2 (got {temperature})")
        if max_tokens <= 0:
            raise ConfigError(f"llm.max_tokens must be > 0 (got {max_tokens})")
        if timeout <= 0:
            raise ConfigError(f"llm.timeout must be > 0 (got {timeout})")
        self.url = completions_url(url)
        self.shown_url = redact_url(self.url)  # what messages show: never a password
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            timeout=timeout, headers=headers, transport=transport, follow_redirects=False
        )

    def __repr__(self) -> str:  # never shows the key
        return f"ChatClient({self.shown_url!r}, model={self.model!r})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(self, messages: Sequence[Mapping[str, str]]) -> Completion:
        """One request, no retries: an answer costs money, so a failure is reported, not replayed."""
        payload = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        try:
            response = self._client.post(self.url, json=payload)
            body = response.read()
        except httpx.TimeoutException:
            raise LLMError("unavailable", f"chat endpoint {self.shown_url} timed out") from None
        except httpx.HTTPError as exc:
            raise LLMError(
                "unavailable", self._scrub(f"chat endpoint {self.shown_url} unreachable: {exc}")
            ) from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise LLMError("malformed", f"chat endpoint answered {len(body)} bytes, more than the cap")
        if response.status_code != 200:
            detail = self._scrub(_detail(body))
            kind = "refused" if response.status_code in (400, 401, 403, 404, 422) else "unavailable"
            raise LLMError(kind, f"chat endpoint answered HTTP {response.status_code}: {detail}")
        try:
            data = json.loads(body)
        except ValueError:
            raise LLMError("malformed", "chat endpoint answered something that is not JSON") from None
        return _completion(data, self.model)

    def _scrub(self, message: str) -> str:
        message = message.replace(self.url, self.shown_url)
        if self._api_key and len(self._api_key) >= 4:
            message = message.replace(self._api_key, "***")
        return message


def _completion(data: Any, model: str) -> Completion:
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise LLMError("malformed", "chat endpoint answer has no choices[0].message.content") from None
    if not isinstance(text, str):
        raise LLMError("malformed", "chat endpoint answer content is not a string")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return Completion(
        text=text,
        model=str(data.get("model") or model),
        usage=dict(usage),
        finish_reason=choice.get("finish_reason") if isinstance(choice, dict) else None,
    )


def _detail(body: bytes) -> str:
    text = body[:2000].decode("utf-8", "replace")
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            error = data.get("error", data.get("detail", data))
            if isinstance(error, dict):
                error = error.get("message", error)
            text = str(error)
    except ValueError:
        pass
    return " ".join(text.split())[:300] or "(empty body)"


def make_chat_client(
    settings: LLMSettings, *, environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> ChatClient:
    """The configured client, or a ConfigError (exit 2) that says which setting is missing."""
    if not settings.url or not settings.model:
        raise ConfigError(
            "no chat endpoint configured: set [llm] url and model"
            " (RAGPG_LLM_URL, RAGPG_LLM_MODEL); nothing was sent"
        )
    api_key = None
    if settings.api_key_env:
        api_key = env_secret(settings.api_key_env, environ)
        if not api_key:
            raise ConfigError(
                f"llm.api_key_env names {settings.api_key_env!r}, but that environment variable"
                " is not set; nothing was sent"
            )
    return ChatClient(
        settings.url, settings.model, api_key=api_key, temperature=settings.temperature,
        max_tokens=settings.max_tokens, timeout=settings.timeout, transport=transport,
    )
