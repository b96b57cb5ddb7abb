"""Immutable data objects passed between the pipeline stages, and the records the library returns."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Document:
    """One Markdown file after parsing: what the chunker and the store need.

    ``path`` is relative to the walk root, with ``/`` separators.
    ``content`` is the body without its front-matter block.
    """

    path: str
    title: str
    content: str
    content_hash: str
    front_matter: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: the 1-based line of the file where ``content`` starts (after the front-matter block),
    #: so that chunks can name the lines of the file they come from
    body_line: int = 1

    @property
    def parent_path(self) -> str | None:
        value = self.front_matter.get("parent_source_file")
        return str(value) if value not in (None, "") else None

    @property
    def level(self) -> int:
        value = self.front_matter.get("level", 0)
        try:
            return int(value)
        except (TypeError, ValueError):
            return 0

    @property
    def node_type(self) -> str:
        value = self.front_matter.get("node_type")
        return str(value) if value else ("summary" if self.level > 0 else "source")

    @property
    def embed(self) -> bool:
        value = self.front_matter.get("embed", True)
        if isinstance(value, str):
            return value.strip().lower() not in ("false", "no", "0", "off")
        return bool(value)


@dataclass(frozen=True, slots=True)
class Chunk:
    """A packed run of paragraphs from one section of one document."""

    document_path: str
    document_title: str
    section: str
    anchor: str
    position: int
    content: str
    token_count: int
    content_hash: str
    #: The lines of the file it was read from (1-based, inclusive; None when not known).
    line_start: int | None = None
    line_end: int | None = None


_PAGE_ANCHOR = re.compile(r"page=(\d+)")


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved chunk with its provenance and score (higher is better).

    ``ranks`` holds the 1-based rank of the chunk in each retriever that found it
    (``{"vector": 3, "keyword": 1}``, and ``title`` / ``phrase`` in a hybrid search whose title
    or phrase leg matched it); ``scores`` the raw score of each retriever (cosine similarity,
    BM25, title match, phrase match),
    plus ``fused`` and ``rerank`` once a reranker has scored the hit; ``parts`` each
    retriever's part of the fused score, as the search's fusion computed it (they sum to it).
    """

    chunk: Chunk
    score: float
    collection: str = "default"
    document_id: int | None = None
    chunk_id: int | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    parts: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # The site's URL of the passage, from the [citation] url template (None without one).
    url: str | None = None
    # How the passage is read for prompt injection: the search that made the hit gives it
    # (``rag_pg.source.injection.scan``); read on demand, as scanning costs ~0.7 ms a passage.
    scanner: Callable[[str], tuple[str, ...]] | None = field(default=None, repr=False, compare=False)

    @property
    def path(self) -> str:
        return self.chunk.document_path

    @property
    def page(self) -> int | None:
        """The PDF page the passage is on: a converted PDF's chunks are anchored ``page=N``."""
        match = _PAGE_ANCHOR.fullmatch(self.chunk.anchor)
        return int(match.group(1)) if match else None

    @property
    def leg_scores(self) -> dict[str, float]:
        """The raw score of each leg that found the chunk: ``vector`` (cosine similarity),
        ``keyword`` (BM25), ``title`` and ``phrase`` (the title and phrase legs' matches),
        whatever fused or reranked them since."""
        return {leg: self.scores[leg] for leg in ("vector", "keyword", "title", "phrase")
                if leg in self.scores}

    @property
    def flags(self) -> tuple[str, ...]:
        """What the passage holds that is written to steer a model reading it (prompt
        injection: ``instruction_override``, ``role_tag``, ``hidden_comment``...); empty for
        ordinary text. Read it before handing the passage to a model."""
        return self.scanner(self.chunk.content) if self.scanner is not None else ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of a hit (``ragpg search --json``, HTTP API, MCP)."""
        data: dict[str, Any] = {
            "path": self.chunk.document_path,
            "title": self.chunk.document_title,
            "section": self.chunk.section,
            "anchor": self.chunk.anchor,
            "position": self.chunk.position,
            "score": self.score,
            "content": self.chunk.content,
            "collection": self.collection,
            "token_count": self.chunk.token_count,
            "ranks": dict(self.ranks),
            "leg_scores": self.leg_scores,
            "scores": dict(self.scores),
            "parts": dict(self.parts),
            "flags": list(self.flags),
            "url": self.url,
            "page": self.page,
            "lines": ([self.chunk.line_start, self.chunk.line_end]
                      if self.chunk.line_start is not None else None),
        }
        data.update(self.extra)
        return data


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file the walker did not index, and why (filtered, empty, not_utf8, ...)."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class FailedDocument:
    path: str
    error: str
    kind: str = "error"


@dataclass(slots=True)
class IngestReport:
    """What one ingest run did: counts, the files it skipped or failed, what changed."""

    source_root: str
    collection: str = "default"
    documents_seen: int = 0
    documents_indexed: int = 0
    documents_skipped: int = 0
    documents_failed: int = 0
    documents_deleted: int = 0
    documents_converted: int = 0  # PDF, DOCX, ... files sent to a converter (unchanged ones are not)
    chunks_upserted: int = 0
    chunks_unchanged: int = 0
    chunks_deleted: int = 0
    chunks_reused: int = 0  # chunks written with a vector already stored (their text unchanged)
    embedding_calls: int = 0
    tokens_embedded: int = 0
    duration_seconds: float = 0.0
    dry_run: bool = False
    run_id: int | None = None
    files_skipped: dict[str, int] = field(default_factory=dict)
    skipped: list[SkippedFile] = field(default_factory=list)
    failures: list[FailedDocument] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self, *, verbose: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "source_root": self.source_root,
            "collection": self.collection,
            "documents_seen": self.documents_seen,
            "documents_indexed": self.documents_indexed,
            "documents_skipped": self.documents_skipped,
            "documents_failed": self.documents_failed,
            "documents_deleted": self.documents_deleted,
            "documents_converted": self.documents_converted,
            "chunks_upserted": self.chunks_upserted,
            "chunks_unchanged": self.chunks_unchanged,
            "chunks_deleted": self.chunks_deleted,
            "chunks_reused": self.chunks_reused,
            "embedding_calls": self.embedding_calls,
            "tokens_embedded": self.tokens_embedded,
            "duration_seconds": round(self.duration_seconds, 3),
            "dry_run": self.dry_run,
            "run_id": self.run_id,
            "files_skipped": dict(self.files_skipped),
            "failures": [{"path": f.path, "error": f.error, "kind": f.kind} for f in self.failures],
            "warnings": list(self.warnings),
        }
        if self.dry_run or verbose:
            data["added"] = list(self.added)
            data["changed"] = list(self.changed)
            data["deleted"] = list(self.deleted)
        if verbose:
            data["skipped"] = [{"path": s.path, "reason": s.reason} for s in self.skipped]
        return data


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One stored chunk of a document, as :meth:`RagPG.get_document` lists them."""

    id: int
    position: int
    section: str
    anchor: str
    content: str
    token_count: int
    content_hash: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "position": self.position, "section": self.section,
                "anchor": self.anchor, "content": self.content, "token_count": self.token_count,
                "content_hash": self.content_hash}


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """A stored document and its chunks in order (:meth:`RagPG.get_document`)."""

    id: int
    collection: str
    path: str
    title: str
    content_hash: str
    front_matter: dict[str, Any]
    parent_path: str | None
    level: int
    node_type: str
    embed: bool
    language: str
    chunk_count: int
    token_count: int
    indexed_at: datetime
    chunks: tuple[ChunkRecord, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (``GET /documents``, MCP ``get_document``)."""
        return {
            "id": self.id, "collection": self.collection, "path": self.path, "title": self.title,
            "content_hash": self.content_hash, "front_matter": dict(self.front_matter),
            "parent_path": self.parent_path, "level": self.level, "node_type": self.node_type,
            "embed": self.embed, "language": self.language, "chunk_count": self.chunk_count,
            "token_count": self.token_count, "indexed_at": _iso(self.indexed_at),
            "chunks": [c.to_dict() for c in self.chunks],
        }


@dataclass(frozen=True, slots=True)
class ModelVectors:
    """How many vectors of one model a collection holds."""

    model: str
    dimension: int | None
    vectors: int

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "dimension": self.dimension, "vectors": self.vectors}


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The last ingest run of a collection, in brief."""

    id: int
    started_at: datetime
    finished_at: datetime | None
    status: str
    documents_seen: int
    documents_indexed: int
    documents_failed: int

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "started_at": _iso(self.started_at),
                "finished_at": _iso(self.finished_at), "status": self.status,
                "documents_seen": self.documents_seen, "documents_indexed": self.documents_indexed,
                "documents_failed": self.documents_failed}


@dataclass(frozen=True, slots=True)
class Stats:
    """What a collection holds (:meth:`RagPG.stats`)."""

    collection: str
    documents: int
    chunks: int
    last_indexed_at: datetime | None
    model: str | None
    dimension: int | None
    models: tuple[ModelVectors, ...] = ()
    last_run: RunSummary | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (``ragpg stats --json``, ``GET /stats``)."""
        return {
            "collection": self.collection, "documents": self.documents, "chunks": self.chunks,
            "last_indexed_at": _iso(self.last_indexed_at), "model": self.model,
            "dimension": self.dimension, "models": [m.to_dict() for m in self.models],
            "last_run": self.last_run.to_dict() if self.last_run is not None else None,
        }
