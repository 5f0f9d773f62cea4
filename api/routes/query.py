"""``POST /v1/query`` (sync, async or SSE), ``GET /v1/queries`` (the tenant's query log, a
cursor-paginated page, newest first) and ``GET /v1/queries/{request_id}``.

Server-Sent Events of a streamed query (``"stream": true``), in order:

- ``event: accepted`` ``{"request_id": ...}`` once the query event is durable;
- ``event: queued`` ``{"request_id", "backlog", "pool"}`` right after: the query waits in the
  pools' queues (``backlog``: events ahead of it in the most lagging query ``pool``);
- ``event: evidence`` ``{"seq": 0, "evidence": [span, ...]}`` the quoted evidence, as soon as
  the evidence stage has chosen it and before any LLM token (LLM tiers);
- ``event: token`` ``{"seq": n, "text": "..."}`` as the generation pool produces tokens;
- ``event: replace`` ``{"text", "truncated"}`` right before ``answer`` when the recorded answer
  is not what the ``token`` events spelled (their texts concatenated): the answer check replaced
  an empty or looping completion with the evidence answer, or cut a completion that hit its
  token limit at its last whole sentence (``truncated: true``), or no token carried text. A
  client that renders tokens replaces what it showed with ``text``; after it, the shown text
  equals ``answer.answer``, as it does without a ``replace`` event;
- ``event: answer`` with the full :class:`~api.models.QueryResult` (authoritative: tokens are a
  preview, the answer is the recorded result), or ``event: error`` with the result of a failed
  query, or ``event: timeout`` ``{"request_id", "links"}`` when the wait ran out (poll then).

Every ``api.sse_keepalive_s`` (15 s) a comment line (``: ping ...``) keeps proxies from dropping
the stream while the query is queued or generating. The stream is an ``EventSourceResponse``
(sse-starlette): when the client disconnects, the body generator is cancelled, the request's
waiter is unregistered at once, and the request is flagged as cancelled (:mod:`workers.cancel`):
a generation pool does not start its LLM call, or stops it within half a second, and records a
``CANCELLED`` error in the query log. Stages before generation (retrieval, rerank, evidence)
are short and run to their end.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session, sessionmaker
from sse_starlette import EventSourceResponse

from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, ErrorEnvelope
from api.models import QueryBody, QueryResult
from api.pages import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    QueryPage,
    QuerySummary,
    decode_cursor,
    encode_cursor,
)
from api.querying import QueryService, replies_until
from ragstream.settings import Settings
from topics.answers import Answer
from topics.queries import QueryRequest
from topics.responses import ErrorCode, QueryResponse
from topics.tokens import AnswerToken, TokenOrder
from workers import query_log
from workers.conversation import standalone_question
from workers.webhooks.ssrf import SsrfBlockedError, check_url, parse_networks

router = APIRouter(tags=["query"])

#: HTTP status of a query that failed in the pipeline, by its error code.
FAILED_STATUS = {
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.PROMPT_TOO_LONG: 422,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.BACKEND_UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
    ErrorCode.CANCELLED: 499,  # "client closed request" (nginx): the client left first
    ErrorCode.EMBEDDING_MODEL_MISMATCH: 503,  # the deployment lacks the index's model
    ErrorCode.UNAVAILABLE: 503,  # the query event could not be produced
}
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 413, 415, 422, 429, 503, 504)
}
#: The OpenAPI content of a Server-Sent Events answer (``stream: true``).
#: One Server-Sent Event of ``POST /v1/query`` (OpenAPI 3.1: the ``text/event-stream`` schema
#: describes each event, as parsed into ``event``, ``data``, ``id``, ``retry``).
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {
            "enum": [
                "accepted", "queued", "evidence", "token", "replace", "answer", "error",
                "timeout",
            ],
        },
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "A JSON object: `accepted` {request_id, links}; `queued` "
            "{request_id, backlog, pool}; `evidence` {seq, evidence: [EvidenceOut]}; `token` "
            "{seq, text}; `replace` {text, truncated}; `answer` and `error`: a QueryResult; "
            "`timeout` {request_id, links}.",
        },
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}  # fmt: skip
#: One event of an OpenAI stream: ``data`` only, a chunk object or ``[DONE]``.
OPENAI_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": "A `chat.completion.chunk` (`text_completion`) JSON object, an "
            '`{"error": {...}}` object, or `[DONE]` (the last event).',
        },
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
SSE_CONTENT = {"text/event-stream": {"schema": SSE_EVENT}}
OPENAI_SSE_CONTENT = {"text/event-stream": {"schema": OPENAI_SSE_EVENT}}


#: The example body of ``POST /v1/query`` (Swagger UI's "Try it out" sends it as is).
QUERY_EXAMPLE = {"query": "What does VACUUM do?", "top_k": 3, "route": "auto", "mode": "sync"}


def query_service(request: Request) -> QueryService:
    """The process's :class:`QueryService`."""
    return services(request).extras["queries"]  # type: ignore[no-any-return]


