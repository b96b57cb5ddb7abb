"""Turn one Markdown file's bytes into a Document: front-matter, title, body and hash.

The title is plain text: a front-matter ``title``, else the first level-1 heading as the
site renders it (no ``{#id}``, tags or escapes), else the file name.
"""

from __future__ import annotations

import hashlib
import posixpath

from rag_pg.errors import DocumentError
from rag_pg.models import Document
from rag_pg.source.chunk import first_h1, is_mdx
from rag_pg.source.frontmatter import split_front_matter


def normalise_newlines(text: str) -> str:
    """CRLF and lone CR become LF, so that the same text saved on any OS chunks the same."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _front_matter_title(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    # A folded or multi-line YAML title is still one line of text.
    title = " ".join(str(value).split())
    return title or None


def _file_title(path: str) -> str:
    name = posixpath.basename(path)
    stem, extension = posixpath.splitext(name)
    return stem if extension and stem else name


def parse_document(path: str, data: bytes, text: str | None = None) -> Document:
    """``text``, when the walker already decoded ``data``, saves a second decode.

    The hash is over ``data`` itself, front-matter and BOM included, so that it changes
    exactly when the file's bytes do (the key of incremental ingest).
    """
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DocumentError(path, f"not valid UTF-8 (byte {error.start})") from error
    if text.startswith("\ufeff"):
        text = text[1:]
    normalised = normalise_newlines(text)
    front_matter, body, warnings = split_front_matter(normalised)
    title = (
        _front_matter_title(front_matter.get("title"))
        or first_h1(body, is_mdx(path))
        or _file_title(path)
    )
    return Document(
        path=path,
        title=title,
        content=body,
        content_hash=hashlib.sha256(data).hexdigest(),
        front_matter=front_matter,
        warnings=tuple(warnings),
        body_line=body_line(normalised, body),
    )


def body_line(text: str, body: str) -> int:
    """The 1-based line of ``text`` where ``body`` (its suffix) starts."""
    return text.count("\n", 0, len(text) - len(body)) + 1
