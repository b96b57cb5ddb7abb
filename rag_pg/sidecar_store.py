"""Sidecars against the database: export an index beside its Markdown, import it without embedding.

Decisions:

- Export writes only documents indexed from the given root, and refuses a file that changed
  or vanished since indexing (its sidecar would be refused on import anyway). An unchanged
  sidecar is not rewritten; a changed one is replaced atomically (temp file + rename).
- Import trusts the Markdown file for everything a sidecar could get wrong: the file must
  exist, its sha256 must equal ``source_file_hash``, and title and front-matter come from
  parsing it. The sidecar supplies chunks, token counts and vectors only.
- Import never builds an embedding provider: models are compared by name with the
  collection's (``Store.bind_model``), never by asking a service.
- Each file is one ``Store.replace_documents`` transaction: a refused or broken sidecar is
  reported (``hash_mismatch``, ``model_mismatch``, ``invalid_sidecar``, ...) and the rest go
  on. The stored fingerprint is the exporter's chunking with the sidecar's model, so a later
  ``ragpg ingest`` with the same settings skips every imported file.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from . import language
from .errors import ConfigError, DimensionMismatch, StoreError
from .locks import collection_lock
from .models import Chunk, Document, FailedDocument, IngestReport, SkippedFile
from .parse import parse_document
from .sidecar import (
    SUFFIX,
    Sidecar,
    SidecarError,
    parse_sidecar,
    read_manifest,
    render,
    sidecar_path,
    write_atomic,
)
from .store import PreparedDocument, Store, fingerprint
from .walk import WalkRules, is_markdown_name, walk

HEADING_SEPARATOR = " > "
_VCS = frozenset({".git", ".hg", ".svn"})
_FINGERPRINT = re.compile(r"^chunk=(\d+)/(\d+);")

_DOCUMENTS = sql.SQL(
    "SELECT id, path, title, content_hash, parent_path, level, node_type, embed, language,"
    " fingerprint, chunk_count, front_matter, source_root"
    " FROM {schema}.document WHERE collection = %(collection)s ORDER BY path"
)
_CHUNKS = sql.SQL(
    "SELECT c.position, c.section, c.anchor, c.content, c.token_count, v.embedding::real[]"
    " FROM {schema}.chunk c LEFT JOIN {schema}.chunk_vector v"
    "   ON v.chunk_id = c.id AND v.model = %(model)s"
    " WHERE c.document_id = %(document_id)s ORDER BY c.position"
)



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



def _heading_path(path: str, docs: dict[str, tuple[str, str | None, Any]]) -> str:
    """Front-matter ``heading_path`` if given, else the titles from the tree's root down."""
    title, parent, front_matter = docs[path]
    given = front_matter.get("heading_path") if isinstance(front_matter, dict) else None
    if isinstance(given, str) and given.strip():
        return given.strip()
    titles = [title]
    seen = {path}
    while parent is not None and parent in docs and parent not in seen:
        seen.add(parent)
        titles.append(docs[parent][0])
        parent = docs[parent][1]
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
        bound = store.collection_model(conn, collection)
        model, dimension = bound if bound else (None, None)
        rows = conn.execute(
            _DOCUMENTS.format(schema=sql.Identifier(schema)), {"collection": collection}
        ).fetchall()
        if not rows:
            raise ConfigError(f"nothing is indexed in collection {collection!r}: run `ragpg ingest` first")
        docs = {r[1]: (r[2], r[4], r[11]) for r in rows}
        mine = [r for r in rows if r[12] == root_key]
        if not mine:
            roots = sorted({str(r[12]) for r in rows})
            raise ConfigError(
                f"no document of collection {collection!r} was indexed from {root_key}"
                f" (indexed roots: {', '.join(roots)})"
            )
        for row in mine:
            report.documents += 1
            try:
                data = _export_one(conn, schema, root_path, row, docs, model, dimension)
            except SidecarError as exc:
                report.failures.append(FailedDocument(row[1], str(exc), exc.kind))
                continue
            target = sidecar_path(root_path, row[1])
            (report.written if write_atomic(target, data) else report.unchanged).append(row[1])
    return report


