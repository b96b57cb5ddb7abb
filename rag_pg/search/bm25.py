"""BM25: the query text made safe for Postgres, and a pure-Python reference of the SQL scoring.

The ranking itself runs in SQL (``search_keyword_leg`` in ``sql/search.sql``) over the stored
``tsvector``: Postgres does the tokenising, French/English stemming, accent folding and
stop-word removal, per the chunk's own text search configuration. This module prepares what
is sent (user text never reaches ``to_tsquery``) and states the formula in Python, so that the
SQL can be checked against it without a second implementation of the maths.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_QUERY_WORDS = 64  # distinct words in the GIN prefilter
MAX_QUERY_TOKENS = 256  # words scored (repeats count, as in bm25s and Lucene)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class KeywordQuery:
    """What the keyword leg sends: ``text`` for ``to_tsvector`` (the scored terms, repeats
    kept) and ``prefilter`` for ``websearch_to_tsquery`` (each distinct word quoted, OR-ed:
    quotes, operators and punctuation in user text are inert, and noisy questions still match).
    """

    text: str
    prefilter: str

    def __bool__(self) -> bool:
        return bool(self.prefilter)


def keyword_query(text: str) -> KeywordQuery:
    """Split user text into words (letters and digits; NUL and every symbol are separators)."""
    words = _WORD.findall(text.replace("\x00", " "))[:MAX_QUERY_TOKENS]
    distinct: list[str] = []
    seen: set[str] = set()
    for word in words:
        lowered = word.lower()
        if lowered not in seen:
            seen.add(lowered)
            distinct.append(word)
        if len(distinct) >= MAX_QUERY_WORDS:
            break
    kept = [w for w in words if w.lower() in seen]
    return KeywordQuery(" ".join(kept), " or ".join(f'"{w}"' for w in distinct))


@dataclass(frozen=True, slots=True)
class BM25Params:
    """Okapi BM25 parameters: ``k1`` saturates term frequency, ``b`` weighs length."""

    k1: float = 1.2
    b: float = 0.75

    def __post_init__(self) -> None:
        if not (math.isfinite(self.k1) and self.k1 >= 0):
            raise ValueError(f"bm25 k1 must be a finite number >= 0 (got {self.k1})")
        if not (math.isfinite(self.b) and 0 <= self.b <= 1):
            raise ValueError(f"bm25 b must be between 0 and 1 (got {self.b})")


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
    params: BM25Params = BM25Params(),
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
    params: BM25Params = BM25Params(),
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
    params: BM25Params = BM25Params(),
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
