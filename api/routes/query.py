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
cancelled the same way (the wait asks every half second, :meth:`api.asked.Asked.final`)
and counted (``ragstream_api_sync_queries_left_total``).

The route calls :func:`api.asking.answer_query` once, with its caller and the query service
resolved as dependencies, and returns the ready response.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session, sessionmaker

from api.asking import LAST_EVENT_ID, answer_query, poll_link, resume_position, resume_stream
from api.auth import Principal
from api.deps import principal, query_service
from api.errors import ApiError, ErrorEnvelope
from api.feedback_models import FeedbackTally, LoggedQuery
from api.models import QueryBody, QueryResult
from api.pages import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    QueryPage,
    QuerySummary,
    decode_cursor,
    encode_cursor,
)
from api.querying import QueryService
from api.streams.ids import EVENT_ID_PATTERN, MAX_ID_CHARS
from workers import feedback, query_log

router = APIRouter(tags=["query"])

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
SSE_CONTENT = {"text/event-stream": {"schema": SSE_EVENT}}


#: The example body of ``POST /v1/query`` (Swagger UI's "Try it out" sends it as is).
QUERY_EXAMPLE = {"query": "What does VACUUM do?", "top_k": 3, "route": "auto", "mode": "sync"}


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
    svc: QueryService = Depends(query_service),
    last_event_id: str | None = LAST_EVENT_ID,
) -> Any:
    """Ask a question of the caller's knowledge base (sync, async, or SSE with ``stream``)."""
    return await answer_query(
        svc, who, body, last_event_id=last_event_id, left=request.is_disconnected
    )


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
    last_event_id: str | None = LAST_EVENT_ID,
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
    return await resume_stream(svc, who, request_id, position)
