"""What every converter shares: the protocol, the converted document, its provenance.

A converter turns one file's raw bytes into Markdown that ragpg's parser reads like any
other document, plus a map of *regions* (a PDF's pages, a deck's slides, a workbook's
sheets) saying which lines of that Markdown came from where. Lines count from 1 and
ranges include their last line, as the chunker's ``ChunkSpan`` counts them, so a chunk
whose first line is known is given the page it came from without searching text.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from importlib.util import find_spec
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from rag_pg.errors import DocumentError

FailureKind = Literal[
    "timeout", "memory", "encrypted", "corrupt", "too_large", "crashed", "unsupported"
]
RegionKind = Literal["page", "slide", "sheet"]


class ConversionError(DocumentError):
    """One file could not be converted; ``kind`` names the reason for reports and tests."""

    def __init__(self, path: str, kind: FailureKind, message: str):
        super().__init__(path, message)
        self.kind: FailureKind = kind


@dataclass(frozen=True, slots=True)
class Region:
    """Where a stretch of the Markdown came from: page 7, slide 3, sheet "Budget".

    ``number`` is 1-based (the page a PDF viewer opens with ``#page=N``); ``label`` is the
    page label, slide title or sheet name. Lines ``start_line`` to ``end_line`` (1-based,
    both included); characters ``[start_char, end_char)`` index ``Converted.markdown``.
    """

    kind: RegionKind
    number: int
    label: str
    start_line: int
    end_line: int
    start_char: int
    end_char: int


@dataclass(frozen=True, slots=True)
class Converted:
    """A converted file: Markdown for the parser, and where each part of it came from."""

    markdown: str
    converter: str
    version: str
    title: str | None = None
    regions: tuple[Region, ...] = ()
    warnings: tuple[str, ...] = ()
    _starts: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", tuple(region.start_line for region in self.regions))

    def region_at(self, line: int) -> Region | None:
        """The region holding 1-based ``line`` (a chunk's first line), or None."""
        index = bisect.bisect_right(self._starts, line) - 1
        if index < 0:
            return None
        region = self.regions[index]
        return region if line <= region.end_line else None

    def page_at(self, line: int) -> int | None:
        """The page or slide number of ``line``: what a hit's ``page`` field carries."""
        region = self.region_at(line)
        return region.number if region is not None and region.kind in ("page", "slide") else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "markdown": self.markdown,
            "converter": self.converter,
            "version": self.version,
            "title": self.title,
            "regions": [
                [r.kind, r.number, r.label, r.start_line, r.end_line, r.start_char, r.end_char]
                for r in self.regions
            ],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> Converted:
        return cls(
            markdown=str(value["markdown"]),
            converter=str(value["converter"]),
            version=str(value["version"]),
            title=value.get("title"),
            regions=tuple(Region(*row) for row in value.get("regions", ())),
            warnings=tuple(str(w) for w in value.get("warnings", ())),
        )


@runtime_checkable
class Converter(Protocol):
    """Turns one file's bytes into Markdown. Instances must be cheap to create and must
    not import their library before ``convert``: the parent process only reads ``name``,
    ``version`` and ``extensions``; ``convert`` runs in the worker process."""

    @property
    def name(self) -> str: ...

    @property
    def extensions(self) -> tuple[str, ...]: ...  # lower-case, with the dot: ".pdf"

    @property
    def version(self) -> str: ...  # enters the pipeline fingerprint

    def available(self) -> bool: ...

    def convert(self, data: bytes, name: str) -> Converted: ...


class LibraryConverter:
    """Base of the built-in converters: availability and version from the libraries used.

    The version joins the converter's own revision with each library's installed version,
    so upgrading pypdfium2 changes the pipeline fingerprint and re-converts (nothing else).
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""  # the format as a person names it: "PDF", "DOCX"
    extensions: ClassVar[tuple[str, ...]] = ()
    revision: ClassVar[int] = 1
    modules: ClassVar[tuple[str, ...]] = ()  # import names that must be installed
    distributions: ClassVar[tuple[str, ...]] = ()  # whose versions enter ``version``

    def available(self) -> bool:
        try:
            return all(find_spec(module) is not None for module in self.modules)
        except (ImportError, ValueError):
            return False

    @property
    def version(self) -> str:
        parts = [f"{self.name}/{self.revision}"]
        for dist in self.distributions:
            try:
                parts.append(f"{dist}=={metadata.version(dist)}")
            except metadata.PackageNotFoundError:
                parts.append(f"{dist}==absent")
        return ";".join(parts)

    def fail(self, name: str, kind: FailureKind, detail: str) -> ConversionError:
        prefix = {"encrypted": "encrypted", "corrupt": "corrupt"}.get(kind)
        return ConversionError(name, kind, f"{prefix} {self.label}: {detail}" if prefix else detail)

    def convert(self, data: bytes, name: str) -> Converted:  # pragma: no cover - abstract
        raise NotImplementedError


# -- building Markdown with provenance -------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
# A line of plain text that Markdown would read as structure: heading, fence, rule,
# setext underline, quote, HTML block or list/numbered item. Escaped so it stays text.
_STRUCTURE = re.compile(r"^(\s{0,3})(#|`{3}|~{3}|>|<|[-+*](?=\s|$)|=+\s*$|-{2,}\s*$)")
_NUMBERED = re.compile(r"^(\s{0,3}\d{1,9})([.)])(?=\s|$)")
_SPACES = str.maketrans({"\xa0": " ", "\u202f": " ", "\u2007": " "})


def clean_text(text: str) -> str:
    """Control characters (PDF soft hyphens are ``\\x02``) out; newlines as ``\\n``;
    no-break spaces (French typography puts them before ``:``) as plain spaces."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x02", "")
    return _CONTROL.sub("", text).translate(_SPACES)


def escape_line(line: str) -> str:
    """Plain text kept as text: a leading ``#`` or ``1.`` of extracted text is not structure."""
    if _NUMBERED.match(line):
        return _NUMBERED.sub(r"\1\\\2", line, count=1)
    return _STRUCTURE.sub(lambda m: m.group(1) + "\\" + m.group(2), line, count=1)


def cell_text(value: object) -> str:
    """One table cell on one line, its pipes escaped (a cell must not split the row)."""
    text = " ".join(clean_text(str(value)).split())
    return text.replace("\\", "\\\\").replace("|", "\\|")


def markdown_table(header: list[str], rows: Iterable[list[str]]) -> str:
    width = len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * width]
    for row in rows:
        padded = (row + [""] * width)[:width]
        lines.append("| " + " | ".join(padded) + " |")
    return "\n".join(lines)


