"""RRF fusion against a naive reference, without a database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rag_pg.fuse import rrf


def naive(rankings: dict[str, list[int]], k: int) -> dict[int, float]:
    scores: dict[int, float] = {}
    for ranked in rankings.values():
        for i, key in enumerate(ranked):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + i + 1)
    return scores


unique_lists = st.lists(st.integers(0, 50), unique=True, max_size=20)


@given(unique_lists, unique_lists, st.integers(0, 100))
def test_rrf_agrees_with_a_naive_reference(vector, keyword, k):
    fused = rrf({"vector": vector, "keyword": keyword}, k=k)
    expected = naive({"vector": vector, "keyword": keyword}, k)
    assert {key for key, _ in fused} == set(expected)
    for key, score in fused:
        assert abs(score - expected[key]) < 1e-12
    scores = [s for _, s in fused]
    assert scores == sorted(scores, reverse=True)


@given(unique_lists, unique_lists)
def test_rrf_is_deterministic_and_lists_each_key_once(vector, keyword):
    first = rrf({"vector": vector, "keyword": keyword})
    assert first == rrf({"vector": vector, "keyword": keyword})
    assert len({k for k, _ in first}) == len(first)


def test_found_by_both_beats_found_by_one():
    fused = rrf({"vector": [1, 2, 3], "keyword": [3, 4, 5]})
    assert fused[0][0] == 3


def test_weights_and_ties():
    assert rrf({"vector": [1], "keyword": [2]})[0][0] == 1  # tie: first retriever's order
    assert rrf({"vector": [1], "keyword": [2]}, weights={"vector": 1, "keyword": 2})[0][0] == 2
    assert rrf({}) == []


# -- weighted RRF, per-document capping, candidate rows -> hits (all without a database) ------

from rag_pg.fuse import cap_per_document  # noqa: E402
from rag_pg.search import SearchRequest, fuse, merge_chunks  # noqa: E402

weights = st.floats(0, 5, allow_nan=False)


@given(unique_lists, unique_lists, st.integers(0, 100), weights, weights)
def test_weighted_rrf_agrees_with_a_naive_reference(vector, keyword, k, wv, wk):
    fused = rrf({"vector": vector, "keyword": keyword}, k=k, weights={"vector": wv, "keyword": wk})
    expected: dict[int, float] = {}
    for w, ranked in ((wv, vector), (wk, keyword)):
        for i, key in enumerate(ranked):
            expected[key] = expected.get(key, 0.0) + w / (k + i + 1)
    assert {key: round(s, 12) for key, s in fused} == {key: round(s, 12) for key, s in expected.items()}
    assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)


def test_zero_weight_keeps_items_reachable_after_the_others():
    fused = rrf({"vector": [1, 2], "keyword": [3]}, weights={"vector": 1, "keyword": 0})
    assert fused == [(1, 1 / 61), (2, 1 / 62), (3, 0.0)]


def test_negative_weight_is_refused():
    import pytest

    with pytest.raises(ValueError):
        rrf({"vector": [1]}, weights={"vector": -1})


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1000)), max_size=40), st.integers(1, 4))
def test_cap_per_document_keeps_order_and_at_most_n_each(items, limit):
    kept = cap_per_document(items, lambda item: item[0], limit)
    counts: dict[int, int] = {}
    for doc, _ in kept:
        counts[doc] = counts.get(doc, 0) + 1
    assert all(n <= limit for n in counts.values())
    # order preserved, and an item is dropped only when its document was already full
    it = iter(items)
    seen: dict[int, int] = {}
    expected = []
    for doc, value in it:
        if seen.get(doc, 0) < limit:
            seen[doc] = seen.get(doc, 0) + 1
            expected.append((doc, value))
    assert kept == expected
    assert cap_per_document(items, lambda item: item[0], None) == items


def _row(chunk_id, vrank=None, dist=None, krank=None, kscore=None):
    return (chunk_id, vrank, dist, krank, kscore)


def _req(mode, **kw):
    return SearchRequest(collection="default", k=10, mode=mode, query_text="q", **kw)


def test_fuse_rows_per_mode_and_both_ranks_kept():
    rows = [_row(1, 1, 0.1, None, None), _row(2, 2, 0.2, 1, 9.0), _row(3, None, None, 2, 5.0)]
    assert fuse(rows, _req("vector")) == [(1, 0.9), (2, 0.8)]
    assert fuse(rows, _req("keyword")) == [(2, 9.0), (3, 5.0)]
    hybrid = fuse(rows, _req("hybrid"))
    assert [c for c, _ in hybrid] == [2, 1, 3]  # found by both legs first
    assert hybrid[0][1] == 1 / 62 + 1 / 61
    weighted = fuse(rows, _req("hybrid", weights={"vector": 0.2, "keyword": 1.0}))
    assert [c for c, _ in weighted] == [2, 3, 1]


def test_fuse_is_deterministic_under_ties():
    rows = [_row(5, 1, 0.3, None, None), _row(4, None, None, 1, 2.0)]
    assert [c for c, _ in fuse(rows, _req("hybrid"))] == [5, 4]  # tie: vector leg listed first
    assert [c for c, _ in fuse(list(reversed(rows)), _req("hybrid"))] == [5, 4]


def test_merge_chunks_drops_the_overlap_tail_and_marks_new_sections():
    chunks = [
        {"position": 0, "section": "A", "anchor": "a", "content": "one two three\n\nfour five six"},
        {"position": 1, "section": "A", "anchor": "a", "content": "five six\n\nseven eight"},
        {"position": 2, "section": "B", "anchor": "b", "content": "nine"},
    ]
    assert merge_chunks(chunks) == "one two three\n\nfour five six\n\nseven eight\n\n## B\n\nnine"
    # a first paragraph that is not the previous chunk's tail is kept
    other = [chunks[0], {**chunks[1], "content": "alpha beta\n\nseven eight"}]
    assert merge_chunks(other) == "one two three\n\nfour five six\n\nalpha beta\n\nseven eight"
