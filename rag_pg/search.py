"""Retrieval: ONE SQL statement returns each candidate's vector and keyword rank and score
(plus its neighbour window and related node when asked); fusion and shaping are Python."""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from .bm25 import BM25Params, keyword_query
from .errors import ConfigError
from .fuse import cap_per_document, rrf
from .models import Chunk, Hit
from .queries import Queries
from .store import vector_kind

if TYPE_CHECKING:
    import numpy as np

MODES = ("hybrid", "vector", "keyword")
LANGUAGES = ("french", "english", "simple")  # text search configurations, in the SQL's order
EXPANSIONS = ("parent", "children")
MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search
PER_DOCUMENT_OVERFETCH = 4  # HNSW rows fetched per candidate slot when hits are capped per file
SHARED_INDEX_MEMORY_SECONDS = 300.0  # how long a crowded collection searches iteratively first

Reranker = Callable[[list[Hit]], list[Hit]]


class StaleCollection(Exception):  # noqa: N818 - a signal to the caller, not an error
    """The collection's model changed since the caller read it (a ``reembed`` switched it):
    the results are discarded and the caller re-reads the collection, then searches again."""


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """Everything one search needs; built by :meth:`RagPG.search` from arguments and settings."""

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
    ef_search: int = 200
    front_matter: Mapping[str, Any] | None = None
    level: int | None = None
    node_type: str | None = None
    max_per_document: int | None = None
    neighbours: int = 0
    expand: str | None = None
    weights: Mapping[str, float] = field(default_factory=lambda: {"vector": 1.0, "keyword": 1.0})
    bm25: BM25Params = field(default_factory=BM25Params)
    exact_limit: int = 5000
    max_scan_tuples: int = 50000
    iterative_scan: str = "relaxed_order"
    #: exact vector search or the index, when the caller knows (an unfiltered search of a
    #: collection whose size it has read); None: the statement decides from the filters.
    exact: bool | None = None
    #: the type the model's HNSW index casts to (vector | halfvec); None: by dimension
    vector_kind: str | None = None


def normalise_prefix(prefix: str | None) -> str | None:
    """``./docs/ops/`` -> ``docs/ops``: a relative path prefix, matched segment by segment."""
    if prefix is None:
        return None
    cleaned = re.sub(r"^(\./)+", "", prefix.strip().replace("\\", "/")).strip("/")
    return re.sub(r"/+", "/", cleaned) or None


def unfiltered(path_prefix: str | None, front_matter: Mapping[str, Any] | None,
               level: int | None, node_type: str | None) -> bool:
    """Whether a search with these filters spans its whole collection."""
    return not (normalise_prefix(path_prefix) or front_matter
                or level is not None or node_type is not None)


