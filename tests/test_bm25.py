"""BM25 in SQL: the formula (against a Python reference fed from the same rows), IDF and length
effects ts_rank lacks, statistics that follow ingest, and agreement with the bm25s package."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_pg import RagPG, Settings
from rag_pg.admin.evaluate import load_questions, mean, metrics
from rag_pg.search.bm25 import BM25Params, keyword_query

from .bm25_reference import rank, score
from .rows import records, value

DATA = Path(__file__).parent / "data" / "tldr-fr-mini"
LANGS = ("french", "english", "simple")


def keyword_rag(db_url: str, **overrides: Any) -> RagPG:
    settings = Settings.load(environ={}, overrides={"embedding.provider": "none", **overrides})
    return RagPG(db_url, settings)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return root


CORPUS = {
    "fr/sauvegarde.md": "---\nlang: fr\n---\n# Sauvegardes\n\nLa sauvegarde quotidienne de la base"
                        " utilise pg_dump. Une sauvegarde testée vaut mieux que deux sauvegardes"
                        " oubliées.\n",
    "fr/restauration.md": "---\nlang: fr\n---\n# Restauration\n\nPour restaurer une sauvegarde, utilisez"
                          " pg_restore sur une base vide. La restauration prend du temps.\n",
    "fr/élévation.md": "---\nlang: fr\n---\n# Élévation des privilèges\n\nL'élévation des droits passe"
                       " par sudo. Ne jamais se connecter en root.\n",
    "fr/long.md": "---\nlang: fr\n---\n# Journal\n\n" + " ".join(["la base de données tourne bien"] * 40)
                  + " sauvegarde\n",
    "en/backup.md": "---\nlang: en\n---\n# Backups\n\nBackups of the database run nightly with pg_dump;"
                    " restore them with pg_restore.\n",
    "en/pool.md": "---\nlang: en\n---\n# Pooling\n\nA connection pool keeps connections open.\n",
}


def reference_scores(db_url: str, query: str, params: BM25Params) -> dict[int, float]:
    """The Python formula (tests/bm25_reference.score) fed with the stored tsvectors' counts."""
    text = keyword_query(query).text
    with psycopg.connect(db_url) as conn:
        chunks = conn.execute(
            "SELECT c.id, d.language, c.token_count,"
            " (SELECT json_object_agg(lexeme, cardinality(positions)) FROM unnest(c.tsv))"
            " FROM ragpg.chunk c JOIN ragpg.document d ON d.id = c.document_id"
        ).fetchall()
        stats = {r["language"]: (float(r["chunks"]),
                                 max(float(r["tokens"]) / max(float(r["chunks"]), 1), 1.0))
                 for r in records(conn, "SELECT language, sum(chunk_count) AS chunks,"
                                        " sum(token_count) AS tokens FROM ragpg.document GROUP BY 1")}
        terms = {
            lang: dict(conn.execute(
                "SELECT lexeme, cardinality(positions) FROM unnest(to_tsvector(%s::regconfig, %s))",
                (f"ragpg.{lang}", text),
            ).fetchall())
            for lang in LANGS
        }
    out: dict[int, float] = {}
    for chunk_id, lang, length, counts in chunks:
        counts = counts or {}
        same = [c for c in chunks if c[1] == lang]
        df = {t: sum(1 for c in same if t in (c[3] or {})) for t in terms[lang]}
        n, avgdl = stats[lang]
        value = score(terms[lang], counts, length, n=n, avgdl=avgdl, df=df, params=params)
        if value > 0:
            out[int(chunk_id)] = value
    return out


# -- pure ------------------------------------------------------------------------------------


def test_keyword_query_quotes_every_word_and_keeps_repeats_for_scoring():
    kq = keyword_query("l'élévation & (root | sudo) !sudo <x> \x00 a_b")
    assert kq.prefilter == '"l" or "élévation" or "root" or "sudo" or "x" or "a" or "b"'
    assert kq.text == "l élévation root sudo sudo x a b"
    assert not keyword_query("&&& !!! ''' \x00")


def test_params_are_checked():
    with pytest.raises(ValueError):
        BM25Params(k1=-1)
    with pytest.raises(ValueError):
        BM25Params(b=1.5)


