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
