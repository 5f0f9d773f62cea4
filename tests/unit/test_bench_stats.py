"""Statistics of the query load benchmark: percentiles, Poisson arrivals, trace stages, SLO."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import statistics
from pathlib import Path

import pytest

from bench.query.load import Outcome, summarise
from bench.stats import (
    CpuSample,
    RateSearch,
    Slo,
    bracket,
    busy_cores,
    consecutive_failures,
    core_ms_per_request,
    max_sustainable_rate,
    next_rate,
    poisson_arrivals,
    stage_samples,
    sustainable_rate,
)
from replay.measures import percentiles, trace_end
from topics.base import StageTiming

T0 = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)


def test_percentiles_use_the_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100..1, unsorted on purpose
    assert percentiles(values) == {"p50": 50.0, "p95": 95.0, "p99": 99.0, "max": 100.0}
    # 13 values: p95 needs ceil(12.35) = 13 values at or below it, i.e. the maximum.
    thirteen = [float(v) for v in range(1, 14)]
    assert percentiles(thirteen)["p95"] == 13.0
    assert percentiles(thirteen)["p50"] == 7.0
    assert percentiles([4.2]) == {"p50": 4.2, "p95": 4.2, "p99": 4.2, "max": 4.2}
    assert percentiles([]) == {}


def test_poisson_arrivals_have_exponential_gaps_at_the_offered_rate() -> None:
    rate, seconds = 50.0, 200.0
    times = poisson_arrivals(rate, seconds, random.Random(1))
    expected = rate * seconds
    assert abs(len(times) - expected) < 4 * expected**0.5  # Poisson: sd = sqrt(mean)
    assert all(0 < t < seconds for t in times)
    assert all(a < b for a, b in itertools.pairwise(times))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(1 / rate, rel=0.05)
    # Exponential gaps have a coefficient of variation of 1 (a fixed schedule has 0).
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, abs=0.06)


def test_poisson_arrivals_are_reproducible_and_reject_bad_input() -> None:
    assert poisson_arrivals(3, 10, random.Random(7)) == poisson_arrivals(3, 10, random.Random(7))
    assert poisson_arrivals(3, 10, random.Random(7)) != poisson_arrivals(3, 10, random.Random(8))
    with pytest.raises(ValueError, match="positive"):
        poisson_arrivals(0, 10, random.Random(1))


def _timing(stage: str, start_ms: float, duration_ms: float) -> StageTiming:
    return StageTiming(
        stage=stage, started_at=T0 + dt.timedelta(milliseconds=start_ms), duration_ms=duration_ms
    )


def test_stage_samples_split_waits_from_service_times() -> None:
    trace = (_timing("retrieval", 12, 80), _timing("rerank", 100, 5), _timing("gen", 130, 900))
    samples = stage_samples(trace, T0)
    assert [(s.stage, s.wait_ms, s.service_ms) for s in samples] == [
        ("retrieval", 12.0, 80.0),
        ("rerank", 8.0, 5.0),  # 100 - (12 + 80)
        ("gen", 25.0, 900.0),  # 130 - (100 + 5)
    ]
    assert trace_end(trace, T0) == T0 + dt.timedelta(milliseconds=1030)
    assert trace_end((), T0) == T0


def test_slo_and_maximum_sustainable_rate() -> None:
    slo = Slo(p99_ms=1000)
    assert slo.met(999.0, 0.0)
    assert not slo.met(1001.0, 0.0)
    assert not slo.met(500.0, 0.01)  # errors must stay under 1%
    assert not slo.met(None, 0.0)  # nothing completed
    runs = [(5.0, True), (10.0, False), (20.0, True), (40.0, False), (60.0, False)]
    assert max_sustainable_rate(runs) == 20.0
    assert max_sustainable_rate([(5.0, False)]) == 0.0
    assert consecutive_failures([True, False, True, False, False]) == 2
    assert consecutive_failures([False, True]) == 0


def _outcome(sent: float, latency_s: float | None, status: str | None = "ok") -> Outcome:
    base = T0.timestamp()
    done = None if latency_s is None else base + sent + latency_s
    trace = (
        StageTiming(
            stage="retrieval",
            started_at=dt.datetime.fromtimestamp(base + sent + 0.01, dt.UTC),
            duration_ms=20.0,
        ),
    )
    return Outcome(sent_at=base + sent, done_at=done, status=status, trace=trace)


def test_summarise_counts_errors_lost_and_cached_against_the_slo() -> None:
    ok = [_outcome(i * 0.1, 0.05) for i in range(97)]
    outcomes = [
        *ok,
        _outcome(9.7, 0.2, "DEADLINE_EXCEEDED"),
        _outcome(9.8, 0.01, "cached"),
        _outcome(9.9, None, None),
    ]
    r = summarise("retrieval", 10.0, 10.0, outcomes, Slo(1000))
    assert (r.sent, r.ok, r.lost) == (100, 97, 1)
    assert r.errors == {"DEADLINE_EXCEEDED": 1, "cached": 1}
    assert r.error_rate == 0.03
    assert not r.met_slo  # 3% errors
    assert r.end_to_end_ms["p50"] == pytest.approx(50.0, abs=0.01)
    # 97 results from the first send (t=0) to the last result (t=9.6+0.05)
    assert r.achieved_per_s == pytest.approx(97 / 9.65, rel=1e-3)
    assert r.stages["retrieval"]["wait_ms"]["p50"] == pytest.approx(10.0, abs=0.01)
    assert r.delivery_ms["p50"] == pytest.approx(20.0, abs=0.01)  # 50 - 10 - 20
    clean = summarise("retrieval", 10.0, 10.0, ok, Slo(1000))
    assert clean.met_slo and clean.error_rate == 0.0


def test_machine_cpu_is_busy_time_over_wall_time_of_every_cpu(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")
    start = CpuSample.now(str(stat))
    assert start == CpuSample(busy=150, total=1000)
    stat.write_text("cpu  250 0 100 1000 50 0 0 0 0 0\n")
    end = CpuSample.now(str(stat))
    # 200 of 400 ticks busy on 2 CPUs: one core busy on average
    assert busy_cores(start, end, cpus=2) == 1.0
    assert core_ms_per_request(1.0, seconds=10.0, requests=50) == 200.0
    assert busy_cores(start, start, cpus=2) is None  # no time passed
    assert busy_cores(None, end, cpus=2) is None
    assert core_ms_per_request(None, 10.0, 5) is None and core_ms_per_request(1.0, 10.0, 0) is None
    assert CpuSample.now(str(tmp_path / "missing")) is None


def _search(search: RateSearch, capacity: float) -> list[tuple[float, bool]]:
    """Run the search against a system that meets the SLO exactly up to ``capacity``/s."""
    runs: list[tuple[float, bool]] = []
    while (rate := next_rate(search, runs)) is not None:
        runs.append((rate, rate <= capacity))
        assert len(runs) < 50
    return runs


def test_rate_search_steps_up_then_bisects_the_bracket() -> None:
    runs = _search(RateSearch(2.0, factor=2.0, bisections=3), capacity=5.0)
    # 2 and 4 meet it, 8 misses; then the midpoints of the bracket: 6, 5, 5.5
    assert [r for r, _ in runs] == [2.0, 4.0, 8.0, 6.0, 5.0, 5.5]
    assert sustainable_rate(runs) == 5.0
    assert bracket(runs) == (5.0, 5.5)


def test_rate_search_steps_down_when_the_first_rate_misses() -> None:
    runs = _search(RateSearch(8.0, bisections=2), capacity=3.0)
    assert [r for r, _ in runs] == [8.0, 4.0, 2.0, 3.0, 3.5]
    assert sustainable_rate(runs) == 3.0
    # nothing meets it: down to the minimum, then give up with 0
    runs = _search(RateSearch(1.0, min_per_s=0.3), capacity=0.1)
    assert [r for r, _ in runs] == [1.0, 0.5]
    assert sustainable_rate(runs) == 0.0


def test_rate_search_stops_at_its_step_budget_and_its_resolution() -> None:
    # never missed within max_steps: the top rate is a lower bound, and no bisection runs
    runs = _search(RateSearch(1.0, max_steps=3), capacity=100.0)
    assert runs == [(1.0, True), (2.0, True), (4.0, True)]
    assert sustainable_rate(runs) == 4.0 and bracket(runs) == (4.0, None)
    # a bracket already within 5% is not bisected further
    search = RateSearch(10.0, bisections=5, resolution=0.05)
    assert next_rate(search, [(10.0, True), (10.4, False)]) is None
    # rates keep three significant digits
    assert next_rate(RateSearch(1.0), [(1.0, True), (1.234, False)]) == 1.12


def test_sustainable_rate_never_counts_a_pass_above_a_miss() -> None:
    noisy = [(5.0, True), (10.0, False), (20.0, True), (40.0, False)]
    assert sustainable_rate(noisy) == 5.0
    assert max_sustainable_rate(noisy) == 20.0  # the lenient reading, reported beside it
    assert bracket(noisy) == (5.0, 10.0)
    assert sustainable_rate([]) == 0.0 and bracket([]) == (None, None)
    for bad in (
        {"start_per_s": 0.0},
        {"start_per_s": 1.0, "factor": 1.0},
        {"start_per_s": 1.0, "max_steps": 0},
        {"start_per_s": 1.0, "bisections": -1},
    ):
        with pytest.raises(ValueError):
            RateSearch(**bad)  # type: ignore[arg-type]
