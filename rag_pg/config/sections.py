"""The sections of ragpg's settings, each checked when it is built.

Every section is a frozen dataclass whose ``__post_init__`` rejects values out of bounds with a
:class:`ConfigError` naming the setting, so a section built by hand, by the loader or by
``dataclasses.replace`` is valid or does not exist.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace

from rag_pg.config.citation import check_template
from rag_pg.config.egress import EgressPolicy
from rag_pg.config.principals import DEFAULTS, principals
from rag_pg.errors import ConfigError

FUSIONS = ("rrf", "convex", "adaptive")  # how a search fuses its legs' ranks
# What scores the keyword leg: auto (pg_textsearch when the database has it, else sql), ragpg's
# own BM25 in SQL, or a BM25 extension (rag_pg.store.keyword_engine)
KEYWORD_ENGINES = ("auto", "sql", "pg_textsearch", "pg_search")

EMBEDDING_PROVIDERS: tuple[str, ...] = ("http", "openai", "ollama", "local", "none")
# Keys that shape the whole chain (how texts are split and how long a batch may take): they
# live on [embedding] only, so one [[embedding.providers]] table cannot contradict another.
CHAIN_KEYS: frozenset[str] = frozenset({"batch_tokens", "concurrency", "deadline", "providers"})

# What ragpg accepts as a schema or role name: an unquoted PostgreSQL identifier. Names still
# reach SQL only through psycopg.sql.Identifier; this keeps them readable and under the
# server's 63-byte limit.
ANCHOR_STYLES: tuple[str, ...] = ("github", "vitepress", "mkdocs", "auto")
# The least chunk cap that still holds one line of code between its two fence lines (the
# chunker's own bound, repeated so that a bad setting fails at load).
MIN_MAX_TOKENS = 8

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def check_identifier(value: str, name: str) -> str:
    """``value`` if it is a plain identifier, else a ConfigError naming the setting ``name``."""
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ConfigError(
            f"{name} must be a plain identifier (letters, digits, _; at most 63) (got {value!r})"
        )
    return value


def _require(problems: list[tuple[bool, str]]) -> None:
    for bad, message in problems:
        if bad:
            raise ConfigError(message)


@dataclass(frozen=True, slots=True)
class SourceSettings:
    root: str = "."
    included_paths: tuple[str, ...] = ()
    excluded_paths: tuple[str, ...] = ()
    follow_symlinks: bool = False
    max_file_bytes: int = 10 * 1024 * 1024
    language: str = "auto"  # auto | french | english | simple
    # How headings without an explicit id are slugged: as the site that renders the tree does.
    anchor_style: str = "github"  # github | vitepress | mkdocs | auto (told from the site's config)
    read_hardlinks: bool = False  # a file with several hard links may have its other name outside
    # Extensions read: None = Markdown plus every format whose converter is installed.
    formats: tuple[str, ...] | None = None
    # Converted documents (a PDF manual, a deck) are routinely far larger than a Markdown page.
    max_document_bytes: int = 100 * 1024 * 1024

    def __post_init__(self) -> None:
        _require([
            (self.max_file_bytes <= 0, f"source.max_file_bytes must be > 0 (got {self.max_file_bytes})"),
            (self.max_document_bytes <= 0,
             f"source.max_document_bytes must be > 0 (got {self.max_document_bytes})"),
            (self.anchor_style not in ANCHOR_STYLES,
             f"source.anchor_style must be one of {', '.join(ANCHOR_STYLES)} (got {self.anchor_style!r})"),
        ])
        # source.formats is resolved against the installed converters when a run starts,
        # before any file is read (a format whose library is missing is one line there).


@dataclass(frozen=True, slots=True)
class ChunkSettings:
    # 300 estimated tokens ~ 225 words ~ 350-450 XLM-R tokens: inside e5-small's 512 window
    # once the "passage: " prefix and the "title › section" context are added.
    size: int = 300
    overlap: int = 45
    # Hard cap no chunk passes, in estimated tokens; None = 2 × size (the chunker's default).
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise ConfigError(f"chunk.size must be > 0 (got {self.size})")
        if not 0 <= self.overlap < self.size:
            raise ConfigError(
                f"chunk.overlap must be >= 0 and < chunk.size (got {self.overlap}, size {self.size})"
            )
        if self.max_tokens is not None and self.max_tokens < max(self.size, MIN_MAX_TOKENS):
            raise ConfigError(
                f"chunk.max_tokens must be >= chunk.size ({self.size}) and >= {MIN_MAX_TOKENS}"
                f" (got {self.max_tokens})"
            )


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
    # Hosts and networks an embedding URL may reach; empty: any but link-local and metadata.
    allowed_hosts: tuple[str, ...] = ()
    providers: tuple[EmbeddingSettings, ...] = ()
    # Keys a chain entry set itself (the rest inherit); filled by the config parser.
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        # A parsed chain entry means little alone (it inherits what it does not set): it is
        # checked as a link of its chain, by the [embedding] that holds it.
        if self.explicit:
            return
        EgressPolicy(self.allowed_hosts)  # refuses an entry that is no host, address or network
        _require([
            (self.batch_tokens <= 0, f"embedding.batch_tokens must be > 0 (got {self.batch_tokens})"),
            (not 1 <= self.concurrency <= 64, f"embedding.concurrency must be 1..64 (got {self.concurrency})"),
            (self.deadline <= 0, f"embedding.deadline must be > 0 (got {self.deadline:g})"),
        ])
        if not self.providers:
            _check_link(self, "embedding")
            return
        for n, entry in enumerate(self.providers, start=1):
            if entry.provider == "none":
                raise ConfigError(f"embedding.providers[{n}].provider = none cannot be part of a chain")
        self.links()

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
        for n, entry in enumerate(self.providers, start=1):
            own = entry.explicit or {
                f.name for f in fields(entry)
                if f.name not in ("explicit", "providers")
                and getattr(entry, f.name) != getattr(defaults, f.name)
            }
            try:
                out.append(replace(base, **{k: getattr(entry, k) for k in own if k not in CHAIN_KEYS}))
            except ConfigError as exc:
                # The link's own check names it "embedding.": name its place in the chain.
                raise ConfigError(
                    str(exc).replace("embedding.", f"embedding.providers[{n}].", 1)
                ) from None
        return tuple(out)


def _check_link(link: EmbeddingSettings, name: str) -> None:
    """Bounds of one provider's settings (alone, or completed as a link of a chain)."""
    if link.provider not in (None, *EMBEDDING_PROVIDERS):
        raise ConfigError(
            f"{name}.provider must be one of {', '.join(EMBEDDING_PROVIDERS)} (got {link.provider!r})"
        )
    _require([
        (link.batch_size <= 0, f"{name}.batch_size must be > 0"),
        (link.timeout <= 0, f"{name}.timeout must be > 0 (got {link.timeout:g})"),
        (link.dimension is not None and link.dimension <= 0,
         f"{name}.dimension must be > 0 (got {link.dimension})"),
        (link.attempts < 1, f"{name}.attempts must be >= 1 (got {link.attempts})"),
        (link.backoff < 0 or link.backoff_max < 0 or link.cooldown < 0,
         f"{name}.backoff, backoff_max and cooldown must be >= 0"),
        (link.send_dimensions and (link.provider != "openai" or link.dimension is None),
         f"{name}.send_dimensions needs provider = openai and a dimension"),
        (link.api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", link.api_key_env),
         f"{name}.api_key_env must be the NAME of an environment variable, not a key"),
    ])


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    k: int = 5
    mode: str | None = None  # hybrid | vector | keyword; None = hybrid when vectors exist
    candidates: int = 40  # per leg, before fusion
    rrf_k: int = 60
    fusion: str = "adaptive"  # adaptive (convex, each leg weighed per query by its
    # decisiveness) | convex (normalised leg scores) | rrf (ranks): rag_pg.search.fuse
    vector_weight: float = 1.0  # weighted RRF: weight / (rrf_k + rank) per leg
    keyword_weight: float = 1.0
    bm25_k1: float = 1.2  # BM25 term-frequency saturation
    bm25_b: float = 0.75  # BM25 length normalisation (0 = none, 1 = full)
    ef_search: int = 200  # hnsw.ef_search: recall@10 0.95 at 1M chunks (bench/results/scale.md)
    iterative_scan: str = "relaxed_order"  # hnsw.iterative_scan: relaxed_order | strict_order | off
    max_scan_tuples: int = 50000  # hnsw.max_scan_tuples for filtered searches
    exact_limit: int = 5000  # exact (no index) vector search when filters leave <= this many chunks
    # ... or at most this share of a large collection's chunks (in at most exact_limit
    # documents): a filtered HNSW scan walks about 1/share more of the graph for its rows
    exact_share: float = 0.02
    # Hits of one section (a document's heading) a result may hold, after fusion: a section's
    # several chunks would otherwise fill the list where a reader wants k places (0: no cap).
    max_per_section: int = 1
    keyword_engine: str = "auto"  # auto | sql | pg_textsearch | pg_search (KEYWORD_ENGINES)

    def __post_init__(self) -> None:
        _require([
            (self.keyword_engine not in KEYWORD_ENGINES,
             f"retrieval.keyword_engine must be one of {', '.join(KEYWORD_ENGINES)}"
             f" (got {self.keyword_engine!r})"),
            (self.keyword_engine == "pg_search",
             "retrieval.keyword_engine = 'pg_search' is not supported: pg_search keeps one BM25"
             " index per table, so its statistics would span every collection and language"
             " (use 'pg_textsearch', 'auto' or 'sql')"),
            (self.max_per_section < 0,
             f"retrieval.max_per_section must be >= 0 (got {self.max_per_section})"),
            (self.mode not in (None, "hybrid", "vector", "keyword"),
             f"retrieval.mode must be hybrid, vector or keyword (got {self.mode!r})"),
            (self.fusion not in FUSIONS,
             f"retrieval.fusion must be one of {', '.join(FUSIONS)} (got {self.fusion!r})"),
            (self.vector_weight < 0 or self.keyword_weight < 0,
             "retrieval.vector_weight/keyword_weight must be >= 0"),
            (not 0 <= self.bm25_b <= 1, f"retrieval.bm25_b must be between 0 and 1 (got {self.bm25_b})"),
            (self.bm25_k1 < 0, f"retrieval.bm25_k1 must be >= 0 (got {self.bm25_k1})"),
            (self.candidates <= 0 or self.rrf_k < 0,
             "retrieval.candidates must be > 0 and retrieval.rrf_k >= 0"),
            (self.iterative_scan not in ("relaxed_order", "strict_order", "off"),
             "retrieval.iterative_scan must be relaxed_order, strict_order or off"
             f" (got {self.iterative_scan!r})"),
            (self.ef_search <= 0 or self.max_scan_tuples <= 0 or self.exact_limit < 0,
             "retrieval.ef_search and max_scan_tuples must be > 0, exact_limit >= 0"),
            (not 0 <= self.exact_share <= 1,
             f"retrieval.exact_share must be between 0 and 1 (got {self.exact_share})"),
        ])


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """How each model's HNSW index is built (read when it is created: a first ingest, a
    reembed). An existing index keeps its parameters; searches follow the index they find."""

    hnsw_m: int = 16  # graph degree: higher = better recall, bigger index, slower build
    hnsw_ef_construction: int = 64  # build-time candidate list: higher = better graph, slower build
    vector_type: str = "vector"  # vector | halfvec (index on 16-bit floats: half the size)
    build_memory: str = "1GB"  # maintenance_work_mem for the build: a graph that fits builds fast

    def __post_init__(self) -> None:
        _require([
            (self.vector_type not in ("vector", "halfvec"),
             f"index.vector_type must be vector or halfvec (got {self.vector_type!r})"),
            (not 2 <= self.hnsw_m <= 100, f"index.hnsw_m must be between 2 and 100 (got {self.hnsw_m})"),
            (not 4 <= self.hnsw_ef_construction <= 1000 or self.hnsw_ef_construction < 2 * self.hnsw_m,
             "index.hnsw_ef_construction must be between 4 and 1000 and at least"
             f" 2 × hnsw_m (got {self.hnsw_ef_construction})"),
            (not re.fullmatch(r"\d+\s*(kB|MB|GB|TB)", self.build_memory.strip()),
             f"index.build_memory must be like 512MB or 2GB (got {self.build_memory!r})"),
        ])


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
    # Confidence bands on the rerank score; cross-encoders answer raw logits, so the bands
    # are logits too (below -4: the passage very likely does not answer).
    abstain_below: float = -4.0
    caution_below: float = 0.0

    def __post_init__(self) -> None:
        _require([
            (self.api not in ("tei", "jina", "cohere"),
             f"rerank.api must be tei, jina or cohere (got {self.api!r})"),
            (self.top_n <= 0, f"rerank.top_n must be > 0 (got {self.top_n})"),
            (self.abstain_below > self.caution_below,
             f"rerank.abstain_below ({self.abstain_below}) must be <= rerank.caution_below"
             f" ({self.caution_below})"),
        ])


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    url: str | None = None
    # A streaming replica for the read-only operations (searches, stats, the service's reads);
    # writes, migrations and the ingest lock stay on `url` (rag_pg.store.replica).
    read_url: str | None = None
    schema: str = "ragpg"
    data_dir: str | None = None  # embedded server's folder; default: the user data folder
    pool_size: int = 4
    lock_timeout: float = 60.0  # seconds a second ingest waits for the first one
    # Seconds to establish a connection (libpq's connect_timeout, and the pool's wait for one):
    # a down or unreachable server is reported quickly rather than after minutes.
    connect_timeout: float = 5.0
    # Seconds one database call may wait for the server before ragpg cancels it and closes the
    # connection: a frozen server ends the command instead of hanging it (0: no limit).
    call_timeout: float = 300.0
    # How `ragpg init` spreads the index over a Citus cluster (rag_pg.store.distribution):
    # "collection" (each collection on one worker) or "document" (each collection's documents
    # spread over every worker). Unset: "collection" where the database has the citus
    # extension, nothing elsewhere; set on a database without Citus: an error.
    distribution: str | None = None
    # Shards of each distributed table when `ragpg init` first distributes them (unset:
    # Citus's citus.shard_count, 32). By document, every search step reads every shard: fewer
    # shards are fewer tasks per step (docs/scaling.md, section 3.5); keep at least as many as
    # the workers the cluster may grow to.
    shard_count: int | None = None

    def __post_init__(self) -> None:
        check_identifier(self.schema, "database.schema")
        _require([
            (self.distribution not in (None, "collection", "document"),
             f"database.distribution must be collection or document (got {self.distribution!r})"),
            (self.shard_count is not None and self.shard_count < 1,
             f"database.shard_count must be >= 1 (got {self.shard_count})"),
            (self.pool_size < 1, f"database.pool_size must be >= 1 (got {self.pool_size})"),
            (self.connect_timeout <= 0,
             f"database.connect_timeout must be > 0 (got {self.connect_timeout:g})"),
            (self.lock_timeout < 0, f"database.lock_timeout must be >= 0 (got {self.lock_timeout:g})"),
            (self.call_timeout < 0, f"database.call_timeout must be >= 0 (got {self.call_timeout:g})"),
        ])