class Searcher:
    """Builds and runs the retrieval statement, then fuses ranks and shapes hits in Python."""

    def __init__(self, schema: str = "ragpg"):
        self.q = Queries(schema)
        self._iterative: bool | None = None
        self._statements: dict[tuple[Any, ...], sql.Composed] = {}
        self._statement_bytes: dict[tuple[Any, ...], bytes] = {}
        # (collection, model) -> when a plain index scan came back short (see _plain_scan_first)
        self._shared_index: dict[tuple[str, str | None], float] = {}
        # per connection: the hnsw.* values its session holds (see _run_in_session)
        self._session_hnsw: weakref.WeakKeyDictionary[psycopg.Connection[Any], tuple[str, str, str]] = (
            weakref.WeakKeyDictionary()
        )

    # -- SQL ------------------------------------------------------------------------------

    def _sql(self, name: str, **parts: sql.Composable) -> sql.Composed:
        return self.q.compose(name, **parts)

    def doc_filter(self, req: SearchRequest) -> sql.Composed:
        """The WHERE clause on ``d`` (document), the same for both legs; absent filters vanish
        from the SQL so that the planner sees only what is asked."""
        names = ["search_filter_collection"]
        if normalise_prefix(req.path_prefix):
            names.append("search_filter_path_prefix")
        if req.front_matter:
            names.append("search_filter_front_matter")
        if req.level is not None:
            names.append("search_filter_level")
        if req.node_type is not None:
            names.append("search_filter_node_type")
        return sql.SQL(" AND ").join(self._sql(n) for n in names)

    @staticmethod
    def whole_collection(req: SearchRequest) -> bool:
        """No filter beyond the collection: the caller may decide exact vs index itself."""
        return unfiltered(req.path_prefix, req.front_matter, req.level, req.node_type)

    @classmethod
    def collection_scan(cls, req: SearchRequest) -> bool:
        """The vector leg is one HNSW scan of the collection's own rows (search_vector_collection):
        the index is known to fit, and nothing but the collection filters or caps the rows."""
        return req.exact is False and not req.max_per_document and cls.whole_collection(req)

    @staticmethod
    def counts(req: SearchRequest) -> dict[str, int]:
        """The statement's row counts, written into it as literals (see queries.sql)."""
        candidates = max(req.candidates, req.k)
        overfetch = PER_DOCUMENT_OVERFETCH if req.max_per_document else 1
        return {"candidates": candidates, "per_document": req.max_per_document or candidates,
                "vec_fetch": candidates * overfetch, "exact_limit": req.exact_limit}

    def small_collection(self, exact_limit: int) -> sql.Composed:
        """Whether a whole collection is small enough for exact vector search: the decision
        ``search_vector_scope`` makes inside a filtered search, as a statement of its own."""
        scope = self._sql("search_vector_scope", doc_filter=self._sql("search_filter_collection"),
                          exact_limit=sql.Literal(exact_limit))
        return sql.SQL("WITH ") + scope + sql.SQL(" SELECT exact FROM vec_scope")

    def statement(self, req: SearchRequest) -> sql.Composed:
        """The search statement for the shape of ``req`` (built once per shape, then reused)."""
        return self._composed(req, self.counts(req))[1]

    def statement_bytes(
        self, req: SearchRequest, conn: psycopg.Connection[Any], counts: dict[str, int] | None = None
    ) -> bytes:
        """:meth:`statement` serialised once per shape and encoding: psycopg would walk the
        composed tree again on every execute, a cost of the same order as the query itself."""
        key, composed = self._composed(req, self.counts(req) if counts is None else counts)
        key = (key, conn.pgconn.parameter_status(b"client_encoding"))
        text = self._statement_bytes.get(key)
        if text is None:
            text = self._statement_bytes[key] = composed.as_bytes(conn)
        return text

    def _composed(
        self, req: SearchRequest, counts: dict[str, int]
    ) -> tuple[tuple[Any, ...], sql.Composed]:
        """The shape of ``req`` (what its statement depends on) and that statement."""
        key = (req.mode, req.exact, req.max_per_document, bool(normalise_prefix(req.path_prefix)),
               bool(req.front_matter), req.level is not None, req.node_type is not None,
               req.neighbours > 0, req.expand, req.model, req.dimension, req.vector_kind,
               tuple(counts.values()))
        stmt = self._statements.get(key)
        if stmt is None:
            if len(self._statements) >= 256:
                self._statements.clear()
                self._statement_bytes.clear()
            stmt = self._statements[key] = self._compose(req, counts)
        return key, stmt

    def _compose(self, req: SearchRequest, counts: dict[str, int]) -> sql.Composed:
        where = self.doc_filter(req)
        literals = {name: sql.Literal(value) for name, value in counts.items()}
        ctes: list[sql.Composable] = []
        if req.mode in ("hybrid", "vector"):
            kind = sql.SQL(req.vector_kind or vector_kind(req.dimension or 0))
            parts = {"doc_filter": where, "vkind": kind, "dim": sql.Literal(req.dimension),
                     "model": sql.Literal(req.model), **literals}
            if self.collection_scan(req):
                ctes.append(self._sql("search_vector_collection", **parts))
            else:
                scope = "search_vector_scope" if req.exact is None else "search_vector_scope_given"
                ctes += [self._sql(scope, **parts), self._sql("search_vector_leg", **parts)]
        if req.mode in ("hybrid", "keyword"):
            whole = self.whole_collection(req)
            ctes.append(self._sql(
                "search_keyword_leg", keep=sql.SQL("true") if whole else sql.SQL("({})").format(where),
                keep_join=sql.SQL("") if whole else self._sql("search_keyword_keep_join"), **literals,
            ))
        window = self._sql("search_window") if req.neighbours > 0 else sql.SQL("NULL::jsonb")
        expanded = (
            self._sql(f"search_expand_{req.expand}") if req.expand else sql.SQL("NULL::jsonb")
        )
        final = self._sql("search_select", window=window, expanded=expanded,
                          candidates_of=self._sql(f"search_candidates_{req.mode}"))
        return sql.SQL("WITH ") + sql.SQL(",\n").join(ctes) + sql.SQL("\n") + final

    def params(self, req: SearchRequest) -> dict[str, Any]:
        prefix = normalise_prefix(req.path_prefix)
        params: dict[str, Any] = {
            "collection": req.collection,
            "path_prefix": prefix,
            "path_prefix_dir": f"{prefix}/" if prefix else None,
            "front_matter": Jsonb(dict(req.front_matter)) if req.front_matter else None,
            "level": req.level,
            "node_type": req.node_type,
            "neighbours": req.neighbours,
        }
        if req.mode in ("hybrid", "vector"):
            params["qvec"] = req.query_vector
            params["exact"] = req.exact
        if req.mode in ("hybrid", "keyword"):
            kq = keyword_query(req.query_text)
            params["kw_text"] = kq.text
            params["kwq"] = kq.prefilter
            params["ts_configs"] = [self.q.config(lang) for lang in LANGUAGES]
            params["ts_languages"] = list(LANGUAGES)
            params["k1"] = req.bm25.k1
            params["b"] = req.bm25.b
        return params

    # -- run ------------------------------------------------------------------------------

    def check_pgvector(self, conn: psycopg.Connection[Any]) -> bool:
        """Once per searcher: can this server do iterative index scans? (pgvector >= 0.8, and
        the setting reads back: an unknown or invalid value would be ignored silently.)"""
        if self._iterative is None:
            with conn.transaction():
                row = conn.execute(self.q("search_check_pgvector")).fetchone()
            version = tuple(int(p) for p in re.findall(r"\d+", str(row[0] if row else ""))[:2])
            self._iterative = bool(row) and version >= (0, 8) and row[3] == "relaxed_order"  # type: ignore[index]
        return self._iterative

    def run(
        self, conn: psycopg.Connection[Any], req: SearchRequest, *, reranker: Reranker | None = None,
        expect: tuple[str | None, int | None] | None = None, own_session: bool = False,
    ) -> list[Hit]:
        """Best hits first: fused, optionally reranked, capped per document, cut at k.

        ``expect``: the collection's (model, dimension) as the caller last read them, checked by
        the statement itself: :class:`StaleCollection` when they changed (no rows: unchecked).
        ``own_session``: the connection is ragpg's own (a pool's), so a vector search may keep
        its HNSW settings on the session and run as one autocommit statement; otherwise the
        settings are ``SET LOCAL`` in a transaction (a savepoint in a caller's transaction).
        """
        if req.k <= 0:
            return []
        validate(req)
        if req.mode in ("hybrid", "keyword") and not keyword_query(req.query_text):
            if req.mode == "keyword":
                return []
            req = replace(req, mode="vector")  # nothing to match by words: meaning only
        if req.mode in ("hybrid", "vector") and not self.check_pgvector(conn):
            # Without iterative scans a filtered HNSW scan can return too few rows: go exact.
            req = replace(req, exact_limit=2**30, exact=None if req.exact is None else True)
        counts = self.counts(req)
        stmt = self.statement_bytes(req, conn, counts)
        params = self.params(req)
        vec_fetch = counts["vec_fetch"]
        ef = min(MAX_EF_SEARCH, max(req.ef_search, vec_fetch))
        plain_first = self._plain_scan_first(req, vec_fetch, ef)
        rows = self._execute(conn, req, stmt, params, own_session,
                             (str(ef), "off" if plain_first else req.iterative_scan,
                              str(req.max_scan_tuples)))
        if plain_first and sum(1 for r in rows if r[1] is not None) < vec_fetch:
            # Vectors of other collections sharing the model's index took places among the
            # nearest: search again with pgvector's iterative scan, which goes on past them,
            # and start with it for this collection a while.
            self._shared_index[(req.collection, req.model)] = time.monotonic()
            rows = self._execute(conn, req, stmt, params, own_session,
                                 (str(ef), req.iterative_scan, str(req.max_scan_tuples)))
        if expect is not None and rows and (rows[0][17], rows[0][18]) != expect:
            raise StaleCollection(req.collection)
        return shape(rows, req, reranker=reranker)

    def _plain_scan_first(self, req: SearchRequest, vec_fetch: int, ef: int) -> bool:
        """Whether a whole-collection index search may first run without iterative scan.

        Iterative scans cost ~15% of an HNSW query even when nothing is filtered out (measured
        with pgvector 0.8 on 20k chunks), and a collection alone in its model's index filters
        nothing: the plain scan then returns the same rows. When other collections' vectors
        crowd it out, :meth:`run` sees fewer rows than asked and searches again iteratively.
        """
        if (req.mode not in ("hybrid", "vector") or req.iterative_scan == "off"
                or not self.collection_scan(req) or vec_fetch > ef):
            return False
        crowded = self._shared_index.get((req.collection, req.model))
        return crowded is None or time.monotonic() - crowded > SHARED_INDEX_MEMORY_SECONDS

    def _execute(
        self, conn: psycopg.Connection[Any], req: SearchRequest, stmt: bytes,
        params: dict[str, Any], own_session: bool, hnsw: tuple[str, str, str],
    ) -> list[Any]:
        if own_session and req.mode == "vector" and conn.autocommit:
            return self._run_in_session(conn, stmt, params, hnsw)
        settings = {"ef_search": hnsw[0], "iterative_scan": hnsw[1], "max_scan_tuples": hnsw[2],
                    "enable_seqscan": "off" if req.mode in ("hybrid", "keyword") else "on"}
        with conn.pipeline():  # one round trip: BEGIN, settings, search, COMMIT
            with conn.transaction():
                conn.execute(self.q("search_settings"), settings)
                cur = conn.execute(stmt, params)
            return cur.fetchall()

    def _run_in_session(
        self, conn: psycopg.Connection[Any], stmt: bytes, params: dict[str, Any],
        hnsw: tuple[str, str, str],
    ) -> list[Any]:
        """The search as one statement, one round trip: the HNSW settings (which only HNSW
        scans read) stay on ragpg's own session and are sent again only when they change."""
        if self._session_hnsw.get(conn) != hnsw:
            conn.execute(self.q("search_session_settings"),
                         {"ef_search": hnsw[0], "iterative_scan": hnsw[1], "max_scan_tuples": hnsw[2]})
            self._session_hnsw[conn] = hnsw
        return conn.execute(stmt, params).fetchall()


