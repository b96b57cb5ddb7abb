""""Why not": where an expected document (``path``) or passage (``path#anchor``) ranks in each
retriever's list and in the fused one, or what kept it out (a filter, no match, too deep).

Each leg runs alone, deep (``depth`` hits), with the search's filters; a target missing there
is looked for again without them, to tell a filter that removed it from a leg that did not
find it. The per-document cap is left out: it would hide the target's other passages."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rag_pg.errors import NoVectors
from rag_pg.models import DocumentRecord, Hit
from rag_pg.search.plan import Mode

DEFAULT_DEPTH = 200
Reason = Literal["found", "filtered", "not_matched", "too_deep", "no_vectors"]
LEGS: tuple[Mode, ...] = ("vector", "keyword")
#: A search as :meth:`RagPG.search` runs it (query, k, mode, collection, filters, rerank).
Search = Callable[..., list[Hit]]
#: A stored document by path in a collection, or None.
FindDocument = Callable[[str, str], DocumentRecord | None]


@dataclass(frozen=True, slots=True)
class LegPosition:
    """Where the target ranked in one list (1-based), with its raw score, or why it is absent."""

    rank: int | None
    reason: Reason
    score: float | None = None
    anchor: str | None = None  # the passage of the target's document that ranked best
    section: str | None = None
    matched: int | None = None  # how many passages the list held (when shorter than the depth)

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "reason": self.reason, "score": self.score,
                "anchor": self.anchor, "section": self.section, "matched": self.matched}


@dataclass(frozen=True, slots=True)
class Location:
    """The answer of :meth:`RagPG.locate`."""

    query: str
    target: str
    path: str
    anchor: str | None
    collection: str
    depth: int
    document_id: int | None  # None: no such document in the collection
    section_exists: bool  # False: the document has no passage with that anchor
    legs: dict[str, LegPosition] = field(default_factory=dict)
    fused: LegPosition | None = None  # the target in the search's own (fused) list

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "target": self.target, "path": self.path,
                "anchor": self.anchor, "collection": self.collection, "depth": self.depth,
                "document_id": self.document_id, "section_exists": self.section_exists,
                "legs": {leg: p.to_dict() for leg, p in self.legs.items()},
                "fused": self.fused.to_dict() if self.fused is not None else None}


def split_target(target: str) -> tuple[str, str | None]:
    """``path#anchor`` -> (path, anchor); a bare path -> (path, None)."""
    path, _, anchor = target.strip().partition("#")
    return path.strip(), (anchor.strip() or None)


def position(hits: Sequence[Hit], path: str, anchor: str | None,
             leg: str | None = None) -> LegPosition | None:
    """The target's first place in ``hits`` (a passage of the document, or that passage)."""
    for rank, hit in enumerate(hits, start=1):
        if hit.path == path and (anchor is None or hit.chunk.anchor == anchor):
            score = hit.leg_scores.get(leg) if leg is not None else hit.score
            return LegPosition(rank, "found", score, hit.chunk.anchor, hit.chunk.section)
    return None


def locate_target(
    search: Search, find_document: FindDocument, query: str, target: str, *, collection: str, mode: Mode | None = None, path_prefix: str | None = None,
    filters: Mapping[str, Any] | None = None, level: int | None = None,
    node_type: str | None = None, depth: int = DEFAULT_DEPTH,
) -> Location:
    """:meth:`RagPG.locate`: the target in each leg's list and in the fused one."""
    path, anchor = split_target(target)
    where: dict[str, Any] = {"path_prefix": path_prefix, "filters": filters or None,
                             "level": level, "node_type": node_type}
    filtered = any(v is not None for v in where.values())
    document = find_document(path, collection) if path else None
    exists = document is not None and (
        anchor is None or any(c.anchor == anchor for c in document.chunks))
    answer = Location(query=query, target=target, path=path, anchor=anchor, collection=collection,
                      depth=depth, document_id=document.id if document else None,
                      section_exists=exists)
    if not exists:
        return answer

    def run(leg: Mode, with_filters: bool) -> list[Hit]:
        scope = where if with_filters else {}
        return search(query, depth, mode=leg, collection=collection, rerank=False, **scope)

    legs: dict[str, LegPosition] = {}
    for leg in LEGS:
        if mode not in (None, "hybrid", leg):
            continue
        try:
            listed = run(leg, True)
        except NoVectors:
            legs[leg] = LegPosition(None, "no_vectors")
            continue
        found = position(listed, path, anchor, leg)
        if found is not None:
            legs[leg] = found
        elif filtered and position(run(leg, False), path, anchor, leg) is not None:
            legs[leg] = LegPosition(None, "filtered")
        elif len(listed) < depth:
            legs[leg] = LegPosition(None, "not_matched", matched=len(listed))
        else:
            legs[leg] = LegPosition(None, "too_deep")
    fused: LegPosition | None = None
    if any(p.rank is not None for p in legs.values()):
        fused_mode: Mode = mode or ("hybrid" if legs.get("vector", LegPosition(None, "no_vectors")).reason
                                    != "no_vectors" else "keyword")
        fused = position(run(fused_mode, True), path, anchor) or LegPosition(None, "too_deep")
    return Location(query=query, target=target, path=path, anchor=anchor, collection=collection,
                    depth=depth, document_id=answer.document_id, section_exists=True, legs=legs,
                    fused=fused)
