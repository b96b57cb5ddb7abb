#!/usr/bin/env python3
"""What block maxima could skip of ragpg's pruned keyword leg, measured on kept databases.

    .venv-engines/bin/python bench/block_max.py --keep /work/engines-100k --keep /work/engines-1m
                                                [--queries 30] [--results bench/results]

Reads the databases that ``bench/keyword_engines.py --keep DIR`` built and kept (the Zipf-worded
corpus of ``bench/scale.py`` in the ``ts`` database) and asks, for its questions (the same
generator and seed: one mid-frequency word and two frequent ones), how many postings an exact
top 10 must still read if every query term's postings carried block maxima (the best BM25
contribution of the term within the block), the way a block-max WAND engine skips.

Each question's terms are read once (every posting's chunk id and term frequency) and scored in
numpy with ragpg's BM25 (k1 1.2, b 0.75, N and average length from ``chunk_stat``); theta is the
final list's 10th score, the best a pruning algorithm can know (a real one learns it as it goes,
so it reads at least what is counted here). Counted per question:

* the postings of the rarest word, which ragpg's MaxScore leg reads today (the frequent words are
  non-essential: their postings are never read);
* of those, how many lie in a block whose summed maxima reach theta, for blocks of fixed chunk-id
  ranges (16 to 8,192 ids, what a writer could keep per range and lexeme) and for blocks of 128
  postings of each term (block-max WAND's shape: the rarest word's block and each frequent word's
  block covering the same chunk);
* the block-maxima rows the frequent words would need read at that block size.

Writes ``<results>/block_max.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scale_keyword  # noqa: E402  (bench/ is not a package)

K1, B = 1.2, 0.75
RANGES = (16, 128, 1024, 8192)
POSTING_BLOCK = 128


def postings(conn: object, word: str, cache: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The chunk ids (ascending) holding ``word`` and its frequency in each."""
    if word not in cache:
        rows = conn.execute(  # type: ignore[attr-defined]
            "SELECT c.id, cardinality(u.positions) FROM ragpg.chunk c, "
            "unnest(ts_filter(setweight(c.tsv, 'A', ARRAY[%s]), '{a}')) u "
            "WHERE c.tsv @@ to_tsquery('ragpg.simple', %s) ORDER BY c.id", (word, word)).fetchall()
        found = np.array(rows, dtype=np.int64).reshape(-1, 2)
        cache[word] = (found[:, 0], found[:, 1])
    return cache[word]


def posting_block_bound(ids: np.ndarray, contrib: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Each chunk of ``at``'s bound from the block of 128 postings of this term that covers it."""
    maxima = np.maximum.reduceat(contrib, np.arange(0, len(ids), POSTING_BLOCK))
    block = np.minimum(np.searchsorted(ids, at) // POSTING_BLOCK, len(maxima) - 1)
    return maxima[block]


def question(conn: object, text: str, n: int, avgdl: float, cache: dict) -> dict[str, float]:
    terms = []
    for word in text.split():
        ids, tf = postings(conn, word, cache)
        df = len(ids)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        dl = 27.0  # every chunk of this corpus: 20 words counted as 27 tokens
        terms.append((ids, idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))))
    terms.sort(key=lambda t: len(t[0]))
    chunks = np.unique(np.concatenate([ids for ids, _ in terms]))
    score = np.zeros(len(chunks))
    for ids, contrib in terms:
        score[np.searchsorted(chunks, ids)] += contrib
    theta = np.sort(score)[-10] * (1 - 1e-9)
    rare = terms[0][0]
    out: dict[str, float] = {"rarest": len(rare), "top": int((score >= theta).sum())}
    for size in RANGES:
        bound = np.zeros(int(chunks.max()) // size + 1)
        for ids, contrib in terms:
            best = np.zeros_like(bound)
            np.maximum.at(best, ids // size, contrib)
            bound += best
        out[f"range {size}"] = int((bound[rare // size] >= theta).sum())
        out[f"rows {size}"] = sum(len(np.unique(ids // size)) for ids, _ in terms[1:])
    bound = sum(posting_block_bound(ids, contrib, rare) for ids, contrib in terms)
    out["posting blocks"] = int((bound >= theta).sum())
    return out


def measure(folder: Path, queries: int) -> tuple[int, list[dict[str, float]]]:
    import psycopg

    with psycopg.connect(f"postgresql://postgres:@/ts?host={folder}", autocommit=True) as conn:
        n, tokens = conn.execute("SELECT chunks, tokens FROM ragpg.chunk_stat").fetchone()
        rng = np.random.default_rng(8)  # bench/keyword_engines.py's questions (its seed + 1)
        words, _ = scale_keyword.vocabulary()
        texts = [scale_keyword.query_text(rng, words, "question") for _ in range(queries)]
        cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        return n, [question(conn, t, n, tokens / n, cache) for t in texts]


def table(found: list[tuple[int, list[dict[str, float]]]]) -> list[str]:
    lines = ["| p50 over the questions | " + " | ".join(f"{n:,} chunks" for n, _ in found) + " |",
             "|---|" + "---:|" * len(found)]

    def row(label: str, key: str, of_rarest: bool = True) -> str:
        cells = []
        for _, rows in found:
            value = float(np.median([r[key] for r in rows]))
            share = float(np.median([r[key] / r["rarest"] for r in rows]))
            cells.append(f"{value:,.0f} ({share:.3f})" if of_rarest else f"{value:,.0f}")
        return f"| {label} | " + " | ".join(cells) + " |"

    lines.append(row("postings of the rarest word (read by ragpg's leg today)", "rarest", False))
    lines.append(row("chunks at or above theta", "top", False))
    for size in RANGES:
        lines.append(row(f"… in a block of {size} chunk ids that can reach theta", f"range {size}"))
    lines.append(row(f"… in blocks of {POSTING_BLOCK} postings per term that can reach theta",
                     "posting blocks"))
    for size in RANGES:
        lines.append(row(f"block-maxima rows of the frequent words, blocks of {size} ids",
                         f"rows {size}", False))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", type=Path, action="append", required=True,
                    help="a server folder kept by bench/keyword_engines.py --keep (repeat)")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--results", type=Path, default=HERE / "results")
    a = ap.parse_args(argv)
    found = sorted((measure(folder, a.queries) for folder in a.keep), key=lambda f: f[0])
    lines = ["# Block maxima on the Zipf corpus: what an exact top 10 must still read", "",
             f"`bench/block_max.py --queries {a.queries}` — {time.strftime('%Y-%m-%d', time.gmtime())},"
             " on the databases kept by `bench/keyword_engines.py`; theta is each question's final"
             " 10th score (the best case for any pruning); shares are of the rarest word's postings.",
             "", *table(found), ""]
    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "block_max.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
