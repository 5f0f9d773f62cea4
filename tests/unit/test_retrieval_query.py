"""Query bodies: tenant filter always first, user values only as literal values, no parser.

Also the ``_msearch`` response handling of :class:`HybridRetriever` against an in-memory fake
client: batching, fusion and error translation.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import pytest
from elasticsearch import ConnectionError as EsConnectionError

from index.schema import CHUNKS_ONLY, DEFINITIONS_ONLY
from index.stemming import stem_text
from ragstream.errors import PermanentError, TransientError
from ragstream.settings import RetrievalSettings
from topics.queries import QueryRequest, RangeFilter, TermFilter
from workers.retrieval.hybrid import HybridRetriever, QueryRejectedError
from workers.retrieval.query import bm25_query, es_filters, knn_clause

HOSTILE = [
    "*",
    "a OR tenant:other",
    '\\" }',
    '{"match_all": {}}',
    '"}}, {"term": {"tenant": "other"}}, {"x": "',
    "tenant:*",
    "doc_id:* AND NOT tenant:acme",
    "/.*/",
    "\u0000",
]


def _walk(node: Any) -> list[str]:
    """Every dict key in a JSON-like tree."""
    if isinstance(node, dict):
        return [k for k, v in node.items() for k in [k, *_walk(v)]]
    if isinstance(node, list):
        return [k for v in node for k in _walk(v)]
    return []


def test_tenant_filter_is_first_and_always_present() -> None:
    assert es_filters("acme", []) == [{"term": {"tenant": {"value": "acme"}}}, CHUNKS_ONLY]
    clauses = es_filters("acme", [TermFilter(field="lang", values=("en",))])
    assert clauses[0] == {"term": {"tenant": {"value": "acme"}}}
    assert clauses[1] == {"terms": {"lang": ["en"]}}


def test_metadata_ranges_are_typed_and_keyword_ranges_stay_strings() -> None:
    clauses = es_filters(
        "acme",
        [RangeFilter(field="metadata.year", lte="2020"), RangeFilter(field="lang", lte="m")],
    )
    assert clauses[1:-1] == [
        {"range": {"metadata_num.year": {"lte": 2020.0}}},
        {"range": {"lang": {"lte": "m"}}},
    ]


def test_passage_searches_leave_definition_entries_out_and_definition_searches_keep_them() -> None:
    assert es_filters("acme", [])[-1] == CHUNKS_ONLY
    assert es_filters("acme", [], entry="definition")[-1] == DEFINITIONS_ONLY


def test_no_tenant_is_refused() -> None:
    with pytest.raises(PermanentError):
        es_filters("", [])


def test_term_and_range_clauses() -> None:
    clauses = es_filters(
        "acme",
        [
            TermFilter(field="metadata.team", values=("db", "infra")),
            RangeFilter(field="metadata.year", gte="2020"),
            RangeFilter(field="metadata.score", gte=1.5, lte=3),
        ],
    )
    assert clauses[1:-1] == [
        {"terms": {"metadata.team": ["db", "infra"]}},
        {"range": {"metadata_num.year": {"gte": 2020.0}}},
        {"range": {"metadata_num.score": {"gte": 1.5, "lte": 3.0}}},
    ]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_are_only_literal_term_values(value: str) -> None:
    filters = es_filters(
        "acme",
        [
            TermFilter(field="doc_id", values=(value,)),
            TermFilter(field="metadata.k", values=(value, "x")),
            RangeFilter(field="source", gte=value, lte=value),
        ],
    )
    assert filters[0] == {"term": {"tenant": {"value": "acme"}}}
    assert filters[1] == {"terms": {"doc_id": [value]}}
    assert filters[2] == {"terms": {"metadata.k": [value, "x"]}}
    assert filters[3] == {"range": {"source": {"gte": value, "lte": value}}}
    bodies = [
        bm25_query(value, filters, 10),
        {"knn": knn_clause([0.1, 0.2], filters, 5, 50)},
    ]
    for body in bodies:
        keys = _walk(body)
        assert "query_string" not in keys and "simple_query_string" not in keys
        assert value not in keys  # never a field name or query type
        # Serialised with json: the value stays one JSON string (escaped), not extra structure.
        assert json.loads(json.dumps(body)) == body
    # The question text only reaches `match` (analysed text, no syntax).
    match_texts = [c["match"] for c in bodies[0]["query"]["bool"]["should"]]
    stemmed = stem_text(value)  # the same words, stemmed: still only `match` query text
    assert match_texts == [
        {"text": {"query": value}},
        {"title": {"query": value, "boost": 0.5}},
        *([{"text_stemmed": {"query": stemmed, "boost": 1.0}}] if stemmed else []),
    ]


def test_unlisted_field_is_refused_even_without_validation() -> None:
    sneaky = TermFilter.model_construct(kind="term", field="tenant", values=("other",))
    with pytest.raises(PermanentError, match="not allowed"):
        es_filters("acme", [sneaky])


def test_bm25_and_knn_bodies_carry_the_filters() -> None:
    filters = es_filters("acme", [TermFilter(field="lang", values=("en",))])
    body = bm25_query("how to vacuum", filters, 50)
    assert body["size"] == 50
    assert body["_source"] == {
        "excludes": ["embedding", "text_stemmed", "title_stemmed", "metadata"]
    }
    assert body["track_total_hits"] is False  # no hit count: block-max WAND may skip
    assert body["query"]["bool"]["filter"] == filters
    assert body["query"]["bool"]["minimum_should_match"] == 1
    knn = knn_clause([1.0, 0.0], filters, k=50, num_candidates=200)
    assert knn["filter"] == {"bool": {"filter": filters}}
    assert (knn["k"], knn["num_candidates"], knn["field"]) == (50, 200, "embedding")
    assert knn_clause([1.0], filters, k=50, num_candidates=10)["num_candidates"] == 50


# -- HybridRetriever over a fake client ----------------------------------------------------------


class _Resp:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


class FakeEs:
    """Answers ``msearch`` from canned per-search responses; records the request."""

    def __init__(self, responses: list[dict[str, Any]] | Exception) -> None:
        self.responses = responses
        self.calls: list[list[dict[str, Any]]] = []

    def msearch(self, searches: list[dict[str, Any]]) -> _Resp:
        self.calls.append(searches)
        if isinstance(self.responses, Exception):
            raise self.responses
        return _Resp({"responses": self.responses})


def _hits(*ids: str) -> dict[str, Any]:
    return {
        "hits": {
            "hits": [
                {"_id": i, "_source": {"doc_id": f"d-{i}", "text": f"t {i}", "title": "T"}}
                for i in ids
            ]
        }
    }


def _query(text: str = "q", top_n: int = 30) -> QueryRequest:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    return QueryRequest(tenant="acme", query=text, deadline=deadline, top_n=top_n)


def _retriever(es: FakeEs, **settings: float) -> HybridRetriever:
    return HybridRetriever(es, "alias", RetrievalSettings(**settings))  # type: ignore[arg-type]


def test_one_msearch_two_searches_per_query_and_fusion() -> None:
    es = FakeEs([_hits("a", "b"), _hits("b", "c"), _hits("x"), _hits()])
    retriever = _retriever(es, bm25_weight=1.0)  # plain RRF
    out = retriever.search_batch([_query(), _query(top_n=1)], np.zeros((2, 4), np.float32))
    assert retriever.msearch_calls == 1 and len(es.calls[0]) == 8  # 4 header/body pairs
    assert all(h == {"index": "alias"} for h in es.calls[0][0::2])
    assert [c.chunk_id for c in out[0]] == ["b", "a", "c"]
    assert (out[0][0].bm25_rank, out[0][0].knn_rank) == (2, 1)
    assert (out[0][2].bm25_rank, out[0][2].knn_rank) == (None, 2)
    assert out[0][0].score == pytest.approx(1 / 62 + 1 / 61)
    assert [c.chunk_id for c in out[1]] == ["x"]  # top_n=1


def test_the_default_fusion_weights_bm25_at_0_8() -> None:
    es = FakeEs([_hits("a", "b"), _hits("b", "c")])
    out = _retriever(es).search_batch([_query()], np.zeros((1, 4), np.float32))[0]
    assert [c.chunk_id for c in out] == ["b", "c", "a"]  # c: 1/62 > a: 0.8/61
    assert out[0].score == pytest.approx(0.8 / 62 + 1 / 61)


def test_empty_batch_sends_nothing() -> None:
    es = FakeEs([])
    assert _retriever(es).search_batch([], np.zeros((0, 4), np.float32)) == []
    assert es.calls == []


def test_vector_rows_must_match_queries() -> None:
    with pytest.raises(ValueError, match="vectors"):
        _retriever(FakeEs([])).search_batch([_query()], np.zeros((2, 4), np.float32))


def test_a_rejected_search_names_its_request() -> None:
    bad = {"status": 400, "error": {"root_cause": [{"type": "x_exception", "reason": "bad"}]}}
    queries = [_query("fine"), _query("broken")]
    es = FakeEs([_hits("a"), _hits("a"), _hits("b"), bad])
    with pytest.raises(QueryRejectedError, match=queries[1].request_id) as info:
        _retriever(es).search_batch(queries, np.zeros((2, 4), np.float32))
    assert info.value.position == 1 and isinstance(info.value, PermanentError)
    assert "knn" in str(info.value) and "x_exception" in str(info.value)


def test_overloaded_search_and_unreachable_cluster_are_transient() -> None:
    busy = {"status": 429, "error": {"type": "es_rejected_execution_exception"}}
    with pytest.raises(TransientError):
        _retriever(FakeEs([busy, _hits()])).search_batch([_query()], np.zeros((1, 4)))
    with pytest.raises(TransientError):
        _retriever(FakeEs(EsConnectionError("down"))).search_batch([_query()], np.zeros((1, 4)))
