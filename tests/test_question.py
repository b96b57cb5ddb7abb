"""Question analysis for the keyword leg, and the title leg of the hybrid fusion (no database
here; tests/test_search.py runs searches end to end)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_pg.search import hits
from rag_pg.search.bm25 import keyword_query
from rag_pg.search.fields import stem, stems, title_scores
from rag_pg.search.fuse import convex
from rag_pg.search.hits import Candidate, shape
from rag_pg.search.plan import SearchPlan
from rag_pg.search.question import keyword_text


@pytest.mark.parametrize(("question", "expected"), [
    # the inverted subject goes; a content verb stays, a modal or existential goes with it
    ("Pourquoi Python utilise-t-il l'indentation ?", "Pourquoi Python utilise indentation ?"),
    ("Peut-on utiliser Sass dans les balises style ?", "utiliser Sass dans les balises style ?"),
    ("Puis-je hydrater des composants Astro ?", "hydrater des composants Astro ?"),
    ("Existe-t-il un moyen de trier une liste ?", "un moyen de trier une liste ?"),
    ("Faut-il mettre mes images dans src ?", "mettre mes images dans src ?"),
    ("Le préchargement fonctionne-t-il sur Safari ?", "Le préchargement fonctionne sur Safari ?"),
    # elisions, with either apostrophe; a word that only looks elided is kept
    ("Qu’est-ce qu’une liste ?", "une liste ?"),
    ("jusqu'au bout, lorsqu'il pleut", "au bout, il pleut"),
    ("la date d'aujourd'hui", "la date aujourd'hui"),
    # interrogatives are kept (measured: dropping them costs), so are statements
    ("Comment déclarer une prop ?", "Comment déclarer une prop ?"),
    ("Manager d'activité Android.", "Manager activité Android."),
    ("How do I make an admonition collapsible?", "How do I make an admonition collapsible?"),
])
def test_keyword_text_of_questions(question, expected):
    assert keyword_text(question) == expected


def test_code_spans_are_left_as_typed():
    assert keyword_text("Pourquoi `peut-on` et `l'objet` ? peut-on l'éviter ?") == \
        "Pourquoi `peut-on` et `l'objet` ? éviter ?"


@pytest.mark.parametrize("query", ["peut-on", "?", "l'", "   "])
def test_a_query_that_would_lose_every_word_is_kept(query):
    assert keyword_text(query) == query


@given(st.text(max_size=80))
def test_keyword_text_never_adds_a_word(query):
    """Whatever the input, the analysed text's words are a subset of the query's own words
    (plus the stems of elided words): it only removes."""
    before = {w.lower() for w in keyword_query(query.replace("\u2019", "'")).text.split()}
    after = {w.lower() for w in keyword_query(keyword_text(query)).text.split()}
    assert after <= before


def test_stems_fold_accents_plurals_and_drop_stop_words():
    assert stem("Préchargement") == stem("précharger") == "precha"
    assert stem("images") == stem("image")
    assert stems("Comment ajouter un bouton pour revenir en haut de la page ?") == \
        {"ajoute", "bouton", "reveni", "haut", "page"}


def test_title_scores_weigh_heading_over_title_and_rare_over_common_words():
    titles = {
        1: ("Ajouter Tailwind 4", "Styles et CSS"),
        2: ("Configuration", "Ajouter Tailwind"),  # both words, in the document title: half
        3: ("Ajouter un projet", "TypeScript"),  # "ajouter" is common among the candidates
        4: ("Ajouter une intégration", "Intégrations"),  # one word: too little to count
        5: ("Pagination", "Routage"),
    }
    scores = title_scores("comment ajouter Tailwind à un projet ?", titles)
    assert set(scores) == {1, 2, 3}
    assert scores[1] == pytest.approx(2 * scores[2])
    # both hold "ajouter"; "projet" (one title of five) weighs more than "tailwind" (two)
    assert scores[3] > scores[1]
    assert 0 < min(scores.values()) and max(scores.values()) <= 1
    assert title_scores("comment ?", titles) == {}
    # a one-word question needs only its word
    assert set(title_scores("pagination", titles)) == {5}


def test_absolute_legs_are_not_min_max_normalised():
    scores = {1: {"keyword": 2.0, "title": 0.2}, 2: {"keyword": 1.0, "title": 0.1}}
    ranks = {1: {"keyword": 1, "title": 1}, 2: {"keyword": 2, "title": 2}}
    legs = ("keyword", "title")
    relative = dict(convex(scores, ranks, legs=legs))
    absolute = dict(convex(scores, ranks, legs=legs, absolute=("title",)))
    assert relative == {1: 1.0, 2: 0.0}
    assert absolute == pytest.approx({1: (1.0 + 0.2) / 2, 2: (0.0 + 0.1) / 2})


def _candidate(chunk_id, vrank, dist, krank, kscore, section, title):
    return Candidate(chunk_id, vector_rank=vrank, distance=dist, keyword_rank=krank,
                     keyword_score=kscore, section=section, title=title, document_id=chunk_id,
                     path=f"{chunk_id}.md")


@pytest.mark.parametrize("fusion", ["convex", "rrf"])
def test_the_title_leg_lifts_the_section_whose_heading_holds_the_question(fusion):
    """Both legs put a body that mentions the words just above the section titled by them;
    the title leg lifts the titled section; vector and keyword modes never see it."""
    rows = [
        _candidate(1, 1, 0.10, 1, 6.0, "Navigation", "Setting up navigation"),
        _candidate(2, 2, 0.12, 2, 5.5, "Back-to-top button", "Setting up navigation"),
        _candidate(3, 3, 0.30, 3, 1.0, "Footer", "Setting up the footer"),
    ]
    query = "how to add a back-to-top button"

    def first(mode: str, title: float) -> list[int | None]:
        plan = SearchPlan(collection="c", k=3, mode=mode, fusion=fusion, query_text=query,
                          weights={"vector": 1.0, "keyword": 1.0, "title": title})
        return [h.chunk_id for h in shape(rows, plan)]

    assert first("hybrid", 0.0)[0] == 1
    assert first("hybrid", 1.0)[0] == 2
    assert first("keyword", 1.0) == [1, 2, 3]
    assert first("vector", 1.0) == [1, 2, 3]
    default = SearchPlan(collection="c", k=3, mode="hybrid", fusion=fusion, query_text=query)
    assert [h.chunk_id for h in shape(rows, default)] == first("hybrid", hits.TITLE_WEIGHT)


def test_title_scores_are_the_same_bits_whatever_the_string_hashing() -> None:
    """A CLI and a service are separate processes, each with its own string hash seed: the
    title leg's sums over sets of stems must not depend on the order the seed gives them
    (summed in set order, these 39 candidates gave 8 different results for 8 seeds)."""
    script = (
        "from rag_pg.search.fields import title_scores\n"
        "words = ('sauvegarde restauration complète tester bases postgresql réplication archive'\n"
        "         ' journal point instant serveur').split()\n"
        "titles = {i: [' '.join(w for j, w in enumerate(words) if (i >> (j % 6)) & 1 or j % (i + 2) == 0),\n"
        "              'Sauvegardes PostgreSQL'] for i in range(1, 40)}\n"
        "print(sorted((k, v.hex()) for k, v in title_scores(' '.join(words), titles).items()))\n")
    outputs = set()
    for seed in range(8):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env={**os.environ, "PYTHONHASHSEED": str(seed)}, timeout=120, check=True)
        outputs.add(done.stdout)
    assert len(outputs) == 1, outputs
    assert outputs.pop().count("0x") >= 30
