"""Small helpers for integration tests against the real broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from bench.echo import EchoEvent
from ragstream.settings import Settings
from topics.serde import encode


def create_topics(settings: Settings, names: list[str], partitions: int = 3) -> None:
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        admin.close()


def produce_echo(settings: Settings, topic: str, payloads: list[str]) -> list[EchoEvent]:
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    events = [
        EchoEvent(tenant="t", seq=i, sent_at_ns=time.time_ns(), payload=p)
        for i, p in enumerate(payloads)
    ]
    for e in events:
        producer.send(topic, key=e.key(), value=encode(e))
    producer.flush()
    producer.close()
    return events


def produce_raw(settings: Settings, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all")
    for v in values:
        producer.send(topic, value=v)
    producer.flush()
    producer.close()


def consume_all(
    settings: Settings,
    topic: str,
    until: Callable[[list[Any]], bool],
    timeout_s: float = 60.0,
) -> list[Any]:
    """Read ``topic`` from the beginning until ``until(records)`` or the timeout."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=settings.kafka.bootstrap_servers,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    records: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while not until(records) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
    finally:
        consumer.close()
    return records


def committed_total(settings: Settings, group: str, topic: str, partitions: int = 3) -> int:
    """Sum of the group's committed offsets over ``topic``'s partitions (0 if none)."""
    consumer = KafkaConsumer(bootstrap_servers=settings.kafka.bootstrap_servers, group_id=group)
    try:
        total = 0
        for p in range(partitions):
            off = consumer.committed(TopicPartition(topic, p))
            total += off or 0
        return total
    finally:
        consumer.close(autocommit=False)


#: Spawned workers use a short session timeout so a SIGKILLed member is evicted quickly.
WORKER_ENV = {"RAGSTREAM_KAFKA__SESSION_TIMEOUT_MS": "6000"}


def spawn_echo(
    src: str, dst: str, group: str, *extra: str, log: Any = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.echo", "--input", src, "--output", dst, "--group", group,
         *extra],
        stdout=log,
        stderr=log,
        env={**os.environ, **WORKER_ENV},
    )  # fmt: skip


def wait_for(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
