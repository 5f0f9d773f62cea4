"""Feedback that trains, through the real API on a private stack (SQLite store, its own topics
and Elasticsearch index): ``POST /v1/queries/{id}/feedback`` stores a label on a logged answer,
``GET /v1/queries[/{id}]`` show it, and :func:`workers.feedback.feedback_pairs` (what
``ragstream rerank train --tenant T`` reads) returns it with the passage's indexed text.

The answer is written into the query log as the delivery pool writes it
(:func:`workers.query_log.record_final`), citing two chunks written into the stack's index, so
no pool needs to run; the route reads both for real (SQL, and Elasticsearch for the text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from elasticsearch import Elasticsearch

from ragstream.db.engine import make_engine, make_session_factory
from tests.integration.stack import Stack, make_stack
from topics.queries import QueryRequest
from topics.responses import Citation, EvidenceSpan, QueryResponse
from workers import query_log
from workers.feedback import feedback_pairs

TENANT_SUFFIX = "-fb"
CHUNKS = {
    "c-ports": ("ports", "The server listens on TCP port 5432 by default."),
    "c-vacuum": ("vacuum", "VACUUM reclaims storage occupied by dead tuples."),
}
QUESTION = "Which TCP port does the server listen on by default?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("feedback"), "feedback")
    tenant = s.name + TENANT_SUFFIX
    es = Elasticsearch(s.settings.elasticsearch.hosts)
    alias = s.settings.elasticsearch.index_alias
    try:
        es.indices.create(
            index=f"{alias}-v1",
            mappings={
                "properties": {
                    f: {"type": "keyword"} for f in ("tenant", "doc_id", "chunk_id", "principals")
                }
                | {"text": {"type": "text"}}
            },
            aliases={alias: {}},
        )
        for cid, (doc_id, text) in CHUNKS.items():
            es.index(
                index=alias,
                id=cid,
                document={"tenant": tenant, "doc_id": doc_id, "chunk_id": cid, "text": text},
            )
        es.indices.refresh(index=alias)
        s.api()
        s.keys["wide"] = s.key(tenant, principals=["*"], rate_per_minute=0)
        s.keys["eng"] = s.key(tenant, principals=["group:eng"], rate_per_minute=0)
        s.keys["other"] = s.key(s.name + "-other", principals=["*"], rate_per_minute=0)
        yield s
    finally:
        es.close()
        s.close()


def _log(stack: Stack, *, answered: bool = True) -> str:
    """A query of the stack's tenant asked with a tenant-wide key, answered citing both chunks
    (the ports passage [1] with its span first) unless ``answered`` is false (pending)."""
    sessions = make_session_factory(make_engine(stack.settings.database_url))
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    request = QueryRequest(tenant=stack.name + TENANT_SUFFIX, query=QUESTION, deadline=deadline)
    query_log.log_pending(sessions, request)
    if answered:
        response = QueryResponse(
            tenant=request.tenant, request_id=request.request_id, status="answered",
            answer="The server listens on TCP port 5432 [1].", tier="evidence",
            citations=(
                Citation(n=1, doc_id="ports", chunk_id="c-ports"),
                Citation(n=2, doc_id="vacuum", chunk_id="c-vacuum"),
            ),
            evidence=(
                EvidenceSpan(n=1, chunk_id="c-ports", doc_id="ports", start=32, end=36,
                             text="5432"),
            ),
        )  # fmt: skip
        with sessions.begin() as session:
            query_log.record_final(session, [response])
    return request.request_id


def _post(stack: Stack, key: str, rid: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{stack.apis[0].url}/v1/queries/{rid}/feedback",
        json=body,
        headers={"Authorization": f"Bearer {stack.keys[key]}"},
        timeout=30,
    )


def _get(stack: Stack, key: str, path: str) -> Any:
    r = httpx.get(
        f"{stack.apis[0].url}{path}",
        headers={"Authorization": f"Bearer {stack.keys[key]}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return r.json()


def test_the_route_stores_a_label_and_the_training_reads_it(stack: Stack) -> None:
    rid = _log(stack)
    r = _post(stack, "wide", rid, {"helpful": True, "passage": 1, "comment": "right port"})
    assert r.status_code == 200, r.text
    stored = r.json()
    assert (stored["helpful"], stored["passage"], stored["mine"]) == (True, 1, True)

    shown = _get(stack, "wide", f"/v1/queries/{rid}")
    assert [(f["helpful"], f["passage"], f["comment"]) for f in shown["feedback"]] == [
        (True, 1, "right port")
    ]
    listed = {q["request_id"]: q for q in _get(stack, "wide", "/v1/queries")["items"]}
    assert listed[rid]["feedback"] == {"helpful": 1, "not_helpful": 0}

    sessions = make_session_factory(make_engine(stack.settings.database_url))
    tenant = stack.name + TENANT_SUFFIX
    assert feedback_pairs(sessions, tenant) == [(QUESTION, CHUNKS["c-ports"][1], 1.0)]
    assert feedback_pairs(sessions, stack.name + "-other") == []

    # The same key again: its label is replaced (last write wins), here by a span's passage.
    r = _post(stack, "wide", rid, {"helpful": False, "sentence": 0})
    assert r.status_code == 200, r.text
    assert feedback_pairs(sessions, tenant) == [(QUESTION, CHUNKS["c-ports"][1], 0.0)]
    assert [f["helpful"] for f in _get(stack, "wide", f"/v1/queries/{rid}")["feedback"]] == [False]


def test_a_query_the_key_may_not_read_is_not_found_and_bad_indices_say_why(
    stack: Stack,
) -> None:
    rid = _log(stack)
    unknown = _post(stack, "wide", "no-such-query", {"helpful": True})
    other_tenant = _post(stack, "other", rid, {"helpful": True})
    other_principals = _post(stack, "eng", rid, {"helpful": True})
    for r in (unknown, other_tenant, other_principals):
        assert r.status_code == 404, r.text  # never 403: the query's existence is not told
        assert r.json()["error"]["code"] == "NOT_FOUND"
    assert other_tenant.json() == {
        "error": {
            "code": "NOT_FOUND",
            "message": f"no query {rid!r} for this tenant",
            "details": [],
        }
    }

    cases = {
        "passage": ({"helpful": True, "passage": 3}, "the answer cites [1], [2]; there is no [3]"),
        "sentence": ({"helpful": True, "sentence": 1}, "1 evidence span (indices 0-0)"),
    }
    for field, (body, says) in cases.items():
        r = _post(stack, "wide", rid, body)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "INVALID_REQUEST" and says in error["message"], error
        assert error["details"][0]["field"] == field
    for bad in ({"helpful": "yes"}, {"passage": 1}, {"helpful": True, "passage": 0},
                {"helpful": True, "extra": 1}):  # fmt: skip
        assert _post(stack, "wide", rid, bad).status_code == 422, bad

    pending = _post(stack, "wide", _log(stack, answered=False), {"helpful": True})
    assert pending.status_code == 409, pending.text
    assert _get(stack, "wide", f"/v1/queries/{rid}")["feedback"] == []  # nothing was stored


def test_the_route_is_in_the_openapi_document_with_its_responses(stack: Stack) -> None:
    spec = httpx.get(f"{stack.apis[0].url}/openapi.json", timeout=30).json()
    operation = spec["paths"]["/v1/queries/{request_id}/feedback"]["post"]
    assert {"200", "404", "409", "422"} <= set(operation["responses"])
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/FeedbackBody")
    links = spec["paths"]["/v1/query"]["post"]["responses"]["202"]["links"]
    assert "GiveFeedback" in links


def test_the_cli_and_the_client_give_feedback_over_the_api(stack: Stack) -> None:
    from typer.testing import CliRunner

    from entry.cli import app
    from entry.client import HttpClient

    rid = _log(stack)
    url, key = stack.apis[0].url, stack.keys["wide"]
    run = CliRunner().invoke(
        app,
        ["query", "feedback", rid, "--not-helpful", "--passage", "2", "--api", url],
        env={"RAGSTREAM_API_KEY": key},
    )
    assert run.exit_code == 0, run.output
    assert f"stored: not helpful (passage [2]) for {rid}" in run.output
    shown = _get(stack, "wide", f"/v1/queries/{rid}")["feedback"]
    assert [(f["helpful"], f["passage"]) for f in shown] == [(False, 2)]

    refused = CliRunner().invoke(
        app,
        ["query", "feedback", rid, "--helpful", "--passage", "5", "--api", url],
        env={"RAGSTREAM_API_KEY": key},
    )
    assert refused.exit_code == 1, refused.output
    assert "there is no [5]" in refused.output, refused.output

    with HttpClient(url, key) as client:
        given = client.feedback(rid, True, sentence=0, comment="the port")
    assert (given.helpful, given.sentence, given.comment, given.mine) == (True, 0, "the port", True)
