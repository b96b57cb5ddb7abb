"""Document building of rag_pg.source.parse: hash, title priority, newlines, BOM (SPEC §2.2)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pg.errors import DocumentError
from rag_pg.models import Document
from rag_pg.source.chunk import Chunker
from rag_pg.source.parse import normalise_newlines, parse_document


def test_whole_document_record() -> None:
    raw = b"---\ntitle: Front\nlevel: 1\n---\n# Heading\n\nBody.\n"
    assert parse_document("docs/a.md", raw) == Document(
        path="docs/a.md",
        title="Front",
        content="# Heading\n\nBody.\n",
        content_hash=hashlib.sha256(raw).hexdigest(),
        front_matter={"title": "Front", "level": 1},
        warnings=(),
        body_line=5,  # the body starts after the four lines of front-matter
    )


@pytest.mark.parametrize(
    ("path", "text", "title"),
    [
        ("a.md", "---\ntitle: From YAML\n---\n# From H1\n", "From YAML"),
        ("a.md", "---\ntitle: 1984\n---\n# H1\n", "1984"),
        ("a.md", "---\ntitle: >\n  folded\n  title\n---\n", "folded title"),
        ("a.md", "---\ntitle: '   '\n---\n# H1 wins\n", "H1 wins"),
        ("a.md", "---\ntitle: [a, b]\n---\n# H1 wins\n", "H1 wins"),
        ("a.md", "---\ntitle: true\n---\n# H1 wins\n", "H1 wins"),
        ("a.md", "---\ntitle: [unclosed\n---\n# After bad YAML\n", "After bad YAML"),
        ("a.md", "intro\n\n## Sub\n\n# The H1 #\n\n# Second\n", "The H1"),
        ("a.md", "```\n# fenced\n```\n", "a"),
        ("a.md", "#hashtag only\n", "a"),
        ("a.md", "    # indented code\n", "a"),
        ("dir/notes.v2.md", "text", "notes.v2"),
        ("dir/README.MARKDOWN", "text", "README"),
        ("dir/Élévation du thème.md", "text", "Élévation du thème"),
    ],
)
def test_title_priority(path: str, text: str, title: str) -> None:
    assert parse_document(path, text.encode()).title == title


def test_hash_covers_raw_bytes_including_bom_and_front_matter() -> None:
    raw = b"\xef\xbb\xbf---\r\na: 1\r\n---\r\nbody\r\n"
    document = parse_document("a.md", raw)
    assert document.content_hash == hashlib.sha256(raw).hexdigest()
    assert document.front_matter == {"a": 1}
    assert document.content == "body\n"


def test_given_text_is_used_and_hash_still_from_bytes() -> None:
    raw = b"\xef\xbb\xbf# T\r\n\r\nx"
    document = parse_document("a.md", raw, "# T\r\n\r\nx")
    assert document == parse_document("a.md", raw)
    assert document.content == "# T\n\nx"


def test_invalid_utf8_is_a_document_error() -> None:
    with pytest.raises(DocumentError) as caught:
        parse_document("bad.md", b"ok \xff nope")
    assert caught.value.path == "bad.md"
    assert "UTF-8" in str(caught.value)


def test_front_matter_warnings_reach_the_document() -> None:
    document = parse_document("a.md", b"---\na: &x 1\nb: *x\n---\nbody")
    assert document.front_matter == {}
    assert document.content == "body"
    assert len(document.warnings) == 1 and "line 2" in document.warnings[0]


def test_front_matter_only_file_has_empty_body_and_no_chunks() -> None:
    document = parse_document("a.md", b"---\ntitle: Only\n---\n")
    assert document.content == "" and document.title == "Only"
    assert Chunker(100, 10).chunk(document) == []


@pytest.mark.parametrize(
    ("front_matter", "parent", "level", "node_type", "embed"),
    [
        ("", None, 0, "source", True),
        ("parent_source_file: a/b.md\nlevel: 2\n", "a/b.md", 2, "summary", True),
        ("embed: false\n", None, 0, "source", False),
        ("embed: no\n", None, 0, "source", False),  # YAML 1.2: the string 'no', still off
        ("node_type: summary\nlevel: '1'\n", None, 1, "summary", True),
    ],
)
def test_meaningful_front_matter_keys(
    front_matter: str, parent: str | None, level: int, node_type: str, embed: bool
) -> None:
    document = parse_document("x.md", f"---\n{front_matter}---\nbody".encode())
    assert (document.parent_path, document.level, document.node_type, document.embed) == (
        parent,
        level,
        node_type,
        embed,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("a\r\nb", "a\nb"), ("a\rb", "a\nb"), ("a\r\r\nb", "a\n\nb"), ("a\n\rb", "a\n\nb")],
)
def test_normalise_newlines(text: str, expected: str) -> None:
    assert normalise_newlines(text) == expected


@given(
    st.text(st.characters(exclude_categories=["Cs"])),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_newline_and_bom_variants_give_the_same_document_but_their_own_hash(
    text: str, newline: str, bom: bool
) -> None:
    text = normalise_newlines(text).lstrip("\ufeff")
    variant_text = ("\ufeff" if bom else "") + text.replace("\n", newline)
    reference = parse_document("a.md", text.encode())
    variant_bytes = variant_text.encode()
    variant = parse_document("a.md", variant_bytes, variant_text)
    assert (variant.title, variant.content, variant.front_matter, variant.warnings) == (
        reference.title,
        reference.content,
        reference.front_matter,
        reference.warnings,
    )
    assert variant.content_hash == hashlib.sha256(variant_bytes).hexdigest()
