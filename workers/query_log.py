"""The query log (SQL ``query_log``): the one module that writes and reads it.

One row per ``request_id``, written idempotently (a replay or a duplicate changes nothing):

- the API logs each admitted query as ``pending`` (:func:`log_pending`);
- the delivery pool records the first final response of each request (:func:`record_final`);
- the API settles a ``pending`` row the delivery pool will never see: an answer in hand that
  could not be published, or a query that could not be produced (:func:`settle`);
- ``GET /v1/queries/{id}`` and a late answer read it back (:func:`read`);
- ``ragstream replay`` selects final rows of a tenant in a time window (:func:`final_ids`) and
  reads their answers (:func:`read_final`).

A final row holds the whole answer view (:class:`topics.answers.Answer`, column ``result``);
the older columns are derived from it in one place (:func:`_finalise`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.acl import asked_by, asker_column, unreadable
from ragstream.db.models import QueryLog, as_utc, utcnow
from ragstream.db.pages import newest_first
from topics.answers import Answer
from topics.queries import QueryRequest
from topics.responses import ErrorCode, ErrorInfo, QueryResponse
from workers.conversation import question_of

FINAL = ("answered", "failed")


def log_pending(sessions: sessionmaker[Session], request: QueryRequest) -> None:
    """Insert the ``pending`` row of ``request`` (idempotent on ``request_id``). Its ``query``
    is the question answered (:func:`workers.conversation.question_of`: a follow-up made
    standalone, with its context), so that the log reads, and replays, on its own; its
    ``question`` is the question as typed (``request.query``), what lists show."""
    answered = question_of(request)
    try:
        with sessions.begin() as session:
            session.add(
                QueryLog(request_id=request.request_id, tenant=request.tenant, query=answered,
                         question=None if request.query == answered else request.query,
                         asked_as=asker_column(request.principals))
            )  # fmt: skip
    except IntegrityError:
        return


def _finalise(row: QueryLog, answer: Answer) -> None:
    """Write the final ``answer`` into ``row``: whole in ``result``, and the derived columns."""
    row.status = answer.status
    row.answer = answer.answer or None
    row.citations = [c.model_dump(mode="json") for c in answer.citations]
    row.trace = {"stages": [t.model_dump(mode="json") for t in answer.trace], "tier": answer.tier}
    row.error_code = answer.error.code.value if answer.error else None
    row.error_message = answer.error.message if answer.error else None
    row.completed_at = answer.completed_at
    row.result = answer.model_dump(mode="json")


def _answer_of(row: QueryLog, response: QueryResponse) -> Answer:
    return Answer.of(
        response, query=row.query, created_at=as_utc(row.created_at), completed_at=utcnow()
    )


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
            row = QueryLog(request_id=r.request_id, tenant=r.tenant, query="", created_at=utcnow())
            session.add(row)
            rows[r.request_id] = row
        elif row.status in FINAL:
            continue  # a replay or a duplicate: the first answer stays
        _finalise(row, _answer_of(row, r))
        written.append(r)
    return written


def questions(session: Session, request_ids: Sequence[str]) -> dict[str, str]:
    """``{request_id: question}`` of logged requests in ``session`` (rows that
    :func:`record_final` just wrote are in the session already: no query is sent for them)."""
    out: dict[str, str] = {}
    for request_id in request_ids:
        row = session.get(QueryLog, request_id)
        if row is not None:
            out[request_id] = row.query
    return out


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
        if response is not None:
            _finalise(row, _answer_of(row, response))
            return
        # The query never reached the pipeline: its failure, as a response would say it.
        error = ErrorInfo(code=ErrorCode.UNAVAILABLE, message=failure[1] if failure else "")
        unavailable = QueryResponse(
            tenant=row.tenant, request_id=row.request_id, status="failed", error=error
        )
        _finalise(row, _answer_of(row, unavailable))


def read(
    sessions: sessionmaker[Session],
    tenant: str | None,
    request_id: str,
    asker: Sequence[str] | None = None,
) -> Answer | None:
    """The logged answer view of ``request_id`` if it belongs to ``tenant`` (``None``: any
    tenant, for operators reading the store, ``ragstream query get``) and was asked with the
    principals ``asker`` (``None``: any; :func:`ragstream.db.acl.asked_by`); ``None``
    otherwise. A final answer that cites or quotes a document ``asker`` may no longer read
    (its readers changed since) is withheld: ``failed``, ``ErrorCode.WITHHELD``, no text,
    citations or evidence.

    A row written before revision 0005 (no ``result``) is read from its columns: it has no
    evidence, truncated flag or token usage.
    """
    with sessions() as session:
        row = session.scalars(
            select(QueryLog).where(
                QueryLog.request_id == request_id, asked_by(QueryLog.asked_as, asker)
            )
        ).first()
        if row is None or (tenant is not None and row.tenant != tenant):
            return None
        if row.status not in FINAL:
            return Answer.pending(
                row.request_id,
                tenant=row.tenant,
                query=row.query,
                created_at=as_utc(row.created_at),
            )
        answer = _final_answer(row)
        if asker is None:
            return answer
        return _withheld(answer) if _cites_unreadable(session, answer, asker) else answer


def _cites_unreadable(session: Session, answer: Answer, asker: Sequence[str]) -> bool:
    """Whether ``answer`` cites or quotes a document that ``asker`` may not read now (its
    readers changed since the answer was recorded; :func:`ragstream.db.acl.unreadable`)."""
    cited = {c.doc_id for c in answer.citations} | {e.doc_id for e in answer.evidence}
    return bool(unreadable(session, answer.tenant, cited, asker))


def _withheld(answer: Answer) -> Answer:
    """``answer`` with its text, citations and evidence withheld: ``failed`` with
    ``ErrorCode.WITHHELD``."""
    error = ErrorInfo(
        code=ErrorCode.WITHHELD,
        message="the recorded answer cites a document this key may no longer read "
        "(its readers changed); ask again",
    )
    return answer.model_copy(
        update={"status": "failed", "answer": None, "citations": (), "evidence": (), "error": error}
    )


def _final_answer(row: QueryLog) -> Answer:
    """The answer view of a final ``row`` (from ``result``, or its columns before 0005)."""
    if row.result is not None:
        return Answer.model_validate(row.result)
    return Answer.model_validate(_columns(row))


def final_ids(
    sessions: sessionmaker[Session],
    tenant: str,
    *,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> list[str]:
    """The request ids of ``tenant``'s final (``answered`` or ``failed``) rows created in
    ``[since, until)`` (UTC; ``None``: open), oldest first by ``(created_at, request_id)``.
    A row without its question (a response whose query was never logged) is left out."""
    stmt = select(QueryLog.request_id).where(
        QueryLog.tenant == tenant, QueryLog.status.in_(FINAL), QueryLog.query != ""
    )
    if since is not None:
        stmt = stmt.where(QueryLog.created_at >= since)
    if until is not None:
        stmt = stmt.where(QueryLog.created_at < until)
    stmt = stmt.order_by(QueryLog.created_at, QueryLog.request_id)
    with sessions() as session:
        return list(session.scalars(stmt))


def read_final(sessions: sessionmaker[Session], request_ids: Sequence[str]) -> list[Answer]:
    """The logged answers of those of ``request_ids`` that are final, in the order given (a
    pending or unknown id is left out)."""
    wanted = list(dict.fromkeys(request_ids))
    found: dict[str, Answer] = {}
    with sessions() as session:
        for start in range(0, len(wanted), 500):  # bounded IN lists
            chunk = wanted[start : start + 500]
            stmt = select(QueryLog).where(
                QueryLog.request_id.in_(chunk), QueryLog.status.in_(FINAL)
            )
            for row in session.scalars(stmt):
                found[row.request_id] = _final_answer(row)
    return [found[i] for i in wanted if i in found]


def _columns(row: QueryLog) -> dict[str, Any]:
    """The answer view's fields of a final row written before revision 0005."""
    trace = row.trace if isinstance(row.trace, dict) else {}
    stages = trace.get("stages", [])
    error = None
    if row.error_code:
        error = {"code": row.error_code, "message": row.error_message or "", "stage": ""}
    return {
        "request_id": row.request_id,
        "tenant": row.tenant,
        "query": row.query,
        "status": row.status,
        "answer": row.answer if row.status == "answered" else None,
        "citations": row.citations or [],
        "tier": trace.get("tier", ""),
        "error": error,
        "trace": stages,
        "cached": any(s.get("stage") == "cache" for s in stages),
        "created_at": as_utc(row.created_at),
        "completed_at": as_utc(row.completed_at) if row.completed_at else None,
    }


