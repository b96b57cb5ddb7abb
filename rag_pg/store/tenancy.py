"""Tenants isolated by PostgreSQL's row-level security.

A tenant is a set of collections (``tenant_collection``). With tenancy enabled every table
of the index that carries a collection gets one policy, ``collection = ANY(the tenant's
collections)``, for reads and writes alike, and ``FORCE ROW LEVEL SECURITY`` so that the
owner of the tables is held to it too (a superuser or a BYPASSRLS role never is: the
application must connect as the runtime role of ``ragpg roles create-runtime``).

Who the tenant is, is decided by the database from the login (``tenant_collections()``):

* a reader made by ``ragpg roles create-reader NAME --tenant T`` is T, always;
* a runtime role, or the owner, is the tenant named by ``ragpg.tenant`` in the current
  transaction; ragpg sets it with ``SET LOCAL`` as the first statement of every transaction it
  opens on its own connections (:func:`statement`), so it ends with the transaction and a
  pooled connection never carries it to its next borrower;
* any other login, or no tenant set: no rows at all (fail closed).

The tenant of an operation is a context variable: ``RagPG(..., tenant=T)`` sets it for each
connection it lends, ``with tenancy.acting_for(T):`` for a block of calls (one RagPG, one
pool, many tenants). ragpg's connection class reads it when it opens a transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import psycopg
from psycopg import sql
from psycopg.rows import class_row, dict_row, scalar_row

from rag_pg.errors import ConfigError, StoreError
from rag_pg.store import distribution
from rag_pg.store.queries import Queries
from rag_pg.store.queries import statement as statement_named

SETTING = "ragpg.tenant"
POLICY = "ragpg_tenant"
# Tables that are tenancy's own (read only through tenant_collections()) or Alembic's.
_UNSCOPED = ("tenant_collection", "tenant_role", "alembic_version")

_current: ContextVar[str | None] = ContextVar("ragpg_tenant", default=None)
S = TypeVar("S")


def active() -> str | None:
    """The tenant of the operation running in this context, if any."""
    return _current.get()


def statement(tenant: str) -> sql.Composed:
    """The first statement of a transaction acting for ``tenant``: transaction-local, and a
    utility statement (no snapshot), so ``SET TRANSACTION ISOLATION LEVEL`` may follow it."""
    return statement_named("tenant_set").format(setting=sql.SQL(SETTING), tenant=sql.Literal(tenant))


def check_tenant(tenant: str) -> str:
    if not isinstance(tenant, str) or not tenant.strip() or "\x00" in tenant or len(tenant) > 200:
        raise ConfigError("a tenant is a non-empty name of at most 200 characters")
    return tenant


@contextmanager
def acting_for(tenant: str | None) -> Iterator[None]:
    """Every transaction ragpg opens in this block acts for ``tenant`` (None: no tenant)."""
    token = _current.set(None if tenant is None else check_tenant(tenant))
    try:
        yield
    finally:
        _current.reset(token)


class Scoped:
    """A connection source whose lent connections act for one tenant (unless the caller's
    context already names one): the tenant is set for the lend, and only for it."""

    def __init__(self, inner: Any, tenant: str | None):
        self._inner = inner
        self._tenant = tenant

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        tenant = _current.get() or self._tenant
        with acting_for(tenant), self._inner.connection() as conn:
            if tenant is not None and not hasattr(conn, "tenant_aware"):
                raise ConfigError(
                    "tenancy needs ragpg's own connections: pass a database URL, not a"
                    " connection or engine (their transactions are not ragpg's to open)"
                )
            try:
                yield conn
            except psycopg.errors.InsufficientPrivilege as exc:
                if "row-level security" not in str(exc):
                    raise
                # A write into a collection the tenant does not hold: one line, not a trace.
                line = str(exc).strip().splitlines()[0]
                raise StoreError(f"refused for tenant {tenant!r}: {line}") from None


def unwrapped(source: object) -> object:
    """The source under a :class:`Scoped` view (its dedicated connections hold locks only)."""
    return source._inner if isinstance(source, Scoped) else source


def scoped(source: S, enabled: bool, tenant: str | None) -> S:
    """``source`` itself without tenancy, else a :class:`Scoped` view of it."""
    if not enabled:
        return source
    return cast(S, Scoped(source, None if tenant in (None, "") else check_tenant(str(tenant))))


# -- administration --------------------------------------------------------------------------

# Every table of the schema with a collection column (the collection table: its name), so a
# table added later is covered by the next `ragpg tenancy enable` without being listed here.


@dataclass(frozen=True, slots=True)
class PolicyTable:
    """A table with a collection column, and where it stands with the tenant policy."""

    name: str
    column: str  # the column the policy compares: collection (or the collection table's name)
    rls: bool
    forced: bool
    has_policy: bool

    @property
    def held(self) -> bool:
        return self.rls and self.forced and self.has_policy


@dataclass(frozen=True, slots=True)
class SurfaceObject:
    """A view or SECURITY DEFINER function of the published surface (``_SURFACE``)."""

    kind: str  # VIEW | FUNCTION
    name: str  # qualified and quoted as ALTER ... OWNER TO takes it


@dataclass(frozen=True, slots=True)
class TenancyStatus:
    """Which tables are held by the tenant policy, and which are not (yet)."""

    scoped: tuple[str, ...]
    unscoped: tuple[str, ...]
    tenants: dict[str, list[str]] = field(default_factory=dict)
    roles: dict[str, str | None] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return bool(self.scoped) and not self.unscoped

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "scoped": list(self.scoped),
                "unscoped": list(self.unscoped), "tenants": self.tenants, "roles": self.roles}


def _tables(conn: psycopg.Connection[Any], schema: str) -> list[PolicyTable]:
    with conn.cursor(row_factory=class_row(PolicyTable)) as cur:
        return cur.execute(statement_named("tenancy_tables"), {"schema": schema, "policy": POLICY,
                                     "unscoped": list(_UNSCOPED)}).fetchall()


def _one_value(conn: psycopg.Connection[Any], query: sql.SQL | sql.Composed,
               params: tuple[Any, ...] | None = None) -> Any:
    """The first column of the first row of ``query``, or None when it returns no row."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return cur.execute(query, params).fetchone()


