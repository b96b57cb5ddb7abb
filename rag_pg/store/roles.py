"""Least-privilege database roles: a login for BI tools that sees the published SQL surface only.

A reader gets exactly: LOGIN; CONNECT on the current database (PUBLIC's default, granted to
the role only where it was revoked from PUBLIC); USAGE on ragpg's schema;
SELECT on the published views (:data:`PUBLISHED_VIEWS`); EXECUTE on the published functions
(:data:`PUBLISHED_FUNCTIONS`); and, as role settings, a ``statement_timeout`` and
``default_transaction_read_only = on``. No attribute beyond LOGIN (not superuser, no
CREATEDB/CREATEROLE/REPLICATION/BYPASSRLS), no membership in another role, nothing on the
base tables, no CREATE anywhere in the schema.

That is enough because the views run with their owner's rights (PostgreSQL's default) and
``keyword_search`` is SECURITY DEFINER with a fixed ``search_path`` (migration 0002): the
reader never needs the tables. The lists are explicit on purpose: a view or function added
by a later migration stays private until it is added here (fail closed), and a test fails
until it is (tests/test_sql_surface.py compares these lists with the catalog).

Limits worth knowing: ``statement_timeout`` and ``default_transaction_read_only`` are role
defaults that a session may SET itself (PostgreSQL cannot lock a setting per role), so they
guard against runaway dashboards, not a hostile user; the privileges are what stop writes.
A role may even change its own defaults for later sessions (``ALTER ROLE ... SET``, which
PostgreSQL allows every role on itself): :func:`drifted_readers` finds such a reader (``ragpg
check`` reports it) and rerunning :func:`create_reader` puts the defaults back.
Any role that can connect keeps what PUBLIC has (temporary tables, and CREATE on schema
``public`` before PostgreSQL 15; harden those with ``REVOKE ... FROM PUBLIC``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, scalar_row

from rag_pg.config import check_identifier
from rag_pg.config.sections import READER_CONNECTION_LIMIT as DEFAULT_CONNECTION_LIMIT
from rag_pg.config.sections import READER_STATEMENT_TIMEOUT as DEFAULT_STATEMENT_TIMEOUT
from rag_pg.errors import ConfigError, SchemaMissing, StoreError
from rag_pg.store import distribution, permissions
from rag_pg.store.queries import Queries
from rag_pg.store.queries import statement as named

PUBLISHED_VIEWS: tuple[str, ...] = ("documents_v", "chunks_v", "ingest_runs_v", "corpus_stats_v")
"""Views a reader may SELECT (created by migration 0002)."""

PUBLISHED_FUNCTIONS: tuple[tuple[str, str], ...] = (
    ("acting_principals", ""),  # what a reader reads as (permissions; the policies call it)
    ("keyword_search", "text, integer, text"),
    ("tenant_collections", ""),
)
"""Functions a reader may EXECUTE, as (name, argument types): ``tenant_collections()`` is what
the tenant policies call (migration 0010), so every role reading under tenancy needs it."""


# Advisory-lock key (one bigint, a space apart from ingest's two-int keys): two concurrent
# create-reader runs for one name would otherwise race on CREATE ROLE.
_ROLES_LOCK = 0x7267_7067_726F_6C65  # "rgpgrole"
_TIMEOUT = re.compile(r"^\s*(\d+)\s*(ms|s|min|h|d)?\s*$")
_TIMEOUT_MS = {"ms": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class ReaderRole:
    """What :func:`create_reader` left in place (for printing and for callers to check)."""

    name: str
    schema: str
    database: str
    created: bool
    views: tuple[str, ...]
    functions: tuple[str, ...]
    statement_timeout: str
    connection_limit: int
    password_set: bool
    tenant: str | None = None
    principals: tuple[str, ...] | None = None  # bound: it reads as these (permissions)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["views"] = list(self.views)
        data["functions"] = list(self.functions)
        return data


def normalise_timeout(value: str) -> str:
    """``30s``, ``500ms``, ``2min``, ``1h``; a bare number is milliseconds (as in PostgreSQL).

    Zero is refused: it means "no timeout", the opposite of what a reader role is for.
    """
    match = _TIMEOUT.match(value or "")
    if not match:
        raise ConfigError(
            f"statement timeout must look like 30s, 500ms, 2min or 1h (got {value!r})"
        )
    amount, unit = int(match.group(1)), match.group(2) or "ms"
    if amount <= 0:
        raise ConfigError("statement timeout must be positive: 0 would disable it")
    if amount * _TIMEOUT_MS[unit] > 2_147_483_647:
        raise ConfigError(f"statement timeout {value!r} is too large (PostgreSQL's limit is ~24 days)")
    return f"{amount}{unit}"


def _check_name(name: str) -> None:
    if not name or not name.strip():
        raise ConfigError("the role name is empty")
    if len(name.encode("utf-8")) > 63:
        raise ConfigError(f"role name {name!r} is longer than PostgreSQL's 63 bytes")
    if name.lower().startswith("pg_"):
        raise ConfigError(f"role names starting with pg_ are reserved by PostgreSQL ({name!r})")
    if "\x00" in name:
        raise ConfigError("the role name contains a NUL character")
    check_identifier(name, "the role name")


def create_reader(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    schema: str = "ragpg",
    password: str | None = None,
    statement_timeout: str = DEFAULT_STATEMENT_TIMEOUT,
    connection_limit: int = DEFAULT_CONNECTION_LIMIT,
    tenant: str | None = None,
    principals: tuple[str, ...] | None = None,
) -> ReaderRole:
    """Create the read-only role ``name``, or bring an existing one back to exactly that.

    With ``tenant``, the role is bound to that tenant (``tenant_role``): under tenancy it sees
    that tenant's collections and nothing else, whatever it sets (the policies read the
    binding from the login, not from a setting). Without, a rerun removes any binding: under
    tenancy such a reader sees no rows. With ``principals``, the role reads as them under the
    reader policy of permissions, whatever it sets; without, a rerun removes that binding too
    (it reads every document of what it may read).

    Idempotent: privileges on ragpg's schema are revoked and granted again, so a rerun
    (after a migration added a published view, say) converges. An existing role with more
    power than a reader (superuser, CREATEROLE..., a member of another role, an owner of
    ragpg objects) is refused rather than silently demoted. ``password=None`` keeps an
    existing role's password; it is hashed on the client (SCRAM) before it reaches the
    server, so it never appears in server logs. Runs in one transaction (a savepoint when
    the caller has one open) and needs CREATEROLE plus ownership of the schema's objects.
    """
    timeout = _check_reader(name, tenant, statement_timeout, connection_limit, password)
    role = sql.Identifier(name)
    try:
        with conn.transaction():
            conn.execute(named("roles_lock"), (_ROLES_LOCK,))
            database = _check_schema(conn, schema)
            created = _ensure_role(conn, name, schema, role, connection_limit)
            _set_password(conn, name, role, password)
            _grant_reading(conn, name, schema, database, timeout)
            _bind(conn, schema, name, tenant)
            permissions.bind_reader(conn, schema, name, principals)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StoreError(
            f"not allowed to create role {name!r} or grant on schema {schema!r}: run this as a"
            f" user with CREATEROLE that owns ragpg's objects (the one that ran `ragpg init`)"
            f" ({_one_line(exc)})"
        ) from None
    except psycopg.Error as exc:
        raise StoreError(f"could not create role {name!r}: {_one_line(exc)}") from None
    return ReaderRole(
        name=name,
        schema=schema,
        database=database,
        created=created,
        views=PUBLISHED_VIEWS,
        functions=tuple(f"{f}({a})" for f, a in PUBLISHED_FUNCTIONS),
        statement_timeout=timeout,
        connection_limit=connection_limit,
        password_set=password is not None,
        tenant=tenant,
        principals=principals,
    )


def _check_reader(name: str, tenant: str | None, statement_timeout: str, connection_limit: int,
                  password: str | None) -> str:
    """The reader's arguments checked before any statement; its statement timeout, normalised."""
    _check_name(name)
    if tenant is not None:
        from rag_pg.store.tenancy import check_tenant

        check_tenant(tenant)
    timeout = normalise_timeout(statement_timeout)
    if connection_limit < -1 or connection_limit == 0:
        raise ConfigError("connection limit must be positive, or -1 for no limit")
    if password is not None and (password == "" or "\x00" in password):
        raise ConfigError("the password is empty or contains a NUL character")
    return timeout