@dataclass(frozen=True, slots=True)
class ServerClient:
    """``[[server.clients]]``: one caller of the service, known by its bearer token, and who it
    reads as (a request never chooses its tenant or principals; its token does)."""

    name: str
    # The variable holding the token (kept out of the configuration file), or the token.
    token_env: str | None = None
    token: str | None = None
    tenant: str | None = None  # None: tenancy.tenant
    principals: tuple[str, ...] | None = None  # None: permissions.principals

    def __post_init__(self) -> None:
        where = f"server.clients[{self.name!r}]"
        _require([
            (not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 100,
             "server.clients: each client needs a name of at most 100 characters"),
            ((self.token_env is None) == (self.token is None),
             f"{where}: give exactly one of token_env and token"),
            (self.tenant is not None and (not isinstance(self.tenant, str) or not self.tenant.strip()
                                          or len(self.tenant) > 200),
             f"{where}: tenant must be a non-empty name of at most 200 characters"),
        ])
        if self.principals is not None:
            object.__setattr__(self, "principals", principals(self.principals, f"{where}.principals"))


@dataclass(frozen=True, slots=True)
class ServerSettings:
    token: str | None = None  # bearer token of `ragpg serve`; required to bind off loopback
    # More callers, each with its own token, tenant and principals (rag_pg.serve.auth).
    clients: tuple[ServerClient, ...] = ()
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
    temperature: float = 0.3  # low: answers should stay close to the cited sources
    max_tokens: int = 2048
    timeout: float = 120.0


