"""`ragpg serve` as it is run: a real server process on loopback, real Postgres, httpx clients."""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rag_pg import Settings
from rag_pg.serve.rules import Limits
from rag_pg.testing.embedserver import FakeEmbeddingServer

from .conftest import ROOT, drop_database, new_database, run_cli
from .rows import value
from .waiting import eventually

TOKEN = "tok-CANARY-6f1d2c9a8b7e4d3c"
PW_CANARY = "pw-CANARY-93be21f0"
QUERY = "restaurer une sauvegarde pg_dump"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPG_") and k != "DATABASE_URL"}
    env.update(extra)
    return env


def with_password(url: str) -> tuple[str, str]:
    """The URL with a password canary (trust auth ignores it), or its own password as the canary."""
    params = conninfo_to_dict(url)
    if params.get("password"):
        return url, str(params["password"])
    params["password"] = PW_CANARY
    return make_conninfo(**params), PW_CANARY


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ragpg_connections(admin_url: str, db_url: str) -> int:
    """Rows of pg_stat_activity for ragpg's own connections to the test database."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = value(conn, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = 'ragpg'", (conninfo_to_dict(db_url)["dbname"],))
    assert row is not None
    return int(row)


def no_connections_left(admin_url: str, db_url: str) -> None:
    """Backends exit a moment after their client closes: wait (bounded) for the last one."""
    eventually(lambda: ragpg_connections(admin_url, db_url) == 0,
               "every ragpg connection closed")


class Served:
    """A `ragpg serve --port 0` subprocess; its stderr (JSON logs) goes to a file."""

    def __init__(self, env: dict[str, str], workdir: Path, *args: str):
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "serve.log"
        self.out_path = workdir / "serve.out"
        self._err = self.log_path.open("w")
        self._out = self.out_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rag_pg", "serve", "--port", "0", *args],
            stdout=self._out, stderr=self._err, env=env, cwd=workdir,
        )
        self.url = self._wait_listening()

    def _wait_listening(self) -> str:
        def listening() -> str | None:
            for line in self.log_path.read_text().splitlines():
                if '"listening"' in line:
                    return str(json.loads(line)["url"])
            assert self.proc.poll() is None, f"server exited: {self.log_path.read_text()}"
            return None

        try:
            return eventually(listening, "the server listening")
        except AssertionError:
            self.stop()
            raise

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        self._out.close()
        return int(self.proc.returncode)

    def log(self) -> str:
        return self.log_path.read_text()

    def log_records(self) -> list[dict[str, Any]]:
        """Complete lines only: a request's line is written just after its response is sent."""
        return [json.loads(line) for line in self.log().split("\n")[:-1] if line.strip()]


# -- one indexed database and one server for the module ----------------------------------------


@pytest.fixture(scope="module")
def embed() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=64) as server:
        yield server


