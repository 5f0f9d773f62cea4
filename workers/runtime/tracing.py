"""The spans of one batch: a span per consumed record, parented by the record's ``traceparent``
header, and (for a batch of several records) a batch span that links them.

The handler runs with the batch span current (the single record's span for a batch of one), so
batch-wide work (one ``_msearch`` for every query of the batch) is a child of it; per-request
work finds its request's span by record key (:func:`ragstream.tracing.span` with ``key``). Each
output record is parented by the span of the input record with the same key (every query-path
topic is keyed by ``request_id``), else by the batch span. Span and attribute names follow the
OpenTelemetry semantic conventions for messaging (``process <topic>``, ``messaging.*``).
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ragstream import tracing
from topics.base import Event
from topics.producer import Headers
from workers.runtime.process import Item


class BatchTrace:
    """The spans of one batch; :meth:`end` ends them all.

    Args:
        pool: the pool name (``ragstream.pool`` attribute).
        group: the consumer group (``messaging.consumer.group.name``).
        topic: the logical input topic (span names stay the same under any topic prefix).
        items: the batch's records.
    """

    def __init__(self, pool: str, group: str, topic: str, items: Sequence[Item]) -> None:
        self.by_key: dict[str, tracing.Context] = {}
        self._spans: dict[int, Span] = {}
        for item in items:
            src = item.source
            key = src.key.decode("utf-8", "replace") if src.key else None
            attributes: dict[str, str | int | float | bool] = {
                "messaging.system": "kafka",
                "messaging.operation.type": "process",
                "messaging.destination.name": src.topic,
                "messaging.destination.partition.id": str(src.partition),
                "messaging.kafka.offset": src.offset,
                "messaging.consumer.group.name": group,
                "ragstream.pool": pool,
            }
            if key is not None:
                attributes["messaging.kafka.message.key"] = key
            if item.event is not None:
                attributes["messaging.message.id"] = item.event.event_id
            span = tracing.start_span(
                f"process {topic}",
                context=tracing.extract_headers(src.headers),
                kind=SpanKind.CONSUMER,
                attributes=attributes,
            )
            self._spans[id(item)] = span
            self.by_key[key or (item.event.event_id if item.event else str(src.offset))] = (
                tracing.context_with(span)
            )
        spans = list(self._spans.values())
        self._batch: Span | None = None
        if len(spans) == 1:
            self.context = tracing.context_with(spans[0])
        else:
            self._batch = tracing.start_span(
                f"{pool} batch",
                context=tracing.Context(),
                kind=SpanKind.INTERNAL,
                attributes={
                    "messaging.batch.message_count": len(spans),
                    "messaging.destination.name": topic,
                    "ragstream.pool": pool,
                },
                links=[tracing.link(s) for s in spans],
            )
            self.context = tracing.context_with(self._batch)

    def headers_for(self, event: Event, headers: Headers | None = None) -> Headers:
        """``headers`` plus the ``traceparent`` of ``event``'s input span (same record key),
        else of the batch."""
        key = event.key()
        context = self.by_key.get(key.decode("utf-8", "replace")) if key else None
        return tracing.inject_headers(headers, context or self.context)

    def failed(self, item: Item, error: BaseException) -> None:
        """Mark ``item``'s span as failed with ``error`` (it is dead-lettered)."""
        span = self._spans.get(id(item))
        if span is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))

    def end(self, error: BaseException | None = None) -> None:
        """End every span; ``error``: the batch was not committed (it will run again)."""
        spans = [*self._spans.values(), *([self._batch] if self._batch else [])]
        for span in spans:
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, f"not committed: {error}"))
            span.end()
