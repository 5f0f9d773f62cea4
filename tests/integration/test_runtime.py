"""The consumer runtime on the real broker: batching, at-least-once, DLQ, rebalance, shutdown."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from bench.echo import EchoEvent, echo_handler, echo_topic
from ragstream.errors import TransientError
from ragstream.retry import RetryPolicy
from ragstream.settings import PoolSettings, Settings
from tests.integration.kafkakit import (
    committed_total,
    consume_all,
    create_topics,
    produce_echo,
    produce_raw,
    spawn_echo,
    wait_for,
)
from topics.dlq import dead_letter_context
from topics.dlq_replay import replay
from topics.producer import EventProducer, ProduceError, make_producer
from topics.registry import TopicRegistry
from topics.serde import decode
from workers.runtime.handler import Emit, Handler, Outcome
from workers.runtime.policy import BatchPolicy
from workers.runtime.pressure import PressureReporter, read_pressure
from workers.runtime.runner import PoolRunner

Names = Callable[[str], str]


@dataclass
class Pipe:
    src: str
    dst: str
    group: str
    calls: list[tuple[float, int]] = field(default_factory=list)


@pytest.fixture
def pipe(settings: Settings, unique_name: Names) -> Iterator[Pipe]:
    p = Pipe(unique_name("in"), unique_name("out"), unique_name("group"))
    create_topics(settings, [p.src, p.dst, p.src + ".dlq"])
    yield p


def _handler(
    p: Pipe,
    batch: BatchPolicy,
    fn: Callable[[list[EchoEvent]], Sequence[Outcome]] | None = None,
    retry: RetryPolicy | None = None,
) -> Handler[EchoEvent]:
    src, dst = echo_topic(p.src), echo_topic(p.dst)

    def echo(events: list[EchoEvent]) -> Sequence[Outcome]:
        p.calls.append((time.time(), len(events)))
        return [Emit(dst, e) for e in events]

    return Handler(
        name="itest",
        input=src,
        group=p.group,
        outputs=(dst,),
        fn=fn or echo,
        batch=batch,
        retry=retry or RetryPolicy(max_attempts=2, base_ms=10, cap_ms=50),
    )


def _start(
    settings: Settings, handler: Handler[EchoEvent], producer: EventProducer | None = None
) -> tuple[PoolRunner[EchoEvent], threading.Thread]:
    runner: PoolRunner[EchoEvent] = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=producer or EventProducer(make_producer(settings.kafka)),
        registry=TopicRegistry(""),
        failure_backoff=RetryPolicy(max_attempts=1000, base_ms=50, cap_ms=200),
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    return runner, thread


def _stop(runner: PoolRunner[EchoEvent], thread: threading.Thread) -> None:
    runner.stop()
    thread.join(timeout=60)
    assert not thread.is_alive()


def _ids(records: list[object]) -> set[str]:
    return {decode(EchoEvent, r.value).event_id for r in records}  # type: ignore[attr-defined]


def test_burst_closes_batches_at_max_batch(settings: Settings, pipe: Pipe) -> None:
    produce_echo(settings, pipe.src, [f"e{i}" for i in range(200)])
    runner, thread = _start(settings, _handler(pipe, BatchPolicy(max_batch=32, max_wait_ms=3000)))
    assert wait_for(lambda: sum(n for _, n in pipe.calls) >= 200, 60)
    _stop(runner, thread)
    sizes = [n for _, n in pipe.calls]
    assert sum(sizes) == 200
    assert max(sizes) == 32
    # Every batch but the partial tail ones is full: far fewer calls than events.
    assert sizes.count(32) >= 5 and len(sizes) <= 10
    hist = REGISTRY.get_sample_value("ragstream_batch_size_count", {"pool": "itest"})
    assert hist is not None and hist >= len(sizes)


def test_slow_arrivals_close_batches_at_max_wait(settings: Settings, pipe: Pipe) -> None:
    policy = BatchPolicy(max_batch=1000, max_wait_ms=400, wait_min_arrivals=0)  # always wait
    runner, thread = _start(settings, _handler(pipe, policy))
    time.sleep(3)  # let the consumer join the group
    sent_at = []
    for i in range(12):  # one event every 100 ms for 1.2 s
        sent_at.append(time.time())
        produce_echo(settings, pipe.src, [f"slow{i}"])
        time.sleep(0.1)
    assert wait_for(lambda: sum(n for _, n in pipe.calls) >= 12, 30)
    _stop(runner, thread)
    sizes = [n for _, n in pipe.calls]
    assert sum(sizes) == 12
    # Neither one batch per event nor one batch for all: about one batch per max_wait_ms of the
    # time the sends took (a busy machine stretches the 1.2 s of sends, so count from them).
    span_s = sent_at[-1] - sent_at[0]
    assert 2 <= len(sizes) <= max(6, math.ceil(span_s / 0.4) + 2) < 12, (sizes, span_s)
    first_call = pipe.calls[0][0]
    assert first_call - sent_at[0] >= 0.35  # the batch waited ~max_wait_ms for company
    assert first_call - sent_at[0] < 2.0


def test_sparse_arrivals_are_not_held_for_company(settings: Settings, pipe: Pipe) -> None:
    # One event every 600 ms with a 400 ms wait: about 0.7 more expected in a wait, under the
    # default wait_min_arrivals of 1, so no batch waits for company (issue 37: at one question
    # at a time each pool's wait was pure latency).
    runner, thread = _start(settings, _handler(pipe, BatchPolicy(max_batch=1000, max_wait_ms=400)))
    time.sleep(3)  # let the consumer join the group
    sent_at = []
    for i in range(6):
        sent_at.append(time.time())
        produce_echo(settings, pipe.src, [f"sparse{i}"])
        time.sleep(0.6)
    assert wait_for(lambda: sum(n for _, n in pipe.calls) >= 6, 30)
    _stop(runner, thread)
    assert [n for _, n in pipe.calls] == [1] * 6
    waits = sorted(call - sent for (call, _), sent in zip(pipe.calls, sent_at, strict=True))
    assert waits[len(waits) // 2] < 0.3, waits  # the median event was not held the 400 ms


def test_offset_not_committed_when_handler_fails(settings: Settings, pipe: Pipe) -> None:
    produce_echo(settings, pipe.src, [f"e{i}" for i in range(10)])
    attempts: list[int] = []

    def down(events: list[EchoEvent]) -> Sequence[Outcome]:
        attempts.append(len(events))
        raise TransientError("backend down")

    runner, thread = _start(settings, _handler(pipe, BatchPolicy(10, 50), fn=down))
    assert wait_for(lambda: len(attempts) >= 8, 30)
    _stop(runner, thread)
    assert committed_total(settings, pipe.group, pipe.src) == 0
    dlq = consume_all(settings, pipe.src + ".dlq", lambda r: False, timeout_s=2)
    assert dlq == []  # an outage is not poison: nothing dead-lettered
    # The backend is back: the same group processes everything and commits.
    runner, thread = _start(settings, _handler(pipe, BatchPolicy(10, 50)))
    assert wait_for(lambda: committed_total(settings, pipe.group, pipe.src) == 10, 30)
    _stop(runner, thread)
    out = consume_all(settings, pipe.dst, lambda r: len(r) >= 10, timeout_s=20)
    assert len(_ids(out)) == 10


class _FailingFlush(EventProducer):
    def __init__(self, inner: EventProducer) -> None:
        super().__init__(inner.raw)
        self.failures = 0

    def flush(self) -> int:
        self.failures += 1
        self.discard_pending()
        raise ProduceError("broker did not acknowledge")


def test_offset_not_committed_when_output_produce_fails(settings: Settings, pipe: Pipe) -> None:
    produce_echo(settings, pipe.src, [f"e{i}" for i in range(5)])
    producer = _FailingFlush(EventProducer(make_producer(settings.kafka)))
    runner, thread = _start(settings, _handler(pipe, BatchPolicy(5, 50)), producer)
    assert wait_for(lambda: producer.failures >= 3, 30)
    _stop(runner, thread)
    assert committed_total(settings, pipe.group, pipe.src) == 0


def test_poison_event_goes_to_dlq_with_context_and_next_events_flow(
    settings: Settings, pipe: Pipe
) -> None:
    pool = PoolSettings(max_batch=10, max_wait_ms=100, retry_base_ms=10)
    handler = echo_handler(echo_topic(pipe.src), echo_topic(pipe.dst), pipe.group, pool)
    produce_echo(settings, pipe.src, ["ok0", "poison", "ok2"])
    produce_raw(settings, pipe.src, [b"\x00 not an event"])
    produce_echo(settings, pipe.src, ["ok-after"])
    runner, thread = _start(settings, handler)
    out = consume_all(settings, pipe.dst, lambda r: len(r) >= 3, timeout_s=30)
    dlq = consume_all(settings, pipe.src + ".dlq", lambda r: len(r) >= 2, timeout_s=30)
    assert wait_for(lambda: committed_total(settings, pipe.group, pipe.src) == 5, 30)
    _stop(runner, thread)
    assert sorted(decode(EchoEvent, r.value).payload for r in out) == ["ok-after", "ok0", "ok2"]
    assert len(dlq) == 2
    contexts = [dead_letter_context(list(r.headers)) for r in dlq]
    by_class = {
        c["error.class"].rsplit(".", 1)[-1]: (c, r) for c, r in zip(contexts, dlq, strict=True)
    }
    assert set(by_class) == {"PermanentError", "UndecodableEventError"}
    poison_ctx, poison_rec = by_class["PermanentError"]
    assert poison_ctx["source.topic"] == pipe.src
    assert poison_ctx["attempts"] == "1" and "poison" in poison_ctx["error.message"]
    assert int(poison_ctx["source.offset"]) >= 0 and poison_ctx["pool"] == "echo"
    assert decode(EchoEvent, poison_rec.value).payload == "poison"  # original bytes kept
    _, raw_rec = by_class["UndecodableEventError"]
    assert raw_rec.value == b"\x00 not an event"

    # Replay re-publishes the original bytes to the source topic, without dlq.* headers.
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=settings.kafka.bootstrap_servers,
        group_id=pipe.group + "-replay",
        enable_auto_commit=False,
    )
    producer = EventProducer(make_producer(settings.kafka))
    assert replay(consumer, producer, pipe.src + ".dlq").replayed == 2
    consumer.close()
    src = consume_all(settings, pipe.src, lambda r: len(r) >= 7, timeout_s=20)
    values = [r.value for r in src]
    assert all(values.count(r.value) == 2 for r in dlq)  # the original and its replay
    assert all(not any(k.startswith("dlq.") for k, _ in r.headers) for r in src)


def test_event_whose_output_is_too_large_is_dead_lettered_with_its_notice(
    settings: Settings, pipe: Pipe
) -> None:
    """Issue 15, item 2: an output over the broker's limit dead-letters its input, and the
    handler's ``on_dead_letter`` outputs (a query's typed error response) are published, so a
    waiting caller is told; the batch-mates' outputs go out and every offset is committed."""
    dst = echo_topic(pipe.dst)

    def inflate(events: list[EchoEvent]) -> Sequence[Outcome]:
        big = os.urandom(3000).hex()  # 6 kB that lz4 cannot shrink, over the 4 kB limit
        return [
            Emit(dst, e.model_copy(update={"payload": big if e.payload == "huge" else e.payload}))
            for e in events
        ]

    def notice(event: EchoEvent, error: BaseException) -> Sequence[Emit]:
        payload = f"dead:{event.seq}:{type(error).__name__}"
        return [
            Emit(
                dst, event.model_copy(update={"event_id": "n" + event.event_id, "payload": payload})
            )
        ]

    handler = dataclasses.replace(
        _handler(pipe, BatchPolicy(10, 200), fn=inflate), on_dead_letter=notice
    )
    produce_echo(settings, pipe.src, ["ok0", "huge", "ok2"])
    producer = EventProducer(make_producer(settings.kafka, max_request_size=4096))
    runner, thread = _start(settings, handler, producer)
    expected = {"dead:1:RecordTooLargeError", "ok0", "ok2"}

    def payloads(records: list[Any]) -> set[str]:
        return {decode(EchoEvent, r.value).payload for r in records}

    # At-least-once: ok0, sent before the refusal, may be published twice (same event_id).
    out = consume_all(settings, pipe.dst, lambda r: payloads(r) >= expected, timeout_s=30)
    dlq = consume_all(settings, pipe.src + ".dlq", lambda r: len(r) >= 1, timeout_s=10)
    assert wait_for(lambda: committed_total(settings, pipe.group, pipe.src) == 3, 30)
    _stop(runner, thread)
    assert payloads(out) == expected
    assert [decode(EchoEvent, r.value).payload for r in dlq] == ["huge"]
    assert dead_letter_context(list(dlq[0].headers))["error.class"].endswith("RecordTooLargeError")


