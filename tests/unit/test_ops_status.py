"""The Operations page's numbers: pool series summed over processes, histogram quantiles,
windowed rates, the supervisor's state file and where the pools' metrics are scraped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from api.ops import (
    WINDOW_S,
    WORKER_COMMAND,
    OpsService,
    PoolScrape,
    histogram_quantile,
    metrics_ports,
    parse_pool_metrics,
    read_processes,
    window_numbers,
)
from api.ops_models import PoolOut
from entry.supervisor import parse_procfile
from ragstream.settings import PROJECT_ROOT, Settings
from topics.registry import POOL_INPUTS

PORT_9107 = "RAGSTREAM_POOLS__RETRIEVAL__METRICS_PORT=9107"


def _exposition(events: int, latencies: list[float], errors: int = 0) -> str:
    """One pool process's exposition of the runtime's series (same names and labels)."""
    reg = CollectorRegistry()
    Counter("ragstream_events_in_total", "", ["pool"], registry=reg).labels("retrieval").inc(events)
    err = Counter("ragstream_errors_total", "", ["pool", "error_class"], registry=reg)
    err.labels("retrieval", "ValueError").inc(errors)
    size = Histogram("ragstream_batch_size", "", ["pool"], buckets=(1, 8, 32), registry=reg)
    lat = Histogram(
        "ragstream_batch_latency_seconds", "", ["pool"], buckets=(0.01, 0.1, 1), registry=reg
    )
    for s in latencies:
        size.labels("retrieval").observe(4)
        lat.labels("retrieval").observe(s)
    Gauge("ragstream_consumer_lag", "", ["pool", "partition"], registry=reg).labels(
        "retrieval", "0"
    ).set(3)
    return generate_latest(reg).decode()


def test_two_processes_of_a_pool_are_summed_and_windowed() -> None:
    first = parse_pool_metrics([_exposition(10, [0.005] * 4), _exposition(6, [0.05] * 2)], 100.0)
    s = first["retrieval"]
    assert s.events_in == 16 and s.batch_count == 6 and s.latency[0.01] == 4
    later = parse_pool_metrics(
        [_exposition(40, [0.005] * 4 + [0.5] * 10, errors=2), _exposition(6, [0.05] * 2)], 110.0
    )["retrieval"]
    numbers = window_numbers(s, later)
    assert numbers["throughput_per_s"] == pytest.approx(3.0)  # 30 events in 10 s
    assert numbers["batch_size_mean"] == pytest.approx(4.0)
    assert numbers["errors"] == 2
    # The 10 new batches all took 0.1-1 s: the window's p50 lies in that bucket, not below.
    assert 100 < numbers["batch_p50_ms"] <= 1000  # type: ignore[operator]
    totals = window_numbers(later, later)  # the first scrape: totals since start
    # 16 batches since start, 6 under 0.1 s: the 8th lies 2/10 into the 0.1-1 s bucket.
    assert totals["batch_p50_ms"] == pytest.approx(280.0)


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    buckets = {0.1: 50.0, 0.2: 100.0, float("inf"): 100.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.75, buckets) == pytest.approx(0.15)
    assert histogram_quantile(0.5, {0.1: 0.0, float("inf"): 0.0}) is None
    assert histogram_quantile(0.99, {0.1: 1.0, float("inf"): 10.0}) == pytest.approx(0.1)


def test_the_supervisor_state_is_read_and_a_dead_supervisor_shown(tmp_path: Path) -> None:
    state = {
        "supervisor_pid": os.getpid(),
        "updated_at": 1.0,
        "processes": {
            "retrieval-2": {
                "command": f"{PORT_9107} ragstream worker retrieval",
                "pid": 42, "state": "running", "restarts": 3, "last_exit_code": -9,
            },
            "api": {"command": "ragstream api", "pid": 41, "state": "backoff", "restarts": 0},
        },
    }  # fmt: skip
    path = tmp_path / "supervisor.json"
    path.write_text(json.dumps(state))
    out = read_processes(path)
    assert out.running and out.error is None
    proc = {p.name: p for p in out.processes}
    assert proc["retrieval-2"].pool == "retrieval" and proc["retrieval-2"].restarts == 3
    assert proc["retrieval-2"].last_exit_code == -9 and proc["api"].pool is None
    ports = metrics_ports(Settings(), out)
    assert 9107 in ports["retrieval"] and set(ports) == set(POOL_INPUTS)

    state["supervisor_pid"] = 2**22 + 12345  # beyond pid_max: no such process
    path.write_text(json.dumps(state))
    dead = read_processes(path)
    assert not dead.running and {p.state for p in dead.processes} == {"not running"}
    assert read_processes(tmp_path / "missing.json").error is not None


def test_every_procfile_pool_is_a_pool_the_page_shows() -> None:
    commands = parse_procfile((PROJECT_ROOT / "Procfile").read_text())
    pools = {m.group(1) for c in commands.values() if (m := WORKER_COMMAND.search(c))}
    assert pools == set(POOL_INPUTS)


def test_until_a_whole_window_was_scraped_the_numbers_are_since_the_pool_started() -> None:
    ops = OpsService(Settings(), redis.Redis())  # no connection until used
    inf = float("inf")

    def row() -> PoolOut:
        return PoolOut(name="retrieval", topic="t", group="g", max_batch=32, max_wait_ms=10)

    def scrape(at: float, batches: float) -> PoolScrape:
        return PoolScrape(
            at, events_in=batches * 2, batch_count=batches, batch_sum=batches * 2,
            latency={0.1: batches, inf: batches},
        )  # fmt: skip

    first = row()
    ops._windowed(first, scrape(100.0, 5), 100.0)
    assert first.since_start and first.batch_size_mean == 2 and first.batch_p50_ms is not None
    idle = row()  # nothing happened since: the totals still show, the rate is 0
    ops._windowed(idle, scrape(103.0, 5), 103.0)
    assert idle.since_start and idle.batch_size_mean == 2 and idle.throughput_per_s == 0
    assert len(idle.history) == 2
    later = row()  # a whole window scraped: only the window counts (still idle: no batches)
    ops._windowed(later, scrape(100.0 + WINDOW_S + 10, 5), 100.0 + WINDOW_S + 10)
    assert not later.since_start and later.batch_size_mean is None
    busy = row()
    ops._windowed(busy, scrape(100.0 + WINDOW_S + 20, 15), 100.0 + WINDOW_S + 20)
    # 10 batches of 2 events since the baseline, the scrape at 103 s (the newest a window old).
    assert busy.batch_size_mean == 2
    assert busy.throughput_per_s == pytest.approx(20 / (WINDOW_S + 20 - 3))
