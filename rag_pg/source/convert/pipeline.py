"""How the ingest pipeline uses conversions: which files to convert, the Document a
conversion becomes, the fingerprint part that re-converts when a converter changes.

Kept here so that walk and ingest need three calls and no knowledge of the formats:

    formats = DEFAULT_REGISTRY.resolve_formats(settings.source.formats)   # once per run
    kind = source_kind(path, formats)      # "markdown", "convert", or None: unsupported_format
    converted = pool.convert(data, path)   # ConversionError: fail the file, keep what is stored
    document = to_document(path, data, converted)
    page = converted.page_at(span.first_line)   # a chunk's page (PDF page, PPTX slide)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Set
from typing import Literal

from rag_pg.models import Document
from rag_pg.source.convert.base import Converted
from rag_pg.source.convert.registry import (
    DEFAULT_REGISTRY,
    MARKDOWN_FORMATS,
    Registry,
    extension_of,
)

SourceKind = Literal["markdown", "convert"]
UNSUPPORTED = "unsupported_format"  # the skip reason of a file whose format is not read


def source_kind(name: str, formats: Set[str]) -> SourceKind | None:
    """How a walked file is read, given the run's formats; None: skip it as ``UNSUPPORTED``."""
    extension = extension_of(name)
    if extension not in formats:
        return None
    return "markdown" if extension in MARKDOWN_FORMATS else "convert"


def to_document(path: str, data: bytes, converted: Converted) -> Document:
    """The parser's Document of the converted Markdown; its hash is of the raw file bytes
    (an unchanged PDF is never converted again), its title the converter's when it has one
    (a PDF's metadata title, a deck's first slide), and its warnings the converter's too."""
    from rag_pg.source.parse import parse_document  # the parser only when a file is converted

    document = parse_document(path, data, converted.markdown)
    return dataclasses.replace(
        document,
        title=converted.title or document.title,
        warnings=tuple(document.warnings) + converted.warnings,
    )


def fingerprint_part(name: str, registry: Registry | None = None) -> str:
    """``";convert=<converter version>"`` for a converted file, ``""`` for Markdown: appended
    to the pipeline fingerprint, so a new converter or library version re-converts."""
    version = (registry or DEFAULT_REGISTRY).fingerprint(name)
    return f";convert={version}" if version else ""
