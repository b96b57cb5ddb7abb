"""Settings: defaults < ragpg.toml (or [tool.ragpg]) < RAGPG_* environment < flags."""

from __future__ import annotations

import dataclasses
import os
import re
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


EMBEDDING_PROVIDERS: tuple[str, ...] = ("http", "openai", "ollama", "local", "none")
# Keys that shape the whole chain (how texts are split and how long a batch may take): they
# live on [embedding] only, so one [[embedding.providers]] table cannot contradict another.
CHAIN_KEYS: frozenset[str] = frozenset({"batch_tokens", "concurrency", "deadline", "providers"})


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    """``[embedding]``: one provider (the simple case) or, with ``providers``, an ordered chain.

    Each ``[[embedding.providers]]`` table takes the same keys; a key it does not set is
    inherited from ``[embedding]`` whatever set it (file, ``RAGPG_EMBEDDING_*``, flags), so
    ``model`` or ``timeout`` is written once for the whole chain. The API key is never a
    setting: ``api_key_env`` names the environment variable that holds it.
    """

    provider: str | None = None  # http | openai | ollama | local | none; None = auto
    url: str | None = None
    model: str | None = None
    dimension: int | None = None
    batch_size: int = 32  # texts per request (per provider in a chain: its own cap)
    timeout: float = 30.0  # seconds per request
    api_key_env: str | None = None  # NAME of the environment variable holding the API key
    send_dimensions: bool = False  # openai: send `dimensions` = dimension (shortened vectors)
    query_prefix: str = ""  # openai/ollama: prepended to queries ("query: " for e5 models)
    passage_prefix: str = ""  # openai/ollama: prepended to passages ("passage: " for e5)
    attempts: int = 3  # tries per provider and batch when it is unavailable
    backoff: float = 0.5  # first retry delay (seconds), doubled each time, with jitter
    backoff_max: float = 8.0  # cap of one retry delay (Retry-After may ask for more)
    cooldown: float = 30.0  # seconds a provider that exhausted its attempts is skipped
    batch_tokens: int = 8192  # estimated tokens per request (chain-wide)
    concurrency: int = 4  # requests in flight (chain-wide)
    deadline: float = 120.0  # seconds one batch may take across retries and fallbacks
    providers: tuple[EmbeddingSettings, ...] = ()
    # Keys a chain entry set itself (the rest inherit); filled by the config parser.
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def links(self) -> tuple[EmbeddingSettings, ...]:
        """The chain, in order, each entry completed with what it inherits from ``[embedding]``.

        An entry built in code (no parser to record its keys) inherits every key it leaves
        at the default value.
        """
        if not self.providers:
            return (self,)
        base = replace(self, providers=(), explicit=frozenset())
        defaults = EmbeddingSettings()
        out = []
        for entry in self.providers:
            own = entry.explicit or {
                f.name for f in fields(entry)
                if f.name not in ("explicit", "providers")
                and getattr(entry, f.name) != getattr(defaults, f.name)
            }
            out.append(replace(base, **{k: getattr(entry, k) for k in own if k not in CHAIN_KEYS}))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    k: int = 5
    mode: str | None = None  # hybrid | vector | keyword; None = hybrid when vectors exist
    candidates: int = 40  # per leg, before fusion
    rrf_k: int = 60
    vector_weight: float = 1.0  # weighted RRF: weight / (rrf_k + rank) per leg
    keyword_weight: float = 1.0
    bm25_k1: float = 1.2  # BM25 term-frequency saturation
    bm25_b: float = 0.75  # BM25 length normalisation (0 = none, 1 = full)
    ef_search: int = 200  # hnsw.ef_search: recall@10 0.95 at 1M chunks (bench/results/scale.md)
    iterative_scan: str = "relaxed_order"  # hnsw.iterative_scan: relaxed_order | strict_order | off
    max_scan_tuples: int = 50000  # hnsw.max_scan_tuples for filtered searches
    exact_limit: int = 5000  # exact (no index) vector search when filters leave <= this many chunks


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """How each model's HNSW index is built (read when it is created: a first ingest, a
    reembed). An existing index keeps its parameters; searches follow the index they find."""

    hnsw_m: int = 16  # graph degree: higher = better recall, bigger index, slower build
    hnsw_ef_construction: int = 64  # build-time candidate list: higher = better graph, slower build
    vector_type: str = "vector"  # vector | halfvec (index on 16-bit floats: half the size)
    build_memory: str = "1GB"  # maintenance_work_mem for the build: a graph that fits builds fast


