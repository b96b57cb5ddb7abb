"""Settings: defaults < ragpg.toml (or [tool.ragpg]) < RAGPG_* environment < flags.

``sections`` holds one checked dataclass per ``[section]``, ``loader`` reads the file and the
environment (the only place ragpg does), ``settings`` puts them together.
"""

from rag_pg.config.loader import client_token, env_secret
from rag_pg.config.sections import (
    CHAIN_KEYS,
    EMBEDDING_PROVIDERS,
    SECTIONS,
    ChunkSettings,
    CitationSettings,
    ContextSettings,
    ConvertSettings,
    DatabaseSettings,
    EmbeddingSettings,
    IndexSettings,
    LLMSettings,
    RerankSettings,
    RetrievalSettings,
    ServerSettings,
    SourceSettings,
    check_identifier,
)
from rag_pg.config.settings import Settings, redact_url

__all__ = [
    "CHAIN_KEYS",
    "EMBEDDING_PROVIDERS",
    "SECTIONS",
    "ChunkSettings",
    "CitationSettings",
    "ContextSettings",
    "ConvertSettings",
    "DatabaseSettings",
    "EmbeddingSettings",
    "IndexSettings",
    "LLMSettings",
    "RerankSettings",
    "RetrievalSettings",
    "ServerSettings",
    "Settings",
    "SourceSettings",
    "check_identifier",
    "client_token",
    "env_secret",
    "redact_url",
]
