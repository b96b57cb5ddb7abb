"""Loads the runtime SQL of ``sql/*.sql`` by name, with the schema bound as an identifier."""

from __future__ import annotations

import functools
import re
from importlib import resources

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def _raw() -> dict[str, str]:
    """Every named statement of the package's SQL files (read once: they are package data)."""
    out: dict[str, str] = {}
    folder = resources.files("rag_pg.store").joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        parts = _NAME.split(entry.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in out:
                raise RuntimeError(f"SQL statement {name!r} is defined twice")
            lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
            out[name] = "\n".join(lines).strip().rstrip(";")
    return out


class Queries:
    """The named statements for one schema; ``q("name", model=..., dim=...)`` binds literals."""

    def __init__(self, schema: str):
        self.schema = schema
        self._ident = sql.Identifier(schema)

    def __call__(self, name: str, **literals: object) -> sql.Composed:
        params: dict[str, sql.Composable] = {"schema": self._ident}
        params.update({k: sql.Literal(v) for k, v in literals.items()})
        return sql.SQL(_raw()[name]).format(**params)

    def compose(self, name: str, **parts: sql.Composable) -> sql.Composed:
        """A named fragment with SQL parts filled in (other fragments, literals): how the search
        statement is assembled from pieces of the SQL files."""
        return sql.SQL(_raw()[name]).format(schema=self._ident, **parts)

    def config(self, language: str) -> str:
        """The schema-qualified text search configuration for ``language``."""
        return f"{self._ident.as_string()}.{language}"

    def table(self, name: str) -> str:
        return f"{self._ident.as_string()}.{name}"


def statement(name: str) -> sql.SQL:
    """A named statement that names no schema (a session's, a lock's), as it is."""
    return sql.SQL(_raw()[name])


def names() -> list[str]:
    return sorted(_raw())
