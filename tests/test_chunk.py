"""Sections, anchors, paragraphs and packing of rag_pg.source.chunk (SPEC §2.3, RELIABILITY E1)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pg.errors import ConfigError
from rag_pg.models import Chunk, Document
from rag_pg.source.chunk import Chunker, Section, first_h1, slugify, split_sections
from rag_pg.source.parse import parse_document
from rag_pg.source.tokens import context_prefix, embedding_text, estimate_tokens

FAST = settings(max_examples=150, deadline=None)


def document(body: str, title: str = "Doc", path: str = "doc.md") -> Document:
    return Document(path=path, title=title, content=body, content_hash="0" * 64)


def reference_tokens(words: int) -> int:
    return math.ceil(words * 1.33 - 1e-9)


def max_words(tokens: int) -> int:
    """Largest w with ceil(w × 1.33) <= tokens, by brute force (independent of chunk.py)."""
    words = 0
    while reference_tokens(words + 1) <= tokens:
        words += 1
    return words


# --- token estimate ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   \n\t ", 0),
        ("one", 2),  # ceil(1.33)
        ("one two", 3),  # ceil(2.66)
        ("one two three", 4),  # ceil(3.99)
        ("a " * 100, 133),
        ("a " * 300, 399),
        ("mot\u00e9 d\u2019accent\nligne\tsuivante", 6),  # 4 words on any whitespace
    ],
)
def test_estimate_tokens_table(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


@given(st.integers(min_value=0, max_value=200_000))
@FAST
def test_estimate_tokens_is_ceil_words_times_1_33(words: int) -> None:
    assert estimate_tokens("w " * words) == math.ceil(words * 133 / 100)


# --- slugs and anchors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Élévation du thème !", "élévation-du-thème-"),  # github-slugger does not trim
        ("Hello World", "hello-world"),
        ("  padded  ", "--padded--"),
        ("a  b", "a--b"),  # each space becomes '-', as GitHub does
        ("C++ & C#", "c--c"),
        ("snake_case-and-kebab", "snake_case-and-kebab"),
        ("Version 2.0 (beta)", "version-20-beta"),
        ("日本語 見出し", "日本語-見出し"),
        ("Ünïcödé ÀÉÎ", "ünïcödé-àéî"),
        ("e\u0301te\u0301", "e\u0301te\u0301"),  # NFD accents (combining marks) are kept
        ("tab\there", "tabhere"),  # only ASCII spaces become '-'
        ("emoji 🎉 party", "emoji--party"),
        ("!!!", ""),
        ("`code` *em* [link](x)", "code-em-linkx"),
    ],
)
def test_slugify_table(heading: str, anchor: str) -> None:
    assert slugify(heading) == anchor


def test_spec_slug_example_from_a_heading_line() -> None:
    sections = split_sections("## Élévation du thème !\n\ntext", "T")
    assert sections[1] == Section("Élévation du thème !", "élévation-du-thème-", ("text",))


def test_repeated_anchors_follow_github() -> None:
    body = "# A\n\nx\n\n# A\n\ny\n\n# A-1\n\nz\n\n# A\n\nw\n\n# !!!\n\nv\n\n# ???\n\nu"
    anchors = [section.anchor for section in split_sections(body, "T")]
    # An empty slug is github-slugger's own (the site links it to the page's top).
    assert anchors == ["", "a", "a-1", "a-1-1", "a-2", "", "-1"]


# --- sections ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("", [Section("T", "", ())]),
        ("just text", [Section("T", "", ("just text",))]),
        (
            "intro\n\n# One\n\nbody one\n## Two\ntwo\n### Three\n\nthree",
            [
                Section("T", "", ("intro",)),
                Section("One", "one", ("body one",)),
                Section("Two", "two", ("two",)),
                Section("Three", "three", ("three",)),
            ],
        ),
        (  # H4 and deeper are ordinary text
            "# H\n\n#### four\n\n##### five",
            [Section("T", "", ()), Section("H", "h", ("#### four", "##### five"))],
        ),
        (  # '#' without a space, and indented code, are not headings
            "#hashtag\n\n    # indented code\n\n   # three spaces",
            [
                Section("T", "", ("#hashtag", "```\n# indented code\n```")),
                Section("three spaces", "three-spaces", ()),
            ],
        ),
        (  # closing hashes are dropped only after a space
            "# Title ##\n\na\n\n## C#\n\nb",
            [Section("T", "", ()), Section("Title", "title", ("a",)), Section("C#", "c", ("b",))],
        ),
        (  # an empty heading is text
            "#\n\n# \n\ntext",
            [Section("T", "", ("#", "#", "text"))],
        ),
        (  # blank lines of spaces separate paragraphs; lines of a paragraph stay joined
            "line one\nline two\n  \t \nnext",
            [Section("T", "", ("line one\nline two", "next"))],
        ),
    ],
)
def test_split_sections_table(body: str, expected: list[Section]) -> None:
    assert split_sections(body, "T") == expected


FENCE_CASES = [
    # (body, expected paragraphs of the preamble)
    ("```\n# not a heading\n\n## nor this\n```", ("```\n# not a heading\n\n## nor this\n```",)),
    ("~~~python\n# comment\n\n\nx = 1\n~~~", ("~~~python\n# comment\n\n\nx = 1\n~~~",)),
    # a shorter or different fence does not close; a longer one does
    ("````\n```\n# in\n~~~~\n`````", ("````\n```\n# in\n~~~~\n`````",)),
    # closing fence may be indented up to 3 spaces and followed by spaces only
    ("```\n# in\n   ```  ", ("```\n# in\n   ```  ",)),
    # text right before and after a fence makes separate paragraphs
    ("before\n```\ncode\n```\nafter", ("before", "```\ncode\n```", "after")),
    # a backtick fence whose info string has a backtick is not a fence
    ("``` a`b\n# Heading", None),
    # '```x' after text: a closing candidate with text after the run does not close
    # (an unclosed block gets its closing fence, so every chunk stays valid Markdown)
    ("```\n```not closing\n# still code", ("```\n```not closing\n# still code\n```",)),
]


@pytest.mark.parametrize(("body", "paragraphs"), FENCE_CASES)
def test_fenced_code_is_one_paragraph_and_hides_headings(
    body: str, paragraphs: tuple[str, ...] | None
) -> None:
    sections = split_sections(body, "T")
    if paragraphs is None:
        assert [s.title for s in sections] == ["T", "Heading"]
    else:
        assert sections == [Section("T", "", paragraphs)]


def test_unclosed_fence_runs_to_the_end() -> None:
    body = "# Real\n\n```\ncode\n\n# not heading\n\n## nor this\n"
    sections = split_sections(body, "T")
    assert [s.title for s in sections] == ["T", "Real"]
    assert sections[1].paragraphs == ("```\ncode\n\n# not heading\n\n## nor this\n```",)


def test_first_h1_skips_fences_and_lower_levels() -> None:
    assert first_h1("## Two\n```\n# Fenced\n```\n# Real title #\n# Second") == "Real title"
    assert first_h1("no heading\n#tag") is None


# --- chunker bounds ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "overlap"),
    [(0, 0), (-1, 0), (10, 10), (10, 11), (10, -1), (True, 0), (10, False), (10.0, 1), ("10", 1)],
)
def test_chunker_bounds_raise_config_error(size: object, overlap: object) -> None:
    with pytest.raises(ConfigError):
        Chunker(size, overlap)  # type: ignore[arg-type]


@pytest.mark.parametrize(("size", "overlap"), [(1, 0), (2, 1), (512, 64), (10, 9)])
def test_chunker_bounds_accept(size: int, overlap: int) -> None:
    chunker = Chunker(size, overlap)
    assert (chunker.size, chunker.overlap) == (size, overlap)


# --- packing examples ----------------------------------------------------------------


def contents(body: str, size: int, overlap: int) -> list[str]:
    return [c.content for c in Chunker(size, overlap).chunk(document(body))]


def test_paragraphs_accumulate_until_size_then_tail_starts_the_next() -> None:
    # size 10 holds 7 words; overlap 3 holds 2 words: the last whole sentence that fits.
    body = "a b c.\n\nd e. f g.\n\nh i j."
    assert contents(body, 10, 3) == ["a b c.\n\nd e. f g.", "f g.\n\nh i j."]


def test_tail_keeps_whole_blocks_with_their_line_breaks() -> None:
    body = "a b c d.\n\n- x\n- y\n\nh i j."
    assert contents(body, 12, 6) == ["a b c d.\n\n- x\n- y", "- x\n- y\n\nh i j."]


def test_tail_is_left_out_when_no_whole_sentence_fits() -> None:
    # next paragraph has 6 words: one word of room, and no sentence is one word long.
    body = "a b c.\n\nd e. f g.\n\nh i j k l m."
    assert contents(body, 10, 3) == ["a b c.\n\nd e. f g.", "h i j k l m."]


def test_oversized_paragraph_is_its_own_chunk_up_to_the_cap() -> None:
    big = " ".join(f"w{i}" for i in range(10))  # over size (6 words), under the cap (12)
    body = f"a b\n\n{big}\n\nc d"
    assert contents(body, 8, 3) == ["a b", big, "c d"]


def test_paragraph_over_the_cap_is_split_between_words() -> None:
    big = " ".join(f"w{i}" for i in range(20))
    body = f"a b\n\n{big}\n\nc d"
    words = big.split()
    assert contents(body, 8, 3) == [
        "a b",
        " ".join(words[0:6]),
        " ".join(words[6:12]),
        " ".join(words[12:18]),
        "w18 w19\n\nc d",
    ]


def test_zero_overlap_gives_disjoint_chunks() -> None:
    body = "a b c\n\nd e f\n\ng h i"
    assert contents(body, 8, 0) == ["a b c\n\nd e f", "g h i"]


def test_chunks_never_cross_sections_and_carry_no_tail_across() -> None:
    body = "a b c\n\n# S\n\nd e f\n\n## Empty\n\n### T\n\ng h"
    chunks = Chunker(100, 50).chunk(document(body, title="Doc"))
    assert [(c.section, c.anchor, c.position, c.content) for c in chunks] == [
        ("Doc", "", 0, "a b c"),
        ("S", "s", 1, "d e f"),
        ("T", "t", 2, "g h"),
    ]


def test_whole_chunk_record() -> None:
    chunks = Chunker(100, 10).chunk(
        document("# Title\n\nHello world.", title="Title", path="d/x.md")
    )
    content = "Hello world."
    assert chunks == [
        Chunk(
            document_path="d/x.md",
            document_title="Title",
            section="Title",
            anchor="title",
            position=0,
            content=content,
            token_count=3,
            content_hash=hashlib.sha256(f"Title\n{content}".encode()).hexdigest(),  # section + text
            line_start=3,
            line_end=3,
        )
    ]


def test_empty_and_heading_only_documents_have_no_chunks() -> None:
    assert Chunker(10, 2).chunk(document("")) == []
    assert Chunker(10, 2).chunk(document("# A\n\n## B\n\n   \n")) == []


def test_context_prefix_and_embedding_text() -> None:
    chunk = Chunker(50, 5).chunk(document("intro\n\n## Part", title="Guide"))[0]
    assert context_prefix(chunk) == "Guide"
    assert embedding_text(chunk) == "Guide\n\nintro"
    chunk = Chunker(50, 5).chunk(document("# Guide\n\n## Setup\n\nrun it", title="Guide"))[0]
    assert context_prefix(chunk) == "Guide › Setup"
    assert embedding_text(chunk) == "Guide › Setup\n\nrun it"


# --- pathological inputs (they must finish; speed is measured by the benchmark) ------


def test_one_megabyte_single_line() -> None:
    line = "mot " * 250_000
    chunks = Chunker(512, 64).chunk(document(line))
    assert all(c.token_count <= 1024 for c in chunks)
    assert sum(len(c.content.split()) for c in chunks) == 250_000


def test_hundred_thousand_headings() -> None:
    body = "\n".join(f"## Same\ntext {i}" for i in range(100_000))
    chunks = Chunker(512, 64).chunk(document(body))
    assert len(chunks) == 100_000
    assert len({c.anchor for c in chunks}) == 100_000
    assert chunks[-1].anchor == "same-99999"


def test_deeply_nested_lists_and_quotes() -> None:
    body = "\n".join(">" * i + " - item" for i in range(10_000))
    chunks = Chunker(50_000, 0).chunk(document(body))
    assert sum(c.content.count("item") for c in chunks) == 10_000


# --- properties ----------------------------------------------------------------------

WORD = st.sampled_from(["alpha", "beta", "gamma", "é", "日本", "x-y", "z_z", "Q", "42", "déjà"])


@dataclass
class Spec:
    """A generated document: sections of paragraphs, and the body text rendering them."""

    titles: list[str]
    paragraphs: list[list[str]]  # per section, preamble first
    body: str


@st.composite
def markdown_specs(draw: st.DrawFn, fences: bool = True) -> Spec:
    counter = iter(range(10**6))
    titles: list[str] = ["Doc"]
    sections: list[list[str]] = [[]]
    lines: list[str] = []

    def paragraph() -> str:
        marker = f"p{next(counter)}"
        words = [marker, *draw(st.lists(WORD, min_size=0, max_size=25))]
        cut = draw(st.integers(min_value=0, max_value=len(words)))
        if 0 < cut < len(words) and draw(st.booleans()):
            return " ".join(words[:cut]) + "\n" + " ".join(words[cut:])
        return " ".join(words)

    def fence() -> str:
        char = draw(st.sampled_from(["`", "~"]))
        length = draw(st.integers(min_value=3, max_value=5))
        inner_choices = [
            "# looks like a heading",
            "## also",
            "",
            "",
            "code line",
            char * (length - 1) if length > 3 else "x",
            ("~" if char == "`" else "`") * 3,
        ]
        inner = draw(st.lists(st.sampled_from(inner_choices), max_size=6))
        closing = char * draw(st.integers(min_value=length, max_value=length + 2))
        marker = f"p{next(counter)}"
        return "\n".join([char * length + " " + marker, *inner, closing])

    for _ in range(draw(st.integers(min_value=0, max_value=12))):
        kind = draw(st.sampled_from(["para", "para", "para", "heading", "fence", "h4"]))
        if kind == "heading":
            level = draw(st.integers(min_value=1, max_value=3))
            title = draw(st.sampled_from(["Intro", "Usage", "Élévation !", "Intro", "Notes"]))
            lines.append("#" * level + " " + title)
            titles.append(title)
            sections.append([])
            continue
        if kind == "fence" and fences:
            text = fence()
        elif kind == "h4":
            text = "#### deep " + f"p{next(counter)}"
        else:
            text = paragraph()
        sections[-1].append(text)
        lines.append(text)
    separators = draw(
        st.lists(
            st.sampled_from(["\n\n", "\n\n\n", "\n \t\n"]), min_size=len(lines), max_size=len(lines)
        )
    )
    body = "".join(line + sep for line, sep in zip(lines, separators, strict=True))
    return Spec(titles, sections, body)


@given(markdown_specs())
@FAST
def test_split_sections_recovers_the_generated_structure(spec: Spec) -> None:
    sections = split_sections(spec.body, "Doc")
    assert [s.title for s in sections] == spec.titles
    assert [list(s.paragraphs) for s in sections] == spec.paragraphs
    anchors = [s.anchor for s in sections]
    assert len(set(anchors)) == len(anchors)


SIZES = st.integers(min_value=1, max_value=60).flatmap(
    lambda size: st.tuples(st.just(size), st.integers(min_value=0, max_value=size - 1))
)


@given(markdown_specs(), SIZES, st.sampled_from(["\n", "\r\n", "\r"]), st.booleans())
@FAST
def test_line_ending_and_bom_variants_give_identical_chunks(
    spec: Spec, bounds: tuple[int, int], newline: str, bom: bool
) -> None:
    reference = parse_document("d.md", spec.body.encode())
    text = ("\ufeff" if bom else "") + spec.body.replace("\n", newline)
    variant = parse_document("d.md", text.encode())
    chunker = Chunker(*bounds)
    assert chunker.chunk(variant) == chunker.chunk(reference)
