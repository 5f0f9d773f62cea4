"""Open-loop load at one rate through running pools, and what came back.

A :class:`Collector` thread reads the result topics (the reranked topics in retrieval-only
mode, ``rag.responses`` always, ``rag.tokens`` in full mode; the evidence mode's answers
come on ``rag.responses``) and records, per request id, when
its result and its first token arrived and the result's trace. :func:`measure_rate` offers
Poisson arrivals for a fixed time, waits for the stragglers, and summarises.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import structlog

from bench.query.cpu import ProcessSet, attributed_ms, total
from bench.query.plans import FULL, RETRIEVAL
from bench.stats import (
    CpuSample,
    Slo,
    busy_cores,
    core_ms_per_request,
    poisson_arrivals,
    stage_samples,
)
from ragstream.settings import Settings
from replay.measures import percentiles, trace_end
from topics.base import Event, StageTiming
from topics.consumer import make_consumer
from topics.producer import EventProducer
from topics.queries import QueryRequest
from topics.registry import RERANKED_BY_TIER, RESPONSES, TOKENS, TopicRegistry
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from topics.serde import EventDecodeError, decode
from topics.tokens import AnswerToken

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Outcome:
    """What happened to one request (times are Unix seconds on this host's clock).

    ``status``: ``ok``; an error code (``DEADLINE_EXCEEDED``, ...); ``cached`` (answered from
    an answer cache, which the benchmark must never see); ``None`` while unanswered.
    """

    sent_at: float
    done_at: float | None = None
    first_token_at: float | None = None
    status: str | None = None
    trace: tuple[StageTiming, ...] = ()
    server_ttft_ms: float | None = None


class Collector(threading.Thread):
    """Consumes the result topics of one mode from the beginning (they are the run's own).

    Args:
        settings: the benchmark's settings (topic prefix applied).
        mode: ``retrieval`` (finished on ``rag.reranked.*``), ``full`` (on
            ``rag.responses``, first token on ``rag.tokens``) or ``evidence`` (on
            ``rag.responses``).
    """

    def __init__(self, settings: Settings, mode: str) -> None:
        super().__init__(daemon=True, name=f"collector-{mode}")
        registry = TopicRegistry(settings.kafka.topic_prefix)
        self.models: dict[str, type[Event]] = {registry.name(RESPONSES): QueryResponse}
        if mode == RETRIEVAL:
            for spec in RERANKED_BY_TIER.values():
                self.models[registry.name(spec)] = RerankedPassages
        elif mode == FULL:
            self.models[registry.name(TOKENS)] = AnswerToken
        self.consumer = make_consumer(
            settings.kafka,
            *self.models,
            group=None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=10,
        )
        self.lock = threading.Lock()
        self.outcomes: dict[str, Outcome] = {}
        self.stopping = threading.Event()

    def expect(self, request_id: str, sent_at: float) -> None:
        """Track ``request_id`` (call before producing it)."""
        with self.lock:
            self.outcomes[request_id] = Outcome(sent_at)

    def unanswered(self, ids: Sequence[str]) -> int:
        """How many of ``ids`` have no result yet."""
        with self.lock:
            return sum(1 for i in ids if self.outcomes[i].status is None)

    def take(self, ids: Sequence[str]) -> list[Outcome]:
        """The outcomes of ``ids`` (copies), in order."""
        with self.lock:
            return [replace(self.outcomes[i]) for i in ids]

    def run(self) -> None:
        while not self.stopping.is_set():
            polled = self.consumer.poll(timeout_ms=100)
            now = time.time()
            events = []
            for records in polled.values():
                for r in records:
                    try:
                        events.append(decode(self.models[r.topic], r.value))
                    except EventDecodeError as exc:  # a pool's bug: its request counts as lost
                        log.warning("bench.undecodable_result", topic=r.topic, error=str(exc))
            with self.lock:
                for event in events:
                    self._record(event, now)
        self.consumer.close()

    def _record(self, event: Event, now: float) -> None:
        out = self.outcomes.get(str(getattr(event, "request_id", "")))
        if out is None:
            return  # warm-up or another step's request
        if isinstance(event, AnswerToken):
            if out.first_token_at is None and event.text:
                out.first_token_at = now
            return
        if out.status is not None:
            return  # a duplicate (at-least-once); the first one counts
        out.done_at = now
        out.trace = event.trace
        if isinstance(event, QueryResponse):
            if event.error is not None:
                out.status = event.error.code.value
            elif any(t.stage == "cache" for t in event.trace):
                out.status = "cached"
            else:
                out.status = "ok"
                gen = event.trace[-1] if event.trace else None
                if gen is not None and "ttft_ms" in gen.detail:
                    out.server_ttft_ms = float(gen.detail["ttft_ms"])
        else:
            out.status = "ok"

    def close(self) -> None:
        """Stop consuming and close the consumer (also when the thread never started)."""
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=10)
        else:
            self.consumer.close()


@dataclass
class RateResult:
    """One offered rate of one mode. Latencies in ms, rates in requests/s.

    ``error_rate`` counts error responses, answers from a cache and requests never answered
    (``lost``) over ``sent``. ``achieved_per_s`` is successful results over the time from the
    first send to the last successful result. ``stages`` holds, per trace stage, the wait
    before it and its service time; ``delivery_ms`` is from the last stage's end to the
    result's arrival here. ``batch_mean`` is events per batch of each pool during the step
    (its Prometheus ``ragstream_batch_size`` histogram). ``sender_lag_ms`` is how late sends
    were against the Poisson schedule (open-loop fidelity). ``cpu_busy_cores`` is the
    machine's mean busy logical CPUs while the step was offered (every process: pools, Kafka,
    Elasticsearch, the LLM server, this load generator, and any other work on the host) and
    ``core_ms_per_request`` that CPU time over the requests sent. ``process_core_ms_per_request``
    counts only the processes that serve the load (the pools with their children, the
    services the mode uses less their idle background, this load generator;
    :mod:`bench.query.cpu`), from the first send until the last result or the drain's end,
    over the requests sent; ``core_ms_by_process`` splits it.
    """

    mode: str
    offered_per_s: float
    seconds: float
    sent: int
    ok: int
    lost: int
    errors: dict[str, int]
    error_rate: float
    achieved_per_s: float
    end_to_end_ms: dict[str, float]
    ttft_ms: dict[str, float] = field(default_factory=dict)
    server_ttft_ms: dict[str, float] = field(default_factory=dict)
    stages: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    delivery_ms: dict[str, float] = field(default_factory=dict)
    batch_mean: dict[str, float | None] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    sender_lag_ms: dict[str, float] = field(default_factory=dict)
    met_slo: bool = False
    cpu_busy_cores: float | None = None
    core_ms_per_request: float | None = None
    process_core_ms_per_request: float | None = None
    core_ms_by_process: dict[str, float] = field(default_factory=dict)


def offer(
    producer: EventProducer,
    topic: str,
    arrivals: Sequence[float],
    make: Callable[[], QueryRequest],
    collector: Collector,
) -> tuple[list[str], list[float]]:
    """Produce one request at each arrival time (s from now), never waiting for results.

    Returns:
        ``(request_ids, lateness_ms)``: ids in send order and how late each send was.
    """
    ids, late = [], []
    start = time.perf_counter()
    for t in arrivals:
        delay = start + t - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        late.append(max(0.0, (time.perf_counter() - start - t) * 1000))
        request = make()
        collector.expect(request.request_id, request.created_at.timestamp())
        producer.send(topic, request)
        ids.append(request.request_id)
    producer.flush()
    return ids, late


def _wait(
    collector: Collector, ids: Sequence[str], until: float, check: Callable[[], None]
) -> None:
    while collector.unanswered(ids) and time.monotonic() < until:
        check()
        time.sleep(0.1)


def summarise(
    mode: str,
    rate: float,
    seconds: float,
    outcomes: Sequence[Outcome],
    slo: Slo,
) -> RateResult:
    """A :class:`RateResult` (batch fields empty) from the outcomes of one step."""
    ok = [o for o in outcomes if o.status == "ok"]
    errors: dict[str, int] = {}
    for o in outcomes:
        if o.status not in (None, "ok"):
            errors[str(o.status)] = errors.get(str(o.status), 0) + 1
    lost = sum(1 for o in outcomes if o.status is None)
    error_rate = (len(outcomes) - len(ok)) / len(outcomes) if outcomes else 1.0
    e2e = [((o.done_at or 0) - o.sent_at) * 1000 for o in ok]
    first = min((o.sent_at for o in outcomes), default=0.0)
    last = max((o.done_at or 0 for o in ok), default=first)
    stages: dict[str, dict[str, list[float]]] = {}
    delivery = []
    for o in ok:
        sent = dt.datetime.fromtimestamp(o.sent_at, dt.UTC)
        for s in stage_samples(o.trace, sent):
            entry = stages.setdefault(s.stage, {"wait_ms": [], "service_ms": []})
            entry["wait_ms"].append(s.wait_ms)
            entry["service_ms"].append(s.service_ms)
        delivery.append((o.done_at or 0) * 1000 - trace_end(o.trace, sent).timestamp() * 1000)
    pct = percentiles(e2e)
    ttft = [(o.first_token_at - o.sent_at) * 1000 for o in ok if o.first_token_at is not None]
    return RateResult(
        mode=mode,
        offered_per_s=rate,
        seconds=seconds,
        sent=len(outcomes),
        ok=len(ok),
        lost=lost,
        errors=errors,
        error_rate=round(error_rate, 4),
        achieved_per_s=round(len(ok) / (last - first), 3) if last > first else 0.0,
        end_to_end_ms=pct,
        ttft_ms=percentiles(ttft),
        server_ttft_ms=percentiles([o.server_ttft_ms for o in ok if o.server_ttft_ms]),
        stages={k: {m: percentiles(v) for m, v in d.items()} for k, d in stages.items()},
        delivery_ms=percentiles(delivery),
        met_slo=slo.met(pct.get("p99"), error_rate),
    )


@dataclass
class LoadTarget:
    """Where and how to send: the producer, the prefixed queries topic, the collector, a
    request factory, a liveness check of the pools (raises if one died), their batch
    counters, and the processes whose CPU counts with the services' idle background
    (``None``: only the machine's CPU is measured)."""

    producer: EventProducer
    topic: str
    collector: Collector
    make: Callable[[], QueryRequest]
    check: Callable[[], None]
    batch_totals: Callable[[], dict[str, tuple[float, float]]]
    processes: ProcessSet | None = None
    idle_cores: dict[str, float] = field(default_factory=dict)


def measure_rate(
    target: LoadTarget,
    *,
    mode: str,
    rate: float,
    seconds: float,
    slo: Slo,
    drain_s: float,
    seed: int,
) -> RateResult:
    """Offer Poisson arrivals at ``rate``/s for ``seconds``, wait up to ``drain_s`` for the
    last results, and summarise the step (batch sizes from the pools' metrics)."""
    before = target.batch_totals()
    arrivals = poisson_arrivals(rate, seconds, random.Random(f"{seed}:{mode}:{rate}"))
    procs_start = target.processes.sample() if target.processes else None
    cpu_start, t0 = CpuSample.now(), time.monotonic()
    ids, late = offer(target.producer, target.topic, arrivals, target.make, target.collector)
    cores = busy_cores(cpu_start, CpuSample.now())
    offered_s = time.monotonic() - t0
    _wait(target.collector, ids, time.monotonic() + drain_s, target.check)
    by: dict[str, float] | None = None
    if target.processes is not None and procs_start is not None:
        by = attributed_ms(
            procs_start, target.processes.sample(), time.monotonic() - t0, target.idle_cores
        )
    after = target.batch_totals()
    result = summarise(mode, rate, seconds, target.collector.take(ids), slo)
    for pool, (events, batches) in after.items():
        d_events = events - before.get(pool, (0.0, 0.0))[0]
        d_batches = batches - before.get(pool, (0.0, 0.0))[1]
        result.batches[pool] = int(d_batches)
        result.batch_mean[pool] = round(d_events / d_batches, 2) if d_batches else None
    result.sender_lag_ms = percentiles(late)
    result.cpu_busy_cores = cores
    result.core_ms_per_request = core_ms_per_request(cores, offered_s, len(ids))
    if by is not None and ids:
        result.core_ms_by_process = {k: round(v / len(ids), 1) for k, v in by.items()}
        result.process_core_ms_per_request = round(total(by.values()) / len(ids), 1)
    return result


def warm_up(target: LoadTarget, timeout_s: float, burst: int) -> None:
    """Send one request and wait for its result while the pools load their models (their
    fresh consumer groups start from the earliest offset, so nothing sent early is missed),
    then ``burst`` requests at once and wait for all of them, so the first measured step
    meets warm pools and no warm-up request is still queued.

    Raises:
        RuntimeError: a warm-up request had no result within ``timeout_s``, or a pool died.
    """
    for n in (1, burst):
        ids, _ = offer(target.producer, target.topic, [0.0] * n, target.make, target.collector)
        _wait(target.collector, ids, time.monotonic() + timeout_s, target.check)
        if target.collector.unanswered(ids):
            raise RuntimeError(f"warm-up: no result within {timeout_s:.0f} s")


def request_factory(
    questions: Sequence[str],
    tenant: str,
    deadline_s: float,
    stream: bool,
    seed: int,
    *,
    route: Literal["evidence", "small", "large"] = "small",
) -> Callable[[], QueryRequest]:
    """A factory of requests: questions drawn at random (seeded), each made unique
    (:func:`bench.query.questions.unique_query`), with a deadline ``deadline_s`` ahead,
    forced to the answer tier ``route``.

    The LLM modes route to the ``small`` tier: they measure the LLM path as they did before
    the evidence tier existed (``retrieval`` finishes on ``rag.reranked.small``, ``full`` on
    the generated answer; the evidence stage still runs in the rerank pool, with a trace entry
    of its own). The ``evidence`` mode routes to the evidence tier (no LLM)."""
    from bench.query.questions import unique_query

    pool = list(questions)
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:6]
    counter = iter(range(1 << 62))

    def make() -> QueryRequest:
        now = dt.datetime.now(dt.UTC)
        return QueryRequest(
            tenant=tenant,
            query=unique_query(rng.choice(pool), run, next(counter)),
            deadline=now + dt.timedelta(seconds=deadline_s),
            created_at=now,
            stream=stream,
            route=route,
        )

    return make
