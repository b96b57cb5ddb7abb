"""A Flask app that searches a ragpg index: the app factory owns one RagPG (a connection pool).

Run it (from examples/flask_app, with RAGPG_DATABASE_URL and RAGPG_EMBEDDING_URL set):

    flask --app flask_docsearch ragpg-ingest ../corpus
    flask --app flask_docsearch run
    curl 'http://127.0.0.1:5000/search?q=restaurer+une+sauvegarde'
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any, get_args

import click
from flask import Blueprint, Flask, current_app, request
from flask.cli import with_appcontext

from rag_pg import ConfigError, Mode, RagError, RagPG, Settings

MODES = get_args(Mode)  # the search modes, read from the public type
MAX_QUERY_CHARS = 1000
MAX_K = 50

bp = Blueprint("docsearch", __name__)


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the app and its RagPG.

    ragpg's settings come from ``config["RAGPG_SETTINGS"]`` (a ``rag_pg.config.Settings``)
    when given, else from the ``RAGPG_*`` environment variables, as for the ``ragpg`` CLI.
    The RagPG is created here, once, on a URL: it owns a small psycopg pool, safe to share
    between the server's threads. Creating it opens nothing; the pool connects on first use.
    Flask has no "app stopped" hook, so the pool is closed by a finalizer when the app is
    garbage-collected or the interpreter exits; ``close_ragpg(app)`` closes it earlier.
    """
    app = Flask(__name__)
    # RAGPG_PRINCIPALS: who the current request's user reads as, a function of no argument
    # returning their principals (their groups, "user:<name>") from the app's login, e.g.
    # flask-login's current_user; an empty list: only the documents everyone may read. None
    # (the default): no restriction. docs/permissions.md.
    app.config.from_mapping(RAGPG_SETTINGS=None, RAGPG_PRINCIPALS=None)
    if config:
        app.config.update(config)
    settings = app.config["RAGPG_SETTINGS"] or Settings.from_env()
    rag = RagPG(settings.database.url, settings)
    app.extensions["ragpg"] = rag
    app.extensions["ragpg.close"] = weakref.finalize(app, rag.close)
    app.register_blueprint(bp)
    app.cli.add_command(ragpg_ingest)
    return app


def close_ragpg(app: Flask) -> None:
    """Close the app's pool now (idempotent): for tests and orderly shutdowns."""
    app.extensions["ragpg.close"]()


def rag() -> RagPG:
    """The current app's RagPG."""
    engine: RagPG = current_app.extensions["ragpg"]
    return engine


def _bad_request(message: str) -> tuple[dict[str, str], int]:
    return {"error": message}, 400


@bp.get("/search")
def search() -> Any:
    """``GET /search?q=...&k=5&mode=hybrid|vector|keyword``: hits, best first, with provenance."""
    query = request.args.get("q", "")
    if not query.strip():
        return _bad_request("q is required")
    if len(query) > MAX_QUERY_CHARS:
        return _bad_request(f"q is longer than {MAX_QUERY_CHARS} characters")
    try:
        k = int(request.args.get("k", "5"))
    except ValueError:
        return _bad_request("k must be an integer")
    if not 1 <= k <= MAX_K:
        return _bad_request(f"k must be between 1 and {MAX_K}")
    mode = request.args.get("mode") or None
    if mode is not None and mode not in MODES:
        return _bad_request(f"mode must be one of {', '.join(MODES)}")
    principals_of = current_app.config["RAGPG_PRINCIPALS"]
    try:
        # The database filters by what the logged-in user may read.
        with rag().acting_as(principals_of() if principals_of else None):
            hits = rag().search(query, k, mode=mode)
    except ConfigError as exc:
        return _bad_request(str(exc))
    except RagError as exc:  # database or embedding service down: the client may retry
        return {"error": str(exc).splitlines()[0]}, 503
    return {"query": query, "hits": [hit.to_dict() for hit in hits]}


@click.command("ragpg-ingest")
@click.argument("root", type=click.Path(exists=True, file_okay=False))
@click.option("--collection", default=None, help="Collection to index into.")
@click.option("--full", is_flag=True, help="Reprocess every document.")
@click.option("--prune", is_flag=True, help="Delete documents that are gone from ROOT.")
@with_appcontext
def ragpg_ingest(root: str, collection: str | None, full: bool, prune: bool) -> None:
    """Create or upgrade ragpg's schema, then index the Markdown files under ROOT."""
    engine = rag()
    try:
        engine.init()
        report = engine.ingest(root, collection=collection, full=full, prune=prune)
    except RagError as exc:
        raise click.ClickException(str(exc).splitlines()[0]) from None
    click.echo(json.dumps(report.to_dict(), ensure_ascii=False))
    if report.documents_failed:
        raise click.exceptions.Exit(1)
