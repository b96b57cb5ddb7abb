"""Rerank: the HTTP shapes (TEI, Jina/Cohere) against a deterministic server on loopback, the
confidence bands, failures that say what failed, and rerank inside search (off by default)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from rag_pg import RagPG, Settings
from rag_pg.config import RerankSettings
from rag_pg.errors import ConfigError, RerankError
from rag_pg.search.rerank import Reranker, band, parse_scores, request_for
from rag_pg.testing.rerankserver import FakeRerankServer, fake_score

from .conftest import run_cli


def test_bands_follow_the_configured_thresholds():
    s = RerankSettings()
    assert [band(v, s) for v in (-4.01, -4.0, -0.01, 0.0, 3.0)] == \
        ["abstain", "caution", "caution", "normal", "normal"]
    custom = RerankSettings(abstain_below=0.2, caution_below=0.5)
    assert [band(v, custom) for v in (0.1, 0.3, 0.9)] == ["abstain", "caution", "normal"]
    with pytest.raises(ConfigError):
        Settings.load(environ={}, overrides={"rerank.abstain_below": 1, "rerank.caution_below": 0})


def test_request_shapes():
    tei = request_for(RerankSettings(url="http://h:8080"), "q", ["a", "b"])
    assert tei == ("http://h:8080/rerank",
                   {"query": "q", "texts": ["a", "b"], "raw_scores": True, "return_text": False})
    jina = request_for(RerankSettings(url="https://api.example/", api="jina", model="m"), "q", ["a"])
    assert jina == ("https://api.example/v1/rerank",
                    {"query": "q", "documents": ["a"], "top_n": 1, "model": "m", "return_documents": False})
    cohere = request_for(RerankSettings(url="https://c.example/v2/rerank", api="cohere"), "q", ["a"])
    assert cohere[0] == "https://c.example/v2/rerank" and "return_documents" not in cohere[1]
    with pytest.raises(ConfigError):
        request_for(RerankSettings(), "q", ["a"])


def test_parse_scores_maps_indexes_back_to_the_texts_order():
    assert parse_scores([{"index": 1, "score": 0.5}, {"index": 0, "score": -1}], 2) == [-1.0, 0.5]
    assert parse_scores({"results": [{"index": 0, "relevance_score": 0.9}]}, 1) == [0.9]
    for bad in ({"results": [{"index": 3, "score": 1}]}, [{"index": 0, "score": "x"}], [{"index": 0}],
                "nope", [{"index": True, "score": 1}]):
        with pytest.raises(RerankError):
            parse_scores(bad, 1)
    with pytest.raises(RerankError, match="no score for 1 of 2"):
        parse_scores([{"index": 0, "score": 1}], 2)


@pytest.mark.parametrize("api", ["tei", "jina", "cohere"])
def test_client_against_the_fake_server(api):
    with FakeRerankServer() as server:
        client = Reranker(RerankSettings(url=server.url, api=api, model="fake"))
        try:
            texts = ["le chat dort", "rien à voir", "le chat et le chien"]
            assert client.scores("chat chien", texts) == [fake_score("chat chien", t) for t in texts]
            assert client.scores("x", []) == []
        finally:
            client.close()
        assert server.calls == 1
        assert ("texts" in server.requests[0]) == (api == "tei")


@pytest.mark.parametrize("fault", ["500", "non_json", "bad_index", "missing", "nan"])
def test_failures_raise_a_rerank_error(fault):
    with FakeRerankServer(fault=fault) as server:
        client = Reranker(RerankSettings(url=server.url))
        with pytest.raises(RerankError):
            client.scores("q", ["a", "b"])
        client.close()


def test_unreachable_service_is_a_rerank_error_with_exit_code_3():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = Reranker(RerankSettings(url="http://127.0.0.1:9"), transport=httpx.MockTransport(refuse))
    with pytest.raises(RerankError, match="unavailable") as info:
        client.scores("q", ["a"])
    assert info.value.exit_code == 3


DOCS = {
    "a.md": "# Chats\n\nLe chat dort sur le canapé.\n",
    "b.md": "# Chiens\n\nLe chien et le chat jouent ensemble dans le jardin.\n",
    "c.md": "# Oiseaux\n\nUn oiseau chante. Le chat le regarde.\n",
    "d.md": "# Divers\n\nLe jardin est grand et le canapé est neuf.\n",
}


def rag_with(db_url: str, embed: Any, rerank_url: str, **extra: Any) -> RagPG:
    settings = Settings.load(environ={}, overrides={
        "embedding.url": embed.url, "rerank.url": rerank_url, **extra})
    return RagPG(db_url, settings)


def test_search_rerank_reorders_and_grades(db_url, embed_server, tmp_path):
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with FakeRerankServer() as server:
        with rag_with(db_url, embed_server, server.url, **{"rerank.top_n": 10}) as rag:
            rag.init()
            rag.ingest(tmp_path)
            plain = rag.search("chien chat jardin", 3)
            assert server.calls == 0 and all("confidence" not in h.extra for h in plain)  # off by default
            hits = rag.search("chien chat jardin", 3, rerank=True)
    assert server.calls == 1 and len(server.requests[0]["texts"]) == 4  # every candidate, top_n >= 4
    assert hits[0].path == "b.md"  # every query word: the fake cross-encoder's best
    assert [h.ranks["rerank"] for h in hits] == [1, 2, 3]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    for h in hits:
        assert h.scores["rerank"] == h.score and "fused" in h.scores
        assert h.extra["confidence"] == band(h.score, RerankSettings())
        assert h.to_dict()["confidence"] in ("abstain", "caution", "normal")
    assert hits[0].extra["confidence"] == "normal"


def test_rerank_enabled_in_settings_and_cli_flag(db_url, embed_server, tmp_path):
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with FakeRerankServer() as server:
        with rag_with(db_url, embed_server, server.url, **{"rerank.enabled": True}) as rag:
            rag.init()
            rag.ingest(tmp_path)
            assert "confidence" in rag.search("chat", 2)[0].extra
            assert "confidence" not in rag.search("chat", 2, rerank=False)[0].extra
        env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url,
               "RAGPG_RERANK_URL": server.url}
        out = run_cli(["search", "chien chat jardin", "--rerank", "--json", "-k", "2"], env=env)
        assert out.returncode == 0, out.stderr
        hits = json.loads(out.stdout)
        assert hits[0]["path"] == "b.md" and hits[0]["confidence"] == "normal"
        assert "rerank" in hits[0]["ranks"]
    down = run_cli(["search", "chat", "--rerank"], env={**env, "RAGPG_RERANK_URL": "http://127.0.0.1:9"})
    assert down.returncode == 3 and "rerank service unavailable" in down.stderr
