"""Smoke run of ``ragstream bench bus`` on the real broker: one low rate and a small burst per
mode, so the benchmark cannot rot. It checks the output's shape and sanity, never timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli import bench_app


@pytest.mark.timeout(600)
def test_bench_bus_smoke_run_writes_sane_numbers(tmp_path: Path) -> None:
    out = tmp_path / "bus.json"
    args = ["bus", "--rates", "20", "--seconds", "1", "--burst", "30", "--out", str(out)]
    result = CliRunner().invoke(bench_app, args)
    assert result.exit_code == 0, (result.output, result.exception)
    runs = json.loads(out.read_text())["results"]
    assert [(r["mode"], r["offered_per_s"]) for r in runs] == [
        ("batched", 20.0), ("batched", 0), ("greedy", 20.0), ("greedy", 0),
        ("unbatched", 20.0), ("unbatched", 0),
    ]  # fmt: skip
    for r in runs:
        assert r["received"] == r["sent"] > 0, r
        e2e, hop1, hop2 = r["end_to_end_ms"], r["hop1_ms"], r["hop2_ms"]
        assert 0 < e2e["p50"] <= e2e["p99"] <= e2e["max"]
        assert 0 <= hop1["p50"] <= e2e["max"] and 0 <= hop2["p50"] <= e2e["max"]
        if r["mode"] == "unbatched":
            assert r["mean_batch"] == {"hop1": 1.0, "hop2": 1.0}