def test_sigkill_mid_batch_loses_nothing(settings: Settings, pipe: Pipe, tmp_path: Path) -> None:
    events = produce_echo(settings, pipe.src, [f"e{i}" for i in range(120)])
    args = ("--max-batch", "10", "--max-wait-ms", "20", "--delay-ms", "150")
    with (tmp_path / "w1.log").open("wb") as log:
        worker = spawn_echo(pipe.src, pipe.dst, pipe.group, *args, log=log)
        assert wait_for(
            lambda: len(consume_all(settings, pipe.dst, lambda r: len(r) >= 20, 2)) >= 20, 60
        )
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    partial = consume_all(settings, pipe.dst, lambda r: False, timeout_s=2)
    assert len(_ids(partial)) < 120
    with (tmp_path / "w2.log").open("wb") as log:
        worker = spawn_echo(pipe.src, pipe.dst, pipe.group, *args, log=log)
        try:
            out = consume_all(settings, pipe.dst, lambda r: len(_ids(r)) >= 120, timeout_s=120)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    assert {decode(EchoEvent, r.value).seq for r in out} == {e.seq for e in events}
    assert len(_ids(out)) == 120  # duplicates, if any, carry the same id


def test_two_processes_share_partitions_and_one_leaving_loses_nothing(
    settings: Settings, pipe: Pipe, tmp_path: Path
) -> None:
    args = ("--max-batch", "5", "--max-wait-ms", "10", "--delay-ms", "100")
    paths = [tmp_path / f"w{i}.log" for i in range(2)]
    logs = [p.open("wb") for p in paths]
    a = spawn_echo(pipe.src, pipe.dst, pipe.group, *args, log=logs[0])
    b = spawn_echo(pipe.src, pipe.dst, pipe.group, *args, log=logs[1])

    def assignments(path: Path) -> list[int]:
        return [int(m) for m in re.findall(r"partitions_assigned\s+n=(\d+)", path.read_text())]

    try:
        # Both members hold partitions (3 partitions split 2 + 1) before the stream starts.
        assert wait_for(lambda: all(assignments(p) and assignments(p)[-1] > 0 for p in paths), 60)
        events = produce_echo(settings, pipe.src, [f"e{i}" for i in range(150)])
        assert wait_for(
            lambda: len(consume_all(settings, pipe.dst, lambda r: len(r) >= 40, 2)) >= 40, 60
        )
        a.send_signal(signal.SIGTERM)  # leaves the group mid-stream
        assert a.wait(timeout=60) == 0
        out = consume_all(settings, pipe.dst, lambda r: len(_ids(r)) >= 150, timeout_s=120)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
        for f in logs:
            f.close()
    assert {decode(EchoEvent, r.value).seq for r in out} == {e.seq for e in events}
    assert len(_ids(out)) == 150
    assert assignments(paths[1])[-1] == 3  # the survivor took over every partition


