"""Zero config: with no database URL anywhere, ragpg runs its own PostgreSQL + pgvector."""

from __future__ import annotations

import json

from .conftest import run_cli


def test_cli_without_database_url_uses_the_embedded_server(tmp_path, embed_server, corpus):
    env = {"RAGPG_HOME": str(tmp_path / "home"), "RAGPG_EMBEDDING_URL": embed_server.url}
    out = run_cli(["ingest", str(corpus), "--json"], env=env, cwd=tmp_path, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "embedded PostgreSQL" in out.stderr and str(tmp_path / "home" / "pg") in out.stderr
    assert json.loads(out.stdout)["documents_indexed"] == 9
    assert (tmp_path / "home" / "pg" / "PG_VERSION").is_file()
    out = run_cli(["search", "pool sizing CPU cores", "--json", "-k", "1"], env=env, cwd=tmp_path, timeout=180)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)[0]["path"] == "en/ops/connection-pooling.md"