def poll_link(settings: Settings, request_id: str) -> dict[str, str]:
    """``{"self": "<public_url>/v1/queries/<id>"}``."""
    return {"self": f"{settings.api.public_url}/v1/queries/{request_id}"}


async def check_callback(settings: Settings, url: str | None) -> None:
    """SSRF-check a ``callback_url`` when the query is submitted (again at delivery).

    Raises:
        ApiError: 422 ``INVALID_REQUEST`` naming the refused address.
    """
    if url is None:
        return
    allow = parse_networks(settings.webhooks.allow_networks)
    try:
        await asyncio.to_thread(check_url, url, allow)
    except SsrfBlockedError as exc:
        raise ApiError(422, "INVALID_REQUEST", f"callback_url: {exc}") from exc


def build_request(settings: Settings, who: Principal, body: QueryBody) -> QueryRequest:
    """The ``rag.queries`` event of ``body``, scoped to the caller's tenant.

    Raises:
        ApiError: 422 when the query is longer than ``api.max_query_chars``.
    """
    if len(body.query) > settings.api.max_query_chars:
        raise ApiError(
            422,
            "INVALID_REQUEST",
            f"query: at most {settings.api.max_query_chars} characters, got {len(body.query)}",
        )
    if not body.query.strip():
        raise ApiError(422, "INVALID_REQUEST", "query: must not be blank")
    query = standalone_question(body.history, body.query)
    if len(query) > settings.api.max_query_chars:
        query = body.query  # the context goes, never the question
    now = dt.datetime.now(dt.UTC)
    return QueryRequest(
        tenant=who.tenant,
        query=query,
        deadline=now + dt.timedelta(seconds=settings.api.query_deadline_s),
        top_n=body.top_n or settings.retrieval.top_n,
        top_k=body.top_k or settings.rerank.top_k,
        filters=tuple(body.filters),
        route=body.route,
        stream=body.stream,
        callback_url=body.callback_url,
    )


def wait_seconds(settings: Settings, requested: float | None) -> float:
    """The sync wait: the request's ``timeout_s`` or the default, capped by ``max_wait_s``."""
    return min(requested or settings.api.wait_timeout_s, settings.api.max_wait_s)


def result_response(result: QueryResult) -> JSONResponse:
    """200 for an answer, 202 while pending, the error's HTTP status for a failure."""
    if result.status == "answered":
        return JSONResponse(result.model_dump(mode="json"), status_code=200)
    if result.status == "pending":
        return JSONResponse(result.model_dump(mode="json"), status_code=202)
    assert result.error is not None
    try:
        status = FAILED_STATUS[ErrorCode(result.error.code)]
    except ValueError:
        status = 500
    body = {
        "error": {
            "code": result.error.code,
            "message": result.error.message,
            "details": [{"request_id": result.request_id, "stage": result.error.stage}],
        },
        "result": result.model_dump(mode="json"),
    }
    return JSONResponse(body, status_code=status)


