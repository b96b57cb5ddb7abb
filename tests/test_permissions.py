"""Document permissions on the real server: who may read what, enforced by PostgreSQL.

Each test tries to leak: a principal that may not read a document must never see its text,
title, path, anchor, score or existence, through any read ragpg offers.
"""

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

from rag_pg import RagPG, Settings
from rag_pg.errors import ConfigError
from rag_pg.store import permissions, roles, tenancy

from .conftest import run_cli
from .rows import records, value, values
from .test_roles import drop_roles

PASSWORD = "s3cret-permissions"
RULES = """\
# who reads what
hr/**            @hr
internal/**      @staff @hr
internal/faq.md  public
"""
# path -> (front matter lines, readers as stored); every file says "budget" and its marker.
FILES: dict[str, tuple[str, list[str] | None]] = {
    "public.md": ("", None),
    "hr/salaries.md": ("", ["hr"]),
    "hr/open.md": ("access: public\n", None),
    "internal/notes.md": ("", ["hr", "staff"]),
    "internal/faq.md": ("", None),
    "secret.md": ("access: [user:alice]\n", ["user:alice"]),
    "nobody.md": ("access: []\n", []),
}
ASKERS: list[tuple[str, ...]] = [(), ("hr",), ("staff",), ("user:alice",), ("hr", "user:alice"),
                                 ("nobody-at-all",)]


def marker(path: str) -> str:
    return "mark" + path.replace("/", "").replace(".md", "").replace(":", "")


def readable(path: str, asker: tuple[str, ...] | None) -> bool:
    readers = FILES[path][1]
    return asker is None or readers is None or bool(set(readers) & set(asker))


def write_tree(root: Path) -> Path:
    for path, (front, _) in FILES.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        head = f"---\n{front}---\n\n" if front else ""
        target.write_text(
            f"{head}# Title {marker(path)}\n\nThe budget of {marker(path)} is here.\n\n"
            f"## Details {marker(path)}\n\nMore budget lines about {marker(path)} and planning.\n",
            encoding="utf-8")
    (root / ".ragpg-access").write_text(RULES, encoding="utf-8")
    return root


@dataclass
class Index:
    url: str
    settings: Settings
    root: Path
    admin: psycopg.Connection[Any]
    made: list[str]


@pytest.fixture
def index(db_url: str, embed_server: Any, tmp_path: Path) -> Iterator[Index]:
    made = [tenancy.surface_role("ragpg")]
    settings = Settings().with_overrides(**{
        "embedding.provider": "http", "embedding.url": embed_server.url,
        "database.pool_size": 1, "retrieval.max_per_section": 0})
    root = write_tree(tmp_path / "tree")
    with RagPG(db_url, settings) as rag:
        rag.init()
        assert rag.ingest(root).documents_indexed == len(FILES)
    with psycopg.connect(db_url, autocommit=True) as admin:
        held = permissions.enable(admin)
        assert sorted(held) == ["chunk", "chunk_vector", "document"]
        yield Index(db_url, settings, root, admin, made)
    drop_roles(db_url, *reversed(made))


def paths_of(rag: RagPG, hits: list[Any]) -> set[str]:
    return {h.path for h in hits}


def stored_readers(admin: psycopg.Connection[Any], collection: str, table: str) -> dict[str, Any]:
    """path -> the readers the rows of ``table`` carry for it (one value per path, or a
    KeyError-free mismatch the caller sees)."""
    document = {"document": "t.id", "chunk": "t.document_id",
                "chunk_vector": "(SELECT c.document_id FROM ragpg.chunk c WHERE c.id = t.chunk_id)"}
    query = sql.SQL("SELECT DISTINCT d.path, t.readers FROM ragpg.{} t JOIN ragpg.document d"
                    " ON d.collection = t.collection AND d.id = {} WHERE t.collection = %s").format(
        sql.Identifier(table), sql.SQL(document[table]))
    rows = records(admin, query, (collection,))
    found: dict[str, Any] = {}
    for row in rows:
        assert row["path"] not in found, (table, row)  # one value per document
        found[row["path"]] = row["readers"]
    return found