def validate(req: SearchRequest) -> None:
    if req.mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)} (got {req.mode!r})")
    if req.expand is not None and req.expand not in EXPANSIONS:
        raise ConfigError(f"expand must be parent or children (got {req.expand!r})")
    if req.max_per_document is not None and req.max_per_document < 1:
        raise ConfigError(f"max_per_document must be >= 1 (got {req.max_per_document})")
    if req.neighbours < 0:
        raise ConfigError(f"neighbours must be >= 0 (got {req.neighbours})")
    if req.iterative_scan not in ("relaxed_order", "strict_order", "off"):
        raise ConfigError(f"retrieval.iterative_scan must be relaxed_order, strict_order or off"
                          f" (got {req.iterative_scan!r})")


# -- fusion and shaping (pure) ---------------------------------------------------------------


_VECTOR_RANK = itemgetter(1)
_KEYWORD_RANK = itemgetter(3)


def fuse(rows: Sequence[Sequence[Any]], req: SearchRequest) -> list[tuple[int, float]]:
    """Candidate rows -> (chunk id, score), best first. Vector: 1 - cosine distance; keyword:
    BM25; hybrid: weighted RRF of the two rankings (ranks as numbered by SQL)."""
    return [(int(row[0]), score) for row, score in _ranked(rows, req)]


