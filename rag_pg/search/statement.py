"""Retrieval: ONE SQL statement returns each candidate's vector and keyword rank and raw score
(plus its neighbour window and related node when asked); fusion and shaping are in ``hits``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from rag_pg.config.sections import FUSIONS
from rag_pg.errors import ConfigError
from rag_pg.models import Hit
from rag_pg.search.bm25 import MAX_QUERY_WORDS, BM25Params, keyword_query
from rag_pg.search.hits import Candidate, Reranker, shape
from rag_pg.store.db import read_snapshot
from rag_pg.store.queries import Queries
from rag_pg.store.vector_index import vector_kind

if TYPE_CHECKING:
    import numpy as np

Mode = Literal["hybrid", "vector", "keyword"]
Expansion = Literal["parent", "children"]

MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")
EXPANSIONS: tuple[Expansion, ...] = ("parent", "children")
LANGUAGES = ("french", "english", "simple")  # text search configurations, in the SQL's order
MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search
PER_DOCUMENT_OVERFETCH = 4  # HNSW rows fetched per candidate slot when hits are capped per file
# Postings of the rarest query terms scored first by the pruned keyword leg, per candidate
# slot: just enough chunks that the candidates-th best of them sets a threshold; more would
# pull a frequent word's postings into the seed whenever the rarest word has few.
SEED_POSTINGS_PER_CANDIDATE = 1
ITERATIVE_SCANS_SINCE = (0, 8)  # the pgvector version that brought iterative index scans


@dataclass(frozen=True, slots=True)
class CollectionInfo:
    """What a search's plan depends on in its collection (``search_collection``): read in the
    search's own snapshot, beside its statement."""

    model: str | None
    dimension: int | None
    term_stat_pending: bool  # the term statistics are being rebuilt: keyword search without them
    vector_kind: str | None  # what the model's index casts to; None: no index (yet)
    pgvector_version: str | None  # None: not read yet (the version ragpg ships with is assumed)

    @classmethod
    def expected(cls, model: str | None, dimension: int | None) -> CollectionInfo:
        """What a search expects before it has read anything: vectors of the model the query
        was embedded with, term statistics kept, the index the dimension calls for."""
        return cls(model=model, dimension=dimension, term_stat_pending=False, vector_kind=None,
                   pgvector_version=None)

    @property
    def iterative_scans(self) -> bool:
        """Whether pgvector can go on past the rows a filter drops (else: exact search)."""
        if self.pgvector_version is None:
            return True
        version = tuple(int(p) for p in re.findall(r"\d+", self.pgvector_version)[:2])
        return version >= ITERATIVE_SCANS_SINCE


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """Everything one search needs; built by :meth:`RagPG.search` from its arguments, the
    ``[retrieval]`` settings and the collection it read."""

    collection: str
    k: int
    mode: Mode
    query_text: str
    query_vector: np.ndarray | None = None
    model: str | None = None
    dimension: int | None = None
    candidates: int = 40
    rrf_k: int = 60
    fusion: str = "adaptive"  # adaptive | convex | rrf (rag_pg.search.fuse; docs/retrieval.md: measurements)
    path_prefix: str | None = None
    ef_search: int = 200
    front_matter: Mapping[str, Any] | None = None
    level: int | None = None
    node_type: str | None = None
    max_per_document: int | None = None
    neighbours: int = 0
    expand: Expansion | None = None
    weights: Mapping[str, float] = field(default_factory=lambda: {"vector": 1.0, "keyword": 1.0})
    bm25: BM25Params = field(default_factory=BM25Params)
    exact_limit: int = 5000
    #: a filtered vector leg is also exact up to this share of the collection's chunks (in at
    #: most exact_limit documents; ``search_vector_scope``)
    exact_share: float = 0.0
    max_scan_tuples: int = 50000
    iterative_scan: str = "relaxed_order"
    #: exact vector search or the index, decided by the caller; None: the statement decides,
    #: from the collection's size (a whole collection) or the filters' (``vec_scope``).
    exact: bool | None = None
    #: the type the model's HNSW index casts to (vector | halfvec); None: by dimension
    vector_kind: str | None = None
    #: score every chunk holding a query word (the reference the pruned keyword leg equals)
    keyword_exhaustive: bool = False
    #: postings the pruned keyword leg scores first; None: SEED_POSTINGS_PER_CANDIDATE per
    #: candidate slot (any value gives the same list: it only moves the work)
    keyword_seed: int | None = None


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


