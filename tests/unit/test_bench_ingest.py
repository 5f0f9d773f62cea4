"""The pure parts of ``bench ingest`` and ``bench retrieval-stage``: the sample over both
manuals, the stream path's stage profile, the ratios to the raw encode rate, the edit the
parser sees, the per-query stage timing, and what the summary reads from their JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.ingest import (
    PathResult,
    batch_profile,
    corpus_pages,
    edit_page,
    even_sample,
    fill_ratios,
)
from bench.query.stage_latency import STAGES, time_queries
from bench.summary import build_summary, ingest_numbers, retrieval_stage_p50
from ingest.parsers import parse


def test_even_sample_spreads_over_the_whole_list() -> None:
    items = list(range(10))
    assert even_sample(items, 5) == [0, 2, 4, 6, 8]
    assert even_sample(items, 3) == [0, 3, 6]
    assert even_sample(items, 0) == items  # 0: every item
    assert even_sample(items, 50) == items
    assert even_sample([], 3) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        even_sample(items, -1)


def test_corpus_pages_walks_every_manual_and_skips_excluded_dirs(tmp_path: Path) -> None:
    py, pg = tmp_path / "python" / "html", tmp_path / "pg" / "html"
    for path in (py / "library" / "os.html", py / "index.html", py / "_sources" / "x.html",
                 pg / "sql.html", pg / "notes.txt"):  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("<p>x</p>")
    pages = corpus_pages((py, pg), ("_sources",))
    assert pages == [(py, py / "index.html"), (py, py / "library" / "os.html"),
                     (pg, pg / "sql.html")]  # fmt: skip


def test_batch_profile_counts_each_batch_once() -> None:
    batch1 = {"parse": 100.0, "embed": 2000.0, "total": 2200.0}
    batch2 = {"parse": 50.0, "embed": 1000.0, "index": 30.0, "total": 1100.0}
    # every result event of a batch carries the batch's timings; empty ones are skipped
    assert batch_profile([batch1, batch1, dict(batch1), batch2, {}]) == {
        "parse": 0.15, "embed": 3.0, "total": 3.3, "index": 0.03
    }  # fmt: skip
    assert batch_profile([]) == {}


def _r(name: str, chunks: int, seconds: float) -> PathResult:
    return PathResult(name, 10, chunks, seconds, 10 / seconds, chunks / seconds)


def test_ratios_are_to_the_raw_encode_rate_and_reingests_to_their_first_ingest() -> None:
    results = [
        _r("(a) raw encode: m", 100, 10.0),
        _r("(b) stream path", 100, 12.5),
        _r("(g) stream re-ingest, unchanged", 0, 0.25),
        _r("(c) batch path", 100, 11.0),
        _r("(e) batch re-ingest, unchanged", 0, 0.11),
        _r("(f) re-ingest after editing 1 doc(s)", 3, 0.22),
    ]
    fill_ratios(results)
    by = {r.name[:3]: r for r in results}
    assert by["(a)"].ratio_to_a == 1.0
    assert by["(b)"].ratio_to_a == 0.8 and by["(c)"].ratio_to_a == 0.909
    # measured again after the paths, faster: every ratio is to the faster raw rate
    results.append(_r("(a') raw encode again: m", 100, 8.0))
    fill_ratios(results)
    assert by["(a)"].ratio_to_a == 0.8 and results[-1].ratio_to_a == 1.0
    assert by["(b)"].ratio_to_a == 0.64 and by["(c)"].ratio_to_a == 0.727
    results.pop()
    fill_ratios(results)
    assert by["(b)"].ratio_to_a == 0.8 and by["(c)"].ratio_to_a == 0.909
    assert by["(e)"].ratio_to_a is None  # no chunks written
    assert by["(e)"].note == "1.0% of (c)'s time" and by["(f)"].note == "2.0% of (c)'s time"
    assert by["(g)"].note == "2.0% of (b)'s time"


@pytest.mark.parametrize(
    "page",
    [
        "<html><body><div class='sphinxsidebar'><h3>Previous</h3><p>Glossary</p></div>"
        "<div role='main'><h1>T</h1><p>Alpha beta.</p><p>Gamma.</p></div>"
        "<div class='footer'><p>Copyright.</p></div></body></html>",
        "<html><body><div class='navheader'>nav</div><div class='sect1'><h2>T</h2>"
        "<p>Alpha beta.</p></div><div class='navfooter'>nav</div></body></html>",
    ],
)
def test_the_edit_lands_in_the_text_the_parser_keeps(page: str) -> None:
    def text(html: str) -> str:
        return " ".join(d.text for d in parse(html.encode(), filename="p.html"))

    edited = edit_page(page)
    assert "Edited for the benchmark." not in text(page)
    assert "Alpha beta. Edited for the benchmark." in text(edited)
    assert edited.count("Edited") == 1
    with pytest.raises(ValueError, match="no paragraph"):
        edit_page("<html><body><p>x</p><h1>T</h1><pre>x</pre></body></html>")


def test_each_stage_of_each_query_is_timed_on_its_own() -> None:
    ticks: Iterator[float] = iter(
        [0.0, 0.010, 0.030, 0.0305, 0.0325, 1.0, 1.012, 1.040, 1.0402, 1.0442]
    )
    calls: list[str] = []
    timed = time_queries(
        ["q1", "q2"],
        embed=lambda q: calls.append(f"embed {q}") or [q],
        search=lambda q, v: calls.append(f"search {q} {v}") or "hits",
        fuse=lambda q, r: calls.append(f"fuse {q} {r}") or "found",
        clock=lambda: next(ticks),
        expand=lambda r, c: calls.append(f"expand {r} {c}"),
    )
    assert calls == ["embed q1", "search q1 ['q1']", "fuse q1 hits", "expand hits found",
                     "embed q2", "search q2 ['q2']", "fuse q2 hits",
                     "expand hits found"]  # fmt: skip
    s = {k: [round(v, 3) for v in vs] for k, vs in timed.samples.items()}
    assert s == {"embed": [10.0, 12.0], "msearch": [20.0, 28.0], "fusion": [0.5, 0.2],
                 "preceding": [2.0, 4.0], "total": [32.5, 44.2]}  # fmt: skip
    summary = timed.summary()
    assert set(summary) == set(STAGES)
    assert summary["total"]["p50"] == 32.5 and summary["total"]["max"] == 44.2
    assert summary["embed"]["mean"] == 11.0


INGEST = {
    "bench": "ingest",
    "backend": "onnx",
    "load_avg_1m": {"start": 0.4, "end": 1.1},
    "results": [
        {"name": "(a) raw encode: m", "chunks_per_s": 40.0, "seconds": 50.0, "ratio_to_a": 1.0},
        {"name": "(a') raw encode again: m", "chunks_per_s": 44.0, "ratio_to_a": 1.0},
        {"name": "(b) stream path", "seconds": 55.0, "ratio_to_a": 0.91},
        {"name": "(g) stream re-ingest, unchanged", "seconds": 0.55, "ratio_to_a": None},
        {"name": "(c) batch path", "seconds": 52.0, "ratio_to_a": 0.96},
        {"name": "(e) batch re-ingest, unchanged", "seconds": 1.3, "ratio_to_a": None},
    ],
}


def test_summary_reads_the_ingest_and_retrieval_stage_numbers(tmp_path: Path) -> None:
    numbers = ingest_numbers(INGEST)
    assert numbers["stream_ratio_to_limit"] == 0.91 and numbers["batch_ratio_to_limit"] == 0.96
    assert numbers["unchanged_reingest_time_ratio"] == 0.025
    assert numbers["stream_unchanged_reingest_time_ratio"] == 0.01
    assert numbers["backend"] == "onnx" and numbers["load_avg_1m_start"] == 0.4
    assert numbers["limit_chunks_per_s"] == 44.0  # the faster of (a) and (a')
    old = {"results": [r for r in INGEST["results"] if not r["name"].startswith("(g)")]}
    assert ingest_numbers(old)["stream_unchanged_reingest_time_ratio"] is None

    assert retrieval_stage_p50(None) is None
    stage = {"stages": {"total": {"p50": 31.5, "p95": 40.0}}}
    assert retrieval_stage_p50(stage) == 31.5
    (tmp_path / "ingest.json").write_text(json.dumps(INGEST))
    (tmp_path / "retrieval_stage.json").write_text(json.dumps(stage))
    s = build_summary(tmp_path)
    assert s["query"]["retrieval_stage_p50_ms"] == 31.5
    t = s["targets"]
    assert t["query.retrieval_stage_p50_ms"] == {"target": "<= 50", "value": 31.5, "met": True}
    assert t["ingest.stream_ratio_to_limit"]["met"] is True
    assert t["ingest.batch_ratio_to_limit"]["met"] is True
    assert t["ingest.unchanged_reingest_time_ratio"]["met"] is False  # 2.5% > 2%
    assert not any("retrieval_stage.json missing" in n for n in s["notes"])
    assert any("retrieval_stage.json missing" in n for n in build_summary(tmp_path / "x")["notes"])