def test_reference_rank_prefers_rare_terms_and_short_documents():
    docs = [({"rare": 1}, 10), ({"common": 2}, 10), ({"common": 1}, 10), ({"x": 1}, 10)]
    ranked = rank({"rare": 1, "common": 1}, docs)
    assert [i for i, _ in ranked] == [0, 1, 2]  # rare once beats common twice (IDF)
    by_length = rank({"rare": 1}, [({"rare": 1}, 100), ({"rare": 1}, 10), ({"x": 1}, 10)])
    assert [i for i, _ in by_length] == [1, 0]  # same tf, the shorter document first


# -- SQL against the reference ---------------------------------------------------------------


@pytest.mark.parametrize("query", [
    "sauvegarde de la base", "restaurer pg_restore", "elevation privileges", "database backups",
    "connection pool connections", "base base base sauvegarde",
])
@pytest.mark.parametrize("k1,b", [(1.2, 0.75), (2.0, 0.3), (0.5, 1.0)])
def test_sql_bm25_equals_the_reference_formula(db_url, tmp_path, query, k1, b):
    root = write(tmp_path / "c", CORPUS)
    with keyword_rag(db_url, **{"retrieval.bm25_k1": k1, "retrieval.bm25_b": b}) as rag:
        rag.init()
        rag.ingest(root)
        hits = rag.search(query, 50, mode="keyword")
    expected = reference_scores(db_url, query, BM25Params(k1, b))
    got = {h.chunk_id: h.scores["keyword"] for h in hits}
    assert set(got) == set(expected)
    for chunk_id, want in expected.items():
        assert got[chunk_id] == pytest.approx(want, rel=1e-9)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert [h.ranks["keyword"] for h in hits] == list(range(1, len(hits) + 1))


def test_accents_folded_and_french_stemming(db_url, tmp_path):
    root = write(tmp_path / "c", CORPUS)
    with keyword_rag(db_url) as rag:
        rag.init()
        rag.ingest(root)
        assert rag.search("elevation", 1, mode="keyword")[0].path == "fr/élévation.md"
        assert rag.search("ÉLÉVATIONS", 1, mode="keyword")[0].path == "fr/élévation.md"
        assert rag.search("restaurations", 1, mode="keyword")[0].path == "fr/restauration.md"
        assert rag.search("la de les", 5, mode="keyword") == []  # French stop-words only


def test_idf_and_length_normalisation_rank_where_ts_rank_does_not(db_url, tmp_path):
    """The long page repeats common words; the short page has the rare one once."""
    root = write(tmp_path / "c", CORPUS)
    with keyword_rag(db_url) as rag:
        rag.init()
        rag.ingest(root)
        hits = rag.search("base sauvegarde", 3, mode="keyword")
    assert hits[0].path == "fr/sauvegarde.md"
    assert "fr/long.md" in [h.path for h in hits]
    assert hits[0].scores["keyword"] > [h for h in hits if h.path == "fr/long.md"][0].scores["keyword"]


def test_statistics_follow_ingest_in_the_same_snapshot(db_url, tmp_path):
    root = write(tmp_path / "c", CORPUS)
    query = "pg_dump sauvegarde"
    with keyword_rag(db_url) as rag:
        rag.init()
        rag.ingest(root)
        before = {h.path: h.scores["keyword"] for h in rag.search(query, 10, mode="keyword")}
        # five more documents mention "sauvegarde": N, df and avgdl move for every document
        write(root, {f"fr/extra{i}.md": f"---\nlang: fr\n---\n# Extra {i}\n\nUne sauvegarde de plus.\n"
                     for i in range(5)})
        rag.ingest(root)
        after = {h.path: h.scores["keyword"] for h in rag.search(query, 20, mode="keyword")}
        assert after["fr/sauvegarde.md"] != pytest.approx(before["fr/sauvegarde.md"])
        expected = reference_scores(db_url, query, BM25Params())
        hits = rag.search(query, 20, mode="keyword")
        assert {h.chunk_id: round(h.scores["keyword"], 9) for h in hits} == \
            {k: round(v, 9) for k, v in expected.items()}
        (root / "fr/extra0.md").unlink()
        rag.ingest(root, prune=True)
        pruned = rag.search(query, 20, mode="keyword")
        assert {h.chunk_id: round(h.scores["keyword"], 9) for h in pruned} == \
            {k: round(v, 9) for k, v in reference_scores(db_url, query, BM25Params()).items()}


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abc éè'\"&|!:*()<>\\-_\x00\u02bc\uff07日本語 "))
               | st.characters(), max_size=200))