def _ranked(rows: Sequence[Sequence[Any]], req: SearchRequest) -> list[tuple[Sequence[Any], float]]:
    # Ranks are distinct integers (row_number): each leg's order is its rank column's.
    vector = sorted([r for r in rows if r[1] is not None], key=_VECTOR_RANK)
    if req.mode == "vector":
        return [(r, 1.0 - float(r[2])) for r in vector]
    keyword = sorted([r for r in rows if r[3] is not None], key=_KEYWORD_RANK)
    if req.mode == "keyword":
        return [(r, float(r[4])) for r in keyword]
    rankings = {"vector": [int(r[0]) for r in vector], "keyword": [int(r[0]) for r in keyword]}
    by_id = {int(r[0]): r for r in rows}
    return [(by_id[chunk_id], score) for chunk_id, score in
            rrf(rankings, k=req.rrf_k, weights=req.weights)]


def shape(
    rows: Sequence[Sequence[Any]], req: SearchRequest, *, reranker: Reranker | None = None
) -> list[Hit]:
    hits = [_hit(row, score) for row, score in _ranked(rows, req)]
    if reranker is not None:
        hits = reranker(hits)
    if req.max_per_document:
        hits = cap_per_document(hits, lambda h: h.document_id, req.max_per_document)
    hits = hits[: req.k]
    if req.neighbours > 0 or req.expand:
        by_id = {int(r[0]): r for r in rows}
        expansions = {int(r[11]): r[16] for r in rows if r[16] is not None}
        for hit in hits:
            row = by_id[hit.chunk_id or 0]
            if req.neighbours > 0 and row[15]:
                hit.extra["window"] = window(row[15], hit.chunk.position)
            if req.expand:
                hit.extra["expanded"] = expansion(req.expand, row, expansions.get(int(row[11])))
    return hits


def _hit(r: Sequence[Any], score: float) -> Hit:
    ranks: dict[str, int] = {}
    scores: dict[str, float] = {}
    if r[1] is not None:
        ranks["vector"] = r[1]
        scores["vector"] = 1.0 - r[2]
    if r[3] is not None:
        ranks["keyword"] = r[3]
        scores["keyword"] = float(r[4])
    # bigint, integer and float8 columns arrive as int and float
    chunk = Chunk(
        document_path=r[12], document_title=r[13], section=r[6], anchor=r[7],
        position=r[5], content=r[8], token_count=r[9], content_hash=r[10],
    )
    return Hit(chunk=chunk, score=float(score), collection=r[14], document_id=r[11],
               chunk_id=r[0], ranks=ranks, scores=scores)


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


def expansion(kind: str, row: Sequence[Any], data: Any) -> dict[str, Any] | None:
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
        "kind": "children", "path": row[12], "title": row[13], "text": "\n\n".join(texts),
        "chunks": [p for c in children for p in _provenance(c["chunks"], c["path"])],
        "children": [{"path": c["path"], "title": c["title"]} for c in children],
    }
