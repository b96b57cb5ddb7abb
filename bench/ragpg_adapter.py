#!/usr/bin/env python3
"""ragpg's adapter for the shared peer benchmark (``../shared/bench``, see its README).

Run by the harness's driver with the project's interpreter::

    run_all.sh --adapter ragpg=/path/to/.venv/bin/python:/path/to/bench/ragpg_adapter.py \
               --peers baseline_raw,ragpg,llamaindex,langchain

or simply ``make bench-peers``. It is a thin client of the library, doing what a user does:

  ingest  ``ragpg init`` when the schema is missing (cold step only), then ``ragpg ingest CORPUS``
          semantics through ``RagPG.ingest`` (incremental: unchanged files are skipped by hash,
          changed ones replaced whole), embedding.url = the harness's server (native ``/embed``,
          JSON floats: ragpg's HTTP provider contract), database.url = the harness's database.
  query   ``RagPG.search(query, k, mode=vector|keyword|hybrid)``; each hit's relative path.

Comparability: top-k and per-leg candidates come from the harness (10 / 20); ``ef_search`` is
passed through the configuration when this ragpg version has such a setting, else ragpg's
own (recorded in every query line as ``ef_search``). What ragpg does differently, on purpose:
its own chunker (sections, then paragraphs packed to 300 estimated tokens with overlap), the
``title › section`` context prefixed to each embedded text, per-document language detection
with accent-folding French/English/simple text search configurations and BM25 (the keyword
leg matches each chunk in its own configuration), and the HNSW index (pgvector's default
``m=16, ef_construction=64``) built after the first load of an empty collection.

The harness's ``common.py`` is imported from the harness folder itself (never copied): the
folder of the driver that started this process, else ``$RAGBENCH_DIR``, else
``../shared/bench`` beside the repository.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PEER = "ragpg"


def harness_dir() -> Path:
    """Where the harness (common.py) lives: the driver's folder, $RAGBENCH_DIR, or ../shared/bench."""
    candidates: list[Path] = []
    try:  # the driver that started us: .../bench/run_all.py
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
            for arg in fh.read().split(b"\0"):
                if arg.endswith(b"run_all.py"):
                    candidates.append(Path(os.fsdecode(arg)).resolve().parent)
    except OSError:
        pass
    if os.environ.get("RAGBENCH_DIR"):
        candidates.append(Path(os.environ["RAGBENCH_DIR"]))
    candidates.append(REPO.parent / "shared" / "bench")
    for path in candidates:
        if (path / "common.py").is_file():
            return path
    raise SystemExit("ragpg_adapter: cannot find the harness's common.py (set RAGBENCH_DIR)")


sys.path.insert(0, str(harness_dir()))
sys.path.insert(0, str(REPO))
import common  # type: ignore[import-not-found]  # noqa: E402


