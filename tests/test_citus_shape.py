"""The schema stays distributable by collection (docs/scaling.md, section 3), checked in code.

``create_distributed_table(t, 'collection')`` on the tables that carry a collection, with
``collection`` itself a reference table and the run tables left local, needs:

* every PRIMARY KEY, UNIQUE constraint and unique index of a distributed table to include
  ``collection``;
* every foreign key of a distributed table to reference a reference table, or a distributed
  one with ``collection`` matched to ``collection``; none from a local or reference table to
  a distributed one;
* identity and sequence defaults of a distributed table on ``bigint`` (Citus gives each node
  its own range of a bigint sequence; smaller ones work from the coordinator only);
* every join between two distributed tables to equate their collections (directly, or both
  to the same value): a join on ids alone is not colocated, and Citus refuses it unless
  repartition joins are switched on.

The schema comes from a migrated database's catalogue (constraints, indexes, defaults, view
and function definitions); the statements from every file of ``rag_pg/sql`` and every golden
search statement. No SQL parser is installed, so table references and collection equalities
are read with patterns that rely on what ragpg's SQL always does: tables schema-qualified,
columns alias-qualified in joins.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import psycopg
import pytest

from rag_pg.store.queries import _raw

GOLDEN = Path(__file__).parent / "golden_sql"
PACKAGE = Path(__file__).resolve().parent.parent / "rag_pg"
REFERENCE = {"collection"}
# Local to the coordinator: bookkeeping of runs and of the migrations, never joined to the index.
LOCAL = {"alembic_version", "ingest_run", "eval_run", "reembed_run"}

_SCHEMA = r'(?:\{schema\}|\{s\}|"ragpg"|ragpg)\.'
_KEYWORDS = {"where", "join", "on", "using", "left", "right", "inner", "full", "cross", "set",
             "group", "order", "limit", "union", "select", "values", "returning", "natural",
             "lateral", "and", "or", "as", "from", "window", "having", "default", "when"}


def distributed_tables(conn: psycopg.Connection) -> set[str]:
    """Every table of the schema with a ``collection`` column, except the reference and
    local ones: a new table that carries a collection is checked without being listed."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
        " WHERE c.relnamespace = 'ragpg'::regnamespace AND c.relkind IN ('r', 'p')"
        " AND a.attname = 'collection' AND NOT a.attisdropped").fetchall()
    return {name for (name,) in rows} - REFERENCE - LOCAL


@pytest.fixture
def catalog(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        yield conn


def key_violations(conn: psycopg.Connection, distributed: set[str]) -> list[str]:
    out = []
    for table, name, columns in conn.execute(
        "SELECT t.relname, i.relname, array_agg(a.attname::text)"
        " FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid"
        " LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY(x.indkey)"
        " WHERE t.relnamespace = 'ragpg'::regnamespace AND (x.indisunique OR x.indisexclusion)"
        " GROUP BY 1, 2"):
        if table in distributed and "collection" not in columns:
            out.append(f"{table}: unique index {name} ({', '.join(c for c in columns if c)})"
                       " lacks collection")
    return out


def foreign_key_violations(conn: psycopg.Connection, distributed: set[str]) -> list[str]:
    out = []
    for name, table, target, pairs in conn.execute(
        "SELECT k.conname, t.relname, r.relname,"
        "  array(SELECT a.attname || '=' || b.attname"
        "        FROM unnest(k.conkey, k.confkey) AS u(src, dst)"
        "        JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.src"
        "        JOIN pg_attribute b ON b.attrelid = k.confrelid AND b.attnum = u.dst)"
        " FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid JOIN pg_class r ON r.oid = k.confrelid"
        " WHERE k.contype = 'f' AND k.connamespace = 'ragpg'::regnamespace"):
        if table in distributed and target in distributed and "collection=collection" not in pairs:
            out.append(f"{table}: foreign key {name} to {target} does not match collection")
        elif table in distributed and target not in distributed | REFERENCE:
            out.append(f"{table}: foreign key {name} to the local table {target}")
        elif table not in distributed and target in distributed:
            out.append(f"{table}: foreign key {name} from a non-distributed table to {target}")
    return out


def sequence_violations(conn: psycopg.Connection, distributed: set[str]) -> list[str]:
    out = []
    for table, column, kind in conn.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum"
        " WHERE c.relnamespace = 'ragpg'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped"
        " AND (a.attidentity <> '' OR pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%')"):
        if table in distributed and kind != "bigint":
            out.append(f"{table}.{column}: sequence on {kind}, not bigint")
    return out


def catalog_statements(conn: psycopg.Connection) -> dict[str, str]:
    """The views' and the functions' SQL as the migrations left them in the database."""
    views = conn.execute(
        "SELECT 'view ' || c.relname, pg_get_viewdef(c.oid) FROM pg_class c"
        " WHERE c.relnamespace = 'ragpg'::regnamespace AND c.relkind IN ('v', 'm')").fetchall()
    functions = conn.execute(
        "SELECT 'function ' || p.proname, p.prosrc FROM pg_proc p"
        " WHERE p.pronamespace = 'ragpg'::regnamespace").fetchall()
    return dict(views + functions)


