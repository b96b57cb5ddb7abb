"""The Django example (examples/django_app) through Django's test client and call_command.

Django is configured once per process (its settings are global), from the example's own
settings module; each test then points the ``default`` database at the fresh database our
fixture made (Django's test-database creation is not used: the test database is ours).
"""

from __future__ import annotations

import importlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

from rag_pg import StoreError
from rag_pg.store import migrate

from .conftest import ROOT
from .rows import value, values

pytest.importorskip("django")

EXAMPLE = ROOT / "examples" / "django_app"


@pytest.fixture(scope="module")
def django_setup() -> Iterator[None]:
    import django

    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(EXAMPLE))
        mp.setenv("DJANGO_SETTINGS_MODULE", "django_site.settings")
        mp.setenv("DATABASE_URL", "postgresql:///replaced_per_test")
        for name in list(os.environ):
            if name.startswith("RAGPG_"):
                mp.delenv(name)
        django.setup()
        yield


def point_django_at(db_url: str) -> None:
    """Switch Django's ``default`` database (the settings dict is shared by every thread)."""
    from django.db import connections
    from django_site.settings import database_from_url

    connections.close_all()
    connections["default"].settings_dict.update(database_from_url(db_url))


@pytest.fixture
def site(django_setup: None, embed_server: Any) -> Iterator[Any]:
    """Yields a function that points Django (and ragpg's settings) at a test database."""
    from django.db import connections
    from django.test import override_settings

    engine = importlib.import_module("docsearch.engine")
    ragpg_conf = {"SCHEMA": "ragpg", "COLLECTION": "default", "EMBEDDING_PROVIDER": "http",
                  "EMBEDDING_URL": embed_server.url}
    with override_settings(RAGPG=ragpg_conf):
        engine.close_provider()
        yield point_django_at
        connections.close_all()
        engine.close_provider()


@pytest.fixture
def engine(site: Any, db_url: str) -> ModuleType:
    site(db_url)
    return importlib.import_module("docsearch.engine")


def call(*args: str) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_django_migration_creates_ragpg_schema_with_its_own_alembic(site: Any, empty_db_url: str) -> None:
    from django.core.management import call_command

    site(empty_db_url)
    call_command("migrate", verbosity=0)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        assert migrate.current_revision(conn, "ragpg") == migrate.head_revision("ragpg")
        applied = conn.execute("SELECT app, name FROM django_migrations WHERE app = 'docsearch'").fetchall()
        assert applied == [("docsearch", "0001_ragpg_schema")]
        # Alembic's version table is in ragpg's schema: a host app's Alembic never sees it.
        tables = conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'alembic_version'"
        ).fetchall()
        assert tables == [("ragpg",)]
    call_command("migrate", verbosity=0)  # a second run is a no-op
    assert "ragpg schema at revision " + migrate.head_revision("ragpg") in call("ragpg_upgrade")


def test_ingest_command_and_search_view_use_djangos_connection(engine: ModuleType, db_url: str,
                                                               corpus: Path) -> None:
    from django.db import connection
    from django.test import Client

    report = json.loads(call("ingest", str(corpus)))
    assert (report["documents_seen"], report["documents_indexed"], report["documents_failed"]) == (9, 9, 0)
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = value(conn, "SELECT pid FROM ragpg.ingest_run ORDER BY id DESC LIMIT 1")
    assert row is not None and row == connection.connection.info.backend_pid

    response = Client().get("/search", {"q": "restaurer une sauvegarde pg_dump", "k": "3"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["query"] == "restaurer une sauvegarde pg_dump"
    assert len(body["hits"]) == 3
    assert body["hits"][0]["path"] == "fr/admin/sauvegardes.md"
    assert [h["score"] for h in body["hits"]] == sorted((h["score"] for h in body["hits"]), reverse=True)
    keyword = Client().get("/search", {"q": "tarte tatin", "mode": "keyword", "k": "1"}).json()["hits"]
    assert [h["path"] for h in keyword] == ["fr/cuisine/tarte-tatin.md"]


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({}, 400, "q is required"),
        ({"q": "tarte", "k": "x"}, 400, "k must be an integer"),
        ({"q": "tarte", "k": "500"}, 400, "k must be between 1 and 50"),
        ({"q": "tarte", "mode": "fuzzy"}, 400, "mode must be one of"),
    ],
)
def test_search_view_rejects_bad_parameters(engine: ModuleType, params: dict[str, str], status: int,
                                            message: str) -> None:
    from django.test import Client

    response = Client().get("/search", params)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_search_view_answers_503_before_the_schema_exists(site: Any, empty_db_url: str) -> None:
    from django.test import Client

    site(empty_db_url)
    response = Client().get("/search", {"q": "tarte"})
    assert response.status_code == 503
    assert "ragpg init" in response.json()["error"]
    assert Client().post("/search", {"q": "tarte"}).status_code == 405


