"""Import sidecars into the database without embedding: the Markdown file is the authority.

Decisions:

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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from rag_pg.errors import (
    ConfigError,
    DatabaseRefused,
    DimensionMismatch,
    SidecarError,
    StoreError,
    first_line,
)
from rag_pg.models import Chunk, Document, FailedDocument, IngestReport, SkippedFile
from rag_pg.source import language
from rag_pg.source.access import AccessRules
from rag_pg.source.chunk import Chunker
from rag_pg.source.markdown.sites import detect_style
from rag_pg.source.parse import parse_document
from rag_pg.source.walk import VCS_DIRECTORIES, WalkRules, is_markdown_name, walk
from rag_pg.store.documents import PreparedDocument, Store, fingerprint
from rag_pg.store.locks import collection_lock
from rag_pg.tree.sidecar import SUFFIX, Sidecar, parse_sidecar, read_manifest, sidecar_path


def _checked_chunks(document: Document, sidecar: Sidecar, size: int, overlap: int,
                    max_tokens: int | None, anchors: str) -> list[Chunk]:
    """The file's own chunks, chunked again as the sidecar says it was made; a sidecar whose
    chunks say otherwise (text, section, anchor, count) is refused: its text would be indexed
    and cited as the file's."""
    try:
        chunks = Chunker(size, overlap, max_tokens=max_tokens, slug_style=anchors).chunk(document)
    except (ConfigError, ValueError) as exc:
        raise SidecarError("invalid_sidecar", f"its chunking cannot be repeated: {exc}") from None
    if len(chunks) != len(sidecar.chunks):
        raise SidecarError("chunk_mismatch", f"the sidecar has {len(sidecar.chunks)} chunks, the"
                           f" file chunks into {len(chunks)}: run `ragpg ingest`, then `ragpg export`")
    for chunk, line in zip(chunks, sidecar.chunks, strict=True):
        said = (line["text"], str(line.get("section", document.title)), str(line.get("anchor", "")))
        for what, own, theirs in zip(("text", "section", "anchor"),
                                     (chunk.content, chunk.section, chunk.anchor), said, strict=True):
            if own != theirs:
                raise SidecarError("chunk_mismatch", f"chunk {chunk.position}: its {what} is not the"
                                   " file's: run `ragpg ingest`, then `ragpg export`")
    return chunks


def _sidecar_files(root: Path) -> Iterator[str]:
    """Relative paths of every ``*.md.jsonl`` under ``root`` (VCS folders left out)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in VCS_DIRECTORIES)
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
        # The ingest lock of the collection: an import and an ingest never interleave.
        with collection_lock(
            conn, schema, collection, timeout=settings.database.lock_timeout, what="import"
        ):
            bound_model, _ = store.collection_model(conn, collection) or (None, None)
            report.run_id = store.start_run(
                conn, source_root=root_key, collection=collection, mode="import",
                model=bound_model,
            )
            status = "failed"
            try:
                _import_all(conn, store, root_path, root_key, collection, items, report, settings)
                status = "partial" if report.failures else "completed"
            finally:
                report.duration_seconds = time.monotonic() - started
                try:
                    store.finish_run(conn, report.run_id, status, report)
                except StoreError:
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
    model, dimension = store.collection_model(conn, collection) or (None, None)
    if model is None:
        # Bind the first vectorised sidecar's model before writing anything, so a keyword
        # sidecar imported first cannot leave vector-less chunks in a vectorised collection.
        for item in with_sidecar:
            try:
                manifest = read_manifest(sidecar_path(root, item.path))
            except (SidecarError, OSError):
                continue
            named, dim = manifest.get("embedding_model"), manifest.get("dimension")
            if isinstance(named, str) and named and isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
                store.bind_model(conn, collection, named, dim)
                break
        model, dimension = store.collection_model(conn, collection) or (None, None)
    states = store.document_states(conn, collection)
    anchor_style = settings.source.anchor_style
    if anchor_style == "auto":  # as an ingest of this root would slug its anchors
        anchor_style = detect_style(root)
    # Who reads each document is the tree's to say, as on an ingest: never the sidecar's.
    access = AccessRules.load(root, settings.permissions.default)
    for item in with_sidecar:
        report.documents_seen += 1
        try:
            prepared, write_model = _prepare(root, root_key, item, model, dimension, settings,
                                             anchor_style, access)
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
        except (DatabaseRefused, DimensionMismatch) as exc:
            _fail(report, item.path, str(exc) if isinstance(exc, DatabaseRefused)
                  else f"database refused it: {first_line(exc)}", "store")
            continue
        (report.changed if stored is not None else report.added).append(item.path)
        report.documents_indexed += 1
        report.chunks_upserted += written


def _prepare(
    root: Path, root_key: str, item: Any, model: str | None, dimension: int | None, settings: Any,
    anchor_style: str, access: AccessRules,
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
    _check_model(sidecar, document, model, dimension)
    size = manifest.get("chunk_size", settings.chunk.size)
    overlap = manifest.get("chunk_overlap", settings.chunk.overlap)
    # A sidecar that does not say (an older exporter) is taken as made with these settings.
    cap = manifest.get("chunk_max_tokens", settings.chunk.max_tokens)
    anchors = manifest.get("anchor_style", anchor_style)
    parser = manifest.get("parser")
    lang = manifest.get("language")
    if lang not in language.LANGUAGES:
        lang = language.detect(document.content, document.front_matter, settings.source.language)
    chunks = _checked_chunks(document, sidecar, int(size), int(overlap),
                             cap if isinstance(cap, int) and not isinstance(cap, bool) else None,
                             str(anchors))
    prepared = PreparedDocument(
        document=document,
        chunks=chunks,
        vectors=sidecar.vectors if embeds else None,
        language=str(lang),
        fingerprint=fingerprint(
            int(size), int(overlap), model if embeds else None,
            max_tokens=cap if isinstance(cap, int) and not isinstance(cap, bool) else None,
            anchor_style=str(anchors), parser=str(parser) if parser else None,
            access=access.fingerprint_part(item.path)),
        source_root=root_key,
        readers=_readers(access, item.path, document),
    )
    return prepared, model if embeds else None


def _readers(access: AccessRules, path: str, document: Document) -> tuple[str, ...] | None:
    try:
        return access.readers(path, document.front_matter)
    except ConfigError as exc:
        raise SidecarError("invalid_sidecar", f"cannot parse: {exc}") from None


def _check_model(sidecar: Sidecar, document: Document, model: str | None,
                 dimension: int | None) -> None:
    """The sidecar's vectors are the collection's model's, or there are none to bring."""
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
    elif document.embed and model is not None:
        raise SidecarError(
            "model_mismatch",
            f"the sidecar has no embeddings but the collection is vectorised with {model!r}:"
            " run `ragpg ingest` for this file",
        )


def _fail(report: IngestReport, path: str, message: str, kind: str) -> None:
    report.failures.append(FailedDocument(path=path, error=message, kind=kind))
    report.documents_failed += 1

