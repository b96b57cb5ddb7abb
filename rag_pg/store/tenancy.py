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
    return sql.SQL("SET LOCAL {} = {}").format(sql.SQL(SETTING), sql.Literal(tenant))


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
_TABLES = """
SELECT c.relname AS name, a.attname AS column, c.relrowsecurity AS rls,
       c.relforcerowsecurity AS forced,
       EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = %(policy)s)
           AS has_policy
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped
WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p')
  AND (a.attname = 'collection' OR (c.relname = 'collection' AND a.attname = 'name'))
  AND c.relname <> ALL (%(unscoped)s)
ORDER BY c.relname
"""


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
        return cur.execute(_TABLES, {"schema": schema, "policy": POLICY,
                                     "unscoped": list(_UNSCOPED)}).fetchall()


def _one_value(conn: psycopg.Connection[Any], query: str | sql.Composed,
               params: tuple[Any, ...] | None = None) -> Any:
    """The first column of the first row of ``query``, or None when it returns no row."""
    with conn.cursor(row_factory=scalar_row) as cur:
        return cur.execute(query, params).fetchone()


def _require_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    found = _one_value(conn, "SELECT to_regprocedure(%s)", (
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
_SURFACE = """
SELECT 'VIEW' AS kind, format('%%I.%%I', n.nspname, c.relname) AS name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema)s AND c.relkind IN ('v', 'm')
UNION ALL
SELECT 'FUNCTION', p.oid::regprocedure::text
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = %(schema)s AND p.prosecdef AND p.proname <> 'tenant_collections'
ORDER BY 1, 2
"""


def surface_role(schema: str) -> str:
    """The role that owns the published surface while tenancy is enabled."""
    return f"{schema}_tenant_views"[:63]


def _surface(conn: psycopg.Connection[Any], schema: str) -> list[SurfaceObject]:
    with conn.cursor(row_factory=class_row(SurfaceObject)) as cur:
        return cur.execute(_SURFACE, {"schema": schema}).fetchall()


def _hand_surface(conn: psycopg.Connection[Any], schema: str, owner: sql.Composable) -> None:
    for item in _surface(conn, schema):
        # regprocedure's text and format('%I.%I') are quoted already: SQL() keeps them so.
        conn.execute(sql.SQL("ALTER {} {} OWNER TO {}").format(
            sql.SQL(item.kind), sql.SQL(item.name), owner))


def _surface_owner(conn: psycopg.Connection[Any], schema: str) -> sql.Identifier:
    name = surface_role(schema)
    role = sql.Identifier(name)
    nsp = sql.Identifier(schema)
    if not _one_value(conn, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = %s)", (name,)):
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT")
                     .format(role))
    # Handing an object to a role needs the right to become it: a CREATEROLE owner that is no
    # superuser holds only ADMIN on the role it created (PostgreSQL 16 and later).
    if not _one_value(conn, "SELECT pg_has_role(current_user, %s, 'SET')", (name,)):
        conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(role))
    conn.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(nsp, role))
    conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(nsp, role))
    conn.execute(sql.SQL("REVOKE ALL ON {}.tenant_collection, {}.tenant_role FROM {}")
                 .format(nsp, nsp, role))
    return role


