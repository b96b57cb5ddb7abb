"""The phrase leg: the question's word pairs, held by a candidate as they stand in the question."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rag_pg import RagPG, Settings
from rag_pg.search import hits
from rag_pg.search.hits import Candidate, shape
from rag_pg.search.phrases import phrase_scores
from rag_pg.search.plan import SearchPlan


def test_a_rare_phrase_weighs_more_and_holding_them_all_alone_scores_one():
    held = {1: ["'rapport' <2> 'bug'"], 2: ["'bug' <-> 'android'", "'rapport' <2> 'bug'"],
            3: ["'bug' <-> 'android'"], 4: ["'rapport' <2> 'bug'"], 5: []}
    asked = dict.fromkeys(held, 2)
    scores = phrase_scores(held, asked)
    assert set(scores) == {1, 2, 3, 4}  # holding no phrase: out of the leg
    assert scores[3] > scores[1]  # "bug android" is held by two candidates, "rapport bug" by three
    assert scores[2] == pytest.approx(scores[1] + scores[3])
    assert scores[2] == pytest.approx(1.0)  # every phrase the question has
    alone = phrase_scores({1: ["'a' <-> 'b'"], 2: []}, {1: 1, 2: 1})
    assert alone == {1: pytest.approx(1.0)}
    # a phrase of the question that no candidate holds still counts in the share
    assert phrase_scores({1: ["'a' <-> 'b'"]}, {1: 2})[1] == pytest.approx(0.5)
    assert phrase_scores({1: [], 2: []}, {1: 3, 2: 3}) == {}


def _row(chunk_id: int, vrank: int, dist: float, krank: int, kscore: float,
         phrases: list[str]) -> Candidate:
    return Candidate(chunk_id, vector_rank=vrank, distance=dist, keyword_rank=krank,
                     keyword_score=kscore, document_id=chunk_id, path=f"{chunk_id}.md",
                     phrases_held=phrases, phrases_asked=2)


@pytest.mark.parametrize("fusion", ["adaptive", "convex", "rrf"])
def test_the_phrase_leg_lifts_the_chunk_that_says_what_the_question_says(fusion):
    """Both legs put first a chunk where the question's words stand apart; the chunk that
    holds them in the question's order comes first with the phrase leg, and vector or keyword
    mode never sees it."""
    rows = [_row(1, 1, 0.10, 1, 6.0, []),
            _row(2, 2, 0.11, 2, 5.8, ["'rapport' <2> 'bug'", "'bug' <-> 'android'"]),
            _row(3, 3, 0.30, 3, 1.0, [])]

    def order(mode: str, phrase: float) -> list[int | None]:
        plan = SearchPlan(collection="c", k=3, mode=mode, fusion=fusion, query_text="rapport de bug android",
                          weights={"vector": 1.0, "keyword": 1.0, "title": 0.0, "phrase": phrase})
        return [h.chunk_id for h in shape(rows, plan)]

    assert order("hybrid", 0.0)[0] == 1
    assert order("hybrid", 1.0)[0] == 2
    assert order("keyword", 1.0) == order("vector", 1.0) == [1, 2, 3]
    default = SearchPlan(collection="c", k=3, mode="hybrid", fusion=fusion, query_text="rapport de bug android",
                         weights={"vector": 1.0, "keyword": 1.0, "title": 0.0})
    assert [h.chunk_id for h in shape(rows, default)] == order("hybrid", hits.PHRASE_WEIGHT)


PAGES = {
    "ordre.md": "# Incidents\n\nChaque rapport de bug est lu par l'équipe le lendemain.\n",
    "epars.md": "# Suivi\n\nUn bug trouvé ? L'équipe écrit ensuite un rapport complet.\n",
    "autre.md": "# Congés\n\nLes demandes de congés passent par le portail.\n",
}


@pytest.fixture
def phrase_rag(db_url: str, embed_server: Any, tmp_path: Path) -> Any:
    for name, text in PAGES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as rag:
        rag.ingest(tmp_path)
        yield rag


def test_the_statement_finds_the_phrase_in_each_chunks_own_words(phrase_rag):
    """"rapport de bug": the page saying it (stop-word between included, plural or not) holds
    the phrase; the page holding both words apart holds none, and ranks below it."""
    found = phrase_rag.search("les rapports de bug", 3, mode="hybrid")
    by_path = {h.path: h for h in found}
    assert by_path["ordre.md"].scores["phrase"] > 0
    assert "phrase" not in by_path["epars.md"].scores
    paths = [h.path for h in found]
    assert paths.index("ordre.md") < paths.index("epars.md")
    assert all("phrase" not in h.scores for h in phrase_rag.search("les rapports de bug", 3, mode="keyword"))
