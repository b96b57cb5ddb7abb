"""Immutable data objects passed between the pipeline stages (SPEC §3)."""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved chunk with its provenance and score (higher is better).

    ``ranks`` holds the 1-based rank of the chunk in each retriever that found it
    (``{"vector": 3, "keyword": 1}``); ``scores`` the raw score of each retriever.
    """

    chunk: Chunk
    score: float
    collection: str = "default"
    document_id: int | None = None
    chunk_id: int | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return self.chunk.document_path

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
            "scores": dict(self.scores),
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
    """What one ingest run did (SPEC §3); more fields than the spec's are welcome."""

    source_root: str
    collection: str = "default"
    documents_seen: int = 0
    documents_indexed: int = 0
    documents_skipped: int = 0
    documents_failed: int = 0
    documents_deleted: int = 0
    chunks_upserted: int = 0
    chunks_unchanged: int = 0
    chunks_deleted: int = 0
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
            "chunks_upserted": self.chunks_upserted,
            "chunks_unchanged": self.chunks_unchanged,
            "chunks_deleted": self.chunks_deleted,
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