def logged_result(
    sessions: sessionmaker[Session], tenant: str, request_id: str
) -> QueryResult | None:
    """The query-log state of ``request_id`` if it belongs to ``tenant``."""
    logged = query_log.read(sessions, tenant, request_id)
    return None if logged is None else QueryResult.render(logged)


@router.post(
    "/v1/query",
    response_model=QueryResult,
    responses={
        200: {
            "description": "The answer (JSON); with `stream: true`, Server-Sent Events: "
            "`accepted`, `queued`, `evidence`, `token`..., `replace` (when the recorded answer "
            "is not the tokens' text), then `answer`, `error` or `timeout`, "
            "with `: ping` keep-alive comments.",
            "content": SSE_CONTENT,
        },
        202: {"model": QueryResult, "description": "Accepted; poll links.self."},
        **ERRORS,
    },
    openapi_extra={
        "requestBody": {"content": {"application/json": {"example": QUERY_EXAMPLE}}},
    },
)
async def post_query(body: QueryBody, request: Request, who: Principal = Depends(principal)) -> Any:
    """Ask a question of the caller's knowledge base (sync, async, or SSE with ``stream``)."""
    started = time.monotonic()
    svc = query_service(request)
    settings = svc.settings
    event = build_request(settings, who, body)
    await check_callback(settings, body.callback_url)
    wait_s = (
        None if body.mode == "async" and not body.stream else wait_seconds(settings, body.timeout_s)
    )
    links = poll_link(settings, event.request_id)
    hit, queue = await svc.ask(event, wait_s=wait_s, tokens=body.stream)
    if body.stream:
        stream = sse_stream(svc, event, hit, queue, started, wait_s or 0.0)
        return event_stream(settings, stream, event.request_id)
    if hit is not None:
        ms = (time.monotonic() - started) * 1000
        return result_response(
            QueryResult.render(Answer.of(hit, query=event.query), latency_ms=ms, links=links)
        )
    if queue is None:
        pending = QueryResult.render(_pending(event), links=links)
        return JSONResponse(pending.model_dump(mode="json"), status_code=202)
    try:
        response = None
        async for reply in replies_until(queue, started + wait_s):  # type: ignore[operator]
            if isinstance(reply, QueryResponse):
                response = reply
    finally:
        svc.unsubscribe(event.request_id)
    ms = (time.monotonic() - started) * 1000
    if response is not None:
        answer = Answer.of(response, query=event.query)
        return result_response(QueryResult.render(answer, latency_ms=ms, links=links))
    late = await asyncio.to_thread(query_log.read, svc.sessions, who.tenant, event.request_id)
    return result_response(QueryResult.render(late or _pending(event), latency_ms=ms, links=links))


def _pending(event: QueryRequest) -> Answer:
    return Answer.pending(event.request_id, tenant=event.tenant, query=event.query)


def event_stream(
    settings: Settings, body: AsyncIterator[bytes], request_id: str
) -> EventSourceResponse:
    """``text/event-stream`` of ``body`` with keep-alive comments every
    ``api.sse_keepalive_s``; the body is cancelled when the client disconnects."""
    return EventSourceResponse(
        body,
        ping=settings.api.sse_keepalive_s,
        sep="\n",
        headers={"Cache-Control": "no-cache", "X-Request-Id": request_id},
    )


