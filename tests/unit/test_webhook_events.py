"""Webhook payloads, stable ids, event-type rules and the scheduler's queued markers."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from ingest.jobs import JOB_COMPLETED_TASK
from ragstream import __version__
from ragstream.celery_app import celery_app
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import IngestJob, WebhookDelivery
from ragstream.settings import WebhookSettings
from topics.base import StageTiming
from topics.queries import QueryRequest
from topics.responses import Citation, ErrorCode, ErrorInfo, QueryResponse
from workers import query_log
from workers.pools.delivery import record_responses
from workers.webhooks import events
from workers.webhooks.endpoints import EndpointError, normalise_event_types
from workers.webhooks.outbox import MARKER_PREFIX, CeleryScheduler, Scheduled
from workers.webhooks.signing import new_secret, sign_headers
from workers.webhooks.tasks import retry_policy

T0 = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def test_webhook_id_is_stable_and_separates_tenant_subject_and_url() -> None:
    a = events.webhook_id("query.completed", "acme", "r1", "https://h.example/x")
    assert a == events.webhook_id("query.completed", "acme", "r1", "https://h.example/x")
    assert re.fullmatch(r"msg_[0-9a-f]{32}", a)
    others = {
        events.webhook_id("query.completed", "globex", "r1", "https://h.example/x"),
        events.webhook_id("query.completed", "acme", "r2", "https://h.example/x"),
        events.webhook_id("query.completed", "acme", "r1", "https://h.example/y"),
        events.webhook_id("ingest.job.completed", "acme", "r1", "https://h.example/x"),
        # The separator keeps ("a", "bc") and ("ab", "c") apart.
        events.webhook_id("query.completed", "acm", "er1", "https://h.example/x"),
    }
    assert a not in others and len(others) == 5


def test_query_completed_payload() -> None:
    answered = QueryResponse(
        tenant="acme",
        request_id="r1",
        status="answered",
        answer="Port 5432 [1]",
        citations=(Citation(n=1, doc_id="d", chunk_id="c", title="Ports"),),
        tier="small",
        created_at=T0,
        trace=(
            StageTiming(stage="retrieval", started_at=T0, duration_ms=12.5),
            StageTiming(stage="generation", started_at=T0, duration_ms=100.25),
        ),
    )
    payload = events.query_completed(answered, "Which port?")
    assert payload["type"] == "query.completed"
    assert payload["data"]["query"] == "Which port?"
    assert payload["timestamp"] == "2026-11-29T12:00:00Z"
    data = payload["data"]
    assert (data["request_id"], data["tenant"], data["status"]) == ("r1", "acme", "answered")
    assert data["answer"] == "Port 5432 [1]" and data["error"] is None and data["tier"] == "small"
    assert data["citations"] == [
        {"n": 1, "doc_id": "d", "chunk_id": "c", "title": "Ports", "source": ""}
    ]
    assert data["trace"] == {
        "stages": [
            {"stage": "retrieval", "duration_ms": 12.5},
            {"stage": "generation", "duration_ms": 100.25},
        ],
        "total_ms": 112.75,
    }
    failed = QueryResponse(
        tenant="acme",
        request_id="r2",
        status="failed",
        error=ErrorInfo(code=ErrorCode.DEADLINE_EXCEEDED, message="late", stage="retrieval"),
    )
    data = events.query_completed(failed)["data"]
    assert data["status"] == "failed"
    assert data["error"] == {"code": "DEADLINE_EXCEEDED", "message": "late", "stage": "retrieval"}


def _job(status: str = "completed_with_failures", done: int = 3, failed: int = 150) -> IngestJob:
    return IngestJob(
        id="j1",
        tenant="acme",
        status=status,
        total_documents=done + failed,
        done_documents=done,
        failed_documents=failed,
        chunk_count=40,
        created_at=T0,
        finished_at=T0 + dt.timedelta(seconds=5),
    )


def test_ingest_job_payload_lists_the_first_100_failures() -> None:
    failures = [(f"/docs/{i}.pdf", "not a pdf") for i in range(150)]
    payload = events.ingest_job_completed(_job(), failures)
    assert payload["type"] == "ingest.job.completed"
    assert payload["timestamp"] == "2026-11-29T12:00:05Z"
    data = payload["data"]
    assert data["job_id"] == "j1" and data["status"] == "completed_with_failures"
    assert (data["done_documents"], data["failed_documents"], data["chunk_count"]) == (3, 150, 40)
    assert len(data["failures"]) == 100 and data["failures_truncated"] is True
    assert data["failures"][0] == {"path": "/docs/0.pdf", "error": "not a pdf"}
    few = events.ingest_job_completed(_job(failed=2), failures[:2])["data"]
    assert len(few["failures"]) == 2 and few["failures_truncated"] is False


def test_job_subject_changes_only_with_the_outcome() -> None:
    assert events.job_subject(_job()) == events.job_subject(_job())
    retried = _job(status="succeeded", done=153, failed=0)
    assert events.job_subject(retried) != events.job_subject(_job())


def test_event_types_are_a_closed_set() -> None:
    assert normalise_event_types(["query.completed", "query.completed"]) == ("query.completed",)
    assert normalise_event_types(["ingest.job.completed", "query.completed"]) == (
        "ingest.job.completed",
        "query.completed",
    )
    assert normalise_event_types(["query.completed", "*"]) == ("*",)
    with pytest.raises(EndpointError, match="at least one"):
        normalise_event_types([])
    with pytest.raises(EndpointError, match=r"unknown event type\(s\) \['query.answered'\]"):
        normalise_event_types(["query.answered"])


def test_the_job_completed_task_is_registered_under_the_name_ingest_sends() -> None:
    # Importing workers.webhooks.tasks (above, for retry_policy) registered the tasks.
    assert JOB_COMPLETED_TASK in celery_app.tasks
    assert "ragstream.webhooks.deliver" in celery_app.tasks


def test_backoff_is_exponential_and_capped() -> None:
    policy = retry_policy(WebhookSettings(backoff_base_s=2.0, backoff_cap_s=10.0))
    assert [policy.delay_ms(n) / 1000 for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 10.0]


class FakeRedis:
    """The two Redis calls the scheduler makes, in memory."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}

    def set(self, key: str, value: Any, ex: int | None = None, nx: bool = False) -> bool | None:
        assert ex is not None and ex > 0
        if nx and key in self.keys:
            return None
        self.keys[key] = value
        return True

    def delete(self, key: str) -> int:
        return 1 if self.keys.pop(key, None) is not None else 0


