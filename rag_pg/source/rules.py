"""Which paths a walk may read, decided from the path alone, before any file is opened.

Decisions:

- ``WalkRules`` is validated and normalised when it is built, so a bad prefix fails before
  any walk; prefixes match whole segments (``docs/old`` covers ``docs/old/a.md``, not
  ``docs/older.md``).
- The governance filters are checked in a fixed order and the first that rejects a path
  names the skip: hard exclusions (``scratch.md``, a ``legacy`` folder), excluded paths,
  included paths, then ``.aiignore``.
- ``.aiignore`` follows gitignore exactly, including its rule that a file under an excluded
  directory cannot be re-included by a later ``!pattern``.
- An ``.aiignore`` that exists but cannot be used (outside the root, not a regular file,
  too large, not UTF-8, an invalid pattern) stops the run: indexing what the user asked to
  hide would be worse than stopping.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

from rag_pg.errors import ConfigError
from rag_pg.source.confined_read import FILE_FLAGS, inside, read_limited

AIIGNORE = ".aiignore"
MAX_AIIGNORE_BYTES = 1024 * 1024


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
    read_hardlinks: bool = False
    # Extensions read (``Registry.resolve_formats``); None = Markdown only.
    formats: frozenset[str] | None = None
    max_document_bytes: int = 100 * 1024 * 1024  # size limit of a file read for conversion

    def __post_init__(self) -> None:
        included = _normalise_prefixes(self.included_paths, "source.included_paths")
        excluded = _normalise_prefixes(self.excluded_paths, "source.excluded_paths")
        object.__setattr__(self, "included_paths", included)
        object.__setattr__(self, "excluded_paths", excluded)
        size = self.max_file_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigError(f"source.max_file_bytes must be a positive integer, got {size!r}")
        size = self.max_document_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ConfigError(f"source.max_document_bytes must be a positive integer, got {size!r}")
        if self.formats is not None:
            object.__setattr__(self, "formats", frozenset(self.formats))

    def validate(self) -> WalkRules:
        """Kept for callers that expect an explicit check; construction already did it."""
        return self


def _under(path: str, prefix: str) -> bool:
    return not prefix or path == prefix or path.startswith(prefix + "/")


def governance_reason(
    relpath: str, rules: WalkRules, aiignore: pathspec.PathSpec[Any] | None
) -> str | None:
    """The first governance filter that rejects ``relpath``, or None.

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
    if aiignore is not None and _aiignored(aiignore, segments):
        return "aiignore"
    return None


def _aiignored(spec: pathspec.PathSpec[Any], segments: list[str]) -> bool:
    """gitignore: an excluded parent directory wins over any ``!`` pattern for what it holds."""
    for depth in range(1, len(segments)):
        if _directory_excluded(spec, "/".join(segments[:depth])):
            return True
    return bool(spec.match_file("/".join(segments)))


def _directory_excluded(spec: pathspec.PathSpec[Any], directory: str) -> bool:
    """The last pattern that matches ``directory`` itself decides, as git decides.

    ``dir/`` matches the directory; ``dir/**`` only what is inside it, so the pattern's own
    text tells them apart (their compiled forms match ``dir/`` alike).
    """
    excluded = False
    for pattern in spec.patterns:
        regex = getattr(pattern, "regex", None)
        if pattern.include is None or regex is None:
            continue
        text = str(getattr(pattern, "pattern", "")).rstrip()
        if regex.match(directory) or (text.endswith("/") and regex.match(directory + "/")):
            excluded = bool(pattern.include)
    return excluded


def read_root_file(root: Path, name: str, limit: int) -> tuple[str, str] | None:
    """The text of the root's own file ``name`` and its path, None when there is none; a file
    that exists but cannot be used (a link out of the root, not a regular file, larger than
    ``limit`` bytes, not UTF-8) is a ConfigError: the files read here govern what is indexed
    and who reads it, and a rule skipped silently would be worse than stopping."""
    root_real = os.path.realpath(root)
    path = os.path.join(root_real, name)
    if not os.path.lexists(path):
        return None
    try:
        target = os.path.realpath(path, strict=True)
        if not inside(target, root_real):
            raise ConfigError(f"{path}: links outside the source root")
        fd = os.open(target, FILE_FLAGS)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"{path}: not a regular file")
            data = read_limited(fd, limit)
        finally:
            os.close(fd)
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror})") from error
    if data is None:
        raise ConfigError(f"{path}: larger than {limit} bytes")
    try:
        return path, data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not valid UTF-8") from error


def load_aiignore(root: Path) -> pathspec.PathSpec[Any] | None:
    """The root's ``.aiignore``; a file that exists but cannot be used is a ConfigError.

    Failing closed: indexing what the user asked to hide would be worse than stopping.
    """
    found = read_root_file(root, AIIGNORE, MAX_AIIGNORE_BYTES)
    if found is None:
        return None
    path, text = found
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
