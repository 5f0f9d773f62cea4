"""Each local service is real: Kafka, Elasticsearch (BM25 and kNN) and Redis round trips."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from elasticsearch import Elasticsearch
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from ragstream.settings import Settings


@pytest.fixture
def es(settings: Settings) -> Iterator[Elasticsearch]:
    client = Elasticsearch(settings.elasticsearch.url, request_timeout=30)
    yield client
    client.close()


def test_kafka_produce_and_consume(settings: Settings, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("topic")
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    try:
        producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
        sent = {f"key-{i}": f"value-{i}-{uuid.uuid4().hex}" for i in range(10)}
        for key, value in sent.items():
            producer.send(topic, key=key.encode(), value=value.encode()).get(timeout=30)
        producer.close()

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=settings.kafka.bootstrap_servers,
            group_id=unique_name("group"),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=20_000,
        )
        got: dict[str, str] = {}
        for record in consumer:
            got[record.key.decode()] = record.value.decode()
            if len(got) == len(sent):
                break
        consumer.close()
        assert got == sent
    finally:
        admin.delete_topics([topic])
        admin.close()


def _unit(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def test_elasticsearch_bm25_and_knn(es: Elasticsearch, unique_name: Callable[[str], str]) -> None:
    index = unique_name("index")
    dims = 4
    es.indices.create(
        index=index,
        mappings={
            "properties": {
                "text": {"type": "text"},
                "embedding": {
                    "type": "dense_vector",
                    "dims": dims,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {"type": "hnsw"},
                },
            }
        },
    )
    try:
        docs = {
            "a": ("Kafka partitions are ordered logs", [1.0, 0.0, 0.0, 0.0]),
            "b": ("Elasticsearch stores inverted indices", [0.0, 1.0, 0.0, 0.0]),
            "c": ("Redis is an in-memory data store", [0.0, 0.0, 1.0, 0.2]),
        }
        for doc_id, (text, vec) in docs.items():
            es.index(index=index, id=doc_id, document={"text": text, "embedding": _unit(vec)})
        es.indices.refresh(index=index)

        bm25 = es.search(index=index, query={"match": {"text": "inverted indices"}})
        assert [h["_id"] for h in bm25["hits"]["hits"]] == ["b"]

        knn = es.search(
            index=index,
            knn={
                "field": "embedding",
                "query_vector": _unit([0.1, 0.0, 0.9, 0.2]),
                "k": 1,
                "num_candidates": 10,
            },
        )
        assert knn["hits"]["hits"][0]["_id"] == "c"
    finally:
        es.indices.delete(index=index)


def test_redis_round_trip(settings: Settings, unique_name: Callable[[str], str]) -> None:
    client = redis.Redis.from_url(settings.redis.url)
    key = unique_name("key")
    value = uuid.uuid4().hex
    try:
        assert client.set(key, value, ex=60)
        assert client.get(key) == value.encode()
    finally:
        client.delete(key)
        client.close()
