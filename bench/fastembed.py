#!/usr/bin/env python3
"""The fake embedding server of ``rag_pg.testing.embedserver``, made fast enough to benchmark with.

    python bench/fastembed.py --port 0 --dim 384 [--delay 0.005]

Same process, same HTTP contract, same vectors bit for bit (checked at start-up on sample
texts): only ``fake_vector`` is replaced by an equivalent that caches each token's three signed
coordinates and sums them with numpy, instead of hashing every token of every text again. The
stock one embeds ~700 chunks/s on one busy core; this one several thousand, so the benchmark
measures ragpg rather than its fake model. ``--delay`` (seconds per request) is the stock
server's, to stand in for a remote model's latency.
"""

from __future__ import annotations

import hashlib
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from rag_pg.testing import embedserver  # noqa: E402

_COORDS = 3
_cache: dict[tuple[str, int], tuple[tuple[int, ...], tuple[float, ...]]] = {}
_stock_fake_vector = embedserver.fake_vector


def _coords(token: str, dim: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    hit = _cache.get((token, dim))
    if hit is None:
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=4 * _COORDS).digest()
        index: list[int] = []
        sign: list[float] = []
        for k in range(_COORDS):
            word = int.from_bytes(digest[4 * k: 4 * k + 4], "big")
            sign.append(1.0 if word & 1 else -1.0)
            index.append((word >> 1) % dim)
        hit = (tuple(index), tuple(sign))
        if len(_cache) < 2_000_000:
            _cache[(token, dim)] = hit
    return hit


class _Fold(dict[int, str]):
    """str.translate table: a character -> its NFKD decomposition without combining marks."""

    def __missing__(self, code: int) -> str:
        decomposed = unicodedata.normalize("NFKD", chr(code))
        folded = "".join(c for c in decomposed if not unicodedata.combining(c))
        self[code] = folded
        return folded


_FOLD = _Fold()
_LOG: dict[int, float] = {}


def fast_tokens(text: str) -> list[str]:
    """``embedserver._tokens``: NFKD per character then dropping combining marks is the same as
    on the whole string (canonical reordering only moves the marks that are dropped)."""
    folded = text if text.isascii() else text.translate(_FOLD)
    return embedserver._TOKEN.findall(folded.lower())


def fast_fake_vector(text: str, dim: int) -> np.ndarray:
    """``embedserver.fake_vector`` with cached token hashes (same arithmetic, same order)."""
    if dim <= 0:
        raise ValueError("dim must be positive")
    vector = np.zeros(dim, dtype=np.float64)
    counts = sorted(Counter(fast_tokens(text)).items())
    if counts:
        idx: list[int] = []
        val: list[float] = []
        for token, tf in counts:
            weight = _LOG.get(tf)
            if weight is None:
                weight = _LOG[tf] = 1.0 + float(np.log(tf))
            index, sign = _coords(token, dim)
            idx.extend(index)
            val.extend(s * weight for s in sign)
        # np.add.at adds in order, as the stock per-token loop does: identical float sums
        np.add.at(vector, np.asarray(idx, dtype=np.intp), np.asarray(val, dtype=np.float64))
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        return np.full(dim, 1.0 / np.sqrt(dim), dtype=np.float32)
    return (vector / norm).astype(np.float32)


def _self_check() -> None:
    samples = ["", "Élévation du thème !", "ﬁ Ǆ Å ḗ 𝐀 ½ ｶ", "Ⅻ ﬀ é\u0301 n\u0303\u0327", "the the the cat sat", "a b c d e f g h i j " * 30,
               "Plilyto riti risto grolisdre ses velvojula tifeto ragen ziflavel storivel avoir sur."]
    for text in samples:
        for dim in (64, 384):
            if (fast_tokens(text) != embedserver._tokens(text)
                    or not np.array_equal(fast_fake_vector(text, dim), _stock_fake_vector(text, dim))):
                raise SystemExit(f"fastembed: differs from the stock fake_vector on {text!r}")


def main(argv: list[str] | None = None) -> int:
    _self_check()
    embedserver.fake_vector = fast_fake_vector  # type: ignore[assignment]
    return embedserver.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