@dataclass(frozen=True, slots=True)
class ContextSettings:
    """The citable context block: token budget, language and overridable prompt templates."""

    budget: int = 4000  # estimated tokens for the whole block (sources + instructions + question)
    lang: str | None = None  # fr | en; None = guessed from the question
    template_fr: str | None = None  # path of a template with $sources and $question
    template_en: str | None = None
    # A source holding prompt-injection patterns: "mark" it in its header, or "withhold" it.
    flagged: str = "mark"

    def __post_init__(self) -> None:
        if self.flagged not in ("mark", "withhold"):
            raise ConfigError(f"context.flagged must be mark or withhold (got {self.flagged!r})")


@dataclass(frozen=True, slots=True)
class CitationSettings:
    """``[citation]``: the site URL of a hit, from a template (``{path}``, ``{path_noext}``,
    ``{anchor}``, ``{page}``); checked here, so a typo fails at load and not on every hit."""

    url: str | None = None

    def __post_init__(self) -> None:
        if self.url is None:
            return
        try:
            check_template(self.url)
        except ValueError as error:
            raise ConfigError(f"citation.url: {error}") from None


@dataclass(frozen=True, slots=True)
class ConvertSettings:
    """``[convert]``: limits of the worker process that converts one PDF, DOCX, ... file."""

    time_limit: float = 30.0  # seconds one file may take to convert
    memory_limit_mb: int = 1024  # address space of the worker

    def __post_init__(self) -> None:
        _require([
            (self.time_limit <= 0, f"convert.time_limit must be > 0 (got {self.time_limit:g})"),
            (self.memory_limit_mb <= 0, f"convert.memory_limit_mb must be > 0 (got {self.memory_limit_mb})"),
        ])


