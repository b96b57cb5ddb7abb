"""A hit's site URL from the [citation] url template: in hits, their JSON, the CLI's lines and
the citable context block."""

from __future__ import annotations

from click.testing import CliRunner

from rag_pg.config.citation import citation_url
from rag_pg.models import Chunk, Hit
from rag_pg.search.hits import with_citation_urls
from rag_pg.tree.context import assemble


def hit(path: str, anchor: str, section: str = "Section") -> Hit:
    chunk = Chunk(document_path=path, document_title="Titre", section=section, anchor=anchor,
                  position=0, content="Le texte du passage.", token_count=5, content_hash="h")
    return Hit(chunk=chunk, score=0.5)


def test_without_a_template_hits_have_no_url():
    hits = [hit("guide/props.md", "props-declaration")]
    assert with_citation_urls(hits, None) is hits
    assert hits[0].url is None and hits[0].to_dict()["url"] is None


def test_the_template_fills_each_hit():
    hits = [hit("guide/props.md", "props-declaration"), hit("index.md", ""),
            hit("manuels/guide é.pdf", "page=7")]
    urls = [h.url for h in with_citation_urls(hits, "https://fr.vuejs.org/{path_noext}.html#{anchor}")]
    assert urls == ["https://fr.vuejs.org/guide/props.html#props-declaration",
                    "https://fr.vuejs.org/index.html",
                    "https://fr.vuejs.org/manuels/guide%20%C3%A9.html#page=7"]
    assert [h.url for h in hits] == [None, None, None]  # hits are values: copies carry the URL


def test_page_is_the_pdf_page_and_empty_elsewhere():
    template = "https://x.org/{path}?page={page}"
    assert citation_url(template, "m.pdf", "page=12") == "https://x.org/m.pdf?page=12"
    assert citation_url(template, "a.md", "installation") == "https://x.org/a.md?page="


def test_the_context_block_shows_the_url_beside_the_location():
    [cited] = with_citation_urls([hit("a.md", "install")], "https://x.org/{path_noext}#{anchor}")
    context = assemble("Comment installer ?", [cited], budget=2000, lang="fr")
    source = context.sources[0]
    assert source.url == "https://x.org/a#install"
    assert '— a.md#install — https://x.org/a#install]' in source.header
    assert source.header in context.text
    assert source.to_dict()["url"] == "https://x.org/a#install"
    plain = assemble("Comment installer ?", [hit("a.md", "install")], budget=2000, lang="fr")
    assert plain.sources[0].url is None and "https://" not in plain.sources[0].header


def test_the_cli_prints_the_url_under_the_hit():
    import click

    from rag_pg.cli.search import _print_hits

    [cited] = with_citation_urls([hit("a.md", "install")], "https://x.org/{path_noext}#{anchor}")

    @click.command()
    def show() -> None:
        _print_hits([cited, hit("b.md", "")])

    out = CliRunner().invoke(show).output.splitlines()
    assert out[0].startswith("1. a.md#install") and out[1] == "   https://x.org/a#install"
    assert out[3].startswith("2. b.md") and "https://" not in "\n".join(out[3:])
