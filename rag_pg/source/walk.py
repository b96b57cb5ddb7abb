"""Stream the Markdown files under a root, confined to it, with governance filters.

Decisions:

- Order is each directory's entries sorted by name (code point order), directories
  descended at their sorted place; the tree is never listed as a whole.
- Path filters are checked before any file is opened, so a filtered file costs nothing
  but its directory entry; then: symlink, not a regular file, open, too large, read,
  binary (NUL byte, or a UTF-16/32 byte-order mark is ``not_utf8``), invalid UTF-8, empty.
- Every descent and every open goes through a directory descriptor with ``O_NOFOLLOW``,
  and the opened descriptor is checked with ``fstat``: a name swapped for a symlink or a
  FIFO after listing is caught on the descriptor itself (``O_NONBLOCK``: no hang).
- With ``follow_symlinks``, a link is resolved and followed only when its target lies
  inside the root; a directory already on the current path (a loop) is not re-entered.
  A link that cannot be resolved is skipped (fail closed).
- A directory that cannot be listed is reported as ``SkippedFile("dir/", "unreadable")``
  (trailing slash), since the files it hides cannot be named.
- A file name that is not valid UTF-8 cannot be stored as a path: it is reported as
  ``not_utf8`` with the offending bytes written ``\\xNN``.
- A file with more than one hard link (``st_nlink > 1``) is refused as ``hardlink`` unless
  ``read_hardlinks``: its other name may lie outside the root, and nothing on the file tells
  where, so a link made to smuggle a file in cannot be told from a legitimate one.
- With ``formats`` (the extensions a run reads, ``rag_pg.source.convert``), a file of a format a
  converter reads is yielded as raw bytes (``kind="convert"``, no UTF-8 or NUL check: it is
  a PDF or an Office file), with the same confinement and descriptor checks and its own
  size limit (``max_document_bytes``); a file of a known format that is not read (not
  installed, or left out of ``formats``) is ``unsupported_format``, after the governance
  filters; a file no converter knows stays ``not_markdown``. Without ``formats`` only
  Markdown is read.
- Every entry not indexed is reported: a non-Markdown file as ``not_markdown``, a VCS
  folder as ``vcs`` and a symlinked directory not followed as ``symlink`` (both with a
  trailing slash), so a count of skipped files accounts for the whole tree.
- Which paths may be read at all (prefixes, hard exclusions, ``.aiignore``) is
  ``rag_pg.source.rules``; how a file is opened without following a swapped name is
  ``rag_pg.source.confined_read``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

from rag_pg.errors import ConfigError
from rag_pg.models import SkippedFile
from rag_pg.source.confined_read import (
    DIR_FLAGS,
    FILE_FLAGS,
    descriptor_inside,
    inside,
    is_loop,
    read_limited,
)
from rag_pg.source.convert.pipeline import UNSUPPORTED, source_kind
from rag_pg.source.convert.registry import DEFAULT_REGISTRY
from rag_pg.source.rules import WalkRules, governance_reason, load_aiignore

# WalkRules is the walk's own parameter, so its callers import it from here too.
__all__ = [
    "MARKDOWN_EXTENSIONS",
    "VCS_DIRECTORIES",
    "SourceFile",
    "WalkRules",
    "is_markdown_name",
    "walk",
]

MARKDOWN_EXTENSIONS = (".md", ".markdown", ".mdx")
VCS_DIRECTORIES = frozenset({".git", ".hg", ".svn"})
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


Kind = str  # "markdown" (decoded text) | "convert" (raw bytes for a converter)


@dataclass(frozen=True, slots=True)
class SourceFile:
    """A file to index: its bytes and, for Markdown, its decoded text (``""`` for a file
    read for conversion, ``kind == "convert"``)."""

    path: str
    data: bytes
    text: str
    kind: Kind = "markdown"


def is_markdown_name(name: str) -> bool:
    """Only the last extension counts, so ``notes.md.jsonl`` is not a document."""
    stem, extension = os.path.splitext(name)
    return bool(stem) and extension.lower() in MARKDOWN_EXTENSIONS


def _display(name: str) -> str:
    """A printable, storable spelling of a name the file system gave us as raw bytes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _valid_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(slots=True)
class _Directory:
    fd: int
    prefix: str  # relative path with a trailing "/", or "" for the root
    entries: Iterator[os.DirEntry[str]]
    identity: tuple[int, int]


