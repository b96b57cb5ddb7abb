"""ragpg: hybrid retrieval for RAG on PostgreSQL (pgvector + keywords), with provenance.

Library use::

    import rag_pg
    with rag_pg.RagPG("postgresql://localhost/app") as rag:
        rag.init()
        rag.ingest("docs/")
        for hit in rag.search("comment configurer le proxy ?", k=5):
            print(hit.path, hit.chunk.anchor, hit.score)
"""

from rag_pg.api import RagPG, upgrade_schema
from rag_pg.config import Settings
from rag_pg.embed import make_provider
from rag_pg.embed.base import EmbeddingProvider, ProviderUnavailable
from rag_pg.errors import (
    CollectionNotFound,
    ConfigError,
    DatabaseTimeout,
    DimensionMismatch,
    DocumentError,
    EmbeddingError,
    ExtensionUnavailable,
    IngestBusy,
    LLMError,
    NoVectors,
    RagError,
    RerankError,
    SchemaMissing,
    SidecarError,
    StoreError,
)
from rag_pg.models import (
    Chunk,
    ChunkRecord,
    Document,
    DocumentRecord,
    Hit,
    IngestReport,
    ModelVectors,
    RunSummary,
    Stats,
)
from rag_pg.search.locate import LegPosition, Location
from rag_pg.search.plan import Expansion, Mode
from rag_pg.source.convert.base import ConversionError
from rag_pg.store.db import Database

__version__ = "0.1.0"

__all__ = [
    "Chunk",
    "ChunkRecord",
    "CollectionNotFound",
    "ConfigError",
    "ConversionError",
    "Database",
    "DatabaseTimeout",
    "DimensionMismatch",
    "Document",
    "DocumentError",
    "DocumentRecord",
    "EmbeddingError",
    "EmbeddingProvider",
    "Expansion",
    "ExtensionUnavailable",
    "Hit",
    "IngestBusy",
    "IngestReport",
    "LLMError",
    "LegPosition",
    "Location",
    "Mode",
    "ModelVectors",
    "NoVectors",
    "ProviderUnavailable",
    "RagError",
    "RagPG",
    "RerankError",
    "RunSummary",
    "SchemaMissing",
    "Settings",
    "SidecarError",
    "Stats",
    "StoreError",
    "__version__",
    "make_provider",
    "upgrade_schema",
]
