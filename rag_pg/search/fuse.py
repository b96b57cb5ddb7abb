"""Fusion of the retrievers' rankings and per-document capping; pure Python, no database.

Two fusions of the legs' candidate lists: weighted reciprocal-rank fusion (:func:`rrf`,
:func:`rrf_ranks`), which looks at ranks only, and a convex combination of the legs' scores
min-max normalised over each leg's list (:func:`convex`), which also sees how far apart the
candidates are, and the same combination with per-query weights (:func:`adaptive`): each leg
weighs by how decisive its own list is this time (:func:`decisiveness`), so a leg whose top
stands clear of the rest leads, and a flat list, which orders nothing, follows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
D = TypeVar("D", bound=Hashable)

DEFAULT_RRF_K = 60
#: How strongly :func:`adaptive` follows the legs' decisiveness (0: the fixed weights, i.e.
#: :func:`convex`). docs/retrieval.md: measurements.
ADAPTIVE_POWER = 1.0
#: The legs :func:`adaptive` reweighs per query (the title and phrase legs keep their fixed weights).
ADAPTIVE_LEGS = ("vector", "keyword")


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


def _weight(weights: Mapping[str, float] | None, name: str) -> float:
    weight = 1.0 if weights is None else float(weights.get(name, 1.0))
    if weight < 0:
        raise ValueError(f"fusion weight of {name!r} must be >= 0")
    return weight


def _order(scores: Mapping[K, float], ranks: Mapping[K, Mapping[str, int]],
           legs: Sequence[str]) -> list[tuple[K, float]]:
    """Best first; ties by the best single rank, then the leg listed first, then the key's
    first appearance: deterministic whatever the input order of the legs' rows."""
    def tie(key: K) -> tuple[int, int]:
        mine = ranks[key]
        best = min(mine.values())
        return best, min(legs.index(leg) for leg, r in mine.items() if r == best)
    first = {key: i for i, key in enumerate(ranks)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], *tie(kv[0]), first[kv[0]]))


def ordered(parts: Mapping[K, Mapping[str, float]], ranks: Mapping[K, Mapping[str, int]],
            legs: Sequence[str]) -> list[tuple[K, float]]:
    """Items best first by their fused score, the sum of their legs' parts (ties as
    :func:`_order` breaks them)."""
    return _order({key: sum(mine.values()) for key, mine in parts.items()}, ranks, legs)


def rrf_parts(
    ranks: Mapping[K, Mapping[str, int]],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
) -> dict[K, dict[str, float]]:
    """Each item's part of its weighted RRF score from each leg that found it:
    ``weight / (k + rank)`` (ranks 1-based, as the leg numbered them: a rank may skip the
    rows a leg did not return)."""
    if k < 0:
        raise ValueError("rrf k must be >= 0")
    return {key: {leg: _weight(weights, leg) / (k + rank) for leg, rank in mine.items()}
            for key, mine in ranks.items()}


def rrf_ranks(
    ranks: Mapping[K, Mapping[str, int]],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
    legs: Sequence[str] = ("vector", "keyword"),
) -> list[tuple[K, float]]:
    """Weighted RRF over each item's rank in each leg that found it (see :func:`rrf_parts`)."""
    return ordered(rrf_parts(ranks, k=k, weights=weights), ranks, legs)


def convex_parts(
    scores: Mapping[K, Mapping[str, float]],
    *,
    weights: Mapping[str, float] | None = None,
    legs: Sequence[str] = ("vector", "keyword"),
    absolute: Collection[str] = (),
    from_zero: Collection[str] = (),
) -> dict[K, dict[str, float]]:
    """Each item's part of its convex score from each leg that found it: the leg's weight
    share times its normalised score (see :func:`convex`)."""
    total = sum(_weight(weights, leg) for leg in legs) or 1.0
    bounds: dict[str, tuple[float, float]] = {leg: (0.0, 1.0) for leg in absolute}
    for leg in legs:
        values = [mine[leg] for mine in scores.values() if leg in mine]
        if values and leg not in bounds:
            bounds[leg] = (0.0 if leg in from_zero else min(values), max(values))
    parts: dict[K, dict[str, float]] = {}
    for key, mine in scores.items():
        parts[key] = {}
        for leg, raw in mine.items():
            low, high = bounds[leg]
            normalised = max(0.0, raw - low) / (high - low) if high > low else 1.0
            parts[key][leg] = _weight(weights, leg) * normalised / total
    return parts