def test_readers_are_stored_from_front_matter_then_rules(index: Index) -> None:
    for table in ("document", "chunk", "chunk_vector"):  # each row carries its document's
        assert stored_readers(index.admin, "default", table) == {
            path: readers for path, (_, readers) in FILES.items()}, table


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_each_asker_finds_exactly_what_it_may_read(index: Index, mode: str) -> None:
    with RagPG(index.url, index.settings) as rag:
        assert paths_of(rag, rag.search("budget", k=20, mode=mode)) == set(FILES)  # administrator
        for asker in ASKERS:
            with rag.acting_as(asker):
                hits = rag.search("budget planning", k=20, mode=mode, neighbours=1)
            expected = {p for p in FILES if readable(p, asker)}
            assert paths_of(rag, hits) == expected, (asker, mode)
            text = json.dumps([h.to_dict() for h in hits])
            for path in set(FILES) - expected:
                assert marker(path) not in text, (asker, path)


def test_a_forbidden_document_reads_as_missing_everywhere(index: Index) -> None:
    with RagPG(index.url, index.settings, principals=["staff"]) as rag:
        assert rag.get_document("hr/salaries.md") is None
        forbidden_id = value(index.admin, "SELECT id FROM ragpg.document WHERE path = 'hr/salaries.md'")
        assert rag.get_document(id=forbidden_id) is None
        assert rag.get_document("internal/notes.md") is not None
        missing = rag.locate(f"budget {marker('hr/salaries.md')}", "no/such.md")
        hidden = rag.locate(f"budget {marker('hr/salaries.md')}", "hr/salaries.md")
        # Told apart only by the target the asker typed: no id, no rank, no section.
        def answer(location: Any) -> dict[str, Any]:
            return {k: v for k, v in location.to_dict().items() if k not in ("target", "path")}

        assert hidden.document_id is None and answer(hidden) == answer(missing)
        stats = rag.stats()
        assert stats.documents == sum(readable(p, ("staff",)) for p in FILES)
        assert stats.last_run is None  # the whole collection's counts are not the asker's
        hits = rag.search(marker("hr/salaries.md"), k=5, mode="keyword")
        assert hits == []


def test_parent_expansion_never_brings_a_forbidden_parent(index: Index, tmp_path: Path) -> None:
    root = index.root
    (root / "summary.md").write_text(
        "---\nlevel: 1\naccess: [hr]\n---\n\n# Summary markparent\n\nThe hidden markparent plan.\n",
        encoding="utf-8")
    (root / "child.md").write_text(
        "---\nparent_source_file: summary.md\n---\n\n# Child markchild\n\nThe markchild text.\n",
        encoding="utf-8")
    with RagPG(index.url, index.settings) as rag:
        rag.ingest(root)
        [admin_hit] = rag.search("markchild", k=1, mode="keyword", expand="parent")
        assert "markparent" in json.dumps(admin_hit.to_dict())
        with rag.acting_as(["staff"]):
            [hit] = rag.search("markchild", k=1, mode="keyword", expand="parent")
        assert "markparent" not in json.dumps(hit.to_dict())


def test_postgresql_filters_every_read_of_an_acting_transaction(index: Index) -> None:
    """Not the search's own filter: any statement on a connection lent while acting."""
    with RagPG(index.url, index.settings, principals=["staff"]) as rag:
        with rag.reads.connection() as conn, conn.transaction():
            seen = {
                "document": set(values(conn, "SELECT path FROM ragpg.document")),
                "chunk": set(values(conn, "SELECT d.path FROM ragpg.chunk c JOIN ragpg.document d"
                                          " ON d.id = c.document_id")),
                "chunks_v": set(values(conn, "SELECT path FROM ragpg.chunks_v")),
            }
            vectors = value(conn, "SELECT count(*) FROM ragpg.chunk_vector")
    expected = {p for p in FILES if readable(p, ("staff",))}
    assert seen == {name: expected for name in seen}
    assert vectors == value(index.admin, "SELECT count(*) FROM ragpg.chunk c JOIN ragpg.document d"
                                         " ON d.id = c.document_id WHERE d.path = ANY(%s)",
                            (sorted(expected),))


