"""Fusion of the retrievers' rankings and per-document capping; pure Python, no database."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
D = TypeVar("D", bound=Hashable)

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
    A retriever missing from ``weights`` weighs 1; a weight of 0 keeps its items (score 0)
    so that a keyword-only hit stays reachable when nothing else is left.
    """
    if k < 0:
        raise ValueError("rrf k must be >= 0")
    scores: dict[K, float] = {}
    best: dict[K, int] = {}
    first_seen: dict[K, int] = {}
    order = 0
    for name, ranked in rankings.items():
        weight = 1.0 if weights is None else float(weights.get(name, 1.0))
        if weight < 0:
            raise ValueError(f"rrf weight of {name!r} must be >= 0")
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


def cap_per_document(items: Iterable[T], document_of: Callable[[T], D], limit: int | None) -> list[T]:
    """Keep at most ``limit`` items of each document, in the given order (seed 003's
    per-thread aggregation: one long file must not fill every slot). ``None`` keeps all."""
    if limit is None:
        return list(items)
    if limit <= 0:
        raise ValueError("max_per_document must be >= 1")
    seen: dict[D, int] = {}
    kept: list[T] = []
    for item in items:
        doc = document_of(item)
        count = seen.get(doc, 0)
        if count < limit:
            seen[doc] = count + 1
            kept.append(item)
    return kept
