"""Stream the Markdown files under a root, confined to it, with governance filters (SPEC §2.1).

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
- A hard link is an ordinary file of the tree: it cannot be told apart and is read.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pathspec

from rag_pg.errors import ConfigError
from rag_pg.models import SkippedFile

MARKDOWN_EXTENSIONS = (".md", ".markdown")
VCS_DIRECTORIES = frozenset({".git", ".hg", ".svn"})
AIIGNORE = ".aiignore"
MAX_AIIGNORE_BYTES = 1024 * 1024
_READ_BLOCK = 1024 * 1024

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = _FILE_FLAGS | getattr(os, "O_DIRECTORY", 0)
_WIDE_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def _normalise_prefix(raw: str, setting: str) -> str | None:
    """``./docs/`` → ``docs``; ``.`` → ``""`` (the whole root); blank → None (ignored)."""
    if not isinstance(raw, str):
        raise ConfigError(f"{setting}: expected a path prefix, got {raw!r}")
    prefix = raw.strip()
    if not prefix:
        return None
    if prefix.startswith("/"):
        raise ConfigError(f"{setting}: {raw!r} must be relative to the source root")
    segments = [segment for segment in prefix.split("/") if segment not in ("", ".")]
    if ".." in segments:
        raise ConfigError(f"{setting}: {raw!r} may not contain '..' (it would leave the root)")
    return "/".join(segments)


def _normalise_prefixes(values: Sequence[str] | str, setting: str) -> tuple[str, ...]:
    if isinstance(values, str):
        values = [values]
    prefixes = (_normalise_prefix(value, setting) for value in values)
    return tuple(dict.fromkeys(prefix for prefix in prefixes if prefix is not None))


@dataclass(frozen=True, slots=True)
class WalkRules:
    """Validated and normalised at construction, so a bad prefix fails before any walk."""

    included_paths: tuple[str, ...] = ()
    excluded_paths: tuple[str, ...] = ()
    follow_symlinks: bool = False
    max_file_bytes: int = 10 * 1024 * 1024

    def __post_init__(self) -> None:
        included = _normalise_prefixes(self.included_paths, "source.included_paths")
        excluded = _normalise_prefixes(self.excluded_paths, "source.excluded_paths")
        object.__setattr__(self, "included_paths", included)
        object.__setattr__(self, "excluded_paths", excluded)
        size = self.max_file_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigError(f"source.max_file_bytes must be a positive integer, got {size!r}")

    def validate(self) -> WalkRules:
        """Kept for callers that expect an explicit check; construction already did it."""
        return self


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str
    data: bytes
    text: str


def is_markdown_name(name: str) -> bool:
    """Only the last extension counts, so ``notes.md.jsonl`` is not a document."""
    stem, extension = os.path.splitext(name)
    return bool(stem) and extension.lower() in MARKDOWN_EXTENSIONS


def _under(path: str, prefix: str) -> bool:
    return not prefix or path == prefix or path.startswith(prefix + "/")


def governance_reason(
    relpath: str, rules: WalkRules, aiignore: pathspec.PathSpec[Any] | None
) -> str | None:
    """The first governance filter (SPEC order) that rejects ``relpath``, or None.

    Prefixes match whole segments: ``docs/old`` covers ``docs/old`` and ``docs/old/a.md``
    but not ``docs/older.md``. ``.aiignore`` patterns follow ``pathspec``'s GitIgnoreSpec.
    """
    segments = relpath.split("/")
    if segments[-1].lower() == "scratch.md" or any(s.lower() == "legacy" for s in segments[:-1]):
        return "hard_excluded"
    if any(_under(relpath, prefix) for prefix in rules.excluded_paths):
        return "excluded_path"
    if rules.included_paths and not any(_under(relpath, p) for p in rules.included_paths):
        return "not_included"
    if aiignore is not None and aiignore.match_file(relpath):
        return "aiignore"
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _descriptor_inside(fd: int, root: str) -> bool:
    """Where the kernel says the descriptor points; trusted over any path we computed."""
    try:
        return _inside(os.readlink(f"/proc/self/fd/{fd}"), root)
    except OSError:
        return not os.path.isdir("/proc/self/fd")  # no /proc: the realpath check stands


def _read_limited(fd: int, limit: int) -> bytes | None:
    """The file's bytes, or None once more than ``limit`` arrive (it may grow after fstat)."""
    blocks: list[bytes] = []
    total = 0
    while True:
        block = os.read(fd, min(_READ_BLOCK, limit + 1 - total))
        if not block:
            return b"".join(blocks)
        blocks.append(block)
        total += len(block)
        if total > limit:
            return None


