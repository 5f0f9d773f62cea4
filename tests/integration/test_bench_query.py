"""Smoke runs of ``ragstream bench query`` on the real services: one low rate per LLM mode, and
a two-step rate search of the evidence tier, for a few seconds each over a private index, so
the benchmark cannot rot. They check the output's shape and sanity, never its timings."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bench.cli import bench_app
from ingest.ops import IngestOp
from ragstream.settings import Settings
from tests.integration.ingestkit import Kit
from topics.admin import make_admin

DOCS = {
    "vacuum": "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. The autovacuum "
    "launcher starts workers every autovacuum_naptime, which defaults to one minute.",
    "ports": "# Connections\n\nThe server listens on TCP port 5432 by default. The port is set "
    "with the port configuration parameter.",
    "slots": "# Slots\n\nThe __slots__ declaration reserves space for the declared attributes "
    "and prevents the creation of __dict__ for each instance.",
}
QUESTIONS = [
    "Which TCP port does the server listen on by default?",
    "How often does autovacuum start workers?",
    "What does __slots__ prevent?",
]


def _topics_with(settings: Settings, prefix: str) -> list[str]:
    admin = make_admin(settings.kafka)
    try:
        return [t for t in admin.list_topics() if t.startswith(prefix)]
    finally:
        admin.close()


@pytest.mark.timeout(900)
def test_bench_query_smoke_run_writes_sane_numbers(
    kit: Kit, settings: Settings, tmp_path: Path
) -> None:
    kit.pipeline.apply(
        [IngestOp("acme", k, data=v.encode(), content_type="markdown") for k, v in DOCS.items()]
    )
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps({"question": q}) for q in QUESTIONS))
    out = tmp_path / "query.json"
    result = CliRunner().invoke(
        bench_app,
        [
            "query", "--tenant", "acme", "--index-alias", kit.index.alias,
            "--questions", str(questions), "--redis-db", "14", "--out", str(out),
            "--modes", "retrieval,full", "--floor-calls", "2", "--floor-llm-calls", "1",
            "--retrieval-rates", "2", "--retrieval-seconds", "3", "--retrieval-baseline-s", "2",
            "--retrieval-p99-ms", "60000", "--retrieval-deadline-s", "120",
            "--full-rates", "0.5", "--full-seconds", "4", "--full-baseline-s", "1",
            "--full-p99-ms", "300000", "--full-deadline-s", "300",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    # Absolute rates and the default seed make the arrival counts fixed (8 and 3 requests);
    # a rate relative to the measured baseline could draw no arrival at all in a few seconds.
    # The generous SLOs and deadlines absorb other work on the shared LLM server and cores.
    payload = json.loads(out.read_text())
    assert payload["setup"]["chunks"] == len(DOCS)
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert "Maximum sustainable rate" in out.with_suffix(".md").read_text()
    modes = {m["mode"]: m for m in payload["modes"]}
    assert set(modes) == {"retrieval", "full"}
    for name, mode in modes.items():
        base = mode["baseline"]
        assert base["requests"] >= 1 and base["errors"] == 0 and base["throughput_per_s"] > 0
        [rate] = mode["rates"]
        assert rate["sent"] >= 1 and rate["ok"] == rate["sent"], rate
        assert rate["error_rate"] == 0.0 and rate["errors"] == {} and rate["lost"] == 0
        e2e = rate["end_to_end_ms"]
        assert 0 < e2e["p50"] <= e2e["p99"] <= e2e["max"] < 300_000
        assert rate["batch_mean"]["retrieval"] >= 1 and rate["batches"]["rerank"] >= 1
        stages = set(rate["stages"])
        assert {"retrieval", "rerank"} <= stages
        for d in rate["stages"].values():  # one host clock: no stage starts before its input
            assert d["wait_ms"]["p50"] >= 0 and d["service_ms"]["p50"] >= 0
        assert rate["met_slo"] and mode["max_sustainable_per_s"] == rate["offered_per_s"]
        _check_costs(mode, rate)
        assert mode["speedup_vs_sequential"] == round(
            mode["max_sustainable_per_s"] / base["throughput_per_s"], 2
        )
        deadline = time.monotonic() + 20
        while _topics_with(settings, mode["topic_prefix"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _topics_with(settings, mode["topic_prefix"]) == [], f"{name} left its topics"
    full = modes["full"]["rates"][0]
    assert any(s.startswith("generation-") for s in full["stages"])
    assert full["ttft_ms"] and full["ttft_ms"]["max"] <= full["end_to_end_ms"]["max"]
    # The rerank pool also runs the evidence stage (its own trace entry).
    assert set(modes["retrieval"]["rates"][0]["stages"]) == {"retrieval", "rerank", "evidence"}


def _check_costs(mode: dict[str, Any], rate: dict[str, Any]) -> None:
    """The floor's stages and the core-ms per request at the operating point are there and sane."""
    floor = mode["floor"]
    stages = [s["stage"] for s in floor["stages"]]
    expected = ["embed", "caches_route", "msearch", "fusion", "preceding", "rerank", "evidence"]
    assert stages == expected + (["llm"] if mode["mode"] == "full" else [])
    for s in floor["stages"]:
        assert s["calls"] == (1 if s["stage"] == "llm" else 2) and s["wall_ms"] > 0
        assert s["core_ms"] >= 0 and s["by_process"]["bench"] >= 0
    assert floor["core_ms"] == round(sum(s["core_ms"] for s in floor["stages"]), 1)
    assert floor["core_ms"] > 0  # embedding a query alone costs CPU in this process
    assert "elasticsearch" in mode["services"] and "redis" in mode["services"]
    msearch = next(s for s in floor["stages"] if s["stage"] == "msearch")
    assert "elasticsearch" in msearch["by_process"]
    if mode["mode"] == "full":
        assert floor["llm_answered"] == 1 and "llm" in mode["services"]
    op = mode["operating_point"]
    assert op["at_offered_per_s"] == rate["offered_per_s"] and op["met_slo"]
    assert op["core_ms_per_request"] == rate["process_core_ms_per_request"] > 0
    assert set(rate["core_ms_by_process"]) >= {"bench", "retrieval", "rerank"}
    assert mode["baseline"]["process_core_ms_per_request"] > 0


