"""The HTTP embedding provider: ragpg's own embedding contract (GET /health, POST /embed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from rag_pg.config.egress import EgressPolicy
from rag_pg.embed.base import EmbedType, check_request, type_name, validate_vectors
from rag_pg.embed.transport import (
    DEFAULT_MAX_RESPONSE_BYTES,
    JsonService,
    compact,
    is_positive_int,
    parse_service_url,
    redact_url,
)
from rag_pg.errors import EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["HttpEmbeddingProvider", "parse_service_url", "redact_url"]


class HttpEmbeddingProvider(JsonService):
    """Calls a remote embedding service speaking ragpg's contract (``GET /health``, ``POST /embed``).

    The transport (one shared client, no redirects, capped and deadline-bound bodies,
    scrubbed messages) comes from :class:`JsonService`; this class adds the contract: the
    model and dimension learned from /health or the first answer, and every answer checked
    against them so a model switch behind the URL can never mix vectors in one index.
    """

    kind = "http"

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        dimension: int | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        batch_size: int | None = None,
        api_key: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        egress: EgressPolicy | None = None,
    ) -> None:
        super().__init__(
            url,
            timeout=timeout,
            transport=transport,
            api_key=api_key,
            max_response_bytes=max_response_bytes,
            egress=egress,
            dimension=dimension,
            batch_size=batch_size,
        )
        self._model = model
        self._learned_model: str | None = None

    # -- public API ---------------------------------------------------------------------------

    @property
    def model(self) -> str | None:
        """The configured model, else the one the service reports (one /health call, cached)."""
        if self._model is not None:
            return self._model
        if self._learned_model is None:
            self.health()
        return self._learned_model

    @property
    def dimension(self) -> int | None:
        """The configured dimension, else the one the service reports (cached)."""
        if self._dimension is not None:
            return self._dimension
        if self._learned_dim is None:
            self.health()
        return self._learned_dim

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts``, in batches when a batch size is set; rows stay in input order."""
        check_request(type, texts)
        step = self._batch_size or len(texts)
        parts = [self._embed_batch(type, texts[i : i + step]) for i in range(0, len(texts), step)]
        if len(parts) == 1:
            return parts[0]
        import numpy as np

        return np.concatenate(parts)

    def health(self) -> dict[str, Any]:
        """Ask the service for its status; also teaches the provider the model and dimension."""
        body = self._call("GET", "/health", None)
        if not isinstance(body, dict):
            raise self._malformed(f"/health answered a {type_name(body)}, not an object")
        status = body.get("status")
        if status != "ok":
            raise self._unavailable(f"reports status {compact(status)}")
        model = body.get("model")
        dim = body.get("dim")
        if not isinstance(model, str) or not model:
            raise self._malformed("/health has no model name")
        if not is_positive_int(dim):
            raise self._malformed(f"/health dim is {compact(dim)}, not a positive integer")
        with self._learn_lock:
            if self._learned_model is None:
                self._learned_model = model
            if self._learned_dim is None:
                self._learned_dim = dim
        return {"status": "ok", "model": model, "dim": dim}

    def __enter__(self) -> HttpEmbeddingProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HttpEmbeddingProvider({self.url!r}, model={self._model!r})"

    # -- one request --------------------------------------------------------------------------

    def _embed_batch(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        # base64 float32 is ~3x cheaper to encode and decode than JSON floats on both ends; a
        # service that ignores the field answers floats, which validate_vectors accepts too.
        request = {"type": type, "texts": list(texts), "encoding": "base64"}
        body = self._call("POST", "/embed", request)
        if not isinstance(body, dict):
            raise self._malformed(f"/embed answered a {type_name(body)}, not an object")
        if "vectors" not in body:
            raise self._malformed("/embed response has no 'vectors'")
        model = body.get("model")
        if model is not None:
            if not isinstance(model, str):
                raise self._malformed(f"/embed model is a {type_name(model)}, not a string")
            self._check_model(model)
        dim = body.get("dim")
        if dim is not None:
            if not is_positive_int(dim):
                raise self._malformed(f"/embed dim is {compact(dim)}, not a positive integer")
            if self._dimension is not None and dim != self._dimension:
                raise self._malformed(
                    f"service returned dimension {dim}, configured {self._dimension}"
                )
        expected = self._dimension or dim or self._learned_dim
        try:
            vectors = validate_vectors(body["vectors"], count=len(texts), dimension=expected)
        except EmbeddingError as exc:
            raise self._malformed(str(exc)) from None
        with self._learn_lock:
            if self._learned_dim is None:
                self._learned_dim = int(vectors.shape[1])
        if self._learned_dim != vectors.shape[1] and self._dimension is None:
            raise self._malformed(
                f"service returned dimension {vectors.shape[1]}, earlier {self._learned_dim}"
            )
        return vectors

    def _check_model(self, model: str) -> None:
        """A model switch would mix incomparable vectors in one index: refuse it."""
        if self._model is not None:
            if model != self._model:
                raise self._malformed(
                    f"service returned model {model!r}, configured {self._model!r}"
                )
            return
        with self._learn_lock:
            if self._learned_model is None:
                self._learned_model = model
            learned = self._learned_model
        if model != learned:
            raise self._malformed(f"service returned model {model!r}, earlier {learned!r}")