def phrase_windows(text: str) -> list[str]:
    """The runs of two to four consecutive words of ``text`` (words as the keyword leg splits
    them, the first ``MAX_QUERY_WORDS``), each once: the windows the search statement turns
    into the question's phrases."""
    words = text.split()[:MAX_QUERY_WORDS]
    windows = (" ".join(words[i:i + n]) for n in (2, 3, 4) for i in range(len(words) - n + 1))
    return list(dict.fromkeys(windows))


def validate(plan: SearchPlan) -> None:
    if plan.mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)} (got {plan.mode!r})")
    if plan.expand is not None and plan.expand not in EXPANSIONS:
        raise ConfigError(f"expand must be parent or children (got {plan.expand!r})")
    if plan.max_per_document is not None and plan.max_per_document < 1:
        raise ConfigError(f"max_per_document must be >= 1 (got {plan.max_per_document})")
    if plan.fusion not in FUSIONS:
        raise ConfigError(f"retrieval.fusion must be one of {', '.join(FUSIONS)} (got {plan.fusion!r})")
    if plan.neighbours < 0:
        raise ConfigError(f"neighbours must be >= 0 (got {plan.neighbours})")
    if plan.iterative_scan not in ("relaxed_order", "strict_order", "off"):
        raise ConfigError(f"retrieval.iterative_scan must be relaxed_order, strict_order or off"
                          f" (got {plan.iterative_scan!r})")


def same_plan(a: SearchPlan, b: SearchPlan) -> bool:
    """Whether two plans send the same statement with the same parameters (the query's vector
    is the same object when it was embedded for the same model)."""
    return (a.query_vector is b.query_vector
            and replace(a, query_vector=None) == replace(b, query_vector=None))


def settle(plan: SearchPlan, *, iterative_scans: bool = True) -> SearchPlan | None:
    """The plan that runs, or None when nothing can match: a query without a word to match
    searches by meaning only (keyword mode: nothing), and without iterative index scans a
    filtered HNSW scan could return too few rows, so the vector leg goes exact."""
    validate(plan)
    if plan.k <= 0:
        return None
    if plan.mode in ("hybrid", "keyword") and not keyword_query(plan.query_text):
        if plan.mode == "keyword":
            return None
        plan = replace(plan, mode="vector")
    if plan.mode in ("hybrid", "vector") and not iterative_scans:
        plan = replace(plan, exact_limit=2**30, exact=None if plan.exact is None else True)
    return plan


