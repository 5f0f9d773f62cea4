"""An idle pool waits longer between polls (and writes its pressure less often), and drops
back to short waits on the first record (no Kafka, no Redis)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from bench.echo import EchoEvent
from ragstream.settings import KafkaSettings
from topics.registry import TopicRegistry, TopicSpec
from workers.runtime.handler import Emit, Handler, Outcome
from workers.runtime.policy import BatchPolicy
from workers.runtime.pressure import PressureReporter
from workers.runtime.runner import (
    IDLE_POLL_MAX_MS,
    IDLE_POLL_MIN_MS,
    PoolRunner,
    next_idle_wait_ms,
)

IN = TopicSpec("in", EchoEvent, "event_id")
OUT = TopicSpec("out", EchoEvent, "event_id", consumed=False)


class ScriptedConsumer:
    """``poll`` answers from a script (``None``: nothing) and records each ``timeout_ms``."""

    def __init__(self, script: list[int | None]) -> None:
        self.script = list(script)
        self.timeouts: list[int] = []

    def poll(self, timeout_ms: int, max_records: int) -> dict[str, list[Any]]:
        self.timeouts.append(timeout_ms)
        n = self.script.pop(0) if self.script else None
        if n is None:
            return {}
        return {"tp": [SimpleNamespace(offset=i) for i in range(min(n, max_records))]}


def _runner(consumer: ScriptedConsumer) -> PoolRunner[EchoEvent]:
    def fn(events: list[EchoEvent]) -> Sequence[Outcome]:
        return [Emit(OUT, e) for e in events]

    handler = Handler(
        name="unit", input=IN, group="g", outputs=(OUT,), fn=fn, batch=BatchPolicy(4, 0)
    )
    return PoolRunner(
        handler,
        kafka=KafkaSettings(),
        producer=object(),  # type: ignore[arg-type]
        registry=TopicRegistry("p."),
        consumer=consumer,
    )


def test_next_idle_wait_doubles_to_the_cap_and_resets_on_records() -> None:
    waits = [IDLE_POLL_MIN_MS]
    for _ in range(6):
        waits.append(next_idle_wait_ms(waits[-1], got_records=False))
    assert waits == [200, 400, 800, 1600, 2000, 2000, 2000]
    assert next_idle_wait_ms(IDLE_POLL_MAX_MS, got_records=True) == IDLE_POLL_MIN_MS


def test_fetch_backs_off_while_idle_and_waits_short_after_a_record() -> None:
    consumer = ScriptedConsumer([None, None, None, None, None, 2, None, None])
    runner = _runner(consumer)
    got = [len(runner._fetch()) for _ in range(7)]
    # six first-record waits: idle back-off, a record (the batch window of 0 ms ends the
    # batch without another poll), then short again
    assert got == [0, 0, 0, 0, 0, 2, 0]
    assert consumer.timeouts == [200, 400, 800, 1600, 2000, 2000, 200]


class FakeRedis:
    """Counts pipelined writes."""

    def __init__(self) -> None:
        self.writes = 0

    def pipeline(self, transaction: bool = True) -> FakeRedis:
        return self

    def hset(self, *args: Any) -> None:
        self.writes += 1

    def expire(self, *args: Any) -> None:
        return None

    def execute(self) -> None:
        return None


def test_pressure_rewrites_unchanged_numbers_only_every_refresh() -> None:
    reporter = PressureReporter(FakeRedis(), "pool", "m", interval_s=1.0, refresh_s=5.0)  # type: ignore[arg-type]
    assert reporter.due(0, 0, now=100.0)  # never written
    reporter._last, reporter._last_value = 100.0, (0, 0)
    assert not reporter.due(0, 0, now=101.0)  # unchanged, idle: wait for the refresh
    assert not reporter.due(0, 0, now=104.9)
    assert reporter.due(0, 0, now=105.0)
    assert not reporter.due(7, 0, now=100.5)  # a change still waits interval_s
    assert reporter.due(7, 0, now=101.0)
    assert reporter.due(0, 1, now=101.0)


def test_pressure_report_writes_once_per_round_trip() -> None:
    client = FakeRedis()
    reporter = PressureReporter(client, "pool", "m", interval_s=0.0, refresh_s=60.0)  # type: ignore[arg-type]
    for _ in range(5):
        reporter.report(3, 0)
    assert client.writes == 1
    reporter.report(4, 0)
    reporter.report(4, 0, force=True)
    assert client.writes == 3
