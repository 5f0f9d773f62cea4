"""The one asking seam of the edges: ``POST /v1/query``, the OpenAI routes, MCP and the console
build a query the same way, ask through :meth:`~api.querying.QueryService.ask` and get one
:class:`~api.asked.Asked` handle, or reopen a stream from an event id (:func:`reopen`).

- :func:`query_body` + :func:`build_request`: the question, with the same limits
  (``api.max_query_chars``, not blank, the body's own bounds), the caller's tenant and
  principals (docs/permissions.md) and the conversation before it (the follow-up rewrite);
- :func:`event_stream`: the one SSE body of every answer stream, first or reopened: it holds
  the handle open, counts the stream as attached while the answer is still to come
  (:mod:`api.streams.attach`), and cancels the request when its client leaves first;
- :data:`LAST_EVENT_ID`: the ``Last-Event-ID`` header, declared once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import Header, Request
from fastapi.responses import Response
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.asked import Asked
from api.auth import Principal
from api.deps import services
from api.errors import ApiError
from api.models import HistoryTurn, QueryBody
from api.querying import QueryService
from api.streams.ids import (
    ACCEPTED,
    EVENT_ID_PATTERN,
    MAX_ID_CHARS,
    Position,
    event_id,
    parse_event_id,
)
from api.streams.native import Positioned
from api.streams.resume import RESUMES, open_resumed
from ragstream.settings import Settings
from topics.queries import QueryRequest, Turn
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


def query_service(request: Request) -> QueryService:
    """The process's :class:`QueryService`."""
    return services(request).extras["queries"]  # type: ignore[no-any-return]


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
