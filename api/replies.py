"""Route answers back to the process that asked: one reply consumer per process.

Every API process (and every Kafka client) runs one :class:`ReplyRouter`: a thread whose
consumer is *assigned* every partition of ``rag.responses`` and ``rag.tokens`` (no consumer
group, so processes never steal each other's partitions) and positioned at the end when it
starts. A waiter registers its ``request_id`` *before* the query event is produced, so its
answer cannot be missed; the router hands each record to every waiter registered for its
``request_id`` (a request's first stream and the streams that resume it, :mod:`api.streams`)
and drops the rest (another process asked for them). Unregistering, on answer
or on timeout, removes the only reference: a waiter that times out leaks nothing, and an answer
arriving after that is dropped here and still recorded by the delivery pool (poll
``GET /v1/queries/{id}``).

Cost: every process reads every answer; at one JSON decode per record this is cheap for tens of
API processes. A per-process reply topic would avoid it at the price of topic churn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kafka import KafkaConsumer, TopicPartition
from opentelemetry.trace import SpanKind

from ragstream import tracing
from ragstream.settings import Settings
from topics.consumer import make_consumer
from topics.registry import RESPONSES, TOKENS, TopicRegistry
from topics.responses import QueryResponse
from topics.serde import decode
from topics.tokens import AnswerToken

log = structlog.get_logger(__name__)

Reply = QueryResponse | AnswerToken


@dataclass(slots=True)
class Waiter:
    """A registered ``request_id``: ``deliver`` is called from the router thread with each
    response (and, if ``tokens``, each token) of that request."""

    request_id: str
    deliver: Callable[[Reply], None]
    tokens: bool = False


class ReplyRouter:
    """The per-process reply consumer.

    Args:
        settings: Kafka settings and the topic prefix come from here.
        poll_ms: poll timeout of the consumer thread, ms (also the shutdown latency).

    Raises:
        kafka.errors.KafkaError: from :meth:`start` when the broker cannot be reached.
    """

    def __init__(self, settings: Settings, *, poll_ms: int = 100) -> None:
        self._settings = settings
        self._registry = TopicRegistry(settings.kafka.topic_prefix)
        self._responses = self._registry.name(RESPONSES)
        self._tokens = self._registry.name(TOKENS)
        self._poll_ms = poll_ms
        self._waiters: dict[str, list[Waiter]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: KafkaConsumer | None = None
        self.dropped = 0

    @property
    def running(self) -> bool:
        """True while the consumer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, timeout_s: float = 15.0) -> None:
        """Assign all partitions, resolve the end offsets, then start the thread.

        The end offsets are resolved here (``position``), so every answer produced after
        ``start`` returns is seen.
        """
        if self.running:
            return
        kafka = self._settings.kafka
        consumer = make_consumer(
            kafka,
            group=None,
            client_id=f"{kafka.client_id}-replies",
            request_timeout_ms=kafka.request_timeout_ms,
        )
        try:
            parts = []
            for topic in (self._responses, self._tokens):
                ids = consumer.partitions_for_topic(topic)
                if not ids:
                    raise RuntimeError(f"topic {topic!r} does not exist (ragstream topics create)")
                parts += [TopicPartition(topic, p) for p in sorted(ids)]
            consumer.assign(parts)
            consumer.seek_to_end(*parts)
            for tp in parts:
                consumer.position(tp, timeout_ms=int(timeout_s * 1000))
        except Exception:
            consumer.close()
            raise
        self._consumer = consumer
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="reply-router", daemon=True)
        self._thread.start()
        log.info("replies.started", partitions=len(parts))

    def register(self, waiter: Waiter) -> None:
        """Start routing ``waiter.request_id``'s replies to ``waiter.deliver`` (a request may
        have several waiters: its first stream and the streams that resume it)."""
        with self._lock:
            self._waiters.setdefault(waiter.request_id, []).append(waiter)

    def unregister(self, request_id: str, waiter: Waiter | None = None) -> None:
        """Stop routing ``request_id`` to ``waiter`` (``None``: to any; idempotent)."""
        with self._lock:
            if waiter is None:
                self._waiters.pop(request_id, None)
                return
            left = [w for w in self._waiters.get(request_id, []) if w is not waiter]
            if left:
                self._waiters[request_id] = left
            else:
                self._waiters.pop(request_id, None)

    @property
    def waiting(self) -> int:
        """Registered waiters right now (a leak shows here)."""
        with self._lock:
            return sum(len(w) for w in self._waiters.values())

    def close(self) -> None:
        """Stop the thread and close the consumer."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._consumer is not None:
            self._consumer.close()
        self._thread = self._consumer = None

    def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self._stop.is_set():
            try:
                batches = consumer.poll(timeout_ms=self._poll_ms)
            except Exception as exc:  # keep routing; the consumer reconnects by itself
                log.warning("replies.poll_failed", error=str(exc))
                self._stop.wait(1.0)
                continue
            for tp, records in batches.items():
                for record in records:
                    try:
                        self._route(tp.topic, record)
                    except Exception as exc:  # one bad record must not stop the router
                        self.dropped += 1
                        log.warning("replies.route_failed", topic=tp.topic, error=str(exc))

    def _route(self, topic: str, record: Any) -> None:
        key = record.key.decode(errors="replace") if record.key else None
        with self._lock:
            found = list(self._waiters.get(key, ())) if key else []
        is_token = topic == self._tokens
        waiters = [w for w in found if w.tokens or not is_token]
        if not waiters:
            return
        try:
            reply: Reply = (
                decode(AnswerToken, record.value)
                if is_token
                else decode(QueryResponse, record.value)
            )
        except Exception as exc:  # a bad record must not stop the router
            self.dropped += 1
            log.warning("replies.undecodable", topic=topic, error=str(exc))
            return
        if is_token:
            for waiter in waiters:
                self._deliver(waiter, reply, key)
            return
        # The answer's last hop, in the trace of its query (parented by the record's header).
        with tracing.span_from_headers(
            "deliver rag.responses",
            record.headers,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": "process",
                "messaging.destination.name": topic,
                "messaging.kafka.message.key": key or "",
                "ragstream.pool": "api-replies",
            },
        ):
            for waiter in waiters:
                self._deliver(waiter, reply, key)

    @staticmethod
    def _deliver(waiter: Waiter, reply: Reply, key: str | None) -> None:
        try:
            waiter.deliver(reply)
        except Exception as exc:
            log.warning("replies.deliver_failed", request_id=key, error=str(exc))
