"""The one asking seam of the edges: ``POST /v1/query``, the OpenAI routes, MCP and the console
build a query the same way, ask through :meth:`~api.querying.QueryService.ask` and get one
:class:`~api.asked.Asked` handle, or reopen a stream from an event id (:func:`reopen`).

- :func:`query_body` + :func:`build_request`: the question, with the same limits
  (``api.max_query_chars``, not blank, the body's own bounds), the caller's tenant and
  principals (docs/permissions.md) and the conversation before it (the follow-up rewrite);
- :func:`event_stream`: the one SSE body of every answer stream, first or reopened: it holds
  the handle open, counts the stream as attached while the answer is still to come
  (:mod:`api.streams.attach`), and cancels the request when its client leaves first;
- :data:`LAST_EVENT_ID`: the ``Last-Event-ID`` header, declared once;
- :func:`answer_query`: all of ``POST /v1/query`` below its route, which calls it once with its
  dependencies resolved and gets the ready response (:func:`query_response` builds the JSON
  reply in one place), so the request runs down the layers once (``python -m bench.call_path``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from fastapi import Header
from fastapi.responses import JSONResponse, Response
from prometheus_client import Counter
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.asked import Asked, ClientLeftError
from api.auth import Principal
from api.errors import FAILED_STATUS, ApiError
from api.models import HistoryTurn, QueryBody, QueryResult
from api.querying import QueryService
from api.streams.ids import (
    ACCEPTED,
    EVENT_ID_PATTERN,
    FINAL,
    MAX_ID_CHARS,
    Position,
    event_id,
    parse_event_id,
)
from api.streams.native import Positioned, positioned
from api.streams.resume import RESUMES, open_resumed
from ragstream.settings import Settings
from topics.answers import Answer
from topics.queries import QueryRequest, Turn
from topics.responses import ErrorCode
from workers.webhooks.ssrf import SsrfBlockedError, check_url, parse_networks


def last_event_id_header(*, documented: bool = True) -> Any:
    """The ``Last-Event-ID`` request header of a resumable stream (the id of the last event
    the client received, :mod:`api.streams.ids`), validated the same way everywhere.

    ``documented=False`` leaves it out of the OpenAPI document (the OpenAI-compatible routes:
    OpenAI's clients never send it, and Schemathesis, given it, sends values outside its
    pattern as valid data, which those routes refuse with OpenAI's 400 and nothing else)."""
    return Header(
        default=None,
        max_length=MAX_ID_CHARS,
        pattern=EVENT_ID_PATTERN,
        include_in_schema=documented,
        description="Resume the stream after this event id (the id of the last event "
        "received) instead of asking again; with `POST /v1/query`, only with `stream: true` "
        "(the body is not used then).",
    )


SYNC_LEFT = Counter(
    "ragstream_api_sync_queries_left_total",
    "Sync POST /v1/query requests whose client disconnected before the answer; each is "
    "cancelled (workers/cancel.py) and answered 499.",
)

#: The ``Last-Event-ID`` header of the native routes (:func:`last_event_id_header`).
LAST_EVENT_ID: Any = last_event_id_header()
#: The same header on the OpenAI-compatible routes, left out of the OpenAPI document.
OPENAI_LAST_EVENT_ID: Any = last_event_id_header(documented=False)


class KeepAlive(ServerSentEvent):
    """The keep-alive of every answer stream: one comment line, ``: ping``, and no blank line.

    sse-starlette's own ping ends with a blank line, which dispatches an event in a client that
    keeps the last ``id:`` (as the SSE specification says it must, "do not reset last event id")
    and does not drop an event with empty data: the ``openai`` SDK's ``SSEDecoder`` then yields
    an event with empty data and ``Stream`` fails to decode it as JSON (seen once in
    ``test_openai_client_works_unchanged``). A comment line alone dispatches nothing in any
    parser (WHATWG HTML, "Interpreting an event stream": lines starting with ``:`` are
    ignored); the next event's blank line ends both.
    """

    def encode(self) -> bytes:
        """``b": ping\\n"``."""
        return b": ping\n"


def poll_link(settings: Settings, request_id: str) -> dict[str, str]:
    """``{"self": "<public_url>/v1/queries/<id>"}``."""
    return {"self": f"{settings.api.public_url}/v1/queries/{request_id}"}


def wait_seconds(settings: Settings, requested: float | None) -> float:
    """The sync wait: the request's ``timeout_s`` or the default, capped by ``max_wait_s``."""
    return min(requested or settings.api.wait_timeout_s, settings.api.max_wait_s)


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


def check_question(settings: Settings, query: str) -> None:
    """The limits of every question, whichever exit asks it.

    Raises:
        ApiError: 422 ``INVALID_REQUEST``: longer than ``api.max_query_chars``, or blank.
    """
    if len(query) > settings.api.max_query_chars:
        raise ApiError(
            422,
            "INVALID_REQUEST",
            f"query: at most {settings.api.max_query_chars} characters, got {len(query)}",
        )
    if not query.strip():
        raise ApiError(422, "INVALID_REQUEST", "query: must not be blank")


def query_body(settings: Settings, **fields: Any) -> QueryBody:
    """A :class:`QueryBody` of ``fields`` (``query``, ``route``, ``history``, ...) for an exit
    that has no HTTP body of its own (OpenAI, MCP), checked as ``POST /v1/query`` checks one.

    Raises:
        ApiError: 422 ``INVALID_REQUEST`` naming the field at fault.
    """
    check_question(settings, str(fields.get("query", "")))
    try:
        return QueryBody(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "body"
        raise ApiError(422, "INVALID_REQUEST", f"{where}: {error['msg']}") from exc


def build_request(
    settings: Settings, who: Principal, body: QueryBody, *, max_tokens: int | None = None
) -> QueryRequest:
    """The ``rag.queries`` event of ``body``, scoped to the caller's tenant and principals
    (the documents the key may read, ``docs/permissions.md``); ``max_tokens``: the answer's
    token budget (``None``: the pool's).

    Raises:
        ApiError: 422 when the query is longer than ``api.max_query_chars`` or blank.
    """
    check_question(settings, body.query)
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
        max_tokens=max_tokens,
    )


def conversation_of(history: Sequence[str | HistoryTurn]) -> tuple[Turn, ...]:
    """The ``conversation`` of a query event from a body's ``history`` (a string is a question
    whose answer the client did not keep); blank questions are left out."""
    # A string is a question alone (not a HistoryTurn: a blank one is left out, not refused).
    turns = ((h.question, h.answer) if isinstance(h, HistoryTurn) else (h, "") for h in history)
    return tuple(Turn(question=q.strip(), answer=a) for q, a in turns if q.strip())


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


async def reopen(svc: QueryService, who: Principal, request_id: str, *, until: float) -> Asked:
    """The handle of ``request_id``'s stream reopened for resuming (its events from the log,
    then live until the monotonic time ``until``; :mod:`api.streams.resume`).

    Raises:
        ApiError: 404, 403, 410 ``STREAM_EXPIRED``, 503 (see :func:`open_resumed`).
    """
    resumed = await open_resumed(svc, who.tenant, request_id, until=until, asker=who.principals)
    logged = resumed.answer
    return Asked(
        svc, request_id, tenant=who.tenant, query=logged.query or "", asker=who.principals,
        reopened=resumed.items, waiting=logged.status == "pending",
    )  # fmt: skip


def nothing_left(request_id: str) -> Response:
    """204: the client's ``Last-Event-ID`` is its stream's last event."""
    RESUMES.labels("complete").inc()
    return Response(status_code=204, headers={"X-Request-Id": request_id})


def event_stream(
    svc: QueryService,
    asked: Asked,
    events: AsyncIterator[Positioned],
    after: Position | None = None,
) -> EventSourceResponse:
    """``text/event-stream`` of ``events`` past ``after`` (``None``: all), each with its
    ``id:`` (:func:`numbered`), with keep-alive comments every
    ``api.sse_keepalive_s``.

    The body owns ``asked``: it is closed (unsubscribed) when the body ends. While the answer
    is still to come from the pools the stream counts as attached to the request
    (:mod:`api.streams.attach`); when its client leaves first, the request is cancelled unless
    a stream resumes it within ``api.resume_grace_s``.
    """
    rid = asked.request_id

    async def body() -> AsyncIterator[bytes]:
        async with asked:
            chunks = numbered(rid, events, after)
            if not asked.waiting:
                async for chunk in chunks:
                    yield chunk
                return
            await svc.attach(rid)
            try:
                async for chunk in chunks:
                    yield chunk
            except (asyncio.CancelledError, GeneratorExit):
                svc.cancel(rid)  # the client left before its answer
                raise
            else:
                svc.detach(rid)

    return EventSourceResponse(
        body(),
        ping=svc.settings.api.sse_keepalive_s,
        ping_message_factory=KeepAlive,
        sep="\n",
        headers={"Cache-Control": "no-cache", "X-Request-Id": rid},
    )


async def numbered(
    request_id: str, events: AsyncIterator[Positioned], after: Position | None
) -> AsyncIterator[bytes]:
    """The events past ``after`` (``None``: all), each with its ``id:`` line first; an event
    without a position (``timeout``) repeats the id of the last position sent or resumed from.
    Used by the native and the OpenAI-compatible streams."""
    last = after
    async for position, event in events:
        if position is not None and after is not None and position <= after:
            continue
        last = position or last
        yield f"id: {event_id(request_id, last or ACCEPTED)}\n".encode() + event


def elapsed_ms(started: float) -> float:
    """Milliseconds since the monotonic time ``started``."""
    return (time.monotonic() - started) * 1000


async def answer_query(
    svc: QueryService,
    who: Principal,
    body: QueryBody,
    *,
    last_event_id: str | None = None,
    left: Callable[[], Awaitable[bool]] | None = None,
) -> Response:
    """The response of ``POST /v1/query`` (``api/routes/query.py`` documents its events and
    statuses): with ``stream`` and a ``last_event_id``, the rest of that stream
    (:func:`resume_stream`); with ``stream``, the SSE answer stream; ``mode="async"``, 202 with
    the query-log state at once; else the sync wait's :func:`query_response`, or 499 when the
    client left first (``left``: whether it has disconnected, asked every half second).

    Raises:
        ApiError: 422 (an invalid ``Last-Event-ID``, a refused question or ``callback_url``),
            503 when the query cannot be produced, and what :func:`resume_stream` raises.
    """
    started = time.monotonic()
    settings = svc.settings
    if body.stream and last_event_id:
        rid, after = resume_position(None, last_event_id)
        return await resume_stream(svc, who, rid, after)
    event = build_request(settings, who, body)
    await check_callback(settings, body.callback_url)
    accepted = body.mode == "async" and not body.stream
    wait_s = None if accepted else wait_seconds(settings, body.timeout_s)
    links = poll_link(settings, event.request_id)
    asked = await svc.ask(event, wait_s=wait_s, tokens=body.stream)
    until = started + (wait_s or 0.0)
    if body.stream:
        backlog = svc.backlog if asked.waiting else None
        events = positioned(
            event.request_id, asked.items(until), links=links, started=started, backlog=backlog
        )
        return event_stream(svc, asked, events)
    # The wait is a task of its own: each of its wake-ups (a reply, a disconnect poll) resumes
    # the handle's frames alone, not the route's and this one's.
    waiting = asyncio.create_task(asked.outcome(None if accepted else until, left=left))
    try:
        answer = await waiting
    except ClientLeftError:  # nobody is waiting for it: the request was cancelled
        SYNC_LEFT.inc()
        return Response(status_code=499)
    if accepted:
        return query_response(answer, links=links, accepted=True)
    return query_response(answer, links=links, latency_ms=(time.monotonic() - started) * 1000)


def query_response(
    answer: Answer,
    *,
    links: dict[str, str],
    latency_ms: float | None = None,
    accepted: bool = False,
) -> JSONResponse:
    """The JSON reply of a sync or async ``POST /v1/query``: the :class:`QueryResult` of
    ``answer`` (``latency_ms``: the request's, in ms), 202 when ``accepted`` (async) or still
    pending, 200 when answered, and for a failure the error's HTTP status
    (:data:`api.errors.FAILED_STATUS`, 500 for a code it lacks) with the error envelope and
    the result beside it."""
    result = QueryResult.render(answer, latency_ms=latency_ms, links=links)
    if accepted or result.status == "pending":
        return JSONResponse(result.model_dump(mode="json"), status_code=202)
    if result.status == "answered":
        return JSONResponse(result.model_dump(mode="json"), status_code=200)
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


async def resume_stream(
    svc: QueryService, who: Principal, request_id: str, after: Position | None
) -> Response:
    """The rest of ``request_id``'s stream past ``after`` (``None``: all of it), as SSE, from
    the log and then live (:mod:`api.streams.resume`); 204 when ``after`` is its last event.

    Raises:
        ApiError: 404, 403, 410 ``STREAM_EXPIRED``, 503 (see :func:`reopen`).
    """
    if after is not None and after >= FINAL:
        return nothing_left(request_id)
    started = time.monotonic()
    until = started + wait_seconds(svc.settings, None)
    asked = await reopen(svc, who, request_id, until=until)
    links = poll_link(svc.settings, request_id)
    backlog = svc.backlog if asked.waiting else None
    events = positioned(
        request_id, asked.items(until), links=links, started=started, backlog=backlog
    )
    return event_stream(svc, asked, events, after)
