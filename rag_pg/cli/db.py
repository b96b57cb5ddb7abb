"""``ragpg db``: the embedded PostgreSQL as a server of its own (a team's, a BI tool's)."""

from __future__ import annotations

from pathlib import Path

import click

from rag_pg.cli._common import EXIT_OK, EXIT_UNAVAILABLE, Context, emit_json, run_guarded, warn
from rag_pg.config.sections import listen_address
from rag_pg.errors import ConfigError
from rag_pg.store import embedded


def _data_dir(obj: Context) -> Path:

    configured = obj.settings.database.data_dir
    return embedded.resolve(Path(configured) if configured else None)


def _where(server: embedded.ServerState) -> str:
    tcp = f"TCP {server.listen}:{server.port} (SCRAM passwords)" if server.listen else "no TCP"
    return f"pid {server.pid}, socket in {server.socket_dir}, {tcp}"


@click.group("db")
def db() -> None:
    """The embedded PostgreSQL as a server that outlives commands (for a team, BI tools, psql).

    `[embedded] listen = "127.0.0.1:5433"` makes it accept TCP connections, by SCRAM password
    only. Every ragpg command joins a server started here and leaves it running.
    """


@db.command("start")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def start(obj: Context, as_json: bool) -> None:
    """Start the embedded server (creating it the first time); nothing if it already runs."""


    def go() -> int:
        settings = obj.settings.embedded
        listen = listen_address(settings.listen) if settings.listen else None
        server, started = embedded.start_server(_data_dir(obj), listen, settings.password_env)
        if as_json:
            emit_json({**server.to_dict(), "started": started})
        else:
            verb = "started" if started else "already running:"
            click.echo(f"{verb} the embedded PostgreSQL in {server.data_dir} ({_where(server)})")
        wanted = listen[0] if listen else None
        if not started and (server.listen, server.port if listen else None) != (
                wanted, listen[1] if listen else None):
            warn(f"it listens on {server.listen or 'no TCP'}{f':{server.port}' if server.listen else ''},"
                 f" not embedded.listen = {settings.listen or 'none'}: `ragpg db stop` and start"
                 " it again to change that")
        return EXIT_OK

    run_guarded(go)


@db.command("stop")
@click.pass_obj
def stop(obj: Context) -> None:
    """Stop the embedded server (its sessions are ended); nothing if it does not run."""


    def go() -> int:
        data_dir = _data_dir(obj)
        stopped = embedded.stop_server(data_dir)
        click.echo(f"{'stopped' if stopped else 'not running:'} the embedded PostgreSQL in {data_dir}")
        return EXIT_OK

    run_guarded(go)


@db.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def status(obj: Context, as_json: bool) -> None:
    """Whether the embedded server runs, and where; exit 0 if it does, 3 if not."""


    def go() -> int:
        server = embedded.state(_data_dir(obj))
        if as_json:
            emit_json(server.to_dict())
        elif server.running:
            kind = "" if server.managed else " (for another ragpg command, stopped when it exits)"
            click.echo(f"running{kind}: {server.data_dir} ({_where(server)})")
        else:
            click.echo(f"not running: {server.data_dir}")
        return EXIT_OK if server.running else EXIT_UNAVAILABLE

    run_guarded(go)


@db.command("url")
@click.option("--user", default=embedded.SUPERUSER, show_default=True,
              help="Role to connect as (a reader made by `ragpg roles create-reader`).")
@click.pass_obj
def url(obj: Context, user: str) -> None:
    """Print the TCP connection string for a BI tool or psql, without any password.

    libpq reads the password from PGPASSWORD (or ~/.pgpass); a BI tool asks for it apart.
    """


    def go() -> int:
        settings = obj.settings.embedded
        if settings.listen:
            host, port = listen_address(settings.listen)
        else:
            server = embedded.state(_data_dir(obj))
            if not (server.running and server.listen and server.port):
                raise ConfigError("the embedded server listens on no TCP address: set"
                                  " embedded.listen (e.g. 127.0.0.1:5433) and run `ragpg db start`")
            host, port = server.listen, server.port
        if host in ("0.0.0.0", "::", "*"):
            import socket

            host = socket.getfqdn()
        click.echo(embedded.tcp_url(host, port, user))
        return EXIT_OK

    run_guarded(go)


COMMANDS = [db]