def load_aiignore(root: Path) -> pathspec.PathSpec[Any] | None:
    """The root's ``.aiignore``; a file that exists but cannot be used is a ConfigError.

    Failing closed: indexing what the user asked to hide would be worse than stopping.
    """
    root_real = os.path.realpath(root)
    path = os.path.join(root_real, AIIGNORE)
    if not os.path.lexists(path):
        return None
    try:
        target = os.path.realpath(path, strict=True)
        if not _inside(target, root_real):
            raise ConfigError(f"{path}: links outside the source root")
        fd = os.open(target, _FILE_FLAGS)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"{path}: not a regular file")
            data = _read_limited(fd, MAX_AIIGNORE_BYTES)
        finally:
            os.close(fd)
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror})") from error
    if data is None:
        raise ConfigError(f"{path}: larger than {MAX_AIIGNORE_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not valid UTF-8") from error
    lines = text.splitlines()
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines)
    except ValueError:
        for number, line in enumerate(lines, start=1):
            try:
                pathspec.GitIgnoreSpec.from_lines([line])
            except ValueError as error:
                raise ConfigError(f"{path}:{number}: invalid pattern {line!r}") from error
        raise


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

    def run(self) -> Iterator[SourceFile | SkippedFile]:
        try:
            fd = os.open(self.root, _DIR_FLAGS)
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
        markdown = is_markdown_name(name)
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
        if markdown:
            if not _valid_name(relpath):
                yield SkippedFile(_display(relpath), "not_utf8")
                return
            reason = governance_reason(relpath, self.rules, self.aiignore)
            if reason is not None:
                yield SkippedFile(relpath, reason)
                return
        if is_link:
            yield from self._link(name, relpath, markdown)
        elif not markdown:
            return
        elif not is_file:
            yield SkippedFile(relpath, "not_regular")
        else:
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=parent.fd)
            except OSError as error:
                yield SkippedFile(relpath, "symlink" if _is_loop(error) else "unreadable")
                return
            yield self._read(fd, relpath)

    def _directory(self, parent: _Directory, name: str, relpath: str) -> Iterator[SkippedFile]:
        if name in VCS_DIRECTORIES:
            return
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent.fd)
        except OSError as error:
            # ELOOP/ENOTDIR: no longer a directory (swapped for a link since listing).
            if not _is_loop(error) and error.errno != errno.ENOTDIR:
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
        return target if _inside(target, self.root) else None

    def _link(self, name: str, relpath: str, markdown: bool) -> Iterator[SourceFile | SkippedFile]:
        """A followed link: a directory is descended, a Markdown file read; others skipped."""
        refused = [SkippedFile(relpath, "symlink")] if markdown else []
        target = self._resolve(relpath)
        if target is None:
            yield from refused
            return
        try:
            fd = os.open(target, _FILE_FLAGS)
        except OSError:
            yield from refused
            return
        try:
            confined = _descriptor_inside(fd, self.root)
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        except OSError:
            confined = is_dir = False
        if not confined or (is_dir and name in VCS_DIRECTORIES):
            os.close(fd)
            yield from refused
        elif is_dir:
            if self._push(fd, relpath + "/") == "unreadable":
                yield SkippedFile(_display(relpath) + "/", "unreadable")
        elif markdown:
            yield self._read(fd, relpath)
        else:
            os.close(fd)

    def _read(self, fd: int, relpath: str) -> SourceFile | SkippedFile:
        """Check and read the opened descriptor exactly once; always closes it."""
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return SkippedFile(relpath, "not_regular")
            if info.st_size > self.rules.max_file_bytes:
                return SkippedFile(relpath, "too_large")
            data = _read_limited(fd, self.rules.max_file_bytes)
        except OSError:
            return SkippedFile(relpath, "unreadable")
        finally:
            os.close(fd)
        if data is None:
            return SkippedFile(relpath, "too_large")
        return _classify(relpath, data)


def _is_loop(error: OSError) -> bool:
    """ELOOP (EMLINK on some BSDs) is what O_NOFOLLOW answers for a symlink."""
    return error.errno in (errno.ELOOP, errno.EMLINK)


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


def walk(root: Path | str, rules: WalkRules = WalkRules()) -> Iterator[SourceFile | SkippedFile]:
    """Checks the root and reads ``.aiignore`` now, so configuration errors surface at the call.

    Non-Markdown files are passed over silently; every skipped Markdown file is yielded as a
    ``SkippedFile`` with its reason, and nothing raised by one file stops the walk.
    """
    root_real = os.path.realpath(Path(root))
    if not os.path.isdir(root_real):
        raise ConfigError(f"source root is not a directory: {root}")
    aiignore = load_aiignore(Path(root_real))
    return _Walker(root_real, rules, aiignore).run()