@dataclass(frozen=True, slots=True)
class EmbeddedSettings:
    """``[embedded]``: the private server as a team's database (``ragpg db start``)."""

    # host:port to accept TCP connections on (SCRAM passwords only); None = the Unix socket only.
    listen: str | None = None
    # NAME of the environment variable holding the superuser's password; None = a generated
    # one, kept in a 0600 file of the data folder.
    password_env: str | None = None

    def __post_init__(self) -> None:
        if self.listen is not None:
            listen_address(self.listen)
        _require([
            (self.password_env is not None
             and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.password_env),
             "embedded.password_env must be the NAME of an environment variable, not a password"),
        ])


# What a reader role gets unless told otherwise (``ragpg roles create-reader``): a runaway
# dashboard query is cancelled, and a BI tool cannot take every connection.
READER_STATEMENT_TIMEOUT = "30s"
READER_CONNECTION_LIMIT = 10


@dataclass(frozen=True, slots=True)
class TenancySettings:
    """``[tenancy]``: tenants isolated by row-level security (docs/tenancy.md)."""

    enabled: bool = False  # `ragpg init` installs the tenant policies; every transaction names its tenant
    tenant: str | None = None  # the tenant ragpg acts for when a call names none (CLI, service)

    def __post_init__(self) -> None:
        _require([
            (not isinstance(self.enabled, bool), "tenancy.enabled must be true or false"),
            (self.tenant is not None and (not isinstance(self.tenant, str)
                                          or not self.tenant.strip() or len(self.tenant) > 200),
             "tenancy.tenant must be a non-empty name of at most 200 characters"),
            (self.tenant is not None and not self.enabled,
             "tenancy.tenant is set but tenancy.enabled is false: enable tenancy or drop the tenant"),
        ])


