"""``Settings``: every section together, built from defaults < file < ``RAGPG_*`` < flags."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from rag_pg.config import loader
from rag_pg.config.sections import (
    SECTIONS,
    ChunkSettings,
    CitationSettings,
    ContextSettings,
    ConvertSettings,
    DatabaseSettings,
    EmbeddedSettings,
    EmbeddingSettings,
    IndexSettings,
    LLMSettings,
    PermissionsSettings,
    RerankSettings,
    RetrievalSettings,
    ServerSettings,
    SourceSettings,
    TenancySettings,
)
from rag_pg.errors import ConfigError

log = logging.getLogger("rag_pg")


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting ragpg reads; built by :meth:`load` (CLI) or by hand (library).

    Each section checks its own values when it is built and this class checks what spans
    them, so ``RagPG(url, Settings(...))`` gets the same errors as the command line.
    """

    source: SourceSettings = field(default_factory=SourceSettings)
    chunk: ChunkSettings = field(default_factory=ChunkSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    rerank: RerankSettings = field(default_factory=RerankSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    citation: CitationSettings = field(default_factory=CitationSettings)
    convert: ConvertSettings = field(default_factory=ConvertSettings)
    embedded: EmbeddedSettings = field(default_factory=EmbeddedSettings)
    tenancy: TenancySettings = field(default_factory=TenancySettings)
    permissions: PermissionsSettings = field(default_factory=PermissionsSettings)
    collection: str = "default"
    config_file: str | None = None

    def __post_init__(self) -> None:
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(f"Settings.{name} must be a {cls.__name__}")
        if not isinstance(self.collection, str) or not self.collection or len(self.collection) > 200:
            raise ConfigError("collection must be a non-empty name of at most 200 characters")

    @classmethod
    def load(
        cls,
        *,
        config_file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        cwd: Path | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> Settings:
        """Merge defaults, the config file, the environment and ``overrides``.

        ``overrides`` keys are dotted (``"chunk.size"``) and win over everything; ``None``
        values are ignored so CLI flags that were not given do not erase anything. A
        ``RAGPG_*`` variable that is no setting is reported through ``warn`` (default: the
        ``rag_pg`` logger), since a typo there would otherwise be silently ignored.
        """
        env = loader.environment() if environ is None else environ
        data, path = loader.read_file(config_file, cwd or Path.cwd())
        merged = loader.merge([
            loader.coerce_layer(data, str(path)),
            loader.coerce_layer(loader.from_env(env), "environment"),
            loader.coerce_layer(loader.unflatten(overrides or {}), "flags"),
        ])
        home = loader.home_data_dir(env)
        if home and "data_dir" not in merged.get("database", {}):
            merged.setdefault("database", {})["data_dir"] = home
        for line in loader.unknown_variables(env):
            (warn or log.warning)(line)
        base = cls(config_file=str(path)) if path is not None else cls()
        return base._with(merged)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        return cls.load(environ=environ)

    def with_overrides(self, **dotted: Any) -> Settings:
        """A copy with dotted keys replaced: ``settings.with_overrides(**{"chunk.size": 200})``."""
        return self._with(loader.coerce_layer(loader.unflatten(dotted), "code"))

    def _with(self, layer: Mapping[str, Any]) -> Settings:
        """A copy with a coerced layer applied: each section it touches is built once."""
        changes: dict[str, Any] = {}
        for key, value in layer.items():
            if key in SECTIONS:
                changes[key] = replace(getattr(self, key), **value)
            else:
                changes[key] = value
        return replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("url", "read_url"):
            if data["database"][key]:
                data["database"][key] = redact_url(data["database"][key])
        for holder in (data["server"], *data["server"]["clients"]):
            if holder["token"]:
                holder["token"] = "***"
        if data["rerank"]["api_key"]:
            data["rerank"]["api_key"] = "***"
        embedding = data["embedding"]
        for entry in (embedding, *embedding["providers"]):
            entry.pop("explicit", None)
            if entry["url"]:
                entry["url"] = redact_url(entry["url"])
        return data


def redact_url(url: str) -> str:
    """Hide the password of a URL, so logs and errors never show it.

    A database DSN in any of libpq's forms (``key=value`` words, a ``postgresql://`` URL, a
    password among its query parameters) is parsed by psycopg and rebuilt with the password
    masked; one that does not parse is replaced whole, since its secret cannot be located.
    Other URLs (HTTP services) lose the password of their ``user:password@`` part.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in ("postgresql", "postgres") or (not scheme and "=" in url):
        return _redact_dsn(url)
    if "://" not in url or "@" not in url.split("://", 1)[1].split("/", 1)[0]:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.split("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"


#: What a database DSN is shown as when it cannot be parsed (its password cannot be found).
UNPARSABLE_DSN = "<unparsable database URL>"


def _redact_dsn(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return UNPARSABLE_DSN
    if "://" not in dsn:
        if params.get("password") is not None:
            params["password"] = "***"
        return make_conninfo("", **params)
    # A URL stays a URL (easier to read). Its password may hold characters a URL reserves
    # ('#', '?', '/') that libpq takes as they are: everything between the user's ':' and
    # the last '@' is masked, whatever a URL parser would make of it; then every copy of the
    # password libpq parsed (a password= parameter, the same text elsewhere).
    scheme, rest = dsn.split("://", 1)
    at = rest.rfind("@")
    if at >= 0 and ":" in rest[:at]:
        rest = f"{rest[:at].split(':', 1)[0]}:***{rest[at:]}"
    masked = _PASSWORD_PARAMETER.sub(r"\1***", f"{scheme}://{rest}")
    return mask_secret(masked, str(params.get("password") or ""))


_PASSWORD_PARAMETER = re.compile(r"(?i)([?&]password=)[^&]*")


def mask_secret(text: str, secret: str) -> str:
    """``text`` with every copy of ``secret`` masked, as written and percent-encoded."""
    if not secret:
        return text
    for form in sorted({secret, quote(secret, safe=""), quote(secret), quote_plus(secret)},
                       key=len, reverse=True):
        text = text.replace(form, "***")
    return text
