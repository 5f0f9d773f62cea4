"""The asynchronous HTTP client's logic over ``httpx.MockTransport``: the requests it sends
(method, path, body, key) and how it reads the answers, streams and errors. The sync client
shares the request builders (:class:`entry.client.Calls`) and is checked on the same table."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from entry.client import ApiRequestError, AsyncHttpClient, HttpClient

RID = "a" * 32
RESULT = {"request_id": RID, "status": "answered", "answer": "VACUUM reclaims storage [1]."}
ACCEPTED = {"doc_id": "a/b c", "op": "upsert", "event_id": "e1", "status": "accepted"}
JOB = {
    "job_id": "j1", "status": "running", "total_documents": 4, "done_documents": 1,
    "failed_documents": 0, "chunk_count": 9,
}  # fmt: skip
ENDPOINT = {
    "id": "w1", "url": "https://hooks.example.com/rag", "event_types": ["query.completed"],
    "description": "", "created_at": "2026-12-01T12:00:00Z",
}  # fmt: skip
SSE = (
    b'event: accepted\ndata: {"request_id":"' + RID.encode() + b'"}\n\n'
    b'event: queued\ndata: {"request_id":"' + RID.encode() + b'","backlog":2,"pool":"rerank"}\n\n'
    b": ping - 2026-12-01 12:00:00\n\n"
    b'event: evidence\ndata: {"seq":0,"evidence":[{"n":1,"text":"VACUUM reclaims"}]}\n\n'
    b'event: token\ndata: {"seq":1,"text":"VACUUM "}\n\n'
    b'event: token\ndata: {"seq":2,"text":"reclaims storage [1]."}\n\n'
    b"event: answer\ndata: " + json.dumps(RESULT).encode() + b"\n\n"
)


class Api:
    """A mock API: records each request and answers from a table by (method, path)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any, str]] = []
        self.jobs = iter([JOB, JOB | {"status": "succeeded", "done_documents": 4}])

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.raw_path.decode()
        self.seen.append((request.method, path, body, request.headers["authorization"]))
        if path == "/v1/query":
            path += "#stream" if body.get("stream") else "#" + body.get("mode", "sync")
        elif path.startswith("/v1/queries/") and path != "/v1/queries/unknown":
            path = "/v1/queries/ID"
        answer = self.table().get((request.method, path))
        return answer() if answer else httpx.Response(500, text="unexpected " + path)

    def table(self) -> dict[tuple[str, str], Callable[[], httpx.Response]]:
        sse = {"content-type": "text/event-stream"}
        missing = {"error": {"code": "NOT_FOUND", "message": "no query 'unknown'", "details": []}}
        doc = {"doc_id": "a/b c", "status": "indexed", "version": 2, "chunk_count": 3}
        return {
            ("POST", "/v1/query#stream"): lambda: httpx.Response(200, content=SSE, headers=sse),
            ("POST", "/v1/query#async"): lambda: httpx.Response(
                202, json={"request_id": RID, "status": "pending"}
            ),
            ("POST", "/v1/query#sync"): lambda: httpx.Response(200, json=RESULT),
            ("GET", "/v1/queries/unknown"): lambda: httpx.Response(404, json=missing),
            ("GET", "/v1/queries/ID"): lambda: httpx.Response(200, json=RESULT),
            ("POST", "/v1/documents"): lambda: httpx.Response(202, json=ACCEPTED),
            ("DELETE", "/v1/documents/a%2Fb%20c"): lambda: httpx.Response(
                202, json=ACCEPTED | {"op": "delete"}
            ),
            ("GET", "/v1/documents/a%2Fb%20c"): lambda: httpx.Response(200, json=doc),
            ("POST", "/v1/ingest/jobs"): lambda: httpx.Response(
                202, json=JOB | {"status": "pending"}
            ),
            ("GET", "/v1/ingest/jobs/j1"): lambda: httpx.Response(200, json=next(self.jobs)),
            ("POST", "/v1/webhooks"): lambda: httpx.Response(
                201, json=ENDPOINT | {"secret": "whsec_x"}
            ),
            ("GET", "/v1/webhooks?limit=200"): lambda: httpx.Response(
                200, json={"items": [ENDPOINT], "next_cursor": "c/1"}
            ),
            ("GET", "/v1/webhooks?limit=200&cursor=c%2F1"): lambda: httpx.Response(
                200, json={"items": [ENDPOINT | {"id": "w2"}], "next_cursor": None}
            ),
            ("DELETE", "/v1/webhooks/w1"): lambda: httpx.Response(204),
        }


def _async(api: Api, go: Callable[[AsyncHttpClient], Any]) -> Any:
    async def run() -> Any:
        transport = httpx.MockTransport(api)
        async with AsyncHttpClient("http://api", "rsk_k", transport=transport) as c:
            return await go(c)

    return asyncio.run(run())


