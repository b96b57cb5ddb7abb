"""The ``ragpg`` command: builds Settings once, calls one library function per command, prints."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from .config import Settings, redact_url
from .errors import ConfigError, EmbeddingError, RagError, StoreError
from .models import Hit, IngestReport

EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


class Context:
    """What every command needs: settings, and a RagPG opened on demand."""

    def __init__(self, database_url: str | None, config_file: str | None, overrides: dict[str, Any]):
        self.database_url = database_url
        self.config_file = config_file
        self.overrides = overrides
        self._settings: Settings | None = None
        self._rag: Any = None
        self._server: Any = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            flags = dict(self.overrides)
            flags["database.url"] = self.database_url
            self._settings = Settings.load(config_file=self.config_file, overrides=flags)
        return self._settings

    def rag(self, *, announce: bool = True) -> Any:
        from .api import RagPG

        if self._rag is None:
            settings = self.settings
            url = settings.database.url
            if url is None:
                from . import embedded

                data_dir = Path(settings.database.data_dir) if settings.database.data_dir else None
                url, where, self._server = embedded.start(data_dir)
                if announce:
                    warn(f"using the embedded PostgreSQL in {where} (set RAGPG_DATABASE_URL to use another)")
                settings = settings.with_overrides(**{"database.url": url})
                self._settings = settings
            self._rag = RagPG(url, settings, warn=warn)
        return self._rag

    def close(self) -> None:
        if self._rag is not None:
            self._rag.close()


def warn(message: str) -> None:
    click.echo(f"ragpg: {message}", err=True)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"ragpg: error: {message}", err=True)
    sys.exit(code)


def _exit_code(exc: RagError) -> int:
    if isinstance(exc, EmbeddingError):
        return EXIT_UNAVAILABLE if exc.kind == "unavailable" else EXIT_PARTIAL
    return int(getattr(exc, "exit_code", EXIT_PARTIAL))


def run_guarded(fn: Callable[[], int | None]) -> None:
    """Turn expected failures into one line and an exit code; never a traceback."""
    try:
        code = fn()
    except RagError as exc:
        fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, _exit_code(exc))
    except KeyboardInterrupt:
        fail("interrupted", 130)
    sys.exit(code or 0)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--database-url", envvar=None, help="PostgreSQL URL (default: RAGPG_DATABASE_URL, DATABASE_URL, config, else the embedded server).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="A ragpg.toml (or pyproject.toml with [tool.ragpg]).")
@click.option("--schema", default=None, help="Postgres schema of the index (default ragpg).")
@click.version_option(package_name="ragpg")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, config_file: str | None, schema: str | None) -> None:
    """ragpg: hybrid retrieval (pgvector + keywords) over a Markdown tree, with citable provenance."""
    context = Context(database_url, config_file, {"database.schema": schema})
    ctx.obj = context
    ctx.call_on_close(context.close)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.pass_obj
def init(obj: Context, as_json: bool) -> None:
    """Create or upgrade the ragpg schema (alembic upgrade head)."""

    def go() -> int:
        rag = obj.rag()
        revision = rag.init()
        data = {"schema": obj.settings.database.schema, "revision": revision,
                "database": redact_url(obj.settings.database.url or "")}
        if as_json:
            emit_json(data)
        else:
            click.echo(f"schema {data['schema']} at revision {revision} ({data['database']})")
        return EXIT_OK

    run_guarded(go)


@cli.command()
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
    """Index the Markdown files under ROOT (default: source.root), incrementally."""

    def go() -> int:
        rag = obj.rag()
        if not no_init:
            rag.init()
        progress = _Progress() if sys.stderr.isatty() and not as_json else None
        report = rag.ingest(
            root or obj.settings.source.root, collection=collection, full=full, prune=prune,
            dry_run=dry_run, progress=progress,
        )
        if progress:
            progress.finish()
        _print_report(report, as_json=as_json, verbose=verbose)
        if report.failures:
            first = report.failures[0]
            warn(f"{len(report.failures)} document(s) failed; first: {first.path}: {first.error}")
            return EXIT_PARTIAL
        return EXIT_OK

    run_guarded(go)


@cli.command()
@click.argument("query")
@click.option("-k", "k", type=int, default=None, help="How many hits (default retrieval.k).")
@click.option("--mode", type=click.Choice(["hybrid", "vector", "keyword"]), default=None)
@click.option("--collection", "-c", default=None)
@click.option("--path-prefix", default=None, help="Only documents under this relative path (segment-aware).")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE",
              help="Front-matter filter, repeatable (all must match); VALUE is JSON when it parses"
                   " (2, true, [\"a\"]), else a string; a scalar also matches inside a list.")
@click.option("--level", type=int, default=None, help="Only nodes of this summary level (0 = source).")
@click.option("--node-type", default=None, help="Only nodes of this type (source, summary).")
@click.option("--max-per-document", type=click.IntRange(min=1), default=None,
              help="At most N hits per file.")
@click.option("--neighbours", type=click.IntRange(min=0), default=0,
              help="Merge ±N neighbouring chunks into each hit's passage (in \"window\").")
@click.option("--expand", type=click.Choice(["parent", "children"]), default=None,
              help="Attach the parent node's (or the children's) whole text (in \"expanded\").")
@click.option("--rerank/--no-rerank", default=None, help="Rerank with the configured cross-encoder.")
@click.option("--json", "as_json", is_flag=True, help="Print the hits as a JSON list.")
@click.pass_obj
def search(obj: Context, query: str, k: int | None, mode: str | None, collection: str | None,
           path_prefix: str | None, filters: tuple[str, ...], level: int | None,
           node_type: str | None, max_per_document: int | None, neighbours: int,
           expand: str | None, rerank: bool | None, as_json: bool) -> None:
    """Search the index; hits come best first with file, section, anchor and position."""
    front_matter = _parse_filters(filters)

    def go() -> int:
        hits = obj.rag(announce=not as_json).search(
            query, k, mode=mode, collection=collection, path_prefix=path_prefix,
            filters=front_matter, level=level, node_type=node_type,
            max_per_document=max_per_document, neighbours=neighbours, expand=expand,
            rerank=rerank,
        )
        if as_json:
            emit_json([h.to_dict() for h in hits])
        else:
            _print_hits(hits)
        return EXIT_OK

    run_guarded(go)


def _parse_filters(items: tuple[str, ...]) -> dict[str, Any] | None:
    """``key=value`` pairs -> a front-matter filter; a value is JSON when it parses."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--filter")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out[key.strip()] = value
    return out or None


