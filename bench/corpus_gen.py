#!/usr/bin/env python3
"""A small deterministic Markdown corpus for ragpg's own benchmark (stdlib only).

    corpus_gen.py generate --out DIR --docs 2000 [--seed 7] [--queries 100]
    corpus_gen.py mutate --corpus DIR --fraction 0.01 [--seed 1]

``generate`` writes ``DIR/corpus/**.md`` (nested folders, YAML front-matter, one H1, H2/H3
sections, paragraphs, lists and fenced code; half English, half French), a query set
``DIR/queries.jsonl`` (``qid``, ``query``, ``doc``: three rare words of one paragraph plus two
noise words) and prints one JSON summary line. The output depends only on the arguments.
``mutate`` rewrites one paragraph and appends one in ``fraction`` of the files (never a file
that labels a query) and prints the changed paths as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
from bisect import bisect
from itertools import accumulate
from pathlib import Path

EN = ("the of and to a in is that for it as with was on be by this are or from at an which not have"
      " but can all its also more when there these their than into such other may most only been has"
      " will would each between both after used about where through while over how under").split()
FR = ("le la les de des du et un une en dans pour que qui sur par est sont avec ne pas plus au aux ce"
      " cette ces il elle ils on nous vous se son sa ses leur leurs mais ou comme tout tous très être"
      " avoir fait peut entre après avant sans sous aussi même donc car élévation déjà où").split()
SYLLABLES = ("ka ri to ne su ma lo pe ti ra no mi sa de vo la ba ku zi fe ga ho ju ly ce qua tre"
             " pli gro sto fla bri cha dre vel mon tar lis gen por").split()
VOCAB = 12_000
TOPICS = 60


class Words:
    """A Zipf-like vocabulary: function words at the head, pseudo-words after them."""

    def __init__(self, rng: random.Random):
        seen: set[str] = set(EN) | set(FR)
        self.words: list[str] = []
        while len(self.words) < VOCAB:
            n = 2 + min(int(rng.expovariate(0.9)), 4)
            word = "".join(rng.choice(SYLLABLES) for _ in range(n))
            if word not in seen:
                seen.add(word)
                self.words.append(word)
        weights = [1.0 / (i + 2.7) ** 1.07 for i in range(VOCAB)]
        self.cum = list(accumulate(weights))
        self.topics = [rng.sample(self.words[200:], 40) for _ in range(TOPICS)]

    def draw(self, rng: random.Random) -> str:
        return self.words[bisect(self.cum, rng.random() * self.cum[-1])]


def _sentence(rng: random.Random, w: Words, lang: list[str], topic: list[str], rare: list[str],
              n: int) -> str:
    out: list[str] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35:
            out.append(rng.choice(lang))
        elif r < 0.45:
            out.append(rng.choice(topic))
        elif r < 0.47:
            out.append(rng.choice(rare))
        else:
            out.append(w.draw(rng))
    text = " ".join(out)
    return text[:1].upper() + text[1:] + "."


def paragraph(rng: random.Random, w: Words, lang: list[str], topic: list[str], rare: list[str]) -> str:
    words = rng.randint(20, 150)
    parts: list[str] = []
    while words > 0:
        n = min(words, rng.randint(6, 22))
        parts.append(_sentence(rng, w, lang, topic, rare, n))
        words -= n
    return " ".join(parts)


def document(rng: random.Random, w: Words, index: int) -> tuple[str, list[tuple[str, list[str]]]]:
    """Markdown text, and (paragraph, its words) pairs usable as query labels."""
    french = index % 2 == 1
    lang = FR if french else EN
    topic = w.topics[rng.randrange(TOPICS)]
    rare = [f"{rng.choice(w.words[4000:])}{rng.choice(SYLLABLES)}{index}" for _ in range(6)]
    title = " ".join(rng.choice(topic) for _ in range(3)).capitalize()
    tags = sorted({rng.choice(topic) for _ in range(3)})
    lines = ["---", f"title: {title}", f"tags: [{', '.join(tags)}]",
             f"date: 2026-{1 + index % 12:02d}-{1 + index % 28:02d}",
             f"lang: {'fr' if french else 'en'}", "---", "", f"# {title}", ""]
    labels: list[tuple[str, list[str]]] = []
    for s in range(rng.randint(2, 7)):
        heading = " ".join(rng.choice(topic) for _ in range(rng.randint(1, 3))).capitalize()
        lines += [f"{'###' if s and rng.random() < 0.3 else '##'} {heading} {s}", ""]
        for _ in range(rng.randint(1, 5)):
            r = rng.random()
            if r < 0.08:
                lines += ["```python", f"def {rng.choice(topic)}_{s}(x):", "    return x * 2", "```", ""]
            elif r < 0.18:
                lines += [f"- {_sentence(rng, w, lang, topic, rare, rng.randint(3, 9))}"
                          for _ in range(rng.randint(2, 5))] + [""]
            else:
                text = paragraph(rng, w, lang, topic, rare)
                lines += [text, ""]
                labels.append((text, text.rstrip(".").split()))
    return "\n".join(lines), labels


def rel_path(rng: random.Random, index: int) -> str:
    depth = rng.randint(1, 3)
    parts = [f"{'abcdefgh'[rng.randrange(8)]}{rng.randrange(6)}" for _ in range(depth)]
    return "/".join(parts) + f"/doc-{index:06d}.md"


def rarest(words: list[str], w: Words, rank: dict[str, int], n: int = 3) -> list[str]:
    cleaned = sorted({x.strip(".,").lower() for x in words if x.strip(".,").isalnum()},
                     key=lambda x: (-rank.get(x, VOCAB + 1), x))
    return cleaned[:n]


def generate(out: Path, docs: int, seed: int, queries: int) -> dict[str, object]:
    rng = random.Random(seed)
    w = Words(random.Random(seed + 1))
    rank = {word: i for i, word in enumerate(w.words)}
    rank.update({word.lower(): -1 for word in EN + FR})
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    qrng = random.Random(seed + 2)
    wanted = set(qrng.sample(range(docs), min(queries, docs)))
    total = 0
    rows: list[dict[str, object]] = []
    for i in range(docs):
        text, labels = document(random.Random(rng.getrandbits(64)), w, i)
        rel = rel_path(rng, i)
        target = corpus / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        target.write_bytes(data)
        total += len(data)
        if i in wanted and labels:
            _, words = qrng.choice(labels)
            terms = rarest(words, w, rank) + [qrng.choice(EN + FR), w.draw(qrng)]
            qrng.shuffle(terms)
            rows.append({"qid": len(rows), "query": " ".join(terms), "doc": rel})
    with (out / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {"docs": docs, "bytes": total, "queries": len(rows), "seed": seed}


def mutate(corpus: Path, fraction: float, seed: int, protected: set[str]) -> list[str]:
    rng = random.Random(seed)
    files = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.md"))
    candidates = [f for f in files if f not in protected]
    count = max(1, round(len(files) * fraction))
    changed = sorted(rng.sample(candidates, min(count, len(candidates))))
    for rel in changed:
        path = corpus / rel
        lines = path.read_text(encoding="utf-8").split("\n")
        body = [i for i, ln in enumerate(lines) if ln and ln[0].isalpha()]
        if body:
            lines[rng.choice(body)] = f"Rewritten paragraph {rng.getrandbits(32):x} about freshness."
        lines += ["", f"Appended paragraph {rng.getrandbits(32):x} with new words.", ""]
        path.write_text("\n".join(lines), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--out", required=True, type=Path)
    g.add_argument("--docs", type=int, default=2000)
    g.add_argument("--seed", type=int, default=7)
    g.add_argument("--queries", type=int, default=100)
    m = sub.add_parser("mutate")
    m.add_argument("--corpus", required=True, type=Path)
    m.add_argument("--fraction", type=float, default=0.01)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--queries", type=Path, help="never change a file that labels one of these queries")
    a = ap.parse_args(argv)
    if a.cmd == "generate":
        print(json.dumps(generate(a.out, a.docs, a.seed, a.queries)))
    else:
        protected: set[str] = set()
        if a.queries and a.queries.exists():
            with a.queries.open(encoding="utf-8") as fh:
                protected = {json.loads(ln)["doc"] for ln in fh if ln.strip()}
        print(json.dumps(mutate(a.corpus, a.fraction, a.seed, protected)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
