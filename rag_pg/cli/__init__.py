"""The ``ragpg`` command: builds Settings once, calls one library function per command, prints.

Each area's commands live in their own module of this package and are attached here.
"""

from __future__ import annotations

import signal
import sys

import click

from rag_pg.cli import db, embeddings, index, retrieval, search, service, sql, tree
from rag_pg.cli._common import (
    EXIT_TERMINATED,
    EXIT_USAGE,
    Context,
    Terminated,
    connection_error,
    connection_lost,
    fail,
    on_sigint,
    on_sigterm,
    redeliver_swallowed_interrupts,
    stop_now,
)
from rag_pg.errors import ConfigError, StoreError

EXIT_UNAVAILABLE = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--database-url", envvar=None, help="PostgreSQL URL (default: RAGPG_DATABASE_URL, DATABASE_URL, config, else the embedded server).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="A ragpg.toml (or pyproject.toml with [tool.ragpg]).")
@click.option("--schema", default=None, help="Postgres schema of the index (default ragpg).")
@click.option("--as", "acting", metavar="PRINCIPAL", multiple=True,
              help="Read as this principal (repeat for several): only the documents it may read"
              " (docs/permissions.md; default: permissions.principals, else every document).")
@click.option("--verbose", "-v", is_flag=True,
              help="Say more on stderr: the embedded PostgreSQL used, psycopg_pool's connection log.")
@click.version_option(package_name="ragpg")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, config_file: str | None, schema: str | None,
        acting: tuple[str, ...], verbose: bool) -> None:
    """ragpg: hybrid retrieval (pgvector + keywords) over a Markdown tree, with citable provenance."""
    overrides = {"database.schema": schema,
                 "permissions.principals": ",".join(acting) if acting else None}
    context = Context(database_url, config_file, overrides, verbose=verbose)
    ctx.obj = context
    ctx.call_on_close(context.close)



for _module in (index, search, retrieval, embeddings, service, sql, tree, db):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main() -> None:
    # SIGTERM (a service manager, `timeout`, docker stop) ends a command like Ctrl-C does:
    # cleanups run and one line says why. `ragpg serve` installs its own handler.
    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = redeliver_swallowed_interrupts
    try:
        cli.main(standalone_mode=False, prog_name="ragpg")
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except Terminated:
        stop_now("terminated (SIGTERM)", EXIT_TERMINATED)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, Terminated):  # click turns an interrupt into Abort
            stop_now("terminated (SIGTERM)", EXIT_TERMINATED)
        stop_now("aborted", 130)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except StoreError as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except Exception as exc:
        if not connection_error(exc):
            raise
        fail(connection_lost(exc), EXIT_UNAVAILABLE)


