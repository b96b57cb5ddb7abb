"""Documents beyond Markdown: PDF, DOCX, PPTX, XLSX and HTML converted to Markdown.

Each format has one converter (``Converter``: ``name``, ``version``, ``extensions``,
``convert(data, name) -> Converted``) built on a well-kept library, installed with the
``documents`` extra. ``Converted`` holds the Markdown the parser reads and its
provenance: the regions (pages, slides, sheets) its lines came from. Conversions run in
a worker process with a time and a memory limit (``ConversionPool``). Importing this
package imports no converter library.
"""

from __future__ import annotations

from rag_pg.source.convert.base import (
    ConversionError,
    Converted,
    Converter,
    FailureKind,
    LibraryConverter,
    Region,
)
from rag_pg.source.convert.pipeline import UNSUPPORTED, fingerprint_part, source_kind, to_document
from rag_pg.source.convert.pool import DEFAULT_MEMORY_LIMIT, DEFAULT_TIME_LIMIT, ConversionPool
from rag_pg.source.convert.registry import (
    DEFAULT_REGISTRY,
    MARKDOWN_FORMATS,
    Registry,
    available_formats,
    extension_of,
)

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "DEFAULT_REGISTRY",
    "DEFAULT_TIME_LIMIT",
    "MARKDOWN_FORMATS",
    "UNSUPPORTED",
    "ConversionError",
    "ConversionPool",
    "Converted",
    "Converter",
    "FailureKind",
    "LibraryConverter",
    "Region",
    "Registry",
    "available_formats",
    "extension_of",
    "fingerprint_part",
    "source_kind",
    "to_document",
]
