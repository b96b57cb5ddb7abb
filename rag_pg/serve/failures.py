"""What the service surfaces tell a caller and the log when something fails, with no secret in it.

Why apart from the request rules: the rules decide what is allowed; this module decides how a
refusal or a breakdown reads — :func:`classify` turns any exception into a status, a stable
code and one line, and every line that leaves the process (an error body, a log record) is
scrubbed of the secrets the service knows (:class:`Secrets`).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rag_pg.config import Settings, client_token
from rag_pg.errors import (
    CollectionNotFound,
    ConfigError,
    EmbeddingBusy,
    EmbeddingError,
    NoVectors,
    SchemaMissing,
    StoreError,
)
from rag_pg.serve.rules import Busy, InvalidRequest, NotFound, RequestTimeout
from rag_pg.store.db import dsn_passwords


@dataclass(frozen=True, slots=True)
class Failure:
    """What a surface tells its caller about an exception: status, stable code, safe message."""

    status: int
    code: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message}


def classify(exc: BaseException, secrets: Secrets | None = None) -> Failure:
    """Map any exception to a Failure; the message is scrubbed of every known secret.

    Client mistakes are 4xx; a database or embedding service that is down is 503 (retry
    later); only an unexpected exception is 500, and its text is not shown to the caller.
    """
    scrub = secrets.scrub if secrets is not None else (lambda text: text)

    def msg(e: BaseException) -> str:
        lines = str(e).strip().splitlines()
        return scrub(lines[0] if lines else type(e).__name__)

    if isinstance(exc, InvalidRequest):
        return Failure(422, "invalid_request", msg(exc))
    if isinstance(exc, NotFound | CollectionNotFound):
        return Failure(404, "not_found", msg(exc))
    if isinstance(exc, Busy | EmbeddingBusy):
        return Failure(503, "embedding_busy", msg(exc))
    if isinstance(exc, RequestTimeout):
        return Failure(504, "timeout", msg(exc))
    if isinstance(exc, ConfigError):
        return Failure(422, "invalid_request", msg(exc))
    if isinstance(exc, SchemaMissing):
        return Failure(503, "not_initialised", msg(exc))
    if isinstance(exc, NoVectors):
        # Vector mode on a collection without vectors: the request cannot succeed as sent.
        return Failure(422, "invalid_request", msg(exc))
    if isinstance(exc, StoreError):
        return Failure(503, "database_unavailable", msg(exc))
    if isinstance(exc, EmbeddingError):
        if exc.kind == "invalid_input":
            return Failure(422, "invalid_request", msg(exc))
        if exc.kind == "unavailable":
            return Failure(503, "embedding_unavailable", msg(exc))
        return Failure(502, "embedding_malformed", msg(exc))
    return Failure(500, "internal", "internal error; the server log has the details")


# -- secrets -------------------------------------------------------------------------------------


class Secrets:
    """Every secret the service knows, so logs and error bodies can be scrubbed of them.

    Messages are already built with :func:`redact_url`; this is the second fence, for text
    that comes from elsewhere (a driver's error, a traceback).
    """

    def __init__(self, values: Iterable[str | None] = ()):
        self._values = sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True)

    @classmethod
    def from_settings(cls, settings: Settings, extra: Iterable[str | None] = ()) -> Secrets:
        values: list[str | None] = [settings.server.token, *extra]
        for client in settings.server.clients:
            values.append(client_token(client))
        if settings.database.url:
            values += dsn_passwords(settings.database.url)
        return cls(values)

    def scrub(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, "***")
        return text


# -- logging -------------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line; every known secret is replaced by ``***`` in the whole line."""

    def __init__(self, secrets: Secrets):
        super().__init__()
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        if record.exc_info and record.exc_info[1] is not None:
            data["error"] = type(record.exc_info[1]).__name__
            data["traceback"] = "".join(traceback.format_exception(*record.exc_info))
        return self.secrets.scrub(json.dumps(data, ensure_ascii=False, default=str))


def setup_logging(secrets: Secrets, level: int = logging.INFO) -> logging.Handler:
    """Send every log record of the process to stderr as one scrubbed JSON line.

    The root logger gets the handler, so the driver's, the pool's and the SDKs' records are
    scrubbed too; stdout stays for results (and, for MCP, the protocol alone).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(secrets))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    for name in ("ragpg", "uvicorn", "uvicorn.error", "uvicorn.access", "mcp", "psycopg"):
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    for name in ("httpx", "httpcore"):  # one INFO line per embedding call is noise
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    return handler


def log_event(log: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log ``message`` with structured fields that :class:`JsonFormatter` merges into the line."""
    log.log(level, message, extra={"fields": fields})


__all__ = ["Failure", "JsonFormatter", "Secrets", "classify", "log_event", "setup_logging"]
