"""The Flask example (examples/flask_app) through Flask's own test client and CLI runner."""

from __future__ import annotations

import importlib
import json
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from rag_pg import Settings

from .conftest import ROOT
from .rows import value
from .waiting import eventually

pytest.importorskip("flask")

THREADS = 8
SEARCHES_PER_THREAD = 5


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "flask_app"))
    return importlib.import_module("flask_docsearch")


def settings_for(db_url: str, embed_server: Any) -> Settings:
    return Settings().with_overrides(**{
        "database.url": db_url, "embedding.provider": "http", "embedding.url": embed_server.url,
    })


@pytest.fixture
def app(example: ModuleType, db_url: str, embed_server: Any) -> Any:
    app = example.create_app({"TESTING": True, "RAGPG_SETTINGS": settings_for(db_url, embed_server)})
    yield app
    example.close_ragpg(app)


def ragpg_connections(db_url: str) -> int:
    """Backends of ragpg's own pool (application_name 'ragpg') on the test database."""
    dbname = conninfo_to_dict(db_url)["dbname"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = value(conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ragpg' AND datname = %s"
            " AND pid <> pg_backend_pid()", (dbname,))
    assert row is not None
    return int(row)


def no_connections_left(db_url: str) -> None:
    """pg_stat_activity drops a backend shortly after its client hangs up: wait (bounded)."""
    eventually(lambda: ragpg_connections(db_url) == 0, "every ragpg connection closed")


def ingest(app: Any, corpus: Path) -> dict[str, Any]:
    result = app.test_cli_runner().invoke(args=["ragpg-ingest", str(corpus)])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.output)
    return report


def test_cli_command_ingests_and_the_view_searches(app: Any, corpus: Path) -> None:
    report = ingest(app, corpus)
    assert (report["documents_seen"], report["documents_indexed"], report["documents_failed"]) == (9, 9, 0)

    response = app.test_client().get("/search", query_string={"q": "restaurer une sauvegarde pg_dump", "k": 3})
    assert response.status_code == 200, response.get_data(as_text=True)
    body = response.get_json()
    assert body["query"] == "restaurer une sauvegarde pg_dump"
    hits = body["hits"]
    assert len(hits) == 3
    assert hits[0]["path"] == "fr/admin/sauvegardes.md"
    assert set(hits[0]["ranks"]) <= {"vector", "keyword", "title", "phrase"} and hits[0]["ranks"]
    for hit in hits:
        assert {"path", "title", "section", "anchor", "position", "score", "content", "collection"} <= set(hit)
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)

    keyword = app.test_client().get("/search?q=pot-au-feu&mode=keyword&k=2").get_json()["hits"]
    assert keyword and keyword[0]["path"] == "fr/cuisine/pot-au-feu.md"
    assert set(keyword[0]["ranks"]) == {"keyword"}


def test_second_ingest_skips_unchanged_files(app: Any, corpus: Path) -> None:
    ingest(app, corpus)
    again = ingest(app, corpus)
    assert (again["documents_indexed"], again["documents_skipped"]) == (0, 9)


@pytest.mark.parametrize(
    ("query_string", "message"),
    [
        ({}, "q is required"),
        ({"q": "   "}, "q is required"),
        ({"q": "x" * 1001}, "longer than 1000"),
        ({"q": "tarte", "k": "abc"}, "k must be an integer"),
        ({"q": "tarte", "k": "0"}, "k must be between 1 and 50"),
        ({"q": "tarte", "k": "51"}, "k must be between 1 and 50"),
        ({"q": "tarte", "mode": "fuzzy"}, "mode must be one of"),
    ],
)
def test_search_rejects_bad_parameters_with_400(app: Any, query_string: dict[str, str], message: str) -> None:
    response = app.test_client().get("/search", query_string=query_string)
    assert response.status_code == 400
    assert message in response.get_json()["error"]


