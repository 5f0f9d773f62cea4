"""Dead letters: the original record plus why, when and where it failed.

A dead letter keeps the original key, value and headers byte for byte, and adds headers:
``dlq.error.class``, ``dlq.error.message``, ``dlq.attempts``, ``dlq.source.topic``,
``dlq.source.partition``, ``dlq.source.offset``, ``dlq.pool`` and ``dlq.failed_at`` (UTC ISO).
A record re-published by a replay (:mod:`topics.dlq_replay`) carries ``replay.id`` (the replay
run's uuid) and ``replay.attempt`` (1 for a first replay, n + 1 for a letter that already
carried attempt n); when it fails again, the runtime keeps those headers in the new letter.
:func:`inspect` lists letters without consuming them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from topics.producer import Headers

DLQ_HEADER_PREFIX = "dlq."
MAX_MESSAGE_CHARS = 2000
#: Headers a replay sets on each record it re-publishes; earlier ones are replaced.
REPLAY_HEADER_PREFIX = "replay."
REPLAY_ID_HEADER = REPLAY_HEADER_PREFIX + "id"
REPLAY_ATTEMPT_HEADER = REPLAY_HEADER_PREFIX + "attempt"


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
class ReplayMark:
    """The replay that last re-published a record: its run's id and the attempt number."""

    replay_id: str
    attempt: int


def replay_mark(headers: Headers) -> ReplayMark | None:
    """The ``replay.*`` headers of a record (the last of each wins); ``None`` when it has no
    ``replay.id``. An attempt that is missing or not a decimal reads as 0."""
    found = {
        k: v.decode(errors="replace") for k, v in headers if k.startswith(REPLAY_HEADER_PREFIX)
    }
    replay_id = found.get(REPLAY_ID_HEADER)
    if replay_id is None:
        return None
    raw = found.get(REPLAY_ATTEMPT_HEADER, "")
    return ReplayMark(replay_id, int(raw) if raw.isdecimal() else 0)


def replayed_headers(headers: Headers, replay_id: str) -> Headers:
    """The headers a replay re-publishes a dead letter with.

    The letter's own headers without ``dlq.*`` and ``replay.*``, then ``replay.id`` =
    ``replay_id`` and ``replay.attempt`` = 1 + the attempt of an earlier replay (1 if none).
    """
    earlier = replay_mark(headers)
    attempt = (earlier.attempt if earlier else 0) + 1
    kept = [
        (k, v)
        for k, v in headers
        if not k.startswith(DLQ_HEADER_PREFIX) and not k.startswith(REPLAY_HEADER_PREFIX)
    ]
    return [
        *kept,
        (REPLAY_ID_HEADER, replay_id.encode()),
        (REPLAY_ATTEMPT_HEADER, str(attempt).encode()),
    ]


@dataclass(frozen=True, slots=True)
class DeadLetterView:
    """One dead letter as ``ragstream dlq inspect`` shows it: where it sits in the DLQ, its
    key, the size of its original value in bytes, its ``dlq.*`` context and, for a record a
    replay had re-published, that replay (``None`` otherwise)."""

    partition: int
    offset: int
    key: str | None
    size: int
    context: dict[str, str]
    replay: ReplayMark | None = None


@dataclass(frozen=True, slots=True)
class DeadLetterListing:
    """The newest dead letters of a DLQ (``letters``, oldest first) and how many it holds."""

    topic: str
    total: int
    letters: list[DeadLetterView]


def inspect(
    consumer: KafkaConsumer,
    dlq_topic: str,
    *,
    limit: int = 20,
    timeout_ms: int = 10_000,
    tenant: str | None = None,
) -> DeadLetterListing:
    """Read the newest ``limit`` dead letters of each partition of ``dlq_topic`` without
    consuming them: ``consumer`` must belong to no group (``group=None``); partitions are
    assigned by hand and nothing is committed, so ``ragstream dlq replay`` still sees every
    letter.

    With ``tenant``, only that tenant's letters (:func:`topics.scan.record_tenant` of the
    original value) are listed and counted in ``total``, among the newest
    :data:`topics.scan.MAX_SCAN_PER_PARTITION` letters of each partition.

    Raises:
        KeyError: the broker knows no topic ``dlq_topic``.
        TimeoutError: the letters up to the partitions' end offsets did not arrive in
            ``timeout_ms``.
    """
    from topics.scan import record_tenant, scan_range

    partitions = consumer.partitions_for_topic(dlq_topic)
    if not partitions:
        raise KeyError(dlq_topic)
    tps = [TopicPartition(dlq_topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
    kept: dict[int, list[DeadLetterView]] = {}
    counted = 0

    def keep(record: Any) -> None:
        nonlocal counted
        if tenant is not None and record_tenant(record.value) != tenant:
            return
        counted += 1
        views = kept.setdefault(record.partition, [])
        views.append(_view(record))
        if len(views) > limit:
            views.pop(0)

    if tenant is None:
        start = {tp: max(begin[tp], end[tp] - limit) for tp in tps}
        scan_range(consumer, start, end, keep, max_per_partition=limit, timeout_ms=timeout_ms)
        total = sum(end[tp] - begin[tp] for tp in tps)
    else:
        scan_range(consumer, begin, end, keep, timeout_ms=timeout_ms)
        total = counted
    letters = sorted(
        (v for views in kept.values() for v in views), key=lambda v: (v.partition, v.offset)
    )
    return DeadLetterListing(dlq_topic, total, letters)


def _view(record: Any) -> DeadLetterView:
    key = record.key.decode(errors="replace") if record.key is not None else None
    headers = list(record.headers or [])
    return DeadLetterView(
        record.partition,
        record.offset,
        key,
        len(record.value or b""),
        dead_letter_context(headers),
        replay_mark(headers),
    )
