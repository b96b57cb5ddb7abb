"""A hit's clickable link: the site's URL of a page section, from the configured template.

``"https://fr.vuejs.org/{path_noext}.html#{anchor}"`` with ``{path}`` (the document's path
under the root), ``{path_noext}`` (without its extension), ``{anchor}`` and ``{page}`` (the
page number of a converted PDF's chunk, whose anchor is ``page=N``; empty elsewhere). A preamble hit
(empty anchor) gets the page's URL without its ``#``. The template is checked once, when
read, so a typo fails at configuration time rather than on every hit.
"""

from __future__ import annotations

import posixpath
import re
import string
from urllib.parse import quote

FIELDS = ("path", "path_noext", "anchor", "page")
_PAGE = re.compile(r"page=(\d+)")


def check_template(template: str) -> str:
    """The template itself, or ValueError naming the unknown or malformed field."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as error:
        raise ValueError(f"citation url template {template!r}: {error}") from None
    for name in fields:
        if name not in FIELDS:
            raise ValueError(
                f"citation url template {template!r}: unknown field {{{name}}} "
                f"(expected {', '.join('{' + f + '}' for f in FIELDS)})"
            )
    return template


def citation_url(template: str, path: str, anchor: str) -> str:
    """Path segments and anchor percent-encoded as a URL needs them (accents, spaces)."""
    stem, _ = posixpath.splitext(path)
    url = template.format(
        path=quote(path, safe="/"),
        path_noext=quote(stem, safe="/"),
        anchor=quote(anchor, safe="="),  # "=" is legal in a fragment: #page=7 opens a PDF's page
        page=page.group(1) if (page := _PAGE.fullmatch(anchor)) else "",
    )
    return url[:-1] if not anchor and url.endswith("#") else url
