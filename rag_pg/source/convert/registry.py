"""Which converter reads which extension, among those whose library is installed.

The parent process never imports a converter's library: availability is
``importlib.util.find_spec`` and versions come from the installed distributions'
metadata, so listing the formats (for ``source.formats``) and computing the pipeline
fingerprint stay cheap on a run that converts nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from rag_pg.errors import ConfigError
from rag_pg.source.convert.base import Converter
from rag_pg.source.convert.pdf_text import PdfConverter
from rag_pg.source.convert.sheets import XlsxConverter
from rag_pg.source.convert.slides import PptxConverter
from rag_pg.source.convert.web import HtmlConverter
from rag_pg.source.convert.word import DocxConverter

MARKDOWN_FORMATS = (".md", ".markdown")
INSTALL_HINT = "pip install 'ragpg[documents]'"


def extension_of(name: str) -> str:
    """The last extension, lower-cased (``Report.PDF`` → ``.pdf``); none for ``.pdf`` alone."""
    stem, extension = os.path.splitext(os.path.basename(name))
    return extension.lower() if stem else ""


def _normalise(value: str) -> str:
    text = value.strip().lower()
    return text if text.startswith(".") else "." + text


class Registry:
    """Converters by extension, the earliest registered first; only available ones answer."""

    def __init__(self, converters: Iterable[Converter] = ()) -> None:
        self._converters: list[Converter] = []
        for converter in converters:
            self.register(converter)

    def register(self, converter: Converter, *, first: bool = False) -> None:
        """``first`` puts it ahead of the built-ins for its extensions (a plug-in, a test)."""
        if first:
            self._converters.insert(0, converter)
        else:
            self._converters.append(converter)

    def unregister(self, converter: Converter) -> None:
        self._converters = [c for c in self._converters if c is not converter]

    def for_name(self, name: str) -> Converter | None:
        extension = extension_of(name)
        for converter in self._converters:
            if extension in converter.extensions and converter.available():
                return converter
        return None

    def known_formats(self) -> frozenset[str]:
        return frozenset(ext for converter in self._converters for ext in converter.extensions)

    def available_formats(self) -> frozenset[str]:
        return frozenset(
            ext for converter in self._converters if converter.available()
            for ext in converter.extensions
        )

    def resolve_formats(self, requested: Sequence[str] | None) -> frozenset[str]:
        """The extensions a walk reads: Markdown plus every installed format by default.

        A list (``["md", "pdf"]``, ``[".docx"]``) narrows it; a format selects every
        extension its converter reads (``html`` also takes ``.htm``). An unknown format or
        one whose library is missing is a ConfigError naming the fix: a format asked for is
        never skipped in silence.
        """
        if requested is None:
            return frozenset(MARKDOWN_FORMATS) | self.available_formats()
        if isinstance(requested, str) or not all(isinstance(v, str) for v in requested):
            raise ConfigError(f"source.formats: expected a list of extensions, got {requested!r}")
        chosen: set[str] = set()
        for value in requested:
            extension = _normalise(value)
            if extension in MARKDOWN_FORMATS:
                chosen.update(MARKDOWN_FORMATS)
                continue
            owners = [c for c in self._converters if extension in c.extensions]
            if not owners:
                known = ", ".join(sorted(self.known_formats() | set(MARKDOWN_FORMATS)))
                raise ConfigError(f"source.formats: no converter reads {value!r} (known: {known})")
            usable = [c for c in owners if c.available()]
            if not usable:
                raise ConfigError(f"source.formats: {value!r} needs its library: {INSTALL_HINT}")
            chosen.update(usable[0].extensions)
        return frozenset(chosen)

    def fingerprint(self, name: str) -> str | None:
        """What enters a converted document's pipeline fingerprint (None: Markdown)."""
        converter = self.for_name(name)
        return converter.version if converter is not None else None


def builtin_converters() -> list[Converter]:
    return [PdfConverter(), DocxConverter(), PptxConverter(), XlsxConverter(), HtmlConverter()]


DEFAULT_REGISTRY = Registry(builtin_converters())


def available_formats() -> frozenset[str]:
    """The non-Markdown extensions this installation can read now."""
    return DEFAULT_REGISTRY.available_formats()
