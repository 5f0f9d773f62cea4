"""Reciprocal rank fusion (Cormack et al. 2009): scores, ties, edge cases."""

from __future__ import annotations

import pytest

from workers.retrieval.rrf import reciprocal_rank_fusion


def test_scores_are_sums_of_reciprocal_ranks() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["c", "a"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)


def test_order_is_by_descending_score() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]])
    assert [d for d, _ in fused] == ["a", "c", "b", "d"]
    scores = [s for _, s in fused]
    assert scores == sorted(scores, reverse=True)


def test_a_document_in_both_lists_beats_the_top_of_one() -> None:
    fused = reciprocal_rank_fusion([["x", "both"], ["y", "both"]])
    assert fused[0][0] == "both"


def test_ties_break_by_first_appearance() -> None:
    fused = reciprocal_rank_fusion([["a", "b"], ["b", "a"]])
    assert [d for d, _ in fused] == ["a", "b"]
    fused = reciprocal_rank_fusion([["b", "a"], ["a", "b"]])
    assert [d for d, _ in fused] == ["b", "a"]
    fused = reciprocal_rank_fusion([["p"], ["q"], ["r"]])
    assert [d for d, _ in fused] == ["p", "q", "r"]


def test_duplicates_within_a_list_count_once_at_best_rank() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "a", "b"]], k=0))
    assert fused == {"a": 1.0, "b": pytest.approx(1 / 3)}


def test_empty_inputs() -> None:
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


def test_k_changes_the_weight_of_top_ranks() -> None:
    # Small k favours a single first place; large k favours appearing in both lists.
    lists = [["top", "both"], ["x", "y", "z", "w", "both"]]
    assert reciprocal_rank_fusion(lists, k=0)[0][0] == "top"
    assert reciprocal_rank_fusion(lists, k=60)[0][0] == "both"


def test_negative_k_is_refused() -> None:
    with pytest.raises(ValueError, match="k must be"):
        reciprocal_rank_fusion([["a"]], k=-1)
