"""From the search statement's rows to hits: fusion of the legs' rankings, reranking, the
per-document cap, neighbour windows and parent/children expansion. Pure Python, no database."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rag_pg.config.citation import citation_url
from rag_pg.models import Chunk, Hit
from rag_pg.search.fields import title_scores
from rag_pg.search.fuse import adaptive_weights, cap_per_document, convex_parts, ordered, rrf_parts
from rag_pg.search.phrases import phrase_scores
from rag_pg.source import injection

if TYPE_CHECKING:
    from rag_pg.search.plan import SearchPlan

Reranker = Callable[[list[Hit]], list[Hit]]

#: Weight of the title leg in a hybrid search beside the vector and keyword legs' (a plan's
#: ``weights["title"]`` overrides it; 0 turns it off). docs/retrieval.md: measurements.
TITLE_WEIGHT = 0.5
#: Weight of the phrase leg (:mod:`rag_pg.search.phrases`), the same as the title leg's; a plan's
#: ``weights["phrase"]`` overrides it, 0 turns it off. docs/retrieval.md: measurements.
PHRASE_WEIGHT = 0.5
#: Legs scored on a fixed scale (0 to 1), not min-max normalised over the candidates: a
#: candidate without the heading's words or the question's phrases has none of the leg.
_ABSOLUTE = ("title", "phrase")
#: Legs whose raw scores start at a true zero, normalised by their best score alone: BM25 is 0
#: for a chunk without any word of the question, whereas the 40th candidate's score, the
#: floor min-max would use, depends only on how deep the list was cut. Cosine similarities
#: of a sentence model crowd in a narrow band far above their zero: the vector leg stays
#: min-max. docs/retrieval.md: measurements.
_FROM_ZERO = ("keyword",)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One row of the search statement (``psycopg.rows.class_row``): a chunk found by at
    least one leg, with each leg's rank (1-based) and raw value, and the chunk's provenance."""

    chunk_id: int
    vector_rank: int | None = None
    distance: float | None = None  # cosine distance: the vector leg's similarity is 1 - it
    keyword_rank: int | None = None
    keyword_score: float | None = None  # BM25
    position: int = 0
    section: str = ""
    anchor: str = ""
    content: str = ""
    token_count: int = 0
    content_hash: str = ""
    line_start: int | None = None
    line_end: int | None = None
    document_id: int = 0
    path: str = ""
    title: str = ""
    collection: str = "default"
    window_chunks: list[dict[str, Any]] | None = None
    expanded: Any = None
    phrases_held: list[str] | None = None  # hybrid: the question's phrases the chunk holds
    phrases_asked: int | None = None  # hybrid: how many phrases the question has


@dataclass(frozen=True, slots=True)
class Ranked:
    """A candidate in the fused order: its score, and each leg's rank, raw score and part of
    the score (the parts sum to it; a single-leg search's one part is the score)."""

    candidate: Candidate
    score: float
    ranks: dict[str, int]
    scores: dict[str, float]
    parts: dict[str, float]


def ranked(rows: Sequence[Candidate], plan: SearchPlan) -> list[Ranked]:
    """Candidates (chunks), best first, with their score. Vector: cosine similarity; keyword:
    BM25; hybrid: every chunk either leg returned, fused on the ranks the SQL gave it (weighted
    RRF), on its legs' raw scores (``plan.fusion == "convex"``), or on them with per-query
    weights from each leg's score list (``"adaptive"``). Nothing is capped here:
    the per-document cap applies to this fused list (see :func:`shape`)."""
    if plan.mode in ("vector", "keyword"):
        return _one_leg(rows, plan.mode)
    by_id = {c.chunk_id: c for c in rows}
    ranks = {c.chunk_id: _leg_ranks(c) for c in sorted(rows, key=_by_best_rank)}
    scores = {c.chunk_id: _leg_scores(c) for c in rows}
    weights = {"title": TITLE_WEIGHT, "phrase": PHRASE_WEIGHT, **plan.weights}
    legs = ("vector", "keyword",
            *(("title",) if _title_leg(rows, plan, ranks, scores, weights) else ()),
            *(("phrase",) if _phrase_leg(rows, ranks, scores, weights) else ()))
    if plan.fusion == "convex":
        parts = convex_parts(scores, weights=weights, legs=legs, absolute=_ABSOLUTE,
                             from_zero=_FROM_ZERO)
    elif plan.fusion == "adaptive":
        mine = adaptive_weights(scores, weights=weights, legs=legs, absolute=_ABSOLUTE)
        parts = convex_parts(scores, weights=mine, legs=legs, absolute=_ABSOLUTE,
                             from_zero=_FROM_ZERO)
    else:
        parts = rrf_parts(ranks, k=plan.rrf_k, weights=weights)
    return [Ranked(by_id[chunk_id], score, ranks[chunk_id], scores[chunk_id], parts[chunk_id])
            for chunk_id, score in ordered(parts, ranks, legs)]