def _export_one(
    conn: psycopg.Connection[Any], schema: str, root: Path, row: tuple[Any, ...],
    docs: dict[str, tuple[str, str | None, Any]], model: str | None, dimension: int | None,
) -> bytes:
    (doc_id, path, title, content_hash, parent, level, node_type, embed, lang,
     fp, chunk_count, _front_matter, _root) = row
    try:
        current = hashlib.sha256((root / path).read_bytes()).hexdigest()
    except OSError:
        raise SidecarError("missing_markdown", "the Markdown file is gone: run `ragpg ingest --prune`") from None
    if current != content_hash:
        raise SidecarError("stale", "the file changed since it was indexed: run `ragpg ingest` first")
    chunks = conn.execute(
        _CHUNKS.format(schema=sql.Identifier(schema)), {"model": model, "document_id": doc_id}
    ).fetchall()
    vectorised = bool(embed) and model is not None
    vectors: npt.NDArray[np.float32] | None = None
    if vectorised:
        if any(c[5] is None for c in chunks):
            raise SidecarError(
                "incomplete_vectors",
                f"some chunks have no {model!r} vector: run `ragpg ingest --full` on this file",
            )
        vectors = np.array([np.asarray(c[5], dtype=np.float32) for c in chunks], dtype=np.float32)
    manifest: dict[str, Any] = {
        "type": "manifest",
        "source_file": path,
        "source_file_hash": f"sha256:{content_hash}",
        "parent_source_file": parent,
        "heading_path": _heading_path(path, docs),
        "level": int(level),
        "node_type": node_type,
    }
    if vectorised:
        manifest["embedding_model"] = model
        manifest["dimension"] = int(dimension) if dimension is not None else None
    manifest["chunk_count"] = len(chunks)
    manifest["title"] = title
    manifest["language"] = lang
    match = _FINGERPRINT.match(fp or "")
    if match:
        manifest["chunk_size"] = int(match.group(1))
        manifest["chunk_overlap"] = int(match.group(2))
    lines = [
        {
            "chunk_index": int(c[0]),
            "content_token_count": int(c[4]),
            "section": c[1],
            "anchor": c[2],
            "text": c[3],
        }
        for c in chunks
    ]
    return render(manifest, lines, vectors)


def _chunks_for(document: Document, sidecar: Sidecar) -> list[Chunk]:
    return [
        Chunk(
            document_path=document.path,
            document_title=document.title,
            section=str(c.get("section", document.title)),
            anchor=str(c.get("anchor", "")),
            position=i,
            content=c["text"],
            token_count=int(c["content_token_count"]),
            content_hash=hashlib.sha256(c["text"].encode("utf-8")).hexdigest(),
        )
        for i, c in enumerate(sidecar.chunks)
    ]


@contextmanager
def _locked(conn: psycopg.Connection[Any], schema: str, collection: str, timeout: float) -> Iterator[None]:
    """The ingest lock of the collection: an import and an ingest never interleave."""
    with collection_lock(conn, schema, collection, timeout=timeout, what="import"):
        yield


