"""The index commands: init, ingest, stats, check."""

from __future__ import annotations

import sys
from typing import Any

import click

from rag_pg.cli._common import (
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Context,
    emit_json,
    fail,
    print_report,
    run_guarded,
    warn,
)
from rag_pg.cli.progress import IngestProgress
from rag_pg.config import redact_url
from rag_pg.errors import ConfigError, RagError, first_line


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def init(obj: Context, as_json: bool) -> None:
    """Create or upgrade the ragpg schema (alembic upgrade head)."""

    def go() -> int:
        rag = obj.rag()
        revision = rag.init()
        data = {"schema": obj.settings.database.schema, "revision": revision,
                "database": redact_url(obj.settings.database.url or ""),
                "keyword_engine": rag.keyword_engine}
        if as_json:
            emit_json(data)
        else:
            click.echo(f"schema {data['schema']} at revision {revision} ({data['database']});"
                       f" keyword search: {rag.keyword_engine}")
        return EXIT_OK

    run_guarded(go)


@click.command()
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--full", is_flag=True, help="Reprocess every document, changed or not.")
@click.option("--prune", is_flag=True, help="Delete indexed documents of this root that are gone or excluded.")
@click.option("--collection", "-c", default=None, help="Collection (workspace) to index into.")
@click.option("--dry-run", is_flag=True, help="Say what would be added, changed, deleted and embedded; write nothing.")
@click.option("--verbose", "-v", is_flag=True, help="List skipped files with their reasons.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-init", is_flag=True, help="Do not create/upgrade the schema first.")
@click.pass_obj
def ingest(obj: Context, root: str | None, full: bool, prune: bool, collection: str | None,
           dry_run: bool, verbose: bool, as_json: bool, no_init: bool) -> None:
    """Index the Markdown files under ROOT (default: source.root), incrementally; with the
    documents extra, PDF, Word, PowerPoint, Excel and HTML files too (source.formats)."""
    obj.verbose = obj.verbose or verbose

    def go() -> int:
        rag = obj.rag()
        if not no_init:
            rag.init()
        # A terminal gets one line redrawn in place; anything else (a log, CI, cron) a line
        # every 10 s, so that a long run shows it is alive. --json keeps stderr quiet.
        if as_json:
            progress = None
        elif sys.stderr.isatty():
            progress = IngestProgress()
        else:
            progress = IngestProgress(interval=10.0, redraw=False)
        report = rag.ingest(
            root or obj.settings.source.root, collection=collection, full=full, prune=prune,
            dry_run=dry_run, progress=progress,
        )
        if progress:
            progress.finish()
        print_report(report, as_json=as_json, verbose=verbose)
        if report.failures:
            first = report.failures[0]
            links = sum(1 for f in report.failures if f.kind == "missing_parent")
            what = (f"{len(report.failures) - links} document(s) failed" if links < len(report.failures)
                    else f"{links} broken parent link(s), the documents are indexed")
            warn(f"{what}; first: {first.path}: {first.error}")
            return EXIT_PARTIAL
        return EXIT_OK

    run_guarded(go)


