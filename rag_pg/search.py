"""Retrieval SQL: one statement returns each candidate's vector and keyword rank and score."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import psycopg
from psycopg import sql

from .fuse import rrf
from .models import Chunk, Hit
from .queries import Queries

MODES = ("hybrid", "vector", "keyword")
MAX_QUERY_WORDS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


def keyword_query(text: str) -> str:
    """The query's words as a ``websearch_to_tsquery`` OR-expression that cannot fail to parse.

    Every word is quoted, so operators, quotes and punctuation in user text are inert; an
    OR (not AND) keeps noisy questions from matching nothing. At most 64 distinct words.
    """
    words: list[str] = []
    seen: set[str] = set()
    for match in _WORD.finditer(text.replace("\x00", " ")):
        word = match.group(0).replace("_", " ").strip()
        lowered = word.lower()
        if word and lowered not in seen:
            seen.add(lowered)
            words.append(word)
        if len(words) >= MAX_QUERY_WORDS:
            break
    return " or ".join(f'"{w}"' for w in words)


@dataclass(frozen=True, slots=True)
class SearchRequest:
    collection: str
    k: int
    mode: str
    query_text: str
    query_vector: np.ndarray | None = None
    model: str | None = None
    dimension: int | None = None
    candidates: int = 40
    rrf_k: int = 60
    path_prefix: str | None = None
    ef_search: int = 100


class Searcher:
    """Builds and runs the retrieval statement, then fuses ranks in Python."""

    def __init__(self, schema: str = "ragpg"):
        self.q = Queries(schema)

    def statement(self, req: SearchRequest) -> sql.Composed:
        legs: list[sql.Composable] = []
        if req.mode in ("hybrid", "vector"):
            legs.append(self.q("search_vector_leg", model=req.model, dim=req.dimension))
        if req.mode in ("hybrid", "keyword"):
            legs.append(self.q("search_keyword_leg"))
        final = self.q(f"search_select_{req.mode}")
        return sql.SQL("WITH ") + sql.SQL(",\n").join(legs) + sql.SQL("\n") + final

    def params(self, req: SearchRequest) -> dict[str, Any]:
        prefix = req.path_prefix.strip("/") if req.path_prefix else None
        params: dict[str, Any] = {
            "collection": req.collection,
            "candidates": max(req.candidates, req.k),
            "path_prefix": prefix or None,
        }
        if req.mode in ("hybrid", "vector"):
            params["qvec"] = req.query_vector
        if req.mode in ("hybrid", "keyword"):
            params["kwq"] = keyword_query(req.query_text)
            params["cfg_french"] = self.q.config("french")
            params["cfg_english"] = self.q.config("english")
            params["cfg_simple"] = self.q.config("simple")
        return params

    def run(self, conn: psycopg.Connection[Any], req: SearchRequest) -> list[Hit]:
        if req.k <= 0:
            return []
        if req.mode in ("hybrid", "keyword") and not keyword_query(req.query_text):
            if req.mode == "keyword":
                return []
            req = SearchRequest(**{**_asdict(req), "mode": "vector"})
        stmt = self.statement(req)
        params = self.params(req)
        with conn.transaction():
            if req.mode in ("hybrid", "vector"):
                conn.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true),"
                    " set_config('hnsw.iterative_scan', 'relaxed_order', true)",
                    (str(max(req.ef_search, req.candidates, req.k)),),
                )
            rows = conn.execute(stmt, params).fetchall()
        return fuse_rows(rows, req)


def _asdict(req: SearchRequest) -> dict[str, Any]:
    return {f: getattr(req, f) for f in req.__slots__}  # type: ignore[attr-defined]


def fuse_rows(rows: list[tuple[Any, ...]], req: SearchRequest) -> list[Hit]:
    """Turn candidate rows into hits, best first, keeping each retriever's rank and score."""
    by_id: dict[int, tuple[Any, ...]] = {int(r[0]): r for r in rows}
    vector_ranked = sorted((r for r in rows if r[1] is not None), key=lambda r: (r[1], r[0]))
    keyword_ranked = sorted((r for r in rows if r[3] is not None), key=lambda r: (r[3], r[0]))
    rankings: dict[str, list[int]] = {}
    if req.mode in ("hybrid", "vector"):
        rankings["vector"] = [int(r[0]) for r in vector_ranked]
    if req.mode in ("hybrid", "keyword"):
        rankings["keyword"] = [int(r[0]) for r in keyword_ranked]
    if req.mode == "hybrid":
        ordered = rrf(rankings, k=req.rrf_k)
    elif req.mode == "vector":
        ordered = [(int(r[0]), 1.0 - float(r[2])) for r in vector_ranked]
    else:
        ordered = [(int(r[0]), float(r[4])) for r in keyword_ranked]
    hits: list[Hit] = []
    for chunk_id, score in ordered[: req.k]:
        r = by_id[chunk_id]
        ranks: dict[str, int] = {}
        scores: dict[str, float] = {}
        if r[1] is not None:
            ranks["vector"] = int(r[1])
            scores["vector"] = 1.0 - float(r[2])
        if r[3] is not None:
            ranks["keyword"] = int(r[3])
            scores["keyword"] = float(r[4])
        chunk = Chunk(
            document_path=r[12],
            document_title=r[13],
            section=r[6],
            anchor=r[7],
            position=int(r[5]),
            content=r[8],
            token_count=int(r[9]),
            content_hash=r[10],
        )
        hits.append(
            Hit(
                chunk=chunk,
                score=float(score),
                collection=r[14],
                document_id=int(r[11]),
                chunk_id=chunk_id,
                ranks=ranks,
                scores=scores,
            )
        )
    return hits