def test_queries_submit_get_and_wait() -> None:
    api = Api()

    async def go(c: AsyncHttpClient) -> Any:
        answered = await c.query("What does VACUUM do?", top_k=3, route="evidence", timeout_s=5)
        pending = await c.submit("What does VACUUM do?", callback_url="https://x.example/cb")
        waited = await c.wait(pending.request_id, timeout_s=1, poll_s=0)
        return answered, pending, waited

    answered, pending, waited = _async(api, go)
    assert answered.answer == RESULT["answer"] and pending.status == "pending"
    assert waited.status == "answered"
    assert api.seen[0] == (
        "POST", "/v1/query",
        {"query": "What does VACUUM do?", "top_k": 3, "route": "evidence", "timeout_s": 5},
        "Bearer rsk_k",
    )  # fmt: skip
    assert api.seen[1][2] == {
        "query": "What does VACUUM do?", "route": "auto", "mode": "async",
        "callback_url": "https://x.example/cb",
    }  # fmt: skip
    assert api.seen[2][:2] == ("GET", f"/v1/queries/{RID}")


def test_the_stream_yields_queued_evidence_tokens_and_the_answer_without_pings() -> None:
    api = Api()

    async def go(c: AsyncHttpClient) -> list[Any]:
        return [e async for e in c.stream("What does VACUUM do?", route="small")]

    events = _async(api, go)
    assert [e.kind for e in events] == [
        "accepted",
        "queued",
        "evidence",
        "token",
        "token",
        "answer",
    ]
    assert events[1].data["backlog"] == 2 and events[2].data["evidence"][0]["n"] == 1
    assert "".join(e.data["text"] for e in events if e.kind == "token") == RESULT["answer"]
    result = events[-1].result
    assert result is not None and result.answer == RESULT["answer"]
    assert api.seen[0][2] == {"query": "What does VACUUM do?", "route": "small", "stream": True}


def test_documents_jobs_and_webhooks() -> None:
    api = Api()

    async def go(c: AsyncHttpClient) -> list[Any]:
        return [
            await c.upsert_document("a/b c", "text", content_type="text/markdown", title="T"),
            await c.get_document("a/b c"),
            await c.delete_document("a/b c"),
            await c.submit_job(["/srv/kb"], callback_url="https://x.example/cb"),
            await c.wait_job("j1", poll_s=0),
            await c.register_webhook("https://hooks.example.com/rag", ["query.completed"]),
            await c.list_webhooks(),
            await c.delete_webhook("w1"),
        ]

    up, doc, deleted, job, done, created, listed, gone = _async(api, go)
    assert up.op == "upsert" and doc.status == "indexed" and deleted.op == "delete"
    assert job.status == "pending" and done.status == "succeeded" and done.done_documents == 4
    assert created.secret == "whsec_x" and gone is None
    assert [e.id for e in listed] == ["w1", "w2"]  # every page, the cursor followed
    bodies = {(m, p): b for m, p, b, _ in api.seen}
    assert bodies[("POST", "/v1/documents")] == {
        "doc_id": "a/b c", "text": "text", "content_type": "text/markdown", "title": "T",
    }  # fmt: skip
    assert bodies[("POST", "/v1/ingest/jobs")] == {
        "paths": ["/srv/kb"], "callback_url": "https://x.example/cb",
    }  # fmt: skip
    assert bodies[("POST", "/v1/webhooks")] == {
        "url": "https://hooks.example.com/rag", "event_types": ["query.completed"],
        "description": "",
    }  # fmt: skip
    assert [p for m, p, *_ in api.seen].count("/v1/ingest/jobs/j1") == 2  # polled to the end


def test_errors_are_typed() -> None:
    api = Api()

    async def go(c: AsyncHttpClient) -> Any:
        return await c.get("unknown")

    with pytest.raises(ApiRequestError) as caught:
        _async(api, go)
    assert caught.value.status == 404 and caught.value.code == "NOT_FOUND"


def test_the_sync_client_sends_the_same_requests() -> None:
    api = Api()
    with HttpClient("http://api", "rsk_k") as c:
        c._http = httpx.Client(  # the mock transport instead of the network
            base_url="http://api", transport=httpx.MockTransport(api),
            headers={"Authorization": "Bearer rsk_k"},
        )  # fmt: skip
        assert c.query("q").status == "answered"
        assert [e.kind for e in c.stream("q")][-1] == "answer"
        assert c.upsert_document("a/b c", "text").op == "upsert"
        assert c.get_job("j1").status == "running"
        assert c.register_webhook("https://hooks.example.com/rag", ["*"]).secret == "whsec_x"
        assert [e.id for e in c.list_webhooks()] == ["w1", "w2"]
        c.delete_webhook("w1")
    assert [(m, p) for m, p, *_ in api.seen] == [
        ("POST", "/v1/query"), ("POST", "/v1/query"), ("POST", "/v1/documents"),
        ("GET", "/v1/ingest/jobs/j1"), ("POST", "/v1/webhooks"),
        ("GET", "/v1/webhooks?limit=200"), ("GET", "/v1/webhooks?limit=200&cursor=c%2F1"),
        ("DELETE", "/v1/webhooks/w1"),
    ]  # fmt: skip
