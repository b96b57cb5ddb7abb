"""Principals: the names a document's readers and an acting user are given in (a group,
``user:alice``, whatever the application maps its users to), checked the same way wherever
they are written (front matter, the rules file, settings, the CLI, the service's tokens)."""

from __future__ import annotations

import re

from rag_pg.errors import ConfigError

DEFAULTS = ("everyone", "nobody")  # permissions.default
MAX_PRINCIPAL_CHARS = 200
MAX_PRINCIPALS = 100

# A principal is a name without spaces, commas, quotes, backslashes or braces (so that it
# reads the same in a rules line, a CLI list and a PostgreSQL array), not starting with "@".
_PRINCIPAL = re.compile(r"[^\s,@\"\\{}\x00-\x1f\x7f][^\s,\"\\{}\x00-\x1f\x7f]*")


def check_principal(value: object, where: str = "principal") -> str:
    """``value`` if it is a valid principal name, else a ConfigError naming ``where``."""
    if (not isinstance(value, str) or len(value) > MAX_PRINCIPAL_CHARS
            or not _PRINCIPAL.fullmatch(value) or not value.isprintable()
            or not value.encode("utf-8", "replace").decode("utf-8") == value):
        raise ConfigError(
            f"{where}: {value!r} is not a principal (a name of at most {MAX_PRINCIPAL_CHARS}"
            " characters without spaces, commas, quotes, backslashes or braces, not starting with @)"
        )
    return value


def principals(values: object, where: str = "principals") -> tuple[str, ...]:
    """A list of principals (or one, or a comma-separated string), checked, sorted, unique."""
    if isinstance(values, str):
        values = [part.strip() for part in values.split(",") if part.strip()]
    if not isinstance(values, (list, tuple, set, frozenset)):
        raise ConfigError(f"{where}: expected a list of principals, got {values!r}")
    if len(values) > MAX_PRINCIPALS:
        raise ConfigError(f"{where}: at most {MAX_PRINCIPALS} principals")
    return tuple(sorted({check_principal(v, where) for v in values}))
