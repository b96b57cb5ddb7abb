"""CLI commands of the embeddings area (``reembed``, ``embed-server``), attached to ``ragpg``."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

import click

from rag_pg.cli._common import EXIT_OK, EXIT_PARTIAL, Context, emit_json, run_guarded, warn
from rag_pg.errors import ConfigError

# The server's defaults, repeated here so that `--help` works without the serve extra.
DEFAULT_CACHE_SIZE = 10_000
DEFAULT_MAX_TEXTS = 2048
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024


class _ReembedProgress:
    """One line on stderr: chunks re-embedded of the total, and the rate."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        now = time.monotonic()
        if event != "reembedded" or now - self.last < 0.2:
            return
        self.last = now
        done, total = int(data.get("embedded", 0)), int(data.get("total", 0))
        rate = done / max(now - self.start, 1e-6)
        click.echo(f"\r{done}/{total} chunks re-embedded ({rate:.0f}/s)  ", err=True, nl=False)

    def finish(self) -> None:
        click.echo("", err=True)


@click.command()
@click.option("--collection", "-c", default=None, help="Collection to re-embed.")
@click.option("--model", default=None,
              help="Model to switch to (default: the configured provider's).")
@click.option("--keep", is_flag=True, help="Keep the old model's vectors after the switch.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-init", is_flag=True, help="Do not create/upgrade the schema first.")
@click.pass_obj
def reembed(obj: Context, collection: str | None, model: str | None, keep: bool, as_json: bool,
            no_init: bool) -> None:
    """Re-vectorise a collection with another model, from the stored chunks (no re-parse).

    New vectors are written beside the old ones (search keeps using the old model), then the
    collection switches in one transaction and the old vectors are dropped. Safe to kill:
    run it again and it resumes. Exit 1 when some chunks could not be embedded (no switch).
    """
    # Re-embedding moves vectors: numpy comes with it, not with every command of the CLI.
    from rag_pg.admin.reembed import reembed as run_reembed

    def go() -> int:
        rag = obj.rag(announce=not as_json)
        if not no_init:
            rag.init()
        progress = _ReembedProgress() if sys.stderr.isatty() and not as_json else None
        report = run_reembed(rag, collection=collection, model=model, keep=keep,
                             progress=progress)
        if progress:
            progress.finish()
        if as_json:
            emit_json(report.to_dict())
        elif report.status == "already":
            click.echo(f"collection {report.collection} already uses {report.target_model}"
                       f" ({report.target_dimension} d); {report.vectors_dropped} old vectors dropped")
        else:
            click.echo(
                f"re-embedded {report.chunks_embedded} of {report.chunks_total} chunks of"
                f" {report.collection} with {report.target_model} ({report.target_dimension} d)"
                f"{' (resumed)' if report.resumed else ''}; {report.embedding_calls} calls;"
                f" {report.duration_seconds:.2f} s"
            )
            if report.switched:
                kept = "kept" if report.kept_old else f"{report.vectors_dropped} dropped"
                click.echo(f"  switched from {report.source_model}; old vectors {kept}")
        if report.status == "incomplete":
            for failure in report.failures:
                click.echo(f"  failed {failure['path']}#{failure['position']}: {failure['error']}")
            warn(f"{report.chunks_failed} chunk(s) could not be embedded: the collection still"
                 f" uses {report.source_model}; fix them and run `ragpg reembed` again")
            return EXIT_PARTIAL
        return EXIT_OK

    run_guarded(go)


@click.command("embed-server")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback needs a token.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free one).")
@click.option("--token", envvar="RAGPG_EMBED_SERVER_TOKEN", default=None,
              help="Bearer token clients must send (prefer RAGPG_EMBED_SERVER_TOKEN: a flag shows in ps).")
@click.option("--local", "force_local", is_flag=True,
              help="Serve the in-process model, whatever the configuration says.")
@click.option("--cache-size", default=DEFAULT_CACHE_SIZE, show_default=True,
              type=click.IntRange(min=0), help="Vectors kept in the LRU cache (0: no cache).")
@click.option("--max-texts", default=DEFAULT_MAX_TEXTS, show_default=True,
              type=click.IntRange(min=1), help="Texts per request (OpenAI takes 2,048).")
@click.option("--max-request-bytes", default=DEFAULT_MAX_REQUEST_BYTES, show_default=True,
              type=click.IntRange(min=1), help="Largest request body.")
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(min=1),
              help="Model calls at once (other requests wait, then get 503).")
@click.option("--grace", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds requests in flight may take to finish on SIGTERM.")
@click.option("--default-type", type=click.Choice(["query", "passage"]), default="passage",
              show_default=True, help="Type of OpenAI-shape requests that say none.")
@click.option("--verbose", is_flag=True, help="Log each request line on stderr.")
@click.pass_obj
def embed_server(obj: Context, host: str, port: int, token: str | None, force_local: bool,
                 cache_size: int, max_texts: int, max_request_bytes: int, concurrency: int,
                 grace: float, default_type: str, verbose: bool) -> None:
    """Serve embeddings over HTTP: GET /health, POST /embed, and OpenAI's /v1/embeddings, /v1/models.

    Serves the configured provider or chain (a caching proxy), or with --local the in-process
    model. Needs the serve extra (FastAPI, uvicorn). Stops on SIGINT/SIGTERM: requests in
    flight get --grace seconds to finish.
    """
    from rag_pg.embed import LocalEmbeddingProvider, make_provider


    def go() -> int:
        try:
            # FastAPI and uvicorn come with the serve extra; the rest of the CLI works without.
            from rag_pg.serve.embed_server import EmbedServer, ServerLimits
        except ImportError as exc:
            raise ConfigError(f"embed-server needs the serve extra ({exc.name} is missing):"
                              " pip install 'ragpg[serve]'") from None
        backend = (LocalEmbeddingProvider() if force_local
                   else make_provider(obj.settings.embedding, warn=warn))
        try:
            limits = ServerLimits(max_texts=max_texts, max_request_bytes=max_request_bytes,
                                  concurrency=concurrency, grace=grace)
            server = EmbedServer(backend, host=host, port=port, token=token,
                                 cache_size=cache_size, limits=limits,
                                 default_type="query" if default_type == "query" else "passage",
                                 verbose=verbose)

            def announce() -> None:
                auth = "bearer token required" if token else "no token"
                warn(f"embed-server: serving {server.model} ({server.dimension} d) from"
                     f" {backend.kind} on {server.url} (POST /embed, POST /v1/embeddings;"
                     f" {auth}); Ctrl-C to stop")

            def stopping() -> None:
                warn(f"embed-server: stopping (requests in flight get {grace:g} s to finish)")

            # uvicorn handles SIGINT/SIGTERM while it serves and raises the signal again once
            # it has stopped: these handlers catch that (and a signal during startup) and let
            # the backend close instead of the default action killing the process.
            def stop(number: int, frame: Any) -> None:
                server.stop_soon()

            previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                server.serve(announce=announce, on_signal=stopping)
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        finally:
            backend.close()
        warn("embed-server: stopped")
        return EXIT_OK

    run_guarded(go)


COMMANDS = [reembed, embed_server]