def runtime_statements() -> dict[str, str]:
    """Every named statement and fragment of rag_pg/sql, every golden search statement, and
    every string of the package's Python code that names a table of the schema."""
    # A fragment's {doc_filter} always starts with the collection filter (search.doc_filter).
    # A chunk scan's {chunk_collection} names the collection (by equality on a cluster).
    collection_filter = _raw()["search_filter_collection"].strip()
    chunk_collection = _raw()["search_chunk_collection_routed"].strip()
    out = {f"sql {name}": body.replace("{doc_filter}", collection_filter)
           .replace("{chunk_collection}", chunk_collection)
           for name, body in _raw().items()}
    out.update({f"golden {p.stem}": p.read_text() for p in sorted(GOLDEN.glob("*.sql"))})
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue  # DDL and one-off backfills: what they leave is read from the catalogue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and re.search(_SCHEMA + r"\w", node.value)):
                out[f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"] = node.value
    return out


def _references(statement: str, distributed: set[str]) -> list[tuple[int, str, str]]:
    """(position, alias, table) of each distributed table the statement names."""
    tables = "|".join(sorted(distributed, key=len, reverse=True))
    found = []
    pattern = rf"{_SCHEMA}({tables})\b(?!\s*\()(?:\s+(?:AS\s+)?([A-Za-z_]\w*))?"
    for match in re.finditer(pattern, statement, re.IGNORECASE):
        table, alias = match.group(1), match.group(2)
        if alias is None or alias.lower() in _KEYWORDS:
            alias = table
        found.append((match.start(), alias, table))
    return found


def _equalities(statement: str, refs: list[tuple[int, str, str]]) -> Iterable[tuple[str, str]]:
    """Pairs of things a collection is said equal to: ``a.collection = b.collection``,
    ``a.collection = %(collection)s`` (or a literal, or a function's argument). A bare
    ``collection`` is the column of the table named last before it (its FROM, in ragpg's
    one-table subqueries)."""
    side = r"(?<![\w.])(?:([A-Za-z_]\w*)\.)?collection\b"
    other = r"(%\(\w+\)s|\$\d+|'[^']*'|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)"

    def owner(alias: str | None, at: int) -> str:
        if alias is not None:
            return alias
        before = [a for start, a, _ in refs if start < at]
        return before[-1] if before else "collection"

    equals = r"\s*(?:=|IS\s+NOT\s+DISTINCT\s+FROM)\s*"
    for m in re.finditer(rf"{side}{equals}{other}", statement, re.IGNORECASE):
        yield owner(m.group(1), m.start()), _node(m.group(2))
    for m in re.finditer(rf"{other}{equals}{side}", statement, re.IGNORECASE):
        yield _node(m.group(1)), owner(m.group(2), m.start())


def _node(token: str) -> str:
    """An alias for ``alias.collection``, else the value itself (a parameter, a literal)."""
    if token.lower().endswith(".collection"):
        return token.rsplit(".", 1)[0]
    return f"value {token}"


#: Statements that name tables without joining them.
_NOT_QUERIES = re.compile(r"^\s*(ANALYZE|COPY|VACUUM|TRUNCATE|LOCK|CREATE|DROP|ALTER)\b", re.IGNORECASE)


def _split(statements: dict[str, str]) -> Iterable[tuple[str, str]]:
    """Each statement of a body on its own (a function's body holds several)."""
    for name, body in statements.items():
        for part in body.split(";"):
            if part.strip():
                yield name, part


_CTE = re.compile(r"\b([A-Za-z_]\w*)\s+AS\s+(?:(?:NOT\s+)?MATERIALIZED\s+)?\(", re.IGNORECASE)
_GROUPED_BY_COLLECTION = re.compile(r"GROUP\s+BY\s+(?:[A-Za-z_]\w*\.)?collection\s*$", re.IGNORECASE)


def _per_collection_aggregates(statement: str) -> tuple[str, list[str]]:
    """The statement without its CTEs that end in ``GROUP BY collection``, and those CTEs.

    Such a CTE has one row per collection: joined to the rest on its collection it is
    colocated whatever it reads, so its tables are checked within its own body only."""
    cut: list[tuple[int, int]] = []
    for m in _CTE.finditer(statement):
        if cut and m.start() < cut[-1][1]:
            continue  # inside an aggregate already cut out
        depth, end = 1, m.end()
        while depth and end < len(statement):
            depth += {"(": 1, ")": -1}.get(statement[end], 0)
            end += 1
        body = statement[m.end():end - 1]
        if _GROUPED_BY_COLLECTION.search(body):
            cut.append((m.end(), end - 1))
    rest, last = [], 0
    for start, end in cut:
        rest.append(statement[last:start])
        last = end
    rest.append(statement[last:])
    return "".join(rest), [statement[start:end] for start, end in cut]


def join_violations(statements: dict[str, str], distributed: set[str]) -> list[str]:
    out = []
    for name, whole in _split(statements):
        rest, aggregates = _per_collection_aggregates(whole)
        out += _join_violations(name, rest, distributed)
        for body in aggregates:
            out += _join_violations(name, body, distributed)
    return out


def _join_violations(name: str, statement: str, distributed: set[str]) -> list[str]:
    """One statement's tables fall into groups linked by collection equalities: more than
    one group is a join on something else."""
    refs = _references(statement, distributed)
    if len(refs) < 2 or _NOT_QUERIES.match(statement):
        return []
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for a, b in _equalities(statement, refs):
        parent[find(a)] = find(b)
    for m in re.finditer(rf"{_SCHEMA}(\w+)\s+(\w+)\s+USING\s*\(([^)]*)\)", statement, re.IGNORECASE):
        if "collection" in m.group(3):
            parent[find(m.group(2))] = find(refs[0][1])
    if len({find(alias) for _, alias, _ in refs}) == 1:
        return []
    tables = sorted({f"{table} {alias}" for _, alias, table in refs})
    return [f"{name}: joins {', '.join(tables)} without equating their collections"]


def test_keys_foreign_keys_and_sequences_allow_distribution_by_collection(catalog) -> None:
    distributed = distributed_tables(catalog)
    assert {"document", "chunk", "chunk_vector"} <= distributed
    problems = (key_violations(catalog, distributed) + foreign_key_violations(catalog, distributed)
                + sequence_violations(catalog, distributed))
    assert problems == []


def test_every_join_between_distributed_tables_equates_collection(catalog) -> None:
    distributed = distributed_tables(catalog)
    statements = {**runtime_statements(), **catalog_statements(catalog)}
    assert any(name.startswith("golden ") for name in statements)
    assert any(name.startswith("view ") for name in statements)
    assert any(name.startswith("function keyword_search") for name in statements)
    assert join_violations(statements, distributed) == []


def test_the_check_sees_what_citus_would_refuse(catalog) -> None:
    """The checks fail on the shapes they exist to catch, on a real table and statement."""
    distributed = {"document", "chunk", "chunk_vector"}
    bad_join = {"ids only": "SELECT * FROM {schema}.chunk c JOIN {schema}.document d ON d.id = c.document_id"}
    good_join = {"colocated": "SELECT * FROM {schema}.chunk c JOIN {schema}.document d"
                              " ON d.id = c.document_id AND d.collection = c.collection"}
    pinned = {"pinned": "SELECT * FROM ragpg.chunk c, ragpg.document d WHERE d.id = c.document_id"
                        " AND c.collection = %(collection)s AND d.collection = %(collection)s"}
    assert join_violations(bad_join, distributed) == [
        "ids only: joins chunk c, document d without equating their collections"]
    assert join_violations({**good_join, **pinned}, distributed) == []
    counted = {"per collection": "WITH a AS (SELECT c.collection, count(*) FROM {schema}.chunk c"
                                 " GROUP BY c.collection), b AS (SELECT v.collection, count(*)"
                                 " FROM {schema}.chunk_vector v GROUP BY v.collection)"
                                 " SELECT * FROM a JOIN b ON a.collection = b.collection"}
    assert join_violations(counted, distributed) == []
    inside = {"inside": "WITH a AS (SELECT d.collection, count(*) FROM {schema}.chunk c"
                        " JOIN {schema}.document d ON d.id = c.document_id GROUP BY d.collection)"
                        " SELECT * FROM a"}
    by_path = {"by path": "WITH a AS (SELECT d.path, count(*) FROM {schema}.document d GROUP BY d.path)"
                          " SELECT * FROM a, {schema}.chunk c WHERE c.collection = %(collection)s"}
    assert join_violations({**inside, **by_path}, distributed) == [
        "inside: joins chunk c, document d without equating their collections",
        "by path: joins chunk c, document d without equating their collections"]
    catalog.execute("CREATE TABLE ragpg.h2_probe (id integer GENERATED ALWAYS AS IDENTITY UNIQUE,"
                    " collection text, chunk_id bigint, shard_key integer,"
                    " FOREIGN KEY (chunk_id, collection, shard_key)"
                    " REFERENCES ragpg.chunk (id, collection, shard_key))")
    catalog.execute("CREATE TABLE ragpg.h2_probe_ref (chunk_id bigint, collection text, shard_key integer,"
                    " FOREIGN KEY (chunk_id, collection, shard_key)"
                    " REFERENCES ragpg.chunk (id, collection, shard_key))")
    probe = distributed | {"h2_probe"}
    assert key_violations(catalog, probe) == ["h2_probe: unique index h2_probe_id_key (id) lacks collection"]
    assert sequence_violations(catalog, probe) == ["h2_probe.id: sequence on integer, not bigint"]
    assert foreign_key_violations(catalog, probe) == [
        "h2_probe_ref: foreign key h2_probe_ref_chunk_id_collection_shard_key_fkey from a non-distributed"
        " table to chunk"]
