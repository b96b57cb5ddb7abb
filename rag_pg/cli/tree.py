"""CLI commands of the sidecar area: tree, export, import, context, ask, summarize."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rag_pg.cli._common import (
    EXIT_OK,
    EXIT_PARTIAL,
    Context,
    emit_json,
    print_report,
    run_guarded,
    warn,
)
from rag_pg.errors import ConfigError

LANGS = click.Choice(["fr", "en"])


@click.command()
@click.argument("path", required=False)
@click.option("--collection", "-c", default=None, help="Collection (workspace); default: the configured one.")
@click.option("--json", "as_json", is_flag=True, help="Print the tree as nested JSON nodes.")
@click.pass_obj
def tree(obj: Context, path: str | None, collection: str | None, as_json: bool) -> None:
    """Print the summary tree (parent_source_file links) with levels; PATH limits it to a node
    or a folder. Exits 1 when a parent is missing or the links form a cycle."""
    from rag_pg.tree import hierarchy


    def go() -> int:
        rag = obj.rag(announce=not as_json)
        rag.require_collection(collection)
        where = hierarchy.index_path(rag, collection, path) if path else None
        found = hierarchy.load_tree(rag, collection, where)
        if where and not found.roots:
            raise ConfigError(f"no indexed document at or under {where!r}")
        if as_json:
            emit_json(found.to_dict())
        else:
            for line in hierarchy.render(found) or ["(empty collection)"]:
                click.echo(line)
        for problem in found.problems:
            warn(f"{problem['path']}: {problem['kind'].replace('_', ' ')} ({problem['parent']})")
        return EXIT_PARTIAL if found.problems else EXIT_OK

    run_guarded(go)


@click.command("export")
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--collection", "-c", default=None, help="Collection (workspace); default: the configured one.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_obj
def export_(obj: Context, root: str | None, collection: str | None, as_json: bool) -> None:
    """Write <file>.md.jsonl sidecars (manifest + chunks + vectors) beside ROOT's indexed files."""
    from rag_pg.tree.sidecar_export import export_sidecars

    def go() -> int:
        rag = obj.rag(announce=not as_json)
        rag.require_collection(collection)
        report = export_sidecars(rag, root, collection=collection)
        if as_json:
            emit_json(report.to_dict())
        else:
            click.echo(
                f"exported {report.documents - len(report.failures)} of {report.documents} documents:"
                f" {len(report.written)} sidecars written, {len(report.unchanged)} unchanged,"
                f" {len(report.failures)} refused"
            )
            for failure in report.failures:
                click.echo(f"  refused {failure.path}: {failure.error}")
        return EXIT_PARTIAL if report.failures else EXIT_OK

    run_guarded(go)


@click.command("import")
@click.argument("root", required=False, type=click.Path(file_okay=False))
@click.option("--collection", "-c", default=None, help="Collection (workspace); default: the configured one.")
@click.option("--verbose", "-v", is_flag=True, help="List files skipped, with reasons.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--no-init", is_flag=True, help="Do not create/upgrade the schema first.")
@click.pass_obj
def import_(obj: Context, root: str | None, collection: str | None, verbose: bool,
            as_json: bool, no_init: bool) -> None:
    """Load ROOT's sidecars into the index without calling any embedding service."""
    obj.verbose = obj.verbose or verbose
    from rag_pg.tree.sidecar_import import import_sidecars

    def go() -> int:
        rag = obj.rag(announce=not as_json)
        if not no_init:
            rag.init()
        report = import_sidecars(rag, root, collection=collection)
        print_report(report, as_json=as_json, verbose=verbose)
        for message in report.warnings:
            warn(message)
        return EXIT_PARTIAL if report.failures else EXIT_OK

    run_guarded(go)


