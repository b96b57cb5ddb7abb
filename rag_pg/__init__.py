"""ragpg: hybrid retrieval for RAG on PostgreSQL (pgvector + keywords), with provenance.

Library use::

    import rag_pg
    with rag_pg.RagPG("postgresql://localhost/app") as rag:
        rag.init()
        rag.ingest("docs/")
        for hit in rag.search("comment configurer le proxy ?", k=5):
            print(hit.path, hit.chunk.anchor, hit.score)
"""

from .api import RagPG
from .config import Settings
from .errors import (
    ConfigError,
    DimensionMismatch,
    DocumentError,
    EmbeddingError,
    ExtensionUnavailable,
    IngestBusy,
    RagError,
    SchemaMissing,
    StoreError,
)
from .models import Chunk, Document, Hit, IngestReport

__version__ = "0.1.0"

__all__ = [
    "Chunk",
    "ConfigError",
    "DimensionMismatch",
    "Document",
    "DocumentError",
    "EmbeddingError",
    "ExtensionUnavailable",
    "Hit",
    "IngestBusy",
    "IngestReport",
    "RagError",
    "RagPG",
    "SchemaMissing",
    "Settings",
    "StoreError",
    "__version__",
]
