"""CLI commands of the SQL surface (``ragpg roles create-reader``), attached to the main group."""

from __future__ import annotations

import os

import click

from . import roles as roles_lib
from .cli import EXIT_OK, Context, cli, emit_json, run_guarded
from .errors import ConfigError


def _roles_group() -> click.Group:
    """The ``roles`` group: another module may define it first; this one adds to it."""
    existing = cli.commands.get("roles")
    if isinstance(existing, click.Group):
        return existing

    @cli.group("roles")
    def roles() -> None:
        """Database roles for people and tools that reach the index through SQL."""

    return roles


@_roles_group().command("create-reader")
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
    default=roles_lib.DEFAULT_STATEMENT_TIMEOUT,
    show_default=True,
    help="The role's statement_timeout (e.g. 500ms, 30s, 2min): a runaway dashboard query is"
    " cancelled.",
)
@click.option(
    "--connection-limit",
    type=int,
    default=roles_lib.DEFAULT_CONNECTION_LIMIT,
    show_default=True,
    help="Most concurrent connections of the role (-1: no limit).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def create_reader(
    obj: Context,
    name: str,
    password_env: str | None,
    statement_timeout: str,
    connection_limit: int,
    as_json: bool,
) -> None:
    """Create (or update) NAME: a read-only login for BI tools and psql.

    NAME gets SELECT on ragpg's published views, EXECUTE on its SQL functions (keyword_search),
    a statement_timeout and nothing else: no access to the base tables, no writes, no CREATE.
    Safe to rerun, e.g. after `ragpg init` upgraded the schema. Needs a user with CREATEROLE
    that owns ragpg's objects (the one that ran `ragpg init`).
    """

    def go() -> int:
        password = None
        if password_env is not None:
            password = os.environ.get(password_env)
            if not password:
                raise ConfigError(f"--password-env {password_env}: that variable is unset or empty")
        rag = obj.rag()
        with rag.source.connection() as conn:
            role = roles_lib.create_reader(
                conn,
                name,
                schema=obj.settings.database.schema,
                password=password,
                statement_timeout=statement_timeout,
                connection_limit=connection_limit,
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
            )
        return EXIT_OK

    run_guarded(go)