def require_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    found = _one_value(conn, statement_named("tenancy_installed"), (
        sql.SQL("{}.tenant_collections()").format(sql.Identifier(schema)).as_string(conn),
    ))
    if found is None:
        from rag_pg.errors import SchemaMissing

        raise SchemaMissing(f"schema {schema!r} has no tenancy tables: run `ragpg init` first")


# The views and the SECURITY DEFINER functions of the published surface read the tables with
# their owner's rights, and a superuser or BYPASSRLS owner (the embedded server's, a test's)
# is never held by a policy: under tenancy they belong to this role instead, which has SELECT
# on the tables and nothing else (NOLOGIN, not superuser, not BYPASSRLS), so the policies
# apply to every read made through them.


def surface_role(schema: str) -> str:
    """The role that owns the published surface while tenancy is enabled."""
    return f"{schema}_tenant_views"[:63]


def _surface(conn: psycopg.Connection[Any], schema: str) -> list[SurfaceObject]:
    with conn.cursor(row_factory=class_row(SurfaceObject)) as cur:
        return cur.execute(statement_named("tenancy_surface"), {"schema": schema}).fetchall()


def _hand_surface(conn: psycopg.Connection[Any], schema: str, owner: sql.Composable) -> None:
    for item in _surface(conn, schema):
        # regprocedure's text and format('%I.%I') are quoted already: SQL() keeps them so.
        conn.execute(statement_named("tenancy_surface_owner").format(
            kind=sql.SQL(item.kind), name=sql.SQL(item.name), owner=owner))


def _surface_owner(conn: psycopg.Connection[Any], schema: str) -> sql.Identifier:
    name = surface_role(schema)
    role = sql.Identifier(name)
    q = Queries(schema)
    if not _one_value(conn, statement_named("role_exists"), (name,)):
        conn.execute(statement_named("tenancy_surface_role_create").format(role=role))
    # Handing an object to a role needs the right to become it: a CREATEROLE owner that is no
    # superuser holds only ADMIN on the role it created (PostgreSQL 16 and later).
    if not _one_value(conn, statement_named("role_may_become"), (name,)):
        conn.execute(statement_named("role_become").format(role=role))
    conn.execute(q.compose("tenancy_surface_role_grants", role=role))
    return role


def hand_surface_to_role(conn: psycopg.Connection[Any], schema: str) -> None:
    """The views and SECURITY DEFINER functions to the surface role (made if need be), so
    that the policies hold every read made through them."""
    _hand_surface(conn, schema, _surface_owner(conn, schema))