class Sender:
    """Records sends; raises on the sends listed in ``fail_on`` (1-based)."""

    def __init__(self, fail_on: tuple[int, ...] = ()) -> None:
        self.sent: list[tuple[int, int]] = []
        self.calls = 0
        self.fail_on = fail_on

    def __call__(self, delivery_id: int, attempts: int) -> None:
        self.calls += 1
        if self.calls in self.fail_on:
            raise ConnectionError("broker down")
        self.sent.append((delivery_id, attempts))


D = [Scheduled(i, f"msg_{i}") for i in (1, 2, 3)]


def test_schedule_stops_at_the_first_broker_error_and_marks_what_it_sent() -> None:
    redis, send = FakeRedis(), Sender(fail_on=(2,))
    scheduler = CeleryScheduler(redis, marker_ttl_s=60, send=send)  # type: ignore[arg-type]
    assert scheduler.schedule(D) == [D[0]]
    assert send.sent == [(1, 0)] and send.calls == 2  # the third is not even tried
    assert set(redis.keys) == {MARKER_PREFIX + "msg_1"}


def test_reschedule_skips_queued_deliveries_and_releases_a_failed_claim() -> None:
    redis, send = FakeRedis(), Sender(fail_on=(2,))
    scheduler = CeleryScheduler(redis, marker_ttl_s=60, send=send)  # type: ignore[arg-type]
    redis.keys[MARKER_PREFIX + "msg_1"] = 1  # queued a moment ago
    assert scheduler.reschedule(D) == [D[1]]
    assert send.sent == [(2, 0)]
    assert MARKER_PREFIX + "msg_3" not in redis.keys  # its send failed: claim released
    # A second sweep sends only what is still unmarked.
    assert scheduler.reschedule(D) == [D[2]]
    assert scheduler.reschedule(D) == []


def test_the_query_completed_delivery_carries_the_question(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade_head(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    question = QueryRequest(tenant="acme", query="Which port does it listen on?", deadline=T0)
    query_log.log_pending(sessions, question)
    response = QueryResponse(
        tenant="acme",
        request_id=question.request_id,
        status="answered",
        answer="Port 5432 [1]",
        callback_url="https://hooks.example.com/answers",
    )
    _, created = record_responses(sessions, [response])
    with sessions() as session:
        (delivery,) = [session.get(WebhookDelivery, c.delivery_id) for c in created]
        assert delivery is not None
        assert delivery.payload["data"]["query"] == "Which port does it listen on?"
    engine.dispose()


def test_every_delivery_names_its_sender_in_the_user_agent() -> None:
    headers = sign_headers([new_secret()], "msg_1", "{}", T0)
    assert headers["user-agent"] == f"ragstream-webhooks/{__version__}"