def _sidecar_files(root: Path) -> Iterator[str]:
    """Relative paths of every ``*.md.jsonl`` under ``root`` (VCS folders left out)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _VCS)
        for name in sorted(files):
            if name.endswith(SUFFIX) and is_markdown_name(name[: -len(SUFFIX)]):
                yield Path(folder, name).relative_to(root).as_posix()


def import_sidecars(
    rag: Any, root: str | Path | None = None, *, collection: str | None = None
) -> IngestReport:
    """Load every sidecar under ``root`` into ``collection``, one transaction per file.

    The Markdown files are walked with the same governance rules as ingest, so an import
    indexes exactly the documents an ingest would. Returns an IngestReport (no embedding
    calls, ever); refused sidecars are its ``failures``.
    """
    settings = rag.settings
    root_path = Path(root if root is not None else settings.source.root).expanduser()
    if not root_path.is_dir():
        raise ConfigError(f"source root is not a directory: {root_path}")
    root_key = str(root_path.resolve())
    collection = collection or settings.collection
    schema = settings.database.schema
    store = Store(schema)
    report = IngestReport(source_root=root_key, collection=collection)
    started = time.monotonic()
    rules = WalkRules(
        included_paths=settings.source.included_paths,
        excluded_paths=settings.source.excluded_paths,
        follow_symlinks=settings.source.follow_symlinks,
        max_file_bytes=settings.source.max_file_bytes,
    )
    items = list(walk(root_path, rules))
    markdown = {i.path for i in items if not isinstance(i, SkippedFile)}
    skipped_md = {i.path: i.reason for i in items if isinstance(i, SkippedFile)}
    for rel in _sidecar_files(root_path):
        md = rel[: -len(SUFFIX)]
        if md in skipped_md:
            report.warnings.append(f"{rel}: ignored, its Markdown file is skipped ({skipped_md[md]})")
        elif md not in markdown:
            report.failures.append(FailedDocument(md, "a sidecar without its Markdown file", "orphan_sidecar"))
            report.documents_failed += 1
    with rag.source.connection() as conn:
        rag._checked(conn)
        with _locked(conn, schema, collection, settings.database.lock_timeout):
            bound = store.collection_model(conn, collection)
            report.run_id = store.start_run(
                conn, source_root=root_key, collection=collection, mode="import",
                model=bound[0] if bound else None,
            )
            status = "failed"
            try:
                _import_all(conn, store, root_path, root_key, collection, items, report, settings)
                status = "partial" if report.failures else "completed"
            finally:
                report.duration_seconds = time.monotonic() - started
                try:
                    store.finish_run(conn, report.run_id, status, report)
                except psycopg.Error:
                    pass
    return report


def _import_all(
    conn: psycopg.Connection[Any], store: Store, root: Path, root_key: str, collection: str,
    items: list[Any], report: IngestReport, settings: Any,
) -> None:
    present = [i for i in items if not isinstance(i, SkippedFile)]
    for item in items:
        if isinstance(item, SkippedFile):
            report.skipped.append(item)
            report.files_skipped[item.reason] = report.files_skipped.get(item.reason, 0) + 1
    with_sidecar = []
    for item in present:
        if sidecar_path(root, item.path).is_file():
            with_sidecar.append(item)
        else:
            report.skipped.append(SkippedFile(item.path, "no_sidecar"))
            report.files_skipped["no_sidecar"] = report.files_skipped.get("no_sidecar", 0) + 1
    bound = store.collection_model(conn, collection)
    if bound is None or bound[0] is None:
        # Bind the first vectorised sidecar's model before writing anything, so a keyword
        # sidecar imported first cannot leave vector-less chunks in a vectorised collection.
        for item in with_sidecar:
            try:
                manifest = read_manifest(sidecar_path(root, item.path))
            except (SidecarError, OSError):
                continue
            model, dim = manifest.get("embedding_model"), manifest.get("dimension")
            if isinstance(model, str) and model and isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
                store.bind_model(conn, collection, model, dim)
                break
        bound = store.collection_model(conn, collection)
    model, dimension = bound if bound else (None, None)
    states = store.document_states(conn, collection)
    for item in with_sidecar:
        report.documents_seen += 1
        try:
            prepared, write_model = _prepare(root, root_key, item, model, dimension, settings)
        except SidecarError as exc:
            _fail(report, item.path, str(exc), exc.kind)
            continue
        stored = states.get(item.path)
        if (stored is not None and stored.content_hash == prepared.document.content_hash
                and stored.fingerprint == prepared.fingerprint):
            report.documents_skipped += 1
            report.chunks_unchanged += stored.chunk_count
            continue
        try:
            written = store.replace_documents(conn, collection, [prepared], write_model)
        except psycopg.OperationalError as exc:
            raise StoreError(f"database connection lost while importing: {_first_line(exc)}") from None
        except (psycopg.Error, DimensionMismatch) as exc:
            _fail(report, item.path, f"database refused it: {_first_line(exc)}", "store")
            continue
        (report.changed if stored is not None else report.added).append(item.path)
        report.documents_indexed += 1
        report.chunks_upserted += written


def _prepare(
    root: Path, root_key: str, item: Any, model: str | None, dimension: int | None, settings: Any,
) -> tuple[PreparedDocument, str | None]:
    """Check one sidecar against its Markdown file and the collection; build the document."""
    try:
        data = sidecar_path(root, item.path).read_bytes()
    except OSError as exc:
        raise SidecarError("invalid_sidecar", f"cannot read the sidecar: {exc.strerror}") from None
    sidecar = parse_sidecar(data)
    manifest = sidecar.manifest
    if manifest.get("source_file") != item.path:
        raise SidecarError(
            "invalid_sidecar",
            f"the sidecar describes {manifest.get('source_file')!r}, not {item.path!r}",
        )
    actual = "sha256:" + hashlib.sha256(item.data).hexdigest()
    if manifest.get("source_file_hash") != actual:
        raise SidecarError(
            "hash_mismatch",
            f"the Markdown file no longer matches its sidecar (sidecar {str(manifest.get('source_file_hash'))[:19]}…,"
            f" file {actual[:19]}…): run `ragpg ingest`, then `ragpg export`",
        )
    document = parse_document(item.path, item.data, item.text)
    embeds = document.embed and model is not None
    if sidecar.model is not None:
        if model is None:
            raise SidecarError("model_mismatch", "the collection has no embedding model to match")
        if sidecar.model != model or sidecar.dimension != dimension:
            raise SidecarError(
                "model_mismatch",
                f"the sidecar's vectors are {sidecar.model!r} ({sidecar.dimension} d) but collection"
                f" is indexed with {model!r} ({dimension} d): ragpg will not mix them",
            )
        if not document.embed:
            raise SidecarError("invalid_sidecar", "vectors for a file whose front-matter says embed: false")
    elif embeds:
        raise SidecarError(
            "model_mismatch",
            f"the sidecar has no embeddings but the collection is vectorised with {model!r}:"
            " run `ragpg ingest` for this file",
        )
    size = manifest.get("chunk_size", settings.chunk.size)
    overlap = manifest.get("chunk_overlap", settings.chunk.overlap)
    lang = manifest.get("language")
    if lang not in language.LANGUAGES:
        lang = language.detect(document.content, document.front_matter, settings.source.language)
    prepared = PreparedDocument(
        document=document,
        chunks=_chunks_for(document, sidecar),
        vectors=sidecar.vectors if embeds else None,
        language=str(lang),
        fingerprint=fingerprint(int(size), int(overlap), model if embeds else None),
        source_root=root_key,
    )
    return prepared, model if embeds else None


def _fail(report: IngestReport, path: str, message: str, kind: str) -> None:
    report.failures.append(FailedDocument(path=path, error=message, kind=kind))
    report.documents_failed += 1


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__

