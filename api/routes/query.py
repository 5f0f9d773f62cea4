"""``POST /v1/query`` (sync, async or SSE), ``GET /v1/queries`` (the tenant's query log, a
cursor-paginated page, newest first, with each answer's feedback tally) and
``GET /v1/queries/{request_id}`` (with the feedback given on it, :mod:`api.routes.feedback`).

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

Every event carries an ``id:`` (``<request_id>:<position>``, :mod:`api.streams.ids`). A client
whose connection broke sends the same request again with ``Last-Event-ID`` (or
``GET /v1/queries/{id}/events``), on any API process, and gets every event after that one
exactly once, then the live rest (:mod:`api.streams.resume`): from ``rag.tokens`` and the query
log, within ``rag.tokens``' retention (410 ``STREAM_EXPIRED`` after it).

Every ``api.sse_keepalive_s`` (15 s) a comment line (``: ping ...``) keeps proxies from dropping
the stream while the query is queued or generating. The stream is an ``EventSourceResponse``
(sse-starlette): when the client disconnects, the body generator is cancelled, the request's
waiter is unregistered at once, and, unless a stream resumes it within ``api.resume_grace_s``
(10 s; :mod:`api.streams.attach`), the request is flagged as cancelled (:mod:`workers.cancel`):
a generation pool does not start its LLM call, or stops it within half a second, and records a
``CANCELLED`` error in the query log. Stages before generation (retrieval, rerank, evidence)
are short and run to their end. A sync request whose client disconnects while it waits is
cancelled the same way (the wait asks every half second, :func:`api.querying.answer_or_leave`)
and counted (``ragstream_api_sync_queries_left_total``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import Counter
from sqlalchemy.orm import Session, sessionmaker
from sse_starlette import EventSourceResponse

from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, ErrorEnvelope
from api.feedback_models import FeedbackTally, LoggedQuery
from api.models import HistoryTurn, QueryBody, QueryResult
from api.pages import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    QueryPage,
    QuerySummary,
    decode_cursor,
    encode_cursor,
)
from api.querying import QueryService, answer_or_leave, replies_until
from api.streams.ids import EVENT_ID_PATTERN, FINAL, MAX_ID_CHARS, Position, parse_event_id
from api.streams.native import numbered, positioned
from api.streams.resume import RESUMES, open_resumed
from ragstream.settings import Settings
from topics.answers import Answer
from topics.queries import QueryRequest, Turn
from topics.responses import ErrorCode, QueryResponse
from topics.tokens import AnswerToken, TokenOrder
from workers import feedback, query_log
from workers.webhooks.ssrf import SsrfBlockedError, check_url, parse_networks

router = APIRouter(tags=["query"])

SYNC_LEFT = Counter(
    "ragstream_api_sync_queries_left_total",
    "Sync POST /v1/query requests whose client disconnected before the answer; each is "
    "cancelled (workers/cancel.py) and answered 499.",
)

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
    ErrorCode.WITHHELD: 403,  # a recorded answer cites a document the asker may no longer read
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
    """The ``rag.queries`` event of ``body``, scoped to the caller's tenant and principals
    (the documents the key may read, ``docs/permissions.md``).

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
    now = dt.datetime.now(dt.UTC)
    return QueryRequest(
        tenant=who.tenant,
        query=body.query,
        conversation=conversation_of(body.history),
        deadline=now + dt.timedelta(seconds=settings.api.query_deadline_s),
        top_n=body.top_n or settings.retrieval.top_n,
        top_k=body.top_k or settings.rerank.top_k,
        filters=tuple(body.filters),
        route=body.route,
        stream=body.stream,
        callback_url=body.callback_url,
        principals=who.principals,
    )


def conversation_of(history: Sequence[str | HistoryTurn]) -> tuple[Turn, ...]:
    """The ``conversation`` of a query event from a body's ``history`` (a string is a question
    whose answer the client did not keep); blank questions are left out."""
    turns = (h if isinstance(h, HistoryTurn) else HistoryTurn(question=h) for h in history)
    return tuple(
        Turn(question=t.question.strip(), answer=t.answer) for t in turns if t.question.strip()
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
    sessions: sessionmaker[Session],
    tenant: str,
    request_id: str,
    asker: tuple[str, ...] | None = None,
) -> QueryResult | None:
    """The query-log state of ``request_id`` if it belongs to ``tenant`` and was asked with
    the principals ``asker`` (``None``: any; docs/permissions.md)."""
    logged = query_log.read(sessions, tenant, request_id, asker)
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
        204: {"description": "`Last-Event-ID` is its stream's last event: nothing is left."},
        403: {
            "model": ErrorEnvelope,
            "description": "`Last-Event-ID` names a query whose answer cites a document this "
            "key may no longer read.",
        },
        404: {
            "model": ErrorEnvelope,
            "description": "`Last-Event-ID` names a query this tenant never asked.",
        },
        410: {
            "model": ErrorEnvelope,
            "description": "`Last-Event-ID` names a stream past the token topic's retention.",
        },
    },
    openapi_extra={
        "requestBody": {"content": {"application/json": {"example": QUERY_EXAMPLE}}},
    },
)
async def post_query(
    body: QueryBody,
    request: Request,
    who: Principal = Depends(principal),
    last_event_id: str | None = Header(
        default=None,
        max_length=MAX_ID_CHARS,
        pattern=EVENT_ID_PATTERN,
        description="With `stream: true`: resume that stream after this event id instead of "
        "asking again (the body is not used).",
    ),
) -> Any:
    """Ask a question of the caller's knowledge base (sync, async, or SSE with ``stream``)."""
    started = time.monotonic()
    svc = query_service(request)
    settings = svc.settings
    if body.stream and last_event_id:
        rid, after = resume_position(None, last_event_id)
        return await resumed_response(svc, who.tenant, rid, after, who.principals)
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
    window = (started, started + (wait_s or 0.0))
    return await _sync_result(svc, request, who, event, queue=queue, window=window, links=links)