def _one_leg(rows: Sequence[Candidate], leg: str) -> list[Ranked]:
    out: list[Ranked] = []
    for c in rows:
        ranks, scores = _leg_ranks(c), _leg_scores(c)
        if leg in ranks:
            out.append(Ranked(c, scores[leg], ranks, scores, {leg: scores[leg]}))
    return sorted(out, key=lambda r: r.ranks[leg])


def _title_leg(rows: Sequence[Candidate], plan: SearchPlan, ranks: dict[int, dict[str, int]],
               scores: dict[int, dict[str, float]], weights: Mapping[str, float]) -> bool:
    """Adds the title leg (see :mod:`rag_pg.search.fields`) to the candidates' ranks and scores;
    whether there is one (a weight, and a candidate whose heading or title holds a word)."""
    if not weights["title"]:
        return False
    found = title_scores(plan.query_text, {c.chunk_id: (c.section, c.title) for c in rows})
    return _add_leg("title", found, ranks, scores)


def _phrase_leg(rows: Sequence[Candidate], ranks: dict[int, dict[str, int]],
                scores: dict[int, dict[str, float]], weights: Mapping[str, float]) -> bool:
    """Adds the phrase leg (see :mod:`rag_pg.search.phrases`) as :func:`_title_leg` adds its own;
    whether there is one (a weight, and a candidate holding a phrase of the question)."""
    if not weights["phrase"]:
        return False
    found = phrase_scores({c.chunk_id: c.phrases_held or () for c in rows},
                          {c.chunk_id: c.phrases_asked or 0 for c in rows})
    return _add_leg("phrase", found, ranks, scores)


def _add_leg(leg: str, found: Mapping[int, float], ranks: dict[int, dict[str, int]],
             scores: dict[int, dict[str, float]]) -> bool:
    """A leg scored on the candidates themselves joins their ranks (best score first, ties by
    chunk id) and scores; whether it scored any."""
    for rank, (chunk_id, value) in enumerate(
            sorted(found.items(), key=lambda kv: (-kv[1], kv[0])), start=1):
        ranks[chunk_id][leg] = rank
        scores[chunk_id][leg] = value
    return bool(found)


def _by_best_rank(c: Candidate) -> tuple[int, int]:
    return min(_leg_ranks(c).values()), c.chunk_id


def _leg_ranks(c: Candidate) -> dict[str, int]:
    ranks: dict[str, int] = {}
    if c.vector_rank is not None:
        ranks["vector"] = c.vector_rank
    if c.keyword_rank is not None:
        ranks["keyword"] = c.keyword_rank
    return ranks


def _leg_scores(c: Candidate) -> dict[str, float]:
    """Each leg's raw value, larger is better: cosine similarity, BM25."""
    scores: dict[str, float] = {}
    if c.vector_rank is not None:
        scores["vector"] = 1.0 - float(c.distance or 0.0)
    if c.keyword_rank is not None:
        scores["keyword"] = float(c.keyword_score or 0.0)
    return scores


def fuse(rows: Sequence[Candidate], plan: SearchPlan) -> list[tuple[int, float]]:
    """Candidates -> (chunk id, score), best first (see :func:`ranked`)."""
    return [(r.candidate.chunk_id, r.score) for r in ranked(rows, plan)]


