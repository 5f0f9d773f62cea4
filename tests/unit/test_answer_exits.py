"""One answer, every exit: the sync JSON reply, the SSE final event, ``GET /v1/queries/{id}``,
the ``query.completed`` webhook payload, the OpenAI completion and its stream's final chunk, the
CLI, the MCP ``ask`` tool and the console (its own stream reader, ``console.js``, run by Node on
the stream the server sent it) all render the same :class:`~topics.answers.Answer`, and agree
field by field."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from rich.console import Console

import entry.query as cli
from api.auth import Principal
from api.mcp.knowledge import KnowledgeBase
from api.mcp.server import build_server
from api.models import QueryResult
from entry.client import parse_sse
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from tests.unit.apikit import make_app
from topics.answers import NOT_IN_DOCUMENTS, Answer
from topics.base import StageTiming
from topics.queries import QueryRequest
from topics.responses import (
    Citation,
    ErrorCode,
    ErrorInfo,
    EvidenceSpan,
    QueryResponse,
    TokenUsage,
)
from workers import query_log
from workers.webhooks import events

T0 = dt.datetime(2026, 12, 2, 1, 0, tzinfo=dt.UTC)
CONSOLE_JS = Path(__file__).resolve().parents[2] / "api" / "console" / "static" / "console.js"
NODE = shutil.which("node")
QUESTION = "What does VACUUM do?"
SPANS = (
    EvidenceSpan(
        n=1, chunk_id="vacuum#0", doc_id="vacuum", start=4, end=30,
        text="VACUUM reclaims storage", score=0.81, title="VACUUM", source="sql-vacuum.html",
    ),
    EvidenceSpan(
        n=2, chunk_id="mvcc#3", doc_id="mvcc", start=0, end=12, text="dead tuples",
        score=0.42, context="Term / Meaning",
    ),
)  # fmt: skip
CITES = (
    Citation(n=1, doc_id="vacuum", chunk_id="vacuum#0", title="VACUUM", source="sql-vacuum.html"),
    Citation(n=2, doc_id="mvcc", chunk_id="mvcc#3"),
)


def _answered(request: QueryRequest) -> QueryResponse:
    return QueryResponse(
        request_id=request.request_id,
        tenant=request.tenant,
        status="answered",
        answer="VACUUM reclaims storage [1] held by dead tuples [2].",
        citations=CITES,
        evidence=SPANS,
        truncated=True,
        usage=TokenUsage(prompt_tokens=40, completion_tokens=7),
        tier="small",
        created_at=T0,
        trace=(
            StageTiming(stage="retrieval", started_at=T0, duration_ms=12.5, wait_ms=3.0),
            StageTiming(
                stage="generation-small", started_at=T0, duration_ms=100.25, detail={"ttft_ms": 9}
            ),
        ),
    )


def _failed(request: QueryRequest) -> QueryResponse:
    return QueryResponse(
        request_id=request.request_id,
        tenant=request.tenant,
        status="failed",
        evidence=SPANS[:1],
        error=ErrorInfo(code=ErrorCode.BACKEND_UNAVAILABLE, message="down", stage="generation"),
        tier="small",
        created_at=T0,
    )


#: The fields every full exit carries (the webhook's trace is a summary, checked apart).
VIEW = ("request_id", "tenant", "status", "answer", "citations", "evidence", "truncated",
        "tier", "error", "usage", "cached", "refused")  # fmt: skip


def _exits(tmp_path: Path, make: Any) -> dict[str, dict[str, Any]]:
    """The answer of one question as each exit renders it (JSON-like dicts), and the
    OpenAI forms under ``openai`` / ``openai_stream``."""
    app, fake = make_app(tmp_path, lambda r: [make(r)])
    url = fake.settings.database.url
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    fake.sessions = sessions
    out: dict[str, dict[str, Any]] = {}
    with TestClient(app) as client:
        r = client.post("/v1/query", json={"query": QUESTION})
        body = r.json()
        out["sync"] = body.get("result", body)
        with client.stream("POST", "/v1/query", json={"query": QUESTION, "stream": True}) as s:
            final = [e for e in parse_sse(s.iter_lines()) if e.kind in {"answer", "error"}]
        out["sse"] = final[-1].data
        if NODE is not None:  # the console's request, and what its reader makes of the answer
            out["console"] = _console(client)
        out["mcp"] = _mcp_ask(app.state.services)
        question = fake.asked[0]
        response = make(question)  # what the delivery pool records, and the webhook sends
        query_log.log_pending(sessions, question)  # as the query service does on admission
        with sessions.begin() as session:
            query_log.record_final(session, [response])
        out["poll"] = client.get(f"/v1/queries/{question.request_id}").json()
        out["webhook"] = events.query_completed(response)["data"]
        chat = {"messages": [{"role": "user", "content": QUESTION}]}
        out["openai"] = client.post("/v1/chat/completions", json=chat).json()
        streamed = {**chat, "stream": True, "stream_options": {"include_usage": True}}
        raw = client.post("/v1/chat/completions", json=streamed).text
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    finish: dict[str, Any] = next(
        (c for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]), {}
    )
    usage = next((c["usage"] for c in chunks if c.get("usage")), None)
    out["openai_stream"] = {
        "content": "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                           if c.get("choices")),
        "final": {**finish, "usage": usage} if finish else {},
        "error": next((c["error"] for c in chunks if "error" in c), None),
    }  # fmt: skip
    # The asked question ids differ per exit: compare them without the id.
    for name in ("sync", "sse", "poll", "webhook", "mcp", *(("console",) if NODE else ())):
        out[name] = {k: v for k, v in out[name].items() if k != "request_id"}
    return out


class _Caller(KnowledgeBase):
    """The MCP tools' knowledge base over the app's services, its key being tenant ``acme``
    (the HTTP routes' caller in :func:`~tests.unit.apikit.make_app`)."""

    async def principal(self, key: str | None) -> Principal:
        return Principal(1, "acme")


def _mcp_ask(services: Any) -> dict[str, Any]:
    """The MCP ``ask`` tool's answer to :data:`QUESTION` (the SDK's in-process client)."""
    from mcp.client.client import Client

    server = build_server(_Caller(services), lambda _ctx: "rsk_any")

    async def go() -> dict[str, Any]:
        async with Client(server) as client:
            called = await client.call_tool("ask", {"question": QUESTION})
            return json.loads(called.content[0].text)  # type: ignore[union-attr,no-any-return]

    return asyncio.run(go())


#: Runs console.js's reader on a stream (see the script's header).
CONSOLE_READER = Path(__file__).with_name("console_reader.js")


def _console(client: TestClient) -> dict[str, Any]:
    """What the console makes of the answer: its reader run on the stream the server sends
    for the request the console builds; the final event's data with ``refused`` as the
    console decides it (``console_refused``)."""
    assert NODE is not None
    body = {"stream": True, "query": QUESTION}
    sse = client.post("/v1/query", json=body).text
    run = subprocess.run(
        [NODE, str(CONSOLE_READER), str(CONSOLE_JS), QUESTION],
        input=sse, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    seen = json.loads(run.stdout)
    assert seen["sent"] == {"url": "/v1/query", "method": "POST", "body": body}
    assert seen["events"][0] == "accepted" and seen["events"][-1] in {"answer", "error"}
    return {**seen["final"], "console_refused": seen["refused"]}


def test_an_answer_agrees_field_by_field_on_every_exit(tmp_path: Path) -> None:
    out = _exits(tmp_path, _answered)
    view = Answer.of(_answered(QueryRequest(tenant="acme", query=QUESTION, deadline=T0)))
    expected = {k: v for k, v in view.model_dump(mode="json").items() if k in VIEW}
    expected.pop("request_id")
    assert expected["evidence"][1]["context"] == "Term / Meaning" and expected["truncated"]
    for name in ("sync", "sse", "poll", "webhook", "mcp", *(("console",) if NODE else ())):
        got = {k: out[name][k] for k in expected}
        assert got == expected, name
    if NODE:
        assert out["console"]["console_refused"] is False
    # The HTTP forms agree on every other field too (trace with waits and details, question).
    trace = [
        {"stage": t.stage, "duration_ms": t.duration_ms, "wait_ms": t.wait_ms,
         "detail": dict(t.detail)}
        for t in view.trace
    ]  # fmt: skip
    for name in ("sync", "sse", "poll"):
        assert out[name]["trace"] == trace, name
        assert out[name]["query"] == QUESTION, name
    assert out["webhook"]["trace"] == {
        "stages": [{"stage": t.stage, "duration_ms": t.duration_ms} for t in view.trace],
        "total_ms": 112.75,
    }
    assert out["poll"]["completed_at"] is not None and out["poll"]["created_at"] is not None
    openai, final = out["openai"], out["openai_stream"]["final"]
    assert openai["choices"][0]["message"]["content"] == view.answer
    assert out["openai_stream"]["content"] == view.answer
    usage = {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47}
    for form in (openai, final):
        assert form["citations"] == expected["citations"]
        assert form["evidence"] == expected["evidence"]
        assert form["usage"] == usage
    # a truncated answer finishes with "length" (issue 25: it said "stop" before)
    assert final["choices"][0]["finish_reason"] == "length"
    assert openai["choices"][0]["finish_reason"] == "length" and final["truncated"] is True
    assert final["answer"] == view.answer and final["replaced"] is False
    printed = _cli(out["poll"])
    assert view.answer is not None and view.answer in printed
    assert "[1] VACUUM — sql-vacuum.html" in printed and "[2] mvcc — mvcc" in printed
    assert "tier small" in printed and "generation-small" in printed


def test_a_refusal_says_so_on_every_exit(tmp_path: Path) -> None:
    """A client tells a refusal from an answer by ``refused``, not by matching its text."""

    def refused(request: QueryRequest) -> QueryResponse:
        return _answered(request).model_copy(
            update={"answer": NOT_IN_DOCUMENTS, "citations": (), "truncated": False}
        )

    out = _exits(tmp_path, refused)
    for name in ("sync", "sse", "poll", "webhook", "mcp", *(("console",) if NODE else ())):
        assert out[name]["refused"] is True and out[name]["status"] == "answered", name
    if NODE:
        assert out["console"]["console_refused"] is True
    assert out["openai"]["refused"] is True and out["openai_stream"]["final"]["refused"] is True
    answered = _exits(tmp_path / "answered", _answered)
    assert answered["sync"]["refused"] is False and answered["openai"]["refused"] is False
    logged = {"request_id": "r", "status": "answered", "answer": NOT_IN_DOCUMENTS}
    assert Answer.model_validate(logged).refused  # a view logged before the field existed


def test_a_failure_agrees_field_by_field_on_every_exit(tmp_path: Path) -> None:
    out = _exits(tmp_path, _failed)
    view = Answer.of(_failed(QueryRequest(tenant="acme", query=QUESTION, deadline=T0)))
    expected = {k: v for k, v in view.model_dump(mode="json").items() if k in VIEW}
    expected.pop("request_id")
    assert expected["status"] == "failed" and expected["answer"] is None
    assert expected["evidence"], "a failure keeps the evidence retrieval found"
    for name in ("sync", "sse", "poll", "webhook", "mcp", *(("console",) if NODE else ())):
        assert {k: out[name][k] for k in expected} == expected, name
    assert out["openai"]["error"]["code"] == "BACKEND_UNAVAILABLE"
    assert out["openai_stream"]["error"]["code"] == "BACKEND_UNAVAILABLE"
    printed = _cli(out["poll"])
    assert "BACKEND_UNAVAILABLE" in printed and "down" in printed


def _cli(data: dict[str, Any]) -> str:
    """What ``ragstream query get`` prints for this HTTP result (as ``HttpClient`` parses it)."""
    buffer = io.StringIO()
    saved = cli.console
    cli.console = Console(file=buffer, width=200, color_system=None)
    try:
        cli.print_result(QueryResult.model_validate({"request_id": "r", **data}))
    finally:
        cli.console = saved
    return buffer.getvalue()


@pytest.mark.parametrize("make", [_answered, _failed])
def test_the_query_log_keeps_the_whole_view(tmp_path: Path, make: Any) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    request = QueryRequest(tenant="acme", query=QUESTION, deadline=T0)
    query_log.log_pending(sessions, request)
    response = make(request)
    with sessions.begin() as session:
        query_log.record_final(session, [response])
    logged = query_log.read(sessions, "acme", request.request_id)
    assert logged is not None and logged.completed_at is not None
    assert logged.query == QUESTION
    keep = {"query", "created_at", "completed_at"}
    assert logged.model_dump(exclude=keep) == Answer.of(response).model_dump(exclude=keep)