async def _sync_result(
    svc: QueryService,
    request: Request,
    who: Principal,
    event: QueryRequest,
    *,
    queue: asyncio.Queue[Any],
    window: tuple[float, float],
    links: dict[str, str],
) -> Response:
    """The sync answer of ``event``, asked at the monotonic time ``window[0]``: its response by
    ``window[1]``, else what the query log holds then (202 while pending); 499 when the client
    left first (the request is cancelled, :func:`api.querying.answer_or_leave`)."""
    started, until = window
    try:
        response, left = await answer_or_leave(queue, until, request.is_disconnected)
    finally:
        svc.unsubscribe(event.request_id, queue)
    if left:  # nobody is waiting for it: free the pools' (and the LLM's) work on it
        svc.cancel(event.request_id)
        SYNC_LEFT.inc()
        return Response(status_code=499)
    ms = (time.monotonic() - started) * 1000
    if response is not None:
        answer = Answer.of(response, query=event.query)
        return result_response(QueryResult.render(answer, latency_ms=ms, links=links))
    late = await asyncio.to_thread(
        query_log.read, svc.sessions, who.tenant, event.request_id, who.principals
    )
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


async def live_items(
    queue: asyncio.Queue[Any], until: float, query: str
) -> AsyncIterator[AnswerToken | Answer]:
    """The replies on ``queue`` until ``until``: each token ``seq`` once (a replayed generation
    re-sends tokens), then the answer of the response."""
    order = TokenOrder()
    async for reply in replies_until(queue, until):
        if isinstance(reply, AnswerToken):
            if order.fresh(reply):
                yield reply
            continue
        yield Answer.of(reply, query=query)
        return


async def hit_items(hit: QueryResponse, query: str) -> AsyncIterator[AnswerToken | Answer]:
    """A cache hit as a stream: its whole answer as the token ``seq`` 0, then the answer."""
    yield AnswerToken(tenant=hit.tenant, request_id=hit.request_id, seq=0, text=hit.answer or "")
    yield Answer.of(hit, query=query)