def test_uninitialised_index_answers_503_with_the_fix(example: ModuleType, empty_db_url: str,
                                                     embed_server: Any) -> None:
    app = example.create_app({"RAGPG_SETTINGS": settings_for(empty_db_url, embed_server)})
    try:
        response = app.test_client().get("/search?q=tarte")
        assert response.status_code == 503
        assert "ragpg init" in response.get_json()["error"]
    finally:
        example.close_ragpg(app)


def test_ingest_command_fails_in_one_line_on_a_missing_root(app: Any, tmp_path: Path) -> None:
    result = app.test_cli_runner().invoke(args=["ragpg-ingest", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_eight_threads_share_one_pool_without_errors_or_leaks(
    example: ModuleType, db_url: str, embed_server: Any, corpus: Path
) -> None:
    settings = settings_for(db_url, embed_server)
    app = example.create_app({"RAGPG_SETTINGS": settings})
    try:
        assert ragpg_connections(db_url) == 0  # the factory opened nothing
        ingest(app, corpus)
        queries = ["restaurer une sauvegarde", "pot-au-feu", "connection pooling", "index HNSW",
                   "incident response", "tarte tatin caramel", "vector search filtering", "EXPLAIN ANALYZE"]
        barrier = threading.Barrier(THREADS)
        errors: list[BaseException] = []
        statuses: list[int] = []
        lock = threading.Lock()

        def worker(index: int) -> None:
            try:
                client = app.test_client()
                barrier.wait(timeout=30)
                for n in range(SEARCHES_PER_THREAD):
                    q = queries[(index + n) % len(queries)]
                    response = client.get("/search", query_string={"q": q, "k": 3})
                    hits = response.get_json().get("hits", [])
                    with lock:
                        statuses.append(response.status_code)
                        if response.status_code == 200 and not hits:
                            errors.append(AssertionError(f"no hits for {q!r}"))
            except BaseException as exc:  # collected and asserted below
                with lock:
                    errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        assert statuses == [200] * (THREADS * SEARCHES_PER_THREAD)
        open_now = ragpg_connections(db_url)
        assert 1 <= open_now <= settings.database.pool_size
    finally:
        example.close_ragpg(app)
    no_connections_left(db_url)


def test_each_user_reads_what_its_groups_may(example: ModuleType, db_url: str, embed_server: Any,
                                            tmp_path: Path) -> None:
    """The app's login says who the user is (here a session the test sets), RAGPG_PRINCIPALS
    maps it to principals, and the database filters."""
    from flask import session

    from rag_pg.store import permissions, tenancy

    from .test_roles import drop_roles

    root = tmp_path / "tree"
    (root / "hr").mkdir(parents=True)
    (root / "hr" / "pay.md").write_text("# Pay\n\nThe salary grid markhr.\n", encoding="utf-8")
    (root / "open.md").write_text("# Open\n\nThe salary policy markopen.\n", encoding="utf-8")
    (root / ".ragpg-access").write_text("hr/** @hr\n", encoding="utf-8")
    groups = {"alice": ["hr"], "bob": []}
    app = example.create_app({
        "TESTING": True, "SECRET_KEY": "test-only", "RAGPG_SETTINGS": settings_for(db_url, embed_server),
        "RAGPG_PRINCIPALS": lambda: [f"user:{session['user']}", *groups[session["user"]]]
                                    if "user" in session else []})
    try:
        assert app.test_cli_runner().invoke(args=["ragpg-ingest", str(root)]).exit_code == 0
        with psycopg.connect(db_url, autocommit=True) as admin:
            permissions.enable(admin)
        seen = {}
        for name in ("alice", "bob", None):
            client = app.test_client()
            if name is not None:
                with client.session_transaction() as state:
                    state["user"] = name
            response = client.get("/search", query_string={"q": "salary", "mode": "keyword", "k": 10})
            assert response.status_code == 200, response.data
            seen[name] = {h["path"] for h in response.get_json()["hits"]}
        assert seen == {"alice": {"hr/pay.md", "open.md"}, "bob": {"open.md"}, None: {"open.md"}}
    finally:
        example.close_ragpg(app)
        drop_roles(db_url, tenancy.surface_role("ragpg"))
