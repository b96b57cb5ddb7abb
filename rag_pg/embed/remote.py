"""Providers for the embedding APIs users already run: OpenAI-compatible and Ollama's native one."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rag_pg.embed.base import EmbedType, check_request, type_name, validate_vectors
from rag_pg.embed.transport import JsonService, compact
from rag_pg.errors import ConfigError, EmbeddingError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

OPENAI_URL = "https://api.openai.com/v1"
OLLAMA_URL = "http://127.0.0.1:11434"
_PROBE = "ping"


class _NamedModelService(JsonService):
    """What the two APIs share: the client names the model, and these APIs have no /health.

    The dimension is configured or learned from the first answer (``health`` embeds one
    short probe text), then every answer must keep it; the model name the server echoes
    must stay the same too, so a model swapped behind the URL is caught. Query and
    passage prefixes are added here because these APIs, unlike ragpg's ``/embed``, know no types.
    """

    path = ""

    def __init__(
        self,
        url: str,
        *,
        model: str | None,
        query_prefix: str = "",
        passage_prefix: str = "",
        **options: Any,
    ) -> None:
        """``options``: :class:`JsonService`'s (timeout, transport, api_key, dimension, ...)."""
        if not model:
            raise ConfigError(f"embedding.provider = {self.kind_name()} needs embedding.model")
        super().__init__(url, **options)
        self._model = model
        self._prefixes = {"query": query_prefix, "passage": passage_prefix}
        self._echoed_model: str | None = None

    @classmethod
    def kind_name(cls) -> str:
        return str(getattr(cls, "kind", cls.__name__))

    @property
    def model(self) -> str:
        """The configured model: these APIs serve whatever model the request names."""
        return self._model

    @property
    def dimension(self) -> int | None:
        """The configured dimension, else the one of a probe answer (one request, cached)."""
        if self._dimension is not None:
            return self._dimension
        if self._learned_dim is None:
            self.health()
        return self._learned_dim

    def embed(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` (prefixed for their type), in requests of ``batch_size`` at most."""
        check_request(type, texts)
        prefix = self._prefixes[type]
        sent = [prefix + t for t in texts] if prefix else list(texts)
        step = self._batch_size or len(sent)
        parts = [self._embed_batch(sent[i : i + step]) for i in range(0, len(sent), step)]
        if len(parts) == 1:
            return parts[0]
        import numpy as np

        return np.concatenate(parts)

    def health(self) -> dict[str, Any]:
        """Embed one probe text: proves the model answers and teaches its dimension."""
        vectors = self.embed("query", [_PROBE])
        return {"status": "ok", "model": self._model, "dim": int(vectors.shape[1])}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, model={self._model!r})"

    # -- one request --------------------------------------------------------------------------

    def _embed_batch(self, texts: list[str]) -> npt.NDArray[np.float32]:
        rows, echoed = self._request(texts)
        if echoed is not None:
            self._check_echo(echoed)
        expected = self._dimension or self._learned_dim
        try:
            vectors = validate_vectors(rows, count=len(texts), dimension=expected)
        except EmbeddingError as exc:
            raise self._malformed(str(exc)) from None
        with self._learn_lock:
            if self._learned_dim is None:
                self._learned_dim = int(vectors.shape[1])
        return vectors

    def _request(self, texts: list[str]) -> tuple[object, str | None]:
        """Send one request; return the raw vectors and the model name the server echoed."""
        raise NotImplementedError

    def _check_echo(self, echoed: object) -> None:
        """The echoed name may be spelled differently (``m:latest``) but must never change."""
        if not isinstance(echoed, str):
            raise self._malformed(f"model is a {type_name(echoed)}, not a string")
        with self._learn_lock:
            if self._echoed_model is None:
                self._echoed_model = echoed
            first = self._echoed_model
        if echoed != first:
            raise self._malformed(f"service switched model from {first!r} to {echoed!r}")

    def _body_dict(self, body: object, what: str) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise self._malformed(f"{what} answered a {type_name(body)}, not an object")
        return body


class OpenAIEmbeddingProvider(_NamedModelService):
    """Any OpenAI-compatible ``/v1/embeddings``: OpenAI, TEI, vLLM, LiteLLM, Ollama's, ragpg's.

    ``url`` is the API base (``https://api.openai.com/v1``); a bare host gets ``/v1``.
    ``send_dimensions`` asks the server for ``dimension``-long vectors (text-embedding-3
    models shorten theirs); other servers may refuse the parameter, so it is opt-in.
    """

    kind = "openai"

    def __init__(
        self,
        url: str | None = None,
        *,
        model: str | None,
        send_dimensions: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(url or OPENAI_URL, model=model, **kwargs)
        if send_dimensions and self._dimension is None:
            raise ConfigError("embedding.send_dimensions needs embedding.dimension")
        self._send_dimensions = send_dimensions
        self.path = "/v1/embeddings" if self._base.path in ("", "/") else "/embeddings"

    def _request(self, texts: list[str]) -> tuple[object, str | None]:
        payload: dict[str, Any] = {"model": self._model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            payload["dimensions"] = self._dimension
        body = self._body_dict(self._call("POST", self.path, payload), self.path)
        data = body.get("data")
        if not isinstance(data, list):
            raise self._malformed(f"{self.path} response has no 'data' list")
        if len(data) != len(texts):
            raise self._malformed(f"expected {len(texts)} embeddings, got {len(data)}")
        rows: list[object] = [None] * len(texts)
        for position, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise self._malformed(f"data[{position}] has no 'embedding'")
            index = item.get("index", position)
            if type(index) is not int or not 0 <= index < len(texts) or rows[index] is not None:
                raise self._malformed(f"data[{position}] has a bad or repeated index {compact(index)}")
            rows[index] = self._decode(item["embedding"], position)
        return rows, body.get("model")

    def _decode(self, embedding: object, position: int) -> object:
        """A list of numbers, or base64 float32 (what servers send when they ignore the format)."""
        if not isinstance(embedding, str):
            return embedding
        try:
            raw = base64.b64decode(embedding, validate=True)
        except (binascii.Error, ValueError):
            raise self._malformed(f"data[{position}].embedding is neither numbers nor base64") from None
        if len(raw) % 4:
            raise self._malformed(f"data[{position}].embedding is not float32 base64")
        import numpy as np

        return [float(v) for v in np.frombuffer(raw, dtype="<f4")]


class OllamaEmbeddingProvider(_NamedModelService):
    """Ollama's native ``POST /api/embed`` (batched input, L2-normalised vectors).

    A model that is not pulled answers 404: *unavailable* and not retried, so a chain moves
    on to the next provider at once.
    """

    kind = "ollama"

    def __init__(self, url: str | None = None, *, model: str | None, **kwargs: Any) -> None:
        super().__init__(url or OLLAMA_URL, model=model, **kwargs)
        self.path = "/api/embed"

    def _request(self, texts: list[str]) -> tuple[object, str | None]:
        body = self._body_dict(
            self._call("POST", self.path, {"model": self._model, "input": texts}), self.path
        )
        if "embeddings" not in body:
            raise self._malformed(f"{self.path} response has no 'embeddings'")
        return body["embeddings"], body.get("model")
