"""Offline fusion sweep: read each question's two legs once, then fuse them many ways.

``dump`` runs every question of a set through ``RagPG.search`` twice, ``mode="vector"`` and
``mode="keyword"`` (40 chunks each; the keyword leg gets the words a hybrid search gives it,
``rag_pg.search.question.keyword_text``), and writes the hits as JSON lines. ``sweep`` rebuilds the
hybrid statement's rows from them (the union of the two lists, each chunk with its rank and
score in each leg) and runs ``rag_pg.search.hits.shape`` on them, the code ``search`` runs, once per
fusion setting: a factor is varied without embedding anything again, and the default
setting reproduces ``ragpg eval``'s hybrid figure.

    RAGPG_DATABASE_URL=... python bench/fusion_sweep.py dump QUESTIONS -c COLL [--root R] -o legs.jsonl
    python bench/fusion_sweep.py sweep legs.jsonl [legs2.jsonl ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rag_pg.admin.evaluate import file_level, load_questions, mean, metrics, relative_to
from rag_pg.search.hits import Candidate, shape
from rag_pg.search.plan import SearchPlan
from rag_pg.search.question import keyword_text

DEPTH = 40  # each leg's list, as retrieval.candidates gives the hybrid statement


def dump(args: argparse.Namespace) -> None:
    from psycopg.rows import dict_row

    from rag_pg.api import RagPG
    from rag_pg.config.settings import Settings

    questions = load_questions(args.questions)
    settings = Settings.load(overrides={})
    out = Path(args.output).open("w", encoding="utf-8")
    with RagPG(settings.database.url, settings) as rag:
        with rag.source.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(rag.searcher.q("search_document_roots"),
                               {"collection": args.collection}).fetchall()
        relative = relative_to(args.root, {str(r["path"]): r["source_root"] for r in rows})
        started = time.time()
        for n, question in enumerate(questions, start=1):
            legs = {
                "vector": rag.search(question.query, DEPTH, mode="vector", collection=args.collection),
                "keyword": rag.search(keyword_text(question.query), DEPTH, mode="keyword",
                                      collection=args.collection),
            }
            ids = sorted({h.chunk_id for found in legs.values() for h in found})
            phrases = _phrases(rag, keyword_text(question.query), ids)
            record = {"query": question.query, "relevant": list(question.relevant),
                      "legs": {leg: [{"chunk_id": h.chunk_id, "document_id": h.document_id,
                                      "path": relative(h.path), "anchor": h.chunk.anchor,
                                      "section": h.chunk.section, "title": h.chunk.document_title,
                                      "rank": h.ranks[leg], "score": h.scores[leg],
                                      "phrases": phrases.get(h.chunk_id or 0, ([], 0))}
                                     for h in hits]
                               for leg, hits in legs.items()}}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            if n % 50 == 0:
                print(f"{n}/{len(questions)} {time.time() - started:.0f}s", file=sys.stderr)
    out.close()


def _phrases(rag: Any, text: str, ids: list[int]) -> dict[int, tuple[list[str], int]]:
    """Each chunk's phrases of the question and their number, as the hybrid statement reads
    them (its ``search_phrases`` fragments), for the phrase leg."""
    from psycopg import sql

    from rag_pg.search.bm25 import keyword_query
    from rag_pg.search.plan import phrase_windows
    from rag_pg.search.statement import LANGUAGES

    q = rag.searcher.q
    statement = sql.SQL("WITH {} SELECT c.id, {} FROM {}.chunk c WHERE c.id = ANY(%(ids)s)").format(
        q("search_phrases"), q("search_phrases_held"), sql.Identifier(q.schema))
    params = {"phrase_windows": phrase_windows(keyword_query(text).text), "ids": ids,
              "ts_configs": [q.config(lang) for lang in LANGUAGES]}
    with rag.source.connection() as conn:
        return {row[0]: (row[1], row[2]) for row in conn.execute(statement, params)}


def candidates(record: Mapping[str, Any]) -> tuple[list[Candidate], dict[int, tuple[str, str]]]:
    """The hybrid statement's rows for one question, and each chunk's (path, anchor)."""
    rows: dict[int, dict[str, Any]] = {}
    where: dict[int, tuple[str, str]] = {}
    for leg, hits in record["legs"].items():
        for h in hits:
            row = rows.setdefault(h["chunk_id"], {
                "chunk_id": h["chunk_id"], "document_id": h["document_id"], "path": h["path"],
                "anchor": h["anchor"], "section": h["section"], "title": h["title"]})
            where[h["chunk_id"]] = (h["path"], h["anchor"])
            if "phrases" in h:  # dumps before the phrase leg have none
                row.update(phrases_held=h["phrases"][0], phrases_asked=h["phrases"][1])
            if leg == "vector":
                row.update(vector_rank=h["rank"], distance=1.0 - h["score"])
            else:
                row.update(keyword_rank=h["rank"], keyword_score=h["score"])
    return [Candidate(**row) for row in rows.values()], where


def evaluate(records: Sequence[Mapping[str, Any]], plan_of: dict[str, Any],
             k: int = 10) -> dict[str, Any]:
    """File-level (and section-level, when anchored) metrics of one fusion setting, and each
    question's nDCG@k (``per_query``, for paired differences)."""
    files: list[dict[str, float]] = []
    sections: list[dict[str, float]] = []
    for record in records:
        rows, where = candidates(record)
        plan = SearchPlan(collection="", k=k, mode=plan_of.get("mode", "hybrid"),
                          query_text=keyword_text(record["query"]),
                          **{key: v for key, v in plan_of.items() if key != "mode"})
        ranking = [where[h.chunk_id or 0] for h in shape(rows, plan)]
        relevant = record["relevant"]
        files.append(metrics(ranking, file_level(relevant), k))
        anchored = [r for r in relevant if "#" in r]
        if anchored:
            sections.append(metrics(ranking, anchored, k))
    out: dict[str, Any] = {"file": mean(files), "per_query": {
        "file": [m[f"ndcg@{k}"] for m in files], "section": [m[f"ndcg@{k}"] for m in sections]}}
    if sections:
        out["section"] = mean(sections)
    return out