def enable(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[str]:
    """Install the tenant policy on every table with a collection, FORCE ROW LEVEL SECURITY,
    and hand the views and SECURITY DEFINER functions to the surface role (above); idempotent
    (rerun after a migration added a table or view). Returns the tables held. Needs the
    owner of ragpg's objects with CREATEROLE (or a superuser)."""
    with conn.transaction():
        _require_schema(conn, schema)
        nsp = sql.Identifier(schema)
        _hand_surface(conn, schema, _surface_owner(conn, schema))
        held = []
        for table in _tables(conn, schema):
            target = sql.SQL("{}.{}").format(nsp, sql.Identifier(table.name))
            rule = sql.SQL("{} = ANY ((SELECT {}.tenant_collections())::text[])").format(
                sql.Identifier(table.column), nsp)
            conn.execute(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(
                sql.Identifier(POLICY), target))
            conn.execute(sql.SQL("CREATE POLICY {} ON {} USING ({}) WITH CHECK ({})").format(
                sql.Identifier(POLICY), target, rule, rule))
            conn.execute(sql.SQL("ALTER TABLE {} ENABLE ROW LEVEL SECURITY").format(target))
            conn.execute(sql.SQL("ALTER TABLE {} FORCE ROW LEVEL SECURITY").format(target))
            held.append(table.name)
    return held


def disable(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[str]:
    """Remove the tenant policy and row-level security from every table that has them."""
    released = []
    with conn.transaction():
        owner = _one_value(conn, "SELECT nspowner::regrole::text FROM pg_namespace"
                                 " WHERE nspname = %s", (schema,))
        if owner is not None:
            _hand_surface(conn, schema, sql.SQL(owner))  # regrole's text is quoted
        surface = surface_role(schema)
        if _one_value(conn, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = %s)", (surface,)):
            nsp, role = sql.Identifier(schema), sql.Identifier(surface)
            conn.execute(sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}").format(nsp, role))
            conn.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM {}").format(nsp, role))
        for table in _tables(conn, schema):
            target = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table.name))
            if table.has_policy:
                conn.execute(sql.SQL("DROP POLICY {} ON {}").format(sql.Identifier(POLICY), target))
            if table.forced:
                conn.execute(sql.SQL("ALTER TABLE {} NO FORCE ROW LEVEL SECURITY").format(target))
            if table.rls:
                conn.execute(sql.SQL("ALTER TABLE {} DISABLE ROW LEVEL SECURITY").format(target))
            if table.has_policy or table.rls or table.forced:
                released.append(table.name)
    return released


def assign(conn: psycopg.Connection[Any], tenant: str, collections: list[str],
           schema: str = "ragpg", *, remove: bool = False) -> list[str]:
    """Give ``collections`` to ``tenant`` (or take them back); returns its collections."""
    check_tenant(tenant)
    table = sql.SQL("{}.tenant_collection").format(sql.Identifier(schema))
    with conn.transaction():
        _require_schema(conn, schema)
        for collection in collections:
            if remove:
                conn.execute(sql.SQL("DELETE FROM {} WHERE tenant = %s AND collection = %s")
                             .format(table), (tenant, collection))
            else:
                conn.execute(sql.SQL("INSERT INTO {} (tenant, collection) VALUES (%s, %s)"
                                     " ON CONFLICT DO NOTHING").format(table), (tenant, collection))
        with conn.cursor(row_factory=scalar_row) as cur:
            return cur.execute(sql.SQL("SELECT collection FROM {} WHERE tenant = %s ORDER BY 1")
                               .format(table), (tenant,)).fetchall()


def status(conn: psycopg.Connection[Any], schema: str = "ragpg") -> TenancyStatus:
    """The tables held by the policy, those not held, the tenants and the registered roles."""
    with conn.transaction():
        _require_schema(conn, schema)
        tables = _tables(conn, schema)
        nsp = sql.Identifier(schema)
        tenants: dict[str, list[str]] = {}
        with conn.cursor(row_factory=dict_row) as cur:
            for row in cur.execute(sql.SQL("SELECT tenant, collection FROM {}.tenant_collection"
                                           " ORDER BY 1, 2").format(nsp)):
                tenants.setdefault(row["tenant"], []).append(row["collection"])
            roles = {row["role"]: row["tenant"] for row in cur.execute(
                sql.SQL("SELECT role, tenant FROM {}.tenant_role ORDER BY 1").format(nsp))}
    return TenancyStatus(scoped=tuple(t.name for t in tables if t.held),
                         unscoped=tuple(t.name for t in tables if not t.held),
                         tenants=tenants, roles=roles)


__all__ = ["SETTING", "Scoped", "TenancyStatus", "acting_for", "active", "assign", "disable",
           "enable", "scoped", "statement", "status"]
