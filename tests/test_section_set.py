"""The shipped section-level question set (tests/data/real-md-sections): its format, and for
the files the repository carries (tests/fixtures/real-md), that each relevant anchor is one
ragpg gives a chunk of that file, with the anchors of the site that file belongs to."""

from __future__ import annotations

import json
from pathlib import Path

from rag_pg.admin.evaluate import load_questions
from rag_pg.config import Settings
from rag_pg.source.chunk import Chunker
from rag_pg.source.parse import parse_document

SET = Path(__file__).parent / "data" / "real-md-sections"
FIXTURES = Path(__file__).parent / "fixtures" / "real-md"
SITES = {"astro-docs-fr": "github", "mkdocs-material-docs": "mkdocs"}  # how each site slugs


def _items() -> list[dict[str, object]]:
    return [json.loads(line) for line in (SET / "questions.jsonl").read_text("utf-8").splitlines()]


def test_the_set_reads_as_eval_questions_each_answered_by_a_section():
    questions = load_questions(SET / "questions.jsonl")
    items = _items()
    assert len(questions) == len(items) >= 40
    assert len({item["id"] for item in items}) == len(items)
    assert len({q.query for q in questions}) == len(questions)
    for question, item in zip(questions, items, strict=True):
        for relevant in question.relevant:
            path, sep, anchor = relevant.partition("#")
            site = path.split("/", 1)[0]
            assert sep and anchor, relevant  # section level: every entry names its section
            assert site in SITES and item["site"] == {"astro-docs-fr": "astro-fr"}.get(
                site, "mkdocs-material"), relevant
            assert anchor == anchor.strip().lower() and " " not in anchor, relevant
    # both sites and both languages are asked about
    assert {item["site"] for item in items} == {"astro-fr", "mkdocs-material"}


def test_the_anchors_of_the_carried_files_are_ragpgs_own():
    settings = Settings().chunk
    checked = 0
    for question in load_questions(SET / "questions.jsonl"):
        for relevant in question.relevant:
            path, _, anchor = relevant.partition("#")
            source = FIXTURES / path
            if not source.is_file():
                continue
            site, rel = path.split("/", 1)
            chunker = Chunker(settings.size, settings.overlap, max_tokens=settings.max_tokens,
                              slug_style=SITES[site])
            anchors = {c.anchor for c in chunker.chunk(parse_document(rel, source.read_bytes()))}
            assert anchor in anchors, (relevant, sorted(anchors))
            checked += 1
    assert checked >= 1  # the fixtures hold at least one file the set asks about


def test_every_answer_is_in_the_documented_index():
    """The README's ingest commands index the answers: Astro files through the included
    paths listed in astro-included.txt, mkdocs-material's setup/ and reference/."""
    included = (SET / "astro-included.txt").read_text("utf-8").split()
    mkdocs = ("mkdocs-material-docs/setup/", "mkdocs-material-docs/reference/")
    for question in load_questions(SET / "questions.jsonl"):
        for relevant in question.relevant:
            path = relevant.partition("#")[0]
            assert (path.startswith(mkdocs) or any(
                path == line or path.startswith(line + "/") for line in included)), path
