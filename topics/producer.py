"""Producer factory and an event producer whose every failure surfaces as an error.

kafka-python reports some failures only through the returned future (a record over
``max_request_size`` comes back as an already-failed future, not an exception). The
:class:`EventProducer` keeps every future of the current batch and :meth:`EventProducer.flush`
raises if any of them failed, so the consumer runtime never commits offsets past a lost record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka import KafkaProducer
from kafka import errors as kafka_errors

from ragstream.errors import PermanentError, TransientError
from ragstream.settings import KafkaSettings
from ragstream.tracing import inject_headers
from topics.base import Event
from topics.serde import encode

Headers = list[tuple[str, bytes]]


class ProduceError(TransientError):
    """A record was not acknowledged by the broker (may succeed if retried)."""

    code = "PRODUCE_FAILED"


class RecordTooLargeError(PermanentError):
    """A record exceeds ``max_request_size``; retrying cannot help."""

    code = "RECORD_TOO_LARGE"


def make_producer(settings: KafkaSettings, **overrides: Any) -> KafkaProducer:
    """Build a kafka-python producer for durable, ordered delivery.

    ``acks=all`` and the idempotent producer (no duplicates from internal retries, order kept
    per partition), lz4 compression, and a bounded linger (``settings.linger_ms``).

    Args:
        settings: Kafka client settings.
        **overrides: any KafkaProducer config to override (e.g. ``max_request_size``).
    """
    config: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": settings.client_id,
        "acks": "all",
        "enable_idempotence": True,
        "compression_type": settings.compression_type,
        "linger_ms": settings.linger_ms,
        "max_request_size": settings.max_request_size,
        "request_timeout_ms": settings.request_timeout_ms,
        "retries": 2**31 - 1,
        "delivery_timeout_ms": settings.delivery_timeout_ms,
    }
    config.update(overrides)
    return KafkaProducer(**config)


class EventProducer:
    """Sends events and raw records; :meth:`flush` raises if any record of the batch failed."""

    def __init__(self, producer: KafkaProducer, flush_timeout_s: float = 60.0) -> None:
        self._producer = producer
        self._flush_timeout_s = flush_timeout_s
        self._pending: list[Any] = []

    @property
    def raw(self) -> KafkaProducer:
        """The underlying kafka-python producer."""
        return self._producer

    def send(self, topic: str, event: Event, headers: Headers | None = None) -> None:
        """Queue ``event`` for ``topic`` keyed by ``event.key()``.

        ``headers=None`` carries the current trace context (``traceparent``, when tracing is
        on); given headers are sent as they are.

        Raises:
            RecordTooLargeError: the encoded record exceeds ``max_request_size``.
            ProduceError: the record could not be queued (e.g. buffer full, no metadata).
        """
        if headers is None:
            headers = inject_headers()
        self.send_raw(topic, event.key(), encode(event), headers)

    def send_raw(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Headers | None = None
    ) -> None:
        """Queue raw bytes (used for dead letters and replays). Raises as :meth:`send`."""
        try:
            future = self._producer.send(topic, key=key, value=value, headers=headers or [])
        except kafka_errors.KafkaTimeoutError as exc:
            raise ProduceError(f"cannot queue record for {topic}: {exc}") from exc
        if future.is_done and future.failed():
            raise _translate(topic, future.exception)
        self._pending.append(future)

    def flush(self) -> int:
        """Block until every queued record is acknowledged; return how many were.

        Raises:
            RecordTooLargeError: a record was too large for the broker.
            ProduceError: a record was not acknowledged within the flush timeout.
        """
        pending, self._pending = self._pending, []
        try:
            self._producer.flush(timeout=self._flush_timeout_s)
        except kafka_errors.KafkaTimeoutError as exc:
            raise ProduceError(f"flush timed out after {self._flush_timeout_s}s: {exc}") from exc
        for future in pending:
            if not future.is_done:
                raise ProduceError("a record was still unacknowledged after flush")
            if future.failed():
                raise _translate(
                    future.topic if hasattr(future, "topic") else "?", future.exception
                )
        return len(pending)

    def discard_pending(self) -> None:
        """Forget the futures of the current batch (after a failure was handled)."""
        self._pending = []

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is buffered and close the producer."""
        self._producer.close(timeout=timeout_s)


def _translate(topic: str, exc: BaseException | None) -> Exception:
    if isinstance(exc, kafka_errors.MessageSizeTooLargeError):
        return RecordTooLargeError(f"record for {topic} is too large: {exc}")
    if isinstance(exc, kafka_errors.KafkaError) and not getattr(exc, "retriable", True):
        return PermanentError(f"record for {topic} rejected: {type(exc).__name__}: {exc}")
    return ProduceError(f"record for {topic} failed: {type(exc).__name__}: {exc}")


def send_all(producer: EventProducer, outputs: Sequence[tuple[str, Event]]) -> None:
    """Queue every ``(topic, event)`` pair of ``outputs``."""
    for topic, event in outputs:
        producer.send(topic, event)
