"""BM25: the query text made safe for Postgres, and the scoring's parameters.

The ranking itself runs in SQL (``search_keyword_leg`` in ``store/sql/search.sql``) over the
stored ``tsvector``: Postgres does the tokenising, French/English stemming, accent folding and
stop-word removal, per the chunk's own text search configuration. This module prepares what
is sent (user text never reaches ``to_tsquery``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

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


@lru_cache(maxsize=256)  # the plan's checks and the statement's parameters ask for the same text
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
