"""What every command shares: the context that opens RagPG, one-line errors, exit codes, JSON output."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import click

from rag_pg.config import Settings
from rag_pg.errors import EmbeddingError, RagError
from rag_pg.models import IngestReport

if TYPE_CHECKING:
    from rag_pg.api import RagPG

EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


class Context:
    """What every command needs: settings, and a RagPG opened on demand."""

    def __init__(self, database_url: str | None, config_file: str | None, overrides: dict[str, Any],
                 *, verbose: bool = False):
        self.database_url = database_url
        self.config_file = config_file
        self.overrides = overrides
        self._settings: Settings | None = None
        self._rag: RagPG | None = None
        self._server: Any = None
        self.verbose = verbose

    @property
    def verbose(self) -> bool:
        """``ragpg -v`` (or a command's own ``-v``): psycopg's log and the database used are
        shown."""
        return self._verbose

    @verbose.setter
    def verbose(self, value: bool) -> None:
        self._verbose = value
        psycopg_log(verbose=value)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            flags = dict(self.overrides)
            flags["database.url"] = self.database_url
            self._settings = Settings.load(config_file=self.config_file, overrides=flags, warn=warn)
        return self._settings

    def rag(self, *, announce: bool = True) -> RagPG:
        if self._rag is None:
            # The library and the database driver load with the first command that needs them.
            from rag_pg.api import RagPG
            from rag_pg.store import embedded

            settings = self.settings
            url = settings.database.url
            if url is None:
                data_dir = embedded.resolve(
                    Path(settings.database.data_dir) if settings.database.data_dir else None)
                # Said once, when the folder is created (every later command uses the same
                # one), or whenever asked with -v.
                first = not embedded.initialised(data_dir)
                url, where, self._server = embedded.start(data_dir)
                if (announce and first) or self.verbose:
                    warn(f"using the embedded PostgreSQL in {where} (set RAGPG_DATABASE_URL to use another)")
                settings = settings.with_overrides(**{"database.url": url})
                self._settings = settings
            self._rag = RagPG(url, settings, warn=warn)
        return self._rag

    def close(self) -> None:
        if self._rag is not None:
            self._rag.close()


def psycopg_log(*, verbose: bool) -> None:
    """psycopg logs what a command already says in its own line: psycopg_pool every failed
    connection attempt of its workers, a pipeline the second error it meets while closing on
    the first (a refused document's). That log is shown only when asked for (``-v``)."""
    logging.getLogger("psycopg").setLevel(logging.WARNING if verbose else logging.CRITICAL)
    if verbose or "rag_pg.store.db" in sys.modules:  # loaded already, or wanted: cheap then
        from rag_pg.store.db import show_second_pipeline_errors

        show_second_pipeline_errors(verbose)


def warn(message: str) -> None:
    click.echo(f"ragpg: {message}", err=True)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"ragpg: error: {message}", err=True)
    sys.exit(code)


def _exit_code(exc: RagError) -> int:
    if isinstance(exc, EmbeddingError):
        return EXIT_UNAVAILABLE if exc.kind == "unavailable" else EXIT_PARTIAL
    return int(getattr(exc, "exit_code", EXIT_PARTIAL))


EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: raised in the main thread so that every ``finally`` runs (an ingest
    records its run as aborted, connections go back) before the one-line exit."""


def announce_stop() -> None:
    """Say at once that the command heard the signal (its cleanups may take a moment)."""
    click.echo("ragpg: stopping: what is written stays whole, the rest is left for the next run",
               err=True)


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    announce_stop()
    raise Terminated


def on_sigint(signum: int, frame: FrameType | None) -> None:
    announce_stop()
    raise KeyboardInterrupt


def stop_now(message: str, code: int) -> NoReturn:
    """The one-line exit of an interrupted command, without waiting for its worker threads:
    an embedding batch still in flight is abandoned (nothing of it was written; each
    document is written in one transaction, and the server rolls back an open one when
    the connection goes)."""
    click.echo(f"ragpg: error: {message}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# How long the signal sent again waits: the main thread first leaves the callback that
# swallowed it (and the hook below), so that the next delivery lands in the command's code.
REDELIVERY_DELAY = 0.01


def redeliver_swallowed_interrupts(unraisable: Any) -> None:
    """``sys.unraisablehook`` of the command line: an interrupt (SIGTERM's Terminated, Ctrl-C's
    KeyboardInterrupt) that Python raised inside a finalizer or a weakref callback the garbage
    collector was running is only printed there, and the command would run on as if never
    asked to stop. The signal is sent again instead, from a timer thread, and the main thread
    takes it at its next statement outside that callback; anything else goes to Python's own
    hook."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)
        return
    signum = signal.SIGTERM if isinstance(unraisable.exc_value, Terminated) else signal.SIGINT
    resend = threading.Timer(REDELIVERY_DELAY, os.kill, (os.getpid(), signum))
    resend.daemon = True
    resend.start()


def run_guarded(fn: Callable[[], int | None]) -> None:
    """Turn expected failures into one line and an exit code; never a traceback."""
    try:
        code = fn()
    except RagError as exc:
        fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, _exit_code(exc))
    except Terminated:
        stop_now("terminated (SIGTERM)", EXIT_TERMINATED)
    except KeyboardInterrupt:
        stop_now("interrupted", 130)
    except Exception as exc:
        if not connection_error(exc):
            raise
        # The server went away under a call no layer below turned into a StoreError (a
        # migration, a schema check): still one line, as "unavailable".
        fail(connection_lost(exc), EXIT_UNAVAILABLE)
    sys.exit(code or 0)


def connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` is psycopg's OperationalError; without psycopg loaded it cannot be."""
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.OperationalError)


def connection_lost(exc: BaseException) -> str:
    from rag_pg.store.db import scrub

    lines = str(exc).strip().splitlines()
    return "database connection lost: " + scrub(lines[0] if lines else type(exc).__name__, "")


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))






def print_report(report: IngestReport, *, as_json: bool, verbose: bool) -> None:
    if as_json:
        emit_json(report.to_dict(verbose=verbose))
        return
    prefix = "would index" if report.dry_run else "indexed"
    click.echo(
        f"{prefix} {report.documents_indexed} of {report.documents_seen} documents"
        f" ({report.documents_skipped} unchanged, {report.documents_failed} failed,"
        f" {report.documents_deleted} deleted); {report.chunks_upserted} chunks written,"
        f" {report.chunks_unchanged} unchanged; {report.embedding_calls} embedding calls;"
        f" {report.duration_seconds:.2f} s"
    )
    if report.dry_run:
        click.echo(f"  add: {len(report.added)}  change: {len(report.changed)}  delete: {len(report.deleted)}"
                   f"  tokens to embed: {report.tokens_embedded}")
        for label, paths in (("+", report.added), ("~", report.changed), ("-", report.deleted)):
            for path in paths:
                click.echo(f"  {label} {path}")
    if report.files_skipped:
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(report.files_skipped.items()))
        click.echo(f"  skipped files: {reasons}")
    if verbose:
        for skipped in report.skipped:
            click.echo(f"  skipped {skipped.path}: {skipped.reason}")
    for warning in report.warnings:
        click.echo(f"  warning {warning}")
    for failure in report.failures:
        # A broken parent link leaves its document indexed: it is no failed document.
        label = "broken link" if failure.kind == "missing_parent" else "failed"
        click.echo(f"  {label} {failure.path}: {failure.error}")
