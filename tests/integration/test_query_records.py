"""A ``rag.queries`` record as another producer sends it (Kafka's console producer: a key and a
JSON value, no ``request_id``, no ``created_at``) read back from the real broker: the runtime's
decoding takes the request id from the key and the time from the record's timestamp."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

from kafka import KafkaProducer

from ragstream.settings import Settings
from tests.integration.kafkakit import consume_all, create_topics
from topics.dlq import source_record
from topics.queries import QueryRequest
from workers.runtime.process import decode_items


def test_a_keyed_record_without_request_id_is_answered_under_its_key(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("queries")
    create_topics(settings, [topic], partitions=1)
    sent_at = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(seconds=30)
    value = {"tenant": "acme", "query": "What does VACUUM do?", "deadline": "2099-01-01T00:00:00Z"}
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    try:
        for _ in range(2):  # the record and its redelivery
            producer.send(
                topic,
                key=b"order-42",
                value=json.dumps(value).encode(),
                timestamp_ms=int(sent_at.timestamp() * 1000),
            )
        producer.flush()
    finally:
        producer.close()
    records = consume_all(settings, topic, lambda rs: len(rs) >= 2, timeout_s=30)
    items = decode_items(QueryRequest, [source_record(r) for r in records])
    events = [i.event for i in items]
    assert len(events) == 2 and all(isinstance(e, QueryRequest) for e in events), items
    assert [e.request_id for e in events if e] == ["order-42", "order-42"]
    assert all(e.created_at == sent_at for e in events if e)  # the 30 s in Kafka are counted
