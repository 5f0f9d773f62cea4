"""The delivery pool writes the query log, and creates each webhook delivery, once per request
id, whatever is replayed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kafka import KafkaProducer
from sqlalchemy import select

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import QueryLog, WebhookDelivery
from ragstream.settings import PoolSettings, Settings
from tests.integration.kafkakit import wait_for
from topics.admin import ensure_topics, make_admin
from topics.producer import EventProducer, make_producer
from topics.registry import RESPONSES, TopicRegistry
from topics.responses import Citation, ErrorCode, ErrorInfo, QueryResponse
from topics.serde import encode
from workers.pools.delivery import delivery_handler
from workers.runtime.runner import PoolRunner
from workers.webhooks.outbox import Scheduled


class RecordingScheduler:
    """Records what the pool asks to schedule (no Celery here)."""

    def __init__(self) -> None:
        self.scheduled: list[Scheduled] = []

    def schedule(self, deliveries: Sequence[Scheduled]) -> list[Scheduled]:
        self.scheduled += deliveries
        return list(deliveries)


def test_query_log_is_written_once_per_request(
    settings: Settings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    registry = TopicRegistry(unique_name("dl") + ".")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    scheduler = RecordingScheduler()
    handler = delivery_handler(
        sessions,
        pool=PoolSettings(max_batch=16, max_wait_ms=100),
        scheduler=scheduler,
        group=unique_name("g"),
    )
    runner = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=EventProducer(make_producer(settings.kafka)),
        registry=registry,
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    first = QueryResponse(
        tenant="acme",
        request_id="r1",
        status="answered",
        answer="5432 [1]",
        citations=(Citation(n=1, doc_id="ports", chunk_id="c1"),),
        callback_url="http://127.0.0.1:9/hook",
    )
    replay = first.model_copy(update={"answer": "a different second answer"})
    failed = QueryResponse(
        tenant="acme",
        request_id="r2",
        status="failed",
        error=ErrorInfo(code=ErrorCode.DEADLINE_EXCEEDED, message="late", stage="retrieval"),
    )
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    for event in (first, failed, first, replay):  # the last one differs: it must not win
        producer.send(registry.name(RESPONSES), key=event.key(), value=encode(event))
        producer.flush()
        time.sleep(0.2)
    producer.close()

    def rows() -> dict[str, QueryLog]:
        with sessions() as s:
            return {r.request_id: r for r in s.scalars(select(QueryLog))}

    assert wait_for(lambda: len(rows()) == 2, 30)
    time.sleep(1.5)  # let the replays arrive too
    runner.stop()
    thread.join(timeout=30)
    log = rows()
    assert log["r1"].status == "answered" and log["r1"].answer == "5432 [1]"
    assert log["r1"].citations == [
        {"n": 1, "doc_id": "ports", "chunk_id": "c1", "title": "", "source": ""}
    ]
    assert log["r2"].status == "failed" and log["r2"].error_code == "DEADLINE_EXCEEDED"
    # One webhook delivery for r1's callback (r2 has no target), scheduled once.
    with sessions() as s:
        (hook,) = s.scalars(select(WebhookDelivery)).all()
    assert hook.url == "http://127.0.0.1:9/hook" and hook.payload["data"]["answer"] == "5432 [1]"
    assert scheduler.scheduled == [Scheduled(hook.id, hook.webhook_id)]
