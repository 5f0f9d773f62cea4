"""``bench es-cost``: the profile API's sections split into phases, and the variants' bodies."""

from __future__ import annotations

from typing import Any

import pytest

from bench.query.es_cost import VARIANTS, profile_split


def _shard(query_ns: list[int], fetch_ns: int, knn_ns: list[int] | None = None) -> dict[str, Any]:
    shard: dict[str, Any] = {
        "searches": [{
            "query": [{"type": "BooleanQuery", "time_in_nanos": n} for n in query_ns],
            "rewrite_time": 1_000_000,
            "collector": [{"name": "TopScoreDocCollector", "time_in_nanos": 2_000_000}],
        }],
        "fetch": {"type": "fetch", "time_in_nanos": fetch_ns},
    }  # fmt: skip
    if knn_ns is not None:
        shard["dfs"] = {"knn": [{
            "query": [{"type": "DocAndScoreQuery", "time_in_nanos": n} for n in knn_ns],
            "rewrite_time": 500_000,
            "collector": [{"name": "SimpleTopScoreDocCollector", "time_in_nanos": 1_500_000}],
        }]}  # fmt: skip
    return shard


def test_profile_phases_add_each_section_of_every_shard() -> None:
    bm25 = {"took": 9, "profile": {"shards": [_shard([4_000_000], 3_000_000),
                                              _shard([1_000_000], 1_000_000)]}}  # fmt: skip
    knn = {"took": 7, "profile": {"shards": [_shard([0], 2_000_000, knn_ns=[5_000_000])]}}
    split = profile_split(bm25, knn)
    assert split["bm25_query"] == pytest.approx(4 + 1 + 2 * (1 + 2))  # trees, rewrites, collectors
    assert split["bm25_fetch"] == pytest.approx(4)
    assert split["knn_search"] == pytest.approx(5 + 0.5 + 1.5)
    assert split["knn_query"] == pytest.approx(0 + 1 + 2)
    assert split["knn_fetch"] == pytest.approx(2)
    assert (split["bm25_took"], split["knn_took"]) == (9.0, 7.0)
    assert profile_split({}, {})["knn_search"] == 0.0  # no profile: nothing made up


def test_each_variant_changes_one_thing_and_leaves_the_pools_bodies_alone() -> None:
    body = [{"index": "a"}, {"query": {"match": {}}, "size": 30},
            {"index": "a"}, {"knn": {"k": 30, "num_candidates": 200}, "size": 30}]  # fmt: skip
    before = repr(body)
    assert VARIANTS["today"](body) == body
    assert VARIANTS["bm25-only"](body) == body[:2] and VARIANTS["knn-only"](body) == body[2:]
    no_source = VARIANTS["no-source"](body)
    assert no_source[1]["_source"] is False and no_source[3]["_source"] is False
    assert VARIANTS["candidates-50"](body)[3]["knn"]["num_candidates"] == 50
    small_k = [*body[:3], {"knn": {"k": 80, "num_candidates": 200}}]
    assert VARIANTS["candidates-50"](small_k)[3]["knn"]["num_candidates"] == 80  # never below k
    assert repr(body) == before


def test_knn_recall_compares_each_knn_list_with_the_reference() -> None:
    from bench.query.es_cost import knn_recall

    header = {"index": "a"}
    one = [header, {"query": {}}, header, {"knn": {"k": 2}}]
    calls = [one, one]

    def response(*ids: str) -> dict[str, Any]:
        return {"hits": {"hits": [{"_id": i} for i in ids]}}

    answers = [[response("x"), response("a", "b")], [response("y"), response("c", "z")]]
    assert knn_recall("today", calls, answers, [["a", "b"], ["c", "d"]]) == 0.75
    bm25_only = [[header, {"query": {}}]] * 2
    assert knn_recall("bm25-only", bm25_only, [[response("a")]] * 2, [["a"], ["b"]]) is None
    batch = [[*one, *one]]  # two questions in one _msearch
    both = [[response("x"), response("a", "b"), response("y"), response("c", "d")]]
    assert knn_recall("batch-8", batch, both, [["a", "b"], ["c", "d"]]) == 1.0


def test_stop_words_and_one_search_variants() -> None:
    should = [{"match": {"text": {"query": "What is a tuple"}}},
              {"match": {"text_stemmed": {"query": "what tupl"}}}]  # fmt: skip
    body = [{"index": "a"}, {"query": {"bool": {"should": should}}, "size": 30},
            {"index": "a"}, {"knn": {"k": 30, "num_candidates": 200}, "size": 30}]  # fmt: skip
    before = repr(body)
    changed = VARIANTS["no-stop-words"](body)[1]["query"]["bool"]["should"]
    assert [m for c in changed for m in c["match"].values()] == [
        {"query": "What tuple"},
        {"query": "what tupl"},
    ]
    one = VARIANTS["one-search"](body)
    assert len(one) == 2 and one[1]["knn"] == body[3]["knn"] and one[1]["query"] == body[1]["query"]
    assert repr(body) == before


def test_first_ids_take_the_two_lists_in_turn_without_repeats() -> None:
    from bench.query.es_cost import first_ids

    def hits(*ids: str) -> dict[str, Any]:
        return {"hits": {"hits": [{"_id": i} for i in ids]}}

    assert first_ids([hits("a", "b", "c"), hits("b", "d")], 10) == ["a", "b", "d", "c"]
    assert first_ids([hits("a", "b", "c"), hits("b", "d")], 2) == ["a", "b"]
    assert first_ids([{}, hits("x")], 5) == ["x"]


def test_a_variants_passes_give_their_median_and_the_spread() -> None:
    from bench.query.es_cost import median_run, render

    rows = [{"es_core_ms": ms, "client_core_ms": 2.0, "wall_ms": 20.0, "response_kb": 89.5,
             "knn_recall": r} for ms, r in ((23.0, 0.99), (19.0, 0.99), (30.0, None))]  # fmt: skip
    run = median_run(rows)
    assert run["es_core_ms"] == 23.0 and run["es_core_ms_range"] == [19.0, 30.0]
    assert run["knn_recall"] == 0.99 and run["passes"] == 3
    payload = {"questions": 3, "profile": {"bm25_query": 30.0}, "variants": {"today": run}}
    assert render(payload)[1].row_count == 1