class MarkdownBuilder:
    """Appends Markdown blocks (separated by one blank line) and records regions.

    A region starts at its first block and ends after its last one; a region that got no
    block (a page without text) is not recorded, so no line maps to it.
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._chars = 0
        self._lines = 0
        self._regions: list[Region] = []
        self._open: tuple[RegionKind, int, str] | None = None
        self._start: tuple[int, int] | None = None

    @property
    def chars(self) -> int:
        return self._chars

    def begin(self, kind: RegionKind, number: int, label: str) -> None:
        self.end()
        self._open = (kind, number, label)
        self._start = None

    def add(self, block: str) -> None:
        block = block.strip("\n")
        if not block.strip():
            return
        if self._parts:
            self._append("\n\n")
        if self._open is not None and self._start is None:
            self._start = (self._lines + 1, self._chars)
        self._append(block)

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self._chars += len(text)
        self._lines += text.count("\n")

    def end(self) -> None:
        if self._open is not None and self._start is not None:
            kind, number, label = self._open
            start_line, start_char = self._start
            self._regions.append(
                Region(kind, number, label, start_line, self._lines + 1, start_char, self._chars)
            )
        self._open = None
        self._start = None

    def markdown(self) -> str:
        self.end()
        return "".join(self._parts) + ("\n" if self._parts else "")

    def regions(self) -> tuple[Region, ...]:
        self.end()
        return tuple(self._regions)
