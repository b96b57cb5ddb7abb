"""The HTTP embedding provider: the seed-000 contract (GET /health, POST /embed) over httpx."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from rag_pg.embed.base import EmbedType, check_request, type_name, validate_vectors
from rag_pg.errors import ConfigError, EmbeddingError

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_DETAIL_LIMIT = 500
_ALLOWED_SCHEMES = ("http", "https")


def redact_url(url: httpx.URL) -> str:
    """The URL as messages may show it: no user, password or query string (G5)."""
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host
    path = "" if url.path == "/" else url.path
    return f"{url.scheme}://{host}{port}{path}"


def parse_service_url(url: str) -> httpx.URL:
    """Accept only absolute http(s) URLs, so a setting cannot point at file:// or gopher:// (G4)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise ConfigError("embedding.url is not a valid URL") from None
    if parsed.scheme not in _ALLOWED_SCHEMES:
        raise ConfigError(
            f"embedding.url must use http or https, not {parsed.scheme or 'no scheme'!r}"
        )
    if not parsed.host:
        raise ConfigError("embedding.url has no host")
    return parsed


class HttpEmbeddingProvider:
    """Calls a remote embedding service; every failure becomes one EmbeddingError kind.

    One ``httpx.Client`` is shared by all calls (connection reuse, thread-safe), redirects
    are never followed, and the response body is size-capped and deadline-bound so a hostile
    or broken service can neither exhaust memory nor hang an ingest.
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
    ) -> None:
        parsed = parse_service_url(url)
        # Credentials leave the URL (so no httpx message or request repr can show them) and
        # travel as a header: basic auth from user:password@, or the API key, which wins.
        self._base = parsed.copy_with(userinfo=b"")
        self._auth: httpx.Auth | None = None
        if parsed.userinfo and not api_key:
            self._auth = httpx.BasicAuth(parsed.username, parsed.password)
        if dimension is not None and dimension <= 0:
            raise ConfigError(f"embedding.dimension must be positive, got {dimension}")
        if timeout <= 0:
            raise ConfigError(f"embedding.timeout must be positive, got {timeout}")
        if batch_size is not None and batch_size <= 0:
            raise ConfigError(f"embedding.batch_size must be positive, got {batch_size}")
        self.url = redact_url(self._base)
        self._model = model
        self._dimension = dimension
        self._timeout = timeout
        self._transport = transport
        self._batch_size = batch_size
        self._api_key = api_key
        self._max_bytes = max_response_bytes
        # Scrub both spellings of the password (decoded and as typed) and the key, when long
        # enough that replacing them cannot mangle an ordinary message.
        raw_password = parsed.userinfo.decode("ascii", "replace").partition(":")[2]
        candidates = (parsed.password, raw_password, api_key)
        self._secrets = sorted({s for s in candidates if s and len(s) >= 4}, key=len, reverse=True)
        self._lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._closed = False
        self._learned_model: str | None = None
        self._learned_dim: int | None = None

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
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def health(self) -> dict[str, Any]:
        """Ask the service for its status; also teaches the provider the model and dimension."""
        body = self._call("GET", "/health", None)
        if not isinstance(body, dict):
            raise self._malformed(f"/health answered a {type_name(body)}, not an object")
        status = body.get("status")
        if status != "ok":
            raise self._unavailable(f"reports status {_compact(status)}")
        model = body.get("model")
        dim = body.get("dim")
        if not isinstance(model, str) or not model:
            raise self._malformed("/health has no model name")
        if not _is_positive_int(dim):
            raise self._malformed(f"/health dim is {_compact(dim)}, not a positive integer")
        with self._lock:
            if self._learned_model is None:
                self._learned_model = model
            if self._learned_dim is None:
                self._learned_dim = dim
        return {"status": "ok", "model": model, "dim": dim}

    def close(self) -> None:
        """Close the shared connection pool; later calls fail as unavailable."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> HttpEmbeddingProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HttpEmbeddingProvider({self.url!r}, model={self._model!r})"

    # -- one request --------------------------------------------------------------------------

    def _embed_batch(self, type: EmbedType, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        body = self._call("POST", "/embed", {"type": type, "texts": list(texts)})
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
            if not _is_positive_int(dim):
                raise self._malformed(f"/embed dim is {_compact(dim)}, not a positive integer")
            if self._dimension is not None and dim != self._dimension:
                raise self._malformed(
                    f"service returned dimension {dim}, configured {self._dimension}"
                )
        expected = self._dimension or dim or self._learned_dim
        try:
            vectors = validate_vectors(body["vectors"], count=len(texts), dimension=expected)
        except EmbeddingError as exc:
            raise self._malformed(str(exc)) from None
        with self._lock:
            if self._learned_dim is None:
                self._learned_dim = int(vectors.shape[1])
        if self._learned_dim != vectors.shape[1] and self._dimension is None:
            raise self._malformed(
                f"service returned dimension {vectors.shape[1]}, earlier {self._learned_dim}"
            )
        return vectors

    def _check_model(self, model: str) -> None:
        """A model switch would mix incomparable vectors in one index (B4): refuse it."""
        if self._model is not None:
            if model != self._model:
                raise self._malformed(
                    f"service returned model {model!r}, configured {self._model!r}"
                )
            return
        with self._lock:
            if self._learned_model is None:
                self._learned_model = model
            learned = self._learned_model
        if model != learned:
            raise self._malformed(f"service returned model {model!r}, earlier {learned!r}")

    def _call(self, method: str, path: str, payload: dict[str, Any] | None) -> object:
        """Send one request under a total deadline and return its parsed JSON body."""
        url = self._base.copy_with(path=self._base.path.rstrip("/") + path)
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        deadline = time.monotonic() + self._timeout
        client = self._get_client()
        try:
            request = client.build_request(method, url, json=payload, headers=headers)
            response = client.send(request, stream=True, auth=self._auth)
        except httpx.TimeoutException:
            raise self._unavailable(f"timed out after {self._timeout:g}s") from None
        except httpx.TransportError as exc:
            raise self._unavailable(f"cannot be reached ({_describe(exc)})") from None
        except httpx.HTTPError as exc:
            raise self._unavailable(f"request failed ({_describe(exc)})") from None
        try:
            return self._read(response, path, deadline)
        finally:
            response.close()

    def _read(self, response: httpx.Response, path: str, deadline: float) -> object:
        status = response.status_code
        if 300 <= status < 400:
            raise self._unavailable(f"answered HTTP {status} (a redirect, not followed)")
        if status == 422:
            raw = self._body(response, deadline, limit=64 * 1024, strict=False)
            detail = _detail(raw)
            suffix = f": {detail}" if detail else ""
            raise EmbeddingError.invalid_input(
                self._scrub(
                    f"embedding service at {self.url} refused the input (HTTP 422){suffix}"
                ),
                detail=self._scrub(detail) if detail else None,
            )
        if status != 200:
            raise self._unavailable(f"answered HTTP {status} on {path}")
        raw = self._body(response, deadline, limit=self._max_bytes, strict=True)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise self._malformed(f"{path} response is not valid JSON") from None

    def _body(
        self, response: httpx.Response, deadline: float, *, limit: int, strict: bool
    ) -> bytes:
        """Read at most ``limit`` bytes before ``deadline``; refuse early when the header says more."""
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            if strict:
                raise self._malformed(
                    f"response of {int(declared)} bytes exceeds the {limit}-byte cap"
                )
            return b""
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limit:
                    if strict:
                        raise self._malformed(f"response exceeds the {limit}-byte cap")
                    break
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise self._unavailable(
                        f"timed out after {self._timeout:g}s reading the response"
                    )
        except httpx.TimeoutException:
            raise self._unavailable(f"timed out after {self._timeout:g}s") from None
        except httpx.DecodingError:
            raise self._malformed("response body cannot be decoded") from None
        except httpx.TransportError as exc:
            raise self._unavailable(f"dropped the connection ({_describe(exc)})") from None
        return b"".join(chunks)

    def _get_client(self) -> httpx.Client:
        with self._lock:
            if self._closed:
                raise EmbeddingError.unavailable(f"embedding provider for {self.url} is closed")
            if self._client is None:
                # trust_env=False: no proxy or netrc read from the environment behind our back.
                self._client = httpx.Client(
                    transport=self._transport,
                    timeout=httpx.Timeout(self._timeout),
                    follow_redirects=False,
                    trust_env=False,
                )
            return self._client

    # -- messages -----------------------------------------------------------------------------

    def _scrub(self, message: str) -> str:
        """Belt and braces for G5: no password or API key survives into a message."""
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message

    def _unavailable(self, what: str) -> EmbeddingError:
        return EmbeddingError.unavailable(self._scrub(f"embedding service at {self.url} {what}"))

    def _malformed(self, what: str) -> EmbeddingError:
        return EmbeddingError.malformed(
            self._scrub(f"malformed response from embedding service at {self.url}: {what}")
        )


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _compact(value: object) -> str:
    """Render any JSON value on one short line."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
        except (ValueError, RecursionError):
            text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 1] + "…"


def _detail(raw: bytes) -> str | None:
    """The ``detail`` of a 422 body (string, list or object), compact; None when absent."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(body, dict) and body.get("detail") not in (None, "", [], {}):
        return _compact(body["detail"])
    return None


def _describe(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
