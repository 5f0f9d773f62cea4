"""The consumer loop of a pool process: fetch, process, publish, commit; and shut down cleanly.

Guarantees (DESIGN.md, "Event semantics"):
- at-least-once: auto-commit is off; a batch's offsets are committed only after its outputs
  and dead letters are flushed (``acks=all``); a failed handler or publish leaves the offsets
  uncommitted and the batch is retried from its first offset;
- a slow batch never exceeds ``max.poll.interval.ms``: while the batch runs in a worker thread,
  the loop pauses every assigned partition and keeps calling ``poll()``, which keeps the
  member alive and fetches nothing;
- on partition revocation the in-flight batch is finished and committed before the partitions
  are given up; records fetched but not started for a revoked partition are dropped (the new
  owner reads them from the committed offset);
- SIGTERM/SIGINT: stop polling, finish and flush the batch, commit, leave the group;
- idle costs little: the wait for a first record backs off from ``IDLE_POLL_MIN_MS`` to
  ``IDLE_POLL_MAX_MS`` while polls come back empty (:func:`next_idle_wait_ms`) and drops back
  on the first record. ``poll()`` returns as soon as a fetch brings records (and the broker
  answers a fetch as soon as one record is there), so a long wait adds no latency to the
  first event after a quiet spell; it only makes the loop, its lag report and kafka-python's
  own work per ``poll()`` run less often (docs/benchmarks/index.md, "Idle cost").
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from kafka import ConsumerRebalanceListener, TopicPartition
from kafka.errors import CommitFailedError, KafkaError
from kafka.structs import OffsetAndMetadata

from ragstream import tracing
from ragstream.errors import PermanentError, RagstreamError
from ragstream.retry import RetryPolicy
from ragstream.settings import KafkaSettings
from topics.base import Event
from topics.consumer import make_pool_consumer
from topics.dlq import SourceRecord, dead_letter_headers, source_record
from topics.producer import EventProducer
from topics.registry import TopicRegistry
from workers.runtime import metrics
from workers.runtime.handler import Emit, Handler
from workers.runtime.policy import ArrivalRate
from workers.runtime.pressure import PressureReporter
from workers.runtime.process import (
    BatchProcessor,
    BatchResult,
    DeadLetter,
    Item,
    decode_items,
    stamp_waits,
)
from workers.runtime.tracing import BatchTrace

log = structlog.get_logger(__name__)

E = TypeVar("E", bound=Event)

#: Wait for a first record right after a record arrived (ms).
IDLE_POLL_MIN_MS = 200
#: Longest wait for a first record when the topic stays quiet (ms); also the longest delay
#: between SIGTERM and the start of an idle pool's shutdown.
IDLE_POLL_MAX_MS = 2000
KEEPALIVE_POLL_MS = 50
KEEPALIVE_INTERVAL_S = 0.5


def next_idle_wait_ms(current_ms: int, got_records: bool) -> int:
    """The next wait for a first record: ``IDLE_POLL_MIN_MS`` after a poll that brought
    records, else double ``current_ms`` up to ``IDLE_POLL_MAX_MS`` (200, 400, 800, 1600, 2000
    ms: two seconds after the last event the loop wakes at most every 2 s)."""
    if got_records:
        return IDLE_POLL_MIN_MS
    return min(IDLE_POLL_MAX_MS, max(IDLE_POLL_MIN_MS, current_ms * 2))


@dataclass(slots=True)
class _Done:
    """What the worker thread reports for one batch."""

    ok: bool
    error: BaseException | None = None
    published: int = 0


class PoolRunner(Generic[E]):
    """Runs one handler as one member of its consumer group.

    Args:
        handler: the registered handler.
        kafka: Kafka client settings.
        producer: the (shared, thread-safe) event producer for outputs and dead letters.
        registry: maps the handler's topic specs to physical names.
        pressure: optional back-pressure reporter.
        consumer: an existing consumer (tests); default:
            :func:`topics.consumer.make_pool_consumer`.
        failure_backoff: back-off between retries of an uncommitted batch.
    """

    def __init__(
        self,
        handler: Handler[E],
        *,
        kafka: KafkaSettings,
        producer: EventProducer,
        registry: TopicRegistry,
        pressure: PressureReporter | None = None,
        consumer: Any = None,
        failure_backoff: RetryPolicy | None = None,
    ) -> None:
        self.handler = handler
        self.member = f"{handler.name}-{socket.gethostname()}-{os.getpid()}"
        self._registry = registry
        self._producer = producer
        self._pressure = pressure
        self._backoff = failure_backoff or RetryPolicy(
            max_attempts=2**31, base_ms=200, cap_ms=10_000
        )
        self._consumer = consumer or make_pool_consumer(
            kafka, handler.group, self.member, handler.batch.max_batch
        )
        self._input = registry.name(handler.input)
        self._dlq = registry.dlq(handler.input)
        self._processor: BatchProcessor[E] = BatchProcessor(handler)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=handler.name)
        self._stopping = threading.Event()
        self._fetched: list[Any] = []
        self._current: Future[_Done] | None = None
        self._current_records: list[Any] = []
        self._committed_early = False
        self._failures = 0
        self._streamed: dict[str, int] = {}
        self._idle_wait_ms = IDLE_POLL_MIN_MS
        self._arrivals = ArrivalRate()
        self._picked_at = dt.datetime.now(dt.UTC)
        self._trace: BatchTrace | None = None
        self.batches = 0
        metrics.init_pool(handler.name)

    # -- lifecycle ---------------------------------------------------------------------------

    def attach_pressure(self, reporter: PressureReporter) -> None:
        """Report lag and in-flight events through ``reporter`` from now on."""
        self._pressure = reporter

    def stop(self, *_: object) -> None:
        """Ask the loop to finish its batch, commit and leave (safe from a signal handler)."""
        self._stopping.set()

    def install_signal_handlers(self) -> None:
        """Route SIGTERM and SIGINT to :meth:`stop` (main thread only)."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Consume until :meth:`stop` (or ``until()`` is true), then shut down in order."""
        self._consumer.subscribe([self._input], listener=_Listener(self))
        log.info("pool.started", pool=self.handler.name, topic=self._input, member=self.member)
        try:
            while not self._stopping.is_set() and not (until and until()):
                records = self._fetch()
                if records:
                    self._handle(records)
                self._report()
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        try:
            self._producer.flush()
        except RagstreamError as exc:
            log.error("pool.flush_failed_on_shutdown", pool=self.handler.name, error=str(exc))
        self._executor.shutdown(wait=True)
        if self._pressure is not None:
            self._pressure.clear()
        self._consumer.close(autocommit=False)
        log.info("pool.stopped", pool=self.handler.name, member=self.member, batches=self.batches)

    # -- fetch -------------------------------------------------------------------------------

    def _fetch(self) -> list[Any]:
        """Collect up to ``max_batch`` records, waiting at most ``max_wait_ms`` after the first,
        and no longer once fewer than ``wait_min_arrivals`` more are expected in the rest of the
        wait (:meth:`BatchPolicy.keeps_waiting` at the member's :class:`ArrivalRate`)."""
        policy = self.handler.batch
        self._fetched = []
        first_at: float | None = None
        while len(self._fetched) < policy.max_batch:
            if first_at is None:
                if self._stopping.is_set():
                    break
                timeout_ms = self._idle_wait_ms
            else:
                now = time.monotonic()
                remaining_ms = policy.max_wait_ms - (now - first_at) * 1000
                if self._stopping.is_set() or not policy.keeps_waiting(
                    self._arrivals, remaining_ms, now
                ):
                    break
                timeout_ms = max(1, int(remaining_ms))
            polled = self._consumer.poll(
                timeout_ms=timeout_ms, max_records=policy.max_batch - len(self._fetched)
            )
            got = sum(len(records) for records in polled.values())
            for records in polled.values():
                self._fetched.extend(records)
            if got:
                self._arrivals.observe(got, time.monotonic())
            if first_at is None:
                self._idle_wait_ms = next_idle_wait_ms(timeout_ms, bool(self._fetched))
                if not self._fetched:
                    return []
                first_at = time.monotonic()
        records, self._fetched = self._fetched, []
        return records

    # -- process -----------------------------------------------------------------------------

    def _handle(self, records: list[Any]) -> None:
        name = self.handler.name
        started = time.monotonic()
        metrics.EVENTS_IN.labels(name).inc(len(records))
        metrics.BATCH_SIZE.labels(name).observe(len(records))
        metrics.IN_FLIGHT.labels(name).set(len(records))
        items = decode_items(self.handler.input.model, [source_record(r) for r in records])
        self._picked_at = dt.datetime.now(dt.UTC)
        metrics.observe_pickup(
            name, (i.event for i in items if i.event is not None), self._picked_at
        )
        self._current_records = records
        self._committed_early = False
        trace = self._trace = (
            BatchTrace(name, self.handler.group, self.handler.input.name, items)
            if tracing.enabled()
            else None
        )
        try:
            with tracing.event_contexts(trace.by_key if trace else {}):
                done = self._run_in_worker(self._process_and_publish, items)
        finally:
            self._trace = None
        if trace is not None:
            trace.end(None if done.ok else done.error)
        if done.ok:
            if not self._committed_early:
                self._commit(records)
            self._failures = 0
            self.batches += 1
            metrics.BATCH_LATENCY.labels(name).observe(time.monotonic() - started)
        else:
            self._retry_later(records, done.error)
        self._current_records = []
        metrics.IN_FLIGHT.labels(name).set(0)

    def _run_in_worker(self, fn: Callable[[list[Item]], _Done], items: list[Item]) -> _Done:
        """Run ``fn(items)`` in the worker thread while keeping the group membership alive.

        A batch that finishes within ``KEEPALIVE_INTERVAL_S`` costs no extra poll. A longer one
        pauses every assigned partition and polls (fetching nothing) every interval, which
        resets the ``max.poll.interval.ms`` timer and lets a rebalance run ``on_revoked``.
        """
        future = self._executor.submit(fn, items)
        self._current = future
        paused = False
        try:
            while True:
                try:
                    future.exception(timeout=KEEPALIVE_INTERVAL_S)
                    break
                except TimeoutError:
                    if not paused:
                        self._consumer.pause(*self._consumer.assignment())
                        paused = True
                    self._keepalive()
        finally:
            self._current = None
            if paused:
                self._consumer.resume(*self._consumer.paused())
        exc = future.exception()
        if exc is not None:
            return _Done(ok=False, error=exc)
        return future.result()

    def _keepalive(self) -> None:
        """Poll with every partition paused: heartbeats, rebalances, no records."""
        polled = self._consumer.poll(timeout_ms=KEEPALIVE_POLL_MS, max_records=1)
        # Partitions newly assigned during a rebalance are not paused: rewind what they gave.
        for tp, records in polled.items():
            if records:
                self._consumer.seek(tp, records[0].offset)
        if polled:
            self._consumer.pause(*self._consumer.assignment())

    def _sleep_alive(self, seconds: float) -> None:
        """Sleep ``seconds`` in the loop thread while staying in the group."""
        end = time.monotonic() + seconds
        self._consumer.pause(*self._consumer.assignment())
        try:
            while time.monotonic() < end and not self._stopping.is_set():
                self._keepalive()
        finally:
            self._consumer.resume(*self._consumer.paused())

    def emit_now(self, emit: Emit) -> None:
        """Publish ``emit`` while the batch still runs (a stream of partial results, such as
        answer tokens), like one of the batch's outputs: only to a topic the handler declares,
        through the runtime's producer, and its send result is checked by the batch's flush, so
        a lost record leaves the batch uncommitted and retried. Call it from the handler.

        Raises:
            ConfigurationError: ``emit`` targets a topic the handler does not declare.
            RecordTooLargeError, ProduceError: as :meth:`EventProducer.send`.
        """
        self.handler.check_emit(emit)
        topic = self._registry.name(emit.topic)
        self._producer.send(topic, emit.event, self._headers(emit.event))
        self._streamed[topic] = self._streamed.get(topic, 0) + 1

    def _headers(self, event: Event) -> list[tuple[str, bytes]]:
        """Record headers of an output: the trace context of its input event (by key)."""
        trace = self._trace
        return trace.headers_for(event) if trace is not None else []

    def _process_and_publish(self, items: list[Item]) -> _Done:
        with tracing.activated(self._trace.context if self._trace is not None else None):
            return self._process_and_publish_traced(items)

    def _process_and_publish_traced(self, items: list[Item]) -> _Done:
        self._streamed = {}
        result = self._processor.run(items)
        result.emits = stamp_waits(result.emits, items, self._picked_at)
        if result.outage is not None:
            self._producer.discard_pending()  # what emit_now sent; the batch runs again
            return _Done(ok=False, error=result.outage)
        try:
            return _Done(ok=True, published=self._publish(result))
        except PermanentError as exc:
            self._producer.discard_pending()
            log.warning("pool.publish_permanent_error", pool=self.handler.name, error=str(exc))
            return self._publish_isolated(items)
        except RagstreamError as exc:
            self._producer.discard_pending()
            return _Done(ok=False, error=exc)

    def _publish(self, result: BatchResult) -> int:
        counts, self._streamed = self._streamed, {}
        for emit in result.emits:
            topic = self._registry.name(emit.topic)
            self._producer.send(topic, emit.event, self._headers(emit.event))
            counts[topic] = counts.get(topic, 0) + 1
        for letter in result.dead_letters:
            self._send_dead_letter(letter)
        published = self._producer.flush()
        for topic, n in counts.items():
            metrics.EVENTS_OUT.labels(self.handler.name, topic).inc(n)
        return published

    def _publish_isolated(self, items: list[Item]) -> _Done:
        """An output was refused for good (e.g. too large): publish event by event and
        dead-letter the event whose own outputs are refused, with its handler's
        ``on_dead_letter`` outputs (a query's typed error response)."""
        published = 0
        for item in items:
            result = self._processor.run([item])
            result.emits = stamp_waits(result.emits, [item], self._picked_at)
            if result.outage is not None:
                return _Done(ok=False, error=result.outage)
            try:
                published += self._publish(result)
            except PermanentError as exc:
                self._producer.discard_pending()
                published += self._dead_letter_refused(item, exc)
        return _Done(ok=True, published=published)

    def _dead_letter_refused(self, item: Item, error: PermanentError) -> int:
        """Dead-letter ``item`` whose outputs the broker refused, then publish the handler's
        ``on_dead_letter`` outputs for it, so a caller waiting on a response is told.

        The dead letter is flushed first: should the notice be refused as well (it is built
        small, so it should not), the event is still dead-lettered once and the refusal logged.
        Returns the number of records acknowledged.

        Raises:
            ProduceError: a record was not acknowledged (the batch is retried).
        """
        self._send_dead_letter(DeadLetter(item, error, 1))
        published = self._producer.flush()
        notices = self._processor.dead_letter_emits(item, error)
        try:
            for emit in notices:
                self._producer.send(
                    self._registry.name(emit.topic), emit.event, self._headers(emit.event)
                )
            published += self._producer.flush()
        except PermanentError as exc:
            self._producer.discard_pending()
            log.error(
                "pool.dead_letter_notice_refused",
                pool=self.handler.name,
                offset=item.source.offset,
                error=str(exc),
            )
            return published
        for emit in notices:
            metrics.EVENTS_OUT.labels(self.handler.name, self._registry.name(emit.topic)).inc()
        return published

    def _send_dead_letter(self, letter: DeadLetter) -> None:
        src: SourceRecord = letter.item.source
        headers = dead_letter_headers(src, letter.error, letter.attempts, self.handler.name)
        self._producer.send_raw(self._dlq, src.key, src.value, headers)
        if self._trace is not None:
            self._trace.failed(letter.item, letter.error)
        metrics.DEAD_LETTERS.labels(self.handler.name).inc()
        log.warning(
            "pool.dead_letter",
            pool=self.handler.name,
            topic=src.topic,
            partition=src.partition,
            offset=src.offset,
            error_class=type(letter.error).__name__,
            attempts=letter.attempts,
        )

    # -- commit / retry ----------------------------------------------------------------------

    def _commit(self, records: list[Any], only: set[TopicPartition] | None = None) -> None:
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            if only is not None and tp not in only:
                continue
            if tp not in offsets or r.offset + 1 > offsets[tp].offset:
                offsets[tp] = OffsetAndMetadata(r.offset + 1, "", -1)
        if not offsets:
            return
        try:
            self._consumer.commit(offsets)
            metrics.COMMITS.labels(self.handler.name).inc()
        except (CommitFailedError, KafkaError) as exc:
            # The group moved on; the new owner re-reads these records (at-least-once).
            log.warning("pool.commit_failed", pool=self.handler.name, error=str(exc))

    def _retry_later(self, records: list[Any], error: BaseException | None) -> None:
        """Leave the batch uncommitted, rewind to its first offsets and back off."""
        self._failures += 1
        metrics.BATCH_FAILURES.labels(self.handler.name).inc()
        assigned = self._consumer.assignment()
        first: dict[TopicPartition, int] = {}
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            first[tp] = min(first.get(tp, r.offset), r.offset)
        for tp, offset in first.items():
            if tp in assigned:
                self._consumer.seek(tp, offset)
        delay_s = self._backoff.delay_ms(min(self._failures, 16)) / 1000
        log.warning(
            "pool.batch_not_committed",
            pool=self.handler.name,
            error=f"{type(error).__name__}: {error}",
            failures=self._failures,
            retry_in_s=round(delay_s, 3),
        )
        self._sleep_alive(delay_s)

    # -- rebalance ---------------------------------------------------------------------------

    def on_revoked(self, revoked: list[TopicPartition]) -> None:
        """Finish the in-flight batch and commit it before the partitions are given up."""
        future = self._current
        if future is not None and self._current_records:
            done = future.result() if future.exception() is None else _Done(ok=False)
            if done.ok:
                self._commit(self._current_records)
                self._committed_early = True
        revoked_set = set(revoked)
        self._fetched = [
            r for r in self._fetched if TopicPartition(r.topic, r.partition) not in revoked_set
        ]
        log.info("pool.partitions_revoked", pool=self.handler.name, partitions=len(revoked))

    def _report(self) -> None:
        lag = 0
        for tp in self._consumer.assignment():
            high = self._consumer.highwater(tp)
            if high is None:
                continue
            try:
                behind = max(0, high - self._consumer.position(tp, timeout_ms=100))
            except KafkaError:
                continue
            metrics.CONSUMER_LAG.labels(self.handler.name, str(tp.partition)).set(behind)
            lag += behind
        if self._pressure is not None:
            self._pressure.report(lag, len(self._current_records))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: PoolRunner[Any]) -> None:
        self._runner = runner

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self._runner.on_revoked(list(revoked))

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("pool.partitions_assigned", pool=self._runner.handler.name, n=len(assigned))