def test_no_principal_is_left_on_a_pooled_connection(index: Index) -> None:
    with RagPG(index.url, index.settings, principals=["hr"]) as rag:
        rag.search("budget", k=3, mode="keyword")
        with tenancy.unwrapped(rag.source).connection() as conn:  # type: ignore[attr-defined]
            [row] = records(conn, "SELECT current_setting('ragpg.principals', true) AS p,"
                                  " current_user = session_user AS own_role")
        assert row["p"] in (None, "") and row["own_role"]


def test_a_bound_reader_reads_views_and_keyword_search_as_its_principals(index: Index) -> None:
    name = f"ragpg_test_reader_{uuid.uuid4().hex[:8]}"
    index.made.append(name)
    roles.create_reader(index.admin, name, password=PASSWORD, principals=("hr",))
    url = make_conninfo(index.url, user=name, password=PASSWORD)
    expected = {p for p in FILES if readable(p, ("hr",))}
    with psycopg.connect(url, autocommit=True) as conn:
        # Whatever it sets, the binding decides.
        conn.execute("SET ragpg.principals = '{user:alice,staff}'")
        assert set(values(conn, "SELECT DISTINCT path FROM ragpg.chunks_v")) == expected
        assert set(values(conn, "SELECT path FROM ragpg.documents_v")) == expected
        found = set(values(conn, "SELECT path FROM ragpg.keyword_search('budget', 50)"))
        assert found == expected
        assert values(conn, "SELECT path FROM ragpg.keyword_search(%s, 5)",
                      (marker("secret.md"),)) == []
    status = permissions.status(index.admin)
    assert status.enabled and status.readers[name] == ["hr"]


def test_a_runtime_role_is_held_without_changing_role(index: Index) -> None:
    name = f"ragpg_test_runtime_{uuid.uuid4().hex[:8]}"
    index.made.append(name)
    roles.create_runtime(index.admin, name, password=PASSWORD)
    url = make_conninfo(index.url, user=name, password=PASSWORD)
    with RagPG(url, index.settings) as rag:
        (index.root / "public.md").write_text("# Public\n\nA new budget page markfresh.\n",
                                              encoding="utf-8")
        report = rag.ingest(index.root)  # under row-level security: staged writes
        assert report.documents_indexed == 1
        assert paths_of(rag, rag.search("budget", k=20, mode="keyword")) == set(FILES)
        with rag.acting_as(["staff"]):
            hits = rag.search("budget", k=20, mode="keyword")
            with tenancy.unwrapped(rag.source).connection() as conn:  # type: ignore[attr-defined]
                assert value(conn, "SELECT current_user") == name
        assert paths_of(rag, hits) == {p for p in FILES if readable(p, ("staff",))}


def test_the_cli_reads_as_the_principals_it_is_given(index: Index) -> None:
    env = {"RAGPG_DATABASE_URL": index.url, "RAGPG_EMBEDDING_PROVIDER": "none"}
    done = run_cli(["--as", "staff", "search", "budget", "-k", "20", "--mode", "keyword", "--json"],
                   env=env)
    assert done.returncode == 0, done.stderr
    assert {h["path"] for h in json.loads(done.stdout)} == {
        p for p in FILES if readable(p, ("staff",))}
    done = run_cli(["search", "budget", "-k", "20", "--mode", "keyword", "--json"], env=env)
    assert {h["path"] for h in json.loads(done.stdout)} == set(FILES)
    bad = run_cli(["--as", "two words", "search", "budget"], env=env)
    assert bad.returncode == 2 and "not a principal" in bad.stderr