@pytest.mark.timeout(600)
def test_bench_query_searches_the_evidence_tiers_sustainable_rate(
    kit: Kit, settings: Settings, tmp_path: Path
) -> None:
    kit.pipeline.apply(
        [IngestOp("acme", k, data=v.encode(), content_type="markdown") for k, v in DOCS.items()]
    )
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps({"question": q}) for q in QUESTIONS))
    out = tmp_path / "query.json"
    result = CliRunner().invoke(
        bench_app,
        [
            "query", "--tenant", "acme", "--index-alias", kit.index.alias,
            "--questions", str(questions), "--redis-db", "14", "--out", str(out),
            "--modes", "evidence", "--floor-calls", "2",
            "--evidence-start", "2", "--evidence-seconds", "2", "--evidence-max-steps", "2",
            "--evidence-bisections", "1", "--evidence-baseline-s", "1",
            "--evidence-p99-ms", "60000", "--evidence-deadline-s", "120",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    payload = json.loads(out.read_text())
    [mode] = payload["modes"]
    assert mode["mode"] == "evidence" and mode["route"] == "evidence"
    assert mode["pools"] == ["retrieval", "rerank"]
    # A generous SLO: both rising steps meet it, so no miss bounds the search; the top rate is
    # the lower bound it reports. (Which rates miss a real SLO depends on the machine.)
    assert [r["offered_per_s"] for r in mode["rates"]] == [2.0, 4.0]
    for rate in mode["rates"]:
        assert rate["ok"] == rate["sent"] >= 1 and rate["error_rate"] == 0.0, rate
        # answered in the rerank pool: no LLM stage, the evidence stage is the last
        assert set(rate["stages"]) == {"retrieval", "rerank", "evidence"}
        assert rate["ttft_ms"] == {}
    assert mode["sustainable_per_s"] == mode["max_sustainable_per_s"] == 4.0
    _check_costs(mode, mode["rates"][-1])
    assert "llm" not in mode["services"]
    text = out.with_suffix(".md").read_text()
    assert "(step then bisect, 2 rates): **4/s**" in text
    deadline = time.monotonic() + 20
    while _topics_with(settings, mode["topic_prefix"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _topics_with(settings, mode["topic_prefix"]) == []
