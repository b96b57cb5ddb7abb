"""HTTP plumbing shared by the remote providers: one httpx client, capped bodies, failures classified."""

from __future__ import annotations

import base64
import email.utils
import json
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

import httpx

from rag_pg.config.egress import EgressPolicy, EgressRefused, IPAddress, Resolver, system_resolver
from rag_pg.embed.base import ProviderUnavailable, time_left
from rag_pg.errors import ConfigError, EmbeddingError

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_DETAIL_LIMIT = 500
_ALLOWED_SCHEMES = ("http", "https")
# Statuses worth retrying: the service is busy or hiccuping, the same request may pass soon.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def redact_url(url: httpx.URL) -> str:
    """The URL as messages may show it: no user, password or query string, where secrets hide."""
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host
    path = "" if url.path == "/" else url.path
    return f"{url.scheme}://{host}{port}{path}"


def parse_service_url(url: str) -> httpx.URL:
    """Accept only absolute http(s) URLs, so a setting cannot point at file:// or gopher://."""
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


class GuardedTransport(httpx.BaseTransport):
    """httpx's transport, connected only to addresses the policy allowed for that request."""

    def __init__(self, policy: EgressPolicy, *, resolve: Resolver = system_resolver) -> None:
        self._policy = policy
        self._resolve = resolve
        self._inner = httpx.HTTPTransport(trust_env=False)  # as the client: no SSL_CERT_* from the environment

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        host = url.host
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = self._policy.addresses(host, port, self._resolve)
        except (OSError, ValueError) as exc:
            raise httpx.ConnectError(f"cannot resolve {host}: {exc}", request=request) from None
        if str(addresses[0]) == host:  # an address already: nothing to pin
            return self._inner.handle_request(request)
        request.extensions = {**request.extensions, "sni_hostname": host}
        for address in addresses[:-1]:
            try:
                return self._send_to(request, address)
            except httpx.ConnectError:
                continue  # the next address, as the system's own connect would
        return self._send_to(request, addresses[-1])

    def _send_to(self, request: httpx.Request, address: IPAddress) -> httpx.Response:
        # The connection goes to the checked address; the Host header (set when the request
        # was built) and the TLS server name stay the configured name.
        url = request.url
        request.url = url.copy_with(host=str(address))
        try:
            return self._inner.handle_request(request)
        finally:
            request.url = url

    def close(self) -> None:
        self._inner.close()