def _retrieval_options(fn: Any) -> Any:
    for option in reversed([
        click.option("-k", "k", type=int, default=None, help="How many hits to consider (default retrieval.k)."),
        click.option("--budget", type=int, default=None, help="Token budget of the whole block (default context.budget)."),
        click.option("--lang", type=LANGS, default=None, help="Language of the instructions (default: guessed)."),
        click.option("--mode", type=click.Choice(["hybrid", "vector", "keyword"]), default=None,
                     help="Retrieval mode (default: hybrid when vectors exist, else keyword)."),
        click.option("--collection", "-c", default=None, help="Collection (workspace); default: the configured one."),
        click.option("--path-prefix", default=None, help="Only documents under this relative path."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text."),
    ]):
        fn = option(fn)
    return fn


@click.command()
@click.argument("question")
@_retrieval_options
@click.pass_obj
def context(obj: Context, question: str, k: int | None, budget: int | None, lang: str | None,
            mode: str | None, collection: str | None, path_prefix: str | None, as_json: bool) -> None:
    """Print a prompt-ready block: numbered, citable sources, the instructions, the question."""
    from rag_pg.tree.context import build_context

    def go() -> int:
        block = build_context(obj.rag(announce=not as_json), question, k=k, budget=budget,
                              lang=lang, collection=collection, mode=mode, path_prefix=path_prefix)
        if as_json:
            emit_json(block.to_dict())
        else:
            click.echo(block.text, nl=False)
        if block.omitted:
            warn(f"{block.omitted} hit(s) left out to stay within {block.budget} tokens")
        return EXIT_OK

    run_guarded(go)


@click.command()
@click.argument("question")
@_retrieval_options
@click.pass_obj
def ask(obj: Context, question: str, k: int | None, budget: int | None, lang: str | None,
        mode: str | None, collection: str | None, path_prefix: str | None, as_json: bool) -> None:
    """Answer QUESTION with the configured chat endpoint ([llm]) from cited sources only."""
    from rag_pg.tree.context import ask as ask_llm
    from rag_pg.tree.llm import make_chat_client

    def go() -> int:
        client = make_chat_client(obj.settings.llm)  # before any search: exit 2 if unset
        try:
            answer = ask_llm(obj.rag(announce=not as_json), question, client=client, k=k,
                             budget=budget, lang=lang, collection=collection, mode=mode,
                             path_prefix=path_prefix)
        finally:
            client.close()
        if answer.removed:
            cited = ", ".join(f"[Source {n}]" for n in answer.removed)
            warn(f"removed {len(answer.removed)} citation(s) of sources that do not exist: {cited}")
        if as_json:
            emit_json(answer.to_dict())
            return EXIT_OK
        click.echo(answer.text)
        if answer.cited:
            click.echo("")
            for source in answer.cited:
                click.echo(f"[Source {source.n}] {source.label} — {source.location}")
        return EXIT_OK

    run_guarded(go)


@click.command()
@click.argument("root", type=click.Path(file_okay=False, exists=True))
@click.option("--mode", type=click.Choice(["bottom-up", "direct"]), default="bottom-up",
              help="bottom-up: each level from the one below; direct: parts from sources, work from chapters.")
@click.option("--lang", type=LANGS, default=None, help="Language of the summaries (default: guessed per node).")
@click.option("--force", is_flag=True, help="Regenerate every summary, changed inputs or not.")
@click.option("--dry-run", is_flag=True, help="Say what would be regenerated; send and write nothing.")
@click.option("--link-sources", is_flag=True,
              help="Add parent_source_file/level/node_type to source.md files that lack them.")
@click.option("--prompt", "prompt_file", type=click.Path(dir_okay=False, exists=True),
              help="A prompt template ($kind $title $work $level $inputs) for every level.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_obj
def summarize(obj: Context, root: str, mode: str, lang: str | None, force: bool, dry_run: bool,
              link_sources: bool, prompt_file: str | None, as_json: bool) -> None:
    """Write summary.md files (levels 1-3) for ROOT's work/part/chapter/source.md tree."""
    from rag_pg.tree.llm import make_chat_client
    from rag_pg.tree.summarize import summarize as run_summaries

    def go() -> int:
        prompts = None
        if prompt_file:
            text = Path(prompt_file).read_text(encoding="utf-8")
            if "$inputs" not in text:
                raise ConfigError(f"{prompt_file}: a summary prompt must contain $inputs")
            prompts = {"fr": text, "en": text}
        client = None if dry_run else make_chat_client(obj.settings.llm)
        try:
            report = run_summaries(root, client, mode=mode, lang=lang, force=force,
                                   dry_run=dry_run, link_sources=link_sources, prompts=prompts)
        finally:
            if client is not None:
                client.close()
        if as_json:
            emit_json(report.to_dict())
        else:
            verb = "would regenerate" if dry_run else "generated"
            click.echo(f"{verb} {len(report.generated)} summaries, {len(report.unchanged)} unchanged,"
                       f" {len(report.failures)} failed; {report.calls} LLM calls")
            for path in report.generated:
                click.echo(f"  + {path}")
            for failure in report.failures:
                click.echo(f"  failed {failure.path}: {failure.error}")
        for message in report.warnings:
            warn(message)
        return EXIT_PARTIAL if report.failures else EXIT_OK

    run_guarded(go)


COMMANDS = [tree, export_, import_, context, ask, summarize]
