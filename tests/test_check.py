"""`ragpg check` detects tampering and `--repair` makes the next ingest fix it."""

from __future__ import annotations

import json

import psycopg

from .conftest import run_cli
from .invariants import dump, violations
from .rows import value


def test_check_detects_tampering_and_repair_converges(db_url, embed_server, corpus, tmp_path):
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    assert run_cli(["ingest", str(corpus)], env=env, cwd=tmp_path).returncode == 0
    clean = dump(db_url)
    out = run_cli(["check", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["ok"] is True
    with psycopg.connect(db_url) as conn:
        conn.execute("""DELETE FROM ragpg.chunk WHERE id = (SELECT min(c.id) FROM ragpg.chunk c
                        JOIN ragpg.document d ON d.id = c.document_id WHERE d.path = 'fr/cuisine/pot-au-feu.md')""")
        conn.execute("""DELETE FROM ragpg.chunk_vector WHERE chunk_id = (SELECT max(c.id) FROM ragpg.chunk c
                        JOIN ragpg.document d ON d.id = c.document_id WHERE d.path = 'en/ops/incident-response.md')""")
    out = run_cli(["check", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert {(p["code"], p["subject"]) for p in report["problems"]} == {
        ("chunk_count", "fr/cuisine/pot-au-feu.md"),
        ("positions", "fr/cuisine/pot-au-feu.md"),
        ("missing_vector", "en/ops/incident-response.md"),
    }
    # the files did not change: a plain ingest would skip them; --repair makes it re-index them
    out = run_cli(["check", "--repair"], env=env, cwd=tmp_path)
    assert out.returncode == 1 and "re-indexed" in out.stdout
    out = run_cli(["ingest", str(corpus), "--json"], env=env, cwd=tmp_path)
    assert json.loads(out.stdout)["documents_indexed"] == 2
    assert violations(db_url) == []
    assert dump(db_url) == clean


def test_check_sees_changed_text_zero_vectors_and_foreign_vectors(db_url, embed_server, corpus, tmp_path):
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    assert run_cli(["ingest", str(corpus)], env=env, cwd=tmp_path).returncode == 0
    clean = dump(db_url)
    with psycopg.connect(db_url) as conn:
        def first_chunk(path: str) -> int:
            row = value(conn, "SELECT min(c.id) FROM ragpg.chunk c JOIN ragpg.document d"
                               " ON d.id = c.document_id WHERE d.path = %s", (path,))
            assert row is not None and row is not None
            return int(row)

        conn.execute("UPDATE ragpg.chunk SET content = content || ' (edited)' WHERE id = %s",
                     (first_chunk("fr/cuisine/pot-au-feu.md"),))
        conn.execute("UPDATE ragpg.chunk_vector SET embedding = array_fill(0, ARRAY[64])::vector"
                     " WHERE chunk_id = %s", (first_chunk("en/ops/incident-response.md"),))
        conn.execute("INSERT INTO ragpg.chunk_vector (chunk_id, collection, shard_key, model, embedding)"
                     " SELECT id, collection, shard_key, 'intruder-3', '[1,2,3]' FROM ragpg.chunk"
                     " WHERE id = %s",
                     (first_chunk("en/ops/connection-pooling.md"),))
    out = run_cli(["check", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert {(p["code"], p["subject"]) for p in json.loads(out.stdout)["problems"]} == {
        ("content_hash", "fr/cuisine/pot-au-feu.md"),
        ("zero_vector", "en/ops/incident-response.md"),
        ("foreign_vector", "en/ops/connection-pooling.md"),
    }
    assert run_cli(["check", "--repair"], env=env, cwd=tmp_path).returncode == 1
    out = run_cli(["ingest", str(corpus), "--prune", "--json"], env=env, cwd=tmp_path)
    assert json.loads(out.stdout)["documents_indexed"] == 3, out.stderr
    out = run_cli(["check", "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0 and json.loads(out.stdout)["ok"] is True, out.stdout
    assert violations(db_url) == [] and dump(db_url) == clean


def test_check_sees_a_changed_section_and_its_sample_sees_swapped_vectors(db_url, embed_server, corpus,
                                                                        tmp_path):
    """N9: the chunk hash covers the section (part of the embedded text and the tsvector);
    vectors swapped between two chunks keep every SQL invariant, and only a re-embedded
    sample (check --sample) finds them."""
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    assert run_cli(["ingest", str(corpus)], env=env, cwd=tmp_path).returncode == 0
    with psycopg.connect(db_url) as conn:
        chunks = conn.execute(
            "SELECT c.id, d.path FROM ragpg.chunk c JOIN ragpg.document d ON d.id = c.document_id"
            " ORDER BY d.path, c.position").fetchall()
        [(renamed, renamed_path), (a, a_path), (b, b_path)] = [chunks[0], chunks[-1], chunks[-2]]
        conn.execute("UPDATE ragpg.chunk SET section = section || ' (renommée)' WHERE id = %s",
                     (renamed,))
        conn.execute("UPDATE ragpg.chunk_vector v SET embedding = o.embedding FROM ragpg.chunk_vector o"
                     " WHERE (v.chunk_id, o.chunk_id) IN ((%(a)s, %(b)s), (%(b)s, %(a)s))",
                     {"a": a, "b": b})
    out = run_cli(["check", "--json"], env=env, cwd=tmp_path)
    assert {(p["code"], p["subject"]) for p in json.loads(out.stdout)["problems"]} == {
        ("content_hash", renamed_path)}
    total = len(chunks)
    out = run_cli(["check", "--json", "--sample", str(total)], env=env, cwd=tmp_path)
    problems = {(p["code"], p["subject"]) for p in json.loads(out.stdout)["problems"]}
    assert {("content_hash", renamed_path), ("vector_mismatch", a_path),
            ("vector_mismatch", b_path)} <= problems, out.stdout
    # the renamed chunk's vector was made for its old section: the sample may say so too
    assert problems <= {("content_hash", renamed_path), ("vector_mismatch", a_path),
                        ("vector_mismatch", b_path), ("vector_mismatch", renamed_path)}


def test_check_and_repair_one_collection(db_url, embed_server, corpus, tmp_path):
    """--collection checks one collection and repairs only it: the same file indexed in another
    collection is neither reported nor marked; an unknown collection is one line, exit 2."""
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    for collection in ("alpha", "beta"):
        out = run_cli(["ingest", str(corpus), "-c", collection], env=env, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
    with psycopg.connect(db_url) as conn:
        conn.execute("""UPDATE ragpg.chunk SET content = content || ' !' WHERE id = (
                        SELECT min(c.id) FROM ragpg.chunk c JOIN ragpg.document d ON d.id = c.document_id
                        WHERE d.path = 'fr/cuisine/pot-au-feu.md' AND d.collection = 'beta')""")
    alpha = run_cli(["check", "-c", "alpha", "--json"], env=env, cwd=tmp_path)
    assert alpha.returncode == 0 and json.loads(alpha.stdout)["ok"] is True
    beta = run_cli(["check", "--collection", "beta", "--json"], env=env, cwd=tmp_path)
    assert beta.returncode == 1
    assert {(p["code"], p["subject"]) for p in json.loads(beta.stdout)["problems"]} == {
        ("content_hash", "fr/cuisine/pot-au-feu.md")}
    repaired = run_cli(["check", "-c", "beta", "--repair", "--json"], env=env, cwd=tmp_path)
    assert json.loads(repaired.stdout)["marked_for_repair"] == 1
    with psycopg.connect(db_url) as conn:
        marked = value(conn, "SELECT string_agg(collection, ',') FROM ragpg.document"
                             " WHERE fingerprint = 'needs-repair'")
    assert marked == "beta"
    unknown = run_cli(["check", "-c", "gamma"], env=env, cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.strip().count("\n") == 0
    assert "gamma" in unknown.stderr
    for collection in ("alpha", "beta"):
        run_cli(["ingest", str(corpus), "-c", collection], env=env, cwd=tmp_path)
    assert violations(db_url) == []