def shape(rows: Sequence[Candidate], plan: SearchPlan, *, reranker: Reranker | None = None) -> list[Hit]:
    """Best hits first: chunks fused, optionally reranked, then capped per document and per
    section (a document's or a section's best fused chunks are the ones it keeps, so one first
    in either leg is never dropped for a weaker one of its chunks), cut at k, with their neighbour window and
    expansion when asked."""
    hits = [hit_of(r) for r in ranked(rows, plan)]
    if reranker is not None:
        hits = reranker(hits)
    if plan.max_per_document:
        hits = cap_per_document(hits, lambda h: h.document_id, plan.max_per_document)
    if plan.max_per_section:
        hits = cap_per_document(hits, lambda h: (h.document_id, h.chunk.anchor, h.chunk.section),
                                plan.max_per_section)
    hits = hits[: plan.k]
    if plan.neighbours > 0 or plan.expand:
        by_id = {c.chunk_id: c for c in rows}
        # the statement computes a document's expansion on its first candidate row only
        expansions = {c.document_id: c.expanded for c in rows if c.expanded is not None}
        for hit in hits:
            found = by_id[hit.chunk_id or 0]
            if plan.neighbours > 0 and found.window_chunks:
                hit.extra["window"] = window(found.window_chunks, hit.chunk.position)
            if plan.expand:
                hit.extra["expanded"] = expansion(plan.expand, found, expansions.get(found.document_id))
    return hits


def hit_of(r: Ranked) -> Hit:
    c = r.candidate
    chunk = Chunk(
        document_path=c.path, document_title=c.title, section=c.section, anchor=c.anchor,
        position=c.position, content=c.content, token_count=c.token_count,
        content_hash=c.content_hash, line_start=c.line_start, line_end=c.line_end,
    )
    return Hit(chunk=chunk, score=float(r.score), collection=c.collection, document_id=c.document_id,
               chunk_id=c.chunk_id, ranks=r.ranks, scores=r.scores, parts=r.parts,
               scanner=injection.scan)


def with_citation_urls(hits: list[Hit], template: str | None) -> list[Hit]:
    """The hits with their site URL filled from the ``[citation] url`` template (checked when
    the settings were built); unchanged without one."""
    if template is None:
        return hits
    return [replace(hit, url=citation_url(template, hit.path, hit.chunk.anchor)) for hit in hits]


def merge_chunks(chunks: Sequence[Mapping[str, Any]]) -> str:
    """Consecutive chunks as one passage: the overlap tail that a chunk repeats from the one
    before it (its first paragraph, made of that chunk's last words) is dropped, and a new
    section starts under its heading, so the text reads as in the file."""
    parts: list[str] = []
    previous: Mapping[str, Any] | None = None
    for chunk in chunks:
        content = str(chunk["content"])
        if previous is not None and chunk["section"] == previous["section"]:
            head, sep, rest = content.partition("\n\n")
            tail_words = head.split()
            before = str(previous["content"]).split()
            if sep and tail_words and before[-len(tail_words):] == tail_words:
                content = rest
        elif previous is not None:
            content = f"## {chunk['section']}\n\n{content}"
        parts.append(content)
        previous = chunk
    return "\n\n".join(p for p in parts if p)


def _provenance(chunks: Sequence[Mapping[str, Any]], path: str | None = None) -> list[dict[str, Any]]:
    out = []
    for c in chunks:
        item: dict[str, Any] = {"position": c["position"], "section": c["section"], "anchor": c["anchor"]}
        if path is not None:
            item = {"path": path, **item}
        out.append(item)
    return out


def window(chunks: Sequence[Mapping[str, Any]], position: int) -> dict[str, Any]:
    """The ±N neighbour window of a hit, merged, with the provenance of the span."""
    return {
        "start_position": int(chunks[0]["position"]),
        "end_position": int(chunks[-1]["position"]),
        "hit_position": position,
        "text": merge_chunks(chunks),
        "chunks": _provenance(chunks),
    }


def expansion(kind: str, found: Candidate, data: Any) -> dict[str, Any] | None:
    """``{"kind", "path", "title", "text", "chunks"}`` of the parent node, or of the children
    (then ``path``/``title`` are the hit's own document and ``children`` lists each child)."""
    if kind == "parent":
        if not data:
            return None
        return {"kind": "parent", "path": data["path"], "title": data["title"],
                "text": merge_chunks(data["chunks"]), "chunks": _provenance(data["chunks"], data["path"])}
    children = list(data or [])
    if not children:
        return None
    texts = [f"# {c['title']}\n\n{merge_chunks(c['chunks'])}" for c in children]
    return {
        "kind": "children", "path": found.path, "title": found.title, "text": "\n\n".join(texts),
        "chunks": [p for c in children for p in _provenance(c["chunks"], c["path"])],
        "children": [{"path": c["path"], "title": c["title"]} for c in children],
    }
