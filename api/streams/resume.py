"""Resume an answer stream from the log: the request's past events from Kafka, then live.

A client whose stream broke reconnects with the id of the last event it got
(:mod:`api.streams.ids`). Nothing of the first connection is needed, so any API process can
serve the rest:

1. the query log (SQL) says whether the request exists for the caller's tenant (else 404) and
   when it was created; a request older than ``rag.tokens``' retention is refused with 410
   ``STREAM_EXPIRED`` (its tokens may be gone; the answer stays at ``GET /v1/queries/{id}``);
2. a pending request gets a waiter on this process's reply router *before* the log is read,
   so nothing produced from then on is missed;
3. :func:`api.streams.history.read_history` reads the request's tokens and response from the
   log, up to the end offsets seen after step 2;
4. :func:`replies` yields the tokens in order, each ``seq`` once (:class:`TokenOrder`: history
   and live overlap, and a replayed generation repeats tokens), then the final answer: the
   first response in the log (the one the query log recorded), else the recorded answer (an
   answer the API settled itself), else the live response.

The renderers (:mod:`api.streams.native`, the OpenAI routes) number the events and send only
those past the client's position.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass

import structlog
from prometheus_client import Counter

from api.asked import live
from api.errors import ApiError
from api.querying import QueryService, unavailable
from api.replies import Reply
from api.streams.history import History, HistoryUnavailableError, read_history
from topics.answers import Answer
from topics.registry import TOKENS
from topics.responses import ErrorCode
from topics.tokens import AnswerToken, TokenOrder
from workers import query_log

log = structlog.get_logger(__name__)

RESUMES = Counter(
    "ragstream_api_stream_resumes_total",
    "Streams resumed with Last-Event-ID (or GET /v1/queries/{id}/events), by outcome: resumed, "
    "complete (nothing left: 204), expired (past rag.tokens retention: 410), unknown (404), "
    "unavailable (the log could not be read: 503), withheld (its answer cites a document the "
    "caller may no longer read: 403).",
    ["outcome"],
)
REPLAYED = Counter(
    "ragstream_api_stream_replayed_events_total",
    "Events of resumed streams sent from the Kafka log (not live).",
)

#: What a resumed stream yields: the request's tokens, each ``seq`` once, then its answer.
Item = AnswerToken | Answer


@dataclass
class Resumed:
    """A request opened for resuming.

    Attributes:
        answer: the query-log view when the stream resumed (``pending`` or final).
        items: the tokens, then the final answer (none when the wait runs out first).
        history: what the log held when the stream resumed.
    """

    answer: Answer
    items: AsyncGenerator[Item]
    history: History


def expired(created_at: dt.datetime | None, now: dt.datetime, retention_ms: int) -> bool:
    """Whether a request created at ``created_at`` is older than ``retention_ms`` at ``now``
    (its tokens may have been deleted; Kafka deletes no record younger than the retention).
    An unknown creation time counts as expired."""
    if created_at is None:
        return True
    return (now - created_at).total_seconds() * 1000 > retention_ms


async def open_resumed(
    svc: QueryService,
    tenant: str,
    request_id: str,
    *,
    until: float,
    asker: Sequence[str] | None = None,
) -> Resumed:
    """Open ``request_id``'s stream for resuming (see the module docstring).

    Args:
        svc: the process's query service (SQL, Kafka, the reply router).
        tenant: the caller's tenant; another tenant's request is unknown.
        request_id: the request.
        until: monotonic time the live part waits until.
        asker: the caller's principals (``None``: a tenant-wide key); a query asked with
            other principals is unknown to it, as for ``GET /v1/queries/{id}``
            (docs/permissions.md).

    Raises:
        ApiError: 404 ``NOT_FOUND`` (no such request for ``tenant``), 403 ``FORBIDDEN`` (its
            answer cites a document ``asker`` may no longer read), 410 ``STREAM_EXPIRED``
            (older than ``rag.tokens``' retention), 503 ``UNAVAILABLE`` (Kafka).
    """
    logged = await asyncio.to_thread(query_log.read, svc.sessions, tenant, request_id, asker)
    if logged is None:
        RESUMES.labels("unknown").inc()
        raise ApiError(404, "NOT_FOUND", f"no query {request_id!r} for this tenant")
    if logged.error is not None and logged.error.code == ErrorCode.WITHHELD:
        # Its tokens quote a document the caller may no longer read: none is replayed.
        RESUMES.labels("withheld").inc()
        raise ApiError(403, "FORBIDDEN", logged.error.message)
    retention_ms = TOKENS.retention_ms
    if expired(logged.created_at, dt.datetime.now(dt.UTC), retention_ms):
        RESUMES.labels("expired").inc()
        hours = retention_ms / 3_600_000
        raise ApiError(
            410,
            "STREAM_EXPIRED",
            f"the stream of query {request_id!r} is older than the {hours:g} h retention of "
            f"rag.tokens and cannot be resumed; its answer: GET /v1/queries/{request_id}",
        )
    await svc.start()
    queue = svc.subscribe(request_id, tokens=True) if logged.status == "pending" else None
    since = logged.created_at
    assert since is not None  # not expired
    try:
        history = await asyncio.to_thread(
            read_history,
            svc.settings,
            request_id,
            since,
            timeout_s=svc.settings.api.resume_read_timeout_s,
        )
    except HistoryUnavailableError as exc:
        if queue is not None:
            svc.unsubscribe(request_id, queue)
        RESUMES.labels("unavailable").inc()
        message = f"the stream of {request_id} could not be read: {exc}"
        raise unavailable(message, svc.settings) from exc
    except BaseException:
        if queue is not None:
            svc.unsubscribe(request_id, queue)
        raise
    RESUMES.labels("resumed").inc()
    log.info(
        "api.stream_resumed",
        request_id=request_id,
        status=logged.status,
        tokens=len(history.tokens),
        scanned=history.scanned,
    )
    items = replies(svc, logged, history, queue, until)
    return Resumed(logged, items, history)


async def replies(
    svc: QueryService,
    logged: Answer,
    history: History,
    queue: asyncio.Queue[Reply] | None,
    until: float,
) -> AsyncGenerator[Item]:
    """The tokens of ``history`` then of ``queue`` (each ``seq`` once, in order), then the
    final answer: the response in ``history``, else ``logged`` when final, else the live
    response. Unsubscribes ``queue`` when done."""
    order = TokenOrder()
    rid = logged.request_id
    try:
        for token in history.tokens:
            if order.fresh(token):
                REPLAYED.inc()
                yield token
        if history.response is not None:  # rendered as the first stream rendered it
            yield Answer.of(history.response, query=logged.query)
            return
        if logged.status != "pending":  # recorded, but its response is not in the log
            yield logged
            return
        assert queue is not None
        async for item in live(queue, until, logged.query, order):
            yield item
    finally:
        if queue is not None:
            svc.unsubscribe(rid, queue)
