"""Typed metadata (issue 39 item 5): how a value is typed at index time, how a metadata filter
is translated to its typed field, and what is refused (with the reason, 422 through the API)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from index.schema import TYPED_METADATA_FIELDS, TYPED_METADATA_TEMPLATES, mapping
from ragstream.errors import PermanentError
from ragstream.settings import ElasticsearchSettings
from tests.unit.apikit import answered, make_app
from topics.metadata import as_date, metadata_range, typed_fields
from topics.queries import QueryRequest, RangeFilter, TermFilter
from workers.retrieval.query import es_filters


def test_values_get_the_companion_of_their_type() -> None:
    meta: dict[str, str | int | float | bool | None] = {
        "year": 9,
        "score": 2.5,
        "big": 1e16,
        "tiny": -1e-5,
        "count": "10",
        "draft": True,
        "public": "false",
        "published": "2024-05-01",
        "updated": "2024-05-01T12:30:00+02:00",
        "team": "db",
        "code": "007",
        "padded": " 9",
        "bad_date": "2024-02-30",
        "none": None,
        "a.b": 1,
        "huge": 10**400,
    }
    assert typed_fields(meta) == {
        "metadata_num": {
            "year": 9.0,
            "score": 2.5,
            "big": 1e16,
            "tiny": -1e-5,
            "count": 10.0,
        },
        "metadata_bool": {"draft": True, "public": False},
        "metadata_date": {
            "published": "2024-05-01T00:00:00.000Z",
            "updated": "2024-05-01T10:30:00.000Z",
        },
    }
    assert typed_fields({"team": "db"}) == {}


def test_the_text_of_a_value_types_as_the_value_does() -> None:
    # The index keeps str(value) in `metadata`; a rebuild derives the companions from it.
    meta: dict[str, str | int | float | bool | None] = {
        "a": 9,
        "b": 2.5,
        "c": 1e16,
        "d": -1e-5,
        "e": True,
        "f": False,
        "g": "2024-05-01",
    }
    assert typed_fields({k: str(v) for k, v in meta.items()}) == typed_fields(meta)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01", "2024-05-01T00:00:00+00:00"),
        ("2024-05-01T12:30", "2024-05-01T12:30:00+00:00"),
        ("2024-05-01 12:30:15.123456789Z", "2024-05-01T12:30:15.123456+00:00"),
        ("2024-05-01T12:30+0200", "2024-05-01T10:30:00+00:00"),
        ("2024-05-01T12:30-05", "2024-05-01T17:30:00+00:00"),
    ],
)
def test_iso_dates_are_read_as_utc(text: str, expected: str) -> None:
    parsed = as_date(text)
    assert parsed is not None and parsed[0].isoformat() == expected


@pytest.mark.parametrize("text", ["2024", "20240501", "2024-5-1", "2024-13-01", "May 1, 2024"])
def test_other_text_is_no_date(text: str) -> None:
    assert as_date(text) is None


def test_number_ranges_go_to_the_numeric_companion() -> None:
    assert metadata_range("metadata.year", 9, None) == ("metadata_num.year", {"gte": 9.0})
    assert metadata_range("metadata.year", "2.5", "1e3") == (
        "metadata_num.year",
        {"gte": 2.5, "lte": 1000.0},
    )


def test_date_ranges_go_to_the_date_companion_and_a_bare_lte_day_is_whole() -> None:
    field, bounds = metadata_range("metadata.published", "2024-05-01", "2024-05-31")
    assert field == "metadata_date.published"
    assert bounds == {"gte": "2024-05-01T00:00:00.000Z", "lte": "2024-05-31T23:59:59.999Z"}
    _, bounds = metadata_range("metadata.published", None, "2024-05-31T08:00:00Z")
    assert bounds == {"lte": "2024-05-31T08:00:00.000Z"}


@pytest.mark.parametrize(
    ("gte", "lte", "reason"),
    [
        ("abc", None, "gte 'abc' is neither a number nor an ISO 8601 date"),
        (None, "v1.2", "lte 'v1.2' is neither a number nor an ISO 8601 date"),
        (9, "2024-05-01", "must both be numbers or both dates"),
        ("007", None, "neither a number"),
    ],
)
def test_a_range_bound_of_no_type_is_refused_with_the_reason(
    gte: float | str | None, lte: float | str | None, reason: str
) -> None:
    with pytest.raises(ValidationError, match=reason):
        RangeFilter(field="metadata.year", gte=gte, lte=lte)
    # A filter built without validation is refused by the retrieval stage all the same.
    sneaky = RangeFilter.model_construct(kind="range", field="metadata.year", gte=gte, lte=lte)
    with pytest.raises(PermanentError, match=reason):
        es_filters("acme", [sneaky])


def test_keyword_fields_keep_string_ranges() -> None:
    f = RangeFilter(field="source", gte="kb://a", lte="kb://b")
    assert es_filters("acme", [f])[1] == {"range": {"source": {"gte": "kb://a", "lte": "kb://b"}}}


def test_typed_term_values_compare_as_their_type() -> None:
    clauses = es_filters(
        "acme",
        [
            TermFilter(field="metadata.draft", values=(True,)),
            TermFilter(field="metadata.year", values=(9,)),
            TermFilter(field="metadata.team", values=("db",)),
            TermFilter(field="metadata.x", values=("9", 9, False)),
        ],
    )
    assert clauses[1:-1] == [
        {"terms": {"metadata_bool.draft": [True]}},
        {"terms": {"metadata_num.year": [9.0]}},
        {"terms": {"metadata.team": ["db"]}},
        {
            "bool": {
                "should": [
                    {"terms": {"metadata.x": ["9"]}},
                    {"terms": {"metadata_bool.x": [False]}},
                    {"terms": {"metadata_num.x": [9.0]}},
                ],
                "minimum_should_match": 1,
            }
        },
    ]


def test_typed_term_values_only_on_metadata() -> None:
    with pytest.raises(ValidationError, match="values of a term filter on lang are strings"):
        TermFilter(field="lang", values=(True,))
    with pytest.raises(ValidationError, match="not a finite number"):
        TermFilter(field="metadata.year", values=(10**400,))


def test_json_filters_keep_their_types() -> None:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    body = (
        '{"tenant": "acme", "query": "q", "deadline": "' + deadline.isoformat() + '", "filters": '
        '[{"kind": "term", "field": "metadata.draft", "values": [true, "true", 1]}, '
        '{"kind": "range", "field": "metadata.year", "gte": 9}]}'
    )
    q = QueryRequest.model_validate_json(body)
    term, rng = q.filters
    assert isinstance(term, TermFilter) and term.values == (True, "true", 1)
    assert isinstance(rng, RangeFilter) and rng.gte == 9.0
    assert QueryRequest.model_validate_json(q.model_dump_json()) == q


def test_the_api_answers_a_bad_metadata_range_422_with_the_reason(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    bad = {"kind": "range", "field": "metadata.year", "gte": "abc"}
    good = {"kind": "range", "field": "metadata.year", "gte": 9, "lte": "10"}
    with TestClient(app) as client:
        r = client.post("/v1/query", json={"query": "q", "filters": [bad]})
        assert r.status_code == 422, r.text
        body: dict[str, Any] = r.json()
        assert body["error"]["code"] == "INVALID_REQUEST"
        assert "neither a number nor an ISO 8601 date" in r.text
        assert client.post("/v1/query", json={"query": "q", "filters": [good]}).status_code == 200


def test_the_mapping_types_each_companion_and_stays_strict() -> None:
    body = mapping(4, ElasticsearchSettings())
    mappings = body["mappings"]
    assert mappings["dynamic"] == "strict"
    assert mappings["properties"]["metadata"] == {"type": "flattened"}
    for name in ("metadata_num", "metadata_bool", "metadata_date"):
        assert mappings["properties"][name] == TYPED_METADATA_FIELDS[name]
    assert mappings["dynamic_templates"] == TYPED_METADATA_TEMPLATES
    types = {
        next(iter(t)): next(iter(t.values()))["mapping"]["type"] for t in TYPED_METADATA_TEMPLATES
    }
    assert types == {"metadata_num": "double", "metadata_bool": "boolean", "metadata_date": "date"}
    assert body["settings"]["index.mapping.total_fields.ignore_dynamic_beyond_limit"] is True