@dataclass(frozen=True, slots=True)
class RerankSettings:
    """Optional cross-encoder stage behind an HTTP rerank API (TEI, Jina or Cohere shape)."""

    enabled: bool = False  # rerank every search unless search(rerank=False)
    url: str | None = None  # e.g. http://localhost:8080 (TEI) or https://api.jina.ai (POST {url}/rerank or /v1/rerank)
    api: str = "tei"  # tei | jina | cohere: request and response shape
    model: str | None = None
    api_key: str | None = None
    top_n: int = 20  # fused candidates sent to the reranker (at least k)
    timeout: float = 30.0
    abstain_below: float = -4.0  # confidence bands on the rerank score (seed 003: raw logits)
    caution_below: float = 0.0


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    url: str | None = None
    schema: str = "ragpg"
    data_dir: str | None = None  # embedded server's folder; default: the user data folder
    pool_size: int = 4
    lock_timeout: float = 60.0  # seconds a second ingest waits for the first one


@dataclass(frozen=True, slots=True)
class ServerSettings:
    token: str | None = None  # bearer token of `ragpg serve`; required to bind off loopback
    max_body_bytes: int = 64 * 1024  # HTTP request bodies above this get 413 before parsing
    max_query_chars: int = 4096  # longer queries get 422 (HTTP) or a tool error (MCP)
    max_k: int = 100  # most hits one request may ask for
    request_timeout: float = 30.0  # seconds before a request is answered 504


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """An OpenAI-compatible chat endpoint for `ask` and `summarize`; nothing is sent without url+model."""

    url: str | None = None  # base URL (.../v1) or the full .../chat/completions URL
    model: str | None = None
    api_key_env: str | None = None  # the NAME of the environment variable holding the key
    temperature: float = 0.3  # low, for factual answers (seed 002)
    max_tokens: int = 2048
    timeout: float = 120.0


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """The citable context block: token budget, language and overridable prompt templates."""

    budget: int = 4000  # estimated tokens for the whole block (sources + instructions + question)
    lang: str | None = None  # fr | en; None = guessed from the question
    template_fr: str | None = None  # path of a template with $sources and $question
    template_en: str | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting ragpg reads; built once by :meth:`load` (CLI) or by hand (library)."""

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
        _validate_embedding(self.embedding)
        if self.retrieval.mode not in (None, "hybrid", "vector", "keyword"):
            raise ConfigError(f"retrieval.mode must be hybrid, vector or keyword (got {self.retrieval.mode!r})")
        _validate_retrieval(self.retrieval, self.rerank)
        _validate_index(self.index)
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
        if data["rerank"]["api_key"]:
            data["rerank"]["api_key"] = "***"
        embedding = data["embedding"]
        for entry in (embedding, *embedding["providers"]):
            entry.pop("explicit", None)
            if entry["url"]:
                entry["url"] = redact_url(entry["url"])
        return data


SECTIONS: dict[str, type] = {
    "source": SourceSettings,
    "chunk": ChunkSettings,
    "embedding": EmbeddingSettings,
    "retrieval": RetrievalSettings,
    "index": IndexSettings,
    "rerank": RerankSettings,
    "database": DatabaseSettings,
    "server": ServerSettings,
    "llm": LLMSettings,
    "context": ContextSettings,
}


def _validate_index(i: IndexSettings) -> None:
    if i.vector_type not in ("vector", "halfvec"):
        raise ConfigError(f"index.vector_type must be vector or halfvec (got {i.vector_type!r})")
    if not 2 <= i.hnsw_m <= 100:
        raise ConfigError(f"index.hnsw_m must be between 2 and 100 (got {i.hnsw_m})")
    if not 4 <= i.hnsw_ef_construction <= 1000 or i.hnsw_ef_construction < 2 * i.hnsw_m:
        raise ConfigError("index.hnsw_ef_construction must be between 4 and 1000 and at least"
                          f" 2 × hnsw_m (got {i.hnsw_ef_construction})")
    if not re.fullmatch(r"\d+\s*(kB|MB|GB|TB)", i.build_memory.strip()):
        raise ConfigError(f"index.build_memory must be like 512MB or 2GB (got {i.build_memory!r})")


def _validate_retrieval(r: RetrievalSettings, rr: RerankSettings) -> None:
    """Retrieval and rerank bounds, named by their setting."""
    problems = [
        (r.vector_weight < 0 or r.keyword_weight < 0, "retrieval.vector_weight/keyword_weight must be >= 0"),
        (not 0 <= r.bm25_b <= 1, f"retrieval.bm25_b must be between 0 and 1 (got {r.bm25_b})"),
        (r.bm25_k1 < 0, f"retrieval.bm25_k1 must be >= 0 (got {r.bm25_k1})"),
        (r.candidates <= 0 or r.rrf_k < 0, "retrieval.candidates must be > 0 and retrieval.rrf_k >= 0"),
        (r.iterative_scan not in ("relaxed_order", "strict_order", "off"),
         f"retrieval.iterative_scan must be relaxed_order, strict_order or off (got {r.iterative_scan!r})"),
        (r.ef_search <= 0 or r.max_scan_tuples <= 0 or r.exact_limit < 0,
         "retrieval.ef_search and max_scan_tuples must be > 0, exact_limit >= 0"),
        (rr.api not in ("tei", "jina", "cohere"), f"rerank.api must be tei, jina or cohere (got {rr.api!r})"),
        (rr.top_n <= 0, f"rerank.top_n must be > 0 (got {rr.top_n})"),
        (rr.abstain_below > rr.caution_below,
         f"rerank.abstain_below ({rr.abstain_below}) must be <= rerank.caution_below ({rr.caution_below})"),
    ]
    for bad, message in problems:
        if bad:
            raise ConfigError(message)


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
            changes[key] = _parse_chain(value, origin)
            continue
        if section == "embedding" and key == "explicit":
            known = known - {"explicit"}  # bookkeeping of the parser, not a setting
        if key not in known:
            raise ConfigError(f"{origin}: unknown setting {section}.{key}")
        changes[key] = _coerce(value, hints[key], f"{section}.{key}", origin)
    return replace(current, **changes)


def _parse_chain(value: Any, origin: str) -> tuple[EmbeddingSettings, ...]:
    """``[[embedding.providers]]`` tables (or RAGPG_EMBEDDING_PROVIDERS as a JSON list of them)."""
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise ConfigError(
                f"{origin}: embedding.providers must be a JSON list of tables"
            ) from None
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{origin}: embedding.providers must be a list of tables")
    hints = get_type_hints(EmbeddingSettings)
    settable = {f.name for f in fields(EmbeddingSettings)} - {"explicit"}
    entries: list[EmbeddingSettings] = []
    for n, table in enumerate(value, start=1):
        name = f"embedding.providers[{n}]"
        if isinstance(table, EmbeddingSettings):
            entries.append(table)
            continue
        if not isinstance(table, Mapping):
            raise ConfigError(f"{origin}: {name} must be a table")
        values: dict[str, Any] = {}
        for key, raw in table.items():
            if key not in settable:
                raise ConfigError(f"{origin}: unknown setting {name}.{key}")
            if key in CHAIN_KEYS:
                raise ConfigError(
                    f"{origin}: {name}.{key} applies to the whole chain: set embedding.{key}"
                )
            values[key] = _coerce(raw, hints[key], f"{name}.{key}", origin)
        entries.append(EmbeddingSettings(**values, explicit=frozenset(values)))
    return tuple(entries)


def _validate_embedding(e: EmbeddingSettings) -> None:
    """Bounds of [embedding] and of every chain entry (named by its position)."""
    links = e.links()
    named = [("embedding", e)] if not e.providers else [
        (f"embedding.providers[{n}]", link) for n, link in enumerate(links, start=1)
    ]
    if e.batch_tokens <= 0:
        raise ConfigError(f"embedding.batch_tokens must be > 0 (got {e.batch_tokens})")
    if not 1 <= e.concurrency <= 64:
        raise ConfigError(f"embedding.concurrency must be 1..64 (got {e.concurrency})")
    if e.deadline <= 0:
        raise ConfigError(f"embedding.deadline must be > 0 (got {e.deadline:g})")
    for name, link in named:
        if link.provider not in (None, *EMBEDDING_PROVIDERS):
            raise ConfigError(
                f"{name}.provider must be one of {', '.join(EMBEDDING_PROVIDERS)}"
                f" (got {link.provider!r})"
            )
        if e.providers and link.provider == "none":
            raise ConfigError(f"{name}.provider = none cannot be part of a chain")
        if link.batch_size <= 0:
            raise ConfigError(f"{name}.batch_size must be > 0")
        if link.timeout <= 0:
            raise ConfigError(f"{name}.timeout must be > 0 (got {link.timeout:g})")
        if link.dimension is not None and link.dimension <= 0:
            raise ConfigError(f"{name}.dimension must be > 0 (got {link.dimension})")
        if link.attempts < 1:
            raise ConfigError(f"{name}.attempts must be >= 1 (got {link.attempts})")
        if link.backoff < 0 or link.backoff_max < 0 or link.cooldown < 0:
            raise ConfigError(f"{name}.backoff, backoff_max and cooldown must be >= 0")
        if link.send_dimensions and (link.provider != "openai" or link.dimension is None):
            raise ConfigError(f"{name}.send_dimensions needs provider = openai and a dimension")
        if link.api_key_env is not None and not link.api_key_env.replace("_", "").isalnum():
            raise ConfigError(
                f"{name}.api_key_env must be the NAME of an environment variable, not a key"
            )


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
