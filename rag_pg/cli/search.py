"""The ``search`` command."""

from __future__ import annotations

import json
from typing import Any

import click

from rag_pg.cli._common import EXIT_OK, Context, emit_json, run_guarded
from rag_pg.models import Hit
from rag_pg.search.plan import Expansion, Mode


@click.command()
@click.argument("query")
@click.option("-k", "k", type=int, default=None, help="How many hits (default retrieval.k).")
@click.option("--mode", type=click.Choice(["hybrid", "vector", "keyword"]), default=None,
              help="Retrieval mode (default retrieval.mode; keyword when the collection has no vectors).")
@click.option("--collection", "-c", default=None, help="Collection (workspace); default: the configured one.")
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
def search(obj: Context, query: str, k: int | None, mode: Mode | None, collection: str | None,
           path_prefix: str | None, filters: tuple[str, ...], level: int | None,
           node_type: str | None, max_per_document: int | None, neighbours: int,
           expand: Expansion | None, rerank: bool | None, as_json: bool) -> None:
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
        if hit.url:
            click.echo(f"   {hit.url}")
        window = hit.extra.get("window")
        body = window.get("text") if isinstance(window, dict) and window.get("text") else hit.chunk.content
        text = " ".join(str(body).split())
        click.echo(f"   {text[:240]}{'…' if len(text) > 240 else ''}")
        expanded = hit.extra.get("expanded")
        if isinstance(expanded, dict):
            snippet = " ".join(str(expanded.get("text", "")).split())[:160]
            where = ", ".join(c["path"] for c in expanded.get("children", [])) or expanded.get("path")
            click.echo(f"   ↳ {expanded.get('kind')}: {where}  {snippet}")


COMMANDS = [search]
