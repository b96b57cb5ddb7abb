"""`ragpg eval`: metrics against hand-computed values, the questions file's errors, and the
command end to end on the shipped tldr-fr-mini set (JSON shape, details, history, CI gate)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import psycopg
import pytest

from rag_pg import RagPG, Settings
from rag_pg.admin.evaluate import load_questions, mean, metrics
from rag_pg.errors import ConfigError

from .conftest import run_cli

DATA = Path(__file__).parent / "data" / "tldr-fr-mini"


def test_metrics_by_hand():
    ranking = [("a.md", ""), ("b.md", ""), ("c.md", "")]
    assert metrics(ranking, ["a.md"]) == {"hit@1": 1.0, "hit@5": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0,
                                          "recall@10": 1.0}
    m = metrics(ranking, ["c.md", "z.md"])
    assert (m["hit@1"], m["hit@5"], m["mrr@10"], m["recall@10"]) == (0.0, 1.0, 1 / 3, 0.5)
    assert m["ndcg@10"] == pytest.approx((1 / math.log2(4)) / (1 + 1 / math.log2(3)))
    assert metrics([], ["a.md"]) == {"hit@1": 0.0, "hit@5": 0.0, "mrr@10": 0.0, "ndcg@10": 0.0,
                                     "recall@10": 0.0}
    late = [(f"x{i}.md", "") for i in range(10)] + [("a.md", "")]
    assert metrics(late, ["a.md"])["recall@10"] == 0.0  # rank 11 is outside @10


def test_anchor_entries_need_the_best_chunk_in_that_section():
    assert metrics([("a.md", "install")], ["a.md#install"])["hit@1"] == 1.0
    assert metrics([("a.md", "usage")], ["a.md#install"])["hit@1"] == 0.0
    # one relevant entry is credited once, even if its path shows up again
    assert metrics([("a.md", ""), ("a.md", "")], ["a.md", "b.md"])["recall@10"] == 0.5


def test_section_metrics_beside_file_metrics():
    """A path#anchor entry counts as its file at file level; at section level only the
    questions with anchored entries count, credited by a hit of that very section."""
    from rag_pg.admin.evaluate import Question, evaluate
    from rag_pg.models import Chunk, Hit

    def hit(path: str, anchor: str) -> Hit:
        return Hit(chunk=Chunk(document_path=path, document_title="", section="", anchor=anchor,
                               position=0, content="", token_count=0, content_hash=""), score=1.0)

    found = {"q1": [hit("a.md", "usage"), hit("a.md", "install")], "q2": [hit("b.md", "")]}
    questions = [Question("q1", ("a.md#install",)), Question("q2", ("b.md",))]
    report = evaluate(questions, ["keyword"], lambda q, mode, k: found[q], k=10)
    assert report["modes"]["keyword"]["hit@1"] == 1.0  # both files first
    assert report["section_questions"] == 1
    section = report["sections"]["keyword"]
    assert (section["hit@1"], section["hit@5"], section["mrr@10"]) == (0.0, 1.0, 0.5)
    assert report["queries"][0]["rankings"]["keyword"] == ["a.md#usage", "a.md#install"]
    plain = evaluate(questions[1:], ["keyword"], lambda q, mode, k: found[q])
    assert plain["sections"] == {} and plain["section_questions"] == 0


def test_mean_rounds_per_metric():
    assert mean([{"x": 1.0}, {"x": 0.0}, {"x": 0.0}]) == {"x": 0.3333}


@pytest.mark.parametrize("line,message", [
    ("{not json", ":2: invalid JSON"),
    ('{"query": "", "relevant": ["a.md"]}', ':2: "query"'),
    ('{"query": "q", "relevant": []}', ':2: "relevant"'),
    ('["q"]', ':2: "query"'),
])
def test_questions_file_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "ok", "relevant": ["./a.md"]}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_questions(path)


def test_questions_paths_are_cleaned(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"query": "ok", "relevant": ["./a.md", "b.md#x"]}\n\n', encoding="utf-8")
    assert load_questions(path)[0].relevant == ("a.md", "b.md#x")
    with pytest.raises(ConfigError, match="cannot read"):
        load_questions(tmp_path / "absent.jsonl")


@pytest.fixture
def mini(db_url, embed_server, tmp_path):
    corpus = tmp_path / "mini"
    shutil.copytree(DATA / "corpus", corpus)
    env = {"RAGPG_DATABASE_URL": db_url, "RAGPG_EMBEDDING_URL": embed_server.url}
    out = run_cli(["ingest", str(corpus), "--json"], env=env)
    assert json.loads(out.stdout)["documents_indexed"] == 157, out.stderr
    return env, corpus


def test_eval_json_details_history_and_gate(mini, db_url, tmp_path):
    env, corpus = mini
    questions = DATA / "questions.jsonl"
    out = run_cli(["eval", str(questions), "--json", "--details"], env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert list(report["modes"]) == ["vector", "keyword", "hybrid"]
    for values in report["modes"].values():
        assert list(values) == ["hit@1", "hit@5", "mrr@10", "ndcg@10", "recall@10"]
        assert all(0.0 <= v <= 1.0 for v in values.values())
    assert report["modes"]["keyword"]["ndcg@10"] > 0.5  # a lexical set: BM25 does well
    assert report["questions"] == 156 and len(report["queries"]) == 156
    first = report["queries"][0]
    assert first["query"] == load_questions(questions)[0].query
    assert set(first["rankings"]) == {"vector", "keyword", "hybrid"}
    ranked = first["rankings"]["keyword"]
    assert len(ranked) == len(set(ranked)) <= 10  # distinct documents
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT question_count, k, modes, metrics FROM ragpg.eval_run"
                           " WHERE id = %s", (report["run_id"],)).fetchone()
    assert row == (156, 10, ["vector", "keyword", "hybrid"], report["modes"])

    best = max(v["ndcg@10"] for v in report["modes"].values())
    gate = run_cli(["eval", str(questions), "--modes", "keyword", "--min-ndcg", str(best + 0.01)],
                   env=env, timeout=600)
    assert gate.returncode == 1 and "below --min-ndcg" in gate.stderr
    assert "ndcg@10" in gate.stdout and "keyword" in gate.stdout
    ok = run_cli(["eval", str(questions), "--modes", "keyword", "--min-ndcg", "0.1", "-k", "5", "--json"],
                 env=env, timeout=600)
    assert ok.returncode == 0 and set(json.loads(ok.stdout)["modes"]["keyword"]) == \
        {"hit@1", "hit@5", "mrr@5", "ndcg@5", "recall@5"}
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM ragpg.eval_run").fetchone() == (3,)


def test_eval_root_maps_paths(mini, tmp_path):
    env, corpus = mini
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"query": "getprop propriétés système Android",
                                     "relevant": ["mini/android/getprop.md"]}) + "\n", encoding="utf-8")
    out = run_cli(["eval", str(questions), "--root", str(corpus.parent), "--modes", "keyword",
                   "--json", "--details"], env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["queries"][0]["rankings"]["keyword"][0] == "mini/android/getprop.md"
    assert report["modes"]["keyword"]["hit@1"] == 1.0


def test_eval_usage_errors(mini, tmp_path):
    env, _ = mini
    bad = run_cli(["eval", str(DATA / "questions.jsonl"), "--modes", "fuzzy"], env=env)
    assert bad.returncode == 2 and "unknown mode" in bad.stderr
    missing = run_cli(["eval", str(tmp_path / "none.jsonl")], env=env)
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_eval_ranks_as_search_does_with_the_cap_it_reports(mini, db_url, embed_server, tmp_path):
    env, _ = mini
    questions = tmp_path / "q.jsonl"
    asked = load_questions(DATA / "questions.jsonl")[:4]
    questions.write_text("".join(json.dumps({"query": q.query, "relevant": list(q.relevant)}) + "\n"
                                 for q in asked), encoding="utf-8")
    settings = Settings.load(environ={}, overrides={"embedding.url": embed_server.url})
    for cap in (None, 2):
        args = ["eval", str(questions), "--modes", "keyword,hybrid", "--json", "--details"]
        out = run_cli(args + ([] if cap is None else ["--max-per-document", str(cap)]), env=env)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["max_per_document"] == cap and report["fusion"] == "adaptive"
        with RagPG(db_url, settings) as rag:
            for q in report["queries"]:
                for mode, ranked in q["rankings"].items():
                    hits = rag.search(q["query"], 10, mode=mode, max_per_document=cap)
                    assert ranked == [h.path for h in hits], (mode, q["query"])
        with psycopg.connect(db_url) as conn:
            stored = conn.execute("SELECT settings->'max_per_document' FROM ragpg.eval_run"
                                  " WHERE id = %s", (report["run_id"],)).fetchone()
        assert stored == (cap,)
    text = run_cli(["eval", str(questions), "--modes", "keyword", "--max-per-document", "1"], env=env)
    assert "max_per_document 1" in text.stdout and "fusion adaptive" in text.stdout
    zero = run_cli(["eval", str(questions), "--max-per-document", "0"], env=env)
    assert zero.returncode == 2 and "--max-per-document must be >= 1" in zero.stderr