@pytest.fixture(scope="module")
def indexed_db(pg_server_url: str, pg_template: str, embed: FakeEmbeddingServer,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = new_database(pg_server_url, pg_template)
    try:
        corpus = tmp_path_factory.mktemp("corpus") / "corpus"
        shutil.copytree(ROOT / "examples" / "corpus", corpus)
        out = run_cli(["ingest", str(corpus), "--json"],
                      env={"RAGPG_DATABASE_URL": url, "RAGPG_EMBEDDING_URL": embed.url}, cwd=corpus.parent)
        assert out.returncode == 0, out.stderr
        yield url
    finally:
        drop_database(pg_server_url, url)


@pytest.fixture(scope="module")
def server(indexed_db: str, embed: FakeEmbeddingServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url, _ = with_password(indexed_db)
    served = Served(clean_env(RAGPG_DATABASE_URL=url, RAGPG_EMBEDDING_URL=embed.url,
                              RAGPG_SERVER_TOKEN=TOKEN), tmp_path_factory.mktemp("serve"))
    yield served
    served.stop()


def cli_env(db_url: str, embed: FakeEmbeddingServer) -> dict[str, str]:
    return {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed.url}


# -- endpoints ------------------------------------------------------------------------------------


def test_health_is_open_and_says_nothing_secret(server: Served, indexed_db: str) -> None:
    with server.client() as client:
        response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert TOKEN not in response.text and conninfo_to_dict(indexed_db)["dbname"] not in response.text


def test_every_data_endpoint_needs_the_token(server: Served) -> None:
    requests = [("POST", "/search", {"query": QUERY}), ("GET", "/stats", None),
                ("GET", "/documents/1", None), ("GET", "/documents?path=a.md", None)]
    for token in (None, "wrong-token-of-the-same-sort", TOKEN[:-1], TOKEN + "x"):
        with server.client(token) as client:
            for method, path, body in requests:
                response = client.request(method, path, json=body)
                assert response.status_code == 401, (token, path, response.text)
                assert response.json()["error"] == "unauthorized"
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert TOKEN not in response.text
    with server.client() as client:
        basic = client.get("/stats", headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status_code == 401
        # a 401 comes before the body is even read: no 413/422 for an unauthenticated client
        assert client.post("/search", content=b"{not json").status_code == 401
    with server.client(TOKEN) as client:
        assert client.get("/stats").status_code == 200


def test_search_answers_what_the_cli_answers(server: Served, indexed_db: str,
                                             embed: FakeEmbeddingServer, tmp_path: Path) -> None:
    with server.client(TOKEN) as client:
        response = client.post("/search", json={"query": QUERY, "k": 3})
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]
    out = run_cli(["search", QUERY, "-k", "3", "--json"], env=cli_env(indexed_db, embed), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert hits == json.loads(out.stdout)
    assert hits[0]["path"] == "fr/admin/sauvegardes.md"
    assert hits[0]["ranks"] and set(hits[0]["ranks"]) <= {"vector", "keyword", "title", "phrase"}
    for mode in ("keyword", "vector", "hybrid"):
        with server.client(TOKEN) as client:
            body = client.post("/search", json={"query": QUERY, "k": 2, "mode": mode,
                                                "path_prefix": "fr/admin"}).json()
        assert 1 <= len(body["hits"]) <= 2
        assert all(h["path"].startswith("fr/admin/") for h in body["hits"]), mode


def test_stats_match_the_library(server: Served, indexed_db: str, embed: FakeEmbeddingServer) -> None:
    from rag_pg import RagPG, Settings

    with server.client(TOKEN) as client:
        response = client.get("/stats")
        other = client.get("/stats", params={"collection": "nothing-here"})
    assert response.status_code == 200
    with RagPG(indexed_db, Settings()) as rag:
        assert response.json() == rag.stats().to_dict()
    assert other.status_code == 404 and other.json()["error"] == "not_found"
    assert "nothing-here" in other.json()["message"] and "'default'" in other.json()["message"]


def test_documents_by_path_and_id(server: Served, indexed_db: str) -> None:
    from rag_pg import RagPG, Settings

    with RagPG(indexed_db, Settings()) as rag:
        document = rag.get_document("fr/admin/sauvegardes.md")
        expected = document.to_dict() if document is not None else None
    assert expected is not None and expected["chunks"]
    with server.client(TOKEN) as client:
        by_path = client.get("/documents", params={"path": "fr/admin/sauvegardes.md"})
        by_id = client.get(f"/documents/{expected['id']}")
        missing_path = client.get("/documents", params={"path": "no/such.md"})
        missing_id = client.get("/documents/999999999")
        other_collection = client.get("/documents", params={"path": "fr/admin/sauvegardes.md",
                                                             "collection": "elsewhere"})
        no_path = client.get("/documents")
        zero = client.get("/documents/0")
        unknown_route = client.get("/nowhere")
    assert by_path.status_code == 200 and by_path.json() == expected
    assert by_id.status_code == 200 and by_id.json() == expected
    for response in (missing_path, missing_id, other_collection, unknown_route):
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "not_found"
    assert "no/such.md" in missing_path.json()["message"]
    assert no_path.status_code == 422 and zero.status_code == 422


def test_explain_gives_each_legs_rank_score_and_share(server: Served) -> None:
    with server.client(TOKEN) as client:
        plain = client.post("/search", json={"query": QUERY, "k": 3}).json()["hits"]
        explained = client.post("/search", json={"query": QUERY, "k": 3, "explain": True}).json()["hits"]
        keyword = client.post("/search", json={"query": QUERY, "k": 1, "mode": "keyword",
                                               "explain": True}).json()["hits"]
    assert [{k: v for k, v in h.items() if k not in ("legs", "fused_score")} for h in explained] == plain
    for hit in explained:
        assert set(hit["legs"]) == set(hit["ranks"]) == set(hit["parts"])
        for leg, info in hit["legs"].items():
            assert info["rank"] == hit["ranks"][leg] and info["score"] == hit["scores"][leg]
            # the share is the fusion's own part of the score (adaptive by default), not RRF's
            assert info["share"] == pytest.approx(hit["parts"][leg] / hit["score"], abs=1e-4)
        assert sum(info["share"] for info in hit["legs"].values()) == pytest.approx(1, abs=1e-3)
        assert hit["fused_score"] == hit["score"]
    assert keyword[0]["legs"] == {"keyword": {"rank": 1, "score": keyword[0]["scores"]["keyword"],
                                              "share": 1.0}}


def test_locate_says_where_an_expected_document_ranked(server: Served) -> None:
    with server.client(TOKEN) as client:
        deep = client.post("/search", json={"query": QUERY, "k": 10}).json()["hits"]
        target = next(h for h in deep if h["path"] != deep[0]["path"])
        rank = deep.index(target) + 1
        below = client.post("/locate", json={"query": QUERY, "k": 1, "target": target["path"]}).json()
        passage = client.post("/locate", json={"query": QUERY, "k": 10,
                                               "target": f"{target['path']}#{target['anchor']}"}).json()
        filtered = client.post("/locate", json={"query": QUERY, "path_prefix": "en",
                                                "target": "fr/admin/sauvegardes.md"}).json()
        absent = client.post("/locate", json={"query": QUERY, "target": "no/such.md"}).json()
        no_section = client.post("/locate", json={"query": QUERY,
                                                  "target": "fr/admin/sauvegardes.md#nowhere"}).json()
        keyword_only = client.post("/locate", json={"query": QUERY, "mode": "keyword",
                                                    "target": target["path"]}).json()
        refused = client.post("/locate", json={"query": QUERY, "target": "#anchor-only"})
    assert below["fused"]["rank"] <= rank and "below k=1" in below["verdict"], below
    assert set(below["legs"]) == {"keyword", "vector"}
    for info in below["legs"].values():
        assert info["rank"] is not None or info["reason"] in ("not_matched", "too_deep"), below
        assert (info["note"] is None) == (info["rank"] is not None), info
    assert below["document_id"] is not None and below["section_exists"] is True
    assert passage["fused"]["rank"] == rank and "within k=10" in passage["verdict"], passage
    for leg, info in passage["legs"].items():
        if leg in target["ranks"]:
            assert info["rank"] == target["ranks"][leg], (leg, info, target)
    assert filtered["fused"] is None
    assert {info["reason"] for info in filtered["legs"].values()} == {"filtered"}, filtered
    assert all("filter" in info["note"] for info in filtered["legs"].values())
    assert absent["document_id"] is None and "no document 'no/such.md'" in absent["verdict"]
    assert no_section["legs"] == {} and "no section #nowhere" in no_section["verdict"]
    assert set(keyword_only["legs"]) == {"keyword"}
    assert refused.status_code == 422 and "target" in refused.json()["message"]


def test_runs_and_collections(server: Served) -> None:
    with server.client(TOKEN) as client:
        runs = client.get("/runs")
        one = client.get("/runs", params={"limit": 1, "collection": "default"})
        too_many = client.get("/runs", params={"limit": 1000})
        collections = client.get("/collections")
    assert runs.status_code == 200, runs.text
    [run] = runs.json()["runs"]  # the module's one ingest
    assert run["status"] == "completed" and run["collection"] == "default"
    assert run["documents_indexed"] > 0 and run["errors"] == [] and run["finished_at"]
    assert one.json() == runs.json()
    assert too_many.status_code == 422
    assert collections.json() == {"default": "default", "collections": ["default"]}


def test_the_page_and_its_files_are_served_without_the_token(server: Served) -> None:
    with server.client() as client:
        page = client.get("/")
        script = client.get("/page/page.js")
        style = client.get("/page/page.css")
        escape = client.get("/page/..%2fhttp.py")  # the guard lets /page/ through: files only
        missing = client.get("/page/nothing.js")
        data = client.get("/collections")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/page/page.js"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert not re.search(r'(src|href)="(https?:)?//', page.text)  # nothing from elsewhere: works offline
    assert script.status_code == 200 and "sessionStorage" in script.text
    assert style.status_code == 200
    assert escape.status_code == 404 and missing.status_code == 404
    assert data.status_code == 401  # the page's data is the API, behind the token


# -- limits ---------------------------------------------------------------------------------------


def test_over_limit_requests_get_a_clear_4xx(server: Served) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"query": "x" * 4097}, "4096"),
        ({"query": QUERY, "k": 0}, "k"),
        ({"query": QUERY, "k": 101}, "between 1 and 100"),
        ({"query": QUERY, "k": 10_000}, "between 1 and 100"),
        ({"query": ""}, "empty"),
        ({"query": "   \n"}, "empty"),
        ({"query": "a\x00b"}, "NUL"),
        ({"query": "\ud800"}, "surrogate"),
        ({"query": QUERY, "k": "5"}, "k"),
        ({"query": QUERY, "top_k": 5}, "top_k"),
        ({"query": QUERY, "mode": "fuzzy"}, "mode"),
        ({"k": 3}, "query"),
        ({"query": QUERY, "filters": {"x": float("nan")}}, "finite"),
        ({"query": QUERY, "neighbours": 11}, "neighbours"),
        ({"query": QUERY, "level": 2**70}, "level"),
    ]
    with server.client(TOKEN) as client:
        for body, words in cases:
            raw = json.dumps(body, allow_nan=True).encode()
            response = client.post("/search", content=raw, headers={"Content-Type": "application/json"})
            assert response.status_code == 422, (body, response.text)
            data = response.json()
            assert data["error"] == "invalid_request" and words in data["message"], (body, data)
        for raw in (b"{not json", b"[1, 2]", b'"just a string"', b""):
            response = client.post("/search", content=raw, headers={"Content-Type": "application/json"})
            assert response.status_code == 422, (raw, response.text)
        big = json.dumps({"query": "x" * (70 * 1024)}).encode()
        response = client.post("/search", content=big, headers={"Content-Type": "application/json"})
        assert response.status_code == 413 and response.json()["error"] == "too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: the guard counts what arrives
            yield b'{"query": "'
            for _ in range(80):
                yield b"y" * 1024
            yield b'"}'

        response = client.post("/search", content=chunks(), headers={"Content-Type": "application/json"})
        assert response.status_code == 413, response.text
        assert client.post("/search", json={"query": QUERY, "k": 100}).status_code == 200


