"""ragpg on Django's own connection: a RagPG per use, bound to the calling thread's connection.

Django keeps one database connection per thread and may close and reopen it between requests
(``CONN_MAX_AGE``), so a RagPG is built where it is used, on ``connection.connection`` (the
psycopg 3 connection): ragpg then reads and writes in the same session and the same
transaction as the view, and its writes become savepoints inside ``transaction.atomic()``.
Building one is cheap (no I/O); the embedding client, which holds an HTTP connection pool,
is made once per process and shared by every thread (it is thread-safe).
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.db import connections

from rag_pg import EmbeddingProvider, RagPG, Settings, make_provider

_lock = threading.Lock()
_provider: EmbeddingProvider | None = None


def ragpg_settings() -> Settings:
    """ragpg's settings from ``settings.RAGPG`` (unset entries keep ragpg's defaults)."""
    conf: dict[str, Any] = getattr(settings, "RAGPG", {})
    return Settings().with_overrides(**{
        "database.schema": conf.get("SCHEMA"),
        "collection": conf.get("COLLECTION"),
        "embedding.provider": conf.get("EMBEDDING_PROVIDER"),
        "embedding.url": conf.get("EMBEDDING_URL"),
    })


def provider() -> EmbeddingProvider:
    """The process-wide embedding client, made on first use."""
    global _provider
    with _lock:
        if _provider is None:
            _provider = make_provider(ragpg_settings().embedding)
        return _provider


def close_provider() -> None:
    """Close the shared embedding client (tests, or a server's shutdown hook)."""
    global _provider
    with _lock:
        if _provider is not None:
            _provider.close()
            _provider = None


def principals_of(user: Any) -> list[str] | None:
    """Who ``user`` reads as under ragpg's permissions: ``user:<name>`` and its groups'
    names (the names a document's ``access:`` or the tree's ``.ragpg-access`` give); an
    anonymous visitor, nobody (only the documents everyone may read); a superuser, no
    restriction. Without ``RAGPG["PERMISSIONS"]`` (``ragpg permissions enable`` not run),
    no restriction either."""
    if not getattr(settings, "RAGPG", {}).get("PERMISSIONS"):
        return None
    if user is None or not user.is_authenticated:
        return []
    if user.is_superuser:
        return None
    return [f"user:{user.get_username()}", *user.groups.values_list("name", flat=True)]


def rag(using: str = "default") -> RagPG:
    """A RagPG on this thread's Django connection ``using``.

    Do not close it: it borrows Django's connection and the shared embedding client,
    which are not its own to close (ragpg's ``close()`` would close the client).
    """
    wrapper = connections[using]
    wrapper.ensure_connection()
    return RagPG(wrapper.connection, ragpg_settings(), provider=provider())
