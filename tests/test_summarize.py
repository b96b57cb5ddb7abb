"""`summarize`: summary.md files for a work/part/chapter tree, through a fake chat server."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.errors import ConfigError, LLMError
from rag_pg.source.parse import parse_document
from rag_pg.store.parents import missing_parents
from rag_pg.testing.chatserver import FakeChatServer, default_reply
from rag_pg.tree.llm import ChatClient
from rag_pg.tree.summarize import summarize

from .conftest import run_cli
from .test_hierarchy import EXPECTED

BOOK = Path(__file__).parent / "data" / "book"
W = "essai-phares"
P1 = f"{W}/partie-1-les-phares"
P2 = f"{W}/partie-2-la-navigation"
CH1 = f"{P1}/chapitre-01-la-lumiere"
SECTIONS = [CH1, f"{P1}/chapitre-02-les-gardiens", f"{P2}/chapitre-01-les-cartes",
            f"{P2}/chapitre-02-les-marees", f"{W}/preface"]  # folder order: parts before preface
SUMMARIES = [f"{s}/summary.md" for s in SECTIONS] + [f"{P1}/summary.md", f"{P2}/summary.md", f"{W}/summary.md"]


@pytest.fixture
def chat() -> Iterator[FakeChatServer]:
    with FakeChatServer() as server:
        yield server


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The book without its summaries: what an author has before running summarize."""
    target = tmp_path / "book"
    shutil.copytree(BOOK, target)
    for summary in target.rglob("summary.md"):
        summary.unlink()
    return target


def headings(prompt: str) -> list[str]:
    """The input labels of a summary prompt (one ``## title`` line per input)."""
    return [line for line in prompt.splitlines() if line.startswith("## ")]


def front(root: Path, rel: str) -> dict[str, Any]:
    return parse_document(rel, (root / rel).read_bytes()).front_matter


def test_bottom_up_writes_every_level_with_its_front_matter(tree, chat, db_url):
    with ChatClient(chat.url, "fake-chat") as client:
        report = summarize(tree, client)
    assert report.failures == [] and report.calls == 8 and sorted(report.generated) == sorted(SUMMARIES)
    assert report.generated == SUMMARIES  # chapters first, then parts, then the work
    for rel in SUMMARIES:
        meta = front(tree, rel)
        parent, level, node_type, _ = EXPECTED[rel]
        assert (meta.get("parent_source_file"), meta["level"], meta["node_type"]) == (parent, level, node_type)
        assert meta["inputs_hash"].startswith("sha256:") and meta["summary_mode"] == "bottom-up"
        assert meta["summary_model"] == "fake-chat"
    assert front(tree, f"{CH1}/summary.md")["title"] == "Chapitre I : la lumière (résumé)"
    assert front(tree, f"{P1}/summary.md")["title"] == "Partie 1 les phares (résumé)"
    prompts = chat.prompts()
    assert "Au dix-neuvième siècle, la lentille de Fresnel" in prompts[0]  # the chapter, from its source
    part = prompts[5]
    assert "Résume fidèlement la partie « Partie 1 les phares »" in part
    assert headings(part) == ["## Chapitre I : la lumière (résumé)", "## Chapitre II : les gardiens (résumé)"]
    assert "lentille de Fresnel" not in part  # the chapter summaries, not the sources
    assert headings(prompts[7]) == [
        "## Partie 1 les phares (résumé)", "## Partie 2 la navigation (résumé)", "## Préface (résumé)"]
    body = parse_document("x", (tree / CH1 / "summary.md").read_bytes()).content.strip()
    assert body == default_reply([{"content": prompts[0]}])
    with RagPG(db_url, Settings.load(environ={}, overrides={"embedding.provider": "none"})) as rag:
        assert rag.ingest(tree).failures == []
    with psycopg.connect(db_url) as conn:
        assert missing_parents(conn, "ragpg", "default") == []
        stored = dict(conn.execute("SELECT path, level FROM ragpg.document").fetchall())
    assert {p: stored[p] for p in SUMMARIES} == {p: EXPECTED[p][1] for p in SUMMARIES}


def test_only_summaries_whose_inputs_changed_are_regenerated(tree, chat):
    with ChatClient(chat.url, "fake-chat") as client:
        summarize(tree, client)
        before = {rel: (tree / rel).read_bytes() for rel in SUMMARIES}
        again = summarize(tree, client)
        assert again.calls == 0 and sorted(again.unchanged) == sorted(SUMMARIES)
        source = tree / CH1 / "source.md"
        text = source.read_text(encoding="utf-8")
        source.write_text(text.replace("level: 0\n", "level: 0\ntags: [x]\n"), encoding="utf-8")
        assert summarize(tree, client).calls == 0  # a front-matter edit is not an input
        source.write_text(source.read_text(encoding="utf-8") + "\nUn dernier paragraphe sur la lumière.\n",
                          encoding="utf-8")
        tail = summarize(tree, client)
        # the fake model summarises the first words only: same chapter summary, so the part's
        # inputs did not change and neither the part nor the work is regenerated
        assert tail.generated == [f"{CH1}/summary.md"] and tail.calls == 1
        source.write_text(source.read_text(encoding="utf-8").replace(
            "# Chapitre I : la lumière\n", "# Chapitre I : la lumière\n\nUn premier paragraphe ajouté.\n"),
            encoding="utf-8")
        changed = summarize(tree, client)
    assert changed.generated == [f"{CH1}/summary.md", f"{P1}/summary.md", f"{W}/summary.md"]
    assert changed.calls == 3
    for rel in SUMMARIES:
        if rel not in changed.generated:
            assert (tree / rel).read_bytes() == before[rel], rel