def test_eval_as_a_principal_scores_only_what_it_may_read(index: Index, tmp_path: Path) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"query": f"budget {marker('hr/salaries.md')}",
                                     "relevant": ["hr/salaries.md"]}) + "\n", encoding="utf-8")
    env = {"RAGPG_DATABASE_URL": index.url, "RAGPG_EMBEDDING_PROVIDER": "none"}
    args = ["eval", str(questions), "--modes", "keyword", "--json", "--details"]
    done = run_cli(["--as", "staff", *args], env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rankings = [q["rankings"] for q in report["queries"]]
    assert "hr/salaries" not in json.dumps(rankings)  # never among its rankings
    admin = json.loads(run_cli(args, env=env).stdout)
    assert "hr/salaries" in json.dumps([q["rankings"] for q in admin["queries"]])
    assert report["modes"]["keyword"] != admin["modes"]["keyword"]


def test_a_rule_change_rewrites_readers_without_embedding(index: Index, embed_server: Any) -> None:
    (index.root / ".ragpg-access").write_text(RULES + "public.md @staff\n", encoding="utf-8")
    calls = embed_server.calls
    with RagPG(index.url, index.settings) as rag:
        report = rag.ingest(index.root)
    assert report.documents_indexed == 1 and report.documents_skipped == len(FILES) - 1
    assert embed_server.calls == calls  # the chunks' vectors were reused
    for table in ("document", "chunk", "chunk_vector"):
        assert stored_readers(index.admin, "default", table)["public.md"] == ["staff"], table


def test_a_bad_access_value_fails_its_document_alone(index: Index) -> None:
    (index.root / "bad.md").write_text("---\naccess: [two words]\n---\n\n# Bad\n\nbudget\n",
                                       encoding="utf-8")
    with RagPG(index.url, index.settings) as rag:
        report = rag.ingest(index.root)
    assert report.documents_failed == 1 and report.documents_indexed == 0
    [failure] = report.failures
    assert failure.path == "bad.md" and "front matter access" in failure.error
    assert "\n" not in failure.error


def test_an_import_takes_its_readers_from_the_tree_not_the_sidecar(index: Index) -> None:
    from rag_pg.tree.sidecar_export import export_sidecars
    from rag_pg.tree.sidecar_import import import_sidecars

    with RagPG(index.url, index.settings) as rag:
        assert export_sidecars(rag, index.root).failures == []
        report = import_sidecars(rag, index.root, collection="imported")
        assert report.documents_indexed == len(FILES), report.failures
    for table in ("document", "chunk", "chunk_vector"):
        assert stored_readers(index.admin, "imported", table) == {
            path: readers for path, (_, readers) in FILES.items()}, table


def test_acting_without_the_policies_is_one_clear_error(db_url: str, embed_server: Any) -> None:
    with RagPG(db_url, Settings(), principals=["hr"]) as rag:
        rag.init()
        with pytest.raises(ConfigError, match="permissions are not enabled"):
            rag.search("budget", mode="keyword")


def test_tenancy_and_permissions_hold_together(index: Index) -> None:
    tenancy.enable(index.admin)
    tenancy.assign(index.admin, "acme", ["default"])
    policies = set(values(index.admin, "SELECT polname FROM pg_policy WHERE polrelid = 'ragpg.chunk'::regclass"))
    assert policies == {"ragpg_tenant", "ragpg_reader"}  # no permissive true beside the tenant's
    with RagPG(index.url, index.settings.with_overrides(**{"tenancy.enabled": True})) as rag:
        with tenancy.acting_for("acme"), rag.acting_as(["staff"]):
            assert paths_of(rag, rag.search("budget", k=20, mode="keyword")) == {
                p for p in FILES if readable(p, ("staff",))}
        with tenancy.acting_for("globex"), rag.acting_as(["staff"]):
            assert rag.search("budget", k=20, mode="keyword") == []
    tenancy.disable(index.admin)
    policies = set(values(index.admin, "SELECT polname FROM pg_policy WHERE polrelid = 'ragpg.chunk'::regclass"))
    assert policies == {"ragpg_rows", "ragpg_reader"}
    with RagPG(index.url, index.settings, principals=["staff"]) as rag:
        assert paths_of(rag, rag.search("budget", k=20, mode="keyword")) == {
            p for p in FILES if readable(p, ("staff",))}
    permissions.disable(index.admin)
    assert values(index.admin, "SELECT polname FROM pg_policy WHERE polrelid = 'ragpg.chunk'::regclass") == []
    assert not value(index.admin, "SELECT relrowsecurity FROM pg_class WHERE oid = 'ragpg.chunk'::regclass")


PRINCIPALS = ["a", "b", "c", "d"]


def test_every_hit_is_readable_by_its_asker(index: Index, tmp_path: Path) -> None:
    """Random readers on a second collection, random askers and queries: every hit's document
    may be read by the asker, and every readable document holding the word is found."""
    import random

    rnd = random.Random(7)
    words = ["river", "stone", "cloud", "ember", "frost", "maple"]
    root = tmp_path / "random"
    root.mkdir()
    for i in range(40):
        readers = rnd.choice([None, [], *[[p] for p in PRINCIPALS],
                              rnd.sample(PRINCIPALS, 2)])
        front = "" if readers is None else f"---\naccess: {json.dumps(readers)}\n---\n\n"
        text = " ".join(rnd.choice(words) for _ in range(12))
        (root / f"doc{i}.md").write_text(f"{front}# Doc {i}\n\n{text}.\n", encoding="utf-8")
    with RagPG(index.url, index.settings) as rag:
        rag.ingest(root, collection="random")
        stored = {r["path"]: r["readers"] for r in records(
            index.admin, "SELECT path, readers FROM ragpg.document WHERE collection = 'random'")}

        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        @given(asker=st.lists(st.sampled_from(PRINCIPALS), max_size=3, unique=True),
               word=st.sampled_from(words), mode=st.sampled_from(["keyword", "vector", "hybrid"]))
        def check(asker: list[str], word: str, mode: str) -> None:
            with rag.acting_as(asker):
                hits = rag.search(word, k=50, mode=mode, collection="random")  # type: ignore[arg-type]
            for hit in hits:
                readers = stored[hit.path]
                assert readers is None or set(readers) & set(asker), (asker, hit.path, readers)
            if mode == "keyword":
                holding = set(values(index.admin, "SELECT path FROM ragpg.document d WHERE"
                                     " collection = 'random' AND EXISTS (SELECT FROM ragpg.chunk c"
                                     " WHERE c.document_id = d.id AND c.content ILIKE %s)",
                                     (f"%{word}%",)))
                assert {h.path for h in hits} == {p for p in holding
                                                  if stored[p] is None or set(stored[p]) & set(asker)}

        check()


HR_TOKEN = "tok-hr-CANARY-1b2c3d4e5f6a7b8c"
STAFF_TOKEN = "tok-staff-CANARY-9a8b7c6d5e4f"
ADMIN_TOKEN = "tok-admin-CANARY-0f1e2d3c4b5a"


def test_the_service_reads_as_each_tokens_principals(index: Index, embed_server: Any,
                                                    tmp_path: Path) -> None:
    from .test_server import Served, clean_env

    (tmp_path / "serve").mkdir()
    config = tmp_path / "serve" / "ragpg.toml"  # read from the server's working folder
    config.write_text(
        "[[server.clients]]\nname = \"hr-app\"\ntoken_env = \"HR_APP_TOKEN\"\nprincipals = [\"hr\"]\n\n"
        "[[server.clients]]\nname = \"staff-app\"\ntoken_env = \"STAFF_APP_TOKEN\"\n"
        "principals = [\"staff\"]\n", encoding="utf-8")
    served = Served(clean_env(RAGPG_DATABASE_URL=index.url, RAGPG_EMBEDDING_URL=embed_server.url,
                              RAGPG_SERVER_TOKEN=ADMIN_TOKEN, HR_APP_TOKEN=HR_TOKEN,
                              STAFF_APP_TOKEN=STAFF_TOKEN),
                    tmp_path / "serve")
    try:
        forbidden_id = value(index.admin, "SELECT id FROM ragpg.document WHERE path = 'hr/salaries.md'")
        for token, asker in ((HR_TOKEN, ("hr",)), (STAFF_TOKEN, ("staff",)), (ADMIN_TOKEN, None)):
            with served.client(token) as client:
                # A body naming principals is refused, not obeyed.
                assert client.post("/search", json={"query": "budget", "principals": ["hr"]}
                                   ).status_code == 422
                found = client.post("/search", json={"query": "budget planning", "k": 20,
                                                     "mode": "keyword"})
                assert found.status_code == 200, found.text
                expected = {p for p in FILES if readable(p, asker)}
                assert {h["path"] for h in found.json()["hits"]} == expected
                for path in set(FILES) - expected:
                    assert marker(path) not in found.text
                by_id = client.get(f"/documents/{forbidden_id}")
                assert by_id.status_code == (200 if readable("hr/salaries.md", asker) else 404)
                stats = client.get("/stats").json()
                assert stats["documents"] == len(expected)
        with served.client("tok-nobody-CANARY-000000000000") as client:
            assert client.post("/search", json={"query": "budget"}).status_code == 401
        callers = {r.get("caller") for r in served.log_records() if r.get("event") == "request"}
        assert {"hr-app", "staff-app", "default"} <= callers
        assert HR_TOKEN not in served.log() and STAFF_TOKEN not in served.log()
    finally:
        assert served.stop() == 0


def test_mcp_reads_as_the_principals_it_was_started_with(index: Index, embed_server: Any,
                                                         tmp_path: Path) -> None:
    from .test_mcp import call_tools, server_env, text_of

    env = server_env(RAGPG_DATABASE_URL=index.url, RAGPG_EMBEDDING_URL=embed_server.url,
                     RAGPG_PERMISSIONS_PRINCIPALS="staff")
    _, [found, hidden] = call_tools(env, tmp_path / "mcp.err", [
        ("search", {"query": "budget planning", "k": 20, "mode": "keyword"}),
        ("get_document", {"path": "hr/salaries.md"}),
    ], tmp_path)
    text = text_of(found)
    for path in FILES:
        assert (marker(path) in text) == readable(path, ("staff",)), path
    assert hidden.is_error and marker("hr/salaries.md") not in text_of(hidden)


def test_a_services_callers_are_checked_before_it_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_pg.serve.auth import Caller, caller_of, callers

    def clients(*entries: dict[str, Any], **more: Any) -> Settings:
        return Settings.load(environ={"RAGPG_SERVER_CLIENTS": json.dumps(list(entries)), **more})

    monkeypatch.setenv("HR_TOKEN_VAR", HR_TOKEN)
    known = callers(clients({"name": "hr", "token_env": "HR_TOKEN_VAR", "principals": ["hr"]},
                            {"name": "staff", "token": STAFF_TOKEN}))
    assert caller_of(f"Bearer {HR_TOKEN}", known) == Caller("hr", None, ("hr",))
    assert caller_of(f"Bearer {STAFF_TOKEN}", known) == Caller("staff")
    assert caller_of(f"Bearer {HR_TOKEN}x", known) is None and caller_of(None, known) is None
    for entries, message in (
            (({"name": "a", "token_env": "UNSET_TOKEN_VAR"},), "unset or empty"),
            (({"name": "a", "token": "short"},), "at least 16"),
            (({"name": "a", "token": HR_TOKEN}, {"name": "b", "token": HR_TOKEN}), "also 'a'"),
            (({"name": "a", "token": HR_TOKEN, "tenant": "acme"},), "tenancy.enabled is false")):
        with pytest.raises(ConfigError, match=message):
            callers(clients(*entries))
