"""The ragpg command as a user runs it: subprocesses, exit codes, one-line errors, JSON."""

from __future__ import annotations

import json
import socket

from .conftest import run_cli
from .invariants import violations


def env_for(db_url, server=None, **extra):
    env = {"RAGPG_DATABASE_URL": db_url}
    if server is not None:
        env["RAGPG_EMBEDDING_URL"] = server.url
    env.update(extra)
    return env


def test_ingest_search_stats_json(db_url, embed_server, corpus, tmp_path):
    env = env_for(db_url, embed_server)
    out = run_cli(["ingest", str(corpus), "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["documents_seen"] == 9 and report["documents_indexed"] == 9
    out = run_cli(["search", "restaurer une sauvegarde pg_dump", "--json", "-k", "3"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    hits = json.loads(out.stdout)
    assert len(hits) == 3
    assert hits[0]["path"] == "fr/admin/sauvegardes.md"
    for key in ("path", "title", "section", "anchor", "position", "score", "content", "collection"):
        assert key in hits[0]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    out = run_cli(["stats", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stats = json.loads(out.stdout)
    assert stats["documents"] == 9 and stats["chunks"] == report["chunks_upserted"]
    assert stats["last_indexed_at"] and stats["embedding"]["status"] == "ok"
    assert stats["models"][0]["model"] == "fake-bow-64"


def test_422_exits_1_with_the_detail_in_one_line(db_url, embed_server, corpus, tmp_path):
    embed_server.fault = "422"
    embed_server.fault_detail = "texte trop long pour le modèle"
    out = run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server), cwd=tmp_path)
    assert out.returncode == 1
    assert "texte trop long pour le modèle" in out.stderr
    assert "Traceback" not in out.stderr
    assert violations(db_url) == []


def test_unavailable_service_exits_3_without_traceback(db_url, corpus, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = run_cli(["ingest", str(corpus)], env=env_for(db_url, RAGPG_EMBEDDING_URL=f"http://127.0.0.1:{port}"),
                  cwd=tmp_path)
    assert out.returncode == 3, out.stderr
    assert out.stderr.count("\n") <= 2 and "Traceback" not in out.stderr
    assert "unavailable" in out.stderr or "refused" in out.stderr.lower()


def test_stats_degrades_when_the_database_is_down(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = run_cli(["stats"], env={"RAGPG_DATABASE_URL": f"postgresql://u:secretpw@127.0.0.1:{port}/x",
                                   "RAGPG_EMBEDDING_PROVIDER": "none"}, cwd=tmp_path)
    assert out.returncode == 3  # a probe: `ragpg stats || alert` fires
    assert out.stderr.count("database unavailable") == 1, out.stderr  # said once, not twice
    assert "secretpw" not in out.stderr + out.stdout
    assert "collection:      default" in out.stdout and "database:        unavailable" in out.stdout
    assert "None" not in out.stdout and "?" not in out.stdout


def test_usage_and_config_errors_exit_2(db_url, tmp_path):
    out = run_cli(["search"], env=env_for(db_url), cwd=tmp_path)
    assert out.returncode == 2
    out = run_cli(["search", "x"], env=env_for(db_url, RAGPG_CHUNK_SIZE="-1"), cwd=tmp_path)
    assert out.returncode == 2 and "chunk.size" in out.stderr and "Traceback" not in out.stderr
    out = run_cli(["ingest", str(tmp_path / "missing")], env=env_for(db_url, RAGPG_EMBEDDING_PROVIDER="none"),
                  cwd=tmp_path)
    assert out.returncode == 2 and "not a directory" in out.stderr


def test_a_blank_query_returns_nothing_and_k_zero_is_refused(db_url, tmp_path):
    """k < 1 is refused as the HTTP API and MCP refuse it (it printed 'no hits', exit 0)."""
    env = env_for(db_url, RAGPG_EMBEDDING_PROVIDER="none")
    out = run_cli(["search", "   ", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout) == [], out.stderr
    out = run_cli(["search", "x", "-k", "0", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip() == "ragpg: error: k must be >= 1 (got 0)"


def test_a_search_before_init_says_the_schema_is_missing(empty_db_url, tmp_path):
    env = env_for(empty_db_url, RAGPG_EMBEDDING_PROVIDER="none")
    out = run_cli(["search", "une question"], env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "schema is not initialised: run `ragpg init`" in out.stderr and "pgvector" not in out.stderr


def test_dry_run_lists_changes(db_url, embed_server, corpus, tmp_path):
    out = run_cli(["ingest", str(corpus), "--dry-run", "--json"], env=env_for(db_url, embed_server), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["dry_run"] and len(data["added"]) == 9 and data["tokens_embedded"] > 0
    assert embed_server.calls == 0


def test_python_dash_m_and_help():
    out = run_cli(["--help"])
    assert out.returncode == 0
    for command in ("init", "ingest", "search", "stats"):
        assert command in out.stdout


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_search_exits_3_when_the_database_or_the_embedder_is_unavailable(db_url, embed_server, corpus,
                                                                       tmp_path):
    assert run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server), cwd=tmp_path).returncode == 0
    down = f"http://127.0.0.1:{_closed_port()}"
    for env in (env_for(db_url, RAGPG_EMBEDDING_URL=down, RAGPG_EMBEDDING_ATTEMPTS="1"),
                env_for(f"postgresql://u@127.0.0.1:{_closed_port()}/x", embed_server)):
        out = run_cli(["search", "installer le paquet"], env=env, cwd=tmp_path)
        assert out.returncode == 3, out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert "refused" in out.stderr.lower(), out.stderr  # the cause, not only "unavailable"


def test_an_unchanged_run_after_a_model_change_points_to_reembed(db_url, embed_server, corpus, tmp_path):
    """No document changed, so nothing is embedded, but the configured model is not the
    collection's: the report says so (exit 0: the index is intact and consistent)."""
    from rag_pg.testing.embedserver import FakeEmbeddingServer

    assert run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server), cwd=tmp_path).returncode == 0
    with FakeEmbeddingServer(dim=32) as other:
        out = run_cli(["ingest", str(corpus), "--json"], env=env_for(db_url, other), cwd=tmp_path)
        again = run_cli(["ingest", str(corpus)], env=env_for(db_url, embed_server), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["documents_skipped"] == 9 and other.calls == 0
    [drift] = [w for w in report["warnings"] if "reembed" in w]
    assert "indexed with 'fake-bow-64', the configured provider gives 'fake-bow-32'" in drift
    assert "reembed" not in again.stdout  # the collection's own model: nothing to say
