"""Topic creation is idempotent and reports drift; the producer surfaces every failure."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from bench.echo import EchoEvent
from ragstream.settings import KafkaSettings, Settings
from topics.admin import create_registry_topics
from topics.producer import EventProducer, RecordTooLargeError, make_producer
from topics.registry import TopicRegistry


def test_create_topics_is_idempotent_and_reports_drift(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("reg") + "."
    kafka = settings.kafka.model_copy(update={"topic_prefix": prefix})
    registry = TopicRegistry(prefix)
    expected = {t.name for t in registry.physical_topics()}
    # Someone created one topic by hand with the wrong partition count.
    admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers)
    admin.create_topics([NewTopic(prefix + "rag.responses", 2, 1)])
    try:
        first = create_registry_topics(kafka)
        assert set(first.created) == expected - {prefix + "rag.responses"}
        assert any("rag.responses: 2 partitions, spec says 6" in d for d in first.drift)
        second = create_registry_topics(kafka)
        assert second.created == []
        assert set(second.existing) == expected
        assert second.drift == first.drift
        described = {d["topic"]: d for d in admin.describe_topics([prefix + "rag.queries"])}
        assert len(described[prefix + "rag.queries"]["partitions"]) == 6
    finally:
        admin.delete_topics(sorted(expected))
        admin.close()


def test_record_over_max_request_size_is_an_error_not_a_drop(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    kafka: KafkaSettings = settings.kafka
    producer = EventProducer(make_producer(kafka, max_request_size=10_000))
    topic = unique_name("big")
    try:
        with pytest.raises(RecordTooLargeError, match="too large"):
            producer.send(topic, EchoEvent(tenant="t", seq=0, sent_at_ns=0, payload="x" * 20_000))
        producer.send(topic, EchoEvent(tenant="t", seq=1, sent_at_ns=0, payload="small"))
        assert producer.flush() == 1
    finally:
        producer.close()
