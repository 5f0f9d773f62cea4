"""Dead letters: the original record plus why, when and where it failed; and their replay.

A dead letter keeps the original key, value and headers byte for byte, and adds headers:
``dlq.error.class``, ``dlq.error.message``, ``dlq.attempts``, ``dlq.source.topic``,
``dlq.source.partition``, ``dlq.source.offset``, ``dlq.pool`` and ``dlq.failed_at`` (UTC ISO).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from topics.producer import EventProducer, Headers

DLQ_HEADER_PREFIX = "dlq."
MAX_MESSAGE_CHARS = 2000


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """The consumed record an event came from."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers


def source_record(record: Any) -> SourceRecord:
    """Copy the fields of a kafka-python ``ConsumerRecord``."""
    return SourceRecord(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        list(record.headers or []),
    )


def dead_letter_headers(
    source: SourceRecord, error: BaseException, attempts: int, pool: str
) -> Headers:
    """Original headers followed by the ``dlq.*`` context headers."""
    context = {
        "error.class": f"{type(error).__module__}.{type(error).__qualname__}",
        "error.message": str(error)[:MAX_MESSAGE_CHARS],
        "attempts": str(attempts),
        "source.topic": source.topic,
        "source.partition": str(source.partition),
        "source.offset": str(source.offset),
        "pool": pool,
        "failed_at": dt.datetime.now(dt.UTC).isoformat(),
    }
    return [*source.headers, *((DLQ_HEADER_PREFIX + k, v.encode()) for k, v in context.items())]


def dead_letter_context(headers: Headers) -> dict[str, str]:
    """The ``dlq.*`` headers of a dead letter, prefix stripped."""
    return {
        k.removeprefix(DLQ_HEADER_PREFIX): v.decode(errors="replace")
        for k, v in headers
        if k.startswith(DLQ_HEADER_PREFIX)
    }


def replay(
    consumer: KafkaConsumer,
    producer: EventProducer,
    dlq_topic: str,
    *,
    limit: int | None = None,
    idle_timeout_ms: int = 5_000,
) -> int:
    """Re-publish dead letters of ``dlq_topic`` to their source topics; return how many.

    Reads from the consumer group's committed offset (``consumer`` must be assigned or
    subscribed to ``dlq_topic`` with auto-commit off), strips the ``dlq.*`` headers, flushes,
    then commits, so a replay interrupted half-way resumes without losing a letter (it may
    re-publish some twice; consumers de-duplicate by id). Stops after ``limit`` letters or
    ``idle_timeout_ms`` without a new one.
    """
    replayed = 0
    while limit is None or replayed < limit:
        batch = consumer.poll(timeout_ms=idle_timeout_ms, max_records=500)
        if not batch:
            break
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, records in batch.items():
            for record in records:
                if limit is not None and replayed >= limit:
                    break
                headers = list(record.headers or [])
                context = dead_letter_context(headers)
                target = context.get("source.topic") or dlq_topic.removesuffix(".dlq")
                original = [(k, v) for k, v in headers if not k.startswith(DLQ_HEADER_PREFIX)]
                producer.send_raw(target, record.key, record.value, original)
                offsets[tp] = OffsetAndMetadata(record.offset + 1, "", -1)
                replayed += 1
        producer.flush()
        consumer.commit(offsets)
    return replayed