def paired(a: Sequence[float], b: Sequence[float]) -> str:
    """Mean of b - a over the same questions, and twice its standard error (a rough 95 %)."""
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    n = len(diffs)
    mu = sum(diffs) / n
    se = (sum((d - mu) ** 2 for d in diffs) / (n - 1) / n) ** 0.5 if n > 1 else 0.0
    return f"{mu:+.4f} ± {2 * se:.4f}"


def load(paths: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    return {Path(p).stem: [json.loads(line) for line in Path(p).open(encoding="utf-8")] for p in paths}


SETTINGS: dict[str, dict[str, Any]] = {
    "vector": {"mode": "vector"},
    "keyword": {"mode": "keyword"},
    "rrf": {"fusion": "rrf"},
    "convex": {"fusion": "convex"},
    "adaptive": {"fusion": "adaptive"},
}


def _top_gap(m: int | None) -> Any:
    """Decisiveness variants: 1 - the mean normalised score of the next ``m`` candidates
    (``None``: all of them, :func:`rag_pg.search.fuse.decisiveness`)."""
    def rule(values: Sequence[float]) -> float:
        if len(values) < 2:
            return 1.0 if values else 0.0
        high, low = max(values), min(values)
        if high <= low:
            return 0.0
        others = sorted(values, reverse=True)[1:m + 1 if m else None]
        return 1.0 - sum((v - low) / (high - low) for v in others) / len(others)
    return rule


def _z_top(values: Sequence[float]) -> float:
    """The top score's z-score over the list, divided by its largest possible value."""
    n = len(values)
    if n < 2:
        return 1.0 if values else 0.0
    mu = sum(values) / n
    sd = (sum((v - mu) ** 2 for v in values) / n) ** 0.5
    return 0.0 if sd == 0 else (max(values) - mu) / sd / (n - 1) ** 0.5


RULES = {"mean": _top_gap(None), "gap1": _top_gap(1), "gap5": _top_gap(5), "gap10": _top_gap(10),
         "gap20": _top_gap(20), "z": _z_top}

Bounds = Callable[[str, Sequence[float]], tuple[float, float]]


def _min_max(depth: int | None = None, *, from_zero: Sequence[str] = ()) -> Bounds:
    """(low, high) of a leg's list: its best and its worst among the first ``depth`` (below
    the low bound a score counts 0), the low bound 0 for the legs of ``from_zero``."""
    def bounds(leg: str, values: Sequence[float]) -> tuple[float, float]:
        top = sorted(values, reverse=True)[:depth]
        return (0.0 if leg in from_zero else top[-1]), top[0]
    return bounds


def _floor(floors: Mapping[str, float]) -> Bounds:
    """From each leg's own floor (BM25 0, cosine -1 or 0) to its best."""
    return lambda leg, values: (floors[leg], max(values))


def _spread(sds: float, *, z: bool = False) -> Bounds:
    """Mean ± ``sds`` standard deviations (DBSF), or the z-score over the top's (``z``)."""
    def bounds(leg: str, values: Sequence[float]) -> tuple[float, float]:
        mu = sum(values) / len(values)
        sd = (sum((v - mu) ** 2 for v in values) / len(values)) ** 0.5
        return (mu, max(values)) if z else (mu - sds * sd, mu + sds * sd)
    return bounds


#: The keyword leg's normalisation and its alternatives (docs/retrieval.md, "Keyword scores
#: from zero"): ``norm<name>`` in a setting.
NORMS: dict[str, Bounds] = {
    "kwmax": _min_max(from_zero=("keyword",)),  # the default
    "minmax": _min_max(),
    "mm20": _min_max(20), "mm10": _min_max(10),
    "dbsf": _spread(3), "z": _spread(0, z=True),
    "floor": _floor({"keyword": 0.0, "vector": -1.0}), "zero": _floor({"keyword": 0.0, "vector": 0.0}),
}


def _normalised(bounds: Bounds) -> Callable[..., dict[Any, dict[str, float]]]:
    """``fuse.convex_parts`` with each non-absolute leg scaled by ``bounds`` (clipped to [0, 1])."""
    from rag_pg.search import fuse

    def parts(scores: Mapping[Any, Mapping[str, float]], *, weights: Mapping[str, float] | None = None,
              legs: Sequence[str] = ("vector", "keyword"), absolute: Sequence[str] = (),
              from_zero: Sequence[str] = ()) -> dict[Any, dict[str, float]]:
        total = sum(fuse._weight(weights, leg) for leg in legs) or 1.0
        lists = {leg: [m[leg] for m in scores.values() if leg in m] for leg in legs}
        scale = {leg: bounds(leg, v) for leg, v in lists.items() if v and leg not in absolute}
        out: dict[Any, dict[str, float]] = {}
        for key, mine in scores.items():
            out[key] = {}
            for leg, raw in mine.items():
                if leg in absolute:
                    value = raw
                else:
                    low, high = scale[leg]
                    value = min(1.0, max(0.0, raw - low) / (high - low)) if high > low else 1.0
                out[key][leg] = fuse._weight(weights, leg) * value / total
        return out
    return parts


def configure(name: str) -> dict[str, Any]:
    """``adaptive/p<power>/<rule>`` sets :mod:`rag_pg.search.fuse`'s power and decisiveness rule
    (``w<v>:<k>`` fixed leg weights, ``t<w>`` the title weight, ``phrase<w>`` the phrase
    leg's, ``norm<name>`` the legs' normalisation, :data:`NORMS`), then returns the plan's
    fields."""
    from rag_pg.search import fuse, hits
    fuse.ADAPTIVE_POWER = 1.0
    fuse.decisiveness = RULES["mean"]
    hits.TITLE_WEIGHT = 0.5
    hits.PHRASE_WEIGHT = 0.5
    hits.convex_parts = fuse.convex_parts
    base, *options = name.split("/")
    plan = dict(SETTINGS[base])
    for option in options:
        if option.startswith("norm"):
            hits.convex_parts = _normalised(NORMS[option[len("norm"):]])
        elif option.startswith("phrase"):
            hits.PHRASE_WEIGHT = float(option[len("phrase"):])
        elif option.startswith("p"):
            fuse.ADAPTIVE_POWER = float(option[1:])
        elif option.startswith("w"):
            v, k = option[1:].split(":")
            plan["weights"] = {"vector": float(v), "keyword": float(k)}
        elif option.startswith("t"):
            hits.TITLE_WEIGHT = float(option[1:])
        else:
            fuse.decisiveness = RULES[option]
    return plan


def sweep(args: argparse.Namespace) -> None:
    sets = load(args.legs)
    names = args.settings.split(",") if args.settings else list(SETTINGS)
    header = ["setting"] + [f"{s}{'' if lvl == 'file' else ' §'}" for s in sets
                            for lvl in (["file", "section"] if any(
                                "#" in r for q in sets[s] for r in q["relevant"]) else ["file"])]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    reference: dict[str, Any] = {}
    for name in names:
        plan_of = configure(name)
        cells = []
        for set_name, records in sets.items():
            result = evaluate(records, plan_of)
            for lvl in ("file", "section"):
                if lvl not in result:
                    continue
                cell = f"{result[lvl]['ndcg@10']:.4f}"
                if args.versus and name != args.versus and (set_name, lvl) in reference:
                    cell += f" ({paired(reference[set_name, lvl], result['per_query'][lvl])})"
                if name == args.versus:
                    reference[set_name, lvl] = result["per_query"][lvl]
                cells.append(cell)
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("questions")
    d.add_argument("-c", "--collection", required=True)
    d.add_argument("--root")
    d.add_argument("-o", "--output", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("legs", nargs="+")
    s.add_argument("--settings", help="comma-separated settings (see configure)")
    s.add_argument("--versus", help="a setting listed before the others: each cell adds the mean"
                   " paired difference to it ± twice its standard error")
    args = parser.parse_args()
    dump(args) if args.command == "dump" else sweep(args)


if __name__ == "__main__":
    main()
