"""``ragstream bench bus``: latency and throughput of a two-hop echo pipeline on real Kafka.

Two echo pool processes (``python -m bench.echo``) form ``in -> hop1 -> mid -> hop2 -> out``.
A producer offers events at fixed rates for a fixed time while a consumer on ``out`` records,
per event: hop 1 latency (produce to hop 1's output), hop 2 latency (hop 1's output to hop 2's
output) and end to end (produce to consumed at the end). The maximum throughput is measured by
offering a burst as fast as the producer can and timing the drain. Everything runs once with
batching on and once off (``max_batch=1``).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from bench.echo import EchoEvent
from ragstream.settings import Settings
from replay.measures import percentiles
from topics.admin import ensure_topics, make_admin
from topics.consumer import make_consumer
from topics.producer import EventProducer, make_producer
from topics.registry import PhysicalTopic
from topics.serde import decode

console = Console(width=160)


@dataclass
class RunResult:
    """One offered rate (``offered_per_s=0`` is the max-throughput burst)."""

    mode: str
    offered_per_s: float
    sent: int
    received: int
    achieved_per_s: float
    hop1_ms: dict[str, float] = field(default_factory=dict)
    hop2_ms: dict[str, float] = field(default_factory=dict)
    end_to_end_ms: dict[str, float] = field(default_factory=dict)
    mean_batch: dict[str, float] = field(default_factory=dict)


class _Pipeline:
    """Topics and the two echo processes of one mode."""

    def __init__(self, settings: Settings, max_batch: int, max_wait_ms: int) -> None:
        run = uuid.uuid4().hex[:8]
        self.settings = settings
        self.topics = [f"bench-{run}.{n}" for n in ("in", "mid", "out")]
        admin = make_admin(settings.kafka)
        ensure_topics(admin, [PhysicalTopic(t, 3, {}) for t in self.topics])
        ensure_topics(admin, [PhysicalTopic(t + ".dlq", 1, {}) for t in self.topics[:2]])
        admin.close()
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable, "-m", "bench.echo",
                    "--input", src, "--output", dst, "--group", f"bench-{run}-{stage}",
                    "--stage", stage, "--max-batch", str(max_batch),
                    "--max-wait-ms", str(max_wait_ms),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for stage, src, dst in (
                ("hop1", self.topics[0], self.topics[1]),
                ("hop2", self.topics[1], self.topics[2]),
            )
        ]  # fmt: skip

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        admin = make_admin(self.settings.kafka)
        try:
            admin.delete_topics(self.topics + [t + ".dlq" for t in self.topics[:2]])
        finally:
            admin.close()


class _Collector(threading.Thread):
    """Consumes ``out`` and records per-event timings of events of the current run."""

    def __init__(self, settings: Settings, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = make_consumer(
            settings.kafka,
            topic,
            group=f"collector-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="latest",
            fetch_max_wait_ms=10,
        )
        self.lock = threading.Lock()
        self.samples: dict[str, list[tuple[float, float, float, int, int]]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                now = time.time_ns()
                for r in records:
                    e = decode(EchoEvent, r.value)
                    h1, h2 = e.trace[0], e.trace[1]
                    end1 = h1.started_at.timestamp() * 1e9 + h1.duration_ms * 1e6
                    end2 = h2.started_at.timestamp() * 1e9 + h2.duration_ms * 1e6
                    sample = (
                        (end1 - e.sent_at_ns) / 1e6,
                        (end2 - end1) / 1e6,
                        (now - e.sent_at_ns) / 1e6,
                        int(h1.detail.get("batch", 1)),
                        int(h2.detail.get("batch", 1)),
                    )
                    with self.lock:
                        self.samples.setdefault(e.payload, []).append(sample)
        self.consumer.close()

    def count(self, run_id: str) -> int:
        with self.lock:
            return len(self.samples.get(run_id, []))

    def take(self, run_id: str) -> list[tuple[float, float, float, int, int]]:
        with self.lock:
            return list(self.samples.get(run_id, []))


def _offer(producer: EventProducer, topic: str, run_id: str, rate: float, n: int) -> float:
    """Send ``n`` events at ``rate``/s (0: as fast as possible); return seconds taken."""
    start = time.perf_counter()
    for i in range(n):
        if rate:
            target = start + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        producer.send(
            topic, EchoEvent(tenant="bench", seq=i, sent_at_ns=time.time_ns(), payload=run_id)
        )
        if rate and i % 50 == 0:
            producer.raw.flush()
    producer.flush()
    return time.perf_counter() - start


def _measure(
    pipe: _Pipeline, col: _Collector, producer: EventProducer, *, mode: str, rate: float, n: int
) -> RunResult:
    run_id = uuid.uuid4().hex[:12]
    t0 = time.perf_counter()
    _offer(producer, pipe.topics[0], run_id, rate, n)
    deadline = time.perf_counter() + 60 + n / 200
    while col.count(run_id) < n and time.perf_counter() < deadline:
        time.sleep(0.02)
    elapsed = time.perf_counter() - t0
    samples = col.take(run_id)
    return RunResult(
        mode=mode,
        offered_per_s=rate,
        sent=n,
        received=len(samples),
        achieved_per_s=round(len(samples) / elapsed, 1),
        hop1_ms=percentiles([s[0] for s in samples]),
        hop2_ms=percentiles([s[1] for s in samples]),
        end_to_end_ms=percentiles([s[2] for s in samples]),
        mean_batch={
            "hop1": round(sum(s[3] for s in samples) / max(1, len(samples)), 1),
            "hop2": round(sum(s[4] for s in samples) / max(1, len(samples)), 1),
        },
    )


def _warm_up(pipe: _Pipeline, col: _Collector, producer: EventProducer) -> None:
    run_id = "warmup-" + uuid.uuid4().hex[:6]
    deadline = time.monotonic() + 120
    while col.count(run_id) == 0 and time.monotonic() < deadline:
        _offer(producer, pipe.topics[0], run_id, 0, 3)
        time.sleep(1.0)
    if col.count(run_id) == 0:
        raise RuntimeError("the echo pipeline produced nothing within 120 s")
    time.sleep(2.0)


def run_bus_bench(
    settings: Settings, rates: list[float], seconds: float, burst: int, max_batch: int
) -> list[RunResult]:
    """Run every rate and the burst in three modes; return the results.

    - ``batched``: ``max_batch`` events or 5 ms after the first, no wait when fewer than one
      more event is expected in it (the pools' policy, ``wait_min_arrivals`` 1);
    - ``greedy``: ``max_batch`` with ``max_wait_ms=0``: a batch is whatever the consumer has
      buffered, so an event never waits for companions; its hop latency is the bus's own
      overhead (produce with the pools' ``linger_ms``, broker, fetch, decode, commit);
    - ``unbatched``: one event per batch (a flush and a commit each).
    """
    results = []
    producer = EventProducer(make_producer(settings.kafka, linger_ms=1))
    modes = (("batched", max_batch, 5), ("greedy", max_batch, 0), ("unbatched", 1, 0))
    for mode, batch, wait in modes:
        pipe = _Pipeline(settings, batch, wait)
        col = _Collector(settings, pipe.topics[2])
        col.start()
        try:
            _warm_up(pipe, col, producer)
            for rate in rates:
                r = _measure(pipe, col, producer, mode=mode, rate=rate, n=int(rate * seconds))
                results.append(r)
                console.print(_row_text(r))
            r = _measure(pipe, col, producer, mode=mode, rate=0, n=burst)
            results.append(r)
            console.print(_row_text(r))
        finally:
            col.stop.set()
            col.join(timeout=5)
            pipe.close()
    producer.close()
    return results


def _row_text(r: RunResult) -> str:
    offered = f"{r.offered_per_s:g}/s" if r.offered_per_s else "burst"
    return (
        f"{r.mode:9} {offered:>8}: {r.received}/{r.sent} at {r.achieved_per_s}/s, "
        f"e2e p50 {r.end_to_end_ms.get('p50')} p99 {r.end_to_end_ms.get('p99')} ms"
    )


def render_table(results: list[RunResult]) -> Table:
    """A rich table of ``results``."""
    table = Table(title="bus: two-hop echo pipeline (latencies in ms)")
    for col in ("mode", "offered/s", "received", "achieved/s", "hop1 p50/p95/p99",
                "hop2 p50/p95/p99", "e2e p50/p95/p99", "mean batch h1/h2"):  # fmt: skip
        table.add_column(col)

    def trio(d: dict[str, float]) -> str:
        return "/".join(f"{d.get(k, float('nan')):.1f}" for k in ("p50", "p95", "p99"))

    for r in results:
        table.add_row(
            r.mode,
            f"{r.offered_per_s:g}" if r.offered_per_s else "max (burst)",
            f"{r.received}/{r.sent}",
            f"{r.achieved_per_s:g}",
            trio(r.hop1_ms),
            trio(r.hop2_ms),
            trio(r.end_to_end_ms),
            f"{r.mean_batch.get('hop1', 0):g}/{r.mean_batch.get('hop2', 0):g}",
        )
    return table
