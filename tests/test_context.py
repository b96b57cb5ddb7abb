"""Citable context: numbered sources with path#anchor, French or English, never over budget."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pg import RagPG, Settings
from rag_pg.errors import ConfigError
from rag_pg.models import Chunk, Hit
from rag_pg.source.tokens import estimate_tokens
from rag_pg.tree.context import assemble, build_context, resolve_lang

from .conftest import run_cli

BOOK = Path(__file__).parent / "data" / "book"
LUMIERE = "essai-phares/partie-1-les-phares/chapitre-01-la-lumiere/source.md"


def hit(path: str, title: str, section: str, anchor: str, words: int, position: int = 0) -> Hit:
    content = " ".join(f"mot{i}" for i in range(words))
    chunk = Chunk(document_path=path, document_title=title, section=section, anchor=anchor,
                  position=position, content=content, token_count=estimate_tokens(content),
                  content_hash="x")
    return Hit(chunk=chunk, score=1.0 / (position + 1))


HITS = [
    hit("guide/a.md", "Guide", "Installer", "installer", 30),
    hit("guide/b.md", "Notes", "Notes", "", 20, 1),
    hit("guide/c.md", "Guide", "Élévation du thème", "élévation-du-thème", 40, 2),
]


def test_sources_are_numbered_with_title_section_and_path_anchor():
    ctx = assemble("How do I install it?", HITS, budget=10_000, lang="en")
    headers = [line for line in ctx.text.splitlines() if line.startswith("[Source")]
    assert headers == [
        '[Source 1: "Guide › Installer" — guide/a.md#installer]',
        '[Source 2: "Notes" — guide/b.md]',
        '[Source 3: "Guide › Élévation du thème" — guide/c.md#élévation-du-thème]',
    ]
    lines = ctx.text.splitlines()
    assert lines[lines.index(headers[0]) + 1] == HITS[0].chunk.content
    assert [s.n for s in ctx.sources] == [1, 2, 3] and ctx.omitted == 0
    assert ctx.text.index("[Source 3") < ctx.text.index("using only the sources above")
    assert ctx.text.rstrip().endswith("Question: How do I install it?")


def test_french_and_english_instructions():
    fr = assemble("Comment l'installer ?", HITS[:1], budget=10_000, lang="fr")
    en = assemble("How to install it?", HITS[:1], budget=10_000, lang="en")
    assert "uniquement sur les sources ci-dessus" in fr.text and "[Source n]" in fr.text
    assert "dis-le clairement" in fr.text and fr.text.rstrip().endswith("Question : Comment l'installer ?")
    assert "using only the sources above" in en.text and "say\nplainly" not in en.text
    assert "do not contain the answer, say plainly" in en.text
    assert resolve_lang(None, "Comment fonctionne la lentille de Fresnel ?") == "fr"
    assert resolve_lang(None, "How does the lens work?") == "en"
    assert resolve_lang("French", "How?") == "fr"
    with pytest.raises(ConfigError, match="fr or en"):
        resolve_lang("de", "Wie?")


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=120), min_size=0, max_size=8),
    budget=st.integers(min_value=1, max_value=700),
    lang=st.sampled_from(["fr", "en"]),
)
def test_never_over_budget_and_stops_at_the_first_source_that_does_not_fit(sizes, budget, lang):
    hits = [hit(f"d{i}.md", f"Doc {i}", f"Part {i}", f"part-{i}", n, i) for i, n in enumerate(sizes)]
    try:
        ctx = assemble("What is in the documents?", hits, budget=budget, lang=lang)
    except ConfigError as exc:
        assert "cannot hold the instructions" in str(exc)
        return
    assert estimate_tokens(ctx.text) == ctx.tokens <= budget
    kept = len(ctx.sources)
    assert [s.path for s in ctx.sources] == [h.path for h in hits[:kept]]  # a prefix, in rank order
    assert ctx.omitted == len(hits) - kept
    if kept < len(hits):  # the next one did not fit: the count of parts bounds the rounding slack
        bigger = assemble("What is in the documents?", hits[: kept + 1], budget=10**6, lang=lang)
        assert bigger.tokens + 1 + 2 * (kept + 1) > budget


def test_a_budget_too_small_for_the_instructions_is_a_clear_error():
    with pytest.raises(ConfigError, match="cannot hold the instructions and the question"):
        assemble("question", HITS, budget=20, lang="en")
    with pytest.raises(ConfigError, match="question is empty"):
        assemble("  ", HITS, budget=1000, lang="en")


def test_templates_are_overridable_from_the_config_file(db_url, tmp_path):
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "en.txt").write_text("Q: $question\nUse:\n$sources\nEND\n", encoding="utf-8")
    (tmp_path / "ragpg.toml").write_text('[context]\ntemplate_en = "tpl/en.txt"\nbudget = 900\n',
                                         encoding="utf-8")
    loaded = Settings.load(environ={}, cwd=tmp_path, overrides={"embedding.provider": "none"})
    with RagPG(db_url, loaded) as rag:
        rag.ingest(_book(tmp_path))
        ctx = build_context(rag, "lens rings of glass Fresnel", lang="en", mode="keyword")
    assert ctx.text.startswith("Q: lens rings of glass Fresnel\nUse:\n[Source 1: ")
    assert ctx.text.endswith("END\n") and ctx.budget == 900
    (tmp_path / "tpl" / "en.txt").write_text("no placeholders\n", encoding="utf-8")
    with RagPG(db_url, loaded) as rag, pytest.raises(ConfigError, match=r"\$sources and \$question"):
        build_context(rag, "lens", lang="en", mode="keyword")


def _book(tmp_path: Path) -> Path:
    target = tmp_path / "book"
    if not target.exists():
        shutil.copytree(BOOK, target)
    return target


def rag_for(db_url: str, **overrides: Any) -> RagPG:
    return RagPG(db_url, Settings.load(environ={}, overrides={"embedding.provider": "none", **overrides}))


def test_build_context_over_the_book(db_url, tmp_path):
    with rag_for(db_url) as rag:
        rag.ingest(_book(tmp_path))
        ctx = build_context(rag, "Qu'est-ce que la lentille de Fresnel ?", k=3)
    assert ctx.lang == "fr" and 1 <= len(ctx.sources) <= 3 and ctx.omitted == 0
    assert ctx.sources[0].header == (
        f'[Source 1: "Chapitre I : la lumière › La lentille à échelons" — {LUMIERE}#la-lentille-à-échelons]'
    )
    assert "Au dix-neuvième siècle, la lentille de Fresnel change tout." in ctx.text
    assert ctx.tokens <= ctx.budget == 4000


def test_cli_context_json_and_text(db_url, tmp_path):
    with rag_for(db_url) as rag:
        rag.ingest(_book(tmp_path))
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_PROVIDER": "none"}
    out = run_cli(["context", "gardiens du phare et relève", "-k", "4", "--budget", "260", "--json"],
                  env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["tokens"] <= 260 and estimate_tokens(data["prompt"]) <= 260
    assert 1 <= len(data["sources"]) < 4 and data["omitted"] == 4 - len(data["sources"])
    first = data["sources"][0]
    assert first["location"] == f"{first['path']}#{first['anchor']}" and first["anchor"]
    assert first["citation"] == "[Source 1]" and first["header"] in data["prompt"]
    assert "left out to stay within 260 tokens" in out.stderr
    out = run_cli(["context", "gardiens du phare", "--lang", "en"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Sources:\n\n[Source 1: ") and "Question: gardiens du phare" in out.stdout
    out = run_cli(["context", "gardiens", "--budget", "5"], env=env, cwd=tmp_path)
    assert out.returncode == 2 and "raise --budget" in out.stderr and "Traceback" not in out.stderr
