"""The ingest's pure stage: each walked file checked against what is stored, then converted or
parsed, and chunked. No database and no embedding here.

``Preparer.events`` says what became of each file the walk yields; ``read_ahead`` runs it in a
thread of its own, so that the next files are parsed while the database writes the group
before them (the writing thread waits on its socket, which leaves the interpreter to the
parser): a cold ingest then costs about the slower of parsing and writing, not their sum.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rag_pg.config import Settings
from rag_pg.embed.base import EmbeddingProvider
from rag_pg.errors import RagError, first_line
from rag_pg.models import SkippedFile
from rag_pg.source import language
from rag_pg.source import token_window as window
from rag_pg.source.access import AccessRules
from rag_pg.source.chunk import Chunker
from rag_pg.source.convert import ConversionError, ConversionPool, fingerprint_part, to_document
from rag_pg.source.walk import SourceFile, WalkRules, walk
from rag_pg.store import checkpoints
from rag_pg.store.documents import PreparedDocument, fingerprint

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Unchanged:
    """Same bytes and same pipeline as the stored version: nothing to do."""

    path: str
    stored: Any


@dataclass(frozen=True, slots=True)
class Failed:
    """The file could not be converted or parsed; what is stored of it stays."""

    path: str
    message: str
    kind: str
    converted: bool


@dataclass(frozen=True, slots=True)
class Prepared:
    """A new or changed document, chunked, ready to be embedded and written."""

    path: str
    prepared: PreparedDocument
    stored: Any  # the stored version's state, None for a new document
    converted: bool
    embeds: bool


Event = SkippedFile | Unchanged | Failed | Prepared


class Preparer:
    """What one run does to each file before the database sees it."""

    def __init__(self, settings: Settings, chunker: Chunker, provider: EmbeddingProvider,
                 access: AccessRules | None = None):
        self.settings = settings
        self.chunker = chunker
        self.provider = provider
        # Who reads each document, when neither its front matter says (the tree's rules).
        self.access = access or AccessRules(default=settings.permissions.default)

    def fingerprint(self, model: str | None, item: SourceFile) -> str:
        """The pipeline fingerprint of ``item`` (the write path and the unchanged check)."""
        chunk = self.settings.chunk
        return fingerprint(
            chunk.size, chunk.overlap, model, max_tokens=chunk.max_tokens,
            anchor_style=self.chunker.slug_style,
            convert=fingerprint_part(item.path) if item.kind == "convert" else "",
            access=self.access.fingerprint_part(item.path),
        )

    def unchanged(self, item: SourceFile, stored: Any, model: str | None) -> bool:
        """Same bytes and same pipeline: decided from the raw bytes, without parsing or converting."""
        if stored.content_hash != hashlib.sha256(item.data).hexdigest():
            return False
        return bool(stored.fingerprint == self.fingerprint(model if stored.embed else None, item))

    def events(
        self, root: Path, rules: WalkRules, states: Mapping[str, Any], converter: ConversionPool,
        *, full: bool, model: str | None, root_key: str,
    ) -> Iterator[Event]:
        """One event per file of the walk, in the walk's order."""
        default_language = self.settings.source.language
        for item in walk(root, rules):
            if isinstance(item, SkippedFile):
                yield item
                continue
            checkpoints.reach("after_walk_item")
            stored = states.get(item.path)
            if not full and stored is not None and self.unchanged(item, stored, model):
                yield Unchanged(item.path, stored)
                continue
            converted = item.kind == "convert"
            try:
                if converted:
                    result = converter.convert(item.data, item.path)
                    if not result.markdown.strip():  # no text: an empty file, a frameset's links
                        yield SkippedFile(item.path, "empty")
                        continue
                    document = to_document(item.path, item.data, result)
                else:
                    # Parsing (YAML, Markdown) is imported here: a no-change run never parses.
                    from rag_pg.source.parse import parse_document

                    document = parse_document(item.path, item.data, item.text)
                embeds = model is not None and document.embed
                fp = self.fingerprint(model if embeds else None, item)
                chunks = self.chunker.chunk(document)
                if embeds and isinstance(self.provider, window.CountsTokens):
                    chunks = window.fit(self.chunker, document, chunks,
                                        count=self.provider.token_count, window=self.provider.window)
                prepared = PreparedDocument(
                    document=document,
                    chunks=chunks,
                    vectors=None,
                    language=language.detect(document.content, document.front_matter, default_language),
                    fingerprint=fp,
                    source_root=root_key,
                    readers=self.access.readers(item.path, document.front_matter),
                )
            except ConversionError as exc:
                yield Failed(item.path, f"cannot convert: {exc.reason}", exc.kind, converted)
                continue
            except (RagError, ValueError, RecursionError, MemoryError) as exc:
                yield Failed(item.path, f"cannot parse: {first_line(exc)}", "parse", converted)
                continue
            yield Prepared(item.path, prepared, stored, converted, embeds)


#: Cheap events (a file unchanged, skipped) handed over together: a no-change run of 2,000
#: files spent more time passing them one by one between threads than reading the files.
CHEAP_BATCH = 256


def read_ahead(items: Iterator[T], depth: int,
               cheap: Callable[[T], bool] = lambda item: False) -> Generator[T, None, None]:
    """``items``, produced by a thread of their own at most ``depth`` ahead of the consumer.

    Items for which ``cheap`` is true are handed over in batches of up to ``CHEAP_BATCH``
    (they hold little memory and take no work); any other goes at once, with the batch
    before it. An exception of the producer is raised to the consumer where the next item
    would have come. Closing the returned iterator (the consumer's error, a Ctrl-C) stops
    the producer after the item it is on, and waits for it: nothing runs on once this
    returns.
    """
    box: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=max(2, depth))
    stop = threading.Event()

    def produce() -> None:
        try:
            batch: list[T] = []
            for item in items:
                batch.append(item)
                if not cheap(item) or len(batch) >= CHEAP_BATCH:
                    box.put(("items", batch))
                    batch = []
                if stop.is_set():
                    return
            if batch:
                box.put(("items", batch))
            box.put(("end", None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            box.put(("error", exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="ragpg-ingest-read", daemon=True)
    worker.start()
    try:
        while True:
            kind, value = box.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield from value
    finally:
        stop.set()
        # Emptied, the queue has room for the one put the producer may still make before it
        # sees ``stop``.
        while True:
            try:
                box.get_nowait()
            except queue.Empty:
                break
        worker.join()
