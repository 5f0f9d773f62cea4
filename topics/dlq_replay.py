"""Replaying a dead-letter topic: each letter re-published to its source topic at most once,
up to where the topic ended when the replay started.

A replay must not read what it causes: a re-published poison record fails again and lands in
the same DLQ, past the offsets the replay is working through. So :func:`replay` assigns the
DLQ's partitions by hand, notes their end offsets first, starts each partition at the replay
group's committed offset (or its beginning) and stops when every partition has reached the
end offset it noted. ``limit`` counts letters re-published, not polls. Progress is committed
in the group after each flushed batch, so an interrupted replay resumes where it stopped, and
a later replay starts after the last letter this one re-published.

Each re-published record carries ``replay.id`` (one uuid per run) and ``replay.attempt``
(:func:`topics.dlq.replayed_headers`); the consumer runtime dead-letters a record with its
original headers, so a letter that fails again names the replay that sent it. After the last
flush the replay can wait ``settle_ms`` and count those letters (``failed_again``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from ragstream.settings import KafkaSettings
from topics.dlq import dead_letter_context, replay_mark, replayed_headers
from topics.producer import EventProducer
from topics.scan import record_tenant

log = structlog.get_logger(__name__)

#: The consumer group whose committed offsets record replay progress, shared by
#: ``ragstream dlq replay`` (its default ``--group``), the API and the console.
REPLAY_GROUP = "ragstream-dlq-replay"
#: How long one poll waits for records, ms.
POLL_MS = 500


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What one replay run did.

    Attributes:
        topic: the dead-letter topic replayed.
        replay_id: the run's uuid, sent as the ``replay.id`` header of every record it
            re-published.
        replayed: letters re-published (each at most once; at most ``limit``).
        failed_again: distinct re-published records (by the ``dlq.source.topic``,
            ``dlq.source.partition`` and ``dlq.source.offset`` of their new letter) that were
            dead-lettered again, as found in the DLQ past ``end_offsets`` with this run's
            ``replay.id`` within the settle time; 0 when the replay did not wait. A lower
            bound: a pool that fails a record later than that is not counted.
        end_offsets: partition -> the DLQ's end offset when the run started, where it stopped
            reading (letters at or past it were not replayed).
        remaining: letters before ``end_offsets`` left for a later replay (``limit`` reached).
    """

    topic: str
    replay_id: str
    replayed: int
    failed_again: int
    end_offsets: dict[int, int]
    remaining: int


