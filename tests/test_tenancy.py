"""Tenants isolated by row-level security, on the real server: what each login may see."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.conninfo import make_conninfo

from rag_pg import RagPG, Settings, StoreError
from rag_pg.errors import CollectionNotFound, ConfigError
from rag_pg.store import roles, tenancy

from .conftest import run_cli
from .rows import records, values
from .test_roles import drop_roles

WORDS = ["backup", "replica", "index", "vacuum", "tenant", "search", "vector", "policy",
         "restore", "schema", "pool", "ledger", "invoice", "garden", "harbour", "lantern"]
TENANTS = {"acme": ["acme_docs", "shared"], "globex": ["globex_docs", "shared"],
           "initech": ["initech_docs"]}
COLLECTIONS = sorted({c for held in TENANTS.values() for c in held})
PASSWORD = "s3cret-tenancy"


def write_corpus(root: Path, collection: str, documents: int, offset: int = 0) -> Path:
    """Markdown files whose words overlap across collections (so a leak would be found) with
    one marker word of the collection."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(offset, offset + documents):
        words = [WORDS[(i * 3 + j + len(collection)) % len(WORDS)] for j in range(12)]
        (root / f"{collection}-{i}.md").write_text(
            f"# {collection} note {i}\n\n{' '.join(words)} mark{collection}.\n\n"
            f"## Details\n\n{' '.join(reversed(words))} and more {words[0]} {words[1]}.\n",
            encoding="utf-8")
    return root


@dataclass
class Tenancy:
    admin_url: str  # a superuser: outside the policies, to check what is really there
    runtime_url: str
    settings: Settings
    tmp: Path

    admin: psycopg.Connection[Any]

    def owner_of(self, chunk_ids: list[int]) -> set[str]:
        return set(values(self.admin, "SELECT DISTINCT collection FROM ragpg.chunk WHERE id = ANY(%s)",
                          (chunk_ids,)))


def tables_with_a_collection(conn: psycopg.Connection[Any]) -> list[str]:
    """What the policy must hold: every table of the schema that carries a collection."""
    return values(conn,
        "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
        " WHERE c.relnamespace = 'ragpg'::regnamespace AND c.relkind IN ('r', 'p')"
        " AND NOT a.attisdropped AND (a.attname = 'collection'"
        "   OR (c.relname = 'collection' AND a.attname = 'name'))"
        " AND c.relname NOT IN ('tenant_collection', 'tenant_role')")


def role_name(kind: str) -> str:
    return f"ragpg_test_{kind}_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def made_roles(db_url: str) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    drop_roles(db_url, *made)


@pytest.fixture
def tenants(db_url: str, embed_server: Any, tmp_path: Path,
            made_roles: list[str]) -> Iterator[Tenancy]:
    """Tenancy enabled, a runtime role, three tenants (two share a collection), each
    collection indexed by the runtime role acting for a tenant that holds it."""
    runtime = role_name("runtime")
    made_roles.extend([runtime, tenancy.surface_role("ragpg")])
    with psycopg.connect(db_url, autocommit=True) as conn:
        held = tenancy.enable(conn)
        assert {"chunk", "chunk_vector", "collection", "document", "ingest_run",
                "term_stat"} <= set(held)
        assert set(held) == set(tables_with_a_collection(conn))
        roles.create_runtime(conn, runtime, password=PASSWORD)
        for tenant, held in TENANTS.items():
            tenancy.assign(conn, tenant, held)
    settings = Settings().with_overrides(**{
        "embedding.provider": "http", "embedding.url": embed_server.url,
        "tenancy.enabled": True, "database.pool_size": 1})
    with psycopg.connect(db_url, autocommit=True) as admin:
        state = Tenancy(db_url, make_conninfo(db_url, user=runtime, password=PASSWORD),
                        settings, tmp_path, admin)
        with RagPG(state.runtime_url, settings) as rag:
            for collection in COLLECTIONS:
                tenant = next(t for t, held in TENANTS.items() if collection in held)
                with tenancy.acting_for(tenant):
                    corpus = write_corpus(tmp_path / collection, collection, 4)
                    assert rag.ingest(corpus, collection=collection).documents_indexed == 4
        yield state