def _grant_reading(conn: psycopg.Connection[Any], name: str, schema: str, database: str,
                   timeout: str) -> None:
    """Exactly a reader's rights, whatever the role held before: read-only sessions with a
    statement timeout, SELECT on the published views, EXECUTE on the published functions."""
    role, q = sql.Identifier(name), Queries(schema)
    for setting, value in (("statement_timeout", timeout), ("default_transaction_read_only", "on")):
        conn.execute(named("role_setting").format(
            role=role, setting=sql.Identifier(setting), value=sql.Literal(value)))
    _revoke_all(conn, q, role)
    conn.execute(q.compose("role_revoke_schema", role=role))
    with conn.cursor(row_factory=dict_row) as cur:
        can_connect = cur.execute(named("role_may_connect"), (name,)).fetchone()
    if not (can_connect and can_connect["allowed"]):
        # PUBLIC's default CONNECT was revoked: grant it to this role alone.
        conn.execute(named("role_grant_connect").format(
            database=sql.Identifier(database), role=role))
    conn.execute(q.compose("role_grant_schema", role=role))
    for view in PUBLISHED_VIEWS:
        conn.execute(q.compose("role_grant_view", view=sql.Identifier(view), role=role))
    if distribution.distributed(conn, schema):
        # Citus runs a view's queries on the shards as the reader, not as the view's owner:
        # there the reader reads the index tables too (row-level security still holds it to
        # its tenant's rows; the tenancy's own tables stay closed to it).
        for table in distribution.DISTRIBUTED + ("collection",):
            conn.execute(q.compose("role_grant_view", view=sql.Identifier(table), role=role))
    _grant_functions(conn, q, role)


