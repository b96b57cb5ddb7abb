"""The adaptive fusion (convex with per-query weights from each leg's decisiveness), without a
database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_pg.config.sections import RetrievalSettings
from rag_pg.errors import ConfigError
from rag_pg.search.fuse import adaptive, convex, decisiveness
from rag_pg.search.hits import Candidate, fuse
from rag_pg.search.plan import SearchPlan
from tests.test_fuse import grid, legs, positive_grid

values = st.lists(st.floats(-50, 50, allow_nan=False, allow_infinity=False), max_size=30)


def test_decisiveness_of_typical_lists():
    assert decisiveness([9.0, 0.0, 0.0, 0.0]) == 1.0  # a top alone above a flat tail
    assert decisiveness([3.0, 2.0, 1.0, 0.0]) == pytest.approx(2 / 3)  # evenly falling
    assert decisiveness([1.0, 0.99, 0.98, 0.0]) == pytest.approx(1 - (0.99 + 0.98) / 3)
    assert decisiveness([5.0, 5.0, 5.0]) == 0.0  # orders nothing
    assert decisiveness([4.0]) == 1.0  # the only candidate
    assert decisiveness([]) == 0.0


@given(values)
def test_decisiveness_is_in_unit_range_and_ignores_order(xs):
    d = decisiveness(xs)
    assert 0.0 <= d <= 1.0
    assert decisiveness(list(reversed(xs))) == pytest.approx(d, abs=1e-12)


@given(st.lists(grid, max_size=30), st.floats(0.01, 100), st.floats(-100, 100))
def test_decisiveness_ignores_scale_and_offset(xs, scale, offset):
    d = decisiveness(xs)
    assert decisiveness([x * scale + offset for x in xs]) == pytest.approx(d, abs=1e-6)


@given(legs())
def test_power_zero_is_convex(data):
    scores, ranks = data
    assert adaptive(scores, ranks, power=0) == convex(scores, ranks)


@given(legs(grid, positive_grid), st.floats(0.01, 100), st.floats(-100, 100),
       st.floats(0, 3))
def test_adaptive_ignores_each_legs_scale_and_offset(data, scale, offset, power):
    scores, ranks = data
    moved = {key: {leg: (v * scale + offset if leg == "keyword" else v) for leg, v in mine.items()}
             for key, mine in scores.items()}
    before = adaptive(scores, ranks, power=power)
    after = adaptive(moved, ranks, power=power)
    assert all(abs(a - b) < 1e-6 for (_, a), (_, b) in zip(before, after, strict=True))


@given(legs(), st.floats(0, 3))
def test_adaptive_never_ranks_an_item_below_one_it_beats_in_every_leg(data, power):
    scores, ranks = data
    fused = adaptive(scores, ranks, power=power)
    assert sorted(key for key, _ in fused) == sorted(scores)
    assert all(-1e-9 <= s <= 1 + 1e-9 for _, s in fused)
    position = {key: i for i, (key, _) in enumerate(fused)}
    for a in scores:
        for b in scores:
            if a != b and all(leg in scores[a] and (leg not in scores[b] or scores[a][leg] > scores[b][leg])
                              for leg in ("vector", "keyword")):
                assert position[a] < position[b], (a, b)


# Vector: A clear of the rest (0.90, then B 0.88, the others 0.80-0.81): decisive. Keyword: B
# first (10) but A (7) and four others (6-9) crowd just under it: indecisive.
SCORES = {
    "A": {"vector": 0.90, "keyword": 7.0}, "B": {"vector": 0.88, "keyword": 10.0},
    **{f"v{i}": {"vector": 0.80 + i / 1000} for i in range(6)},
    **{f"k{i}": {"keyword": 6.0 + i * 0.75} for i in range(5)}, "k_low": {"keyword": 1.0},
}


def _ranks(scores):
    ranks: dict[str, dict[str, int]] = {key: {} for key in scores}
    for leg in ("vector", "keyword"):
        found = sorted((key for key in scores if leg in scores[key]), key=lambda k: -scores[k][leg])
        for rank, key in enumerate(found, 1):
            ranks[key][leg] = rank
    return ranks


def test_the_decisive_leg_leads_where_fixed_weights_follow_the_crowded_one():
    ranks = _ranks(SCORES)
    vector = [s["vector"] for s in SCORES.values() if "vector" in s]
    keyword = [s["keyword"] for s in SCORES.values() if "keyword" in s]
    assert decisiveness(vector) > 0.8 > 0.5 > decisiveness(keyword)
    assert convex(SCORES, ranks)[0][0] == "B"
    assert adaptive(SCORES, ranks)[0][0] == "A"
    # swapping which leg is which swaps nothing but the names: the rule is the same for both
    swapped = {key: {("keyword" if leg == "vector" else "vector"): v for leg, v in mine.items()}
               for key, mine in SCORES.items()}
    assert adaptive(swapped, _ranks(swapped))[0][0] == "A"


def test_a_title_leg_keeps_its_share_and_flat_legs_fall_back_to_the_fixed_weights():
    scores = {key: dict(mine) for key, mine in SCORES.items()}
    scores["t"] = {"title": 0.6}
    ranks = _ranks(scores)
    ranks["t"] = {"title": 1}
    w = {"title": 0.5}
    by_convex = dict(convex(scores, ranks, weights=w, legs=("vector", "keyword", "title"),
                            absolute=("title",)))
    by_adaptive = dict(adaptive(scores, ranks, weights=w, legs=("vector", "keyword", "title"),
                                absolute=("title",)))
    assert by_adaptive["t"] == pytest.approx(by_convex["t"]) == pytest.approx(0.6 * 0.5 / 2.5)
    flat = {1: {"vector": 0.5, "keyword": 2.0}, 2: {"vector": 0.5, "keyword": 2.0}, 3: {"vector": 0.5}}
    flat_ranks = {1: {"vector": 1, "keyword": 1}, 2: {"vector": 2, "keyword": 2}, 3: {"vector": 3}}
    assert adaptive(flat, flat_ranks) == convex(flat, flat_ranks)
    with pytest.raises(ValueError):
        adaptive(flat, flat_ranks, power=-1)


def test_a_hybrid_plan_selects_the_adaptive_fusion_and_the_setting_accepts_it():
    rows = [Candidate(i, vector_rank=r, distance=1 - s["vector"]) if "keyword" not in s else
            Candidate(i, vector_rank=r, distance=1 - s["vector"], keyword_rank=kr,
                      keyword_score=s["keyword"])
            for i, (r, kr, s) in enumerate([(1, 2, SCORES["A"]), (2, 1, SCORES["B"])], start=1)]
    rows += [Candidate(10 + i, vector_rank=3 + i, distance=1 - SCORES[f"v{i}"]["vector"])
             for i in range(6)]
    rows += [Candidate(20 + i, keyword_rank=3 + i, keyword_score=SCORES[f"k{i}"]["keyword"])
             for i in range(5)] + [Candidate(30, keyword_rank=8, keyword_score=1.0)]

    def plan(fusion: str) -> SearchPlan:
        return SearchPlan(collection="default", k=10, mode="hybrid", query_text="q", fusion=fusion)

    assert fuse(rows, plan("convex"))[0][0] == 2
    assert fuse(rows, plan("adaptive"))[0][0] == 1
    assert RetrievalSettings(fusion="adaptive").fusion == "adaptive"
    with pytest.raises(ConfigError, match="adaptive"):
        RetrievalSettings(fusion="weighted")
