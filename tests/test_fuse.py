"""RRF fusion against a naive reference, without a database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_pg.config.sections import FUSIONS
from rag_pg.search.fuse import rrf


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

from rag_pg.search.fuse import cap_per_document  # noqa: E402
from rag_pg.search.hits import Candidate, fuse, merge_chunks  # noqa: E402
from rag_pg.search.plan import SearchPlan  # noqa: E402

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
    return Candidate(chunk_id, vector_rank=vrank, distance=dist, keyword_rank=krank, keyword_score=kscore)


def _req(mode, **kw):
    return SearchPlan(**{"collection": "default", "k": 10, "mode": mode, "query_text": "q", "fusion": "rrf",
                         **kw})


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


def _doc_row(chunk_id, document_id, vrank, krank):
    return Candidate(chunk_id, vector_rank=vrank, distance=0.1 * vrank, keyword_rank=krank,
                     keyword_score=10.0 / krank, document_id=document_id, path=f"d{document_id}.md")


def test_a_document_first_in_both_legs_through_different_chunks_stays_first_when_capped():
    """Document 1's best vector chunk (10) is its third keyword chunk and its best keyword
    chunk (11) its third vector chunk; document 2's chunk is second in both legs. Fused per
    chunk, chunk 10 keeps both terms and document 1 stays first under a cap of 1 (capping
    each leg first would leave chunk 10 one term and put document 2 first)."""
    from rag_pg.search.hits import shape

    rows = [_doc_row(10, 1, 1, 3), _doc_row(11, 1, 3, 1), _doc_row(20, 2, 2, 2)]
    for plan in (_req("hybrid", max_per_document=1, k=1),
                 _req("hybrid", max_per_document=1, k=1, fusion="convex")):
        hits = shape(rows, plan)
        assert [(h.document_id, h.chunk_id) for h in hits] == [(1, 10)], plan.fusion
    assert [h.chunk_id for h in shape(rows, _req("hybrid", max_per_document=1))] == [10, 20]


# -- rank-based RRF and the convex (score-aware) fusion ----------------------------------------

from rag_pg.search.fuse import convex, convex_parts, rrf_ranks  # noqa: E402

finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False)
# Scores on a 0.01 grid for the scale and offset properties: two floats closer than the
# rounding of ``x * scale + offset`` (0 and 6e-178, shifted by 1) become equal once moved,
# which changes the list itself, not how a fusion reads it.
grid = st.integers(-5000, 5000).map(lambda i: i / 100)
positive_grid = st.integers(1, 4000).map(lambda i: i / 100)
bm25_like = st.floats(0.01, 40)


@st.composite
def legs(draw, vector_scores=finite, keyword_scores=bm25_like):
    """Two legs' candidate lists over chunk ids: {id: {leg: raw score}} and {id: {leg: rank}}
    (ranks as each leg numbers them: by score, best first, ties by id)."""
    vector = draw(st.dictionaries(st.integers(0, 30), vector_scores, max_size=15))
    keyword = draw(st.dictionaries(st.integers(0, 30), keyword_scores, max_size=15))
    scores: dict[int, dict[str, float]] = {}
    ranks: dict[int, dict[str, int]] = {}
    for leg, values in (("vector", vector), ("keyword", keyword)):
        for rank, (key, value) in enumerate(sorted(values.items(), key=lambda kv: (-kv[1], kv[0])), 1):
            scores.setdefault(key, {})[leg] = value
            ranks.setdefault(key, {})[leg] = rank
    return scores, ranks


@given(unique_lists, unique_lists, st.integers(0, 100), weights, weights)
def test_rrf_on_the_legs_ranks_is_rrf_on_their_lists(vector, keyword, k, wv, wk):
    ranks: dict[int, dict[str, int]] = {}
    for leg, ranked in (("vector", vector), ("keyword", keyword)):
        for rank, key in enumerate(ranked, 1):
            ranks.setdefault(key, {})[leg] = rank
    w = {"vector": wv, "keyword": wk}
    by_ranks = dict(rrf_ranks(ranks, k=k, weights=w))
    by_lists = dict(rrf({"vector": vector, "keyword": keyword}, k=k, weights=w))
    assert by_ranks.keys() == by_lists.keys()
    assert all(abs(by_ranks[key] - by_lists[key]) < 1e-12 for key in by_ranks)


@given(legs(), weights, weights)
def test_convex_scores_are_a_weighted_mean_in_unit_range_best_first(data, wv, wk):
    scores, ranks = data
    fused = convex(scores, ranks, weights={"vector": wv, "keyword": wk})
    assert sorted(key for key, _ in fused) == sorted(scores)
    assert all(-1e-12 <= s <= 1 + 1e-12 for _, s in fused)
    assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)
    assert fused == convex(dict(reversed(list(scores.items()))), ranks,
                           weights={"vector": wv, "keyword": wk})  # input order is irrelevant


@given(legs(grid, positive_grid), st.floats(0.01, 100), st.floats(-100, 100))
def test_convex_ignores_each_legs_scale_and_offset(data, scale, offset):
    """Only the spread within a leg's list counts: BM25 and cosine share no unit."""
    scores, ranks = data
    moved = {key: {leg: (v * scale + offset if leg == "keyword" else v) for leg, v in mine.items()}
             for key, mine in scores.items()}
    before = convex(scores, ranks)
    after = convex(moved, ranks)
    assert [key for key, _ in before] == [key for key, _ in after] or \
        all(abs(a - b) < 1e-9 for (_, a), (_, b) in zip(before, after, strict=True))


