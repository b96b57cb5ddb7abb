"""Retrieval: ONE SQL statement returns each candidate's vector and keyword rank and raw score
(plus its neighbour window and related node when asked); fusion and shaping are in ``hits``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from rag_pg.search.bm25 import keyword_query
from rag_pg.search.hits import Candidate
from rag_pg.search.plan import (
    CollectionInfo,
    SearchPlan,
    normalise_prefix,
    phrase_windows,
    unfiltered,
)
from rag_pg.source.language import LANGUAGES
from rag_pg.store.keyword_engine import index_name as engine_index_name
from rag_pg.store.queries import Queries
from rag_pg.store.vector_index import vector_kind

MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search
PER_DOCUMENT_OVERFETCH = 4  # HNSW rows fetched per candidate slot when hits are capped per file
# Postings of the rarest query terms scored first by the pruned keyword leg, per candidate
# slot: just enough chunks that the candidates-th best of them sets a threshold; more would
# pull a frequent word's postings into the seed whenever the rarest word has few.
SEED_POSTINGS_PER_CANDIDATE = 1


class Searcher:
    """Composes and runs the retrieval statement of a schema; :func:`rag_pg.search.hits.shape` turns
    its rows into hits."""

    def __init__(self, schema: str = "ragpg"):
        self.q = Queries(schema)

    # -- SQL ------------------------------------------------------------------------------

    def _sql(self, name: str, **parts: sql.Composable) -> sql.Composed:
        return self.q.compose(name, **parts)

    def collection_statement(self, *, engine: bool = True) -> sql.Composed:
        """``search_collection``; without ``engine`` (a Citus cluster, or a setting that keeps
        the SQL leg), the keyword engine's columns are not read."""
        schema_name = sql.Literal(self.q.schema)
        columns = self._sql("search_collection_engine" if engine else "search_collection_engine_none",
                            schema_name=schema_name)
        return self._sql("search_collection", schema_name=schema_name, engine=columns)

    def read_collection(self, conn: psycopg.Connection[Any], collection: str, *,
                        engine: bool = True) -> CollectionInfo:
        """What a search's plan depends on in ``collection``, read now (one row)."""
        info = self.send_collection(conn, collection, engine=engine).fetchone()
        assert info is not None  # the statement always returns one row
        return info

    def send_collection(self, conn: psycopg.Connection[Any], collection: str, *,
                        engine: bool = True) -> psycopg.Cursor[CollectionInfo]:
        """What the plan depends on in the collection (one row, known or not); in a pipeline
        the row is read once the pipeline syncs."""
        cur = conn.cursor(row_factory=class_row(CollectionInfo))
        cur.execute(self.collection_statement(engine=engine), {"collection": collection})
        return cur

    def readers_filter(self, rows: str) -> sql.Composed:
        """The acting principals' filter on the table aliased ``rows`` (d, c or cv)."""
        return self._sql("search_filter_readers", rows=sql.Identifier(rows))

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
        clauses = [self._sql(n) for n in names]
        if plan.readers is not None:
            clauses.append(self.readers_filter("d"))
        return sql.SQL("\n      AND ").join(clauses)

    @staticmethod
    def document_unfiltered(plan: SearchPlan) -> bool:
        """No filter on the documents' own columns (the readers may still be one)."""
        return unfiltered(plan.path_prefix, plan.front_matter, plan.level, plan.node_type)

    @classmethod
    def whole_collection(cls, plan: SearchPlan) -> bool:
        """No filter beyond the collection: the caller may decide exact vs index itself."""
        return plan.readers is None and cls.document_unfiltered(plan)

    @classmethod
    def collection_scan(cls, plan: SearchPlan) -> bool:
        """The vector leg reads the collection's own vector rows (search_vector_collection):
        nothing but the collection, and the readers each row carries, filter or cap them."""
        return not plan.max_per_document and cls.document_unfiltered(plan)

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
            ctes += self.vector_leg(plan, where, literals)
        if plan.mode in ("hybrid", "keyword"):
            ctes += self.keyword_leg(plan, where, literals)
        window = self._sql("search_window") if plan.neighbours > 0 else sql.SQL("NULL::jsonb")
        if plan.mode == "hybrid":
            ctes.append(self._sql("search_phrases"))
        phrases = self._sql("search_phrases_held" if plan.mode == "hybrid" else "search_phrases_none")
        candidates_of = self._sql(f"search_candidates_{plan.mode}")
        rows = "search_candidate_rows"
        if plan.readers is not None:
            # The candidates stay a subquery of their own (OFFSET 0): pulled up, a hybrid
            # candidate's id is a coalesce() of both legs', which PostgreSQL will not compare
            # through an index on a table under row-level security.
            candidates_of, rows = candidates_of + sql.SQL(" OFFSET 0"), "search_candidate_rows_held"
        expanded: sql.Composable = sql.SQL("NULL::jsonb")
        expand_join: sql.Composable = sql.SQL("")
        if plan.expand:
            ctes += [self._sql("search_expand_documents", candidates_of=candidates_of,
                               candidate_rows=self._sql(rows)),
                     self._sql(f"search_expand_{plan.expand}")]
            expanded = self._sql("search_expanded")
            expand_join = self._sql("search_expand_join",
                                    key=self._sql(f"search_expand_{plan.expand}_key"))
        final = self._sql("search_select", window=window, expanded=expanded, phrases=phrases,
                          candidates_of=candidates_of, candidate_rows=self._sql(rows),
                          expand_join=expand_join)
        return sql.SQL("WITH ") + sql.SQL(",\n").join(ctes) + sql.SQL("\n") + final

    def vector_leg(self, plan: SearchPlan, where: sql.Composed,
                   literals: Mapping[str, sql.Composable]) -> list[sql.Composable]:
        """The vector leg's CTEs (its scope, then its ranked list ``vec_ranked``)."""
        kind = sql.SQL(plan.vector_kind or vector_kind(plan.dimension or 0))
        parts = {"doc_filter": where, "vkind": kind, "dim": sql.Literal(plan.dimension),
                 "model": sql.Literal(plan.model), **literals}
        parts["exact_top"] = (sql.SQL("") if plan.max_per_document
                              else self._sql("search_vector_exact_top", **literals))
        parts["collection_chunks"] = self._sql("search_collection_chunks")
        parts["vector_readers"] = (sql.SQL("") if plan.readers is None
                                   else sql.SQL(" AND ") + self.readers_filter("cv"))
        parts["exact"] = self._sql("search_vector_exact", **parts)
        if plan.exact is not None:
            scope = "search_vector_scope_given"
        elif self.whole_collection(plan):
            scope = "search_vector_scope_collection"
        else:
            scope = "search_vector_scope"
        leg = "search_vector_collection" if self.collection_scan(plan) else "search_vector_leg"
        return [self._sql(scope, **parts), self._sql(leg, **parts)]

    def keyword_leg(self, plan: SearchPlan, where: sql.Composed,
                    literals: Mapping[str, sql.Composable]) -> list[sql.Composable]:
        """The keyword leg's CTEs: exhaustive, pruned, or the engine's beside the pruned leg
        for small scopes; then its ranked list ``kw_ranked``."""
        whole = self.whole_collection(plan)
        chunk_collection = ("search_chunk_collection_routed" if plan.routed
                            else "search_chunk_collection")
        keep: sql.Composable = sql.SQL("true") if whole else sql.SQL("({})").format(where)
        joined = not whole
        if not whole and self.document_unfiltered(plan):
            # Only the readers filter: each chunk carries them, no join to its document.
            keep, joined = self.readers_filter("c"), False
        gin = "search_keyword_gin" if plan.readers is None else "search_keyword_gin_readable"
        # Beside an engine the SQL leg scores small scopes only: each of its scans is gated.
        engine = plan.keyword_engine is not None
        gate = self._sql("search_keyword_engine_gate") + sql.SQL(" ") if engine else sql.SQL("")
        parts = {"keep": keep,
                 "seed_match": gate + self._sql(gin, query=sql.SQL("(SELECT seed_q FROM kw_query)")),
                 "rest_match": gate + self._sql(gin, query=sql.SQL("(SELECT q FROM kw_rest_query)")),
                 "sql_gate": gate,
                 "leg": sql.SQL("kw_sql" if engine else "kw"),
                 "keep_join": self._sql("search_keyword_keep_join") if joined else sql.SQL(""),
                 "doc_filter": where, "chunk_collection": self._sql(chunk_collection),
                 **literals}
        ctes: list[sql.Composable] = []
        if plan.keyword_exhaustive:
            ctes.append(self._sql("search_keyword_leg", **parts))
        elif engine and whole:  # a whole collection: its size decided (SearchRunner)
            ctes.append(self.engine_leg(plan, parts, alone=True))
        else:
            scope = "search_keyword_scope_whole" if whole else "search_keyword_scope"
            ctes.append(self._sql(scope, **parts))
            if engine:
                ctes.append(self._sql("search_keyword_engine_scope_same"))
            ctes.append(self._sql("search_keyword_pruned", **parts))
            if engine:
                ctes.append(self.engine_leg(plan, parts, alone=False))
        return [*ctes, self._sql("search_keyword_ranked", **literals)]

    def engine_leg(self, plan: SearchPlan, parts: dict[str, sql.Composable], *,
                   alone: bool) -> sql.Composed:
        """The keyword leg scored by pg_textsearch's index of each configuration: ``alone``
        (a whole collection), or beside the SQL leg, which scores a small filter's chunks."""
        assert plan.keyword_engine is not None

        def score(language: str) -> sql.Composed:
            index = self.q.table(engine_index_name(language))
            return self._sql("search_keyword_engine_score",
                             engine=sql.Identifier(plan.keyword_engine or ""),
                             index=sql.Literal(index))

        scoped = sql.SQL("") if alone else self._sql("search_keyword_engine_scoped")
        scans = [self._sql("search_keyword_engine_scan", score=score(language), scoped=scoped,
                           config=sql.Literal(self.q.config(language)), **parts)
                 for language in LANGUAGES]
        return self._sql("search_keyword_engine_alone" if alone else "search_keyword_engine",
                         scans=sql.SQL("\n    UNION ALL\n    ").join(scans))

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
            "readers": None if plan.readers is None else list(plan.readers),
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
        """The transaction's settings for this search (``search_setting``: SET LOCAL), in order."""
        ef = min(MAX_EF_SEARCH, max(plan.ef_search, self.counts(plan)["vec_fetch"]))
        return {"hnsw.ef_search": str(ef),
                "hnsw.iterative_scan": plan.iterative_scan,
                "hnsw.max_scan_tuples": str(plan.max_scan_tuples),
                "enable_seqscan": "off" if plan.mode in ("hybrid", "keyword") else "on",
                "max_parallel_workers_per_gather": "0"}

    def settings_statements(self, plan: SearchPlan) -> list[sql.Composed]:
        return [self.q.compose("search_setting", setting=sql.SQL(name), value=sql.Literal(value))
                for name, value in self.settings(plan).items()]

    def apply_settings(self, conn: psycopg.Connection[Any], plan: SearchPlan) -> None:
        """Set the search's settings in the caller's transaction (they end with it)."""
        for setting in self.settings_statements(plan):
            conn.execute(setting)

    # -- run ------------------------------------------------------------------------------

    def execute(self, conn: psycopg.Connection[Any], plan: SearchPlan) -> psycopg.Cursor[Candidate]:
        """Send the settings and the statement in the caller's transaction (they only take
        effect inside one); in pipeline mode the rows are read with the transaction's end."""
        self.apply_settings(conn, plan)
        cur = conn.cursor(row_factory=class_row(Candidate))
        cur.execute(self.statement(plan), self.params(plan))
        return cur
