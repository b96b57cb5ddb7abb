"""The JSONL sidecar format: render and parse ``<file>.md.jsonl``, no I/O beyond files.

A sidecar holds one JSON object a line: a manifest, then one line per chunk, so that the
vectors can be versioned in git next to the text they were computed from and an index
rebuilt on another machine without paying for embeddings again (export and import against
the database live in ``sidecar_export`` and ``sidecar_import``).

Bytes are a pure function of their input: keys in a fixed order, UTF-8 text, ``\\n`` line
ends, float32 components in their shortest round-trip spelling (numpy's Dragon4, with
explicit parameters) — so two exports of one index, or of an index rebuilt by import, are
byte-identical and git diffs show only what changed. Parsing checks the whole shape before
anything reaches a database.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rag_pg.embed.base import validate_vectors
from rag_pg.errors import EmbeddingError, SidecarError

SUFFIX = ".jsonl"




def float_text(value: float | np.floating[Any]) -> str:
    """The shortest text that reads back as the same float32, as a JSON number."""
    x = np.float32(value)
    if not math.isfinite(float(x)):
        raise ValueError(f"not a finite number: {x!r}")
    magnitude = abs(float(x))
    if magnitude == 0.0 or 1e-4 <= magnitude < 1e16:
        text = np.format_float_positional(x, unique=True, trim="0")
    else:
        text = np.format_float_scientific(x, unique=True, trim="0", exp_digits=2)
    return text


def _line(record: dict[str, Any], embedding: npt.NDArray[np.float32] | None = None) -> str:
    text = json.dumps(record, ensure_ascii=False, allow_nan=False)
    if embedding is None:
        return text + "\n"
    values = ", ".join(float_text(v) for v in embedding)
    return f'{text[:-1]}, "embedding": [{values}]}}\n'


def render(
    manifest: dict[str, Any],
    chunks: list[dict[str, Any]],
    vectors: npt.NDArray[np.float32] | None,
) -> bytes:
    """A sidecar's bytes; ``manifest`` and each chunk dict must already be in key order."""
    lines = [_line(manifest)]
    for i, chunk in enumerate(chunks):
        lines.append(_line(chunk, None if vectors is None else vectors[i]))
    return "".join(lines).encode("utf-8")


def sidecar_path(root: Path, path: str) -> Path:
    return root / (path + SUFFIX)


def write_atomic(target: Path, data: bytes) -> bool:
    """Write ``data`` unless the file already holds it; returns whether it wrote."""
    try:
        if target.read_bytes() == data:
            return False
    except OSError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return True


# -- parsing -------------------------------------------------------------------------------------



@dataclass(slots=True)
class Sidecar:
    """A parsed, validated sidecar: its manifest, chunk lines and vectors (or None)."""

    manifest: dict[str, Any]
    chunks: list[dict[str, Any]]
    vectors: npt.NDArray[np.float32] | None

    @property
    def model(self) -> str | None:
        value = self.manifest.get("embedding_model")
        return str(value) if value else None

    @property
    def dimension(self) -> int | None:
        value = self.manifest.get("dimension")
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def read_manifest(path: Path) -> dict[str, Any]:
    """Only the first line: cheap enough to learn every sidecar's model before writing."""
    with path.open("rb") as fh:
        first = fh.readline()
    try:
        manifest = json.loads(first.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SidecarError("invalid_sidecar", f"line 1 is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("type") != "manifest":
        raise SidecarError("invalid_sidecar", 'line 1 is not a manifest ({"type": "manifest", ...})')
    return manifest


def parse_sidecar(data: bytes) -> Sidecar:
    """Check a sidecar's shape completely before any of it reaches the database."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SidecarError("invalid_sidecar", f"not UTF-8 (byte {exc.start})") from None
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines:
        raise SidecarError("invalid_sidecar", "empty sidecar")
    records: list[Any] = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except ValueError as exc:
            raise SidecarError("invalid_sidecar", f"line {number} is not JSON: {exc}") from None
    manifest = records[0]
    if not isinstance(manifest, dict) or manifest.get("type") != "manifest":
        raise SidecarError("invalid_sidecar", 'line 1 is not a manifest ({"type": "manifest", ...})')
    chunks = records[1:]
    if manifest.get("chunk_count") != len(chunks):
        raise SidecarError(
            "invalid_sidecar",
            f"manifest says chunk_count {manifest.get('chunk_count')!r} but {len(chunks)} chunk lines follow",
        )
    model = manifest.get("embedding_model")
    dimension = manifest.get("dimension")
    if model is not None and (not isinstance(model, str) or not model):
        raise SidecarError("invalid_sidecar", "embedding_model must be a non-empty string")
    if model is not None and (not isinstance(dimension, int) or isinstance(dimension, bool) or dimension <= 0):
        raise SidecarError("invalid_sidecar", "a vectorised sidecar needs a positive integer dimension")
    vectors: list[list[float]] = []
    for i, chunk in enumerate(chunks):
        where = f"line {i + 2}"
        if not isinstance(chunk, dict) or chunk.get("chunk_index") != i:
            raise SidecarError("invalid_sidecar", f"{where}: chunk_index must be {i}")
        if not isinstance(chunk.get("text"), str):
            raise SidecarError("invalid_sidecar", f"{where}: text must be a string")
        count = chunk.get("content_token_count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SidecarError("invalid_sidecar", f"{where}: content_token_count must be an integer >= 0")
        for key in ("section", "anchor"):
            if key in chunk and not isinstance(chunk[key], str):
                raise SidecarError("invalid_sidecar", f"{where}: {key} must be a string")
        embedding = chunk.get("embedding")
        if model is None:
            if embedding is not None:
                raise SidecarError("invalid_sidecar", f"{where}: an embedding but no embedding_model in the manifest")
            continue
        if not isinstance(embedding, list) or len(embedding) != dimension:
            raise SidecarError("invalid_sidecar", f"{where}: embedding must be a list of {dimension} numbers")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in embedding):
            raise SidecarError("invalid_sidecar", f"{where}: embedding holds a non-finite or non-numeric value")
        vectors.append(embedding)
    array = None
    if model is not None:
        assert isinstance(dimension, int)
        try:  # the checks an embedding service's answer passes: finite in float32, not zero
            array = validate_vectors(vectors, count=len(chunks), dimension=dimension)
        except EmbeddingError as exc:
            raise SidecarError("invalid_sidecar", f"embedding: {exc}") from None
    return Sidecar(manifest=manifest, chunks=chunks, vectors=array)

