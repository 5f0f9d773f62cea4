"""The query log's writes and reads (one module owns them), on a throwaway SQLite store."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from topics.queries import QueryRequest
from topics.responses import Citation, QueryResponse
from workers import query_log


def _sessions(tmp_path: Path) -> sessionmaker[Session]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade_head(url)
    return make_session_factory(make_engine(url))


def _request() -> QueryRequest:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    return QueryRequest(tenant="acme", query="What does VACUUM do?", deadline=deadline)


def _answer(request: QueryRequest, text: str) -> QueryResponse:
    return QueryResponse(
        event_id=f"{request.request_id}:{text}",
        tenant=request.tenant,
        request_id=request.request_id,
        status="answered",
        answer=text,
        citations=(Citation(n=1, doc_id="vacuum", chunk_id="vacuum#0"),),
        tier="small",
    )


def test_pending_then_the_first_final_answer_wins(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    request = _request()
    query_log.log_pending(sessions, request)
    query_log.log_pending(sessions, request)  # idempotent
    pending = query_log.read(sessions, "acme", request.request_id)
    assert pending is not None and pending.status == "pending"
    with sessions.begin() as session:
        first = query_log.record_final(session, [_answer(request, "first")])
    with sessions.begin() as session:
        replay = query_log.record_final(session, [_answer(request, "second")])
    assert [r.answer for r in first] == ["first"] and replay == []
    logged = query_log.read(sessions, "acme", request.request_id)
    assert logged is not None and logged.status == "answered"
    assert logged.answer == "first" and logged.citations[0].doc_id == "vacuum"
    assert query_log.read(sessions, "globex", request.request_id) is None  # another tenant's


def test_settle_finalises_only_a_pending_row(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    request = _request()
    query_log.log_pending(sessions, request)
    query_log.settle(sessions, None, (request.request_id, "Kafka unreachable"))
    query_log.settle(sessions, _answer(request, "late"), None)  # no longer pending
    logged = query_log.read(sessions, "acme", request.request_id)
    assert logged is not None and logged.status == "failed"
    assert logged.error is not None
    assert logged.error.model_dump(mode="json") == {
        "code": "UNAVAILABLE",
        "message": "Kafka unreachable",
        "stage": "",
    }


def test_a_row_written_before_the_answer_view_is_read_from_its_columns(tmp_path: Path) -> None:
    """Rows of revision 0004 and older have no ``result``: they read back without evidence."""
    from ragstream.db.models import QueryLog

    sessions = _sessions(tmp_path)
    with sessions.begin() as session:
        session.add(
            QueryLog(
                request_id="old", tenant="acme", query="q", status="answered", answer="It is 5.",
                citations=[{"n": 1, "doc_id": "d", "chunk_id": "c", "title": "", "source": ""}],
                trace={"stages": [], "tier": "small"}, completed_at=dt.datetime.now(dt.UTC),
            )
        )  # fmt: skip
    logged = query_log.read(sessions, "acme", "old")
    assert logged is not None and logged.status == "answered" and logged.answer == "It is 5."
    assert logged.tier == "small" and logged.citations[0].doc_id == "d" and logged.evidence == ()


def test_a_follow_up_is_listed_as_typed_and_logged_as_answered(tmp_path: Path) -> None:
    """Issue 39: the past-questions list showed the rewritten follow-up ("Which parameter
    sets the TCP port? | context: ..."), not what was typed; the log keeps both."""
    from topics.queries import Turn
    from workers.conversation import question_of

    sessions = _sessions(tmp_path)
    first = _request()
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    follow = QueryRequest(
        tenant="acme",
        query="And how do I change it?",
        conversation=(Turn(question="Which TCP port does the server listen on by default?"),),
        deadline=deadline,
    )
    assert question_of(follow) != follow.query  # it is rewritten
    query_log.log_pending(sessions, first)
    query_log.log_pending(sessions, follow)
    rows = query_log.page(sessions, "acme", limit=10)
    listed = {r["request_id"]: (r["question"], r["query"]) for r in rows}
    assert listed[follow.request_id] == ("And how do I change it?", question_of(follow))
    assert listed[first.request_id] == ("What does VACUUM do?", "What does VACUUM do?")