@cli.command()
@click.option("--collection", "-c", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def stats(obj: Context, collection: str | None, as_json: bool) -> None:
    """Documents, chunks, last indexed time, models, and the embedding service's health.

    Degrades gracefully: when the database or the service is down it warns and exits 0.
    """
    data: dict[str, Any] = {"documents": None, "chunks": None, "last_indexed_at": None}
    try:
        data.update(obj.rag(announce=not as_json).stats(collection))
    except RagError as exc:
        warn(f"database unavailable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        data["database_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    try:
        settings = obj.settings
        from .embed import make_provider

        provider = make_provider(settings.embedding, warn=warn)
        try:
            data["embedding"] = {"provider": provider.kind, **provider.health()}
        finally:
            provider.close()
    except RagError as exc:
        warn(f"embedding service unavailable: {str(exc).splitlines()[0] if str(exc) else ''}")
        data["embedding"] = {"status": "unavailable", "error": str(exc).splitlines()[0] if str(exc) else ""}
    if as_json:
        emit_json(data)
    else:
        _print_stats(data)
    sys.exit(EXIT_OK)


@cli.command()
@click.option("--repair", is_flag=True, help="Mark the documents concerned so the next ingest re-indexes them.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def check(obj: Context, repair: bool, as_json: bool) -> None:
    """Check the index's invariants (chunks, positions, vectors, dimensions); exit 1 if any fails."""

    def go() -> int:
        from .check import check as run_check
        from .check import mark_for_repair

        rag = obj.rag(announce=not as_json)
        schema = obj.settings.database.schema
        with rag.source.connection() as conn:
            rag._checked(conn)
            problems = run_check(conn, schema)
            marked = mark_for_repair(conn, problems, schema) if repair and problems else 0
        if as_json:
            emit_json({"ok": not problems, "problems": [p.to_dict() for p in problems],
                       "marked_for_repair": marked})
        else:
            for p in problems:
                click.echo(f"{p.code}: {p.subject}: {p.detail}")
            click.echo("index ok" if not problems else f"{len(problems)} problem(s)"
                       + (f"; {marked} document(s) will be re-indexed by the next ingest" if marked else ""))
        return EXIT_OK if not problems else EXIT_PARTIAL

    run_guarded(go)


# -- rendering ---------------------------------------------------------------------------------


class _Progress:
    """A one-line progress display on stderr: documents done, chunks embedded, rate."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.last = 0.0
        self.embedded = 0
        self.queued = 0  # chunks handed to the embedder so far (the walk is still going)

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "embedded":
            self.embedded += int(data.get("count", 0))
            self.queued = max(self.queued, int(data.get("total", 0)))
        report: IngestReport | None = data.get("report")
        now = time.monotonic()
        if report is None or now - self.last < 0.2:
            return
        self.last = now
        elapsed = max(now - self.start, 1e-6)
        click.echo(
            f"\r{report.documents_seen} documents seen, {report.documents_indexed} indexed,"
            f" {report.documents_skipped} unchanged, {report.documents_failed} failed,"
            f" {self.embedded}/{max(self.queued, self.embedded)} chunks embedded"
            f" ({self.embedded / elapsed:.0f}/s)  ",
            err=True, nl=False,
        )

    def finish(self) -> None:
        click.echo("", err=True)


def _print_report(report: IngestReport, *, as_json: bool, verbose: bool) -> None:
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
    for failure in report.failures:
        click.echo(f"  failed {failure.path}: {failure.error}")


def _print_hits(hits: list[Hit]) -> None:
    if not hits:
        click.echo("no hits")
        return
    for n, hit in enumerate(hits, start=1):
        anchor = f"#{hit.chunk.anchor}" if hit.chunk.anchor else ""
        ranks = " ".join(f"{k}#{v}" for k, v in sorted(hit.ranks.items()))
        confidence = hit.extra.get("confidence")
        band = f"  confidence {confidence}" if confidence else ""
        click.echo(f"{n}. {hit.path}{anchor}  [{hit.chunk.section}]  score {hit.score:.4f}  {ranks}{band}")
        window = hit.extra.get("window")
        body = window.get("text") if isinstance(window, dict) and window.get("text") else hit.chunk.content
        text = " ".join(str(body).split())
        click.echo(f"   {text[:240]}{'…' if len(text) > 240 else ''}")
        expanded = hit.extra.get("expanded")
        if isinstance(expanded, dict):
            snippet = " ".join(str(expanded.get("text", "")).split())[:160]
            where = ", ".join(c["path"] for c in expanded.get("children", [])) or expanded.get("path")
            click.echo(f"   ↳ {expanded.get('kind')}: {where}  {snippet}")


def _print_stats(data: dict[str, Any]) -> None:
    click.echo(f"collection:      {data.get('collection', '?')}")
    click.echo(f"documents:       {data.get('documents')}")
    click.echo(f"chunks:          {data.get('chunks')}")
    click.echo(f"last indexed at: {data.get('last_indexed_at')}")
    for m in data.get("models") or []:
        click.echo(f"model:           {m['model']} ({m['dimension']} d, {m['vectors']} vectors)")
    emb = data.get("embedding") or {}
    click.echo(f"embedding:       {emb.get('provider', '?')} {emb.get('status')} {emb.get('model') or ''}")


def main() -> None:
    try:
        cli.main(standalone_mode=False, prog_name="ragpg")
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    except StoreError as exc:
        fail(str(exc), EXIT_UNAVAILABLE)


# Commands of each area live in their own module and attach themselves to ``cli``.
from . import cli_embeddings, cli_retrieval, cli_service, cli_sidecar, cli_sql  # noqa: E402,F401