def test_filters_and_empty_collections_never_give_a_5xx(server: Served) -> None:
    with server.client(TOKEN) as client:
        response = client.post("/search", json={"query": QUERY, "filters": {"lang": "fr"}})
        unknown = client.post("/search", json={"query": QUERY, "mode": "vector", "collection": "empty"})
    assert response.status_code in (200, 422), response.text
    if response.status_code == 422:
        assert response.json()["error"] == "invalid_request"
    assert unknown.status_code in (404, 422), unknown.text


def test_a_collection_that_does_not_exist_is_a_404_not_an_empty_answer(server: Served) -> None:
    with server.client(TOKEN) as client:
        typo = {mode: client.post("/search", json={"query": QUERY, "mode": mode, "collection": "defualt"})
                for mode in ("keyword", "hybrid")}
        nothing_matched = client.post("/search", json={"query": "zzqxv", "mode": "keyword"})
        document = client.get("/documents", params={"path": "fr/admin/sauvegardes.md",
                                                    "collection": "defualt"})
        runs = client.get("/runs", params={"collection": "defualt"})
        collections = client.get("/collections")
    for mode, response in typo.items():
        assert response.status_code == 404, (mode, response.text)
        body = response.json()
        assert body["error"] == "not_found" and "'defualt'" in body["message"], body
        assert "'default'" in body["message"] and "\n" not in body["message"]  # names the real ones
    # the collection exists and nothing matched: that stays an empty answer
    assert nothing_matched.status_code == 200 and nothing_matched.json() == {"hits": []}
    assert document.status_code == 404 and "no collection 'defualt'" in document.json()["message"]
    assert runs.status_code == 404
    assert collections.status_code == 200
    assert collections.json() == {"default": "default", "collections": ["default"]}


