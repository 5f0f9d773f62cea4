"""``POST /v1/search`` and Dify's ``POST /v1/dify/retrieval`` on the real app with a fake
searcher (the seam both ask, :class:`api.searching.Searcher`): what each passes to the search,
what each answers, and Dify's documented request, response and error codes (1001, 1002, 2001)
with real keys in a throw-away key store. The same routes against real Elasticsearch:
``tests/integration/test_search.py``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.auth import Principal, create_key
from api.dify import MetadataCondition, filters_of
from api.errors import ApiError
from api.searching import SEARCHER, Hit, max_rrf_score
from ragstream.db.engine import upgrade_head
from tests.unit.apikit import answered, make_app
from topics.queries import RangeFilter, TermFilter
from topics.retrieved import Candidate

#: Dify's documented request (docs.dify.ai, External Knowledge API), knowledge_id our tenant.
DIFY_REQUEST = {
    "knowledge_id": "acme",
    "query": "What does VACUUM do?",
    "retrieval_setting": {"top_k": 2, "score_threshold": 0.5},
}


class FakeSearcher:
    """Answers every search with ``hits`` (cut to ``top_k``) and records its arguments."""

    def __init__(self, hits: Sequence[Hit]) -> None:
        self.hits = list(hits)
        self.calls: list[dict[str, Any]] = []
        self.error: ApiError | None = None

    async def search(self, who: Principal, query: str, **kw: Any) -> list[Hit]:
        self.calls.append({"who": who, "query": query, **kw})
        if self.error is not None:
            raise self.error
        return self.hits[: kw.get("top_k", 10)]


def hit(n: int, score: float, **fields: Any) -> Hit:
    c = Candidate(
        chunk_id=f"vacuum#{n}", doc_id="vacuum", text=f"passage {n}", title="VACUUM",
        source="sql-vacuum.html", score=score, metadata={"version": 15}, **fields,
    )  # fmt: skip
    return Hit(n, c, score)


@pytest.fixture
def app_and_searcher(tmp_path: Path) -> Iterator[tuple[TestClient, FakeSearcher]]:
    app, _ = make_app(tmp_path, answered, rate_per_minute=0)
    top = max_rrf_score(app.state.services.settings)
    fake = FakeSearcher([hit(1, top), hit(2, top * 0.6), hit(3, top * 0.3)])
    app.state.services.extras[SEARCHER] = fake
    with TestClient(app) as client:
        yield client, fake


# -- POST /v1/search ---------------------------------------------------------------------
def test_search_passes_the_body_to_the_searcher_and_lists_its_hits(
    app_and_searcher: tuple[TestClient, FakeSearcher],
) -> None:
    client, fake = app_and_searcher
    body = {
        "query": "And how do I run it?",
        "top_k": 2,
        "ranker": "keyword",
        "filters": [{"kind": "term", "field": "metadata.version", "values": [15]}],
        "history": ["What does VACUUM do?"],
    }
    r = client.post("/v1/search", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["query"] == "And how do I run it?" and out["ranker"] == "keyword"
    assert [d["chunk_id"] for d in out["data"]] == ["vacuum#1", "vacuum#2"]
    first = out["data"][0]
    assert first == {
        "n": 1, "doc_id": "vacuum", "chunk_id": "vacuum#1", "title": "VACUUM",
        "source": "sql-vacuum.html", "score": first["score"], "text": "passage 1",
        "metadata": {"version": 15},
    }  # fmt: skip
    (call,) = fake.calls
    assert call["who"].tenant == "acme" and call["top_k"] == 2 and call["ranker"] == "keyword"
    assert call["filters"] == [TermFilter(field="metadata.version", values=(15,))]
    assert call["history"] == ["What does VACUUM do?"]


def test_search_defaults_and_score_threshold(
    app_and_searcher: tuple[TestClient, FakeSearcher],
) -> None:
    client, fake = app_and_searcher
    top = fake.hits[0].score
    r = client.post("/v1/search", json={"query": "vacuum", "score_threshold": top * 0.5})
    assert r.status_code == 200, r.text
    assert [d["n"] for d in r.json()["data"]] == [1, 2]  # the third scores below
    assert fake.calls[0]["top_k"] == 10 and fake.calls[0]["ranker"] == "hybrid"


@pytest.mark.parametrize(
    "body",
    [
        {"query": ""},
        {"query": "x", "top_k": 0},
        {"query": "x", "top_k": 51},
        {"query": "x", "ranker": "bm25"},
        {"query": "x", "unknown": 1},
        {"query": "x", "filters": [{"kind": "term", "field": "title", "values": ["a"]}]},
    ],
)
def test_search_refuses_a_bad_body(
    app_and_searcher: tuple[TestClient, FakeSearcher], body: dict[str, Any]
) -> None:
    client, fake = app_and_searcher
    r = client.post("/v1/search", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "INVALID_REQUEST"
    assert not fake.calls


def test_search_says_503_when_the_index_is_unreachable(
    app_and_searcher: tuple[TestClient, FakeSearcher],
) -> None:
    client, fake = app_and_searcher
    fake.error = ApiError(503, "UNAVAILABLE", "search failed: connection refused")
    r = client.post("/v1/search", json={"query": "vacuum"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "UNAVAILABLE"


# -- Dify: POST /v1/dify/retrieval ---------------------------------------------------------
@pytest.fixture
def dify(tmp_path: Path) -> Iterator[tuple[TestClient, FakeSearcher, str]]:
    """The app with real key checks (no override): a key of tenant ``acme``."""
    app, _ = make_app(tmp_path, answered, rate_per_minute=0)
    app.dependency_overrides.clear()
    settings = app.state.services.settings
    upgrade_head(settings.database_url)
    key, _ = create_key(app.state.services.sessions, "acme")
    top = max_rrf_score(settings)
    fake = FakeSearcher([hit(1, top), hit(2, top * 0.6), hit(3, top * 0.3)])
    app.state.services.extras[SEARCHER] = fake
    with TestClient(app) as client:
        yield client, fake, key


def test_dify_documented_request_gets_records(dify: tuple[TestClient, FakeSearcher, str]) -> None:
    client, fake, key = dify
    r = client.post(
        "/v1/dify/retrieval", json=DIFY_REQUEST, headers={"Authorization": f"Bearer {key}"}
    )
    assert r.status_code == 200, r.text
    records = r.json()["records"]
    # top_k 2 asked of the search; the second scores 0.6 >= the threshold 0.5
    assert [rec["score"] for rec in records] == [1.0, 0.6]
    assert records[0]["content"] == "passage 1" and records[0]["title"] == "VACUUM"
    meta = records[0]["metadata"]
    assert meta["doc_id"] == "vacuum" and meta["chunk_id"] == "vacuum#1"
    assert meta["source"] == "sql-vacuum.html" and meta["version"] == 15
    assert all(isinstance(rec["metadata"], dict) for rec in records)
    (call,) = fake.calls
    assert call["who"].tenant == "acme" and call["top_k"] == 2 and call["filters"] == []


def test_dify_nothing_found_is_an_empty_list(dify: tuple[TestClient, FakeSearcher, str]) -> None:
    client, fake, key = dify
    fake.hits = []
    r = client.post(
        "/v1/dify/retrieval", json=DIFY_REQUEST, headers={"Authorization": f"Bearer {key}"}
    )
    assert r.status_code == 200 and r.json() == {"records": []}


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"}, {"Authorization": "key"}],
)
def test_dify_1001_for_a_malformed_authorization_header(
    dify: tuple[TestClient, FakeSearcher, str], headers: dict[str, str]
) -> None:
    client, fake, _ = dify
    r = client.post("/v1/dify/retrieval", json=DIFY_REQUEST, headers=headers)
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["error_code"] == 1001 and "Bearer" in body["error_msg"]
    assert set(body) == {"error_code", "error_msg"}
    assert not fake.calls


def test_dify_1002_for_an_unknown_key(dify: tuple[TestClient, FakeSearcher, str]) -> None:
    client, fake, _ = dify
    r = client.post(
        "/v1/dify/retrieval", json=DIFY_REQUEST, headers={"Authorization": "Bearer rsk_nope"}
    )
    assert r.status_code == 403, r.text
    assert r.json()["error_code"] == 1002
    assert not fake.calls


def test_dify_2001_for_a_knowledge_id_other_than_the_tenant(
    dify: tuple[TestClient, FakeSearcher, str],
) -> None:
    client, fake, key = dify
    r = client.post(
        "/v1/dify/retrieval",
        json={**DIFY_REQUEST, "knowledge_id": "AAA-BBB-CCC"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 404, r.text
    assert r.json()["error_code"] == 2001
    assert not fake.calls


def test_dify_bad_body_and_search_errors_keep_dify_shape(
    dify: tuple[TestClient, FakeSearcher, str],
) -> None:
    client, fake, key = dify
    auth = {"Authorization": f"Bearer {key}"}
    r = client.post("/v1/dify/retrieval", json={"knowledge_id": "acme", "query": "x"}, headers=auth)
    assert r.status_code == 422 and r.json()["error_code"] == 422
    assert "retrieval_setting" in r.json()["error_msg"]
    fake.error = ApiError(503, "UNAVAILABLE", "search failed")
    r = client.post("/v1/dify/retrieval", json=DIFY_REQUEST, headers=auth)
    assert r.status_code == 503 and r.json() == {"error_code": 503, "error_msg": "search failed"}


def test_dify_metadata_condition_becomes_filters(
    dify: tuple[TestClient, FakeSearcher, str],
) -> None:
    client, fake, key = dify
    condition = {
        "logical_operator": "and",
        "conditions": [
            {"name": "category", "comparison_operator": "is", "value": "AI"},
            {"name": "version", "comparison_operator": "≥", "value": 15},
        ],
    }
    r = client.post(
        "/v1/dify/retrieval",
        json={**DIFY_REQUEST, "metadata_condition": condition},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 200, r.text
    assert fake.calls[0]["filters"] == [
        TermFilter(field="metadata.category", values=("AI",)),
        RangeFilter(field="metadata.version", gte=15.0),
    ]


# -- metadata_condition, alone --------------------------------------------------------------
def conditions(op: str, *items: tuple[str, str, Any]) -> MetadataCondition:
    return MetadataCondition.model_validate(
        {
            "logical_operator": op,
            "conditions": [{"name": n, "comparison_operator": o, "value": v} for n, o, v in items],
        }
    )


def test_or_over_one_name_joins_the_values() -> None:
    found = filters_of(conditions("or", ("lang", "is", "en"), ("lang", "in", ["de", "fr"])))
    assert found == [TermFilter(field="metadata.lang", values=("en", "de", "fr"))]


def test_dates_bound_inclusively() -> None:
    found = filters_of(conditions("and", ("published", "before", "2024-01-31")))
    assert found == [RangeFilter(field="metadata.published", lte="2024-01-31")]


@pytest.mark.parametrize(
    "condition",
    [
        conditions("and", ("tag", "contains", "AI")),
        conditions("and", ("tag", "not in", ["AI"])),
        conditions("and", ("tag", "empty", None)),
        conditions("and", ("tag", "is", None)),
        conditions("and", ("version", "≥", "soon")),
        conditions("or", ("a", "is", "x"), ("b", "is", "y")),
        conditions("and", ("bad name!", "is", "x")),
    ],
)
def test_what_has_no_filter_is_refused_not_ignored(condition: MetadataCondition) -> None:
    with pytest.raises(ApiError) as caught:
        filters_of(condition)
    assert caught.value.status == 422


def test_blank_history_strings_are_left_out_not_a_server_error() -> None:
    """Schemathesis found it on ``POST /v1/search``: a history of blank strings was a 500."""
    from api.asking import conversation_of
    from api.models import HistoryTurn

    turns = conversation_of(["", "  ", "What is VACUUM?", HistoryTurn(question="x", answer="y")])
    assert [(t.question, t.answer) for t in turns] == [("What is VACUUM?", ""), ("x", "y")]