def sse(event: str, data: Any) -> bytes:
    """One Server-Sent Event."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def token_event(token: AnswerToken) -> tuple[bytes, str]:
    """``(event, text)`` of a token: the ``evidence`` event (no text), a ``token`` event with
    its text, or ``b""`` for a token without text (the final marker)."""
    if token.kind == "evidence":
        spans = [e.model_dump(mode="json") for e in token.evidence]
        return sse("evidence", {"seq": token.seq, "evidence": spans}), ""
    if token.text:
        return sse("token", {"seq": token.seq, "text": token.text}), token.text
    return b"", ""


def final_events(
    answer: Answer, shown: str, latency_ms: float, links: dict[str, str]
) -> list[bytes]:
    """The events that end a stream: ``answer`` (preceded by ``replace`` when the recorded
    answer is not ``shown``, the token texts concatenated), or ``error``."""
    result = QueryResult.render(answer, latency_ms=latency_ms, links=links)
    if result.status != "answered":
        return [sse("error", result.model_dump(mode="json"))]
    text = answer.answer or ""
    replace = [sse("replace", {"text": text, "truncated": answer.truncated})]
    return [*(replace if text != shown else []), sse("answer", result.model_dump(mode="json"))]


async def sse_stream(  # noqa: PLR0917 - one call site
    svc: QueryService,
    event: QueryRequest,
    hit: QueryResponse | None,
    queue: asyncio.Queue[Any] | None,
    started: float,
    wait_s: float,
) -> AsyncIterator[bytes]:
    """The SSE body of a streamed query (see the module docstring)."""
    links = poll_link(svc.settings, event.request_id)
    yield sse("accepted", {"request_id": event.request_id, "links": links})
    try:
        if hit is not None:
            yield sse("token", {"seq": 0, "text": hit.answer})
            ms = (time.monotonic() - started) * 1000
            for chunk in final_events(Answer.of(hit, query=event.query), hit.answer, ms, links):
                yield chunk
            return
        lag, pool = await svc.backlog()
        yield sse("queued", {"request_id": event.request_id, "backlog": lag, "pool": pool})
        assert queue is not None
        order = TokenOrder()
        shown = ""  # the token texts so far, concatenated
        async for reply in replies_until(queue, started + wait_s):
            if isinstance(reply, AnswerToken):
                if order.fresh(reply):  # a replayed generation re-sends tokens: show each once
                    chunk, text = token_event(reply)
                    shown += text
                    if chunk:
                        yield chunk
                continue
            ms = (time.monotonic() - started) * 1000
            for chunk in final_events(Answer.of(reply, query=event.query), shown, ms, links):
                yield chunk
            return
        yield sse("timeout", {"request_id": event.request_id, "links": links})
    except (asyncio.CancelledError, GeneratorExit):
        if hit is None:  # the client left before its answer: stop the pools' work on it
            svc.cancel(event.request_id)
        raise
    finally:
        svc.unsubscribe(event.request_id)


@router.get(
    "/v1/queries",
    response_model=QueryPage,
    responses={s: {"model": ErrorEnvelope} for s in (401, 422, 429)},
)
async def list_queries(
    request: Request,
    who: Principal = Depends(principal),
    limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(default=None, max_length=512, description="A `next_cursor`."),
) -> QueryPage:
    """The caller's past queries from the query log, newest first, one page at a time."""
    svc = query_service(request)
    before = decode_cursor(cursor, (dt.datetime, str))
    rows = await asyncio.to_thread(
        partial(query_log.page, svc.sessions, who.tenant, limit=limit + 1, before=before)
    )
    items = [
        QuerySummary(
            **{k: v for k, v in row.items() if k != "sort_key"},
            links=poll_link(svc.settings, row["request_id"]),
        )
        for row in rows[:limit]
    ]
    more = len(rows) > limit
    return QueryPage(
        items=items, next_cursor=encode_cursor(list(rows[limit - 1]["sort_key"])) if more else None
    )


@router.get(
    "/v1/queries/{request_id}",
    response_model=QueryResult,
    responses={404: {"model": ErrorEnvelope}, 401: {"model": ErrorEnvelope}},
)
async def get_query(
    request_id: str, request: Request, who: Principal = Depends(principal)
) -> QueryResult:
    """Status and answer of a query from the query log (tenant-scoped)."""
    svc = query_service(request)
    if len(request_id) > 128:
        raise ApiError(404, "NOT_FOUND", "no such query")
    result = await asyncio.to_thread(logged_result, svc.sessions, who.tenant, request_id)
    if result is None:
        raise ApiError(404, "NOT_FOUND", f"no query {request_id!r} for this tenant")
    return result.model_copy(update={"links": poll_link(svc.settings, request_id)})
