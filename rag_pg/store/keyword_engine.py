"""The keyword leg's engine: ragpg's own BM25 in SQL, or pg_textsearch's where the database has it.

``retrieval.keyword_engine``: ``sql`` always scores in SQL (any PostgreSQL); ``pg_textsearch``
requires the extension (Timescale's BM25 index, block-max WAND: it skips what cannot enter
the top k); ``auto``, the default, uses pg_textsearch when the server offers it and SQL
otherwise. ``ragpg init`` installs the extension when asked or offered and builds the
engine's indexes: one ``bm25`` index on ``chunk.bm25_text`` per text search configuration
(``ragpg.french``, ``ragpg.english``, ``ragpg.simple``); the engine keeps them as chunks are
written, and a search reads the index of each configuration for its collection's chunks in it
(a scope of at most ``retrieval.exact_limit`` chunks is scored by the SQL leg instead:
``search_keyword_engine``).

What differs from ragpg's SQL BM25 (measured in docs/performance.md):

* the statistics: an engine index spans the whole ``chunk`` table, so its N, average length and
  document frequencies are those of every collection's chunks, each analysed in the index's
  configuration, where ragpg's are the collection's chunks in their own configuration. One
  index per collection and configuration would keep them apart, but pg_textsearch 0.6.1 builds
  a partial index over every row of the table (its WHERE is applied to later inserts only:
  ``tests/test_keyword_engine.py`` holds the check), so ragpg does not build such indexes;
* the text is the same as the ``tsv``'s (the section heading, then the content), in a
  stored column of its own, ``chunk.bm25_text``, added when the engine is first used:
  pg_textsearch indexes a column, not an expression;
* a chunk's length is its lexemes where ragpg takes its token count, and scores are single
  precision.

k1 and b are the index's, set from ``retrieval.bm25_k1``/``bm25_b`` when it is built; ``ragpg
init`` rebuilds an index whose parameters no longer match. A Citus cluster keeps the SQL leg
(an engine index on each shard would score with that shard's statistics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, scalar_row

from rag_pg.config.sections import RetrievalSettings
from rag_pg.errors import ConfigError, first_line
from rag_pg.source import language
from rag_pg.store.queries import Queries, statement

ENGINE = "pg_textsearch"
# The text search configurations the indexes follow: the search statement's, in its order.
LANGUAGES = language.LANGUAGES


def index_name(language: str) -> str:
    """The engine index of the chunks in one configuration (``search_collection`` computes the
    same names)."""
    return f"chunk_bm25_{language}"


def wanted(retrieval: RetrievalSettings) -> bool:
    """Whether the setting lets the keyword leg use the engine at all."""
    return retrieval.keyword_engine in ("auto", ENGINE)


def extension(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """``installed_in``: the schema pg_textsearch lives in (None: not installed); ``offered``:
    whether the server has its package."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(statement("keyword_engine_extension")).fetchone()
    assert row is not None  # the statement always returns one row
    return row


def installed_in(conn: psycopg.Connection[Any]) -> str | None:
    """The schema the extension lives in, None when it is not installed."""
    schema = extension(conn)["installed_in"]
    return None if schema is None else str(schema)


def missing(setting: str, reason: str) -> ConfigError:
    return ConfigError(f"retrieval.keyword_engine = {setting!r}: {reason}; set it to 'auto' or"
                       " 'sql' to search with ragpg's own BM25")


def install(conn: psycopg.Connection[Any], retrieval: RetrievalSettings) -> str | None:
    """The extension's schema once installed where the setting asks for it and the server
    offers it; None where the leg stays SQL. A named engine the database cannot have is an error."""
    required = retrieval.keyword_engine == ENGINE
    state = extension(conn)
    if state["installed_in"] is not None:
        return str(state["installed_in"])
    if not state["offered"]:
        if required:
            raise missing(retrieval.keyword_engine, "this server has no pg_textsearch extension")
        return None
    try:
        with conn.transaction():
            conn.execute(statement("keyword_engine_install"))
    except psycopg.Error as exc:
        if required:  # typically: the library is not in shared_preload_libraries
            raise missing(retrieval.keyword_engine,
                          f"the extension could not be created ({first_line(exc)})") from None
        return None
    return installed_in(conn)


def ensure_indexes(conn: psycopg.Connection[Any], schema: str,
                   retrieval: RetrievalSettings) -> list[str]:
    """Create the missing engine indexes (and the column they index, ``bm25_text``) and
    recreate those built with other k1/b; returns the names built. Each in its own transaction."""
    q = Queries(schema)
    with conn.cursor(row_factory=scalar_row) as cur:
        column = cur.execute(q("keyword_engine_column_present"), {"chunk": q.table("chunk")}).fetchone()
    if not column:
        with conn.transaction():
            conn.execute(q("keyword_engine_column_add"))
    names = {index_name(lang): lang for lang in LANGUAGES}
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(q("keyword_engine_indexes"),
                           {"schema": schema, "names": list(names)}).fetchall()
    present = {r["name"]: r["options"] for r in rows}
    made: list[str] = []
    for name, lang in names.items():
        if name in present and not stale(present[name], retrieval):
            continue
        with conn.transaction():
            if name in present:
                conn.execute(q.compose("keyword_engine_index_drop", index=sql.Identifier(name)))
            conn.execute(q.compose(
                "keyword_engine_index_create", index=sql.Identifier(name),
                config=sql.Literal(q.config(lang)), k1=sql.Literal(retrieval.bm25_k1),
                b=sql.Literal(retrieval.bm25_b)))
        made.append(name)
    return made


def stale(options: Sequence[str], retrieval: RetrievalSettings) -> bool:
    """Whether an index's k1/b (its storage parameters) differ from the settings'."""
    given = dict(option.partition("=")[::2] for option in options)
    try:
        return (abs(float(given["k1"]) - retrieval.bm25_k1) > 1e-9
                or abs(float(given["b"]) - retrieval.bm25_b) > 1e-9)
    except (KeyError, ValueError):  # built without them: the engine's defaults, maybe not ours
        return True


def prepare(conn: psycopg.Connection[Any], schema: str, retrieval: RetrievalSettings, *,
            distributed: bool) -> str | None:
    """``ragpg init``: the engine the keyword leg will use (``pg_textsearch``, or None for
    SQL), with the extension installed and its indexes built or rebuilt."""
    if not wanted(retrieval):
        return None
    if distributed:
        if retrieval.keyword_engine == ENGINE:
            raise missing(ENGINE, "a Citus cluster keeps ragpg's SQL leg (an engine index on"
                                  " each shard would score with that shard's statistics)")
        return None
    if install(conn, retrieval) is None:
        return None
    ensure_indexes(conn, schema, retrieval)
    return ENGINE
