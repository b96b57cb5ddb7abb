"""The heading as a field of its own: how much of a question its candidates' titles hold.

The keyword leg scores a chunk's heading and body as one text (one tsvector), so a question
whose words are the heading's ("comment ajouter un bouton pour revenir en haut de la page" and
a section "Back-to-top button" aside, the usual case in documentation) gains no more than one
whose words are scattered through a long body. This signal looks at the fields apart: each
candidate's section heading and document title against the question's words, weighted by how
rare each word is among the candidates' own titles (a word every title holds, "Astro" in the
Astro docs, says nothing). It needs nothing but the candidates a search returned, so it adds
no SQL and reads no statistics; hits.py fuses it as a third leg.

Matching is on crude stems (lower case, accents folded, a plural ``s``/``x`` dropped, the
first six letters), which is enough for headings: "variables" and "variable", "préchargement"
and "précharger" meet; a wrong meeting costs little since every leg's vote is bounded.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

STEM_LENGTH = 6
#: Stems of the question a candidate's title fields must hold to score at all: one shared word
#: is weak evidence (a command titled "adb shell" shares "shell" with many descriptions), two
#: are a topic ("back-to-top button", "color palette toggle").
MIN_MATCHED = 2
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

# Words that carry no subject in a heading or a question, French and English (the text search
# configurations' stop-words, shortened to what headings and questions use).
_STOP = frozenset("""
    a à au aux avec ce ces cet cette comment d dans de des du elle en est et il ils j je l la le
    les leur lui ma mais me mes moi mon n ne nos notre nous on ou où par pas pour qu que quel
    quelle quels quelles qui s sa se ses son sur t ta te tes toi ton tu un une vos votre vous y
    faire fait peut puis dois faut pourquoi quand combien lequel laquelle
    an and are as at be by can do does for from how i in is it its my of on or that the this to
    what when where which who why with you your
""".split())


def stem(word: str) -> str:
    folded = "".join(ch for ch in unicodedata.normalize("NFKD", word.lower())
                     if not unicodedata.combining(ch))
    if len(folded) > 3 and folded[-1] in "sx":
        folded = folded[:-1]
    return folded[:STEM_LENGTH]


def stems(text: str) -> set[str]:
    """The content words of ``text`` as stems (stop-words dropped)."""
    return {stem(w) for w in _WORD.findall(text) if w.lower() not in _STOP}


def title_scores(query: str, titles: Mapping[int, Sequence[str]]) -> dict[int, float]:
    """Candidate -> the idf-weighted share of the query's stems that its title fields hold
    (``titles``: the section heading, then the document title; the heading counts fully, a
    stem only the document title holds counts half). Idf is over the candidates' own title
    fields. Candidates holding fewer than ``MIN_MATCHED`` of the query's stems (or all of them,
when the query has fewer) are left out."""
    wanted = stems(query)
    if not wanted:
        return {}
    fields = {key: [stems(text) for text in texts] for key, texts in titles.items()}
    df = _document_frequencies(set().union(*f) if f else set() for f in fields.values())
    n = max(len(fields), 1)
    weight = {s: math.log(1 + n / df[s]) if df.get(s) else math.log(1 + n) for s in wanted}
    # The stems are sets, whose order follows the process's string hashing: math.fsum adds
    # exactly, so the score is the same bits in every process (a CLI and a service agree).
    total = math.fsum(weight.values())
    scores: dict[int, float] = {}
    for key, parts in fields.items():
        heading = parts[0] if parts else set()
        rest = set().union(*parts[1:]) if len(parts) > 1 else set()
        if len(wanted & (heading | rest)) < min(MIN_MATCHED, len(wanted)):
            continue
        value = math.fsum(weight[s] for s in wanted & heading)
        value += 0.5 * math.fsum(weight[s] for s in (wanted & rest) - heading)
        if value > 0:
            scores[key] = value / total
    return scores


def _document_frequencies(sets: Iterable[set[str]]) -> dict[str, int]:
    df: dict[str, int] = {}
    for found in sets:
        for s in found:
            df[s] = df.get(s, 0) + 1
    return df