def test_keyword_query_never_yields_unquoted_operators(text):
    kq = keyword_query(text)
    for part in kq.prefilter.split(" or ") if kq.prefilter else []:
        assert part.startswith('"') and part.endswith('"') and '"' not in part[1:-1]
        assert "\x00" not in part


# -- agreement with bm25s --------------------------------------------------------------------


def bm25s_ndcg(db_url: str, questions_file: Path, collection: str, params: BM25Params) -> float:
    """nDCG@10 of the bm25s package over the same tokens (each chunk's tsvector expanded back
    into its tokens; the query through to_tsvector in the chunks' configuration)."""
    bm25s = pytest.importorskip("bm25s")
    import numpy as np

    questions = load_questions(questions_file)
    with psycopg.connect(db_url) as conn:
        rows = records(conn,
            "SELECT d.path, c.anchor, (SELECT array_agg(u.lexeme) FROM unnest(c.tsv) u,"
            " generate_series(1, cardinality(u.positions))) AS tokens"
            " FROM ragpg.chunk c JOIN ragpg.document d ON d.id = c.document_id"
            " WHERE d.collection = %s ORDER BY c.id", (collection,))
        tokens = [
            value(conn, "SELECT array_agg(u.lexeme) FROM unnest(to_tsvector('ragpg.french', %s)) u,"
                        " generate_series(1, cardinality(u.positions))",
                  (keyword_query(q.query).text,)) or []
            for q in questions
        ]
    model = bm25s.BM25(k1=params.k1, b=params.b, method="lucene")
    model.index([list(r["tokens"] or ["\x01"]) for r in rows], show_progress=False)
    per = []
    for question, toks in zip(questions, tokens, strict=True):
        toks = [t for t in toks if t in model.vocab_dict]
        ranking: list[tuple[str, str]] = []
        if toks:
            values = model.get_scores(toks)
            for i in np.argsort(-values, kind="stable"):
                if values[i] <= 0 or len(ranking) >= 10:
                    break
                if rows[i]["path"] not in {p for p, _ in ranking}:
                    ranking.append((rows[i]["path"], rows[i]["anchor"]))
        per.append(metrics(ranking, question.relevant))
    return mean(per)["ndcg@10"]


def ragpg_ndcg(rag: RagPG, questions_file: Path, collection: str) -> float:
    per = []
    for q in load_questions(questions_file):
        hits = rag.search(q.query, 10, mode="keyword", collection=collection, max_per_document=1)
        per.append(metrics([(h.path, h.chunk.anchor) for h in hits], q.relevant))
    return mean(per)["ndcg@10"]


def _within_2_percent(db_url: str, root: Path, questions: Path) -> tuple[float, float]:
    with keyword_rag(db_url, **{"source.language": "french"}) as rag:
        rag.init()
        rag.ingest(root, collection="eval")
        ours = ragpg_ndcg(rag, questions, "eval")
    reference = bm25s_ndcg(db_url, questions, "eval", BM25Params())
    return ours, reference


def test_bm25_within_2_percent_of_bm25s_on_the_shipped_set(db_url):
    ours, reference = _within_2_percent(db_url, DATA / "corpus", DATA / "questions.jsonl")
    print(json.dumps({"ragpg": ours, "bm25s": reference}))
    assert ours >= reference * 0.98, (ours, reference)


TLDR = Path(os.environ.get("RAGPG_TLDR_FR", Path(__file__).parents[2] / "shared/data/tldr-fr"))


@pytest.mark.slow
@pytest.mark.skipif(not (TLDR / "questions.jsonl").is_file(), reason="shared/data/tldr-fr is absent")
@pytest.mark.skipif(os.environ.get("RAGPG_SLOW") != "1", reason="slow: set RAGPG_SLOW=1")
def test_bm25_within_2_percent_of_bm25s_on_tldr_fr(db_url):
    ours, reference = _within_2_percent(db_url, TLDR / "corpus", TLDR / "questions.jsonl")
    print(json.dumps({"ragpg": ours, "bm25s": reference}))
    assert ours >= reference * 0.98, (ours, reference)
