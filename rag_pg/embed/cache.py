"""A content-hash LRU of vectors, so that identical texts are never embedded twice."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
import numpy.typing as npt


class VectorCache:
    """A thread-safe LRU of vectors keyed by (type, SHA-256 of the text); size 0 disables it."""

    def __init__(self, size: int) -> None:
        self.size = max(0, size)
        self._items: OrderedDict[bytes, npt.NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(type: str, text: str) -> bytes:
        return hashlib.sha256(f"{type}\x00{text}".encode("utf-8", "surrogatepass")).digest()

    def get(self, key: bytes) -> npt.NDArray[np.float32] | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return found

    def put(self, key: bytes, vector: npt.NDArray[np.float32]) -> None:
        if self.size == 0:
            return
        with self._lock:
            self._items[key] = vector
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
