"""The read-only role for BI tools: exactly its grants, nothing more (RELIABILITY G6)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from rag_pg import ConfigError, RagPG, SchemaMissing, Settings
from rag_pg.store import migrate
from rag_pg.store.roles import PUBLISHED_VIEWS, create_reader, normalise_timeout

from .conftest import ROOT, run_cli
from .rows import value

FUNCTION = "ragpg.keyword_search(text,integer,text)"  # as regprocedure prints it


def as_user(url: str, user: str) -> str:
    return make_conninfo(url, user=user, password="")


def drop_roles(admin_url: str, *names: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for name in names:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
            if exists:
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def role_names(db_url: str) -> Iterator[Callable[[], str]]:
    """Unique role names (roles are cluster-wide), dropped after the test."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        row = value(conn, "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")
    if not (row and row):
        pytest.skip("the test database user cannot create roles")
    made: list[str] = []

    def new() -> str:
        made.append(f"ragpg_test_reader_{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield new
    drop_roles(db_url, *made)


@pytest.fixture
def reader(db_url: str, role_names: Callable[[], str]) -> str:
    name = role_names()
    with psycopg.connect(db_url, autocommit=True) as conn:
        role = create_reader(conn, name)
    assert role.created and role.statement_timeout == "30s"
    return name


@pytest.fixture
def indexed(db_url: str, embed_server: Any, corpus: Path) -> None:
    settings = Settings().with_overrides(**{
        "database.url": db_url, "embedding.provider": "http", "embedding.url": embed_server.url,
    })
    with RagPG(db_url, settings) as rag:
        assert rag.ingest(corpus).documents_indexed == 9


def grants(conn: psycopg.Connection[Any], name: str) -> set[tuple[str, str]]:
    """Every privilege held by ``name`` in this database (tables, views, sequences, schemas,
    functions, the database itself), from the ACLs: what the role can do beyond PUBLIC."""
    rows = conn.execute(
        """
        WITH r AS (SELECT oid FROM pg_roles WHERE rolname = %(name)s)
        SELECT n.nspname || '.' || c.relname, a.privilege_type
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
             aclexplode(c.relacl) a, r WHERE a.grantee = r.oid
        UNION ALL
        SELECT 'schema ' || n.nspname, a.privilege_type
        FROM pg_namespace n, aclexplode(n.nspacl) a, r WHERE a.grantee = r.oid
        UNION ALL
        SELECT p.oid::regprocedure::text, a.privilege_type
        FROM pg_proc p, aclexplode(p.proacl) a, r WHERE a.grantee = r.oid
        UNION ALL
        SELECT 'database ' || d.datname, a.privilege_type
        FROM pg_database d, aclexplode(d.datacl) a, r WHERE a.grantee = r.oid
        UNION ALL
        SELECT 'column ' || c.relname || '.' || at.attname, a.privilege_type
        FROM pg_attribute at JOIN pg_class c ON c.oid = at.attrelid,
             aclexplode(at.attacl) a, r WHERE a.grantee = r.oid
        """,
        {"name": name},
    ).fetchall()
    return {(str(obj), str(priv)) for obj, priv in rows}


EXPECTED_GRANTS = {("schema ragpg", "USAGE"), (FUNCTION, "EXECUTE"),
                   ("ragpg.tenant_collections()", "EXECUTE"),
                   ("ragpg.acting_principals()", "EXECUTE")} | {
    (f"ragpg.{view}", "SELECT") for view in PUBLISHED_VIEWS
}


def test_reader_has_exactly_the_published_grants(db_url: str, reader: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert grants(conn, reader) == EXPECTED_GRANTS
        attributes = conn.execute(
            "SELECT rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication,"
            " rolbypassrls, rolconnlimit FROM pg_roles WHERE rolname = %s",
            (reader,),
        ).fetchone()
        assert attributes == (False, True, False, False, True, False, False, 10)
        memberships = conn.execute(
            "SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member"
            " WHERE r.rolname = %s",
            (reader,),
        ).fetchone()
        assert memberships == (0,)
        settings = conn.execute(
            "SELECT s.setconfig FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole"
            " WHERE r.rolname = %s AND s.setdatabase = 0",
            (reader,),
        ).fetchall()
        assert settings == [(["statement_timeout=30s", "default_transaction_read_only=on"],)]


def test_reader_can_query_every_view_and_keyword_search(db_url: str, reader: str, indexed: None) -> None:
    with psycopg.connect(as_user(db_url, reader), autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (reader,)
        for view in PUBLISHED_VIEWS:
            rows = conn.execute(sql.SQL("SELECT * FROM ragpg.{}").format(sql.Identifier(view))).fetchall()
            assert rows, view
        hits = conn.execute("SELECT path, anchor FROM ragpg.keyword_search('sauvegarde pg_dump', 3)").fetchall()
        assert hits and hits[0][0] == "fr/admin/sauvegardes.md"
        other = conn.execute("SELECT * FROM ragpg.keyword_search('tarte', 3, 'nowhere')").fetchall()
        assert other == []


FORBIDDEN = [
    "INSERT INTO ragpg.collection (name) VALUES ('x')",
    "INSERT INTO ragpg.documents_v (collection, path, title, content_hash) VALUES ('d', 'p', 't', 'h')",
    "UPDATE ragpg.document SET title = 'x'",
    "UPDATE ragpg.documents_v SET title = 'x'",
    "UPDATE ragpg.ingest_runs_v SET status = 'x'",
    "DELETE FROM ragpg.chunk",
    "DELETE FROM ragpg.documents_v",
    "TRUNCATE ragpg.ingest_run",
    "TRUNCATE ragpg.document CASCADE",
    "SELECT * FROM ragpg.document",
    "SELECT * FROM ragpg.chunk",
    "SELECT * FROM ragpg.chunk_vector",
    "SELECT * FROM ragpg.alembic_version",
    "SELECT nextval('ragpg.chunk_id_seq')",
    "CREATE TABLE ragpg.evil (x int)",
    "CREATE VIEW ragpg.evil_v AS SELECT 1 AS x",
    "CREATE FUNCTION ragpg.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE INDEX evil_idx ON ragpg.document (title)",
    "CREATE SCHEMA evil",
    "ALTER TABLE ragpg.document ADD COLUMN evil int",
    "DROP VIEW ragpg.documents_v",
    "CREATE ROLE evil",
]


def test_reader_cannot_write_read_tables_or_create(db_url: str, reader: str, indexed: None) -> None:
    with psycopg.connect(as_user(db_url, reader), autocommit=True) as conn:
        # The read-only default is a session setting the reader may lift: privileges must hold alone.
        conn.execute("SET default_transaction_read_only = off")
        statements = list(FORBIDDEN)
        row = value(conn, "SELECT current_setting('server_version_num')::int")
        if row and row >= 150000:  # before 15, PUBLIC may CREATE in schema public by default
            statements.append("CREATE TABLE public.evil (x int)")
        outcomes = {}
        for statement in statements:
            try:
                conn.execute(statement)
                outcomes[statement] = "succeeded"
            except psycopg.errors.InsufficientPrivilege:
                outcomes[statement] = "denied"
            except psycopg.Error as exc:
                outcomes[statement] = f"{type(exc).__name__}: {exc}"
        assert outcomes == {statement: "denied" for statement in statements}
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM ragpg.document").fetchone() == (9,)
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'evil%'").fetchone() == (0,)


def test_reader_sessions_are_read_only_with_the_statement_timeout(db_url: str, reader: str) -> None:
    with psycopg.connect(as_user(db_url, reader), autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("30s",)
        assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TEMP TABLE scratch (x int)")


def test_statement_timeout_cancels_a_runaway_query(db_url: str, role_names: Callable[[], str]) -> None:
    name = role_names()
    with psycopg.connect(db_url, autocommit=True) as conn:
        create_reader(conn, name, statement_timeout="200ms")
    with psycopg.connect(as_user(db_url, name), autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("200ms",)
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            conn.execute("SELECT pg_sleep(60)")


def test_create_reader_is_idempotent_and_takes_back_extra_grants(db_url: str, reader: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        ident = sql.Identifier(reader)
        conn.execute(sql.SQL("GRANT SELECT, INSERT ON ragpg.chunk TO {}").format(ident))
        conn.execute(sql.SQL("GRANT CREATE ON SCHEMA ragpg TO {}").format(ident))
        conn.execute(sql.SQL("GRANT UPDATE (title) ON ragpg.document TO {}").format(ident))
        conn.execute(sql.SQL("GRANT USAGE ON ragpg.chunk_id_seq TO {}").format(ident))
        assert grants(conn, reader) > EXPECTED_GRANTS
        again = create_reader(conn, reader, statement_timeout="1min", connection_limit=3)
        assert (again.created, again.statement_timeout, again.connection_limit) == (False, "1min", 3)
        assert grants(conn, reader) == EXPECTED_GRANTS
        limit = conn.execute("SELECT rolconnlimit FROM pg_roles WHERE rolname = %s", (reader,)).fetchone()
        assert limit == (3,)


def test_password_reaches_the_server_hashed(db_url: str, role_names: Callable[[], str]) -> None:
    name = role_names()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert create_reader(conn, name, password="correct horse battery").password_set
        stored = value(conn, "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (name,))
        assert stored is not None and stored.startswith(("SCRAM-SHA-256$", "md5"))
        assert "correct horse" not in stored
        create_reader(conn, name)  # no password given: the existing one is kept
        kept = value(conn, "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (name,))
        assert kept == stored


def test_refuses_to_adopt_a_role_with_more_rights(db_url: str, role_names: Callable[[], str]) -> None:
    powerful, member = role_names(), role_names()
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEDB").format(sql.Identifier(powerful)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE pg_read_all_data").format(sql.Identifier(member)))
        with pytest.raises(ConfigError, match="CREATEDB"):
            create_reader(conn, powerful)
        with pytest.raises(ConfigError, match="member of pg_read_all_data"):
            create_reader(conn, member)
        with pytest.raises(ConfigError, match="current user"):
            create_reader(conn, str(value(conn, "SELECT current_user")))
        assert grants(conn, powerful) == set() and grants(conn, member) == set()
        assert conn.execute(
            "SELECT rolcreatedb FROM pg_roles WHERE rolname = %s", (powerful,)
        ).fetchone() == (True,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "pg_reader"}, "reserved"),
        ({"name": ""}, "empty"),
        ({"name": "r" * 64}, "63 bytes"),
        ({"name": 'bi"; DROP ROLE x; --'}, "plain identifier"),
        ({"name": "bi reader"}, "plain identifier"),
        ({"statement_timeout": "0"}, "positive"),
        ({"statement_timeout": "soon"}, "30s"),
        ({"statement_timeout": "40d"}, "too large"),
        ({"connection_limit": 0}, "connection limit"),
        ({"password": ""}, "password"),
    ],
)
def test_bad_arguments_are_configuration_errors(db_url: str, kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"name": "ragpg_never_created"} | kwargs
    with psycopg.connect(db_url, autocommit=True) as conn:
        with pytest.raises(ConfigError, match=message):
            create_reader(conn, **arguments)
        assert conn.execute(
            "SELECT count(*) FROM pg_roles WHERE rolname = %s", (arguments["name"],)
        ).fetchone() == (0,)


def test_timeouts_are_normalised() -> None:
    assert [normalise_timeout(v) for v in ("30s", " 500 ms ", "2min", "1h", "250")] == [
        "30s", "500ms", "2min", "1h", "250ms"
    ]


def test_needs_the_published_schema(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        with pytest.raises(SchemaMissing, match="ragpg init"):
            create_reader(conn, "ragpg_never_created")
        assert conn.execute(
            "SELECT count(*) FROM pg_roles WHERE rolname = 'ragpg_never_created'"
        ).fetchone() == (0,)


def test_cli_create_reader(db_url: str, role_names: Callable[[], str], tmp_path: Path) -> None:
    name = role_names()
    env = {"RAGPG_DATABASE_URL": db_url, "READER_PW": "s3cret-for-bi"}
    args = ["roles", "create-reader", name, "--password-env", "READER_PW", "--statement-timeout", "45s"]
    out = run_cli([*args, "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data == {
        "name": name, "schema": "ragpg", "database": data["database"], "created": True,
        "views": list(PUBLISHED_VIEWS),
        "functions": ["acting_principals()", "keyword_search(text, integer, text)",
                      "tenant_collections()"],
        "statement_timeout": "45s", "connection_limit": 10, "password_set": True, "tenant": None,
            "principals": None,
    }
    assert "s3cret" not in out.stdout + out.stderr
    with psycopg.connect(as_user(db_url, name), autocommit=True) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("45s",)
    again = run_cli(["roles", "create-reader", name], env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"role {name} updated" in again.stdout and "statement_timeout 30s" in again.stdout


def test_cli_errors_are_one_line_with_exit_2(db_url: str, empty_db_url: str, tmp_path: Path) -> None:
    missing_var = run_cli(["roles", "create-reader", "ragpg_never_created", "--password-env", "NOPE_UNSET"],
                          env={"RAGPG_DATABASE_URL": db_url}, cwd=tmp_path)
    no_schema = run_cli(["roles", "create-reader", "ragpg_never_created"],
                        env={"RAGPG_DATABASE_URL": empty_db_url}, cwd=tmp_path)
    for out, text in ((missing_var, "NOPE_UNSET"), (no_schema, "ragpg init")):
        assert out.returncode == 2, out.stderr
        assert text in out.stderr and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_an_owner_without_superuser_can_publish_to_a_reader(empty_db_url: str,
                                                             role_names: Callable[[], str]) -> None:
    """The realistic deployment: the app's owner role (CREATEROLE, not superuser) runs it."""
    owner, name = role_names(), role_names()
    with psycopg.connect(empty_db_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE").format(sql.Identifier(owner)))
        admin.execute(
            sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
                sql.Identifier(admin.info.dbname), sql.Identifier(owner)
            )
        )
    try:
        with psycopg.connect(as_user(empty_db_url, owner), autocommit=True) as conn:
            migrate.upgrade(conn, "ragpg")
            role = create_reader(conn, name)
            assert role.created
            assert grants(conn, name) == EXPECTED_GRANTS
        with psycopg.connect(as_user(empty_db_url, name), autocommit=True) as conn:
            assert conn.execute("SELECT * FROM ragpg.keyword_search('tarte', 3)").fetchall() == []
            assert conn.execute("SELECT count(*) FROM ragpg.corpus_stats_v").fetchone() == (0,)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT * FROM ragpg.document")
    finally:
        drop_roles(empty_db_url, name, owner)


def test_every_query_in_docs_sql_runs_as_the_reader(db_url: str, reader: str, indexed: None) -> None:
    text = (ROOT / "docs" / "sql.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sql\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 6
    with psycopg.connect(as_user(db_url, reader), autocommit=True) as conn:
        for block in blocks:
            rows = conn.execute(block).fetchall()
            assert rows, block


def test_a_reader_that_changes_its_own_defaults_is_reported_until_recreated(
    db_url: str, reader: str
) -> None:
    from rag_pg.store.integrity import check

    with psycopg.connect(db_url, autocommit=True) as conn:
        assert check(conn) == []
        # PostgreSQL lets every role change its own defaults; the reader does so.
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(reader)))
        conn.execute(sql.SQL("ALTER ROLE {} SET statement_timeout = 0").format(sql.Identifier(reader)))
        conn.execute("RESET ROLE")
        problems = check(conn)
        assert [(p.code, p.subject, p.detail) for p in problems] == [
            ("reader_settings", reader, "statement_timeout is 0")]
        create_reader(conn, reader)
        assert check(conn) == []
