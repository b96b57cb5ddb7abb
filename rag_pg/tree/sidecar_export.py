"""Export an index beside its Markdown: one ``<file>.md.jsonl`` sidecar per indexed document.

Decisions:

- Export writes only documents indexed from the given root, and refuses a file that changed
  or vanished since indexing (its sidecar would be refused on import anyway). An unchanged
  sidecar is not rewritten; a changed one is replaced atomically (temp file + rename).
- The manifest carries the settings that shaped the chunks, read back from the stored
  fingerprint, so an import can record what really made them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg.rows import class_row

from rag_pg.errors import ConfigError, SidecarError
from rag_pg.models import FailedDocument
from rag_pg.store.documents import Store
from rag_pg.store.queries import Queries
from rag_pg.tree.sidecar import render, sidecar_path, write_atomic

HEADING_SEPARATOR = " > "

_FINGERPRINT = re.compile(r"^chunk=(\d+)/(\d+);")
# The other settings of the fingerprint that shape the chunks (the cap, the anchors' slug
# style, the Markdown parser's version): exported, so an import records what really made the
# chunks and a later ingest with other settings re-chunks instead of skipping.
_SHAPING = re.compile(r";max=([^;]+);anchors=([^;]+);.*?;parser=([^;]+);")



@dataclass(frozen=True, slots=True)
class _StoredDocument:
    """A row of ``export_documents``."""

    id: int
    collection: str
    shard_key: int
    path: str
    title: str
    content_hash: str
    parent_path: str | None
    level: int
    node_type: str
    embed: bool
    language: str
    fingerprint: str
    chunk_count: int
    front_matter: Any
    source_root: str | None


@dataclass(frozen=True, slots=True)
class _StoredChunk:
    """A row of ``export_chunks``: the vector is None where the chunk has none of the model."""

    position: int
    section: str
    anchor: str
    content: str
    token_count: int
    embedding: list[float] | None


@dataclass(slots=True)
class ExportReport:
    """What an export wrote: files rewritten, files already identical, and refusals."""

    root: str
    collection: str
    documents: int = 0
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failures: list[FailedDocument] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "collection": self.collection,
            "documents": self.documents,
            "written": list(self.written),
            "unchanged": len(self.unchanged),
            "failures": [{"path": f.path, "error": f.error, "kind": f.kind} for f in self.failures],
        }


def _heading_path(path: str, docs: dict[str, _StoredDocument]) -> str:
    """Front-matter ``heading_path`` if given, else the titles from the tree's root down."""
    doc = docs[path]
    front_matter = doc.front_matter
    given = front_matter.get("heading_path") if isinstance(front_matter, dict) else None
    if isinstance(given, str) and given.strip():
        return given.strip()
    titles = [doc.title]
    seen = {path}
    parent = doc.parent_path
    while parent is not None and parent in docs and parent not in seen:
        seen.add(parent)
        titles.append(docs[parent].title)
        parent = docs[parent].parent_path
    return HEADING_SEPARATOR.join(reversed(titles))


def export_sidecars(
    rag: Any, root: str | Path | None = None, *, collection: str | None = None
) -> ExportReport:
    """Write ``<file>.jsonl`` beside every file of ``root`` indexed in ``collection``.

    Only documents indexed from this root are exported (``document.source_root``); one
    whose Markdown file changed or vanished since indexing is refused (``stale`` /
    ``missing_markdown``), because its sidecar would be refused on import anyway.
    """
    root_path = Path(root if root is not None else rag.settings.source.root).expanduser()
    if not root_path.is_dir():
        raise ConfigError(f"source root is not a directory: {root_path}")
    root_key = str(root_path.resolve())
    collection = collection or rag.settings.collection
    schema = rag.settings.database.schema
    report = ExportReport(root=root_key, collection=collection)
    store = Store(schema)
    with rag.source.connection() as conn:
        rag._checked(conn)
        model, dimension = store.collection_model(conn, collection) or (None, None)
        with conn.cursor(row_factory=class_row(_StoredDocument)) as cur:
            rows = cur.execute(
                Queries(schema)("export_documents"), {"collection": collection}
            ).fetchall()
        if not rows:
            raise ConfigError(f"nothing is indexed in collection {collection!r}: run `ragpg ingest` first")
        docs = {r.path: r for r in rows}
        mine = [r for r in rows if r.source_root == root_key]
        if not mine:
            roots = sorted({str(r.source_root) for r in rows})
            raise ConfigError(
                f"no document of collection {collection!r} was indexed from {root_key}"
                f" (indexed roots: {', '.join(roots)})"
            )
        for row in mine:
            report.documents += 1
            try:
                data = _export_one(conn, schema, root_path, row, docs, model, dimension)
            except SidecarError as exc:
                report.failures.append(FailedDocument(row.path, str(exc), exc.kind))
                continue
            target = sidecar_path(root_path, row.path)
            (report.written if write_atomic(target, data) else report.unchanged).append(row.path)
    return report


def _export_one(
    conn: psycopg.Connection[Any], schema: str, root: Path, row: _StoredDocument,
    docs: dict[str, _StoredDocument], model: str | None, dimension: int | None,
) -> bytes:
    path, content_hash = row.path, row.content_hash
    try:
        current = hashlib.sha256((root / path).read_bytes()).hexdigest()
    except OSError:
        raise SidecarError("missing_markdown", "the Markdown file is gone: run `ragpg ingest --prune`") from None
    if current != content_hash:
        raise SidecarError("stale", "the file changed since it was indexed: run `ragpg ingest` first")
    with conn.cursor(row_factory=class_row(_StoredChunk)) as cur:
        chunks = cur.execute(
            Queries(schema)("export_chunks"),
            {"model": model, "document_id": row.id, "collection": row.collection,
             "shard_key": row.shard_key}
        ).fetchall()
    vectorised = bool(row.embed) and model is not None
    vectors: npt.NDArray[np.float32] | None = None
    if vectorised:
        if any(c.embedding is None for c in chunks):
            raise SidecarError(
                "incomplete_vectors",
                f"some chunks have no {model!r} vector: run `ragpg ingest --full` on this file",
            )
        vectors = np.array([np.asarray(c.embedding, dtype=np.float32) for c in chunks], dtype=np.float32)
    manifest: dict[str, Any] = {
        "type": "manifest",
        "source_file": path,
        "source_file_hash": f"sha256:{content_hash}",
        "parent_source_file": row.parent_path,
        "heading_path": _heading_path(path, docs),
        "level": int(row.level),
        "node_type": row.node_type,
    }
    if vectorised:
        manifest["embedding_model"] = model
        manifest["dimension"] = int(dimension) if dimension is not None else None
    manifest["chunk_count"] = len(chunks)
    manifest["title"] = row.title
    manifest["language"] = row.language
    match = _FINGERPRINT.match(row.fingerprint or "")
    if match:
        manifest["chunk_size"] = int(match.group(1))
        manifest["chunk_overlap"] = int(match.group(2))
    shaping = _SHAPING.search(row.fingerprint or "")
    if shaping:
        cap = shaping.group(1)
        manifest["chunk_max_tokens"] = int(cap) if cap.isdigit() else cap
        manifest["anchor_style"] = shaping.group(2)
        manifest["parser"] = shaping.group(3)
    lines = [
        {
            "chunk_index": int(c.position),
            "content_token_count": int(c.token_count),
            "section": c.section,
            "anchor": c.anchor,
            "text": c.content,
        }
        for c in chunks
    ]
    return render(manifest, lines, vectors)
