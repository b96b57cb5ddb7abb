#!/usr/bin/env python3
"""How many chunks of a tree are not prose (long URLs, data URIs, blobs) for the models.

    .venv/bin/python bench/noise_chunks.py ROOT [ROOT ...] [--size 300] [--overlap 50]

Chunks every Markdown file of each ROOT as an ingest would (default chunk settings) and
counts: the chunks holding a long URL or a blob; the chunks with no prose of their own
(fewer than 3 words outside such spans: a link cut out of its paragraph, a piece of a blob);
the chunks whose embedded text (``tokens.embedding_text``) is more than half such spans.
Run it from a checkout of the version to measure: it uses that checkout's chunker and
embedding text, and its own copy of the measure (``rag_pg.source.markdown.noise``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# The measure, copied so that an older checkout's chunker can be measured with it.
_SPANS = re.compile(r"data:[\w.+/-]+(?:;[\w=.+-]+)*,[^\s)\]\"'>]+"
                    r"|(?:https?|ftp)://[^\s/)\]\"'>]+[^\s)\]\"'>]{80,}|[A-Za-z0-9+/=_%-]{80,}")


def noisy_chars(text: str) -> int:
    return sum(len(m.group(0)) for m in _SPANS.finditer(text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--size", type=int, default=300)
    parser.add_argument("--overlap", type=int, default=50)
    args = parser.parse_args()
    sys.path.insert(0, str(Path.cwd()))
    from rag_pg.source.chunk import Chunker
    from rag_pg.source.parse import parse_document
    from rag_pg.source.tokens import embedding_text

    chunker = Chunker(args.size, args.overlap)
    for root in args.roots:
        chunks = holding = no_prose = embedded_noise = 0
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".md", ".mdx") and p.is_file()):
            relative = path.relative_to(root).as_posix()
            try:
                document = parse_document(relative, path.read_bytes())
            except Exception:  # noqa: BLE001 - a file the parser refuses is not measured
                continue
            for chunk in chunker.chunk(document):
                chunks += 1
                holding += noisy_chars(chunk.content) > 0
                no_prose += len(_SPANS.sub(" ", chunk.content).split()) < 3
                text = embedding_text(chunk)
                embedded_noise += noisy_chars(text) * 2 > len(text)
        print(f"{root}: {chunks} chunks, {holding} hold a long URL or blob, {no_prose} have no"
              f" prose of their own ({100 * no_prose / max(chunks, 1):.2f} %), {embedded_noise}"
              f" are embedded as mostly non-prose ({100 * embedded_noise / max(chunks, 1):.2f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