def test_openapi_states_the_limits_and_the_docs_page_serves(server: Served) -> None:
    with server.client() as client:
        schema = client.get("/openapi.json")
        docs = client.get("/docs")
    assert schema.status_code == 200 and docs.status_code == 200
    assert "swagger" in docs.text.lower()
    spec = schema.json()
    assert {"/health", "/stats", "/search", "/documents", "/documents/{document_id}", "/locate", "/runs",
            "/collections"} <= set(spec["paths"])
    assert "/" not in spec["paths"]  # the page is HTML, not part of the API
    props = spec["components"]["schemas"]["SearchRequest"]["properties"]
    assert props["query"]["maxLength"] == 4096
    assert {"type": "integer", "minimum": 1, "maximum": 100} in props["k"]["anyOf"]
    # what validation refuses, the schema says: no NUL in stored text
    assert props["query"]["pattern"] == "^[^\\u0000]*$"
    assert props["path_prefix"].get("pattern") or any(
        p.get("pattern") for p in props["path_prefix"]["anyOf"])
    path_param = {p["name"]: p for p in spec["paths"]["/documents"]["get"]["parameters"]}["path"]
    assert path_param["schema"]["pattern"] == "^[^\\u0000]*$"
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert spec["paths"]["/search"]["post"]["security"] == [{"bearerAuth": []}]
    assert "security" not in spec["paths"]["/health"]["get"]