@click.command()
@click.option("--collection", "-c", default=None, help="Collection (workspace); default: the configured one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_obj
def stats(obj: Context, collection: str | None, as_json: bool) -> None:
    """Documents, chunks, last indexed time, models, and the embedding service's health.

    Prints what it can read when the database or the embedding service is down, warns, and
    exits 3 (so that `ragpg stats || alert` is a probe). A configuration error (a malformed
    database URL, an unknown collection) exits 2.
    """
    from rag_pg.embed import make_provider

    data: dict[str, Any] = {"collection": collection or obj.settings.collection,
                            "documents": None, "chunks": None, "last_indexed_at": None}
    try:
        data.update(obj.rag(announce=not as_json).stats(collection).to_dict())
    except ConfigError as exc:  # nothing is down: what was asked for cannot be read
        fail(str(exc).strip().splitlines()[0], EXIT_USAGE)
    except RagError as exc:
        data["database_error"] = first_line(exc)
        warn(data["database_error"] if "unavailable" in data["database_error"]
             else f"database unavailable: {data['database_error']}")
    try:
        settings = obj.settings
        provider = make_provider(settings.embedding, warn=warn)
        try:
            data["embedding"] = {"provider": provider.kind, **provider.health()}
        finally:
            provider.close()
    except RagError as exc:
        warn(f"embedding service unavailable: {first_line(exc)}")
        data["embedding"] = {"status": "unavailable", "error": first_line(exc)}
    if as_json:
        emit_json(data)
    else:
        _print_stats(data)
    down = "database_error" in data or data["embedding"].get("status") == "unavailable"
    sys.exit(EXIT_UNAVAILABLE if down else EXIT_OK)


@click.command()
@click.option("--repair", is_flag=True,
              help="Mark the documents (and statistics) concerned so the next ingest repairs them.")
@click.option("--sample", type=click.IntRange(min=1), default=None, metavar="N",
              help="Also embed N chunks drawn at random again and compare their stored vectors.")
@click.option("-c", "--collection", default=None,
              help="Check one collection (default: every collection of the index).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_obj
def check(obj: Context, repair: bool, sample: int | None, collection: str | None,
          as_json: bool) -> None:
    """Check the index's invariants (chunks, positions, vectors, dimensions); exit 1 if any fails."""
    from rag_pg.store import records
    from rag_pg.store.integrity import check as run_check
    from rag_pg.store.integrity import mark_for_repair


    def go() -> int:
        rag = obj.rag(announce=not as_json)
        schema = obj.settings.database.schema
        with rag.source.connection() as conn:
            rag._checked(conn)
            if collection is not None:
                records.require_collection(conn, rag.store.q, collection)
            problems = run_check(conn, schema, collection)
            if sample:
                from rag_pg.admin.sample import sample_vectors

                problems += sample_vectors(conn, rag.store.q, rag.provider, sample)
            marked = mark_for_repair(conn, problems, schema, collection) if repair and problems else 0
        if as_json:
            emit_json({"ok": not problems, "problems": [p.to_dict() for p in problems],
                       "marked_for_repair": marked})
        else:
            _print_problems(problems, marked)
        return EXIT_OK if not problems else EXIT_PARTIAL

    run_guarded(go)


# -- rendering ---------------------------------------------------------------------------------

def _print_problems(problems: list[Any], marked: int) -> None:
    from rag_pg.store.integrity import STATISTICS

    for p in problems:
        click.echo(f"{p.code}: {p.subject}: {p.detail}")
    recount = len({p.subject for p in problems if p.code in STATISTICS}) if marked else 0
    click.echo("index ok" if not problems else f"{len(problems)} problem(s)"
               + (f"; {marked - recount} document(s) will be re-indexed by the next ingest"
                  if marked > recount else "")
               + (f"; {recount} collection(s)' statistics will be counted again by the next"
                  " ingest" if recount else ""))



def _print_stats(data: dict[str, Any]) -> None:
    click.echo(f"collection:      {data['collection']}")
    if "database_error" in data:  # nothing was read: say so rather than print None counts
        click.echo(f"database:        unavailable ({data['database_error']})")
    else:
        click.echo(f"documents:       {data.get('documents')}")
        click.echo(f"chunks:          {data.get('chunks')}")
        click.echo(f"last indexed at: {data.get('last_indexed_at') or 'never'}")
        run = data.get("last_run")
        if run:
            click.echo(f"last run:        #{run['id']} {run['status']}, started {run['started_at']},"
                       f" {run['documents_indexed']} of {run['documents_seen']} documents indexed,"
                       f" {run['documents_failed']} failed")
    for m in data.get("models") or []:
        click.echo(f"model:           {m['model']} ({m['dimension']} d, {m['vectors']} vectors)")
    emb = data.get("embedding") or {}
    click.echo(f"embedding:       {emb.get('provider', '?')} {emb.get('status')} {emb.get('model') or ''}")




COMMANDS = [init, ingest, stats, check]
