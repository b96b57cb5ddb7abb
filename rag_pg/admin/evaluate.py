"""`ragpg eval`: known-item questions against the current index, metrics per mode, history.

Each question runs through the same path as ``ragpg search`` (``RagPG.search``), with the same
settings; ``max_per_document`` is the search's own cap (none by default, as in ``search``; 1
ranks documents by their best chunk). Each relevant entry is credited once, at its best rank:
``path`` (any chunk of that file) or ``path#anchor`` (a chunk of that section). File-level metrics count ``path#anchor`` as its
file; section-level metrics, beside them, hold the questions with anchored entries to the section.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from rag_pg.errors import ConfigError
from rag_pg.models import Hit

METRICS = ("hit@1", "hit@5", "mrr@10", "ndcg@10", "recall@10")
EVAL_MODES = ("vector", "keyword", "hybrid", "rerank")  # rerank = hybrid + cross-encoder


@dataclass(frozen=True, slots=True)
class Question:
    query: str
    relevant: tuple[str, ...]


def load_questions(path: str | Path) -> list[Question]:
    """Read a JSONL file of ``{"query": "...", "relevant": ["path.md", "path.md#anchor"]}``."""
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read questions file {source}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"questions file {source} is not UTF-8") from None
    questions: list[Question] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}:{number}: invalid JSON: {exc.msg}") from None
        query = item.get("query") if isinstance(item, dict) else None
        relevant = item.get("relevant") if isinstance(item, dict) else None
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(f'{source}:{number}: "query" must be a non-empty string')
        if (not isinstance(relevant, list) or not relevant
                or not all(isinstance(r, str) and r.strip() for r in relevant)):
            raise ConfigError(f'{source}:{number}: "relevant" must be a non-empty list of paths')
        questions.append(Question(query, tuple(_clean(r) for r in relevant)))
    if not questions:
        raise ConfigError(f"{source}: no questions")
    return questions


def _clean(relevant: str) -> str:
    cleaned = relevant.strip()
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    return cleaned


def _matches(relevant: str, path: str, anchor: str) -> bool:
    want_path, sep, want_anchor = relevant.partition("#")
    return want_path == path and (not sep or want_anchor == anchor)


def metrics(ranking: Sequence[tuple[str, str]], relevant: Sequence[str], k: int = 10) -> dict[str, float]:
    """Hit@1, Hit@5, MRR@k, nDCG@k (binary gains) and Recall@k of one ranking of (path,
    anchor of the best chunk); each relevant entry is credited once, at its best rank."""
    found: set[int] = set()
    gains: list[int] = []
    for path, anchor in ranking[:k]:
        gain = 0
        for j, rel in enumerate(relevant):
            if j not in found and _matches(rel, path, anchor):
                found.add(j)
                gain = 1
                break
        gains.append(gain)
    first = next((i for i, g in enumerate(gains) if g), None)
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return {
        "hit@1": float(first is not None and first < 1),
        "hit@5": float(first is not None and first < 5),
        f"mrr@{k}": 0.0 if first is None else 1.0 / (first + 1),
        f"ndcg@{k}": dcg / ideal if ideal else 0.0,
        f"recall@{k}": len(found) / len(relevant),
    }


def mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    keys = rows[0].keys() if rows else []
    return {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in keys}


Search = Callable[[str, str, int], list[Hit]]


def file_level(relevant: Sequence[str]) -> tuple[str, ...]:
    """The files of the relevant entries (``path#anchor`` counts as its file), each once."""
    return tuple(dict.fromkeys(r.partition("#")[0] for r in relevant))


def evaluate(
    questions: Sequence[Question], modes: Sequence[str], search: Search, *, k: int = 10,
    relative: Callable[[str], str] = lambda p: p,
) -> dict[str, Any]:
    """Run every question in every mode; ``search(query, mode, k)`` returns hits best first.
    File level (``modes``): every question, a ``path#anchor`` entry standing for its file.
    Section level (``sections``, only when some entries name an anchor): the questions with
    anchored entries, each credited when a hit of that section is ranked.
    Returns ``{"modes": {mode: metrics}, "sections": {mode: metrics}, "section_questions": n,
    "queries": [...]}``."""
    per_mode: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    per_section: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    details: list[dict[str, Any]] = []
    for question in questions:
        rankings: dict[str, list[str]] = {}
        anchored = [r for r in question.relevant if "#" in r]
        for mode in modes:
            ranked = [(relative(h.path), h.chunk.anchor) for h in search(question.query, mode, k)]
            per_mode[mode].append(metrics(ranked, file_level(question.relevant), k))
            if anchored:
                per_section[mode].append(metrics(ranked, anchored, k))
            rankings[mode] = [f"{p}#{a}" if anchored and a else p for p, a in ranked]
        details.append({"query": question.query, "relevant": list(question.relevant),
                        "rankings": rankings})
    summary = {mode: mean(rows) for mode, rows in per_mode.items()}
    sections = {mode: mean(rows) for mode, rows in per_section.items() if rows}
    count = sum(1 for q in questions if any("#" in r for r in q.relevant))
    return {"modes": summary, "sections": sections, "section_questions": count, "queries": details}


def relative_to(root: str | Path | None, roots: dict[str, str | None]) -> Callable[[str], str]:
    """Index paths (relative to the root each document was ingested from) -> paths relative to
    ``root``; without ``root`` they are taken as they are."""
    if root is None:
        return lambda p: p
    base = Path(root).expanduser().resolve()

    def convert(path: str) -> str:
        source = roots.get(path)
        if not source:
            return path
        full = Path(source) / path
        try:
            return full.relative_to(base).as_posix()
        except ValueError:
            return Path(os.path.relpath(full, base)).as_posix()

    return convert


def file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def record(conn: Any, queries: Any, *, started: float, questions_file: str | Path, count: int,
           collection: str, root: str | None, k: int, modes: Sequence[str],
           summary: dict[str, Any], settings: dict[str, Any]) -> int:
    """Store one run in ``eval_run`` (its own transaction); returns its id."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(queries("eval_run_insert"), {
            "started_at": datetime.fromtimestamp(started, UTC),
            "questions_file": str(Path(questions_file).resolve()),
            "questions_sha256": file_digest(questions_file), "question_count": count,
            "collection": collection, "root": root, "k": k, "modes": list(modes),
            "metrics": Jsonb(summary), "settings": Jsonb(settings),
        }).fetchone()
    assert row is not None  # INSERT ... RETURNING always returns its row
    return int(row["id"])


def run(
    rag: Any, questions_file: str | Path, *, modes: Sequence[str] | None = None, k: int = 10,
    root: str | Path | None = None, collection: str | None = None,
    max_per_document: int | None = None,
) -> dict[str, Any]:
    """Evaluate the current index of ``rag`` (a RagPG; nothing is ingested) and store the run.

    ``modes`` default to vector, keyword and hybrid when the collection has vectors, else
    keyword. Returns ``{"modes", "queries", "run_id", "questions", "k", "collection"}``.
    """
    if k <= 0:
        raise ConfigError(f"-k must be > 0 (got {k})")
    if max_per_document is not None and max_per_document < 1:
        raise ConfigError(f"--max-per-document must be >= 1 (got {max_per_document})")
    started = time.time()
    questions = load_questions(questions_file)
    collection = collection or rag.settings.collection
    with rag.source.connection() as conn:
        rag._checked(conn)
        model, _ = rag.store.collection_model(conn, collection) or (None, None)
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(rag.searcher.q("search_document_roots"),
                               {"collection": collection}).fetchall()
    has_vectors = bool(model)
    chosen = list(modes) if modes else (["vector", "keyword", "hybrid"] if has_vectors else ["keyword"])
    unknown = [m for m in chosen if m not in EVAL_MODES]
    if unknown:
        raise ConfigError(f"unknown mode {unknown[0]!r}: choose among {', '.join(EVAL_MODES)}")
    if not has_vectors and any(m != "keyword" for m in chosen):
        raise ConfigError(f"collection {collection!r} has no vectors: only --modes keyword applies")

    def search(query: str, mode: str, depth: int) -> list[Hit]:
        reranked = mode == "rerank"
        return list(rag.search(query, depth, mode="hybrid" if reranked else mode,
                               collection=collection, max_per_document=max_per_document,
                               rerank=reranked))

    roots = {str(r["path"]): r["source_root"] for r in rows}
    result = evaluate(questions, chosen, search, k=k, relative=relative_to(root, roots))
    settings = {"retrieval": dict(_asdict(rag.settings.retrieval)),
                "rerank_top_n": rag.settings.rerank.top_n, "model": model,
                "max_per_document": max_per_document}
    with rag.source.connection() as conn:
        run_id = record(conn, rag.searcher.q, started=started, questions_file=questions_file,
                        count=len(questions), collection=collection,
                        root=str(root) if root is not None else None, k=k, modes=chosen,
                        summary=result["modes"], settings=settings)
    return {"modes": result["modes"], "sections": result["sections"],
            "section_questions": result["section_questions"], "questions": len(questions), "k": k,
            "collection": collection, "max_per_document": max_per_document,
            "fusion": rag.settings.retrieval.fusion, "run_id": run_id, "queries": result["queries"]}


def _asdict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)