class JsonService:
    """A JSON-over-HTTP service: every failure becomes one EmbeddingError kind.

    One ``httpx.Client`` serves all calls (kept-alive pooled connections, thread-safe, so
    several batches can be in flight); it is opened on the first call and closed by
    :meth:`close`. It connects only where ``egress`` allows (``rag_pg.config.egress``: never a
    metadata or link-local address, the address checked is the one connected to). Redirects
    are never followed, the environment's proxies and netrc are ignored, and the response body is streamed under a size cap and the call's deadline, so
    a hostile or broken service can neither exhaust memory nor hang an ingest. Credentials
    never appear in a message.
    """

    #: statuses that mean "this input is refused": never retried, never a reason to fall back,
    #: and ingest fails only the document that carried it. OpenAI and vLLM answer 400 for an
    #: input over the model's context, TEI 413 or 422, a validating service 422: each says the
    #: fault is in what was sent, so calling the service "unavailable" would abort a whole run
    #: over one bad document.
    invalid_statuses: frozenset[int] = frozenset({400, 413, 422})

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        api_key: str | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        egress: EgressPolicy | None = None,
        dimension: int | None = None,
        batch_size: int | None = None,
    ) -> None:
        if dimension is not None and dimension <= 0:
            raise ConfigError(f"embedding.dimension must be positive, got {dimension}")
        if batch_size is not None and batch_size <= 0:
            raise ConfigError(f"embedding.batch_size must be positive, got {batch_size}")
        parsed = parse_service_url(url)
        self._egress = egress or EgressPolicy()
        self._egress.check_literal(parsed.host)
        if api_key and any(c in api_key for c in "\r\n\0"):
            raise ConfigError("embedding.api_key holds a line break or NUL: check its value")
        if timeout <= 0:
            raise ConfigError(f"embedding.timeout must be positive, got {timeout}")
        # Credentials leave the URL (so no message or request repr can show them) and travel
        # as a header: basic auth from user:password@, or the API key, which wins.
        self._base = parsed.copy_with(userinfo=b"")
        self._headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        elif parsed.userinfo:
            self._headers["Authorization"] = basic_auth(parsed.username, parsed.password)
        self.url = redact_url(self._base)
        self._timeout = timeout
        self._transport = transport
        self._max_bytes = max_response_bytes
        # Scrub both spellings of the password (decoded and as typed) and the key, when long
        # enough that replacing them cannot mangle an ordinary message.
        raw_password = parsed.userinfo.decode("ascii", "replace").partition(":")[2]
        candidates = (parsed.password, raw_password, api_key)
        self._secrets = sorted({s for s in candidates if s and len(s) >= 4}, key=len, reverse=True)
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None
        self._closed = False
        # The vectors' shape: configured, else learned from the service's first answer.
        self._dimension = dimension
        self._batch_size = batch_size
        self._learn_lock = threading.Lock()
        self._learned_dim: int | None = None

    def close(self) -> None:
        """Close the pooled connections; later calls fail as unavailable."""
        with self._lock:
            self._closed = True
            client, self._http = self._http, None
        if client is not None:
            client.close()

    # -- one request --------------------------------------------------------------------------

    def _call(self, method: str, path: str, payload: dict[str, Any] | None) -> object:
        """Send one request under a total deadline and return its parsed JSON body.

        httpx bounds each connect, write and read by ``budget``; the body loop also checks the
        total, so a service dripping its answer byte by byte still ends at the deadline.
        """
        budget = time_left(self._timeout)
        if budget <= 0:
            raise self._unavailable("was not tried: the batch's deadline has passed")
        deadline = time.monotonic() + budget
        headers = self._headers
        body = None
        if payload is not None:
            body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
            headers = {**headers, "Content-Type": "application/json"}
        client = self._client()
        url = self._base.copy_with(path=self._base.path.rstrip("/") + path)
        try:
            with client.stream(
                method, url, content=body, headers=headers, timeout=httpx.Timeout(budget)
            ) as response:
                return self._read(response, path, deadline, budget)
        except httpx.HTTPError as exc:
            raise self._transport_failure(exc, budget, reading=False) from None
        except EgressRefused as refused:
            raise self._unavailable(f"was not called: {refused}", retryable=False) from None

    def _read(self, response: httpx.Response, path: str, deadline: float, budget: float) -> object:
        status = response.status_code
        if 300 <= status < 400:
            raise self._unavailable(
                f"answered HTTP {status} (a redirect, not followed)", retryable=False
            )
        if status != 200:
            raw = self._body(response, deadline, budget, limit=64 * 1024, strict=False)
            raise self._status_error(status, path, _detail(raw), response.headers.get("retry-after"))
        raw = self._body(response, deadline, budget, limit=self._max_bytes, strict=True)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise self._malformed(f"{path} response is not valid JSON") from None

    def _status_error(
        self, status: int, path: str, detail: str | None, retry_after_header: str | None
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
        retry_after = parse_retry_after(retry_after_header)
        wait = f", Retry-After {retry_after:g}s" if retry_after is not None else ""
        said = f": {detail}" if detail else ""
        return self._unavailable(
            f"answered HTTP {status} on {path}{wait}{said}",
            retry_after=retry_after,
            retryable=status in RETRYABLE_STATUSES,
        )

    def _body(
        self, response: httpx.Response, deadline: float, budget: float, *, limit: int, strict: bool
    ) -> bytes:
        """Read at most ``limit`` bytes before ``deadline``; refuse early when the header says more.

        The cap counts decoded bytes, so a compressed answer cannot expand past it either.
        """
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
                if time.monotonic() >= deadline:
                    raise httpx.ReadTimeout("the call's deadline passed while reading")
        except httpx.HTTPError as exc:
            raise self._transport_failure(exc, budget, reading=True) from None
        return b"".join(chunks)

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._closed:
                raise ProviderUnavailable(
                    f"embedding provider for {self.url} is closed", retryable=False
                )
            if self._http is None:
                self._http = httpx.Client(
                    transport=self._transport or GuardedTransport(self._egress),
                    follow_redirects=False, trust_env=False,
                )
            return self._http

    # -- messages -----------------------------------------------------------------------------

    def _scrub(self, message: str) -> str:
        """Belt and braces: no password or API key survives into a message."""
        for secret in self._secrets:
            message = message.replace(secret, "***")
        return message

    def _transport_failure(
        self, exc: httpx.HTTPError, budget: float, *, reading: bool
    ) -> EmbeddingError:
        """What httpx raised, as one of the three kinds, in words safe to show once scrubbed."""
        said = f" ({describe(exc)})"
        if isinstance(exc, httpx.TimeoutException):
            return self._unavailable(
                f"timed out after {budget:g}s" + (" reading the response" if reading else "")
            )
        if isinstance(exc, httpx.DecodingError):
            return self._malformed(f"response body cannot be decoded{said}")
        if isinstance(exc, httpx.TransportError):
            # Before an answer began the service could not be had; after, it cut the body off.
            return self._unavailable(
                f"dropped the connection{said}" if reading else f"cannot be reached{said}"
            )
        return self._unavailable(f"request failed{said}")

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


def describe(exc: BaseException) -> str:
    """An exception's class and message on one line (the message may be empty)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def basic_auth(username: str, password: str) -> str:
    """The ``Authorization`` value for HTTP basic auth, encoded as httpx encodes it (UTF-8)."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


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
