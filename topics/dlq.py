"""Dead letters: the original record plus why, when and where it failed; and their replay.

A dead letter keeps the original key, value and headers byte for byte, and adds headers:
``dlq.error.class``, ``dlq.error.message``, ``dlq.attempts``, ``dlq.source.topic``,
``dlq.source.partition``, ``dlq.source.offset``, ``dlq.pool`` and ``dlq.failed_at`` (UTC ISO).
:func:`inspect` lists them without consuming; :func:`replay` re-publishes them.
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
    #: The record's timestamp (ms since the epoch, the producer's create time or the broker's
    #: log-append time); ``None`` when the record has none.
    timestamp_ms: int | None = None


def source_record(record: Any) -> SourceRecord:
    """Copy the fields of a kafka-python ``ConsumerRecord`` (a timestamp < 0: none)."""
    stamp = getattr(record, "timestamp", None)
    return SourceRecord(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        list(record.headers or []),
        stamp if isinstance(stamp, int) and stamp >= 0 else None,
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


@dataclass(frozen=True, slots=True)
class DeadLetterView:
    """One dead letter as ``ragstream dlq inspect`` shows it: where it sits in the DLQ, its
    key, the size of its original value in bytes and its ``dlq.*`` context."""

    partition: int
    offset: int
    key: str | None
    size: int
    context: dict[str, str]


@dataclass(frozen=True, slots=True)
class DeadLetterListing:
    """The newest dead letters of a DLQ (``letters``, oldest first) and how many it holds."""

    topic: str
    total: int
    letters: list[DeadLetterView]


def inspect(
    consumer: KafkaConsumer, dlq_topic: str, *, limit: int = 20, timeout_ms: int = 10_000
) -> DeadLetterListing:
    """Read the newest ``limit`` dead letters of each partition of ``dlq_topic`` without
    consuming them: ``consumer`` must belong to no group (``group=None``); partitions are
    assigned by hand and nothing is committed, so ``ragstream dlq replay`` still sees every
    letter.

    Raises:
        KeyError: the broker knows no topic ``dlq_topic``.
        TimeoutError: the letters up to the partitions' end offsets did not arrive in
            ``timeout_ms``.
    """
    partitions = consumer.partitions_for_topic(dlq_topic)
    if not partitions:
        raise KeyError(dlq_topic)
    tps = [TopicPartition(dlq_topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
    for tp in tps:
        consumer.seek(tp, max(begin[tp], end[tp] - limit))
    letters: list[DeadLetterView] = []
    waited_ms = 0
    while any(consumer.position(tp) < end[tp] for tp in tps):
        if waited_ms >= timeout_ms:
            raise TimeoutError(f"{dlq_topic}: dead letters did not arrive in {timeout_ms} ms")
        batch = consumer.poll(timeout_ms=500, max_records=500)
        waited_ms += 0 if batch else 500
        for tp, records in batch.items():
            letters.extend(_view(r) for r in records if r.offset < end[tp])
    letters.sort(key=lambda v: (v.partition, v.offset))
    total = sum(end[tp] - begin[tp] for tp in tps)
    return DeadLetterListing(dlq_topic, total, letters)


def _view(record: Any) -> DeadLetterView:
    key = record.key.decode(errors="replace") if record.key is not None else None
    return DeadLetterView(
        record.partition,
        record.offset,
        key,
        len(record.value or b""),
        dead_letter_context(list(record.headers or [])),
    )


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
