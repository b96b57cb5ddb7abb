"""Who may read which document, enforced by PostgreSQL's row-level security.

A document's readers (``document.readers``, copied on each of its chunks) are decided from the
source at ingest (rag_pg.source.access). With permissions enabled, ``document``, ``chunk`` and
``chunk_vector`` (each row carries its document's readers) carry a restrictive policy, ``ragpg_reader``: a row is readable when the
transaction acts as no principals (NULL: an administrator, the ingest), when the document has
no readers (everyone who may read the collection), or when one of its readers is one of the
acting principals. It is ANDed with the tenant policy where tenancy holds the table; without
tenancy a permissive ``ragpg_rows`` (true) stands beside it, as a restrictive policy alone lets
nothing through.

Who is acting is decided by the database (``acting_principals()``, keyed on ``session_user``):

* a reader made by ``ragpg roles create-reader NAME --principals P...`` is P, always;
* any other login the ``ragpg.principals`` setting of the current transaction, which ragpg
  sets with ``SET LOCAL`` as the first statements of every read transaction it opens while
  acting as principals (:func:`acting_as`, ``RagPG(..., principals=...)``), so a pooled
  connection never carries them to its next borrower;
* nobody named: no restriction.

A superuser or the tables' owner is never held by a policy (unless forced): while acting as
principals, ragpg's transactions on such a login also ``SET LOCAL ROLE`` to the surface role
(``{schema}_tenant_views``: NOLOGIN, SELECT on the tables), which the policies hold. Every read
of the transaction (the search's legs, its neighbour windows and expansions, a document, the
statistics) is then filtered by PostgreSQL, not by the application remembering a filter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from rag_pg.config.principals import principals as checked_principals
from rag_pg.errors import ConfigError
from rag_pg.store import tenancy
from rag_pg.store.queries import Queries
from rag_pg.store.queries import statement as statement_named

SETTING = "ragpg.principals"
POLICY = "ragpg_reader"
BASE = "ragpg_rows"
TABLES = ("chunk", "chunk_vector", "document")  # the tables that hold text, titles, paths
S = TypeVar("S")

_UNSET: Any = object()
# The principals of the operation running in this context: _UNSET (the RagPG's own), None (no
# restriction) or a tuple (possibly empty: only documents everyone may read).
_acting: ContextVar[Any] = ContextVar("ragpg_principals", default=_UNSET)



@dataclass(frozen=True, slots=True)
class _Lent:
    """A connection lent while acting as principals: those principals (the search adds them to
    its filters, to plan as for any filter) and the statements that open each transaction
    ragpg opens on it (none on a caller's connection, whose lend is one transaction)."""

    principals: tuple[str, ...]
    opening: tuple[sql.Composed, ...]


_lent: ContextVar[_Lent | None] = ContextVar("ragpg_lent_as", default=None)


def principals_of(values: Any) -> tuple[str, ...] | None:
    """None stays None (no restriction); anything else is checked as a list of principals."""
    return None if values is None else checked_principals(values, "principals")


@contextmanager
def acting_as(principals: Any) -> Iterator[None]:
    """Every read ragpg makes in this block acts as ``principals`` (a list of names; an empty
    list: only documents everyone may read; None: no restriction, an administrator's view)."""
    token = _acting.set(principals_of(principals))
    try:
        yield
    finally:
        _acting.reset(token)


def opening_statements() -> tuple[sql.Composed, ...]:
    """What a transaction opened now on a lent connection sends first (nothing unless acting)."""
    lent = _lent.get()
    return () if lent is None else lent.opening


def reading_as() -> tuple[str, ...] | None:
    """The principals the connection lent now reads as (None: no restriction)."""
    lent = _lent.get()
    return None if lent is None else lent.principals


def array_text(values: tuple[str, ...]) -> str:
    """A PostgreSQL array literal; principals hold no quote, backslash, brace or comma."""
    return "{" + ",".join(f'"{v}"' for v in values) + "}"


def statements_for(principals: tuple[str, ...], role: str | None) -> tuple[sql.Composed, ...]:
    """The statements that name ``principals`` in a transaction, then set ``role`` (if any)."""
    first = statement_named("principals_set").format(
        setting=sql.SQL(SETTING), principals=sql.Literal(array_text(principals)))
    if role is None:
        return (first,)
    return first, statement_named("principals_role").format(role=sql.Identifier(role))


class Scoped:
    """A connection source whose lent connections read as principals: the caller's context
    (:func:`acting_as`) or the RagPG's own; neither, the source's connections as they are."""

    def __init__(self, inner: Any, schema: str, principals: tuple[str, ...] | None):
        self._inner = inner
        self._schema = schema
        self._principals = principals
        self._q = Queries(schema)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        acting = _acting.get()
        principals = self._principals if acting is _UNSET else acting
        if principals is None:
            token = _lent.set(None)  # an outer block's principals are not this source's
            try:
                with self._inner.connection() as conn:
                    yield conn
            finally:
                _lent.reset(token)
            return
        with self._inner.connection() as conn:
            role = None if self._held(conn) else tenancy.surface_role(self._schema)
            opening = statements_for(principals, role)
            # ragpg's own connection opens each transaction with these statements; a caller's
            # is lent as one transaction that sends them first.
            ours = hasattr(conn, "tenant_aware")
            token = _lent.set(_Lent(principals, opening if ours else ()))
            try:
                if ours:
                    yield conn
                else:
                    with _lent_in_one_transaction(conn, opening):
                        yield conn
            finally:
                _lent.reset(token)

    def _held(self, conn: psycopg.Connection[Any]) -> bool:
        """Whether the login is held by the policies already (else it sets the surface role);
        asked once per connection (a login does not change)."""
        held = getattr(conn, "ragpg_policies_hold", None)
        if held is not None:
            return bool(held)
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(self._q("permissions_login"),
                              {"table": self._q.table("chunk"), "policy": POLICY}).fetchone()
        assert row is not None
        if not row["enabled"]:
            raise ConfigError(
                f"permissions are not enabled in schema {self._schema!r}: run `ragpg permissions"
                " enable` (or set permissions.enabled and run `ragpg init`) before acting as"
                " principals")
        conn.ragpg_policies_hold = row["held"]  # type: ignore[attr-defined]
        return bool(row["held"])


@contextmanager
def _lent_in_one_transaction(conn: psycopg.Connection[Any],
                             opening: tuple[sql.Composed, ...]) -> Iterator[None]:
    """A caller's connection (Django's, an engine's) whose transactions are not ragpg's to
    open: the whole lend is one read-only transaction (one snapshot) that names the
    principals first and ends with the lend, so nothing of them outlives it. Inside the
    caller's own transaction they would: refused."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise ConfigError("acting as principals on a connection inside an open transaction"
                          " would leave them set in it: call ragpg outside the transaction"
                          " (or give ragpg a database URL)")
    with conn.transaction():
        conn.execute(statement_named("snapshot_set"))
        for statement in opening:
            conn.execute(statement)
        yield


def scoped(source: S, schema: str, principals: tuple[str, ...] | None) -> S:
    """A :class:`Scoped` view of ``source`` (it passes through unless principals act)."""
    return cast(S, Scoped(source, schema, principals))


# -- administration --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PermissionsStatus:
    """Which tables hold the reader policy, and the readers bound to principals."""

    held: tuple[str, ...]
    not_held: tuple[str, ...]
    readers: dict[str, list[str]] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.held) and not self.not_held

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "held": list(self.held),
                "not_held": list(self.not_held), "readers": self.readers}


def _tables(conn: psycopg.Connection[Any], schema: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(statement_named("permissions_tables"), {
            "schema": schema, "policy": POLICY, "base": BASE, "tables": list(TABLES)}).fetchall()


def enable(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[str]:
    """Install the reader policy on ``document``, ``chunk`` and ``chunk_vector`` and hand the
    views and SECURITY DEFINER functions to the surface role (a BI reader bound to principals
    reads through them); idempotent. Needs the owner of ragpg's objects with CREATEROLE (or a
    superuser)."""
    from rag_pg.store import distribution

    with conn.transaction():
        tenancy.require_schema(conn, schema)
        if distribution.distributed(conn, schema):
            raise ConfigError("permissions are not available on a Citus cluster yet: the"
                              " readers bound to principals are kept on the coordinator only")
        q = Queries(schema)
        tenancy.hand_surface_to_role(conn, schema)
        held = []
        for table in _tables(conn, schema):
            name = sql.Identifier(table["name"])
            parts = {"policy": sql.Identifier(POLICY), "table": name}
            conn.execute(q.compose("permissions_policy_drop", **parts))
            conn.execute(q.compose("permissions_policy_readers", **parts))
            if not table["other_permissive"] and not table["has_base"]:
                conn.execute(q.compose("permissions_base", policy=sql.Identifier(BASE), table=name))
            conn.execute(q.compose("permissions_rls_on", table=name))
            held.append(table["name"])
    return held


def disable(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[str]:
    """Remove the reader policy (and the permissive one that stood beside it); the tables stay
    under row-level security where tenancy holds them, and so does the surface."""
    released = []
    with conn.transaction():
        tenancy.require_schema(conn, schema)
        q = Queries(schema)
        for table in _tables(conn, schema):
            name = sql.Identifier(table["name"])
            if not (table["has_policy"] or table["has_base"]):
                continue
            for policy in (POLICY, BASE):
                conn.execute(q.compose("permissions_policy_drop", policy=sql.Identifier(policy),
                                       table=name))
            if not table["other_permissive"]:
                conn.execute(q.compose("permissions_rls_off", table=name))
            released.append(table["name"])
        if not tenancy.status(conn, schema).scoped:
            tenancy.hand_surface_back(conn, schema)
    return released


def bind_reader(conn: psycopg.Connection[Any], schema: str, role: str,
                principals: tuple[str, ...] | None) -> None:
    """Bind the reader ``role`` to ``principals`` (None: unbind, it reads every document its
    tenant may)."""
    q = Queries(schema)
    conn.execute(q("principal_role_unbind"), (role,))
    if principals is not None:
        conn.execute(q("principal_role_bind"), (role, list(principals)))


def status(conn: psycopg.Connection[Any], schema: str = "ragpg") -> PermissionsStatus:
    """The tables held by the reader policy and those not, and the bound readers."""
    with conn.transaction():
        tenancy.require_schema(conn, schema)
        tables = _tables(conn, schema)
        with conn.cursor(row_factory=dict_row) as cur:
            readers = {r["role"]: list(r["principals"])
                       for r in cur.execute(Queries(schema)("principal_roles_all"))}
    return PermissionsStatus(
        held=tuple(t["name"] for t in tables if t["has_policy"] and t["rls"]),
        not_held=tuple(t["name"] for t in tables if not (t["has_policy"] and t["rls"])),
        readers=readers)


__all__ = ["POLICY", "SETTING", "PermissionsStatus", "Scoped", "acting_as", "bind_reader",
           "disable", "enable", "opening_statements", "reading_as", "scoped", "statements_for",
           "status"]
