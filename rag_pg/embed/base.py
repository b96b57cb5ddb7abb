"""The embedding-provider protocol and the checks every provider shares, so none trusts its model."""

from __future__ import annotations

import binascii
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, Protocol

from rag_pg.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

EmbedType = Literal["query", "passage"]
EMBED_TYPES: tuple[str, ...] = ("query", "passage")


class EmbeddingProvider(Protocol):
    """What ingest and search need from an embedder; http, local and none all fit it.

    Deliberately not ``runtime_checkable``: on Python 3.11 ``isinstance`` would evaluate
    ``model`` and so call a remote service's /health. Check ``kind`` instead.
    """

    kind: str

    @property
    def model(self) -> str | None:
        """Model name stored with every vector (None: no vectors at all)."""
        ...

    @property
    def dimension(self) -> int | None:
        """Length of every vector (None: no vectors at all)."""
        ...

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Vectors for ``texts``, one row each, in input order, already validated."""
        ...

    def health(self) -> dict[str, Any]:
        """``{"status": "ok", "model": ..., "dim": ...}``; raises when the provider is down."""
        ...

    def close(self) -> None:
        """Release connections or handles the provider opened."""
        ...


class ProviderUnavailable(EmbeddingError):
    """An *unavailable* failure that also says how retrying may help.

    ``retry_after`` is the server's ``Retry-After`` (seconds), ``retryable`` is False when
    the same request cannot succeed soon (401, 403, 404, a redirect, a closed provider): the
    chain then moves to the next provider at once instead of spending its backoff budget.
    """

    def __init__(
        self, message: str, *, retry_after: float | None = None, retryable: bool = True
    ) -> None:
        super().__init__("unavailable", message)
        self.retry_after = retry_after
        self.retryable = retryable


_call = threading.local()


@contextmanager
def call_deadline(at: float) -> Iterator[None]:
    """Cap every request made by this thread until ``at`` (``time.monotonic()`` seconds).

    The chain sets it so that a batch's total deadline also bounds the HTTP call in flight
    (a provider's own ``timeout`` would otherwise let the last attempt overrun it). Nested
    deadlines keep the earliest.
    """
    previous: float | None = getattr(_call, "deadline", None)
    _call.deadline = at if previous is None else min(previous, at)
    try:
        yield
    finally:
        _call.deadline = previous


def time_left(timeout: float) -> float:
    """``timeout``, shortened to what is left of the thread's call deadline (maybe <= 0)."""
    at: float | None = getattr(_call, "deadline", None)
    if at is None:
        return timeout
    return min(timeout, at - time.monotonic())


def check_request(type: str, texts: Sequence[str]) -> None:
    """Refuse bad input locally, so a doomed request is never sent."""
    if type not in EMBED_TYPES:
        raise EmbeddingError.invalid_input(
            f"unknown embedding type {type!r}: expected 'query' or 'passage'"
        )
    if isinstance(texts, str | bytes):
        raise EmbeddingError.invalid_input("texts must be a sequence of strings, not one string")
    if len(texts) == 0:
        raise EmbeddingError.invalid_input("no texts to embed")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise EmbeddingError.invalid_input(f"text {i} is a {type_name(text)}, not a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise EmbeddingError.invalid_input(
                f"text {i} is not valid Unicode (it holds a lone surrogate)"
            ) from None


def validate_vectors(raw: object, *, count: int, dimension: int | None) -> npt.NDArray[np.float32]:
    """Return ``raw`` as a float32 (count, dim) array, or raise malformed before anything is stored.

    Every check guards what the index relies on (no NULL, empty, wrong-length, non-finite or zero-norm
    vector ever reaches the database): a model or service is never trusted blindly. A row
    may be a list of numbers or a base64 string of little-endian float32 (``/embed`` with
    ``"encoding": "base64"``); both go through the same checks.
    """
    import numpy as np  # on first use: a no-change run never moves a vector

    if isinstance(raw, np.ndarray):
        array = _from_ndarray(raw, count)
    elif isinstance(raw, list):
        array = _from_list(raw, count)
    else:
        raise EmbeddingError.malformed(f"vectors is a {type_name(raw)}, not a list")
    if count == 0:
        return np.zeros((0, dimension or 0), dtype=np.float32)
    width = array.shape[1]
    if width == 0:
        raise EmbeddingError.malformed("vectors are empty (dimension 0)")
    if dimension is not None and width != dimension:
        raise EmbeddingError.malformed(f"vectors have dimension {width}, expected {dimension}")
    if not np.isfinite(array).all():
        bad = int(np.argmin(np.isfinite(array).all(axis=1)))
        raise EmbeddingError.malformed(f"vector {bad} holds NaN or infinite values")
    # Finite values: the norm is zero exactly when every coordinate is (no float64 copy).
    directed = array.any(axis=1)
    if not directed.all():
        bad = int(np.argmin(directed))
        raise EmbeddingError.malformed(f"vector {bad} is all zeros (no direction)")
    return np.ascontiguousarray(array, dtype=np.float32)


def _from_ndarray(raw: npt.NDArray[Any], count: int) -> npt.NDArray[np.float32]:
    import numpy as np

    if raw.ndim != 2:
        raise EmbeddingError.malformed(f"vectors array has {raw.ndim} dimensions, expected 2")
    if raw.shape[0] != count:
        raise EmbeddingError.malformed(f"expected {count} vectors, got {raw.shape[0]}")
    if raw.dtype.kind not in "fiu":
        raise EmbeddingError.malformed(f"vectors array has dtype {raw.dtype}, expected numbers")
    with np.errstate(over="ignore", invalid="ignore"):
        return raw.astype(np.float32)


def _from_list(raw: list[Any], count: int) -> npt.NDArray[np.float32]:
    import numpy as np

    if len(raw) != count:
        raise EmbeddingError.malformed(f"expected {count} vectors, got {len(raw)}")
    if any(isinstance(row, str) for row in raw):
        return _from_rows(raw)
    width: int | None = None
    for i, row in enumerate(raw):
        if not isinstance(row, list):
            raise EmbeddingError.malformed(f"vector {i} is a {type_name(row)}, not a list")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise EmbeddingError.malformed(
                f"vector {i} has dimension {len(row)}, vector 0 has {width}"
            )
        for value in row:
            # bool is an int subclass and numpy would turn "1.5" into 1.5: refuse both.
            if type(value) is not float and type(value) is not int:
                raise EmbeddingError.malformed(
                    f"vector {i} holds a {type_name(value)}, not a number"
                )
    if count == 0:
        return np.zeros((0, 0), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        try:
            return np.array(raw, dtype=np.float32)
        except OverflowError:  # an int too large for a float
            raise EmbeddingError.malformed("vectors hold a number out of range") from None


def _from_rows(raw: list[Any]) -> npt.NDArray[np.float32]:
    """Rows that are base64 float32 strings or lists of numbers, in any mix (``encoding``).

    Decoding with ``frombuffer`` skips building and checking a Python float per value, the
    reason the contract lets a service answer in base64; a list row still gets every check.
    """
    import numpy as np

    rows: list[npt.NDArray[np.float32]] = []
    for i, row in enumerate(raw):
        if isinstance(row, str):
            array = decode_base64_vector(row, i)
        elif isinstance(row, list):
            array = _from_list([row], 1)[0]
        else:
            raise EmbeddingError.malformed(
                f"vector {i} is a {type_name(row)}, not a list or a base64 string"
            )
        if rows and len(array) != len(rows[0]):
            raise EmbeddingError.malformed(
                f"vector {i} has dimension {len(array)}, vector 0 has {len(rows[0])}"
            )
        rows.append(array)
    return rows[0].reshape(1, -1) if len(rows) == 1 else np.stack(rows)


def decode_base64_vector(text: str, index: int) -> npt.NDArray[np.float32]:
    """One vector sent as base64 of little-endian float32, or malformed (never echoing it)."""
    import numpy as np

    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise EmbeddingError.malformed(
            f"vector {index} is a string that is not valid base64"
        ) from None
    if len(data) % 4:
        raise EmbeddingError.malformed(
            f"vector {index} is {len(data)} bytes of base64, not a whole number of float32"
        )
    # A bytearray, so the vector is writable like any other the provider returns.
    return np.frombuffer(bytearray(data), dtype="<f4").astype(np.float32, copy=False)


def type_name(value: object) -> str:
    """A short JSON-ish name for a value's type, for messages that never echo the value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return "non-finite number"
    return type(value).__name__