def convex(
    scores: Mapping[K, Mapping[str, float]],
    ranks: Mapping[K, Mapping[str, int]],
    *,
    weights: Mapping[str, float] | None = None,
    legs: Sequence[str] = ("vector", "keyword"),
    absolute: Collection[str] = (),
    from_zero: Collection[str] = (),
) -> list[tuple[K, float]]:
    """Convex combination of normalised leg scores: each leg's scores are mapped to [0, 1]
    over its own candidate list (min-max: its best 1, its worst 0; a flat list: all 1), an
    item a leg did not find gets 0 there, and the legs are averaged with ``weights``. Raw
    scores live on unrelated scales (cosine, BM25): only their spread within a list is
    comparable. The legs named in ``absolute`` score on [0, 1] already and are taken as they
    are; those in ``from_zero`` have a true zero (BM25: no word of the query) and are divided
    by their best score alone, so their worst candidate keeps what it scored instead of
    wherever the list happened to be cut."""
    parts = convex_parts(scores, weights=weights, legs=legs, absolute=absolute, from_zero=from_zero)
    return ordered(parts, ranks, legs)


def decisiveness(values: Sequence[float]) -> float:
    """How clearly a leg's list picks its best candidate, in [0, 1]: how far, on the list's
    own min-max scale, the others lie below the top (1 - their mean normalised score). A top
    that stands alone above a low tail gives nearly 1; scores falling evenly, about 1/2; a
    list whose candidates all come close to the top, nearly 0. Scale-free, so cosine
    similarities and BM25 compare; one candidate is decisive (1), a flat list not at all (0)."""
    if len(values) < 2:
        return 1.0 if values else 0.0
    high, low = max(values), min(values)
    if high <= low:
        return 0.0
    others = sorted(values, reverse=True)[1:]
    return 1.0 - sum((v - low) / (high - low) for v in others) / len(others)


def adaptive_weights(
    scores: Mapping[K, Mapping[str, float]],
    *,
    weights: Mapping[str, float] | None = None,
    legs: Sequence[str] = ("vector", "keyword"),
    absolute: Collection[str] = (),
    power: float | None = None,
) -> dict[str, float]:
    """This query's weights for :func:`adaptive`: the legs of :data:`ADAPTIVE_LEGS` share
    their combined weight in proportion to ``weight * decisiveness ** power`` of their own
    score lists (``power`` defaults to :data:`ADAPTIVE_POWER`; 0 keeps the fixed weights).
    The legs' total weight is unchanged, so another leg (title, phrase) keeps its share. When
    no reweighed leg orders anything (every list flat), the fixed weights apply."""
    power = ADAPTIVE_POWER if power is None else power
    if power < 0:
        raise ValueError("adaptive power must be >= 0")
    chosen = [leg for leg in legs if leg in ADAPTIVE_LEGS and leg not in absolute]
    lists: dict[str, list[float]] = {leg: [] for leg in chosen}
    for mine in scores.values():
        for leg, raw in mine.items():
            if leg in lists:
                lists[leg].append(raw)
    base = {leg: _weight(weights, leg) for leg in legs}
    raised = {leg: base[leg] * decisiveness(lists[leg]) ** power for leg in chosen}
    total = sum(raised.values())
    if total > 0:
        share = sum(base[leg] for leg in chosen) / total
        base.update({leg: value * share for leg, value in raised.items()})
    return base


def adaptive(
    scores: Mapping[K, Mapping[str, float]],
    ranks: Mapping[K, Mapping[str, int]],
    *,
    weights: Mapping[str, float] | None = None,
    legs: Sequence[str] = ("vector", "keyword"),
    absolute: Collection[str] = (),
    power: float | None = None,
) -> list[tuple[K, float]]:
    """:func:`convex` with per-query weights (:func:`adaptive_weights`)."""
    mine = adaptive_weights(scores, weights=weights, legs=legs, absolute=absolute, power=power)
    return convex(scores, ranks, weights=mine, legs=legs, absolute=absolute)


def cap_per_document(items: Iterable[T], document_of: Callable[[T], D], limit: int | None) -> list[T]:
    """Keep at most ``limit`` items of each document, in the given order (one long file must
    not fill every slot). ``None`` keeps all."""
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