def hand_surface_back(conn: psycopg.Connection[Any], schema: str) -> None:
    """The surface back to the schema's owner, and the surface role's grants revoked."""
    q = Queries(schema)
    owner = _one_value(conn, statement_named("schema_owner"), (schema,))
    if owner is not None:
        _hand_surface(conn, schema, sql.SQL(owner))  # regrole's text is quoted
    surface = surface_role(schema)
    if _one_value(conn, statement_named("role_exists"), (surface,)):
        conn.execute(q.compose("tenancy_surface_role_revoke", role=sql.Identifier(surface)))


def _reader_policy_on(conn: psycopg.Connection[Any], schema: str) -> set[str]:
    """The tables that hold the reader policy of permissions (rag_pg.store.permissions)."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return set(cur.execute(statement_named("tenancy_reader_policy_tables"),
                               {"schema": schema}).fetchall())


def enable(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[str]:
    """Install the tenant policy on every table with a collection, FORCE ROW LEVEL SECURITY,
    and hand the views and SECURITY DEFINER functions to the surface role (above); idempotent
    (rerun after a migration added a table or view). Returns the tables held. Needs the
    owner of ragpg's objects with CREATEROLE (or a superuser)."""
    with conn.transaction():
        require_schema(conn, schema)
        q = Queries(schema)
        hand_surface_to_role(conn, schema)
        distributed = distribution.distributed(conn, schema)
        held = []
        for table in _tables(conn, schema):
            policy = "policy_distributed" if distributed else "policy"
            for step in ("reset", "reset_reader_base", policy, "enable", "force"):
                conn.execute(q.compose(f"tenancy_hold_{step}", policy=sql.Identifier(POLICY),
                                       table=sql.Identifier(table.name),
                                       column=sql.Identifier(table.column)))
            held.append(table.name)
    return held


def disable(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[str]:
    """Remove the tenant policy and row-level security from every table that has them (a table
    that holds the reader policy of permissions keeps row-level security, and the surface its
    role)."""
    released = []
    with conn.transaction():
        q = Queries(schema)
        readers = _reader_policy_on(conn, schema)
        if not readers:
            hand_surface_back(conn, schema)
        for table in _tables(conn, schema):
            name = sql.Identifier(table.name)
            if table.has_policy:
                conn.execute(q.compose("tenancy_policy_drop", policy=sql.Identifier(POLICY), table=name))
            if table.forced:
                conn.execute(q.compose("tenancy_unforce", table=name))
            if table.name in readers:
                # A restrictive policy alone lets no row through: the permissive one again.
                conn.execute(q.compose("tenancy_reader_base", table=name))
            elif table.rls:
                conn.execute(q.compose("tenancy_rls_off", table=name))
            if table.has_policy or table.rls or table.forced:
                released.append(table.name)
    return released


def assign(conn: psycopg.Connection[Any], tenant: str, collections: list[str],
           schema: str = "ragpg", *, remove: bool = False) -> list[str]:
    """Give ``collections`` to ``tenant`` (or take them back); returns its collections."""
    check_tenant(tenant)
    q = Queries(schema)
    with conn.transaction():
        require_schema(conn, schema)
        for collection in collections:
            change = "tenant_collection_remove" if remove else "tenant_collection_add"
            conn.execute(q(change), (tenant, collection))
        with conn.cursor(row_factory=scalar_row) as cur:
            return cur.execute(q("tenant_collections_of"), (tenant,)).fetchall()


def status(conn: psycopg.Connection[Any], schema: str = "ragpg") -> TenancyStatus:
    """The tables held by the policy, those not held, the tenants and the registered roles."""
    with conn.transaction():
        require_schema(conn, schema)
        tables = _tables(conn, schema)
        q = Queries(schema)
        tenants: dict[str, list[str]] = {}
        with conn.cursor(row_factory=dict_row) as cur:
            for row in cur.execute(q("tenant_collections_all")):
                tenants.setdefault(row["tenant"], []).append(row["collection"])
            roles = {row["role"]: row["tenant"] for row in cur.execute(q("tenant_roles_all"))}
    return TenancyStatus(scoped=tuple(t.name for t in tables if t.held),
                         unscoped=tuple(t.name for t in tables if not t.held),
                         tenants=tenants, roles=roles)


__all__ = ["SETTING", "Scoped", "TenancyStatus", "acting_for", "active", "assign", "disable",
           "enable", "scoped", "statement", "status"]