def _revoke_all(conn: psycopg.Connection[Any], q: Queries, role: sql.Identifier) -> None:
    for kind in ("TABLES", "SEQUENCES", "ROUTINES"):
        conn.execute(q.compose("role_revoke_all_in_schema", kind=sql.SQL(kind), role=role))


def _grant_functions(conn: psycopg.Connection[Any], q: Queries, role: sql.Identifier) -> None:
    for function, args in PUBLISHED_FUNCTIONS:
        conn.execute(q.compose("role_grant_function", function=sql.Identifier(function),
                               args=sql.SQL(args), role=role))


def create_runtime(
    conn: psycopg.Connection[Any],
    name: str,
    *,
    schema: str = "ragpg",
    password: str | None = None,
    connection_limit: int = -1,
) -> ReaderRole:
    """Create (or update) ``name``: the login an application runs ragpg as under tenancy.

    It may read and write ragpg's tables (SELECT, INSERT, UPDATE, DELETE; never TRUNCATE,
    which row-level security does not filter) and names its tenant per transaction, which the
    policies then hold it to. It is neither the tables' owner (no DDL, so it cannot switch
    row-level security off) nor superuser nor BYPASSRLS: :func:`_ensure_role` refuses a role
    with any such power. It cannot run `ragpg init`: the owner migrates.
    """
    _check_name(name)
    if connection_limit < -1 or connection_limit == 0:
        raise ConfigError("connection limit must be positive, or -1 for no limit")
    role = sql.Identifier(name)
    q = Queries(schema)
    try:
        with conn.transaction():
            conn.execute(named("roles_lock"), (_ROLES_LOCK,))
            database = _check_schema(conn, schema)
            created = _ensure_role(conn, name, schema, role, connection_limit)
            _set_password(conn, name, role, password)
            conn.execute(named("role_reset").format(role=role))
            _revoke_all(conn, q, role)
            conn.execute(q.compose("role_grant_schema", role=role))
            conn.execute(q.compose("runtime_role_grants", role=role))
            _grant_functions(conn, q, role)
            conn.execute(q("runtime_role_register"), (name,))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StoreError(
            f"not allowed to create role {name!r} or grant on schema {schema!r}: run this as a"
            f" user with CREATEROLE that owns ragpg's objects ({_one_line(exc)})"
        ) from None
    except psycopg.Error as exc:
        raise StoreError(f"could not create role {name!r}: {_one_line(exc)}") from None
    return ReaderRole(name=name, schema=schema, database=database, created=created,
                      views=(), functions=(), statement_timeout="", password_set=password is not None,
                      connection_limit=connection_limit, tenant=None)


def _set_password(conn: psycopg.Connection[Any], name: str, role: sql.Identifier,
                  password: str | None) -> None:
    """Hashed on the client (SCRAM): the password never reaches the server's logs."""
    if password is None:
        return
    if password == "" or "\x00" in password:
        raise ConfigError("the password is empty or contains a NUL character")
    verifier = conn.pgconn.encrypt_password(
        password.encode("utf-8"), name.encode("utf-8"), None).decode("ascii")
    conn.execute(named("role_password").format(role=role, verifier=sql.Literal(verifier)))