async def attached(
    svc: QueryService, request_id: str, body: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """``body``, counted as an open stream of ``request_id`` (:mod:`api.streams.attach`): when
    the client leaves first, the request is cancelled unless a stream resumes it within
    ``api.resume_grace_s``."""
    await svc.attach(request_id)
    try:
        async for chunk in body:
            yield chunk
    except (asyncio.CancelledError, GeneratorExit):
        svc.cancel(request_id)  # the client left before its answer
        raise
    else:
        svc.detach(request_id)


async def sse_stream(  # noqa: PLR0917 - one call site
    svc: QueryService,
    event: QueryRequest,
    hit: QueryResponse | None,
    queue: asyncio.Queue[Any] | None,
    started: float,
    wait_s: float,
) -> AsyncIterator[bytes]:
    """The SSE body of a streamed query (see the module docstring)."""
    rid = event.request_id
    links = poll_link(svc.settings, rid)
    try:
        if hit is not None:
            items = hit_items(hit, event.query)
            events = positioned(rid, items, links=links, started=started, backlog=None)
            async for chunk in numbered(rid, events, None):
                yield chunk
            return
        assert queue is not None
        items = live_items(queue, started + wait_s, event.query)
        events = positioned(rid, items, links=links, started=started, backlog=svc.backlog)
        async for chunk in attached(svc, rid, numbered(rid, events, None)):
            yield chunk
    finally:
        svc.unsubscribe(rid, queue)


def resume_position(request_id: str | None, last_event_id: str) -> tuple[str, Position]:
    """``(request_id, position)`` of a ``Last-Event-ID``, checked against the request of the
    path (``request_id``; ``None``: any).

    Raises:
        ApiError: 422 ``INVALID_REQUEST`` for an id this API did not write, or one of
            another request than the path's.
    """
    try:
        rid, position = parse_event_id(last_event_id)
    except ValueError as exc:
        raise ApiError(422, "INVALID_REQUEST", f"Last-Event-ID: {exc}") from exc
    if request_id is not None and rid != request_id:
        raise ApiError(
            422, "INVALID_REQUEST", f"Last-Event-ID names query {rid!r}, not {request_id!r}"
        )
    return rid, position


async def resumed_response(
    svc: QueryService,
    tenant: str,
    request_id: str,
    after: Position | None,
    asker: Sequence[str] | None = None,
) -> Response:
    """The rest of ``request_id``'s stream past ``after`` (``None``: all of it), as SSE, from
    the log and then live (:mod:`api.streams.resume`); 204 when ``after`` is its last event.

    Raises:
        ApiError: 404, 410 ``STREAM_EXPIRED``, 503 (see :func:`open_resumed`).
    """
    if after is not None and after >= FINAL:
        RESUMES.labels("complete").inc()
        return Response(status_code=204, headers={"X-Request-Id": request_id})
    started = time.monotonic()
    until = started + wait_seconds(svc.settings, None)
    resumed = await open_resumed(svc, tenant, request_id, until=until, asker=asker)
    pending = resumed.answer.status == "pending"
    links = poll_link(svc.settings, request_id)
    backlog = svc.backlog if pending else None

    async def body() -> AsyncIterator[bytes]:
        events = positioned(
            request_id, resumed.items, links=links, started=started, backlog=backlog
        )
        chunks = numbered(request_id, events, after)
        try:
            async for chunk in attached(svc, request_id, chunks) if pending else chunks:
                yield chunk
        finally:
            await resumed.items.aclose()  # unsubscribes its waiter

    return event_stream(svc.settings, body(), request_id)


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
        partial(
            query_log.page,
            svc.sessions,
            who.tenant,
            limit=limit + 1,
            before=before,
            asker=who.principals,
        )
    )
    tallies = await asyncio.to_thread(
        feedback.tallies, svc.sessions, [row["request_id"] for row in rows[:limit]]
    )
    items = [
        QuerySummary(
            **{k: v for k, v in row.items() if k != "sort_key"},
            feedback=FeedbackTally(
                helpful=tallies.get(row["request_id"], [0, 0])[0],
                not_helpful=tallies.get(row["request_id"], [0, 0])[1],
            ),
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
    response_model=LoggedQuery,
    responses={404: {"model": ErrorEnvelope}, 401: {"model": ErrorEnvelope}},
)
async def get_query(
    request_id: str, request: Request, who: Principal = Depends(principal)
) -> LoggedQuery:
    """Status and answer of a query from the query log (tenant-scoped), with the feedback
    given on it."""
    svc = query_service(request)
    if len(request_id) > 128:
        raise ApiError(404, "NOT_FOUND", "no such query")
    result = await asyncio.to_thread(
        logged_result, svc.sessions, who.tenant, request_id, who.principals
    )
    if result is None:
        raise ApiError(404, "NOT_FOUND", f"no query {request_id!r} for this tenant")
    given = await asyncio.to_thread(feedback.of_query, svc.sessions, request_id, who.key_id)
    return LoggedQuery.model_validate(
        {**result.model_dump(), "links": poll_link(svc.settings, request_id), "feedback": given}
    )


@router.get(
    "/v1/queries/{request_id}/events",
    responses={
        200: {
            "description": "The query's Server-Sent Events past `Last-Event-ID` (all of them "
            "without one), from the log and then live, as `POST /v1/query` streams them.",
            "content": SSE_CONTENT,
        },
        204: {"description": "`Last-Event-ID` is the stream's last event: nothing is left."},
        403: {
            "model": ErrorEnvelope,
            "description": "Its answer cites a document this key may no longer read.",
        },
        410: {"model": ErrorEnvelope, "description": "Older than rag.tokens' retention."},
        **{s: {"model": ErrorEnvelope} for s in (401, 404, 422, 503)},
    },
)
async def query_events(
    request_id: str,
    request: Request,
    who: Principal = Depends(principal),
    last_event_id: str | None = Header(
        default=None,
        max_length=MAX_ID_CHARS,
        pattern=EVENT_ID_PATTERN,
        description="The id of the last event received.",
    ),
    after: str | None = Query(
        default=None,
        max_length=MAX_ID_CHARS,
        pattern=EVENT_ID_PATTERN,
        description="The same as `Last-Event-ID`, for clients that cannot set headers.",
    ),
) -> Response:
    """Resume (or replay) a streamed query's events after the last one received."""
    svc = query_service(request)
    if len(request_id) > 128:
        raise ApiError(404, "NOT_FOUND", "no such query")
    raw = last_event_id or after
    position = resume_position(request_id, raw)[1] if raw else None
    return await resumed_response(svc, who.tenant, request_id, position, who.principals)
