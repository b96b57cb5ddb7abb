"""CLI commands of the retrieval area, attached to the main `ragpg` group: `ragpg eval`."""

from __future__ import annotations

from typing import Any

import click

from rag_pg.cli._common import EXIT_OK, EXIT_PARTIAL, Context, emit_json, run_guarded, warn


def _modes(value: str | None) -> list[str] | None:
    from rag_pg.admin.evaluate import EVAL_MODES

    if not value:
        return None
    modes = [m.strip() for m in value.split(",") if m.strip()]
    unknown = [m for m in modes if m not in EVAL_MODES]
    if unknown:
        raise click.BadParameter(f"unknown mode {unknown[0]!r} (choose among {', '.join(EVAL_MODES)})")
    return list(dict.fromkeys(modes))


@click.command("eval")
@click.argument("questions", type=click.Path(dir_okay=False))
@click.option("--root", default=None, type=click.Path(file_okay=False),
              help="Folder the questions' paths are relative to (default: the paths as indexed).")
@click.option("--modes", default=None,
              help="Comma-separated: vector,keyword,hybrid,rerank (default: vector,keyword,hybrid;"
                   " keyword only without vectors).")
@click.option("-k", "k", type=int, default=10, show_default=True, help="Depth of the metrics.")
@click.option("--collection", "-c", default=None, help="Collection (workspace); default: the configured one.")
@click.option("--max-per-document", type=int, default=None,
              help="Cap hits per file, as `ragpg search` does (default: none; 1 ranks files).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.option("--details", is_flag=True, help="Add each query's ranking per mode (with --json).")
@click.option("--min-ndcg", type=float, default=None,
              help="CI gate: exit 1 when a mode's nDCG@k is below this value.")
@click.pass_obj
def eval_command(obj: Context, questions: str, root: str | None, modes: str | None, k: int,
                 collection: str | None, max_per_document: int | None, as_json: bool, details: bool,
                 min_ndcg: float | None) -> None:
    """Measure retrieval on QUESTIONS (JSONL: {"query", "relevant": [paths]}) over the current
    index, mode by mode: Hit@1, Hit@5, MRR@10, nDCG@10, Recall@10. Ingests nothing; every run
    is stored in the eval_run table."""
    from rag_pg.admin import evaluate

    chosen = _modes(modes)

    def go() -> int:
        report = evaluate.run(obj.rag(announce=not as_json), questions, modes=chosen, k=k,
                              root=root, collection=collection, max_per_document=max_per_document)
        if not details:
            report.pop("queries")
        if as_json:
            emit_json(report)
        else:
            _print_table(report, k, details)
        return _gate(report, k, min_ndcg)

    run_guarded(go)


def _gate(report: dict[str, Any], k: int, min_ndcg: float | None) -> int:
    if min_ndcg is None:
        return EXIT_OK
    key = f"ndcg@{k}"
    below = {m: v[key] for m, v in report["modes"].items() if v[key] < min_ndcg}
    for mode, value in below.items():
        warn(f"{mode}: {key} {value:.4f} is below --min-ndcg {min_ndcg}")
    return EXIT_PARTIAL if below else EXIT_OK


def _print_table(report: dict[str, Any], k: int, details: bool) -> None:
    from rag_pg.admin.evaluate import METRICS

    modes = list(report["modes"])
    names = [m.replace("@10", f"@{k}") for m in METRICS]
    cap = report["max_per_document"]
    click.echo(f"{report['questions']} questions, collection {report['collection']},"
               f" run {report['run_id']}, fusion {report['fusion']},"
               f" max_per_document {cap if cap is not None else 'none'}")
    click.echo(f"{'metric':<11}" + "".join(f"{m:>10}" for m in modes))
    for name in names:
        click.echo(f"{name:<11}" + "".join(f"{report['modes'][m][name]:>10.4f}" for m in modes))
    if report["sections"]:
        click.echo(f"\nsection level ({report['section_questions']} questions with path#anchor)")
        click.echo(f"{'metric':<11}" + "".join(f"{m:>10}" for m in report["sections"]))
        for name in names:
            click.echo(f"{name:<11}" + "".join(f"{v[name]:>10.4f}" for v in report["sections"].values()))
    if details:
        for q in report["queries"]:
            click.echo(f"\n{q['query']}\n  relevant: {', '.join(q['relevant'])}")
            for mode, ranked in q["rankings"].items():
                click.echo(f"  {mode:<8} {' '.join(ranked[:5])}")


COMMANDS = [eval_command]
