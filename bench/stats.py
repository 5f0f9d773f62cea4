"""Pure statistics of the load benchmarks: Poisson arrivals, trace stages, SLO, CPU.

The nearest-rank percentiles and a trace's end live in :mod:`replay.measures`, which the shadow
replay's report (a product command) uses too.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from topics.base import StageTiming


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


def _three_digits(x: float) -> float:
    return float(f"{x:.3g}")


def bracket(runs: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """``(lo, hi)``: the lowest offered rate that missed the SLO (``hi``) and the highest
    rate below it that met it (``lo``); either is ``None`` when no such run exists.

    A pass above the lowest failure (noise on a shared machine) is not counted as
    sustainable: every rate from ``lo`` down was seen to meet the SLO where it was tried.
    """
    failed = [rate for rate, ok in runs if not ok]
    hi = min(failed) if failed else None
    passed = [rate for rate, ok in runs if ok and (hi is None or rate < hi)]
    return (max(passed) if passed else None), hi


@dataclass(frozen=True, slots=True)
class RateSearch:
    """Step then bisect: the highest offered rate meeting an SLO, in few short steps.

    Rates rise from ``start_per_s`` by ``factor`` until one misses the SLO (at most
    ``max_steps`` steps; if the first misses, they fall by ``factor`` until one meets it or
    drops under ``min_per_s``); then the bracket ``(lo, hi)`` of :func:`bracket` is bisected
    at its midpoint ``bisections`` times, or until ``hi - lo <= resolution * lo``. Rates are
    rounded to three significant digits. Latency against offered load is monotone only up to
    noise, so the search needs at least one failure to bound the answer; a search whose every
    step met the SLO reports its top rate as a lower bound (:func:`next_rate` stops).

    Raises:
        ValueError: a non-positive start or minimum, ``factor <= 1``, ``max_steps < 1`` or
            ``bisections < 0``.
    """

    start_per_s: float
    factor: float = 2.0
    max_steps: int = 6
    bisections: int = 3
    resolution: float = 0.05
    min_per_s: float = 0.05

    def __post_init__(self) -> None:
        if self.start_per_s <= 0 or self.min_per_s <= 0 or self.factor <= 1:
            raise ValueError(f"start, minimum must be > 0 and factor > 1: {self}")
        if self.max_steps < 1 or self.bisections < 0:
            raise ValueError(f"max_steps must be >= 1 and bisections >= 0: {self}")


def next_rate(search: RateSearch, runs: Sequence[tuple[float, bool]]) -> float | None:
    """The next rate (requests/s) to offer after ``runs`` (``(offered_per_s, met_slo)`` in the
    order measured), or ``None`` when the search is done (see :class:`RateSearch`)."""
    if not runs:
        return _three_digits(search.start_per_s)
    tried = {rate for rate, _ in runs}
    formed = next(
        (i for i in range(len(runs)) if None not in bracket(runs[: i + 1])), None
    )  # the run after which a bracket existed
    lo, hi = bracket(runs)
    if formed is None:  # stepping
        if len(runs) >= search.max_steps:
            return None
        rate = _three_digits(lo * search.factor) if lo is not None else None
        if rate is None and hi is not None:
            rate = _three_digits(hi / search.factor)
            if rate < search.min_per_s:
                return None
        return None if rate is None or rate in tried else rate
    assert lo is not None and hi is not None  # a bracket exists from `formed` on
    if len(runs) - 1 - formed >= search.bisections or hi - lo <= search.resolution * lo:
        return None
    rate = _three_digits((lo + hi) / 2)
    return None if rate in tried or not lo < rate < hi else rate


def sustainable_rate(runs: Sequence[tuple[float, bool]]) -> float:
    """The highest rate (requests/s) that met the SLO below the lowest rate that missed it
    (``lo`` of :func:`bracket`); 0.0 if none did."""
    lo, _ = bracket(runs)
    return lo or 0.0
