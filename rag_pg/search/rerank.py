"""Optional cross-encoder rerank over HTTP (TEI, Jina or Cohere shape) and confidence bands.

Seed 003's best configuration reranks the fused candidates with a cross-encoder and grades
its answer by the rerank score instead of one hard threshold: below ``abstain_below`` the
caller should abstain, below ``caution_below`` answer with caution, otherwise normally.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rag_pg.config import RerankSettings
from rag_pg.errors import ConfigError, RerankError
from rag_pg.models import Hit
from rag_pg.source.tokens import context_prefix

if TYPE_CHECKING:
    import httpx

BANDS = ("abstain", "caution", "normal")


def band(score: float, settings: RerankSettings) -> str:
    """abstain / caution / normal for one rerank score."""
    if score < settings.abstain_below:
        return "abstain"
    if score < settings.caution_below:
        return "caution"
    return "normal"


def request_for(settings: RerankSettings, query: str, texts: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """The URL and JSON body of one rerank call in the configured API's shape."""
    if not settings.url:
        raise ConfigError("rerank needs rerank.url (RAGPG_RERANK_URL): a TEI, Jina or Cohere rerank endpoint")
    base = settings.url.rstrip("/")
    if settings.api == "tei":
        url = base if base.endswith("/rerank") else f"{base}/rerank"
        return url, {"query": query, "texts": list(texts), "raw_scores": True, "return_text": False}
    url = base if base.endswith("/rerank") else f"{base}/v1/rerank"
    body: dict[str, Any] = {"query": query, "documents": list(texts), "top_n": len(texts)}
    if settings.model:
        body["model"] = settings.model
    if settings.api == "jina":
        body["return_documents"] = False
    return url, body


def parse_scores(data: Any, count: int) -> list[float]:
    """Scores in the order of the texts, from ``[{"index", "score"}]`` (TEI) or
    ``{"results": [{"index", "relevance_score"}]}`` (Jina, Cohere)."""
    items = data.get("results") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise RerankError("rerank response is not a list of scores")
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            raise RerankError("rerank response item is not an object")
        index = item.get("index")
        value = item.get("score", item.get("relevance_score"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
            raise RerankError(f"rerank response has an invalid index {index!r}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RerankError(f"rerank response has an invalid score {value!r}")
        scores[index] = float(value)
    missing = [i for i, s in enumerate(scores) if s is None]
    if missing:
        raise RerankError(f"rerank response has no score for {len(missing)} of {count} texts")
    return [float(s) for s in scores if s is not None]


class Reranker:
    """Calls the rerank API; one client per RagPG, closed with it."""

    def __init__(self, settings: RerankSettings, *, transport: httpx.BaseTransport | None = None):
        import httpx  # only when reranking is on: importing httpx costs ~0.1 s per process

        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._client = httpx.Client(timeout=settings.timeout, headers=headers, transport=transport)

    def close(self) -> None:
        self._client.close()

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        import httpx

        url, body = request_for(self.settings, query, texts)
        try:
            response = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise RerankError(f"rerank service unavailable at {url}: {type(exc).__name__}") from None
        if response.status_code != 200:
            raise RerankError(f"rerank service answered HTTP {response.status_code} at {url}")
        try:
            data = response.json()
        except ValueError:
            raise RerankError("rerank response is not JSON") from None
        return parse_scores(data, len(texts))

    def rerank(self, query: str, hits: list[Hit], k: int) -> list[Hit]:
        """Rerank the first ``max(top_n, k)`` fused hits; the rest keep their fused order after
        them. Each reranked hit gets ``score`` = rerank score, ``ranks/scores["rerank"]`` and
        ``extra["confidence"]``; the fused score stays in ``scores["fused"]``."""
        head, rest = hits[: max(self.settings.top_n, k)], hits[max(self.settings.top_n, k):]
        texts = [f"{context_prefix(h.chunk)}\n{h.chunk.content}" for h in head]
        values = self.scores(query, texts)
        order = sorted(range(len(head)), key=lambda i: (-values[i], i))
        out: list[Hit] = []
        for rank, i in enumerate(order, start=1):
            hit = head[i]
            out.append(replace(
                hit, score=values[i], ranks={**hit.ranks, "rerank": rank},
                scores={**hit.scores, "fused": hit.score, "rerank": values[i]},
                extra={**hit.extra, "confidence": band(values[i], self.settings)},
            ))
        return out + rest
