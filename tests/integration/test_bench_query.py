"""Smoke run of ``ragstream bench query`` on the real services: one low rate per mode for a few
seconds over a private index, so the benchmark cannot rot. It checks the output's shape and
sanity, never its timings."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli import bench_app
from ingest.pipeline import IngestOp
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
