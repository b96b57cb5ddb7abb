"""An edit re-embeds only the chunks whose text changed; the rest keep their stored vectors.

Counted on a real embedding server on loopback (the texts it received) and checked against a
clean rebuild of the same files in another collection: the same vectors, the same hits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from rag_pg import RagPG, Settings

from .invariants import violations
from .rows import records

DOCUMENTS = 20
SECTIONS = 12
QUERIES = ("paragraph seven of guide 3", "edited words appear here", "section eleven guide 19")


def make_rag(db_url: str, server: Any) -> RagPG:
    settings = Settings.load(environ={}, overrides={
        "embedding.url": server.url, "embedding.batch_size": 16,
        "chunk.size": 80, "chunk.overlap": 10,
    })
    return RagPG(db_url, settings)


def paragraph(doc: int, section: int, edited: bool = False) -> str:
    words = [f"guide {doc} section {section} paragraph {section}"]
    words += [f"w{doc}x{section}x{n}" for n in range(40)]
    if edited:
        words.append("edited words appear here")
    return " ".join(words) + "."


def write_guide(root: Path, doc: int, *, edited_section: int | None = None) -> None:
    sections = [f"## Section {s}\n\n{paragraph(doc, s, s == edited_section)}\n" for s in range(SECTIONS)]
    (root / f"guide-{doc:02d}.md").write_text(f"# Guide {doc}\n\n" + "\n".join(sections))


def chunk_keys(url: str, collection: str) -> dict[tuple[str, int], tuple[str, str, str]]:
    with psycopg.connect(url) as conn:
        rows = records(conn,
            "SELECT d.path, c.position, c.content_hash, c.section, d.title FROM ragpg.chunk c"
            " JOIN ragpg.document d ON d.id = c.document_id WHERE c.collection = %s", (collection,))
    return {(r["path"], r["position"]): (r["content_hash"], r["section"], r["title"]) for r in rows}


def vectors(url: str, collection: str) -> dict[tuple[str, int], bytes]:
    with psycopg.connect(url) as conn:
        register_vector(conn)
        rows = records(conn,
            "SELECT d.path, c.position, v.embedding FROM ragpg.chunk_vector v"
            " JOIN ragpg.chunk c ON c.id = v.chunk_id JOIN ragpg.document d ON d.id = c.document_id"
            " WHERE v.collection = %s", (collection,))
    return {(r["path"], r["position"]): np.asarray(r["embedding"].to_numpy(), dtype=np.float32).tobytes()
            for r in rows}


def hits(rag: RagPG, collection: str) -> list[list[tuple[str, str, float]]]:
    return [[(h.chunk.document_path, h.chunk.anchor, round(h.score, 9))
             for h in rag.search(q, k=8, mode="hybrid", collection=collection)] for q in QUERIES]


def test_editing_one_paragraph_per_document_embeds_only_the_changed_chunks(db_url, embed_server, tmp_path):
    for doc in range(DOCUMENTS):
        write_guide(tmp_path, doc)
    with make_rag(db_url, embed_server) as rag:
        cold = rag.ingest(tmp_path)
        before = chunk_keys(db_url, "default")
        assert len(before) >= DOCUMENTS * 10  # documents of 10+ chunks
        assert embed_server.texts_embedded == len(before) and cold.chunks_reused == 0
        for doc in range(DOCUMENTS):
            write_guide(tmp_path, doc, edited_section=doc % SECTIONS)
        embed_server.reset_counters()
        edit = rag.ingest(tmp_path)
        after = chunk_keys(db_url, "default")
        changed = set(after.values()) - set(before.values())
        sent = embed_server.texts_embedded
        assert edit.changed == sorted(f"guide-{d:02d}.md" for d in range(DOCUMENTS))
        assert DOCUMENTS <= len(changed) <= 2 * DOCUMENTS
        assert sent == len(changed)  # exactly the new texts, each once
        assert edit.chunks_reused == len(after) - sent and edit.chunks_upserted == len(after)
        assert edit.tokens_embedded < cold.tokens_embedded / 4

        embed_server.reset_counters()
        clean = rag.ingest(tmp_path, collection="clean")  # a rebuild: nothing stored to reuse
        assert embed_server.texts_embedded == clean.chunks_upserted == len(after)
        assert vectors(db_url, "default") == vectors(db_url, "clean")
        assert hits(rag, "default") == hits(rag, "clean")
        assert all(hits(rag, "default"))
    assert violations(db_url) == []


def test_identical_texts_are_embedded_once_across_documents_and_groups(db_url, embed_server, tmp_path):
    # Versioned docs: the same page (same title, sections, text) under two versions, more
    # documents than one write group holds, so some copies meet in a later group.
    for version in ("v1", "v2"):
        (tmp_path / version).mkdir()
        for doc in range(40):
            write_guide(tmp_path / version, doc)
    with make_rag(db_url, embed_server) as rag:
        report = rag.ingest(tmp_path)
        keys = chunk_keys(db_url, "default")
        distinct = len(set(keys.values()))
        assert report.chunks_upserted == len(keys) == 2 * distinct
        assert embed_server.texts_embedded == distinct and report.chunks_reused == distinct
        stored = vectors(db_url, "default")
        assert len(stored) == len(keys)
        assert all(stored[(f"v1/{p[3:]}", pos)] == vec for (p, pos), vec in stored.items())

        # --full goes to the model for every text again, each distinct one once.
        embed_server.reset_counters()
        full = rag.ingest(tmp_path, full=True)
        assert full.documents_indexed == 80 and embed_server.texts_embedded == distinct
        assert vectors(db_url, "default") == stored
    assert violations(db_url) == []


def test_a_new_title_or_section_is_a_new_text(db_url, embed_server, tmp_path):
    write_guide(tmp_path, 1)
    with make_rag(db_url, embed_server) as rag:
        rag.ingest(tmp_path)
        count = len(chunk_keys(db_url, "default"))
        page = tmp_path / "guide-01.md"
        page.write_text(page.read_text().replace("# Guide 1", "# Guide one", 1))
        embed_server.reset_counters()
        retitled = rag.ingest(tmp_path)
        # Every chunk's context prefix names the title: all of them change.
        assert embed_server.texts_embedded == count and retitled.chunks_reused == 0
        page.write_text(page.read_text().replace("## Section 4\n", "## Section four\n", 1))
        embed_server.reset_counters()
        renamed = rag.ingest(tmp_path)
        assert 1 <= embed_server.texts_embedded <= 2 and renamed.chunks_reused == count - embed_server.texts_embedded
    assert violations(db_url) == []


def test_the_reuse_key_holds_everything_the_embedded_text_is_made_of():
    from rag_pg.ingest.reuse import reuse_key
    from rag_pg.models import Chunk
    from rag_pg.source.tokens import embedding_text

    def chunk(**fields: Any) -> Chunk:
        base: dict[str, Any] = dict(document_path="a.md", document_title="T", section="S", anchor="s",
                                    position=0, content="body", token_count=1, content_hash="h")
        return Chunk(**{**base, **fields})

    same = chunk(document_path="b/c.md", anchor="other", position=7, token_count=9)
    assert reuse_key(same) == reuse_key(chunk()) and embedding_text(same) == embedding_text(chunk())
    for changed in (chunk(document_title="U"), chunk(section="R"), chunk(content="x", content_hash="x")):
        assert reuse_key(changed) != reuse_key(chunk())
        assert embedding_text(changed) != embedding_text(chunk())
