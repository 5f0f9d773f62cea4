"""Search as a product, end to end on a real API server, Elasticsearch, Kafka (the ingest pool
indexes the documents) and SQL: ``POST /v1/search`` with each ranker, filters, readers and
tenants; Dify's External Knowledge API replaying Dify's documented request and each of its
error codes; and ``RagstreamRetriever`` run by the real LangChain and LlamaIndex libraries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langchain_core.documents import Document
from llama_index.core.schema import NodeWithScore

from api.searching import SEARCHER, max_rrf_score
from entry.client import ApiRequestError
from entry.langchain_retriever import RagstreamRetriever as LangChainRetriever
from entry.llama_index_retriever import RagstreamRetriever as LlamaIndexRetriever
from tests.integration.stack import Stack, index_document, make_stack

VACUUM = (
    "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. The autovacuum launcher "
    "starts workers every autovacuum_naptime, which defaults to one minute."
)
INDEXES = (
    "# CREATE INDEX\n\nCREATE INDEX constructs an index on the specified column of a table. "
    "B-tree is the default index method."
)
VENV = (
    "# venv\n\nThe venv module creates lightweight virtual environments, each with its own "
    "site directory, isolated from the system site directories."
)
SECRET = (
    "# Launch codes\n\nThe rocket launch window opens at dawn; the ignition sequence takes "
    "ninety seconds."
)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("search"), "search", RAGSTREAM_API__RATE_PER_MINUTE="0")
    s.start_pools(("ingest",))
    try:
        s.wait_ready()
        s.api()
        s.keys["acme"] = s.key(s.name + "-acme")
        s.keys["admin"] = s.key(s.name + "-acme", principals=["*"])
        s.keys["globex"] = s.key(s.name + "-globex")
        url, admin = s.apis[0].url, s.keys["admin"]
        docs: tuple[tuple[str, str, dict[str, Any]], ...] = (
            ("vacuum", VACUUM, {"metadata": {"product": "postgresql", "version": 15}}),
            ("indexes", INDEXES, {"metadata": {"product": "postgresql", "version": 16}}),
            ("venv", VENV, {"metadata": {"product": "python", "version": 3}}),
            ("secret", SECRET, {"readers": ["group:eng"]}),
        )
        for doc_id, text, fields in docs:
            index_document(url, admin, doc_id, text, **fields)
        yield s
    finally:
        s.close()


def search(stack: Stack, key: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{stack.apis[0].url}/v1/search",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def dify(stack: Stack, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{stack.apis[0].url}/v1/dify/retrieval", json=body, headers=headers, timeout=60
    )


# -- POST /v1/search ---------------------------------------------------------------------
def test_each_ranker_finds_the_page_with_its_own_score(stack: Stack) -> None:
    top = max_rrf_score(stack.settings)
    for ranker in ("hybrid", "keyword", "vector"):
        r = search(stack, stack.keys["acme"], query="How does VACUUM reclaim storage?", top_k=3,
                   ranker=ranker)  # fmt: skip
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["ranker"] == ranker and out["query"] == "How does VACUUM reclaim storage?"
        data = out["data"]
        assert data[0]["doc_id"] == "vacuum", (ranker, data)
        assert [d["n"] for d in data] == list(range(1, len(data) + 1))
        assert data[0]["title"] == "VACUUM" and data[0]["chunk_id"]
        assert data[0]["metadata"]["product"] == "postgresql"
        scores = [d["score"] for d in data]
        assert scores == sorted(scores, reverse=True)
        if ranker == "hybrid":
            assert all(0 < s <= top + 1e-9 for s in scores)
        elif ranker == "vector":
            assert all(0 <= s <= 1 for s in scores)
        else:
            assert all(s > 0 for s in scores)


def test_filters_threshold_readers_and_tenants(stack: Stack) -> None:
    query = "What does this page say?"
    filtered = search(stack, stack.keys["acme"], query=query, filters=[
        {"kind": "range", "field": "metadata.version", "gte": 10},
    ]).json()["data"]  # fmt: skip
    assert {d["doc_id"] for d in filtered} == {"vacuum", "indexes"}
    high = search(stack, stack.keys["acme"], query="VACUUM", ranker="vector", score_threshold=0.99)
    assert high.status_code == 200 and high.json()["data"] == []
    plain = {d["doc_id"] for d in search(stack, stack.keys["acme"], query="rocket launch").json()[
        "data"]}  # fmt: skip
    assert "secret" not in plain  # a document with readers the key does not hold
    admin = search(stack, stack.keys["admin"], query="rocket launch").json()["data"]
    assert admin[0]["doc_id"] == "secret"
    assert search(stack, stack.keys["globex"], query="VACUUM").json()["data"] == []
    bad = search(stack, stack.keys["acme"], query="x", top_k=51)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "INVALID_REQUEST"
    assert search(stack, "rsk_unknown", query="x").status_code == 401


def test_no_index_yet_finds_nothing(stack: Stack) -> None:
    """Before the first document is indexed there is no index: nothing found, not a 422."""
    es = stack.settings.elasticsearch.model_copy(update={"index_alias": stack.name + "-none"})
    server = stack.api(stack.settings.model_copy(update={"elasticsearch": es}))
    for ranker in ("hybrid", "keyword", "vector"):
        r = httpx.post(
            f"{server.url}/v1/search",
            json={"query": "VACUUM", "ranker": ranker},
            headers={"Authorization": f"Bearer {stack.keys['acme']}"},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["data"] == [], r.text


def test_search_and_mcp_share_one_searcher(stack: Stack) -> None:
    services = stack.apis[0].app.state.services
    searcher = services.extras[SEARCHER]
    assert search(stack, stack.keys["acme"], query="VACUUM").status_code == 200
    assert services.extras[SEARCHER] is searcher  # the MCP knowledge base made it at start-up


# -- Dify's External Knowledge API -----------------------------------------------------------
def documented_request(stack: Stack) -> dict[str, Any]:
    """Dify's documented example request, with the key's tenant as the knowledge id."""
    return {
        "knowledge_id": stack.name + "-acme",
        "query": "How does VACUUM reclaim storage?",
        "retrieval_setting": {"top_k": 2, "score_threshold": 0.0},
    }


def test_dify_replays_its_documented_request(stack: Stack) -> None:
    r = dify(stack, documented_request(stack), {"Authorization": f"Bearer {stack.keys['acme']}"})
    assert r.status_code == 200, r.text
    records = r.json()["records"]
    assert 1 <= len(records) <= 2
    first = records[0]
    assert set(first) == {"content", "score", "title", "metadata"}
    assert "reclaims storage" in first["content"] and first["title"] == "VACUUM"
    assert 0 < first["score"] <= 1 and isinstance(first["metadata"], dict)
    assert first["metadata"]["doc_id"] == "vacuum" and first["metadata"]["chunk_id"]
    strict = {**documented_request(stack), "retrieval_setting": {"top_k": 2, "score_threshold": 1}}
    kept = dify(stack, strict, {"Authorization": f"Bearer {stack.keys['acme']}"}).json()
    assert all(rec["score"] == 1 for rec in kept["records"])


def test_dify_metadata_condition_filters(stack: Stack) -> None:
    body = {
        **documented_request(stack),
        "metadata_condition": {
            "logical_operator": "and",
            "conditions": [{"name": "product", "comparison_operator": "is", "value": "python"}],
        },
    }
    r = dify(stack, body, {"Authorization": f"Bearer {stack.keys['acme']}"})
    assert r.status_code == 200, r.text
    assert {rec["metadata"]["doc_id"] for rec in r.json()["records"]} == {"venv"}


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 403, 1001),
        ({"Authorization": "Token abc"}, 403, 1001),
        ({"Authorization": "Bearer rsk_revoked_or_never_made"}, 403, 1002),
    ],
)
def test_dify_auth_error_codes(
    stack: Stack, headers: dict[str, str], status: int, code: int
) -> None:
    r = dify(stack, documented_request(stack), headers)
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code and r.json()["error_msg"]


def test_dify_2001_for_an_unknown_knowledge(stack: Stack) -> None:
    body = {**documented_request(stack), "knowledge_id": "AAA-BBB-CCC"}
    r = dify(stack, body, {"Authorization": f"Bearer {stack.keys['acme']}"})
    assert r.status_code == 404 and r.json()["error_code"] == 2001


# -- LangChain and LlamaIndex ----------------------------------------------------------------
def test_langchain_retriever(stack: Stack) -> None:
    retriever = LangChainRetriever(base_url=stack.apis[0].url, api_key=stack.keys["acme"],
                                   top_k=2)  # fmt: skip
    docs = retriever.invoke("How does VACUUM reclaim storage?")
    assert 1 <= len(docs) <= 2 and all(isinstance(d, Document) for d in docs)
    first = docs[0]
    assert "reclaims storage" in first.page_content and first.id == first.metadata["chunk_id"]
    meta = first.metadata
    assert meta["doc_id"] == "vacuum" and meta["title"] == "VACUUM" and meta["rank"] == 1
    assert meta["score"] > 0 and meta["product"] == "postgresql"
    asynced = asyncio.run(retriever.ainvoke("How does VACUUM reclaim storage?"))
    assert [d.id for d in asynced] == [d.id for d in docs]
    keyword = LangChainRetriever(
        base_url=stack.apis[0].url, api_key=stack.keys["acme"], ranker="keyword",
        filters=[{"kind": "term", "field": "metadata.product", "values": ["python"]}],
    )  # fmt: skip
    assert {d.metadata["doc_id"] for d in keyword.invoke("virtual environments")} == {"venv"}
    bad = LangChainRetriever(base_url=stack.apis[0].url, api_key="rsk_nope")
    with pytest.raises(ApiRequestError) as caught:
        bad.invoke("x")
    assert caught.value.status == 401


def test_llama_index_retriever(stack: Stack) -> None:
    retriever = LlamaIndexRetriever(stack.apis[0].url, stack.keys["acme"], top_k=2)
    found = retriever.retrieve("How does VACUUM reclaim storage?")
    assert 1 <= len(found) <= 2 and all(isinstance(n, NodeWithScore) for n in found)
    first = found[0]
    assert first.node.ref_doc_id == "vacuum" and first.node.node_id == first.node.metadata[
        "chunk_id"]  # fmt: skip
    assert first.score is not None and first.score > 0
    assert first.node.metadata["title"] == "VACUUM" and "source" in first.node.metadata
    assert "reclaims storage" in first.node.get_content()
    asynced = asyncio.run(retriever.aretrieve("How does VACUUM reclaim storage?"))
    assert [n.node.node_id for n in asynced] == [n.node.node_id for n in found]
