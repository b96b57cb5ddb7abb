"""The package's shape: its folders are its stages, and imports run one way, down the stages.

Every import counts, at module level or inside a function, typing-only or not: a reader
follows each of them. A stage imports only the stages below it (and its own modules), and no
two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rag_pg"

# Lowest first. A module may import the modules of its own stage and of the stages of a lower
# rank; stages of one rank do not know each other.
STAGES: dict[str, int] = {
    "errors": 0,
    "models": 1,
    "config": 2,
    "source": 3,
    "embed": 4,
    "store": 5,
    "migrations": 6,
    "ingest": 7,
    "search": 7,
    "api": 8,
    "admin": 9,
    "tree": 9,
    "serve": 10,
    "cli": 11,
    "testing": 12,
    "__init__": 13,
    "__main__": 13,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The house's modules that ``name`` imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("rag_pg"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            if not base.startswith("rag_pg"):
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in known else base


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: {m for m in imports(name, path, known) if m != name and m in known}
            for name, path in found.items()}


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_belongs_to_a_stage():
    assert {m for m in modules() if stage(m) not in STAGES} == set()


def test_imports_run_down_the_stages():
    upward = sorted(
        f"{m} -> {t}" for m, targets in graph().items() for t in targets
        if stage(t) != stage(m) and STAGES[stage(t)] >= STAGES[stage(m)]
        and t != "rag_pg"  # the package itself is only ever read for its version
    )
    assert upward == []


def test_no_import_circle():
    edges = graph()
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                circles.append([*trail[trail.index(nxt):], nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert circles == []


def test_the_graph_sees_the_imports_it_checks():
    # A mutation check of the reader itself: api imports the store's connections.
    edges = graph()
    assert "rag_pg.store.db" in edges["rag_pg.api"]
    assert "rag_pg.errors" in edges["rag_pg.store.db"]


# A string that is a statement: its first word is one SQL starts statements with.
SQL_STATEMENT = re.compile(
    r"^\s*(SELECT|INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|CREATE|ALTER|DROP|GRANT|REVOKE"
    r"|SET\s+(LOCAL\s+)?\w+\s*(=|TO)|COPY|TRUNCATE|LOCK\s+TABLE|WITH\s+\w+\s+AS)\b")


def outside(*stages: str) -> Iterator[tuple[str, Path]]:
    for name, path in sorted(modules().items()):
        if stage(name) not in stages:
            yield name, path


def test_the_store_loads_its_statements_by_name():
    found = [f"{name}:{node.lineno}"
             for name, path in modules().items()
             if stage(name) == "store"
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and SQL_STATEMENT.match(node.value)]
    assert found == []


def test_sql_text_lives_in_the_store():
    found = [f"{name}:{node.lineno}"
             for name, path in outside("store", "migrations")
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and SQL_STATEMENT.match(node.value)]
    assert found == []


def test_the_statement_detector_sees_sql():
    assert SQL_STATEMENT.match("SELECT 1") and SQL_STATEMENT.match("  UPDATE {s}.doc SET x = 1")
    assert not SQL_STATEMENT.match("select the best passages") and not SQL_STATEMENT.match("), SELECT on")


def test_psycopg_errors_are_caught_only_at_the_store_boundary():
    found = []
    for name, path in outside("store"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                if "psycopg" in ast.unparse(node.type):
                    found.append(f"{name}:{node.lineno}")
    assert found == []


# A function fits on a screen: about 60 lines, docstring included.
MAX_FUNCTION_LINES = 65


def test_functions_fit_on_a_screen():
    long = [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for name, path in modules().items() if stage(name) != "migrations"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert sorted(long) == []


# A row read by its position (``row[0]``, ``fetchone()[1]``): the tests read rows by name too
# (``tests/rows.py``: one value, one column, or dicts), as the package does.
POSITIONAL_READ = re.compile(r"fetch(?:one|all)\(\)\[\d+\]|\b(?:row|r)\[\d+\]|\brows\[\w+\]\[\d+\]")


def test_tests_read_rows_by_name():
    here = Path(__file__).resolve()
    found = [f"{path.relative_to(here.parent)}:{number}"
             for path in sorted(here.parent.rglob("*.py")) if path != here
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if POSITIONAL_READ.search(line)]
    assert found == []
