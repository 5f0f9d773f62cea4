"""The shadow replay's report: answers changed, citations gained and lost, refusals gained and
lost, latency before and after, and the changed answers side by side (issue 24, item 2)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from replay.report import build_report, summary_line, write_report
from replay.shadow import Replayed
from topics.answers import NOT_IN_DOCUMENTS, Answer
from topics.base import StageTiming
from topics.responses import Citation, ErrorCode, ErrorInfo, QueryResponse

T0 = dt.datetime(2026, 12, 2, 5, 0, tzinfo=dt.UTC)


def _trace(start: dt.datetime, *ms: float) -> tuple[StageTiming, ...]:
    out, at = [], start
    for i, d in enumerate(ms):
        out.append(StageTiming(stage=f"s{i}", started_at=at, duration_ms=d))
        at += dt.timedelta(milliseconds=d)
    return tuple(out)


def _cite(n: int, chunk: str) -> Citation:
    return Citation(n=n, doc_id=chunk.partition("#")[0], chunk_id=chunk, title=f"T {chunk}")


def _logged(
    i: int, text: str | None, chunks: list[str], *, ms: float = 100.0, cached: bool = False
) -> Answer:
    created = T0 + dt.timedelta(minutes=i)
    trace = (
        (StageTiming(stage="cache", started_at=created, duration_ms=0.0),)
        if cached
        else _trace(created, ms / 2, ms / 2)
    )
    failed = text is None
    return Answer(
        request_id=f"live-{i}",
        tenant="acme",
        query=f"question {i}?",
        status="failed" if failed else "answered",
        answer=text,
        error=ErrorInfo(code=ErrorCode.DEADLINE_EXCEEDED, message="late") if failed else None,
        citations=tuple(_cite(n + 1, c) for n, c in enumerate(chunks)),
        tier="evidence",
        trace=trace,
        cached=cached,
        created_at=created,
    )


def _shadow(
    logged: Answer, text: str | None, chunks: list[str], *, ms: float = 300.0, sent_s: float = 0
) -> Replayed:
    sent = T0 + dt.timedelta(hours=1, seconds=sent_s)
    rid = f"r1-{logged.request_id}"
    response = None
    if text is not None:
        response = QueryResponse(
            tenant="acme",
            request_id=rid,
            status="answered",
            answer=text,
            citations=tuple(_cite(n + 1, c) for n, c in enumerate(chunks)),
            tier="small",
            trace=_trace(sent + dt.timedelta(milliseconds=10), ms - 10),
        )
    return Replayed(logged, rid, sent, sent_s, response)


def _report() -> tuple[object, list[Replayed]]:
    same = _logged(1, "VACUUM reclaims storage [1].", ["vac#0"])
    moved = _logged(2, "Port 5432 [1].", ["conn#0", "conn#1"], ms=200)
    refused_now = _logged(3, "It is 8 [1].", ["x#0"], ms=300)
    answered_now = _logged(4, NOT_IN_DOCUMENTS, [], ms=400)
    cached = _logged(5, "Cached [1].", ["c#0"], cached=True)
    failed_before = _logged(6, None, [])
    lost = _logged(7, "Lost [1].", ["l#0"])
    replayed = [
        _shadow(same, "VACUUM  reclaims\nstorage [1].", ["vac#0"], ms=100, sent_s=0.0),
        _shadow(moved, "Port 5432 [1].", ["conn#1", "conn#2"], ms=200, sent_s=0.5),
        _shadow(refused_now, NOT_IN_DOCUMENTS, [], ms=300, sent_s=1.0),
        _shadow(answered_now, "Yes [1].", ["y#0"], ms=400, sent_s=1.5),
        _shadow(cached, "Cached [1].", ["c#0"], ms=500, sent_s=2.0),
        _shadow(failed_before, "Now answered [1].", ["n#0"], ms=600, sent_s=2.5),
        _shadow(lost, None, [], sent_s=3.0),
    ]
    run = {
        "id": "r1",
        "selection": {"tenant": "acme", "since": None, "until": None, "seed": 0},
        "in_window": 9,
    }
    candidate = {"alias": "a2", "tier": "auto", "model": None, "settings": {"x.y": "1"}}
    report = build_report(replayed, run=run, candidate=candidate, rate_per_s=2.0, max_in_flight=4)
    return report, replayed


def test_the_summary_counts_each_kind_of_change() -> None:
    report, _ = _report()
    s = report.summary  # type: ignore[attr-defined]
    assert (s["replayed"], s["answered"], s["failed"], s["unanswered"]) == (7, 6, 0, 1)
    # whitespace alone is no change; the same text resting on another passage is one
    assert s["answers"] == {"changed": 4, "unchanged": 2}
    assert s["citations"]["gained"] == 3  # conn#2, y#0, n#0
    assert s["citations"]["lost"] == 2  # conn#0, x#0
    assert s["citations"]["queries_with_losses"] == 2
    assert s["refusals"] == {"before": 1, "after": 1, "gained": 1, "lost": 1}
    assert s["failures"] == {"before": 1, "after": 0, "gained": 0, "lost": 1}
    assert s["tiers"]["after"] == {"small": 6}


def test_overlap_is_the_jaccard_index_of_cited_chunks() -> None:
    report, _ = _report()
    by_id = {d.logged_id: d for d in report.queries}  # type: ignore[attr-defined]
    moved = by_id["live-2"]
    assert moved.citations_gained == ["conn#2"] and moved.citations_lost == ["conn#0"]
    assert moved.overlap == round(1 / 3, 4) and moved.doc_overlap == 1.0
    assert by_id["live-1"].overlap == 1.0
    assert by_id["live-7"].overlap is None and not by_id["live-7"].changed  # unanswered
    assert by_id["live-7"].after.status == "unanswered"


def test_latency_before_leaves_cached_answers_out_and_after_starts_at_the_submission() -> None:
    report, _ = _report()
    lat = report.summary["latency_ms"]  # type: ignore[attr-defined]
    # before: 100, 200, 300, 400, 100 (the failure), 100; the cached answer is left out
    assert lat["cached_before"] == 1
    assert lat["before"]["n"] == 6
    assert lat["before"]["p50"] == 100.0 and lat["before"]["p95"] == 400.0
    assert lat["after"]["n"] == 6
    assert lat["after"]["p50"] == 300.0 and lat["after"]["p95"] == 600.0


def test_the_rate_actually_used_is_reported() -> None:
    report, _ = _report()
    rate = report.summary["rate"]  # type: ignore[attr-defined]
    assert rate["bound_per_s"] == 2.0 and rate["submitted"] == 7
    assert rate["achieved_per_s"] == 2.0 and rate["max_in_any_1s"] == 2


def test_json_and_markdown_show_the_changed_answers_side_by_side(tmp_path: Path) -> None:
    report, _ = _report()
    as_json, as_md = write_report(report, tmp_path)  # type: ignore[arg-type]
    data = json.loads(as_json.read_text())
    assert data["summary"]["answers"]["changed"] == 4
    assert [q["changed"] for q in data["queries"]].count(True) == 4
    md = as_md.read_text()
    changed = [line for line in md.splitlines() if line.startswith("### ")]
    assert changed == [
        "### 2. question 2?",
        "### 3. question 3?",
        "### 4. question 4?",
        "### 6. question 6?",
    ]
    assert f"| answer | It is 8 [1]. | {NOT_IN_DOCUMENTS} |" in md
    assert "| citations | [1] T x#0 | - |" in md
    assert "DEADLINE_EXCEEDED" in md  # a failure shows its error code beside the new answer
    assert "VACUUM reclaims" not in md  # an unchanged answer is not repeated
    assert "answers changed: **4** of 6" in md
    line = summary_line(report)  # type: ignore[arg-type]
    assert line.startswith("replayed 7 (1 unanswered): 4 answers changed")


def test_a_passage_cited_under_another_number_is_no_change() -> None:
    renumbered = _logged(1, "Port 5432 [1]. Set by port [2].", ["conn#0", "conn#1"])
    other = _logged(2, "Port 5432 [1].", ["conn#0"])
    replayed = [
        # the same two passages in the other order: the marks follow them
        _shadow(renumbered, "Port 5432 [2]. Set by port [1].", ["conn#1", "conn#0"]),
        # the same text and number, another passage behind it
        _shadow(other, "Port 5432 [1].", ["conn#9"]),
    ]
    run = {"id": "r", "selection": {"tenant": "acme", "since": None, "until": None, "seed": 0}}
    report = build_report(
        replayed,
        run={**run, "in_window": 2},
        candidate={"alias": "a", "tier": "auto", "model": None, "settings": {}},
        rate_per_s=1.0,
        max_in_flight=1,
    )
    assert [d.changed for d in report.queries] == [False, True]