def test_direct_mode_builds_parts_from_sources_and_the_work_from_chapters(tree, chat):
    with ChatClient(chat.url, "fake-chat") as client:
        report = summarize(tree, client, mode="direct", lang="en")
    assert report.calls == 8 and report.failures == []
    prompts = chat.prompts()
    assert prompts[5].startswith('Summarise the part "Partie 1 les phares" of the work "Essai phares"')
    assert "lentille de Fresnel" in prompts[5]  # the part reads its chapters' sources
    assert headings(prompts[7]) == [  # every level-1 summary, no part summary
        "## Chapitre I : la lumière (summary)", "## Chapitre II : les gardiens (summary)",
        "## Chapitre I : les cartes (summary)", "## Chapitre II : les marées (summary)",
        "## Préface (summary)"]
    assert front(tree, f"{W}/summary.md")["summary_mode"] == "direct"


def test_a_failed_chapter_blocks_its_part_and_the_work(tree, chat):
    def reply(messages: list[dict[str, Any]]) -> str:
        prompt = str(messages[-1]["content"])
        return "" if "les gardiens" in prompt.split("---", 1)[0] else default_reply(messages)

    chat.reply = reply
    with ChatClient(chat.url, "fake-chat") as client:
        report = summarize(tree, client)
    assert [(f.path, f.kind) for f in report.failures] == [
        (f"{P1}/chapitre-02-les-gardiens/summary.md", "empty"),
        (f"{P1}/summary.md", "missing_input"),
        (f"{W}/summary.md", "missing_input"),
    ]
    assert not (tree / P1 / "summary.md").exists() and (tree / P2 / "summary.md").exists()
    chat.fault = "503"
    with ChatClient(chat.url, "fake-chat") as client, pytest.raises(LLMError) as caught:
        summarize(tree, client)
    assert caught.value.kind == "unavailable"


def test_hand_edits_to_title_and_extra_keys_survive_regeneration(tree, chat):
    with ChatClient(chat.url, "fake-chat") as client:
        summarize(tree, client)
        target = tree / P2 / "summary.md"
        text = target.read_text(encoding="utf-8")
        target.write_text(text.replace('title: "Partie 2 la navigation (résumé)"',
                                       'title: "Deuxième partie (résumé)"\nembed: false'), encoding="utf-8")
        report = summarize(tree, client, force=True)
    assert report.calls == 8
    meta = front(tree, f"{P2}/summary.md")
    assert meta["title"] == "Deuxième partie (résumé)" and meta["embed"] is False
    assert meta["level"] == 2 and meta["parent_source_file"] == f"{W}/summary.md"


def test_link_sources_adds_the_parent_to_source_files_that_lack_it(tree, chat):
    source = tree / CH1 / "source.md"
    original = source.read_text(encoding="utf-8")
    stripped = original.replace(f"parent_source_file: {CH1}/summary.md\n", "").replace("level: 0\n", "")
    source.write_text(stripped, encoding="utf-8")
    with ChatClient(chat.url, "fake-chat") as client:
        plain = summarize(tree, client, dry_run=True)
        assert plain.unlinked == [f"{CH1}/source.md"] and chat.calls == 0
        assert any("--link-sources" in w for w in plain.warnings)
        linked = summarize(tree, client, link_sources=True)
    assert linked.linked == [f"{CH1}/source.md"]
    meta = front(tree, f"{CH1}/source.md")
    assert (meta["parent_source_file"], meta["level"], meta["node_type"]) == (f"{CH1}/summary.md", 0, "source")
    assert meta["title"] == "Chapitre I : la lumière"
    after = source.read_text(encoding="utf-8")
    assert after.split("\n---\n", 1)[1] == original.split("\n---\n", 1)[1]  # the body is untouched


def test_dry_run_sends_and_writes_nothing(tree):
    report = summarize(tree, None, dry_run=True)
    assert report.generated == SUMMARIES and report.calls == 0
    assert list(tree.rglob("summary.md")) == []


def test_a_work_folder_given_as_root_is_refused(tree, chat):
    with ChatClient(chat.url, "m") as client, pytest.raises(ConfigError, match="looks like a work folder"):
        summarize(tree / W / "partie-1-les-phares", client)
    with pytest.raises(ConfigError, match="mode must be one of"):
        summarize(tree, None, mode="sideways", dry_run=True)


def test_cli_summarize(tree, chat, tmp_path):
    env = {"RAGPG_LLM_URL": chat.url, "RAGPG_LLM_MODEL": "fake-chat"}
    out = run_cli(["summarize", str(tree), "--json"], env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["calls"] == 8 and data["generated"] == SUMMARIES and data["failures"] == []
    out = run_cli(["summarize", str(tree)], env=env, cwd=tmp_path)
    assert out.returncode == 0 and "generated 0 summaries, 8 unchanged" in out.stdout
    calls = chat.calls
    out = run_cli(["summarize", str(tree), "--force"], env={"RAGPG_LLM_MODEL": "m"}, cwd=tmp_path)
    assert out.returncode == 2 and "no chat endpoint configured" in out.stderr
    assert chat.calls == calls and "Traceback" not in out.stderr
