"""CLI commands of the SQL surface (``ragpg roles ...``, ``ragpg tenancy ...``, ``ragpg
permissions ...``), attached to the main group."""

from __future__ import annotations

import click

from rag_pg.cli._common import EXIT_OK, Context, emit_json, run_guarded
from rag_pg.config import env_secret
from rag_pg.config.principals import principals as principals_of
from rag_pg.config.sections import READER_CONNECTION_LIMIT, READER_STATEMENT_TIMEOUT
from rag_pg.errors import ConfigError


@click.group("roles")
def roles() -> None:
    """Database roles for people and tools that reach the index through SQL."""


@roles.command("create-reader")
@click.argument("name")
@click.option(
    "--password-env",
    metavar="VAR",
    help="Set the role's password from environment variable VAR (never from the command line,"
    " where it would show in the shell history and process list). Without it, a new role has"
    " no password and an existing one keeps its own.",
)
@click.option(
    "--statement-timeout",
    default=READER_STATEMENT_TIMEOUT,
    show_default=True,
    help="The role's statement_timeout (e.g. 500ms, 30s, 2min): a runaway dashboard query is"
    " cancelled.",
)
@click.option(
    "--connection-limit",
    type=int,
    default=READER_CONNECTION_LIMIT,
    show_default=True,
    help="Most concurrent connections of the role (-1: no limit).",
)
@click.option("--tenant", metavar="T", default=None,
              help="Bind the role to tenant T: under tenancy it sees T's collections only,"
              " and cannot choose another tenant (docs/tenancy.md).")
@click.option("--principals", metavar="P,...", default=None,
              help="Bind the role to these principals: with permissions enabled it reads only"
              " the documents they may read, whatever it sets (docs/permissions.md).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def create_reader(
    obj: Context,
    name: str,
    password_env: str | None,
    statement_timeout: str,
    connection_limit: int,
    tenant: str | None,
    principals: str | None,
    as_json: bool,
) -> None:
    """Create (or update) NAME: a read-only login for BI tools and psql.

    NAME gets SELECT on ragpg's published views, EXECUTE on its SQL functions (keyword_search),
    a statement_timeout and nothing else: no access to the base tables, no writes, no CREATE.
    Safe to rerun, e.g. after `ragpg init` upgraded the schema. Needs a user with CREATEROLE
    that owns ragpg's objects (the one that ran `ragpg init`).
    """
    from rag_pg.store import roles as roles_lib


    def go() -> int:
        password = _password(password_env)
        rag = obj.rag()
        with rag.source.connection() as conn:
            role = roles_lib.create_reader(
                conn,
                name,
                schema=obj.settings.database.schema,
                password=password,
                statement_timeout=statement_timeout,
                connection_limit=connection_limit,
                tenant=tenant,
                principals=None if principals is None else principals_of(principals),
            )
        if as_json:
            emit_json(role.to_dict())
        else:
            verb = "created" if role.created else "updated"
            click.echo(
                f"role {role.name} {verb} in database {role.database}: LOGIN"
                f" (connection limit {role.connection_limit}), SELECT on"
                f" {', '.join(f'{role.schema}.{v}' for v in role.views)}; EXECUTE on"
                f" {', '.join(f'{role.schema}.{f}' for f in role.functions)};"
                f" statement_timeout {role.statement_timeout}"
                + ("; password set" if role.password_set else "")
                + (f"; bound to tenant {role.tenant}" if role.tenant else "")
                + (f"; reads as {', '.join(role.principals) or 'no principal'}"
                   if role.principals is not None else "")
            )
        return EXIT_OK

    run_guarded(go)


def _password(password_env: str | None) -> str | None:
    if password_env is None:
        return None
    password = env_secret(password_env)
    if not password:
        raise ConfigError(f"--password-env {password_env}: that variable is unset or empty")
    return password


@roles.command("create-runtime")
@click.argument("name")
@click.option("--password-env", metavar="VAR",
              help="Set the role's password from environment variable VAR.")
@click.option("--connection-limit", type=int, default=-1, show_default=True,
              help="Most concurrent connections of the role (-1: no limit).")
@click.pass_obj
def create_runtime(obj: Context, name: str, password_env: str | None, connection_limit: int) -> None:
    """Create (or update) NAME: the login an application runs ragpg as under tenancy.

    NAME reads and writes ragpg's tables (never TRUNCATE), names its tenant per transaction
    and is held to it by the policies; it is not the owner, not superuser, not BYPASSRLS.
    Run as the user that ran `ragpg init`.
    """
    from rag_pg.store import roles as roles_lib


    def go() -> int:
        password = _password(password_env)
        with obj.rag().source.connection() as conn:
            role = roles_lib.create_runtime(conn, name, schema=obj.settings.database.schema,
                                            password=password, connection_limit=connection_limit)
        verb = "created" if role.created else "updated"
        click.echo(f"role {role.name} {verb} in database {role.database}: runtime role of"
                   f" schema {role.schema} (reads and writes, tenant per transaction)"
                   + ("; password set" if role.password_set else ""))
        return EXIT_OK

    run_guarded(go)