@dataclass(slots=True)
class _Walker:
    root: str
    rules: WalkRules
    aiignore: pathspec.PathSpec[Any] | None
    stack: list[_Directory] = field(default_factory=list)
    known: frozenset[str] = field(default_factory=DEFAULT_REGISTRY.known_formats)

    def _kind(self, name: str) -> Kind | None:
        """How ``name`` is read: ``markdown``, ``convert``, or None (not read)."""
        formats = self.rules.formats
        if formats is None:
            return "markdown" if is_markdown_name(name) else None
        if is_markdown_name(name):  # .mdx rides with Markdown, whatever the registry lists
            return "markdown" if ".md" in formats else None
        return source_kind(name, formats)

    def _refusal(self, name: str) -> str:
        """Why a file that is not read is skipped: a format ragpg could read, or no document."""
        if self.rules.formats is None:
            return "not_markdown"
        if is_markdown_name(name) or os.path.splitext(name)[1].lower() in self.known:
            return UNSUPPORTED
        return "not_markdown"

    def run(self) -> Iterator[SourceFile | SkippedFile]:
        try:
            fd = os.open(self.root, DIR_FLAGS)
        except OSError as error:
            raise ConfigError(
                f"source root cannot be opened: {self.root} ({error.strerror})"
            ) from error
        try:
            if self._push(fd, "") is not None:
                raise ConfigError(f"source root cannot be listed: {self.root}")
            while self.stack:
                top = self.stack[-1]
                entry = next(top.entries, None)
                if entry is None:
                    os.close(self.stack.pop().fd)
                    continue
                yield from self._entry(top, entry)
        finally:
            while self.stack:
                os.close(self.stack.pop().fd)

    def _push(self, fd: int, prefix: str) -> str | None:
        """List the directory behind ``fd``, taking ownership of it; else why not.

        Returns None when pushed, ``"loop"`` for a directory already on the current path,
        ``"unreadable"`` when it cannot be listed.
        """
        try:
            info = os.fstat(fd)
            identity = (info.st_dev, info.st_ino)
            if any(directory.identity == identity for directory in self.stack):
                os.close(fd)
                return "loop"
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            os.close(fd)
            return "unreadable"
        self.stack.append(_Directory(fd, prefix, iter(entries), identity))
        return None

    def _entry(
        self, parent: _Directory, entry: os.DirEntry[str]
    ) -> Iterator[SourceFile | SkippedFile]:
        name = entry.name
        relpath = parent.prefix + name
        kind = self._kind(name)
        markdown = kind is not None  # read: Markdown, or a document to convert
        try:
            is_link = entry.is_symlink()
            is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            is_file = not is_link and entry.is_file(follow_symlinks=False)
        except OSError:
            if markdown:
                yield SkippedFile(_display(relpath), "unreadable")
            return
        if is_dir:
            yield from self._directory(parent, name, relpath)
            return
        if not markdown and not is_link:
            refusal = self._refusal(name)
            if refusal == UNSUPPORTED and _valid_name(relpath):
                refusal = governance_reason(relpath, self.rules, self.aiignore) or refusal
            yield SkippedFile(_display(relpath), refusal)
            return
        if markdown:
            if not _valid_name(relpath):
                yield SkippedFile(_display(relpath), "not_utf8")
                return
            reason = governance_reason(relpath, self.rules, self.aiignore)
            if reason is not None:
                yield SkippedFile(relpath, reason)
                return
        if is_link:
            yield from self._link(name, relpath, kind)
        elif not markdown:
            return
        elif not is_file:
            yield SkippedFile(relpath, "not_regular")
        else:
            try:
                fd = os.open(name, FILE_FLAGS, dir_fd=parent.fd)
            except OSError as error:
                yield SkippedFile(relpath, "symlink" if is_loop(error) else "unreadable")
                return
            yield self._read(fd, relpath, kind or "markdown")

    def _directory(self, parent: _Directory, name: str, relpath: str) -> Iterator[SkippedFile]:
        if name in VCS_DIRECTORIES:
            yield SkippedFile(_display(relpath) + "/", "vcs")
            return
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent.fd)
        except OSError as error:
            # ELOOP/ENOTDIR: no longer a directory (swapped for a link since listing).
            if not is_loop(error) and error.errno != errno.ENOTDIR:
                yield SkippedFile(_display(relpath) + "/", "unreadable")
            return
        if self._push(fd, relpath + "/") == "unreadable":
            yield SkippedFile(_display(relpath) + "/", "unreadable")

    def _resolve(self, relpath: str) -> str | None:
        """The link's target when following is on and it stays inside the root."""
        if not self.rules.follow_symlinks:
            return None
        try:
            target = os.path.realpath(os.path.join(self.root, relpath), strict=True)
        except (OSError, RuntimeError, ValueError):
            return None  # dangling, a loop, too long or unencodable: fail closed
        return target if inside(target, self.root) else None

    def _link(self, name: str, relpath: str, kind: Kind | None) -> Iterator[SourceFile | SkippedFile]:
        """A followed link: a directory is descended, a file that is read read; others skipped."""
        markdown = kind is not None
        refused = [SkippedFile(_display(relpath), "symlink" if markdown else self._refusal(name))]
        target = self._resolve(relpath)
        if target is None:
            if not markdown and self._points_to_directory(relpath):
                refused = [SkippedFile(_display(relpath) + "/", "symlink")]
            yield from refused
            return
        try:
            fd = os.open(target, FILE_FLAGS)
        except OSError:
            yield from refused
            return
        try:
            confined = descriptor_inside(fd, self.root)
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        except OSError:
            confined = is_dir = False
        if is_dir and not markdown:
            refused = [SkippedFile(_display(relpath) + "/", "vcs" if name in VCS_DIRECTORIES else "symlink")]
        if not confined or (is_dir and name in VCS_DIRECTORIES):
            os.close(fd)
            yield from refused
        elif is_dir:
            pushed = self._push(fd, relpath + "/")
            if pushed is not None:  # a loop is a link not followed, and says so
                reason = "unreadable" if pushed == "unreadable" else "symlink"
                yield SkippedFile(_display(relpath) + "/", reason)
        elif kind is not None:
            yield self._read(fd, relpath, kind)
        else:
            os.close(fd)
            yield from refused

    def _points_to_directory(self, relpath: str) -> bool:
        """Only to name the skip: a stat of the target, which is never opened."""
        try:
            return os.path.isdir(os.path.join(self.root, relpath))
        except (OSError, ValueError):
            return False

    def _read(self, fd: int, relpath: str, kind: Kind = "markdown") -> SourceFile | SkippedFile:
        """Check and read the opened descriptor exactly once; always closes it."""
        limit = self.rules.max_document_bytes if kind == "convert" else self.rules.max_file_bytes
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return SkippedFile(relpath, "not_regular")
            if info.st_nlink > 1 and not self.rules.read_hardlinks:
                return SkippedFile(relpath, "hardlink")
            if info.st_size > limit:
                return SkippedFile(relpath, "too_large")
            data = read_limited(fd, limit)
        except OSError:
            return SkippedFile(relpath, "unreadable")
        finally:
            os.close(fd)
        if data is None:
            return SkippedFile(relpath, "too_large")
        if kind == "convert":
            # Bytes for a converter: no text checks (a PDF is binary); an empty file says nothing.
            return SourceFile(relpath, data, "", "convert") if data else SkippedFile(relpath, "empty")
        return _classify(relpath, data)


