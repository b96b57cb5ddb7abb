"""E3: a tree of hostile files among good ones. Every file is classified (indexed, skipped
with a reason, or failed with one), the good documents are indexed, the run goes on, and a
rerun converges."""

from __future__ import annotations

import random
from pathlib import Path

import psycopg

from rag_pg import RagPG, Settings

from ..invariants import violations
from ..rows import values

GOOD = 5


def hostile_tree(root: Path) -> dict[str, str]:
    """The files and the class each must end in: indexed, skipped (the walk says why: empty,
    binary, not UTF-8) or failed (with the reason); "any" where either outcome is sound."""
    root.mkdir(parents=True)
    rng = random.Random(5)
    files: dict[str, tuple[bytes, str]] = {
        "empty.md": (b"", "skipped"),
        "blank.md": (b"   \n\t\n", "skipped"),
        "front-matter-only.md": (b"---\ntitle: Only\n---\n", "indexed"),
        "nul-bytes.md": (b"# NUL\n\nbefore\x00after\n", "skipped"),
        "invalid-utf8.md": (b"# Bad\n\n\xff\xfe\xfa broken\n", "skipped"),
        "utf16-bom.md": ("# Seize\n\nUTF-16 text\n".encode("utf-16"), "any"),
        "long-word.md": (b"# Word\n\n" + b"x" * 3000 + b" end\n", "indexed"),
        # about 2 MB of distinct words on one line: one chunk's tsvector would pass 1 MB
        "huge-tsvector.md": (("# Many words\n\n" + " ".join(
            f"w{rng.getrandbits(40):x}" for _ in range(160_000)) + "\n").encode(), "any"),
        "binary.md": (bytes(rng.getrandbits(8) for _ in range(4096)), "any"),
        "bad-front-matter.md": (b"---\n: [unclosed\n---\n# Body\n\ntext\n", "indexed"),
    }
    for i in range(GOOD):
        files[f"good/doc{i}.md"] = (f"# Good {i}\n\nA sound page number {i}.\n".encode(), "indexed")
    for rel, (data, _) in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return {rel: expected for rel, (_, expected) in files.items()}


def test_e3_hostile_files_are_classified_and_the_run_goes_on(db_url, embed_server, tmp_path, figure):
    expected = hostile_tree(tmp_path / "tree")
    settings = Settings().with_overrides(**{"embedding.url": embed_server.url})
    with RagPG(db_url, settings) as rag:
        report = rag.ingest(tmp_path / "tree")
        again = rag.ingest(tmp_path / "tree")
    failed = {f.path for f in report.failures}
    skipped = {s.path for s in report.skipped}
    with psycopg.connect(db_url) as conn:
        indexed = set(values(conn, "SELECT path FROM ragpg.document"))
    classes = {rel: ("indexed" if rel in indexed else "failed" if rel in failed else
                     "skipped" if rel in skipped else "unclassified") for rel in expected}
    wrong = {rel: got for rel, got in classes.items() if expected[rel] not in ("any", got)}
    assert "unclassified" not in classes.values(), classes
    assert wrong == {}, (wrong, [f"{f.path}: {f.error}" for f in report.failures])
    assert all(f"good/doc{i}.md" in indexed for i in range(GOOD))
    assert violations(db_url) == []
    assert again.documents_indexed == 0 and {f.path for f in again.failures} == failed  # converged
    figure("E3", f"{len(expected)} files ({len(expected) - GOOD} hostile): classified {len(expected)}/"
                 f"{len(expected)} ({sum(c == 'indexed' for c in classes.values())} indexed, {len(failed)} failed"
                 f" with a reason, {sum(c == 'skipped' for c in classes.values())} skipped), the good ones indexed,"
                 " the rerun converges", classes=classes,
           reasons={s.path: s.reason for s in report.skipped if s.path in expected})
