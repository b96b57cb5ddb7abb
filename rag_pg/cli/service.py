"""CLI commands of the service area, attached to the main `ragpg` group: ``serve`` and ``mcp``.

FastAPI, uvicorn and the MCP SDK are imported inside the commands: they come with the
``serve`` extra, and the rest of the CLI must work without them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

import click

from rag_pg.cli._common import EXIT_OK, Context, run_guarded
from rag_pg.config.loader import environment
from rag_pg.errors import ConfigError

_SECRET_WORDS = ("KEY", "TOKEN", "PASSWORD", "SECRET")


def _env_secrets() -> list[str]:
    """Values of environment variables that look like credentials, to scrub them from logs."""
    return [value for name, value in environment().items()
            if any(word in name.upper() for word in _SECRET_WORDS) and len(value) >= 8]


def _need_extra(exc: ImportError) -> ConfigError:
    return ConfigError(f"this command needs the serve extra ({exc.name} is missing):"
                       " pip install 'ragpg[serve]'")


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs server.token.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port; 0 picks a free one (logged in the 'listening' line).")
@click.pass_obj
def serve(obj: Context, host: str, port: int) -> None:
    """Serve the HTTP retrieval API and the inspection page at / (POST /search, /locate, GET
    /documents, /stats, /runs, /collections, /health, /docs).

    Logs are JSON lines on stderr. With server.token (or RAGPG_SERVER_TOKEN) set, every
    endpoint but /health and the docs needs "Authorization: Bearer <token>".
    """
    from rag_pg.serve.listen import listen


    def go() -> int:
        try:
            import uvicorn

            from rag_pg.serve.http import create_app
        except ImportError as exc:
            raise _need_extra(exc) from None
        from rag_pg.serve.auth import callers, check_bind
        from rag_pg.serve.failures import Secrets, log_event, setup_logging
        from rag_pg.serve.rules import Limits

        settings = obj.settings
        check_bind(host, next(iter(callers(settings)), None))
        Limits.from_settings(settings)
        embedded = settings.database.url is None
        sock = listen(host, port, who="ragpg serve")
        try:
            rag = obj.rag(announce=False)
            secrets = Secrets.from_settings(obj.settings, _env_secrets())
            setup_logging(secrets)
            log = logging.getLogger("ragpg.server")
            if embedded:
                log_event(log, logging.INFO, "using the embedded PostgreSQL (set RAGPG_DATABASE_URL"
                          " to use another)", event="database")

            def warn(message: str) -> None:
                log_event(log, logging.WARNING, message, event="warning")

            rag.warn = warn
            app = create_app(rag, obj.settings, secrets=secrets, logger=log)
            config = uvicorn.Config(app, log_config=None, access_log=False, server_header=False,
                                    proxy_headers=False, lifespan="on", timeout_graceful_shutdown=10)
            server = uvicorn.Server(config)
            bound = sock.getsockname()
            shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            log_event(log, logging.INFO, f"listening on http://{shown}:{bound[1]}", event="listening",
                      host=bound[0], port=bound[1], url=f"http://{shown}:{bound[1]}")
            # uvicorn re-raises the signal that stopped it once it has shut down; with Python's
            # default SIGTERM action that would kill the process before the pool is closed. Ours
            # asks uvicorn to stop (a signal during startup included) and lets the pool close.
            def stop(number: int, frame: Any) -> None:
                server.should_exit = True

            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, stop)
            server.run(sockets=[sock])
        finally:
            sock.close()
        obj.close()
        log_event(log, logging.INFO, "stopped; database pool closed", event="stopped")
        return EXIT_OK

    run_guarded(go)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send anything printed during startup (ours or a child process's) to stderr.

    stdout belongs to the MCP protocol: one stray line there breaks the client.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        with contextlib.redirect_stdout(sys.stderr):
            yield
        return
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@click.command("mcp")
@click.pass_obj
def mcp_command(obj: Context) -> None:
    """Serve the MCP tools `search` and `get_document` over stdio, for agents.

    stdout carries only the protocol; warnings and logs go to stderr.
    """

    def go() -> int:
        server: Any
        with _stdout_to_stderr():
            try:
                from rag_pg.serve.mcp import create_server, run_stdio
            except ImportError as exc:
                raise _need_extra(exc) from None
            from rag_pg.serve.failures import Secrets, setup_logging
            from rag_pg.serve.rules import Limits

            Limits.from_settings(obj.settings)
            rag = obj.rag()
            secrets = Secrets.from_settings(obj.settings, _env_secrets())
            server = create_server(rag, obj.settings, secrets=secrets)
            # After create_server: the SDK configures the root logger when it is built.
            setup_logging(secrets, level=logging.WARNING)
        run_stdio(server, obj.settings)
        return EXIT_OK

    run_guarded(go)


COMMANDS = [serve, mcp_command]
