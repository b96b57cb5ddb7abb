"""Who may read each document, decided from the source: its front matter, else the tree's rules.

A document's *readers* are the principals (a group, ``user:alice``, any name the application
maps its users to) that may read it; ``None`` means everyone who may read the collection, as
before permissions existed. They come from, in this order:

1. the document's front matter: ``access: public``, ``access: [hr, user:alice]``,
   ``access: hr`` (one principal) or ``access: []`` (nobody but an administrator);
2. the rules file at the root of the tree, ``.ragpg-access``: one rule per line, a
   gitignore-style pattern followed by ``@principal`` words, or by ``public`` or ``nobody``;
   the last rule that matches a path decides (as in ``.gitignore``)::

       # who reads what
       hr/**            @hr
       internal/**      @staff @hr
       internal/faq.md  public

3. ``permissions.default``: ``everyone`` (a document without a rule is read by everyone, as
   before) or ``nobody`` (deny by default).

The front matter wins because it is the most specific statement about one document. The
rules file is read like ``.aiignore``: confined to the root, and a file that cannot be used
(unreadable, not UTF-8, a malformed line) stops the run rather than index with the wrong
readers. What the rules give a path enters the document's pipeline fingerprint
(:meth:`AccessRules.fingerprint_part`), so a rule change re-writes exactly the documents whose
readers it changes, on the next ingest, with their vectors reused (nothing is embedded again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pathspec

from rag_pg.config.principals import check_principal, principals
from rag_pg.errors import ConfigError
from rag_pg.source.rules import read_root_file

ACCESS_FILE = ".ragpg-access"
MAX_ACCESS_BYTES = 1024 * 1024
Readers = tuple[str, ...] | None  # None: everyone who may read the collection


def front_matter_readers(front_matter: Mapping[str, Any]) -> tuple[bool, Readers]:
    """(whether the front matter says who reads the document, its readers)."""
    if "access" not in front_matter:
        return False, None
    value = front_matter["access"]
    if isinstance(value, str) and value.strip().lower() == "public":
        return True, None
    if isinstance(value, str) and value.strip().lower() == "nobody":
        return True, ()
    if isinstance(value, str):
        return True, (check_principal(value.strip(), "front matter access"),)
    if value is None:
        raise ConfigError("front matter access: empty (write public, nobody or a list of principals)")
    return True, principals(value, "front matter access")


@dataclass(frozen=True, slots=True)
class Rule:
    line: int
    spec: pathspec.PathSpec[Any]
    readers: Readers


@dataclass(frozen=True, slots=True)
class AccessRules:
    """The rules of one tree and the default for a path no rule matches."""

    rules: tuple[Rule, ...] = ()
    default: str = "everyone"

    @classmethod
    def load(cls, root: Path, default: str = "everyone") -> AccessRules:
        """The root's ``.ragpg-access`` (none: no rule); a file that cannot be used raises."""
        if default not in ("everyone", "nobody"):
            raise ConfigError(f"permissions.default must be everyone or nobody (got {default!r})")
        found = read_root_file(root, ACCESS_FILE, MAX_ACCESS_BYTES)
        if found is None:
            return cls((), default)
        path, text = found
        return cls(tuple(_parse(path, text)), default)

    def by_rules(self, path: str) -> Readers:
        """The readers the rules (or the default) give ``path``."""
        readers: Readers = None if self.default == "everyone" else ()
        for rule in self.rules:
            if rule.spec.match_file(path):
                readers = rule.readers
        return readers

    def readers(self, path: str, front_matter: Mapping[str, Any]) -> Readers:
        """The document's readers: its front matter's, else the rules'."""
        stated, readers = front_matter_readers(front_matter)
        return readers if stated else self.by_rules(path)

    def fingerprint_part(self, path: str) -> str:
        """What the rules give ``path``, for its pipeline fingerprint: nothing for everyone
        (a tree without rules keeps the fingerprints it had), else a short digest."""
        readers = self.by_rules(path)
        if readers is None:
            return ""
        digest = hashlib.sha256("\n".join(readers).encode()).hexdigest()[:16]
        return f";access={digest}"


def _parse(path: str, text: str) -> list[Rule]:
    rules = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, *words = line.split()
        where = f"{path}:{number}"
        if not words:
            raise ConfigError(f"{where}: {pattern!r} names nobody (add @principal, public or nobody)")
        if pattern.startswith("!"):
            raise ConfigError(f"{where}: a rule gives readers, it cannot negate ({pattern!r})")
        readers: Readers
        if words == ["public"]:
            readers = None
        elif words == ["nobody"]:
            readers = ()
        elif all(word.startswith("@") for word in words):
            readers = principals([word[1:] for word in words], where)
        else:
            raise ConfigError(f"{where}: expected @principal words, or public, or nobody after the"
                              f" pattern (got {' '.join(words)!r})")
        try:
            spec = pathspec.GitIgnoreSpec.from_lines([pattern])
        except ValueError as error:
            raise ConfigError(f"{where}: invalid pattern {pattern!r}") from error
        rules.append(Rule(number, spec, readers))
    return rules


__all__ = ["ACCESS_FILE", "AccessRules", "Readers", "check_principal", "front_matter_readers",
           "principals"]
