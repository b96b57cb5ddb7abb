"""What a question asks, for the keyword leg: its words, without the grammar of asking.

French builds a question by inverting verb and subject: "peut-on", "puis-je", "faut-il",
"existe-t-il", "utilise-t-il". The subject pronoun is a stop-word of ``ragpg.french`` but not of
the English and simple configurations, and the modal or existential verb that carries the
inversion ("peut", "puis", "faut", "exist") is kept by every stemmer, so BM25 scores it like a
subject word and ranks up any text that says "peut" or "faut". Those verbs go; a content verb
stays ("pourquoi Python utilise-t-il l'indentation": "utilise" is what is asked). Elisions
(``l'``, ``qu'``, ``jusqu'``, also after a typographic apostrophe) are cut off their word, for
the same reason: the English and simple configurations would keep ``l`` or ``qu``.

Interrogative words ("comment", "pourquoi", "quel") are kept: dropping them was measured to
cost nDCG on French FAQ and documentation questions (answers and headings say "comment ça
marche", "c'est pourquoi"), and BM25's idf already weighs them down where they are common.
Code between backticks is left as it is. Only the keyword leg reads the result: the embedding
model is given the question as it was typed.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]", re.UNICODE)
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'", "\u2018": "'", "\u00b4": "'"})

# l'arbre, qu'est-ce, jusqu'au, lorsqu'il: the elided article, pronoun or conjunction.
_ELISION = re.compile(
    r"\b(?:[cdjlmnst]|qu|jusqu|lorsqu|puisqu|quoiqu|quelqu)'(?=\w)", re.IGNORECASE)

# utilise-t-il, peut-on, dois-je: the subject pronoun after an inverted verb; the verb stays
# (it may be what the question is about: "pourquoi Python utilise-t-il l'indentation") unless
# it is a modal or an existential that only builds the question ("peut-on", "existe-t-il").
_INVERSION = re.compile(
    r"(\w+)-(?:t-)?(?:je|tu|il|elle|on|nous|vous|ils|elles|ce)\b", re.IGNORECASE)
_INVERTED_SCAFFOLDING = frozenset(
    "peut peux puis pouvons pouvez peuvent dois doit devons devez doivent faut existe existent"
    " est sont".split())

_CODE = re.compile(r"`[^`]*`")


def keyword_text(query: str) -> str:
    """The words of ``query`` the keyword leg should score: apostrophes unified, elisions cut,
    inverted subject pronouns and the modals they invert dropped, code spans untouched; the
    query itself when nothing would be left."""
    text = query.translate(_APOSTROPHES)
    parts: list[str] = []
    last = 0
    for code in _CODE.finditer(text):
        parts.append(_analyse(text[last:code.start()]))
        parts.append(code.group(0))
        last = code.end()
    parts.append(_analyse(text[last:]))
    analysed = " ".join(p for p in parts if p.strip())
    return analysed if _WORD.search(analysed) else query


def _analyse(prose: str) -> str:
    def inverted(match: re.Match[str]) -> str:
        verb = match.group(1)
        return " " if verb.lower() in _INVERTED_SCAFFOLDING else verb
    return " ".join(_INVERSION.sub(inverted, _ELISION.sub("", prose)).split())