def test_runtime_role_is_neither_owner_superuser_nor_bypassrls(tenants: Tenancy) -> None:
    with psycopg.connect(tenants.runtime_url, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
                           ).fetchone()
        assert row == (False, False)
        for statement in ("ALTER TABLE ragpg.chunk DISABLE ROW LEVEL SECURITY",
                          "TRUNCATE ragpg.chunk",
                          "INSERT INTO ragpg.tenant_collection VALUES ('acme', 'initech_docs')",
                          "SELECT * FROM ragpg.tenant_role"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(tenants.admin_url, autocommit=True) as conn:
        state = tenancy.status(conn)
        flags = conn.execute(
            "SELECT bool_and(relrowsecurity AND relforcerowsecurity) FROM pg_class"
            " WHERE relnamespace = 'ragpg'::regnamespace AND relname = ANY(%s)",
            (list(state.scoped),)).fetchone()
    assert state.enabled and state.unscoped == () and flags == (True,)


MODES = ["vector", "keyword", "hybrid", "chunks_v", "documents_v", "corpus_stats_v",
         "keyword_search"]


STEPS = st.lists(st.tuples(st.sampled_from(sorted(TENANTS)), st.sampled_from(MODES),
                           st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
                           st.sampled_from(COLLECTIONS)),
                 min_size=1, max_size=6)


def test_no_query_sees_another_tenants_rows(tenants: Tenancy) -> None:
    """One pool of one connection, lent to tenant after tenant: every row read belongs to
    the tenant it was read for, and the connection comes back with no tenant set."""
    pids: set[int] = set()
    reads = {"rows": 0}
    with RagPG(tenants.runtime_url, tenants.settings) as rag:

        @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
        @given(steps=STEPS)
        def check(steps: list[Any]) -> None:
            for tenant, mode, words, collection in steps:
                query = " ".join(words)
                with tenancy.acting_for(tenant):
                    seen = read(rag, tenants, mode, query, collection)
                assert seen <= set(TENANTS[tenant]), (tenant, mode, query, collection, seen)
                reads["rows"] += len(seen)
                with tenancy.unwrapped(rag.source).connection() as conn:  # type: ignore[attr-defined]
                    [row] = records(conn, "SELECT current_setting('ragpg.tenant', true) AS tenant,"
                                          " pg_backend_pid() AS pid")
                assert row["tenant"] in (None, "")
                pids.add(row["pid"])

        check()
    assert len(pids) == 1  # the same pooled connection served every tenant
    assert reads["rows"] > 0  # and it did find rows: the check could have failed


def read(rag: RagPG, state: Tenancy, mode: str, query: str, collection: str) -> set[str]:
    """The collections of what ``mode`` returned, as the server (not the library) says."""
    if mode in ("vector", "keyword", "hybrid"):
        try:
            hits = rag.search(query, k=10, mode=mode, collection=collection)  # type: ignore[arg-type]
        except CollectionNotFound:
            return set()
        ids = [h.chunk_id for h in hits if h.chunk_id is not None]
        assert len(ids) == len(hits)
        return state.owner_of(ids)
    with rag.source.connection() as conn, conn.transaction():
        if mode == "keyword_search":  # no collection column: each file is named after its own
            return {path.rsplit("-", 1)[0] for path in values(conn,
                "SELECT path FROM ragpg.keyword_search(%s, 20, %s)", (query, collection))}
        return set(values(conn, sql.SQL("SELECT collection FROM ragpg.{}").format(
            sql.Identifier(mode))))


def test_each_tenant_reads_all_of_its_own_collections(tenants: Tenancy) -> None:
    with RagPG(tenants.runtime_url, tenants.settings) as rag:
        for tenant, held in TENANTS.items():
            with tenancy.acting_for(tenant):
                assert sorted(rag.collections()) == sorted(held)
                for collection in held:
                    assert rag.stats(collection).documents == 4
                    hits = rag.search(f"mark{collection}", k=4, mode="keyword",
                                      collection=collection)
                    assert len(hits) == 4 and tenants.owner_of(
                        [h.chunk_id for h in hits if h.chunk_id]) == {collection}


def test_no_tenant_no_rows(tenants: Tenancy, made_roles: list[str]) -> None:
    with RagPG(tenants.runtime_url, tenants.settings) as rag:
        assert rag.collections() == []
        with pytest.raises(CollectionNotFound):
            rag.search("backup", collection="acme_docs")
        with tenancy.acting_for("nobody"):  # a tenant with no collections
            assert rag.collections() == []
    # A login that is neither registered nor the owner: nothing, whatever it sets.
    stranger = role_name("reader")
    made_roles.append(stranger)
    with psycopg.connect(tenants.admin_url, autocommit=True) as conn:
        roles.create_reader(conn, stranger)
    with psycopg.connect(make_conninfo(tenants.admin_url, user=stranger, password=""),
                         autocommit=True) as conn:
        conn.execute("SET ragpg.tenant = 'acme'")
        for view in ("chunks_v", "documents_v", "corpus_stats_v", "ingest_runs_v"):
            assert conn.execute(sql.SQL("SELECT count(*) FROM ragpg.{}").format(
                sql.Identifier(view))).fetchone() == (0,), view


def test_a_tenant_cannot_write_into_another_tenants_collection(tenants: Tenancy) -> None:
    with RagPG(tenants.runtime_url, tenants.settings) as rag, tenancy.acting_for("initech"):
        corpus = write_corpus(tenants.tmp / "intruder", "acme_docs", 1, offset=50)
        with pytest.raises(StoreError, match="refused for tenant 'initech': new row violates"
                           " row-level security policy"):
            rag.ingest(corpus, collection="acme_docs")
    with psycopg.connect(tenants.admin_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM ragpg.document WHERE collection = 'acme_docs'"
                            ).fetchone() == (4,)


def test_bm25_scores_of_a_tenant_do_not_move_when_another_adds_documents(tenants: Tenancy) -> None:
    """A tenant's statistics are its collections': another tenant's documents, full of the
    same words, change neither df nor the average length A's scores are computed with."""
    with RagPG(tenants.runtime_url, tenants.settings) as rag:
        def scores() -> list[tuple[int | None, float]]:
            with tenancy.acting_for("initech"):
                hits = rag.search("backup replica vacuum", k=10, mode="keyword",
                                  collection="initech_docs")
            return [(h.chunk_id, h.score) for h in hits]

        before = scores()
        assert before
        with tenancy.acting_for("globex"):
            corpus = write_corpus(tenants.tmp / "more", "globex_docs", 12, offset=100)
            assert rag.ingest(corpus, collection="globex_docs").documents_indexed == 12
        assert scores() == before
        with tenancy.acting_for("globex"):  # its own scores did move: the check can fail
            assert rag.stats("globex_docs").documents == 16


def test_a_bi_reader_sees_only_its_tenant_and_cannot_choose_another(
        tenants: Tenancy, made_roles: list[str]) -> None:
    reader = role_name("reader")
    made_roles.append(reader)
    with psycopg.connect(tenants.admin_url, autocommit=True) as conn:
        role = roles.create_reader(conn, reader, password=PASSWORD, tenant="acme")
    assert role.tenant == "acme"
    url = make_conninfo(tenants.admin_url, user=reader, password=PASSWORD)

    def visible(conn: psycopg.Connection[Any]) -> set[str]:
        seen: set[str] = set()
        for view in ("chunks_v", "documents_v", "corpus_stats_v", "ingest_runs_v"):
            seen |= set(values(conn, sql.SQL("SELECT collection FROM ragpg.{}")
                                                .format(sql.Identifier(view))))
        for collection in COLLECTIONS:
            seen |= {path.rsplit("-", 1)[0] for path in values(conn,
                "SELECT path FROM ragpg.keyword_search('backup replica', 50, %s)",
                (collection,))}
        return seen

    with psycopg.connect(url, autocommit=True) as conn:
        assert visible(conn) == set(TENANTS["acme"])
        conn.execute("SET ragpg.tenant = 'globex'")  # a setting cannot move it
        assert visible(conn) == set(TENANTS["acme"])
        with conn.transaction():
            conn.execute("SELECT set_config('ragpg.tenant', 'initech', true)")
            assert visible(conn) == set(TENANTS["acme"])
        # Nor can a role default: PostgreSQL refuses a role's ALTER ROLE SET of a custom
        # setting without SET privilege on it (and the policy would ignore it anyway).
        conn.execute("SET default_transaction_read_only = off")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(sql.SQL("ALTER ROLE {} SET ragpg.tenant = 'globex'").format(
                sql.Identifier(reader)))
        for table in ("tenant_role", "tenant_collection", "chunk"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT * FROM ragpg.{}").format(sql.Identifier(table)))
    with psycopg.connect(tenants.admin_url, autocommit=True) as conn:  # another tenant later
        roles.create_reader(conn, reader, tenant="globex")
    with psycopg.connect(url, autocommit=True) as conn:
        assert visible(conn) == set(TENANTS["globex"])


def test_enable_is_idempotent_and_disable_removes_every_policy(tenants: Tenancy) -> None:
    with psycopg.connect(tenants.admin_url, autocommit=True) as conn:
        first = tenancy.status(conn)
        tenancy.enable(conn)
        assert tenancy.status(conn) == first
        assert len(tenancy.disable(conn)) == len(first.scoped)
        after = tenancy.status(conn)
        assert after.scoped == () and not after.enabled
        assert conn.execute("SELECT count(*) FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid"
                            " WHERE c.relnamespace = 'ragpg'::regnamespace").fetchone() == (0,)
    # Without the policies the runtime role sees every collection, with or without a tenant.
    with RagPG(tenants.runtime_url, tenants.settings) as rag:
        assert sorted(rag.collections()) == COLLECTIONS


def test_cli_enables_assigns_binds_and_reports(db_url: str, tmp_path: Path,
                                               made_roles: list[str]) -> None:
    runtime, reader = role_name("runtime"), role_name("reader")
    made_roles.extend([runtime, reader, tenancy.surface_role("ragpg")])
    env = {"RAGPG_DATABASE_URL": db_url, "RT_PW": PASSWORD}
    steps = [["tenancy", "enable"], ["tenancy", "assign", "acme", "acme_docs", "shared"],
             ["tenancy", "assign", "acme", "shared", "--remove"],
             ["roles", "create-runtime", runtime, "--password-env", "RT_PW"],
             ["roles", "create-reader", reader, "--tenant", "acme"]]
    outs = [run_cli(step, env=env, cwd=tmp_path) for step in steps]
    assert [o.returncode for o in outs] == [0] * len(steps), [o.stderr for o in outs]
    assert "tenant acme: acme_docs" in outs[2].stdout and PASSWORD not in outs[3].stdout
    status = run_cli(["tenancy", "status", "--json"], env=env, cwd=tmp_path)
    data = json.loads(status.stdout)
    assert data["enabled"] and data["unscoped"] == [] and data["tenants"] == {"acme": ["acme_docs"]}
    assert data["roles"] == {runtime: None, reader: "acme"}
    off = run_cli(["tenancy", "disable"], env=env, cwd=tmp_path)
    assert off.returncode == 0 and f"removed from {len(data['scoped'])} tables" in off.stdout
    assert json.loads(run_cli(["tenancy", "status", "--json"], env=env,
                              cwd=tmp_path).stdout)["enabled"] is False


def test_an_owner_that_is_no_superuser_is_held_too(db_url: str, embed_server: Any, tmp_path: Path,
                                                   made_roles: list[str]) -> None:
    """FORCE ROW LEVEL SECURITY: the tables' own owner reads nothing without a tenant, and
    only its tenant's collections with one."""
    owner = role_name("owner")
    made_roles.extend([owner, tenancy.surface_role("owned")])
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEROLE PASSWORD {}").format(
            sql.Identifier(owner), sql.Literal(PASSWORD)))
        conn.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(conn.info.dbname), sql.Identifier(owner)))
    url = make_conninfo(db_url, user=owner, password=PASSWORD)
    settings = Settings().with_overrides(**{
        "embedding.provider": "http", "embedding.url": embed_server.url,
        "tenancy.enabled": True, "database.schema": "owned"})
    with RagPG(url, settings) as rag:
        rag.init()  # migrates, then enables tenancy (tenancy.enabled)
        with rag.source.connection() as conn:
            tenancy.assign(conn, "acme", ["a"], "owned")
            tenancy.assign(conn, "globex", ["b"], "owned")
        for tenant, collection in (("acme", "a"), ("globex", "b")):
            with tenancy.acting_for(tenant):
                corpus = write_corpus(tmp_path / collection, collection, 2)
                assert rag.ingest(corpus, collection=collection).documents_indexed == 2
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM owned.chunk").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM owned.chunks_v").fetchone() == (0,)
        with conn.transaction():
            conn.execute(tenancy.statement("acme"))
            assert set(values(conn, "SELECT collection FROM owned.chunk")) == {"a"}
            assert set(values(conn, "SELECT collection FROM owned.chunks_v")) == {"a"}
    with psycopg.connect(db_url, autocommit=True) as conn:  # the superuser sees both
        assert set(values(conn, "SELECT collection FROM owned.chunk")) == {"a", "b"}
        conn.execute("DROP SCHEMA owned CASCADE")
        conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM {}").format(
            sql.Identifier(conn.info.dbname), sql.Identifier(owner)))


def test_a_tenant_on_a_callers_connection_is_refused(tenants: Tenancy) -> None:
    """A caller's connection opens its own transactions, so ragpg could not name the tenant
    in each: refused in one line rather than run unscoped."""
    with psycopg.connect(tenants.runtime_url) as conn, \
            RagPG(conn, tenants.settings, tenant="acme") as rag:
        with pytest.raises(ConfigError, match="tenancy needs ragpg's own connections"):
            rag.search("backup", collection="acme_docs")
