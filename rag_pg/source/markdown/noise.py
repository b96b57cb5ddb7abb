"""Text that is not prose for a reader: long URLs, data URIs, base64 and other blobs.

Documentation pages carry them ("try it online" links whose URL holds kilobytes of base64, an
inline image as a data URI, a minified line): a reader skips them, a model does not. Such a
span is kept in the chunk as written (a citation shows the page's text) but weighs what its
short form weighs in the chunk's size budget, so it never fills a chunk of its own, and the
text sent to the embedder holds the short form only (``quiet``), so it cannot drive the
vector or push the prose past the model's window.
"""

from __future__ import annotations

import re

# A URL longer than this keeps its scheme and host; a shorter one is read as it is.
LONG_URL = 80
# A run of this many characters without a space or a sentence's punctuation is a blob.
LONG_BLOB = 80

_SPANS = re.compile(
    r"(?P<data>data:[\w.+/-]+(?:;[\w=.+-]+)*,[^\s)\]\"'>]+)"
    rf"|(?P<url>(?P<origin>(?:https?|ftp)://[^\s/)\]\"'>]+)[^\s)\]\"'>]{{{LONG_URL},}})"
    rf"|(?P<blob>[A-Za-z0-9+/=_%-]{{{LONG_BLOB},}})"
)


def _short(match: re.Match[str]) -> str:
    if match.group("data"):
        return "data:…"
    if match.group("url"):
        return f"{match.group('origin')}/…"
    return "…"


def quiet(text: str) -> str:
    """``text`` with each non-prose span in its short form (``https://host/…``, ``data:…``, ``…``)."""
    return _SPANS.sub(_short, text) if len(text) > min(LONG_URL, LONG_BLOB) else text


def weight(text: str) -> int:
    """The characters ``text`` counts for in a chunk's budget: its quiet form's."""
    return len(quiet(text))


def noise_share(text: str) -> float:
    """The share of ``text``'s characters that are non-prose spans (0 for none)."""
    return 1 - weight(text) / len(text) if text else 0.0
