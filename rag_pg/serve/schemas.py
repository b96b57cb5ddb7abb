"""The JSON the HTTP endpoints return, as pydantic models: they are the OpenAPI document's
response schemas (the endpoints build plain JSON; these describe it, ``extra`` fields allowed
where the library may add some)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorOut(BaseModel):
    error: str = Field(description="A stable code: invalid_request, unauthorized, not_found, too_large, timeout, database_unavailable, ...")
    message: str = Field(description="What went wrong and what to do, in one line.")
    detail: list[dict[str, Any]] | None = None


class HitOut(BaseModel):
    """A hit: the same object as in ``ragpg search --json``; cite it as ``path#anchor``."""

    model_config = ConfigDict(extra="allow")
    path: str
    title: str
    section: str
    anchor: str
    position: int
    score: float
    content: str
    collection: str
    token_count: int
    ranks: dict[str, int] = Field(description="1-based rank in each retriever that found the chunk.")
    leg_scores: dict[str, float] | None = Field(
        None, description="Raw score of each retriever that found it: vector (cosine similarity), keyword (BM25), title and phrase (the title and phrase legs' matches, hybrid only).")
    scores: dict[str, float] = Field(description="Raw score of each retriever, plus fused and rerank once reranked.")
    parts: dict[str, float] = Field(default_factory=dict, description="Each retriever's part of the fused score, as the search's fusion computed it (they sum to it).")
    flags: list[str] = Field(default_factory=list, description="Prompt-injection patterns the passage holds (instruction_override, role_tag, hidden_comment, hidden_html, invisible_text, exfiltration_link); empty for ordinary text.")
    url: str | None = Field(None, description="The passage's URL on the site, from the [citation] url template; null without one.")
    page: int | None = Field(None, description="The PDF page the passage is on (its anchor is page=N); null for other documents.")
    lines: list[int] | None = Field(None, description="First and last line of the file (1-based, inclusive) the passage was read from; null if not known.")


class ChunkOut(BaseModel):
    id: int
    position: int
    section: str
    anchor: str
    content: str
    token_count: int
    content_hash: str


class DocumentOut(BaseModel):
    model_config = ConfigDict(extra="allow")
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
    indexed_at: str
    chunks: list[ChunkOut]


class HealthOut(BaseModel):
    status: str


class LegOut(BaseModel):
    rank: int = Field(description="1-based rank in this retriever's list.")
    score: float | None = Field(description="The retriever's raw score (cosine similarity, BM25).")
    share: float | None = Field(description="This retriever's share of the fused score, 0-1.")


class ExplainedHitOut(HitOut):
    legs: dict[str, LegOut] | None = Field(None, description="With explain: each retriever's part.")
    fused_score: float | None = Field(None, description="With explain: the fused score (before rerank).")


class ExplainedSearchOut(BaseModel):
    hits: list[ExplainedHitOut] = Field(description="Best first.")


class PositionOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    rank: int | None = Field(description="1-based rank of the target in this list, or null.")
    reason: str = Field(description="found, filtered, not_matched, too_deep or no_vectors.")
    score: float | None = Field(None, description="The raw score (a retriever's) or the fused score.")
    anchor: str | None = Field(None, description="The target's passage that ranked best.")
    section: str | None = None
    matched: int | None = Field(None, description="How many passages the list held, when fewer than depth.")
    note: str | None = Field(None, description="Why it is absent, in one line.")


class LocateOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    query: str
    target: str
    path: str
    anchor: str | None
    collection: str
    depth: int = Field(description="How deep each retriever's list was searched.")
    document_id: int | None = Field(description="The target's document, or null when there is none.")
    section_exists: bool = Field(description="False when the document has no passage with that anchor.")
    legs: dict[str, PositionOut] = Field(description="The target in each retriever's list.")
    fused: PositionOut | None = Field(description="The target in the fused list, or null.")
    verdict: str = Field(description="The answer in one line.")


class RunOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    collection: str
    status: str
    started_at: str
    finished_at: str | None
    errors: list[Any] = Field(description="Per-document errors of the run.")


class RunsOut(BaseModel):
    runs: list[RunOut] = Field(description="Newest first.")


class CollectionsOut(BaseModel):
    default: str = Field(description="The collection searched when a request names none.")
    collections: list[str]


ERROR_TEXT = {401: "Missing or wrong bearer token", 404: "No such document or collection",
              413: "Request body too large", 422: "Invalid request",
              503: "Database or embedding service unavailable, or too many searches waiting on it",
              504: "Request timed out"}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of an endpoint: its error statuses, each with the error body."""
    return {code: {"model": ErrorOut, "description": ERROR_TEXT[code]} for code in codes}
