"""Long URLs, data URIs and blobs: kept in a chunk as written, weighed and embedded short."""

from __future__ import annotations

import base64
import random

from rag_pg.ingest.reuse import group_keys
from rag_pg.models import Chunk
from rag_pg.source.chunk import Chunker
from rag_pg.source.markdown.noise import noise_share, quiet, weight
from rag_pg.source.parse import parse_document
from rag_pg.source.tokens import embedding_text
from rag_pg.store.documents import PreparedDocument

BLOB = base64.b64encode(bytes(random.Random(5).getrandbits(8) for _ in range(3000))).decode()
PROSE = ("La directive v-model crée une liaison bidirectionnelle sur un composant : elle passe"
         " une prop et écoute l'événement update du composant enfant.")


def page(link: str, sections: int = 6) -> str:
    return "# Guide\n\n" + "\n\n".join(f"## Partie {s}\n\n{PROSE}\n\n[Essayer en ligne]({link})"
                                       for s in range(sections)) + "\n"


def test_the_short_forms_keep_what_a_reader_reads():
    text = (f"Voir [ici](https://play.vuejs.org/#{BLOB}) et ![logo](data:image/png;base64,{BLOB[:200]})"
            " ou https://example.com/docs/guide.html, empreinte e3b0c44298fc1c149afbf4c8996fb924.")
    assert quiet(text) == ("Voir [ici](https://play.vuejs.org/…) et ![logo](data:…) ou"
                           " https://example.com/docs/guide.html, empreinte e3b0c44298fc1c149afbf4c8996fb924.")
    assert weight(text) == len(quiet(text)) and noise_share(text) > 0.9
    assert quiet(PROSE) == PROSE and noise_share(PROSE) == 0


def test_a_long_link_stays_with_its_prose_and_is_embedded_short():
    chunker = Chunker(120, 20)
    noisy = chunker.chunk(parse_document("guide.md", page(f"https://play.vuejs.org/#{BLOB}").encode()))
    plain = chunker.chunk(parse_document("guide.md", page("https://play.vuejs.org/").encode()))
    assert len(noisy) == len(plain)  # the blob neither fills a chunk nor is cut into chunks
    for chunk in noisy:
        assert len(quiet(chunk.content).split()) >= 10  # every chunk has prose of its own
        assert BLOB[:100] not in embedding_text(chunk) and "play.vuejs.org/…" in embedding_text(chunk)
    assert sum(BLOB in chunk.content for chunk in noisy) == 6  # the page's text, as written


def test_a_chunk_with_a_blob_is_embedded_again_rather_than_given_an_older_vector():
    def chunk(content: str) -> Chunk:
        return Chunk(document_path="a.md", document_title="A", section="S", anchor="s", position=0,
                     content=content, token_count=10, content_hash=content[:8])

    document = parse_document("a.md", b"# A\n\nText.\n")
    prepared = PreparedDocument(document, [chunk(PROSE), chunk(f"{PROSE} https://x.org/#{BLOB}")],
                                None, "french", "f")
    assert [key[0] for key in group_keys([prepared])] == [PROSE[:8]]
