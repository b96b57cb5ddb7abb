"""The fake embedding service's vectors: a hashed bag of words, deterministic across processes.

Tests reason about these vectors by hand (texts that share words are close), so they must
never change: ``tests/test_embedserver.py`` pins them.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter

import numpy as np
import numpy.typing as npt

_TOKEN = re.compile(r"[a-z0-9]+")
_COORDS_PER_TOKEN = 3


def _tokens(text: str) -> list[str]:
    decomposed = unicodedata.normalize("NFKD", text)
    folded = "".join(c for c in decomposed if not unicodedata.combining(c)).lower()
    return _TOKEN.findall(folded)


def fake_vector(text: str, dim: int) -> npt.NDArray[np.float32]:
    """A hashed bag of words a human can predict: texts that share words are close.

    Lower-cased, accents stripped, tokens ``[a-z0-9]+``; each token adds ``1 + ln(tf)`` to
    three signed coordinates chosen by blake2b (stable across processes, unlike ``hash()``);
    the result is L2-normalised. A text without tokens gets a fixed unit vector.
    """
    if dim <= 0:
        raise ValueError("dim must be positive")
    vector = np.zeros(dim, dtype=np.float64)
    for token, tf in sorted(Counter(_tokens(text)).items()):
        weight = 1.0 + float(np.log(tf))
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=4 * _COORDS_PER_TOKEN).digest()
        for k in range(_COORDS_PER_TOKEN):
            word = int.from_bytes(digest[4 * k : 4 * k + 4], "big")
            sign = 1.0 if word & 1 else -1.0
            vector[(word >> 1) % dim] += sign * weight
    norm = float(np.linalg.norm(vector))
    if norm == 0.0:
        return np.full(dim, 1.0 / np.sqrt(dim), dtype=np.float32)
    return (vector / norm).astype(np.float32)
