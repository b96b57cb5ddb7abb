"""Guesses a document's language (french / english / simple) to pick its text search config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

LANGUAGES = ("french", "english", "simple")

_ALIASES = {
    "fr": "french", "fra": "french", "fre": "french", "french": "french", "français": "french",
    "francais": "french", "fr-fr": "french", "fr_fr": "french", "fr-ca": "french",
    "en": "english", "eng": "english", "english": "english", "en-us": "english",
    "en-gb": "english", "en_us": "english", "en_gb": "english",
}

_FRENCH = frozenset(
    "le la les un une des du de et est sont dans pour pas que qui sur avec ce cette ces au aux"
    " il elle ils elles nous vous leur leurs son sa ses mais ou où donc par plus très être avoir"
    " fait été comme tout tous sans sous entre aussi peut".split()
)
_ENGLISH = frozenset(
    "the a an and is are of to in for on with that this these those it its be was were by from"
    " as at or not but have has had which you your can will would should there their they".split()
)
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def normalise(value: str) -> str | None:
    """Map a front-matter or setting value (``fr``, ``French``...) to a config name."""
    return _ALIASES.get(value.strip().lower()) if value else None


def detect(text: str, front_matter: Mapping[str, Any] | None = None, default: str = "auto") -> str:
    """The text search configuration for a document: front-matter ``lang`` first, then the
    setting when it is not ``auto``, then a stop-word count over the first 2,000 words."""
    for key in ("lang", "language"):
        value = (front_matter or {}).get(key)
        if isinstance(value, str) and normalise(value):
            return normalise(value) or "simple"
    if default != "auto":
        return normalise(default) or (default if default in LANGUAGES else "simple")
    french = english = 0
    for count, match in enumerate(_WORD.finditer(text)):
        if count >= 2000:
            break
        word = match.group(0).lower()
        french += word in _FRENCH
        english += word in _ENGLISH
    if french == english == 0:
        return "simple"
    return "french" if french >= english else "english"
