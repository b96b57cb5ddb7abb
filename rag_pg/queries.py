"""Loads the runtime SQL of ``sql/queries.sql`` by name, with the schema bound as an identifier."""

from __future__ import annotations

import functools
import re
from importlib import resources

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def _raw() -> dict[str, str]:
    text = resources.files("rag_pg").joinpath("sql/queries.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        out[name] = "\n".join(lines).strip().rstrip(";")
    return out


class Queries:
    """The named statements for one schema; ``q("name", model=..., dim=...)`` binds literals."""

    def __init__(self, schema: str):
        self.schema = schema
        self._ident = sql.Identifier(schema)
        self._cache: dict[tuple[str, tuple[tuple[str, object], ...]], sql.Composed] = {}

    def __call__(self, name: str, **literals: object) -> sql.Composed:
        key = (name, tuple(sorted(literals.items())))
        found = self._cache.get(key)
        if found is None:
            found = self.raw(name, **literals)
            self._cache[key] = found
        return found

    def raw(self, name: str, **literals: object) -> sql.Composed:
        params: dict[str, sql.Composable] = {"schema": self._ident}
        params.update({k: sql.Literal(v) for k, v in literals.items()})
        return sql.SQL(_raw()[name]).format(**params)

    def compose(self, name: str, **parts: sql.Composable) -> sql.Composed:
        """A named fragment with SQL parts filled in (other fragments, literals): how the search
        statement is assembled from pieces of queries.sql."""
        return sql.SQL(_raw()[name]).format(schema=self._ident, **parts)

    def config(self, language: str) -> str:
        """The schema-qualified text search configuration for ``language``."""
        return f'"{self.schema}".{language}'

    def table(self, name: str) -> str:
        return f'"{self.schema}".{name}'


def names() -> list[str]:
    return sorted(_raw())