def _classify(relpath: str, data: bytes) -> SourceFile | SkippedFile:
    if data.startswith(_WIDE_BOMS):
        return SkippedFile(relpath, "not_utf8")
    if b"\x00" in data:
        return SkippedFile(relpath, "binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return SkippedFile(relpath, "not_utf8")
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        return SkippedFile(relpath, "empty")
    return SourceFile(relpath, data, text)


_DEFAULT_RULES = WalkRules()  # frozen: one shared default is safe


def estimate_documents(root: Path | str, rules: WalkRules = _DEFAULT_RULES) -> int:
    """About how many files a walk of ``root`` will read: the names its path filters and
    formats admit, listed without opening a file (no symlink followed, no size or content
    check), for a progress line's estimate of the work ahead. An estimate: never a decision."""
    root_real = os.path.realpath(Path(root))
    aiignore = load_aiignore(Path(root_real))
    walker = _Walker(root_real, rules, aiignore)
    count = 0
    for folder, directories, files in os.walk(root_real):
        relative = os.path.relpath(folder, root_real)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        directories[:] = sorted(d for d in directories if d not in VCS_DIRECTORIES)
        count += sum(1 for name in files if walker._kind(name) is not None
                     and governance_reason(prefix + name, rules, aiignore) is None)
    return count


def walk(
    root: Path | str, rules: WalkRules = _DEFAULT_RULES
) -> Iterator[SourceFile | SkippedFile]:
    """Checks the root and reads ``.aiignore`` now, so configuration errors surface at the call.

    Every entry not indexed is yielded as a ``SkippedFile`` with its reason (non-Markdown
    files as ``not_markdown``), and nothing raised by one file stops the walk.
    """
    root_real = os.path.realpath(Path(root))
    if not os.path.isdir(root_real):
        raise ConfigError(f"source root is not a directory: {root}")
    aiignore = load_aiignore(Path(root_real))
    return _Walker(root_real, rules, aiignore).run()
