"""The phrase leg: how many of a question's word pairs a candidate holds as they stand in it.

BM25 scores a chunk's words one by one, wherever they are: "rapport de bug" in a question
finds the chunk that says "affiche un rapport de bug" and the one where "rapport" and "bug"
stand a paragraph apart equally. Word order is evidence that the chunk says what the
question asks, and the search statement already has what it takes to see it: the question's
neighbouring lexemes become phrase queries (``search_phrases``) that each candidate's stored
tsvector answers, in its own text search configuration (so "rapports" meets "rapport", and a
stop-word between two words counts as it does in the question). This module turns the
phrases each candidate holds into a score; hits.py fuses it as a leg, like the title leg.

A phrase weighs by how rare it is among the candidates (a pair every candidate holds says
nothing), and a candidate's score is its share of the question's phrase weight: 1 when it
holds every phrase and no other candidate does.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence


def phrase_scores(held: Mapping[int, Sequence[str]], asked: Mapping[int, int]) -> dict[int, float]:
    """Candidate -> its idf-weighted share of the question's phrases (``held``: the phrases
    each candidate holds; ``asked``: how many the question has in that candidate's text
    search configuration). A phrase no candidate holds weighs as the rarest. Candidates
    holding none are left out."""
    n = max(len(asked), 1)
    df = Counter(phrase for phrases in held.values() for phrase in set(phrases))
    if not df:
        return {}
    unseen = math.log(1 + n)
    weight = {phrase: math.log(1 + n / count) for phrase, count in df.items()}
    # Sorted before adding: the same bits in every process, whatever the hash seed.
    seen = math.fsum(sorted(weight.values()))
    scores: dict[int, float] = {}
    for key, phrases in held.items():
        if not phrases:
            continue
        total = seen + max(0, asked.get(key, 0) - len(weight)) * unseen
        scores[key] = math.fsum(sorted(weight[p] for p in set(phrases))) / total
    return scores
