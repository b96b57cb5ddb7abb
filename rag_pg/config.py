"""Settings: defaults < ragpg.toml (or [tool.ragpg]) < RAGPG_* environment < flags."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

from .errors import ConfigError


@dataclass(frozen=True, slots=True)
class SourceSettings:
    root: str = "."
    included_paths: tuple[str, ...] = ()
    excluded_paths: tuple[str, ...] = ()
    follow_symlinks: bool = False
    max_file_bytes: int = 10 * 1024 * 1024
    language: str = "auto"  # auto | french | english | simple


@dataclass(frozen=True, slots=True)
class ChunkSettings:
    # 300 estimated tokens ~ 225 words ~ 350-450 XLM-R tokens: inside e5-small's 512 window
    # once the "passage: " prefix and the "title › section" context are added.
    size: int = 300
    overlap: int = 45


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    provider: str | None = None  # http | local | none; None = auto
    url: str | None = None
    model: str | None = None
    dimension: int | None = None
    batch_size: int = 32
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    k: int = 5
    mode: str | None = None  # hybrid | vector | keyword; None = hybrid when vectors exist
    candidates: int = 40  # per leg, before fusion
    rrf_k: int = 60


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    url: str | None = None
    schema: str = "ragpg"
    data_dir: str | None = None  # embedded server's folder; default: the user data folder
    pool_size: int = 4
    lock_timeout: float = 60.0  # seconds a second ingest waits for the first one


@dataclass(frozen=True, slots=True)
class ServerSettings:
    token: str | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting ragpg reads; built once by :meth:`load` (CLI) or by hand (library)."""

    source: SourceSettings = field(default_factory=SourceSettings)
    chunk: ChunkSettings = field(default_factory=ChunkSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    collection: str = "default"
    config_file: str | None = None

    @classmethod
    def load(
        cls,
        *,
        config_file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
        cwd: Path | None = None,
    ) -> Settings:
        """Merge defaults, the config file, the environment and ``overrides``.

        ``overrides`` keys are dotted (``"chunk.size"``) and win over everything; ``None``
        values are ignored so CLI flags that were not given do not erase anything.
        """
        env = os.environ if environ is None else environ
        settings = cls()
        data, path = _read_file(config_file, cwd or Path.cwd())
        if path is not None:
            settings = replace(settings, config_file=str(path))
        settings = _apply(settings, data, origin=str(path))
        settings = _apply(settings, _from_env(env), origin="environment")
        flat = {k: v for k, v in (overrides or {}).items() if v is not None}
        settings = _apply(settings, _unflatten(flat), origin="flags")
        settings.validate()
        return settings

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        return cls.load(environ=environ)

    def validate(self) -> None:
        if self.chunk.size <= 0:
            raise ConfigError(f"chunk.size must be > 0 (got {self.chunk.size})")
        if not 0 <= self.chunk.overlap < self.chunk.size:
            raise ConfigError(
                f"chunk.overlap must be >= 0 and < chunk.size (got {self.chunk.overlap}, size {self.chunk.size})"
            )
        if self.embedding.batch_size <= 0:
            raise ConfigError("embedding.batch_size must be > 0")
        if self.embedding.provider not in (None, "http", "local", "none"):
            raise ConfigError(
                f"embedding.provider must be http, local or none (got {self.embedding.provider!r})"
            )
        if self.retrieval.mode not in (None, "hybrid", "vector", "keyword"):
            raise ConfigError(f"retrieval.mode must be hybrid, vector or keyword (got {self.retrieval.mode!r})")
        if not self.collection or len(self.collection) > 200:
            raise ConfigError("collection must be a non-empty name of at most 200 characters")
        if not self.database.schema.replace("_", "").isalnum():
            raise ConfigError(f"database.schema must be a plain identifier (got {self.database.schema!r})")

    def with_overrides(self, **dotted: Any) -> Settings:
        """A copy with dotted keys replaced: ``settings.with_overrides(**{"chunk.size": 200})``."""
        return _apply(self, _unflatten({k: v for k, v in dotted.items() if v is not None}), origin="code")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if data["database"]["url"]:
            data["database"]["url"] = redact_url(data["database"]["url"])
        if data["server"]["token"]:
            data["server"]["token"] = "***"
        return data


SECTIONS: dict[str, type] = {
    "source": SourceSettings,
    "chunk": ChunkSettings,
    "embedding": EmbeddingSettings,
    "retrieval": RetrievalSettings,
    "database": DatabaseSettings,
    "server": ServerSettings,
}


def redact_url(url: str) -> str:
    """Hide the password of a connection URL, so logs and errors never show it."""
    if "://" not in url or "@" not in url.split("://", 1)[1].split("/", 1)[0]:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.split("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"


def _read_file(config_file: str | Path | None, cwd: Path) -> tuple[dict[str, Any], Path | None]:
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        data = _load_toml(path)
        if path.name == "pyproject.toml":
            return data.get("tool", {}).get("ragpg", {}), path
        return data, path
    local = cwd / "ragpg.toml"
    if local.is_file():
        return _load_toml(local), local
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        section = _load_toml(pyproject).get("tool", {}).get("ragpg")
        if isinstance(section, dict):
            return section, pyproject
    return {}, None


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    data: dict[str, dict[str, Any]] = {}
    for section, cls in SECTIONS.items():
        for f in fields(cls):
            name = f"RAGPG_{section.upper()}_{f.name.upper()}"
            if name in env and env[name] != "":
                data.setdefault(section, {})[f.name] = env[name]
    if "url" not in data.get("database", {}) and env.get("DATABASE_URL"):
        data.setdefault("database", {})["url"] = env["DATABASE_URL"]
    out: dict[str, Any] = dict(data)
    if env.get("RAGPG_COLLECTION"):
        out["collection"] = env["RAGPG_COLLECTION"]
    return out


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if "." in key:
            section, name = key.split(".", 1)
            out.setdefault(section, {})[name] = value
        else:
            out[key] = value
    return out


def _apply(settings: Settings, data: Mapping[str, Any], *, origin: str) -> Settings:
    changes: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{origin}: [{key}] must be a table")
            current = getattr(settings, key)
            changes[key] = _apply_section(current, key, value, origin)
        elif key == "collection":
            changes["collection"] = str(value)
        elif key == "embedding_providers":
            continue
        else:
            raise ConfigError(f"{origin}: unknown section or key {key!r}")
    return replace(settings, **changes) if changes else settings


def _apply_section(current: Any, section: str, values: Mapping[str, Any], origin: str) -> Any:
    hints = get_type_hints(type(current))
    known = {f.name for f in fields(current)}
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if section == "embedding" and key == "providers":
            continue  # fallback chain: read by the embedding layer
        if key not in known:
            raise ConfigError(f"{origin}: unknown setting {section}.{key}")
        changes[key] = _coerce(value, hints[key], f"{section}.{key}", origin)
    return replace(current, **changes)


def _coerce(value: Any, hint: Any, name: str, origin: str) -> Any:
    text = str(hint)
    try:
        if value is None:
            return None
        if "tuple" in text:
            if isinstance(value, str):
                return tuple(part.strip() for part in value.split(",") if part.strip())
            if isinstance(value, list | tuple):
                return tuple(str(v) for v in value)
            raise TypeError
        if "bool" in text:
            if isinstance(value, bool):
                return value
            lowered = str(value).strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if "int" in text and "float" not in text:
            if isinstance(value, bool):
                raise TypeError
            return int(value)
        if "float" in text:
            return float(value)
        if isinstance(value, list | dict):
            raise TypeError
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{origin}: {name} has an invalid value {value!r}") from None
