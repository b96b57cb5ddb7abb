"""A search's plan: what it asks (mode, filters, fusion, depth), what it depends on in its
collection, and the checks and settling done before a statement is composed. Pure values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from rag_pg.config.sections import FUSIONS
from rag_pg.errors import ConfigError
from rag_pg.search.bm25 import MAX_QUERY_WORDS, BM25Params, keyword_query

if TYPE_CHECKING:
    import numpy as np

Mode = Literal["hybrid", "vector", "keyword"]
Expansion = Literal["parent", "children"]

MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")
EXPANSIONS: tuple[Expansion, ...] = ("parent", "children")
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
    engine_schema: str | None = None  # where pg_textsearch is installed; None: not installed
    engine_ready: bool = False  # the collection's keyword engine indexes exist
    chunks: int | None = None  # the collection's chunks (term statistics); None: not read yet
    #: the smallest share of all chunks its chunks of one configuration make (None: no chunk)
    engine_share: float | None = None

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
    #: hits of one section (document and heading) kept after fusion; 0 keeps all
    max_per_section: int = 0
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
    #: the principals the search reads as (None: no restriction): a filter like the others,
    #: so that a user who may read few documents gets k hits from the exact branch; the
    #: reader policy (rag_pg.store.permissions) holds the same rows whatever the statement
    readers: tuple[str, ...] | None = None
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
    #: the keyword leg's engine: the schema of pg_textsearch, whose indexes score it
    #: (``search_keyword_engine``); None: ragpg's BM25 in SQL
    keyword_engine: str | None = None
    #: the schema is distributed over a Citus cluster: every scan names the collection by an
    #: equality the coordinator routes by (``search_chunk_collection_routed``)
    routed: bool = False


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