class CountingProvider:
    """Wraps ragpg's provider to count what goes to the embedding server (as EmbedClient does)."""

    def __init__(self, make: Any, kind: str, batch: int):
        self._make = make  # built on first use, as RagPG builds its own provider: a run that
        self._inner: Any = None  # embeds nothing (no-change) never loads the HTTP client
        self.kind = kind
        self.batch = batch
        self.texts = 0
        self.calls = 0
        self.seconds = 0.0
        self.lock = threading.Lock()

    @property
    def inner(self) -> Any:
        if self._inner is None:
            self._inner = self._make()
        return self._inner

    @property
    def model(self) -> str | None:
        return self.inner.model

    @property
    def dimension(self) -> int | None:
        return self.inner.dimension

    def embed(self, type: Any, texts: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner.embed(type, texts)
        finally:
            with self.lock:  # ragpg may embed from several threads (embedding.concurrency)
                self.seconds += time.perf_counter() - t0
                self.calls += -(-len(texts) // self.batch)
                self.texts += len(texts)

    def health(self) -> dict[str, Any]:
        return self.inner.health()  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    def counters(self) -> dict[str, Any]:
        return {"embed_texts": self.texts, "embed_calls": self.calls,
                "embed_client_s": round(self.seconds, 3)}


def settings_for(a: Any, **extra: Any) -> Any:
    from rag_pg.config import RetrievalSettings, Settings

    overrides: dict[str, Any] = {
        "database.url": a.pg_uri,
        "embedding.provider": "http",
        "embedding.url": a.embed_url,
        "embedding.batch_size": a.embed_batch,
    }
    overrides.update(extra)
    known = {f.name for f in dataclasses.fields(RetrievalSettings)}
    overrides = {k: v for k, v in overrides.items()
                 if not k.startswith("retrieval.") or k.split(".", 1)[1] in known}
    # environ={} and a cwd without ragpg.toml: nothing from the machine leaks into the run.
    return Settings.load(environ={}, overrides=overrides, cwd=Path(a.state_dir))


def open_rag(a: Any, settings: Any) -> tuple[Any, CountingProvider]:
    from rag_pg.api import RagPG
    from rag_pg.embed import make_provider

    provider = CountingProvider(lambda: make_provider(settings.embedding), "http",
                                settings.embedding.batch_size)
    rag = RagPG(settings.database.url, settings, provider=provider,
                warn=lambda m: print(f"ragpg: {m}", file=sys.stderr))
    return rag, provider


def cmd_ingest(a: Any) -> None:
    from psycopg import sql

    import rag_pg.api  # noqa: F401  - imports are not part of wall_s (the contract); proc_wall_s has them
    import rag_pg.embed  # noqa: F401

    res = common.Results(PEER, a.out)
    t_start = time.perf_counter()
    breakdown: dict[str, float] = {}
    settings = settings_for(a)
    rag, provider = open_rag(a, settings)
    with rag:
        t0 = time.perf_counter()
        with rag.source.connection() as conn:
            missing = conn.execute(
                "SELECT to_regclass(%s) IS NULL", (f'"{settings.database.schema}".document',)
            ).fetchone()[0]
        if missing:
            rag.init()  # `ragpg init`: only the cold step needs it
            breakdown["init_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        report = rag.ingest(a.corpus)
        breakdown["ingest_s"] = round(time.perf_counter() - t0, 3)
        breakdown["embed_client_s"] = round(provider.seconds, 3)
        wall = time.perf_counter() - t_start
        schema = sql.Identifier(settings.database.schema)
        chunk_table = f'"{settings.database.schema}".chunk'
        vector_table = f'"{settings.database.schema}".chunk_vector'
        with rag.source.connection() as conn:
            rows_after, vectors_after, sizes = conn.execute(
                sql.SQL("SELECT (SELECT count(*) FROM {s}.chunk), (SELECT count(*) FROM {s}.chunk_vector),"
                        " pg_total_relation_size(%s::regclass) + pg_total_relation_size(%s::regclass)"
                        ).format(s=schema),
                (chunk_table, vector_table),
            ).fetchone()
            indexed = report.added + report.changed
            changed_docs_chunks = conn.execute(
                sql.SQL("SELECT coalesce(sum(chunk_count), 0) FROM {s}.document"
                        " WHERE collection = %s AND path = ANY(%s)").format(s=schema),
                (report.collection, indexed),
            ).fetchone()[0]
            indexes = dict(conn.execute(
                "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid)"
                " FROM pg_index WHERE indrelid = %s::regclass",
                (vector_table,),
            ).fetchall())
    written = report.chunks_upserted
    res.emit(
        phase="ingest", label=a.label, wall_s=round(wall, 3), docs_seen=report.documents_seen,
        docs_changed=report.documents_indexed, docs_skipped=report.documents_skipped,
        docs_failed=report.documents_failed, chunks_written=written, rows_after=rows_after,
        changed_docs_chunks=changed_docs_chunks,
        vectors_after=vectors_after, docs_per_s=round(report.documents_seen / wall, 1),
        chunks_per_s=round(written / wall, 1) if written else None,
        ragpg_embedding_calls=report.embedding_calls, table_bytes=sizes,
        index_bytes={k.split(".")[-1]: v for k, v in indexes.items()},
        **provider.counters(), breakdown=breakdown,
        config={"chunk": f"{settings.chunk.size}/{settings.chunk.overlap} tokens",
                "embed_batch": settings.embedding.batch_size, "embed_api": "native /embed, base64 float32",
                "embed_concurrency": getattr(settings.embedding, "concurrency", 1),
                "embed_client_s": "sum of the requests' durations (several may be in flight)",
                "ts_config": "per document: ragpg.french|english|simple (unaccent)",
                "hnsw": "m=16,ef_construction=64 (pgvector defaults); built after the first load of"
                        " an empty collection, maintained per row afterwards"},
    )


def cmd_query(a: Any) -> None:
    res = common.Results(PEER, a.out)
    settings = settings_for(
        a, **{"retrieval.k": a.k, "retrieval.candidates": a.candidates,
              "retrieval.ef_search": a.ef_search, "retrieval.hnsw_ef_search": a.ef_search}
    )
    effective_ef = getattr(settings.retrieval, "ef_search",
                           getattr(settings.retrieval, "hnsw_ef_search", None))
    if effective_ef is None:
        from rag_pg.search.plan import SearchPlan

        default = {f.name: f.default for f in dataclasses.fields(SearchPlan)}.get("ef_search")
        # ragpg runs max(ef_search, candidates, k)
        effective_ef = max(int(default or 40), a.candidates, a.k)
    rag, _ = open_rag(a, settings)
    with rag:
        for mode in ("vector", "keyword", "hybrid"):
            def search(q: str, mode: str = mode) -> list[str]:
                return [h.path for h in rag.search(q, a.k, mode=mode)]

            for path in a.queries:
                common.run_queries(res, mode, common.qset_name(path), common.load_queries(path), search,
                                   a.k, a.warmup, ef_search=effective_ef, candidates=a.candidates,
                                   semantics=_SEMANTICS[mode])


_SEMANTICS = {
    "vector": "RagPG.search(mode='vector'): HNSW cosine on the model's partial index",
    "keyword": "RagPG.search(mode='keyword'): OR websearch_to_tsquery in french|english|simple, ts_rank, GIN",
    "hybrid": "RagPG.search(mode='hybrid'): one SQL statement (both legs), RRF k=60 in Python",
}


def main(argv: list[str] | None = None) -> None:
    ap = common.adapter_argparser(PEER, __doc__)
    for name in ("ingest", "query"):
        ap.subcommands.choices[name].add_argument(
            "--embed-batch", type=int, default=64,
            help="embedding.batch_size (default 64, as the peers use)")
    a = ap.parse_args(argv)
    os.makedirs(a.state_dir, exist_ok=True)
    {"ingest": cmd_ingest, "query": cmd_query}[a.cmd](a)


if __name__ == "__main__":
    main()