def page(
    sessions: sessionmaker[Session],
    tenant: str,
    *,
    limit: int,
    before: tuple[dt.datetime, str] | None = None,
    asker: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` of ``tenant``'s logged queries asked with the principals ``asker``
    (``None``: all; :func:`ragstream.db.acl.asked_by`), newest first by ``(created_at,
    request_id)``, those after the sort key ``before`` of the previous page's last one (keyset
    pagination); each as ``{request_id, query, question, status, tier, error_code,
    created_at, completed_at, sort_key}`` (``query``: the question answered, a follow-up made
    standalone; ``question``: as typed)."""
    stmt = select(
        QueryLog.request_id,
        QueryLog.query,
        QueryLog.question,
        QueryLog.status,
        QueryLog.trace,
        QueryLog.error_code,
        QueryLog.created_at,
        QueryLog.completed_at,
    ).where(QueryLog.tenant == tenant, asked_by(QueryLog.asked_as, asker))
    stmt = newest_first(stmt, QueryLog.created_at, QueryLog.request_id, limit=limit, before=before)
    with sessions() as session:
        rows = session.execute(stmt).all()
    out = []
    for rid, query, question, status, trace, code, created, completed in rows:
        tier = trace.get("tier", "") if isinstance(trace, dict) else ""
        out.append(
            {
                "request_id": rid,
                "query": query,
                "question": question or query,
                "status": status if status in FINAL else "pending",
                "tier": tier or "",
                "error_code": code,
                "created_at": as_utc(created),
                "completed_at": as_utc(completed) if completed else None,
                "sort_key": (created, rid),
            }
        )
    return out
