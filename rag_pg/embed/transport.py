"""HTTP plumbing shared by the remote providers: one client, capped bodies, failures classified."""

from __future__ import annotations

import email.utils
import json
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from rag_pg.embed.base import ProviderUnavailable, time_left
from rag_pg.errors import ConfigError, EmbeddingError

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_DETAIL_LIMIT = 500
_ALLOWED_SCHEMES = ("http", "https")
# Statuses worth retrying: the service is busy or hiccuping, the same request may pass soon.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


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


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None when absent or bad."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.now(UTC).timestamp() if now is None else now
        seconds = when.timestamp() - current
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class JsonService:
    """A JSON-over-HTTP service: every failure becomes one EmbeddingError kind.

    One ``httpx.Client`` is shared by all calls (connection reuse, thread-safe, so several
    batches can be in flight), redirects are never followed, and the response body is
    size-capped and deadline-bound so a hostile or broken service can neither exhaust memory
    nor hang an ingest. Credentials never appear in a message (G5).
    """

    #: statuses that mean "this input is refused" (never retried); subclasses widen it.
    invalid_statuses: frozenset[int] = frozenset({422})

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        api_key: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        parsed = parse_service_url(url)
        if timeout <= 0:
            raise ConfigError(f"embedding.timeout must be positive, got {timeout}")
        # Credentials leave the URL (so no httpx message or request repr can show them) and
        # travel as a header: basic auth from user:password@, or the API key, which wins.
        self._base = parsed.copy_with(userinfo=b"")
        self._auth: httpx.Auth | None = None
        if parsed.userinfo and not api_key:
            self._auth = httpx.BasicAuth(parsed.username, parsed.password)
        self.url = redact_url(self._base)
        self._timeout = timeout
        self._transport = transport
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

    def close(self) -> None:
        """Close the shared connection pool; later calls fail as unavailable."""
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- one request --------------------------------------------------------------------------

    def _call(self, method: str, path: str, payload: dict[str, Any] | None) -> object:
        """Send one request under a total deadline and return its parsed JSON body."""
        url = self._base.copy_with(path=self._base.path.rstrip("/") + path)
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        budget = time_left(self._timeout)
        if budget <= 0:
            raise self._unavailable("was not tried: the batch's deadline has passed")
        deadline = time.monotonic() + budget
        client = self._get_client()
        try:
            request = client.build_request(
                method, url, json=payload, headers=headers, timeout=httpx.Timeout(budget)
            )
            response = client.send(request, stream=True, auth=self._auth)
        except httpx.TimeoutException:
            raise self._unavailable(f"timed out after {budget:g}s") from None
        except httpx.TransportError as exc:
            raise self._unavailable(f"cannot be reached ({_describe(exc)})") from None
        except httpx.HTTPError as exc:
            raise self._unavailable(f"request failed ({_describe(exc)})") from None
        try:
            return self._read(response, path, deadline, budget)
        finally:
            response.close()

    def _read(
        self, response: httpx.Response, path: str, deadline: float, budget: float
    ) -> object:
        status = response.status_code
        if 300 <= status < 400:
            raise self._unavailable(
                f"answered HTTP {status} (a redirect, not followed)", retryable=False
            )
        if status != 200:
            raw = self._body(response, deadline, budget, limit=64 * 1024, strict=False)
            raise self._status_error(status, path, _detail(raw), response.headers)
        raw = self._body(response, deadline, budget, limit=self._max_bytes, strict=True)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise self._malformed(f"{path} response is not valid JSON") from None

    def _status_error(
        self, status: int, path: str, detail: str | None, headers: httpx.Headers
    ) -> EmbeddingError:
        """Classify a non-200: refused input, or unavailable (retryable or not)."""
        if status in self.invalid_statuses:
            suffix = f": {detail}" if detail else ""
            return EmbeddingError.invalid_input(
                self._scrub(
                    f"embedding service at {self.url} refused the input (HTTP {status}){suffix}"
                ),
                detail=self._scrub(detail) if detail else None,
            )
        retry_after = parse_retry_after(headers.get("retry-after"))
        wait = f", Retry-After {retry_after:g}s" if retry_after is not None else ""
        said = f": {detail}" if detail else ""
        return self._unavailable(
            f"answered HTTP {status} on {path}{wait}{said}",
            retry_after=retry_after,
            retryable=status in RETRYABLE_STATUSES,
        )

    def _body(
        self, response: httpx.Response, deadline: float, budget: float, *, limit: int,
        strict: bool,
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
                    raise self._unavailable(f"timed out after {budget:g}s reading the response")
        except httpx.TimeoutException:
            raise self._unavailable(f"timed out after {budget:g}s") from None
        except httpx.DecodingError:
            raise self._malformed("response body cannot be decoded") from None
        except httpx.TransportError as exc:
            raise self._unavailable(f"dropped the connection ({_describe(exc)})") from None
        return b"".join(chunks)

    def _get_client(self) -> httpx.Client:
        with self._lock:
            if self._closed:
                raise ProviderUnavailable(
                    f"embedding provider for {self.url} is closed", retryable=False
                )
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

    def _unavailable(
        self, what: str, *, retry_after: float | None = None, retryable: bool = True
    ) -> EmbeddingError:
        return ProviderUnavailable(
            self._scrub(f"embedding service at {self.url} {what}"),
            retry_after=retry_after,
            retryable=retryable,
        )

    def _malformed(self, what: str) -> EmbeddingError:
        return EmbeddingError.malformed(
            self._scrub(f"malformed response from embedding service at {self.url}: {what}")
        )


def is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def compact(value: object) -> str:
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
    """The error detail of a JSON body (``detail``, ``error.message`` or ``error``), compact."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    if body.get("detail") not in (None, "", [], {}):
        return compact(body["detail"])
    error = body.get("error")  # OpenAI: {"error": {"message": ...}}; Ollama: {"error": "..."}
    if isinstance(error, dict) and error.get("message") not in (None, ""):
        return compact(error["message"])
    if isinstance(error, str) and error:
        return compact(error)
    return None


def _describe(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