@dataclass(frozen=True, slots=True)
class PermissionsSettings:
    """``[permissions]``: who may read each document, enforced by row-level security
    (docs/permissions.md)."""

    enabled: bool = False  # `ragpg init` installs the reader policies
    # The readers of a document that neither its front matter nor .ragpg-access names:
    # "everyone" (who may read the collection) or "nobody" (deny by default).
    default: str = "everyone"
    # The principals ragpg acts as when a call names none (the CLI's --as, the service):
    # unset, an administrator's connection reads every document.
    principals: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _require([
            (not isinstance(self.enabled, bool), "permissions.enabled must be true or false"),
            (self.default not in DEFAULTS,
             f"permissions.default must be everyone or nobody (got {self.default!r})"),
        ])
        if self.principals is not None:
            object.__setattr__(self, "principals", principals(self.principals,
                                                              "permissions.principals"))


def listen_address(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:5433`` for IPv6) -> (host, port), else a ConfigError."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^:\s\[\]]+):(\d{1,5})", value.strip())
    port = int(match.group(2) or match.group(4)) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise ConfigError(f"embedded.listen must be host:port, e.g. 127.0.0.1:5433 (got {value!r})")
    return (match.group(1) or match.group(3)), port


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
    "citation": CitationSettings,
    "convert": ConvertSettings,
    "embedded": EmbeddedSettings,
    "tenancy": TenancySettings,
    "permissions": PermissionsSettings,
}