def test_graceful_shutdown_commits_what_was_finished(
    settings: Settings, pipe: Pipe, tmp_path: Path
) -> None:
    produce_echo(settings, pipe.src, [f"e{i}" for i in range(30)])
    with (tmp_path / "w.log").open("wb") as log:
        worker = spawn_echo(pipe.src, pipe.dst, pipe.group, "--max-batch", "10", log=log)
        assert wait_for(
            lambda: len(consume_all(settings, pipe.dst, lambda r: len(r) >= 30, 2)) >= 30, 60
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
    assert committed_total(settings, pipe.group, pipe.src) == 30
    assert "pool.stopped" in (tmp_path / "w.log").read_text()


def test_pressure_signal_reports_lag(settings: Settings, pipe: Pipe, unique_name: Names) -> None:
    produce_echo(settings, pipe.src, [f"e{i}" for i in range(60)])
    client = redis.Redis.from_url(settings.redis.url)
    pool_name = unique_name("pool")

    def slow(events: list[EchoEvent]) -> Sequence[Outcome]:
        time.sleep(0.3)
        return [Emit(echo_topic(pipe.dst), e) for e in events]

    runner, thread = _start(settings, _handler(pipe, BatchPolicy(5, 10), fn=slow))
    runner.attach_pressure(PressureReporter(client, pool_name, runner.member, interval_s=0.1))
    seen = []
    assert wait_for(lambda: seen.append(read_pressure(client, pool_name).lag) or max(seen) > 0, 30)
    _stop(runner, thread)
    assert read_pressure(client, pool_name).members == 0  # cleared on shutdown
    client.close()


def test_batch_slower_than_max_poll_interval_causes_no_rebalance(
    settings: Settings, pipe: Pipe
) -> None:
    """A batch taking twice ``max.poll.interval.ms`` keeps its membership: one call, one commit."""
    kafka = settings.kafka.model_copy(
        update={"max_poll_interval_ms": 3000, "session_timeout_ms": 6000}
    )
    slow_settings = settings.model_copy(update={"kafka": kafka})
    produce_echo(settings, pipe.src, [f"e{i}" for i in range(6)])

    def slow(events: list[EchoEvent]) -> Sequence[Outcome]:
        pipe.calls.append((time.time(), len(events)))
        time.sleep(6.5)
        return [Emit(echo_topic(pipe.dst), e) for e in events]

    runner, thread = _start(slow_settings, _handler(pipe, BatchPolicy(6, 2000), fn=slow))
    assert wait_for(lambda: committed_total(settings, pipe.group, pipe.src) == 6, 60)
    time.sleep(2)
    _stop(runner, thread)
    assert [n for _, n in pipe.calls] == [6]  # processed once: never re-delivered
    out = consume_all(settings, pipe.dst, lambda r: len(r) >= 6, timeout_s=20)
    assert len(out) == 6