class Searcher:
    """Composes and runs the retrieval statement of a schema; :func:`rag_pg.search.hits.shape` turns
    its rows into hits."""

    def __init__(self, schema: str = "ragpg"):
        self.q = Queries(schema)

    # -- SQL ------------------------------------------------------------------------------

    def _sql(self, name: str, **parts: sql.Composable) -> sql.Composed:
        return self.q.compose(name, **parts)

    def collection_statement(self) -> sql.Composed:
        return self.q("search_collection", schema_name=self.q.schema)

    def read_collection(self, conn: psycopg.Connection[Any], collection: str) -> CollectionInfo:
        """What a search's plan depends on in ``collection``, read now (one row)."""
        info = self.send_collection(conn, collection).fetchone()
        assert info is not None  # the statement always returns one row
        return info

    def send_collection(self, conn: psycopg.Connection[Any],
                        collection: str) -> psycopg.Cursor[CollectionInfo]:
        """What the plan depends on in the collection (one row, known or not); in a pipeline
        the row is read once the pipeline syncs."""
        cur = conn.cursor(row_factory=class_row(CollectionInfo))
        cur.execute(self.collection_statement(), {"collection": collection})
        return cur

    def doc_filter(self, plan: SearchPlan) -> sql.Composed:
        """The WHERE clause on ``d`` (document), the same for both legs; absent filters vanish
        from the SQL so that the planner sees only what is asked."""
        names = ["search_filter_collection"]
        if normalise_prefix(plan.path_prefix):
            names.append("search_filter_path_prefix")
        if plan.front_matter:
            names.append("search_filter_front_matter")
        if plan.level is not None:
            names.append("search_filter_level")
        if plan.node_type is not None:
            names.append("search_filter_node_type")
        return sql.SQL("\n      AND ").join(self._sql(n) for n in names)

    @staticmethod
    def whole_collection(plan: SearchPlan) -> bool:
        """No filter beyond the collection: the caller may decide exact vs index itself."""
        return unfiltered(plan.path_prefix, plan.front_matter, plan.level, plan.node_type)

    @classmethod
    def collection_scan(cls, plan: SearchPlan) -> bool:
        """The vector leg reads the collection's own vector rows (search_vector_collection):
        nothing but the collection filters or caps them."""
        return not plan.max_per_document and cls.whole_collection(plan)

    @staticmethod
    def counts(plan: SearchPlan) -> dict[str, int]:
        """The statement's row counts, written into it as literals (see the SQL's comment)."""
        candidates = max(plan.candidates, plan.k)
        overfetch = PER_DOCUMENT_OVERFETCH if plan.max_per_document else 1
        # Each leg keeps a few chunks per document (not just the capped number): a document's
        # best fused chunk may be its second in one leg, and must keep that leg's term.
        per_document = (min(plan.max_per_document * PER_DOCUMENT_OVERFETCH, candidates)
                        if plan.max_per_document else candidates)
        if plan.max_per_document:
            # Room for k documents even when each fills its per_document rows: a list of k
            # rows of one long document would leave a single hit once capped.
            candidates = max(candidates, plan.k * per_document)
        return {"candidates": candidates, "per_document": per_document,
                "vec_fetch": candidates * overfetch, "exact_limit": plan.exact_limit,
                "seed_postings": plan.keyword_seed or candidates * SEED_POSTINGS_PER_CANDIDATE}

    def statement(self, plan: SearchPlan) -> sql.Composed:
        """The search statement for the shape of ``plan``: its legs as CTEs, then one SELECT."""
        where = self.doc_filter(plan)
        literals = {name: sql.Literal(value) for name, value in self.counts(plan).items()}
        ctes: list[sql.Composable] = []
        if plan.mode in ("hybrid", "vector"):
            kind = sql.SQL(plan.vector_kind or vector_kind(plan.dimension or 0))
            parts = {"doc_filter": where, "vkind": kind, "dim": sql.Literal(plan.dimension),
                     "model": sql.Literal(plan.model), **literals}
            parts["exact_top"] = (sql.SQL("") if plan.max_per_document
                                  else self._sql("search_vector_exact_top", **literals))
            parts["collection_chunks"] = self._sql("search_collection_chunks")
            parts["exact"] = self._sql("search_vector_exact", **parts)
            if plan.exact is not None:
                scope = "search_vector_scope_given"
            elif self.whole_collection(plan):
                scope = "search_vector_scope_collection"
            else:
                scope = "search_vector_scope"
            leg = "search_vector_collection" if self.collection_scan(plan) else "search_vector_leg"
            ctes += [self._sql(scope, **parts), self._sql(leg, **parts)]
        if plan.mode in ("hybrid", "keyword"):
            whole = self.whole_collection(plan)
            parts = {"keep": sql.SQL("true") if whole else sql.SQL("({})").format(where),
                     "keep_join": sql.SQL("") if whole else self._sql("search_keyword_keep_join"),
                     "doc_filter": where, **literals}
            if plan.keyword_exhaustive:
                ctes.append(self._sql("search_keyword_leg", **parts))
            else:
                scope = "search_keyword_scope_whole" if whole else "search_keyword_scope"
                ctes += [self._sql(scope, **parts), self._sql("search_keyword_pruned", **parts)]
            ctes.append(self._sql("search_keyword_ranked", **literals))
        window = self._sql("search_window") if plan.neighbours > 0 else sql.SQL("NULL::jsonb")
        expanded = (
            self._sql(f"search_expand_{plan.expand}") if plan.expand else sql.SQL("NULL::jsonb")
        )
        if plan.mode == "hybrid":
            ctes.append(self._sql("search_phrases"))
        phrases = self._sql("search_phrases_held" if plan.mode == "hybrid" else "search_phrases_none")
        final = self._sql("search_select", window=window, expanded=expanded, phrases=phrases,
                          candidates_of=self._sql(f"search_candidates_{plan.mode}"))
        return sql.SQL("WITH ") + sql.SQL(",\n").join(ctes) + sql.SQL("\n") + final

    def params(self, plan: SearchPlan) -> dict[str, Any]:
        prefix = normalise_prefix(plan.path_prefix)
        params: dict[str, Any] = {
            "collection": plan.collection,
            "path_prefix": prefix,
            "path_prefix_dir": f"{prefix}/" if prefix else None,
            "path_prefix_end": f"{prefix}0" if prefix else None,
            "front_matter": Jsonb(dict(plan.front_matter)) if plan.front_matter else None,
            "level": plan.level,
            "node_type": plan.node_type,
            "neighbours": plan.neighbours,
        }
        if plan.mode in ("hybrid", "vector"):
            params["qvec"] = plan.query_vector
            params["exact"] = plan.exact
            params["exact_share"] = plan.exact_share
        if plan.mode in ("hybrid", "keyword"):
            kq = keyword_query(plan.query_text)
            params["kw_text"] = kq.text
            params["kwq"] = kq.prefilter
            params["ts_configs"] = [self.q.config(lang) for lang in LANGUAGES]
            if plan.mode == "hybrid":
                params["phrase_windows"] = phrase_windows(kq.text)
            params["ts_languages"] = list(LANGUAGES)
            params["k1"] = plan.bm25.k1
            params["b"] = plan.bm25.b
        return params

    def settings(self, plan: SearchPlan) -> dict[str, str]:
        """The transaction's settings for this search (``search_settings``, SET LOCAL)."""
        ef = min(MAX_EF_SEARCH, max(plan.ef_search, self.counts(plan)["vec_fetch"]))
        return {"ef_search": str(ef), "iterative_scan": plan.iterative_scan,
                "max_scan_tuples": str(plan.max_scan_tuples),
                "enable_seqscan": "off" if plan.mode in ("hybrid", "keyword") else "on"}

    # -- run ------------------------------------------------------------------------------

    def execute(self, conn: psycopg.Connection[Any], plan: SearchPlan) -> psycopg.Cursor[Candidate]:
        """Send the settings and the statement in the caller's transaction (they only take
        effect inside one); in pipeline mode the rows are read with the transaction's end."""
        conn.execute(self.q("search_settings"), self.settings(plan))
        cur = conn.cursor(row_factory=class_row(Candidate))
        cur.execute(self.statement(plan), self.params(plan))
        return cur

    def run(self, conn: psycopg.Connection[Any], plan: SearchPlan, *,
            reranker: Reranker | None = None, iterative_scans: bool = True) -> list[Hit]:
        """One search in one round trip (``db.read_snapshot``), or a savepoint inside a
        caller's transaction. Best hits first (see ``hits.shape``)."""
        settled = settle(plan, iterative_scans=iterative_scans)
        if settled is None:
            return []
        with read_snapshot(conn):
            cur = self.execute(conn, settled)
        return shape(cur.fetchall(), settled, reranker=reranker)
