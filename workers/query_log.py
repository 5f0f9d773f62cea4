"""The query log (SQL ``query_log``): the one module that writes and reads it.

One row per ``request_id``, written idempotently (a replay or a duplicate changes nothing):

- the API logs each admitted query as ``pending`` (:func:`log_pending`);
- the delivery pool records the first final response of each request (:func:`record_final`);
- the API settles a ``pending`` row the delivery pool will never see: an answer in hand that
  could not be published, or a query that could not be produced (:func:`settle`);
- ``GET /v1/queries/{id}`` and a late answer read it back (:func:`read`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ingest.jobs import aware
from ragstream.db.models import QueryLog, utcnow
from topics.queries import QueryRequest
from topics.responses import QueryResponse

FINAL = ("answered", "failed")


def log_pending(sessions: sessionmaker[Session], request: QueryRequest) -> None:
    """Insert the ``pending`` row of ``request`` (idempotent on ``request_id``)."""
    try:
        with sessions.begin() as session:
            session.add(
                QueryLog(request_id=request.request_id, tenant=request.tenant,
                         query=request.query)
            )  # fmt: skip
    except IntegrityError:
        return


def record_final(session: Session, responses: Sequence[QueryResponse]) -> list[QueryResponse]:
    """Write each first final response into the query log in ``session`` (the caller's
    transaction); return those written, in order."""
    ids = list({r.request_id for r in responses})
    rows = {
        row.request_id: row
        for row in session.scalars(select(QueryLog).where(QueryLog.request_id.in_(ids)))
    }
    written: list[QueryResponse] = []
    for r in responses:
        row = rows.get(r.request_id)
        if row is None:
            row = QueryLog(request_id=r.request_id, tenant=r.tenant, query="")
            session.add(row)
            rows[r.request_id] = row
        elif row.status in FINAL:
            continue  # a replay or a duplicate: the first answer stays
        row.status = "answered" if r.status == "answered" else "failed"
        row.answer = r.answer or None
        row.citations = [c.model_dump(mode="json") for c in r.citations]
        row.trace = {"stages": [t.model_dump(mode="json") for t in r.trace], "tier": r.tier}
        row.error_code = r.error.code.value if r.error else None
        row.error_message = r.error.message if r.error else None
        row.completed_at = utcnow()
        written.append(r)
    return written


def settle(
    sessions: sessionmaker[Session],
    response: QueryResponse | None,
    failure: tuple[str, str] | None,
) -> None:
    """Finalise a ``pending`` row the delivery pool will never see: ``response``, an answer
    that could not be published, or ``failure`` = ``(request_id, message)``, a query whose event
    could not be produced (``UNAVAILABLE``)."""
    request_id = response.request_id if response is not None else failure[0]  # type: ignore[index]
    with sessions.begin() as session:
        row = session.get(QueryLog, request_id)
        if row is None or row.status != "pending":
            return
        row.completed_at = utcnow()
        if response is not None:
            row.status, row.answer = "answered", response.answer
            row.citations = [c.model_dump(mode="json") for c in response.citations]
            row.trace = {
                "stages": [t.model_dump(mode="json") for t in response.trace],
                "tier": response.tier,
            }
        else:
            row.status, row.error_code = "failed", "UNAVAILABLE"
            row.error_message = failure[1] if failure else None


def read(
    sessions: sessionmaker[Session], tenant: str | None, request_id: str
) -> dict[str, Any] | None:
    """The logged state of ``request_id`` if it belongs to ``tenant`` (``None``: any tenant,
    for operators reading the store, ``ragstream query get``), as the fields of the API's
    ``QueryResult`` (``status`` pending, answered or failed); ``None`` otherwise."""
    with sessions() as session:
        row = session.get(QueryLog, request_id)
        if row is None or (tenant is not None and row.tenant != tenant):
            return None
        trace = row.trace or {}
        stages = trace.get("stages", []) if isinstance(trace, dict) else []
        error = None
        if row.error_code:
            error = {"code": row.error_code, "message": row.error_message or "", "stage": ""}
        return {
            "request_id": row.request_id,
            "status": row.status if row.status in FINAL else "pending",
            "answer": row.answer,
            "citations": row.citations or [],
            "tier": trace.get("tier", "") if isinstance(trace, dict) else "",
            "error": error,
            "trace": [
                {
                    "stage": s["stage"],
                    "duration_ms": s["duration_ms"],
                    "wait_ms": s.get("wait_ms"),
                    "detail": s.get("detail", {}),
                }
                for s in stages
            ],
            "cached": any(s.get("stage") == "cache" for s in stages),
            "created_at": aware(row.created_at),
            "completed_at": aware(row.completed_at) if row.completed_at else None,
        }


def page(
    sessions: sessionmaker[Session],
    tenant: str,
    *,
    limit: int,
    before: tuple[dt.datetime, str] | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` of ``tenant``'s logged queries, newest first by ``(created_at,
    request_id)``, those after the sort key ``before`` of the previous page's last one (keyset
    pagination); each as ``{request_id, query, status, tier, error_code, created_at,
    completed_at, sort_key}``."""
    stmt = select(
        QueryLog.request_id,
        QueryLog.query,
        QueryLog.status,
        QueryLog.trace,
        QueryLog.error_code,
        QueryLog.created_at,
        QueryLog.completed_at,
    ).where(QueryLog.tenant == tenant)
    if before is not None:
        created, request_id = before
        stmt = stmt.where(
            or_(
                QueryLog.created_at < created,
                and_(QueryLog.created_at == created, QueryLog.request_id < request_id),
            )
        )
    stmt = stmt.order_by(QueryLog.created_at.desc(), QueryLog.request_id.desc()).limit(limit)
    with sessions() as session:
        rows = session.execute(stmt).all()
    out = []
    for rid, query, status, trace, code, created, completed in rows:
        tier = trace.get("tier", "") if isinstance(trace, dict) else ""
        out.append(
            {
                "request_id": rid,
                "query": query,
                "status": status if status in FINAL else "pending",
                "tier": tier or "",
                "error_code": code,
                "created_at": aware(created),
                "completed_at": aware(completed) if completed else None,
                "sort_key": (created, rid),
            }
        )
    return out