def host_rows(db_url: str) -> list[str]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return values(conn, "SELECT body FROM host_note ORDER BY id")


@pytest.mark.parametrize("locked", ["chunk", "collection"])
def test_ragpg_error_inside_atomic_leaves_the_outer_transaction_usable(
    engine: ModuleType, db_url: str, corpus: Path, locked: str
) -> None:
    """A database error inside ragpg is confined to a savepoint (RELIABILITY C6).

    Another session holds an exclusive lock on one of ragpg's tables and the host sets a
    lock_timeout, so ragpg's query fails inside PostgreSQL: on ``chunk``, the search
    statement itself; on ``collection``, the read ragpg makes before it.
    """
    from django.db import connection, transaction

    call("ingest", str(corpus))
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE host_note (id serial PRIMARY KEY, body text NOT NULL)")

    with psycopg.connect(db_url) as holder:
        holder.execute(f"LOCK TABLE ragpg.{locked} IN ACCESS EXCLUSIVE MODE")
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO host_note (body) VALUES ('before')")
                cursor.execute("SET LOCAL lock_timeout = '200ms'")
            with pytest.raises((psycopg.errors.LockNotAvailable, StoreError)):
                engine.rag().search("sauvegarde", 3, mode="keyword")
            status = connection.connection.info.transaction_status
            assert status == psycopg.pq.TransactionStatus.INTRANS  # not INERROR
            holder.rollback()  # the lock goes away
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO host_note (body) VALUES ('after')")
                cursor.execute("SELECT count(*) FROM host_note")
                assert cursor.fetchone() == (2,)
            # ragpg works again in the same transaction once the error is handled
            hits = engine.rag().search("sauvegarde", 1, mode="keyword")
            assert hits[0].path == "fr/admin/sauvegardes.md"
    assert host_rows(db_url) == ["before", "after"]  # Django committed the outer transaction


def test_ragpg_never_commits_the_hosts_transaction(engine: ModuleType, db_url: str, corpus: Path) -> None:
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE host_note (id serial PRIMARY KEY, body text NOT NULL)")

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO host_note (body) VALUES ('rolled back')")
            report = engine.rag().ingest(str(corpus))
            assert report.documents_indexed == 9
            raise Abort

    assert host_rows(db_url) == []
    with psycopg.connect(db_url, autocommit=True) as conn:
        documents = conn.execute("SELECT count(*) FROM ragpg.document").fetchone()
        runs = conn.execute("SELECT count(*) FROM ragpg.ingest_run").fetchone()
        locks = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    assert (documents, runs, locks) == ((0,), (0,), (0,))
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_each_user_reads_what_its_groups_may(site: Any, db_url: str, embed_server: Any,
                                            tmp_path: Path) -> None:
    """Users and groups of Django's auth, mapped to principals: the database filters."""
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command
    from django.test import Client, override_settings

    from rag_pg.store import permissions, tenancy

    from .test_roles import drop_roles

    root = tmp_path / "tree"
    (root / "hr").mkdir(parents=True)
    (root / "hr" / "pay.md").write_text("# Pay\n\nThe salary grid markhr.\n", encoding="utf-8")
    (root / "open.md").write_text("# Open\n\nThe salary policy markopen.\n", encoding="utf-8")
    (root / ".ragpg-access").write_text("hr/** @hr\n", encoding="utf-8")
    site(db_url)
    call_command("migrate", verbosity=0)
    call("ingest", str(root))
    with psycopg.connect(db_url, autocommit=True) as admin:
        permissions.enable(admin)
    try:
        hr = Group.objects.create(name="hr")
        alice = User.objects.create_user("alice", password="pw-alice-0000")
        alice.groups.add(hr)
        User.objects.create_user("bob", password="pw-bob-00000")
        conf = {"SCHEMA": "ragpg", "COLLECTION": "default", "EMBEDDING_PROVIDER": "http",
                "EMBEDDING_URL": embed_server.url, "PERMISSIONS": True}
        with override_settings(RAGPG=conf):
            seen = {}
            for name in ("alice", "bob", None):
                client = Client()
                if name is not None:
                    client.force_login(User.objects.get(username=name))
                response = client.get("/search", {"q": "salary", "mode": "keyword", "k": "10"})
                assert response.status_code == 200, response.content
                seen[name] = {h["path"] for h in response.json()["hits"]}
        assert seen == {"alice": {"hr/pay.md", "open.md"}, "bob": {"open.md"}, None: {"open.md"}}
    finally:
        from django.db import connections

        connections.close_all()
        drop_roles(db_url, tenancy.surface_role("ragpg"))