def _bind(conn: psycopg.Connection[Any], schema: str, name: str, tenant: str | None) -> None:
    """Record the reader's tenant (the policies read it), or remove any former binding."""
    q = Queries(schema)
    if tenant is None:
        conn.execute(q("reader_unbind"), (name,))
        return
    conn.execute(q("reader_bind"), (name, tenant))


def _runtime_roles(conn: psycopg.Connection[Any], schema: str) -> set[str]:
    q = Queries(schema)
    with conn.cursor(row_factory=scalar_row) as cur:
        if cur.execute(named("tenant_role_table"), (q.table("tenant_role"),)).fetchone() is None:
            return set()
        return set(cur.execute(q("runtime_roles")))


def drifted_readers(conn: psycopg.Connection[Any], schema: str = "ragpg") -> list[tuple[str, str]]:
    """``(role, what changed)`` for each reader whose timeout or read-only default is gone."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(Queries(schema)("readers"),
                           {"schema": schema, "view": PUBLISHED_VIEWS[0]}).fetchall()
    runtime = _runtime_roles(conn, schema)  # they write: no read-only default to keep
    out = []
    for row in rows:
        if row["name"] in runtime:
            continue
        config = dict(item.split("=", 1) for item in row["config"] if "=" in item)
        problems = []
        try:
            normalise_timeout(config.get("statement_timeout", "0"))
        except ConfigError:
            problems.append(f"statement_timeout is {config.get('statement_timeout', 'unset')}")
        if config.get("default_transaction_read_only", "off").lower() not in ("on", "true", "1"):
            problems.append("default_transaction_read_only is off")
        if problems:
            out.append((str(row["name"]), "; ".join(problems)))
    return out


def _check_schema(conn: psycopg.Connection[Any], schema: str) -> str:
    """The database name, once every published object is known to exist."""
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(named("published_views_present"),
                           (schema, list(PUBLISHED_VIEWS))).fetchall()
        missing = sorted(set(PUBLISHED_VIEWS) - {r["relname"] for r in rows})
        for function, args in PUBLISHED_FUNCTIONS:
            signature = sql.SQL("{}.{}({})").format(
                sql.Identifier(schema), sql.Identifier(function), sql.SQL(args)).as_string(conn)
            found = cur.execute(named("function_present"), (signature,)).fetchone()
            if not found or found["proc"] is None:
                missing.append(f"{function}()")
        if missing:
            raise SchemaMissing(
                f"schema {schema!r} lacks {', '.join(missing)}: run `ragpg init` to upgrade it first"
            )
        row = cur.execute(named("database_name")).fetchone()
    assert row is not None
    return str(row["name"])


def _ensure_role(
    conn: psycopg.Connection[Any], name: str, schema: str, role: sql.Identifier, limit: int
) -> bool:
    """Create the role, or check an existing one is safe to turn into a reader; True if new."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(named("role_powers"), {"name": name, "schema": schema}).fetchone()
    if row is None:
        conn.execute(named("role_create").format(role=role, limit=sql.Literal(limit)))
        return True
    powers = [label for label, flag in (
        ("SUPERUSER", row["rolsuper"]), ("CREATEDB", row["rolcreatedb"]),
        ("CREATEROLE", row["rolcreaterole"]), ("REPLICATION", row["rolreplication"]),
        ("BYPASSRLS", row["rolbypassrls"]),
    ) if flag]
    if row["is_self"]:
        powers.append("it is the current user")
    if row["member_of"]:
        powers.append(f"member of {row['member_of']}")
    if row["owner"]:
        powers.append(f"owner of objects in schema {schema!r}")
    if powers:
        raise ConfigError(
            f"role {name!r} already exists with more rights than a reader ({'; '.join(powers)}):"
            " choose another name, or drop that role first"
        )
    conn.execute(named("role_login").format(role=role, limit=sql.Literal(limit)))
    return False


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


__all__ = [
    "DEFAULT_CONNECTION_LIMIT",
    "DEFAULT_STATEMENT_TIMEOUT",
    "PUBLISHED_FUNCTIONS",
    "PUBLISHED_VIEWS",
    "ReaderRole",
    "create_reader",
    "create_runtime",
    "drifted_readers",
    "normalise_timeout",
]
