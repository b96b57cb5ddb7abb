"""BM25 in plain Python, term for term the expression of the SQL keyword leg: the reference the
tests check the SQL (exhaustive and pruned) against."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rag_pg.search.bm25 import BM25Params

DEFAULT_PARAMS = BM25Params()


def idf(n: float, df: float) -> float:
    """Lucene's always-positive IDF: ln(1 + (N - df + 0.5) / (df + 0.5))."""
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def score(
    query_terms: Mapping[str, int],
    doc_terms: Mapping[str, int],
    doc_length: float,
    *,
    n: float,
    avgdl: float,
    df: Mapping[str, int],
    params: BM25Params = DEFAULT_PARAMS,
) -> float:
    """BM25 of one document: sum over query terms of qtf * idf * tf (k1 + 1) / (tf + k1 L),
    with L = 1 - b + b * dl / avgdl. The same expression as the SQL, term for term."""
    k1, b = params.k1, params.b
    norm = 1 - b + b * doc_length / max(avgdl, 1.0)
    total = 0.0
    for term, qtf in query_terms.items():
        tf = doc_terms.get(term, 0)
        if tf:
            total += qtf * idf(n, df[term]) * tf * (k1 + 1) / (tf + k1 * norm)
    return total


def term_bound(
    qtf: int, *, n: float, df: int, max_tf: int, min_dl: float, avgdl: float,
    params: BM25Params = DEFAULT_PARAMS,
) -> float:
    """The most one query term can add to any chunk's score, from its statistics: the term
    weight grows with tf and shrinks with the length, so its largest frequency in one chunk
    and the shortest chunk holding it bound it (``kw_bounds`` in the pruned keyword leg).
    Deletes leave ``max_tf``/``min_dl`` as they were: the bound only loosens."""
    k1, b = params.k1, params.b
    norm = 1 - b + b * min_dl / max(avgdl, 1.0)
    return qtf * idf(n, df) * max_tf * (k1 + 1) / (max_tf + k1 * norm)


def rank(
    query_terms: Mapping[str, int],
    docs: Sequence[tuple[Mapping[str, int], float]],
    params: BM25Params = DEFAULT_PARAMS,
) -> list[tuple[int, float]]:
    """Score every document of ``docs`` (term counts, length); best first, ties by index."""
    n = max(len(docs), 1)
    avgdl = max(sum(length for _, length in docs) / n, 1.0)
    df: dict[str, int] = {}
    for terms, _ in docs:
        for term in terms:
            df[term] = df.get(term, 0) + 1
    scored = [
        (i, score(query_terms, terms, length, n=n, avgdl=avgdl, df=df, params=params))
        for i, (terms, length) in enumerate(docs)
    ]
    return sorted((s for s in scored if s[1] > 0), key=lambda s: (-s[1], s[0]))