def replay(
    consumer: KafkaConsumer,
    producer: EventProducer,
    dlq_topic: str,
    *,
    limit: int | None = None,
    settle_ms: int = 0,
    idle_timeout_ms: int = 10_000,
    replay_id: str | None = None,
    tenant: str | None = None,
) -> ReplayReport:
    """Re-publish the dead letters of ``dlq_topic`` to their source topics, each at most once.

    Args:
        consumer: a consumer in the replay's group (``group_id`` set, auto-commit off) that
            neither subscribes nor is assigned anything: partitions are assigned here.
        producer: sends the records; flushed before each commit.
        dlq_topic: the dead-letter topic (a letter without ``dlq.source.topic`` goes to this
            name without ``.dlq``).
        limit: re-publish at most this many letters; ``None``: every letter up to the end
            offsets seen at the start.
        settle_ms: after the last flush, wait up to this long (ms) for re-published records
            to come back to the DLQ and count them (:attr:`ReplayReport.failed_again`); the
            wait ends early once every re-published record is back.
        idle_timeout_ms: give up when no record arrives for this long (ms) while a partition
            is still short of its end offset.
        replay_id: the run's id (default: a new uuid4).
        tenant: re-publish only this tenant's letters (:func:`topics.scan.record_tenant` of
            the original value); the others are passed over (the group's offset moves past
            them, so give a tenant's replay a group of its own: :func:`tenant_group`).

    Returns:
        The run's :class:`ReplayReport`.

    Raises:
        ValueError: ``consumer`` has no group or ``limit`` is negative.
        KeyError: the broker knows no topic ``dlq_topic``.
        TimeoutError: letters up to the end offsets did not arrive in ``idle_timeout_ms``
            (what was re-published before is flushed and committed).
        ProduceError: a record was not acknowledged (nothing of its batch is committed).
    """
    if not consumer.config.get("group_id"):
        raise ValueError("a replay needs a consumer group to record its progress in")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    run_id = replay_id or str(uuid.uuid4())
    partitions = consumer.partitions_for_topic(dlq_topic)
    if not partitions:
        raise KeyError(dlq_topic)
    tps = [TopicPartition(dlq_topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    end: dict[TopicPartition, int] = consumer.end_offsets(tps)
    start = _seek_to_committed(consumer, tps)
    log.info("dlq.replay.start", topic=dlq_topic, replay_id=run_id, limit=limit,
             letters=sum(max(0, end[tp] - start[tp]) for tp in tps))  # fmt: skip
    run = _Run(
        consumer, producer, dlq_topic, run_id, end=end, next_offset=dict(start), tenant=tenant
    )
    run.republish(limit, idle_timeout_ms)
    failed_again = run.count_failed_again(settle_ms)
    report = ReplayReport(
        topic=dlq_topic,
        replay_id=run_id,
        replayed=run.replayed,
        failed_again=failed_again,
        end_offsets={tp.partition: end[tp] for tp in tps},
        remaining=sum(max(0, end[tp] - run.next_offset[tp]) for tp in tps),
    )
    log.info("dlq.replay.done", topic=dlq_topic, replay_id=run_id, replayed=report.replayed,
             failed_again=failed_again, remaining=report.remaining)  # fmt: skip
    return report


def replay_dead_letters(
    settings: KafkaSettings,
    dlq_topic: str,
    *,
    group: str = REPLAY_GROUP,
    limit: int | None = None,
    settle_ms: int = 0,
    client_id: str = "ragstream-dlq-replay",
    tenant: str | None = None,
) -> ReplayReport:
    """:func:`replay` with its own consumer (in ``group``; with ``tenant``, that tenant's own
    group, :func:`tenant_group`) and producer, both closed after.

    The one entry point of ``ragstream dlq replay``, ``POST /v1/ops/dlq/{topic}/replay`` and
    the console's Replay button. Raises as :func:`replay`.
    """
    from topics.consumer import make_consumer
    from topics.producer import make_producer

    if tenant is not None:
        group = tenant_group(group, tenant)
    consumer = make_consumer(settings, group=group, client_id=client_id)
    producer = EventProducer(make_producer(settings))
    try:
        return replay(
            consumer, producer, dlq_topic, limit=limit, settle_ms=settle_ms, tenant=tenant
        )
    finally:
        consumer.close(autocommit=False)
        producer.close()


def tenant_group(group: str, tenant: str) -> str:
    """The replay group of one tenant's replays: ``<group>.tenant.<tenant>`` (a tenant's replay
    passes over other tenants' letters, so it must not move the shared group's offsets)."""
    return f"{group}.tenant.{tenant}"


def _seek_to_committed(
    consumer: KafkaConsumer, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """Seek each partition to the group's committed offset, or to its beginning when the
    group has none or retention has deleted past it; return where each starts."""
    begin: dict[TopicPartition, int] = consumer.beginning_offsets(tps)
    start: dict[TopicPartition, int] = {}
    for tp in tps:
        committed = consumer.committed(tp)
        start[tp] = max(begin[tp], committed if committed is not None else 0)
        consumer.seek(tp, start[tp])
    return start


class _Run:
    """One replay run's state: the end offsets it stops at and how far it has come."""

    def __init__(
        self,
        consumer: KafkaConsumer,
        producer: EventProducer,
        dlq_topic: str,
        replay_id: str,
        *,
        end: dict[TopicPartition, int],
        next_offset: dict[TopicPartition, int],
        tenant: str | None = None,
    ) -> None:
        self.tenant = tenant
        self.consumer, self.producer = consumer, producer
        self.dlq_topic, self.replay_id = dlq_topic, replay_id
        self.end = end
        #: Partition -> the offset after the last letter re-published (where a resume starts).
        self.next_offset = next_offset
        self.replayed = 0

    def republish(self, limit: int | None, idle_timeout_ms: int) -> None:
        """Re-publish letters until every partition reaches its end offset or ``limit``."""
        open_ = self._still_open(self.end)
        idle_since = time.monotonic()
        while open_ and (limit is None or self.replayed < limit):
            want = POLL_MS if limit is None else min(POLL_MS, limit - self.replayed)
            batch = self.consumer.poll(timeout_ms=POLL_MS, max_records=want)
            if batch:
                idle_since = time.monotonic()
            elif (time.monotonic() - idle_since) * 1000 >= idle_timeout_ms:
                raise TimeoutError(
                    f"{self.dlq_topic}: no dead letter arrived in {idle_timeout_ms} ms before "
                    f"the end offsets; {self.replayed} re-published and committed"
                )
            self._send_batch(batch, limit)
            open_ = self._still_open(open_)

    def _send_batch(self, batch: dict[TopicPartition, list[Any]], limit: int | None) -> None:
        """Send the letters of ``batch`` below the end offsets, flush, then commit them."""
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, records in batch.items():
            for record in records:
                if record.offset >= self.end[tp] or (limit is not None and self.replayed >= limit):
                    break
                offsets[tp] = OffsetAndMetadata(record.offset + 1, "", -1)
                self.next_offset[tp] = record.offset + 1
                if self.tenant is not None and record_tenant(record.value) != self.tenant:
                    continue  # another tenant's letter: passed over, never re-published
                headers = list(record.headers or [])
                target = dead_letter_context(headers).get("source.topic")
                self.producer.send_raw(
                    target or self.dlq_topic.removesuffix(".dlq"),
                    record.key,
                    record.value,
                    replayed_headers(headers, self.replay_id),
                )
                self.replayed += 1
        if offsets:
            self.producer.flush()
            self.consumer.commit(offsets)

    def _still_open(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """The partitions of ``tps`` whose position is short of their end offset; the others
        are paused (nothing past the end offset is fetched) and count as fully read."""
        open_: list[TopicPartition] = []
        for tp in tps:
            if self.consumer.position(tp) < self.end[tp]:
                open_.append(tp)
            else:
                self.consumer.pause(tp)
                self.next_offset[tp] = max(self.next_offset[tp], self.end[tp])
        return open_

    def count_failed_again(self, settle_ms: int) -> int:
        """Wait up to ``settle_ms`` for the records this run re-published to come back to the
        DLQ (past the end offsets, with this run's ``replay.id``); return how many distinct
        source records came back (see :attr:`ReplayReport.failed_again`)."""
        if settle_ms <= 0 or self.replayed == 0:
            return 0
        tps = list(self.end)
        self.consumer.resume(*tps)
        for tp in tps:
            self.consumer.seek(tp, self.end[tp])
        back: set[tuple[str, ...]] = set()
        deadline = time.monotonic() + settle_ms / 1000
        while len(back) < self.replayed and (left_s := deadline - time.monotonic()) > 0:
            batch = self.consumer.poll(timeout_ms=max(1, min(POLL_MS, int(left_s * 1000))))
            for records in batch.values():
                back.update(self._came_back(records))
        return len(back)

    def _came_back(self, records: list[Any]) -> Iterable[tuple[str, ...]]:
        """The source positions of the letters in ``records`` that carry this run's id."""
        for record in records:
            headers = list(record.headers or [])
            mark = replay_mark(headers)
            if mark is not None and mark.replay_id == self.replay_id:
                c = dead_letter_context(headers)
                yield tuple(c.get(f"source.{k}", "") for k in ("topic", "partition", "offset"))
