"""ragpg: hybrid retrieval for RAG on PostgreSQL (pgvector + keywords), with provenance.

Library use::

    import rag_pg
    with rag_pg.RagPG("postgresql://localhost/app") as rag:
        rag.init()
        rag.ingest("docs/")
        for hit in rag.search("comment configurer le proxy ?", k=5):
            print(hit.path, hit.chunk.anchor, hit.score)
"""

import importlib as _importlib
import typing as _typing

# The public names load on first use (PEP 562): `import rag_pg.cli` for `ragpg --help` must not
# import the database driver, the HTTP client and the parser that RagPG brings.
if _typing.TYPE_CHECKING:
    from rag_pg.api import RagPG, upgrade_schema
    from rag_pg.config import Settings
    from rag_pg.embed import make_provider
    from rag_pg.embed.base import EmbeddingProvider, ProviderUnavailable
    from rag_pg.errors import (
        CollectionNotFound,
        ConfigError,
        ConnectionLost,
        DatabaseRefused,
        DatabaseTimeout,
        DimensionMismatch,
        DocumentError,
        EmbeddingBusy,
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

#: Where each public name is defined.
_SOURCES: dict[str, str] = {
    "Chunk": "rag_pg.models",
    "ChunkRecord": "rag_pg.models",
    "CollectionNotFound": "rag_pg.errors",
    "ConfigError": "rag_pg.errors",
    "EmbeddingBusy": "rag_pg.errors",
    "DatabaseRefused": "rag_pg.errors",
    "ConnectionLost": "rag_pg.errors",
    "ConversionError": "rag_pg.source.convert.base",
    "Database": "rag_pg.store.db",
    "DatabaseTimeout": "rag_pg.errors",
    "DimensionMismatch": "rag_pg.errors",
    "Document": "rag_pg.models",
    "DocumentError": "rag_pg.errors",
    "DocumentRecord": "rag_pg.models",
    "EmbeddingError": "rag_pg.errors",
    "EmbeddingProvider": "rag_pg.embed.base",
    "Expansion": "rag_pg.search.plan",
    "ExtensionUnavailable": "rag_pg.errors",
    "Hit": "rag_pg.models",
    "IngestBusy": "rag_pg.errors",
    "IngestReport": "rag_pg.models",
    "LLMError": "rag_pg.errors",
    "LegPosition": "rag_pg.search.locate",
    "Location": "rag_pg.search.locate",
    "Mode": "rag_pg.search.plan",
    "ModelVectors": "rag_pg.models",
    "NoVectors": "rag_pg.errors",
    "ProviderUnavailable": "rag_pg.embed.base",
    "RagError": "rag_pg.errors",
    "RagPG": "rag_pg.api",
    "RerankError": "rag_pg.errors",
    "RunSummary": "rag_pg.models",
    "SchemaMissing": "rag_pg.errors",
    "Settings": "rag_pg.config",
    "SidecarError": "rag_pg.errors",
    "Stats": "rag_pg.models",
    "StoreError": "rag_pg.errors",
    "make_provider": "rag_pg.embed",
    "upgrade_schema": "rag_pg.api",
}

__all__ = [
    "Chunk",
    "ChunkRecord",
    "CollectionNotFound",
    "ConfigError",
    "ConnectionLost",
    "ConversionError",
    "Database",
    "DatabaseRefused",
    "DatabaseTimeout",
    "DimensionMismatch",
    "Document",
    "DocumentError",
    "DocumentRecord",
    "EmbeddingBusy",
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


def __getattr__(name: str) -> object:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'rag_pg' has no attribute {name!r}")
    value = getattr(_importlib.import_module(source), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
