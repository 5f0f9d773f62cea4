"""A ``rag.retrieved`` event over Kafka's ``max_request_size`` is trimmed to fit, never lost:
the retrieval pool (real Elasticsearch, embedder and Kafka) with a producer whose limit is
small publishes its candidates cut down and marked ``trimmed``; before, the record failed its
batch for good (``RecordTooLargeError``: the query was dead-lettered and answered with an
error, HTTP 500 through the API)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable

from ingest.ops import IngestOp
from ragstream.settings import PoolSettings, RetrievalSettings, Settings
from tests.integration.ingestkit import Kit
from tests.integration.kafkakit import consume_all
from topics.admin import ensure_topics, make_admin
from topics.producer import EventProducer, make_producer
from topics.queries import QueryRequest
from topics.registry import QUERIES, RESPONSES, RETRIEVED, TopicRegistry
from topics.retrieved import RetrievedCandidates
from topics.serde import decode, encode
from workers.caches import AnswerCache
from workers.pools.components import build_router
from workers.pools.retrieval import retrieval_handler
from workers.retrieval.hybrid import HybridRetriever
from workers.runtime.runner import PoolRunner

LIMIT = 6_000  # bytes: a few chunks of these documents do not fit


def test_a_retrieved_event_over_the_record_limit_is_trimmed_and_published(
    settings: Settings, kit: Kit, unique_name: Callable[[str], str]
) -> None:
    sentence = "The zebra crossing inspection covers paint, lights and the kerb ramps. "
    kit.pipeline.apply(
        [
            IngestOp("acme", f"z{i}", data=f"# Zebra {i}\n\n{sentence * 25}".encode(),
                     content_type="markdown")
            for i in range(8)
        ]
    )  # fmt: skip
    registry = TopicRegistry(unique_name("fit") + ".")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    small = settings.kafka.model_copy(update={"max_request_size": LIMIT})
    handler = retrieval_handler(
        kit.embedder,
        HybridRetriever(kit.es, kit.index.alias, RetrievalSettings()),
        AnswerCache(kit.redis),
        kit.versions,
        build_router(kit.embedder),
        pool=PoolSettings(max_batch=4, max_wait_ms=50, retry_base_ms=50),
        group=unique_name("g"),
        max_record_bytes=LIMIT,
    )
    producer = EventProducer(make_producer(small))
    runner = PoolRunner(handler, kafka=small, producer=producer, registry=registry)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        query = QueryRequest(
            tenant="acme",
            query="What does the zebra crossing inspection cover?",
            deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2),
            top_n=10,
        )
        feed = EventProducer(make_producer(settings.kafka))
        feed.send(registry.name(QUERIES), query)
        feed.flush()
        feed.close()
        records = consume_all(settings, registry.name(RETRIEVED), lambda r: len(r) >= 1, 90)
    finally:
        runner.stop()
        thread.join(timeout=60)
        producer.close()
    assert len(records) == 1, "the rag.retrieved record was not published"
    event = decode(RetrievedCandidates, records[0].value)
    assert "trimmed" in event.degraded and event.request_id == query.request_id
    assert event.candidates and len(encode(event)) < LIMIT
    assert all(c.doc_id.startswith("z") for c in event.candidates)
    errors = consume_all(settings, registry.name(RESPONSES), lambda r: len(r) >= 1, 3)
    assert errors == []  # no error response: the question goes on to rerank and an answer
    assert consume_all(settings, registry.dlq(QUERIES), lambda r: len(r) >= 1, 3) == []