@click.group("tenancy")
def tenancy() -> None:
    """Tenants isolated by row-level security (docs/tenancy.md)."""


@tenancy.command("enable")
@click.pass_obj
def tenancy_enable(obj: Context) -> None:
    """Install the tenant policy, FORCE ROW LEVEL SECURITY, on every table with a collection.

    Idempotent: rerun after `ragpg init` upgraded the schema. Run as the owner.
    """
    from rag_pg.store import tenancy as tenancy_lib


    def go() -> int:
        with obj.rag().source.connection() as conn:
            held = tenancy_lib.enable(conn, obj.settings.database.schema)
        click.echo(f"tenant policy on {len(held)} tables: {', '.join(held)}")
        return EXIT_OK

    run_guarded(go)


@tenancy.command("disable")
@click.pass_obj
def tenancy_disable(obj: Context) -> None:
    """Remove the tenant policies and row-level security (every role sees every row again)."""
    from rag_pg.store import tenancy as tenancy_lib


    def go() -> int:
        with obj.rag().source.connection() as conn:
            released = tenancy_lib.disable(conn, obj.settings.database.schema)
        click.echo(f"row-level security removed from {len(released)} tables")
        return EXIT_OK

    run_guarded(go)


@tenancy.command("assign")
@click.argument("tenant")
@click.argument("collections", nargs=-1, required=True)
@click.option("--remove", is_flag=True, help="Take the collections away from TENANT instead.")
@click.pass_obj
def tenancy_assign(obj: Context, tenant: str, collections: tuple[str, ...], remove: bool) -> None:
    """Give COLLECTIONS to TENANT (a tenant sees exactly its collections)."""
    from rag_pg.store import tenancy as tenancy_lib


    def go() -> int:
        with obj.rag().source.connection() as conn:
            held = tenancy_lib.assign(conn, tenant, list(collections),
                                      obj.settings.database.schema, remove=remove)
        click.echo(f"tenant {tenant}: {', '.join(held) if held else 'no collections'}")
        return EXIT_OK

    run_guarded(go)


@tenancy.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def tenancy_status(obj: Context, as_json: bool) -> None:
    """Which tables the policy holds, the tenants and their collections, the roles."""
    from rag_pg.store import tenancy as tenancy_lib


    def go() -> int:
        with obj.rag().source.connection() as conn:
            state = tenancy_lib.status(conn, obj.settings.database.schema)
        if as_json:
            emit_json(state.to_dict())
            return EXIT_OK
        click.echo(f"tenancy {'enabled' if state.enabled else 'not enabled'}: policy on"
                   f" {', '.join(state.scoped) or 'no table'}"
                   + (f"; NOT on {', '.join(state.unscoped)}" if state.unscoped else ""))
        for name, held in state.tenants.items():
            click.echo(f"tenant {name}: {', '.join(held)}")
        for role, bound in state.roles.items():
            click.echo(f"role {role}: " + (f"reader of tenant {bound}" if bound else "runtime"))
        return EXIT_OK

    run_guarded(go)


@click.group("permissions")
def permissions() -> None:
    """Who may read which document, enforced by row-level security (docs/permissions.md)."""


@permissions.command("enable")
@click.pass_obj
def permissions_enable(obj: Context) -> None:
    """Install the reader policy on document, chunk and chunk_vector.

    Idempotent: rerun after `ragpg init` upgraded the schema. Run as the owner with CREATEROLE.
    """
    from rag_pg.store import permissions as permissions_lib

    def go() -> int:
        with obj.rag().source.connection() as conn:
            held = permissions_lib.enable(conn, obj.settings.database.schema)
        click.echo(f"reader policy on {len(held)} tables: {', '.join(held)}")
        return EXIT_OK

    run_guarded(go)


@permissions.command("disable")
@click.pass_obj
def permissions_disable(obj: Context) -> None:
    """Remove the reader policy (every login reads every document of its collections again)."""
    from rag_pg.store import permissions as permissions_lib

    def go() -> int:
        with obj.rag().source.connection() as conn:
            released = permissions_lib.disable(conn, obj.settings.database.schema)
        click.echo(f"reader policy removed from {len(released)} tables")
        return EXIT_OK

    run_guarded(go)


@permissions.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def permissions_status(obj: Context, as_json: bool) -> None:
    """Which tables the reader policy holds, and the readers bound to principals."""
    from rag_pg.store import permissions as permissions_lib

    def go() -> int:
        with obj.rag().source.connection() as conn:
            state = permissions_lib.status(conn, obj.settings.database.schema)
        if as_json:
            emit_json(state.to_dict())
            return EXIT_OK
        click.echo(f"permissions {'enabled' if state.enabled else 'not enabled'}: reader policy on"
                   f" {', '.join(state.held) or 'no table'}"
                   + (f"; NOT on {', '.join(state.not_held)}" if state.not_held else ""))
        for role, bound in state.readers.items():
            click.echo(f"role {role}: reads as {', '.join(bound) or 'no principal'}")
        return EXIT_OK

    run_guarded(go)


COMMANDS = [roles, tenancy, permissions]
