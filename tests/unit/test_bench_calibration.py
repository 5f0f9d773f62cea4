"""The machine's calibration and the demo's ingest record in ``summary.json`` (issue 53, items
3 and 4)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from bench.calibration import cpu_loop, cpu_loop_rate, fixed_texts, read
from bench.demo_ingest import (
    build_record,
    format_line,
    job_counts,
    job_seconds,
    summary_numbers,
    write_record,
)
from bench.summary import build_summary, render_markdown
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import Document, IngestJob, IngestJobItem

CALIBRATION = {"cpu_loop_per_s": 3.1e6, "encoder_texts_per_s": 32.5, "encoder": "onnx:m",
               "load_avg_1m": 0.4, "at": "2026-12-07T15:00:00Z"}  # fmt: skip


def test_the_cpu_workload_is_fixed_and_its_rate_is_iterations_per_second() -> None:
    assert cpu_loop(10) == cpu_loop(10) != cpu_loop(11)
    x = 0
    for i in range(1000):
        x = (x * 31 + i) & 0xFFFFFFFF
    assert cpu_loop(1000) == x
    rate = cpu_loop_rate(iterations=20_000, repeats=2)
    assert 1e4 < rate < 1e10


def test_the_encoder_texts_are_the_same_everywhere_and_chunk_sized() -> None:
    texts = fixed_texts()
    assert texts == fixed_texts() and len(texts) == 32 and len(set(texts)) == 32
    assert all(len(t.split()) == 192 for t in texts)
    assert fixed_texts(2, 5)[0] == fixed_texts(64, 5)[0]  # text i depends on i alone


def test_a_calibration_is_read_alone_or_inside_another_result(tmp_path: Path) -> None:
    (tmp_path / "calibration.json").write_text(json.dumps(CALIBRATION))
    (tmp_path / "ingest.json").write_text(json.dumps({"calibration": CALIBRATION, "x": 1}))
    (tmp_path / "other.json").write_text(json.dumps({"x": 1}))
    assert read(tmp_path / "calibration.json") == CALIBRATION
    assert read(tmp_path / "ingest.json") == CALIBRATION
    assert read(tmp_path / "other.json") is None and read(tmp_path / "none.json") is None


def _record(unchanged: int = 0, calibration: dict[str, Any] | None = CALIBRATION) -> dict[str, Any]:
    counts = {"pages": 1699, "indexed": 1699 - unchanged, "unchanged": unchanged, "failed": 2,
              "chunks": 25_800, "definition_entries": 9_000}  # fmt: skip
    return build_record(counts, 846.0, job_id="j1", status="succeeded", calibration=calibration)


def test_the_record_counts_entries_and_rates_over_the_jobs_time() -> None:
    record = _record()
    assert record["entries"] == 34_800 and record["minutes"] == 14.1
    assert record["chunks_per_s"] == 30.5 and record["entries_per_s"] == 41.13
    assert record["full"] is True and _record(unchanged=5)["full"] is False
    nothing = build_record({}, 0.0, job_id="j", status="succeeded")
    assert nothing["chunks_per_s"] is None and nothing["full"] is False


def test_the_demo_prints_one_line_with_every_count_and_the_calibration() -> None:
    line = format_line(_record())
    assert line == (
        "ingest: 1699 pages (1699 indexed, 0 unchanged, 2 failed), 25800 chunks + 9000 "
        "definition entries = 34800 entries in 14.1 min: 30.5 chunks/s, 41.13 entries/s "
        "(machine: cpu loop 3.1e+06/s, encoder 32.5 texts/s)"
    )
    bare = format_line(build_record({"pages": 3, "unchanged": 3}, 0.0, job_id="j", status="x"))
    assert bare.endswith("in 0.0 min: - chunks/s, - entries/s") and "machine" not in bare


def test_only_a_full_ingest_is_kept_for_the_summary(tmp_path: Path) -> None:
    assert [p.name for p in write_record(_record(), tmp_path)] == [
        "ingest.json",
        "ingest-full.json",
    ]
    assert [p.name for p in write_record(_record(unchanged=1699), tmp_path)] == ["ingest.json"]
    full = json.loads((tmp_path / "ingest-full.json").read_text())
    assert full["unchanged"] == 0 and summary_numbers(full)["minutes_both_manuals"] == 14.1
    assert set(summary_numbers(_record(unchanged=1)).values()) == {None}


def test_the_summary_carries_the_ingest_figures_and_each_runs_calibration(tmp_path: Path) -> None:
    s = build_summary(tmp_path)
    assert s["calibration"] is None and s["ingest"]["minutes_both_manuals"] is None
    assert any(n.startswith("calibration.json missing") for n in s["notes"])
    assert any(n.startswith("ingest.minutes_both_manuals") for n in s["notes"])
    here = {**CALIBRATION, "cpu_loop_per_s": 2.9e6}
    (tmp_path / "calibration.json").write_text(json.dumps(here))
    (tmp_path / "demo-ingest.json").write_text(json.dumps(_record()))
    s = build_summary(tmp_path)
    assert s["calibration"] == here
    assert s["ingest"]["minutes_both_manuals"] == 14.1 and s["ingest"]["entries_per_s"] == 41.13
    assert s["ingest"]["chunks_per_s_both_manuals"] == 30.5
    assert s["ingest"]["demo_calibration"] == CALIBRATION  # the demo's run's, not this one's
    text = render_markdown(s)
    assert "Calibration: CPU loop 2.9e+06 iterations/s, encoder onnx:m 32.5 texts/s" in text
    assert "| `ingest.minutes_both_manuals` | 14.1 |" in text


def test_the_job_counts_come_from_the_registry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    t0 = dt.datetime(2026, 12, 7, 15, 0, tzinfo=dt.UTC)
    with sessions.begin() as session:
        session.add(IngestJob(id="j1", tenant="t", status="succeeded", total_documents=4,
                              chunk_count=5, started_at=t0,
                              finished_at=t0 + dt.timedelta(seconds=90)))  # fmt: skip
        for n, status in enumerate(("indexed", "indexed", "unchanged", "failed")):
            session.add(IngestJobItem(job_id="j1", path=f"/p{n}", doc_id=f"d{n}", status=status))
        # d0: 2 chunks and 3 definition entries; d1: 3 chunks; d2 unchanged (not counted);
        # another tenant's d0 is not the job's.
        session.add(Document(tenant="t", doc_id="d0", chunk_ids=list("abcde"), chunk_count=2))
        session.add(Document(tenant="t", doc_id="d1", chunk_ids=list("fgh"), chunk_count=3))
        session.add(Document(tenant="t", doc_id="d2", chunk_ids=list("ijkl"), chunk_count=1))
        session.add(Document(tenant="u", doc_id="d0", chunk_ids=list("mnopq"), chunk_count=1))
    assert job_counts(sessions, "j1") == {
        "pages": 4, "indexed": 2, "unchanged": 1, "failed": 1, "chunks": 5,
        "definition_entries": 3,
    }  # fmt: skip
    assert job_seconds(sessions, "j1") == 90.0


def test_the_demo_records_its_job_with_the_calibration_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.calibration
    from entry.demo import record_ingest
    from ragstream.settings import DatabaseSettings, Settings

    base = Settings()
    settings = base.model_copy(update={
        "database": DatabaseSettings(url=f"sqlite:///{tmp_path / 'r.db'}"),
        "infra": base.infra.model_copy(update={"local_dir": tmp_path}),
    })  # fmt: skip
    upgrade_head(settings.database_url)
    sessions = make_session_factory(make_engine(settings.database_url))
    with sessions.begin() as session:
        session.add(IngestJob(id="j2", tenant="t", status="succeeded", total_documents=1,
                              chunk_count=2))  # fmt: skip
        session.add(IngestJobItem(job_id="j2", path="/p", doc_id="d", status="indexed"))
        session.add(Document(tenant="t", doc_id="d", chunk_ids=["a", "b", "c"], chunk_count=2))
    monkeypatch.setattr(bench.calibration, "measure", lambda s: CALIBRATION)
    record = record_ingest(settings, sessions, "j2", watched_s=4.0)  # no start/finish times
    assert (record["entries"], record["seconds"], record["entries_per_s"]) == (3, 4.0, 0.75)
    assert record["calibration"] == CALIBRATION and record["full"]
    assert json.loads((tmp_path / "demo" / "ingest-full.json").read_text()) == record
