"""Why a search brought back what it did: each retriever's part in a hit, and where a document
that did not come back ranked ("why not").

Why it is computed here: the library reports each hit's rank, raw score and part of the fused
score per retriever, as the search's fusion computed them; a share is a part over their sum.
"Why not" is :meth:`RagPG.locate` (each retriever alone, deep, with and without the request's
filters), told in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from rag_pg.serve.rules import (
    MAX_PATH_CHARS,
    NO_NUL,
    InvalidRequest,
    Limits,
    SearchRequest,
    check_search,
    check_text,
)

if TYPE_CHECKING:
    from rag_pg.api import RagPG

LOCATE_DEPTH = 200  # how deep "why not" looks in each retriever's list


def legs(hit: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each retriever's rank, raw score and share of the fused score for one hit (JSON)."""
    ranks: dict[str, int] = hit.get("ranks") or {}
    scores: dict[str, float] = hit.get("scores") or {}
    parts: dict[str, float] = hit.get("parts") or {}
    total = sum(parts.values())
    return {
        name: {"rank": rank, "score": scores.get(name),
               "share": round(parts.get(name, 0.0) / total, 4) if total > 0 else None}
        for name, rank in ranks.items() if name in parts
    }


def explain(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The hits with ``legs`` added, and ``fused_score`` (the fusion's score, even when reranked)."""
    for hit in hits:
        hit["legs"] = legs(hit)
        scores = hit.get("scores") or {}
        hit["fused_score"] = scores.get("fused", hit.get("score"))
    return hits


class LocateRequest(SearchRequest):
    """A search and the document (``path``) or passage (``path#anchor``) expected among its hits."""

    target: str = Field(min_length=1, max_length=MAX_PATH_CHARS + 201,
                        description="The expected document's path, or path#anchor for one passage.",
                        json_schema_extra=NO_NUL)


NOTES = {
    "filtered": "a filter of the request (path prefix, front matter, level, node type) removed it",
    "too_deep": "not among this retriever's first {depth}",
    "no_vectors": "the collection has no vectors",
}


def note(position: dict[str, Any], depth: int) -> str | None:
    """One line for why a target is absent from a list (None when it is there)."""
    if position.get("rank") is not None:
        return None
    if position.get("reason") == "not_matched":
        return f"not among the {position.get('matched')} passages this retriever matched"
    return NOTES.get(str(position.get("reason")), "not found").format(depth=depth)


def locate(rag: RagPG, req: LocateRequest, limits: Limits) -> dict[str, Any]:
    """Where the target ranked in each retriever and in the fused list, or what kept it out:
    :meth:`RagPG.locate`'s answer, with a one-line ``note`` per absence and a ``verdict``."""
    check_search(req, limits)
    check_text("target", req.target)
    if not req.target.partition("#")[0].strip():
        raise InvalidRequest("target must name a document path (path or path#anchor)", field="target")
    found = rag.locate(req.query, req.target, mode=req.mode, collection=req.collection,
                       path_prefix=req.path_prefix, filters=req.filters or None, level=req.level,
                       node_type=req.node_type, depth=LOCATE_DEPTH)
    answer: dict[str, Any] = found.to_dict()
    for position in [*answer["legs"].values(), answer["fused"] or {}]:
        if position:
            position["note"] = note(position, answer["depth"])
    answer["verdict"] = verdict(answer, req.k or limits.default_k)
    return answer


def verdict(answer: dict[str, Any], k: int) -> str:
    """The answer in one line: where the target ranked against k, and in each retriever."""
    if answer["document_id"] is None:
        return f"no document {answer['path']!r} in collection {answer['collection']!r}"
    if not answer["section_exists"]:
        return f"{answer['path']} has no section #{answer['anchor']}"
    where = ", ".join(
        f"{leg} #{info['rank']}" if info.get("rank") else f"{leg}: {info['note']}"
        for leg, info in answer["legs"].items()
    )
    fused = answer["fused"]
    if fused is None or fused.get("rank") is None:
        return f"not found ({where})"
    side = "within" if fused["rank"] <= k else "below"
    return f"ranked #{fused['rank']} of the fused list, {side} k={k} ({where})"


__all__ = ["LOCATE_DEPTH", "LocateRequest", "explain", "legs", "locate", "note", "verdict"]
