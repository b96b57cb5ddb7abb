"""Reciprocal Rank Fusion of the retrievers' rankings; pure Python, no database."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_RRF_K = 60


def rrf(
    rankings: Mapping[str, Sequence[K]],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[K, float]]:
    """Fuse ranked lists: score(d) = sum over retrievers of weight / (k + rank(d)).

    Ranks are 1-based positions in each list. Ties are broken by the best single rank,
    then by first appearance in the retrievers' order, so the output is deterministic.
    """
    if k < 0:
        raise ValueError("rrf k must be >= 0")
    scores: dict[K, float] = {}
    best: dict[K, int] = {}
    first_seen: dict[K, int] = {}
    order = 0
    for name, ranked in rankings.items():
        weight = 1.0 if weights is None else float(weights.get(name, 1.0))
        for position, key in enumerate(ranked, start=1):
            if key not in first_seen:
                first_seen[key] = order
                order += 1
            if weight:
                scores[key] = scores.get(key, 0.0) + weight / (k + position)
            else:
                scores.setdefault(key, 0.0)
            best[key] = min(best.get(key, position), position)
    return sorted(scores.items(), key=lambda kv: (-kv[1], best[kv[0]], first_seen[kv[0]]))
