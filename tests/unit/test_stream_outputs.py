"""Outputs published while a batch runs (answer tokens) go through the runtime's producer, only
to declared topics, and their send results are checked with the batch's (no Kafka)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from bench.echo import EchoEvent
from ragstream.errors import ConfigurationError
from ragstream.settings import KafkaSettings
from topics.dlq import SourceRecord
from topics.producer import ProduceError
from topics.registry import TopicRegistry, TopicSpec
from topics.serde import encode
from workers.runtime.handler import Emit, Handler, Outcome
from workers.runtime.process import decode_items
from workers.runtime.runner import PoolRunner

IN = TopicSpec("in", EchoEvent, "event_id")
OUT = TopicSpec("out", EchoEvent, "event_id", consumed=False)
STREAM = TopicSpec("stream", EchoEvent, "event_id", consumed=False)
OTHER = TopicSpec("other", EchoEvent, "event_id", consumed=False)


class FakeProducer:
    """Records sends; ``fail`` makes the next flush raise, as a lost record does."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.pending = 0
        self.fail = False

    def send(self, topic: str, event: Any, headers: Any = None) -> None:
        self.sent.append((topic, event))
        self.pending += 1

    def send_raw(self, topic: str, key: Any, value: Any, headers: Any = None) -> None:
        self.send(topic, value)

    def flush(self) -> int:
        n, self.pending = self.pending, 0
        if self.fail:
            raise ProduceError("a record was not acknowledged")
        return n

    def discard_pending(self) -> None:
        self.pending = 0


def _runner(producer: FakeProducer, topic: TopicSpec = STREAM) -> PoolRunner[EchoEvent]:
    holder: dict[str, PoolRunner[EchoEvent]] = {}

    def fn(events: list[EchoEvent]) -> Sequence[Outcome]:
        for e in events:
            holder["runner"].emit_now(Emit(topic, e))  # e.g. a token, before the answer
        return [Emit(OUT, e) for e in events]

    handler = Handler(name="unit", input=IN, group="g", outputs=(OUT, STREAM), fn=fn)
    runner: PoolRunner[EchoEvent] = PoolRunner(
        handler,
        kafka=KafkaSettings(),
        producer=producer,  # type: ignore[arg-type]
        registry=TopicRegistry("p."),
        consumer=object(),
    )
    holder["runner"] = runner
    return runner


def _items(n: int) -> Any:
    records = [
        SourceRecord("p.in", 0, i, None, encode(EchoEvent(tenant="t", seq=i, sent_at_ns=0)), [])
        for i in range(n)
    ]
    return decode_items(EchoEvent, records)


def test_streamed_outputs_go_through_the_runtime_producer_before_the_batch_outputs() -> None:
    producer = FakeProducer()
    done = _runner(producer)._process_and_publish(_items(2))
    assert done.ok and done.published == 4
    assert [t for t, _ in producer.sent] == ["p.stream", "p.stream", "p.out", "p.out"]


def test_a_lost_streamed_record_leaves_the_batch_uncommitted() -> None:
    producer = FakeProducer()
    producer.fail = True
    done = _runner(producer)._process_and_publish(_items(1))
    assert not done.ok and isinstance(done.error, ProduceError)


def test_an_undeclared_streamed_topic_is_refused() -> None:
    runner = _runner(FakeProducer(), topic=OTHER)
    with pytest.raises(ConfigurationError, match="not among its outputs"):
        runner.emit_now(Emit(OTHER, EchoEvent(tenant="t", seq=0, sent_at_ns=0)))