def test_schemathesis_finds_no_server_error(server: Served, tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("schemathesis")
    before = len(server.log_records())
    out = subprocess.run(
        [str(exe), "run", f"{server.url}/openapi.json", "-H", f"Authorization: Bearer {TOKEN}",
         "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                     "response_schema_conformance",
         "--max-examples", "30", "--seed", "1", "--phases", "coverage,fuzzing",
         # one worker: hypothesis describing filter lambdas from several threads at once can crash
         "--workers", "1",
         "--generation-database", "none", "--no-color"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    statuses = [r.get("status") for r in server.log_records()[before:] if r.get("event") == "request"]
    assert statuses and not [s for s in statuses if s >= 500]
    assert len(statuses) > 50


# -- concurrency and the pool ---------------------------------------------------------------------


def test_eight_clients_at_once_share_the_pool(server: Served, indexed_db: str, pg_server_url: str) -> None:
    with server.client(TOKEN) as client:
        expected = client.post("/search", json={"query": QUERY, "k": 4}).json()
    barrier = threading.Barrier(8)
    results: list[Any] = []
    lock = threading.Lock()

    def worker() -> None:
        with server.client(TOKEN) as client:
            barrier.wait()
            for _ in range(5):
                response = client.post("/search", json={"query": QUERY, "k": 4})
                with lock:
                    results.append((response.status_code, response.json()))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 40
    assert all(status == 200 and body == expected for status, body in results)
    assert 1 <= ragpg_connections(pg_server_url, indexed_db) <= 4  # database.pool_size


def test_eight_threads_through_one_library_pool_leak_nothing(db_url: str, pg_server_url: str,
                                                             embed_server: Any, corpus: Path) -> None:
    from rag_pg import RagPG, Settings

    settings = Settings().with_overrides(**{"embedding.url": embed_server.url})
    assert ragpg_connections(pg_server_url, db_url) == 0
    rag = RagPG(db_url, settings)
    try:
        rag.ingest(corpus)
        expected = [h.to_dict() for h in rag.search(QUERY, 3)]
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []
        answers: list[list[dict[str, Any]]] = []

        def worker() -> None:
            try:
                barrier.wait()
                for _ in range(5):
                    answers.append([h.to_dict() for h in rag.search(QUERY, 3)])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(answers) == 40 and all(a == expected for a in answers)
        assert 1 <= ragpg_connections(pg_server_url, db_url) <= settings.database.pool_size
    finally:
        rag.close()
    no_connections_left(pg_server_url, db_url)


# -- failure modes --------------------------------------------------------------------------------


def test_database_down_gives_503_json_without_the_password(tmp_path: Path) -> None:
    dsn = f"postgresql://ragpg:{PW_CANARY}@127.0.0.1:{closed_port()}/nowhere"
    served = Served(clean_env(RAGPG_DATABASE_URL=dsn, RAGPG_EMBEDDING_PROVIDER="none"), tmp_path)
    try:
        responses: dict[str, httpx.Response] = {}

        def call(name: str, method: str, path: str, body: Any = None) -> None:
            with served.client() as client:  # no token configured: loopback needs none
                responses[name] = client.request(method, path, json=body)

        threads = [threading.Thread(target=call, args=("search", "POST", "/search", {"query": QUERY})),
                   threading.Thread(target=call, args=("stats", "GET", "/stats"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with served.client() as client:
            health = client.get("/health")
    finally:
        code = served.stop()
    assert health.status_code == 200
    for name, response in responses.items():
        assert response.status_code == 503, (name, response.text)
        body = response.json()
        assert body["error"] == "database_unavailable" and body["message"], body
        assert PW_CANARY not in response.text and "Traceback" not in response.text
    assert code == 0
    log = served.log()
    assert PW_CANARY not in log and "Traceback" not in log
    assert "ragpg:***@" in log or "database unavailable" in log


def test_slow_request_gets_504(indexed_db: str, tmp_path: Path) -> None:
    with FakeEmbeddingServer(dim=64) as slow:
        slow.fault = "slow"
        served = Served(clean_env(RAGPG_DATABASE_URL=indexed_db, RAGPG_EMBEDDING_URL=slow.url,
                                  RAGPG_SERVER_REQUEST_TIMEOUT="1"), tmp_path)
        try:
            with served.client() as client:
                response = client.post("/search", json={"query": QUERY, "mode": "hybrid"})
                keyword = client.post("/search", json={"query": QUERY, "mode": "keyword"})
        finally:
            slow.stop()  # releases the abandoned worker, so the server can exit
            code = served.stop()
    assert response.status_code == 504, response.text
    assert response.json()["error"] == "timeout" and "request_timeout" in response.json()["message"]
    assert keyword.status_code == 200  # no embedding needed: the pool was not stuck
    assert code == 0




def test_a_stalled_embedder_leaves_the_database_requests_answering(indexed_db: str, tmp_path: Path) -> None:
    """One embedding call at once (pool of 2); as many may wait as leave the reserved worker
    threads free, the next is refused at once; keyword searches, /stats and documents answer
    meanwhile, and the waiting searches never call the stalled embedder."""
    limits = Limits.from_settings(Settings.load(environ={}, overrides={"database.pool_size": 2}))
    assert limits.embedding_slots == 1
    waiting = limits.embedding_slots + limits.embedding_queue
    with FakeEmbeddingServer(dim=64) as stalled:
        stalled.slow_seconds = 3600  # only stop() ends the stall
        served = Served(clean_env(RAGPG_DATABASE_URL=indexed_db, RAGPG_EMBEDDING_URL=stalled.url,
                                  RAGPG_DATABASE_POOL_SIZE="2", RAGPG_SERVER_REQUEST_TIMEOUT="600",
                                  RAGPG_EMBEDDING_TIMEOUT="600", RAGPG_EMBEDDING_DEADLINE="600",
                                  RAGPG_EMBEDDING_ATTEMPTS="1"), tmp_path)
        answers: queue.Queue[tuple[str, int, dict[str, Any]]] = queue.Queue()

        def hybrid(name: str) -> None:
            with served.client() as client:
                response = client.post("/search", json={"query": QUERY, "mode": "hybrid"})
                answers.put((name, response.status_code, response.json()))

        threads = [threading.Thread(target=hybrid, args=(f"h{i}",)) for i in range(waiting + 1)]
        try:
            stalled.fault = "slow"
            stalled.reset_counters()
            threads[0].start()
            eventually(lambda: stalled.calls == 1, "the first hybrid search reached the embedder")
            for t in threads[1:]:
                t.start()
            name, status, body = answers.get(timeout=120)  # the four queued ones cannot answer yet
            assert status == 503, (name, body)
            assert body["error"] == "embedding_busy" and "keyword" in body["message"], body
            assert "\n" not in body["message"]
            with served.client() as client:
                keyword = client.post("/search", json={"query": QUERY, "mode": "keyword"})
                stats = client.get("/stats")
                document = client.get("/documents", params={"path": "fr/admin/sauvegardes.md"})
                runs = client.get("/runs")
            assert keyword.status_code == 200 and keyword.json()["hits"], keyword.text
            assert stats.status_code == 200 and stats.json()["documents"] > 0
            assert document.status_code == 200 and runs.status_code == 200
            assert stalled.calls == 1  # the queued searches wait without calling the embedder
            assert answers.empty()
        finally:
            stalled.stop()  # the stalled call fails, the queued ones follow it, one at a time
            for t in threads:
                if t.is_alive() or t.ident is not None:
                    t.join()
            code = served.stop()
    statuses = [answers.get_nowait()[1] for _ in range(answers.qsize())]
    assert len(statuses) == waiting and all(s in (502, 503) for s in statuses), statuses
    assert code == 0


# -- the gate, on its own ------------------------------------------------------------------------


def test_the_gate_hands_a_freed_slot_to_the_first_waiter_and_refuses_beyond_its_queue() -> None:
    from rag_pg.serve.gate import Busy, ModelGate

    async def main() -> None:
        gate = ModelGate(slots=1, queue=1)
        release_a = await gate.acquire()
        got: list[str] = []

        async def second() -> None:
            release = await gate.acquire()
            got.append("b")
            release()

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            while gate.waiting == 0:  # b is queued
                await anyio.sleep(0)
            with pytest.raises(Busy, match="reranking service"):
                await gate.acquire()
            assert got == [] and gate.busy == 1
            await anyio.to_thread.run_sync(release_a)  # a worker thread gives the slot back
            release_a()  # a second call gives nothing back twice
        assert got == ["b"]
        await anyio.sleep(0)
        assert gate.busy == 0 and gate.waiting == 0

    anyio.run(main)


def test_a_cancelled_waiter_and_a_request_that_times_out_give_their_place_back() -> None:
    from rag_pg.serve.gate import ModelGate
    from rag_pg.serve.rules import Limits, RequestTimeout, call_limited

    async def main() -> None:
        gate = ModelGate(slots=1, queue=2)
        release_a = await gate.acquire()
        with anyio.move_on_after(0):  # cancelled while queued
            await gate.acquire()
        assert gate.waiting == 0 and gate.busy == 1
        # a request that times out in the queue never runs, and leaves nothing held
        ran: list[int] = []
        with pytest.raises(RequestTimeout):
            await call_limited(lambda: ran.append(1), Limits(request_timeout=0.01), gate)
        assert ran == [] and gate.waiting == 0
        release_a()
        await anyio.sleep(0)
        assert gate.busy == 0
        # a call that fails gives its slot back too
        def boom() -> None:
            raise ValueError("boom")

        with pytest.raises(ValueError):
            await call_limited(boom, Limits(), gate)
        await anyio.sleep(0)
        assert gate.busy == 0
        assert await call_limited(lambda: 42, Limits(), gate) == 42

    anyio.run(main)


def test_logs_are_json_lines_without_secrets(server: Served, indexed_db: str) -> None:
    with server.client(TOKEN) as client:
        client.post("/search", json={"query": QUERY})
        client.get("/documents", params={"path": "nowhere.md"})
    with server.client("bad-token-" + TOKEN) as client:
        client.get("/stats")
    records = server.log_records()  # every line parses as one JSON object
    requests = [r for r in records if r.get("event") == "request"]
    assert {"method", "path", "status", "duration_ms"} <= set(requests[-1])
    assert {(r["method"], r["path"], r["status"]) for r in requests} >= {
        ("POST", "/search", 200), ("GET", "/documents", 404), ("GET", "/stats", 401)}
    _, password = with_password(indexed_db)
    text = server.log()
    assert TOKEN not in text and password not in text
    assert any(r.get("event") == "listening" for r in records)
    assert (server.out_path.read_text()) == ""  # nothing on stdout


def test_graceful_shutdown_closes_the_pool(db_url: str, pg_server_url: str, tmp_path: Path) -> None:
    served = Served(clean_env(RAGPG_DATABASE_URL=db_url, RAGPG_EMBEDDING_PROVIDER="none"), tmp_path)
    try:
        with served.client() as client:
            assert client.get("/stats").status_code == 200
            assert client.post("/search", json={"query": QUERY}).json() == {"hits": []}
        assert ragpg_connections(pg_server_url, db_url) >= 1
    finally:
        code = served.stop()
    assert code == 0
    assert [r for r in served.log_records() if r.get("event") == "stopped"]
    no_connections_left(pg_server_url, db_url)


# -- refusing to start ----------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10"])
def test_refuses_to_bind_beyond_loopback_without_a_token(host: str, tmp_path: Path) -> None:
    dsn = f"postgresql://u:{PW_CANARY}@127.0.0.1:{closed_port()}/x"
    out = run_cli(["serve", "--host", host, "--port", "0"], env={"RAGPG_DATABASE_URL": dsn}, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "token" in out.stderr and "Traceback" not in out.stderr
    assert PW_CANARY not in out.stderr + out.stdout


def test_refuses_a_short_token_and_bad_limits(tmp_path: Path) -> None:
    dsn = f"postgresql://u:{PW_CANARY}@127.0.0.1:{closed_port()}/x"
    out = run_cli(["serve"], env={"RAGPG_DATABASE_URL": dsn, "RAGPG_SERVER_TOKEN": "short"}, cwd=tmp_path)
    assert out.returncode == 2 and "at least 16" in out.stderr and "short" not in out.stderr
    out = run_cli(["serve"], env={"RAGPG_DATABASE_URL": dsn, "RAGPG_SERVER_MAX_K": "0"}, cwd=tmp_path)
    assert out.returncode == 2 and "server.max_k" in out.stderr
