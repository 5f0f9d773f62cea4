"""Pure statistics of the load benchmarks: percentiles, Poisson arrivals, trace stages, SLO."""

from __future__ import annotations

import datetime as dt
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass

from topics.base import StageTiming

#: The percentiles every latency distribution reports.
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max of ``values`` by the nearest-rank method, rounded to 0.01.

    The q-quantile is the smallest value with at least ``ceil(q * n)`` values at or below it
    (nearest rank; Hyndman & Fan 1996, definition 1), so p99 of fewer than 100 values is the
    maximum. Returns ``{}`` for no values.
    """
    if not values:
        return {}
    s = sorted(values)
    n = len(s)
    out = {name: round(s[max(0, math.ceil(q * n - 1e-9) - 1)], 2) for name, q in QUANTILES}
    out["max"] = round(s[-1], 2)
    return out


def poisson_arrivals(rate_per_s: float, seconds: float, rng: random.Random) -> list[float]:
    """Send times of an open-loop Poisson process, in seconds from its start.

    Inter-arrival gaps are exponential with mean ``1 / rate_per_s`` (``rng.expovariate``), so
    arrivals are independent of how fast the system answers. Every time is in
    ``(0, seconds)``; the expected count is ``rate_per_s * seconds``.

    Raises:
        ValueError: ``rate_per_s`` or ``seconds`` is not positive.
    """
    if rate_per_s <= 0 or seconds <= 0:
        raise ValueError("rate_per_s and seconds must be positive")
    out: list[float] = []
    t = rng.expovariate(rate_per_s)
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate_per_s)
    return out


@dataclass(frozen=True, slots=True)
class StageSample:
    """One stage of one request, in ms.

    Attributes:
        stage: the stage name in the trace (``retrieval``, ``rerank``, ``generation-small``).
        wait_ms: from the end of the previous stage (or the send, for the first) to this
            stage's start: publish and flush, the Kafka hop, the batching wait and any queue.
        service_ms: the stage's own processing time (its whole batch's, shared by the batch).
    """

    stage: str
    wait_ms: float
    service_ms: float


def stage_samples(trace: Sequence[StageTiming], sent_at: dt.datetime) -> list[StageSample]:
    """Split a response's ``trace`` into per-stage wait and service times.

    Args:
        trace: the stages in order, each with a UTC ``started_at`` and a ``duration_ms``.
        sent_at: when the request was produced (UTC, the same host clock as the pools).
    """
    out = []
    previous_end = sent_at
    for t in trace:
        wait = (t.started_at - previous_end).total_seconds() * 1000
        out.append(StageSample(t.stage, round(wait, 3), t.duration_ms))
        previous_end = t.started_at + dt.timedelta(milliseconds=t.duration_ms)
    return out


def trace_end(trace: Sequence[StageTiming], sent_at: dt.datetime) -> dt.datetime:
    """When the last stage of ``trace`` finished (``sent_at`` for an empty trace)."""
    if not trace:
        return sent_at
    last = trace[-1]
    return last.started_at + dt.timedelta(milliseconds=last.duration_ms)


@dataclass(frozen=True, slots=True)
class Slo:
    """What "sustainable" means: p99 end-to-end latency at most ``p99_ms`` (ms) and fewer
    than ``max_error_rate`` of the requests failed or unanswered (the issue asks < 1%)."""

    p99_ms: float
    max_error_rate: float = 0.01

    def met(self, p99_ms: float | None, error_rate: float) -> bool:
        """Whether a run with this p99 (``None``: nothing completed) and error rate meets it."""
        return p99_ms is not None and p99_ms <= self.p99_ms and error_rate < self.max_error_rate


def max_sustainable_rate(runs: Sequence[tuple[float, bool]]) -> float:
    """The highest offered rate (requests/s) whose run met the SLO; 0.0 if none did.

    Args:
        runs: ``(offered_per_s, met_slo)`` per measured rate, in any order. A failure at a
            lower rate does not hide a pass at a higher one: every rate's verdict is reported
            beside this number.
    """
    passed = [rate for rate, ok in runs if ok]
    return max(passed) if passed else 0.0


def consecutive_failures(verdicts: Sequence[bool]) -> int:
    """How many of the last ``verdicts`` in a row are failures."""
    n = 0
    for ok in reversed(verdicts):
        if ok:
            break
        n += 1
    return n


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean rounded to 0.01, ``None`` for no values."""
    return round(sum(values) / len(values), 2) if values else None


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU time of the whole machine (all logical CPUs), in clock ticks, from the
    first line of ``/proc/stat`` (proc(5)): ``busy`` is every state but idle and iowait."""

    busy: int
    total: int

    @classmethod
    def now(cls, stat: str = "/proc/stat") -> CpuSample | None:
        """The current counters, or ``None`` where ``/proc/stat`` does not exist."""
        try:
            with open(stat, encoding="ascii") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        total = sum(fields)
        return cls(busy=total - fields[3] - fields[4], total=total)


def busy_cores(
    start: CpuSample | None, end: CpuSample | None, cpus: int | None = None
) -> float | None:
    """Mean busy logical CPUs of the machine between two samples (every process counts: the
    pools, Kafka, Elasticsearch, the LLM server and the load generator); ``cpus`` defaults to
    this machine's; ``None`` if either sample is missing or no time passed."""
    if start is None or end is None or end.total <= start.total:
        return None
    cpus = cpus or os.cpu_count() or 1
    return round(cpus * (end.busy - start.busy) / (end.total - start.total), 2)


def core_ms_per_request(cores: float | None, seconds: float, requests: int) -> float | None:
    """Machine CPU time per request in core-milliseconds: ``cores * seconds / requests``."""
    if cores is None or requests <= 0:
        return None
    return round(cores * seconds * 1000 / requests, 1)