@given(legs())
def test_convex_never_ranks_an_item_below_one_it_matches_or_beats_in_every_leg(data):
    scores, ranks = data
    position = {key: i for i, (key, _) in enumerate(convex(scores, ranks))}
    for a in scores:
        for b in scores:
            if a != b and all(leg in scores[a] and (leg not in scores[b] or scores[a][leg] > scores[b][leg])
                              for leg in ("vector", "keyword")):
                assert position[a] < position[b], (a, b)


@given(legs(grid, positive_grid), st.floats(0.01, 100))
def test_a_leg_from_zero_ignores_its_scale_and_how_deep_its_list_was_cut(data, scale):
    """BM25 has a true zero: divided by its best score, a candidate's part neither follows the
    leg's unit nor moves when a weaker candidate joins the list (min-max would rescale all)."""
    scores, ranks = data
    scaled = {key: {leg: (v * scale if leg == "keyword" else v) for leg, v in mine.items()}
              for key, mine in scores.items()}
    parts = convex_parts(scores, from_zero=("keyword",))
    assert all(abs(parts[key].get("keyword", 0) - mine.get("keyword", 0)) < 1e-9
               for key, mine in convex_parts(scaled, from_zero=("keyword",)).items())
    keyword = [mine["keyword"] for mine in scores.values() if "keyword" in mine]
    if not keyword or max(keyword) <= 0:
        return
    deeper = {**scores, "tail": {"keyword": min(keyword) / 2}}
    after = convex_parts(deeper, from_zero=("keyword",))
    assert all(abs(after[key].get("keyword", 0) - parts[key].get("keyword", 0)) < 1e-12
               for key in scores)
    assert 0 < after["tail"]["keyword"] <= min(p["keyword"] for p in parts.values() if "keyword" in p)


def test_convex_follows_a_decisive_leg_where_rrf_sees_only_ranks():
    """Keyword: chunk 1 scores 30, everything else ~1; vector: a flat list. RRF sees three
    chunks with the same ranks (1 + 3, 2 + 2, 3 + 1) and the tie goes to the vector leg's
    first; the convex fusion keeps the decisive keyword winner."""
    scores = {1: {"keyword": 30.0, "vector": 0.80}, 2: {"keyword": 1.2, "vector": 0.81},
              3: {"keyword": 1.0, "vector": 0.82}, 4: {"vector": 0.79}}
    ranks = {1: {"keyword": 1, "vector": 3}, 2: {"keyword": 2, "vector": 2},
             3: {"keyword": 3, "vector": 1}, 4: {"vector": 4}}
    assert rrf_ranks(ranks)[0][0] == 3
    assert convex(scores, ranks)[0][0] == 1


# -- each leg's part of a hit's fused score ----------------------------------------------------

@pytest.mark.parametrize("fusion", FUSIONS)
def test_a_hits_parts_are_its_fusions_own_and_sum_to_its_score(fusion):
    """The parts are what the fusion added up, not a formula of another fusion: for RRF
    ``weight / (k + rank)``, for convex a leg's weight share times its normalised score."""
    from rag_pg.search.hits import shape

    rows = [_row(1, 1, 0.1, 2, 3.0), _row(2, 2, 0.15, 1, 9.0), _row(3, 3, 0.5, None, None),
            _row(4, None, None, 3, 1.0)]
    hits = shape(rows, _req("hybrid", fusion=fusion))
    for hit in hits:
        assert set(hit.parts) == set(hit.ranks)
        assert sum(hit.parts.values()) == pytest.approx(hit.score, abs=1e-12)
    by_id = {h.chunk_id: h for h in hits}
    if fusion == "rrf":
        assert by_id[1].parts == {"vector": 1 / 61, "keyword": 1 / 62}
    else:  # BM25 is scaled by the keyword leg's best (chunk 2, BM25 9.0): chunk 4 (BM25 1.0)
        # keeps a ninth of chunk 2's part, where min-max would have put the list's worst at 0
        assert by_id[4].parts["keyword"] == pytest.approx(by_id[2].parts["keyword"] / 9)
        assert by_id[2].parts["keyword"] > by_id[1].parts["keyword"] > by_id[4].parts["keyword"] > 0
    if fusion == "convex":  # equal weights: the keyword leg's best holds half the total
        assert by_id[2].parts["keyword"] == pytest.approx(0.5)


def test_single_leg_hits_have_their_score_as_their_one_part():
    from rag_pg.search.hits import shape

    rows = [_row(1, 1, 0.1, 2, 3.0), _row(2, None, None, 1, 9.0)]

    assert [h.parts for h in shape(rows, _req("vector"))] == [{"vector": 0.9}]
    assert [h.parts for h in shape(rows, _req("keyword"))] == [{"keyword": 9.0}, {"keyword": 3.0}]
