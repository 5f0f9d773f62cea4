"""OpenAI search filters as the index's filters (api/vector_stores/filters.py), and the search
page's cursor: what maps, exactly, and what is refused with its reason."""

from __future__ import annotations

import math
from typing import Any

import pytest

from api.errors import OpenAIError
from api.vector_stores.filters import MAX_FILTERS, FilterError, to_filters
from api.vector_stores.protocol import SearchBody
from api.vector_stores.search import decode_page, encode_page, fingerprint, store_filter
from topics.queries import RangeFilter, TermFilter


def _map(f: dict[str, Any]) -> list[Any]:
    return to_filters(SearchBody.model_validate({"query": "q", "filters": f}).filters)


def test_eq_and_in_are_term_filters_on_the_metadata_key() -> None:
    assert _map({"type": "eq", "key": "team", "value": "ops"}) == [
        TermFilter(field="metadata.team", values=("ops",))
    ]
    (term,) = _map({"type": "in", "key": "year", "value": [2021, 2023]})
    assert term.field == "metadata.year" and term.values == (2021.0, 2023.0)
    (flag,) = _map({"type": "eq", "key": "reviewed", "value": False})
    assert flag.values == (False,)


def test_gt_and_lt_move_the_bound_past_the_value() -> None:
    (gt,) = _map({"type": "gt", "key": "year", "value": 2021})
    assert isinstance(gt, RangeFilter) and gt.gte == math.nextafter(2021.0, math.inf)
    assert gt.lte is None
    (lt,) = _map({"type": "lt", "key": "day", "value": "2024-05-01"})
    assert lt.lte == "2024-04-30T23:59:59.999Z" and lt.gte is None
    (gte,) = _map({"type": "gte", "key": "day", "value": "2024-05-01"})
    assert gte.gte == "2024-05-01"


def test_and_concatenates_and_or_of_one_key_is_one_term_filter() -> None:
    f = {
        "type": "and",
        "filters": [
            {"type": "lte", "key": "year", "value": 2023},
            {
                "type": "or",
                "filters": [
                    {"type": "eq", "key": "team", "value": "ops"},
                    {"type": "in", "key": "team", "value": ["food", "it"]},
                ],
            },
        ],
    }
    rng, term = _map(f)
    assert isinstance(rng, RangeFilter) and rng.lte == 2023.0
    assert term == TermFilter(field="metadata.team", values=("ops", "food", "it"))


@pytest.mark.parametrize(
    ("f", "reason"),
    [
        ({"type": "ne", "key": "team", "value": "ops"}, "never exclude"),
        ({"type": "nin", "key": "team", "value": ["ops"]}, "never exclude"),
        ({"type": "gt", "key": "team", "value": "ops"}, "a number or an ISO 8601 date"),
        ({"type": "gt", "key": "team", "value": True}, "a number or a date"),
        ({"type": "eq", "key": "team", "value": ["a", "b"]}, "one value, not a list"),
        (
            {
                "type": "or",
                "filters": [
                    {"type": "eq", "key": "team", "value": "ops"},
                    {"type": "eq", "key": "year", "value": 2021},
                ],
            },
            "across keys",
        ),
        (
            {"type": "or", "filters": [{"type": "gte", "key": "year", "value": 2021}]},
            "eq/in comparisons of one key",
        ),
    ],
)
def test_what_the_index_cannot_apply_is_refused_with_the_reason(
    f: dict[str, Any], reason: str
) -> None:
    with pytest.raises(FilterError, match=reason):
        _map(f)


def test_too_many_comparisons_are_refused() -> None:
    many = [{"type": "eq", "key": f"k{i}", "value": "v"} for i in range(MAX_FILTERS + 1)]
    nested = {
        "type": "and",
        "filters": [{"type": "and", "filters": many[:10]}, {"type": "and", "filters": many[10:]}],
    }
    with pytest.raises(FilterError, match="at most"):
        _map(nested)


def test_the_store_filter_is_a_doc_id_range_of_its_documents() -> None:
    f = store_filter("vs_0123")
    assert isinstance(f, RangeFilter) and f.field == "doc_id"
    low, high = str(f.gte), str(f.lte)
    assert low <= "vs_0123/file-abc" <= high
    assert low <= "vs_0123/file-abc#record-1" <= high
    assert not low <= "vs_01234/file-abc" <= high


def test_a_cursor_belongs_to_its_search() -> None:
    body = SearchBody.model_validate({"query": "pump", "max_num_results": 2})
    mark = fingerprint("vs_1", body)
    assert decode_page(encode_page(2, mark), mark) == 2
    assert decode_page(None, mark) == 0
    other = fingerprint("vs_1", SearchBody.model_validate({"query": "fan"}))
    for cursor in (encode_page(2, other), "garbage", encode_page(0, mark)):
        with pytest.raises(OpenAIError) as caught:
            decode_page(cursor, mark)
        assert caught.value.status == 400 and caught.value.param == "next_page"
    paged = SearchBody.model_validate({"query": "pump", "max_num_results": 2, "next_page": "x"})
    assert fingerprint("vs_1", paged) == mark  # the cursor itself is not part of the search
