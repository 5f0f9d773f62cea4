"""The demo's plain progress lines and its one early question while the bulk job runs."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from entry.demo import (
    CORPUS_ROOTS,
    EarlyQuestion,
    load_questions,
    pick_early_question,
)
from ingest.jobs import JobProgress
from ingest.progress import Snapshot, format_line

PG = CORPUS_ROOTS["postgresql-15"]
PY = CORPUS_ROOTS["python-3.11"]
QUESTIONS: list[dict[str, Any]] = [
    {
        "id": "py",
        "corpus": "python-3.11",
        "question": "lru?",
        "expected_pages": ["library/functools.html"],
    },
    {"id": "none", "corpus": "python-3.11", "question": "jit?", "expected_pages": []},
    {
        "id": "pg",
        "corpus": "postgresql-15",
        "question": "port?",
        "expected_pages": ["app-psql.html"],
    },
]


def _state(done: int, total: int = 1000, status: str = "running", failed: int = 0) -> JobProgress:
    now = dt.datetime.now(dt.UTC)
    return JobProgress("j", "t", status, total, done, failed, done * 15, None, now, now, None)


def test_demo_progress_lines_come_from_the_jobs_snapshot() -> None:
    snap = Snapshot.of(_state(done=290, failed=10), elapsed_s=100.0)
    assert (snap.finished, snap.total, snap.failed, snap.chunks) == (300, 1000, 10, 4350)
    assert "300/1000 docs (30%), 10 failed, 4350 chunks, 3.0 docs/s, ETA 3m53s" in format_line(
        "ingest", snap
    )


def test_pick_takes_the_first_question_with_an_indexed_page() -> None:
    assert pick_early_question(QUESTIONS, set()) is None
    assert pick_early_question(QUESTIONS, {str(PG / "app-psql.html")})["id"] == "pg"  # type: ignore[index]
    both = {str(PG / "app-psql.html"), str(PY / "library/functools.html")}
    assert pick_early_question(QUESTIONS, both)["id"] == "py"  # type: ignore[index]
    # the page of another corpus with the same relative name does not count
    assert pick_early_question(QUESTIONS, {str(PY / "app-psql.html")}) is None


def test_early_question_waits_for_the_threshold_and_asks_once() -> None:
    calls: list[int] = []
    indexed = {str(PG / "app-psql.html")}

    def lister() -> set[str]:
        calls.append(1)
        return indexed

    early = EarlyQuestion(QUESTIONS, early_after=300)
    assert early.choose(_state(299), lister) is None
    assert calls == []  # below the threshold the index is not even listed
    assert early.choose(_state(300), lister)["id"] == "pg"  # type: ignore[index]
    assert early.choose(_state(400), lister) is None  # once
    assert early.asked is not None and early.asked["id"] == "pg"
    assert len(calls) == 1


def test_early_question_waits_for_a_page_it_can_answer_from() -> None:
    indexed: set[str] = set()
    early = EarlyQuestion(QUESTIONS, early_after=300)
    assert early.choose(_state(300), lambda: indexed) is None
    assert early.choose(_state(300), lambda: indexed) is None  # same count: not re-listed
    indexed.add(str(PG / "app-psql.html"))
    assert early.choose(_state(301), lambda: indexed)["id"] == "pg"  # type: ignore[index]


def test_no_early_question_when_disabled_or_once_the_job_ended() -> None:
    indexed = {str(PG / "app-psql.html")}
    assert EarlyQuestion(QUESTIONS, early_after=0).choose(_state(900), lambda: indexed) is None
    finished = _state(900, status="succeeded")
    assert EarlyQuestion(QUESTIONS, early_after=300).choose(finished, lambda: indexed) is None


def test_sample_questions_have_an_early_candidate_in_the_first_pages() -> None:
    """With the manuals in path order (PostgreSQL first), a sample question can be asked from
    the ``app-*`` pages that come within the first few hundred documents."""
    questions = load_questions()
    pages = {str(PG / name) for name in ("app-createdb.html", "app-psql.html", "app-postgres.html")}
    chosen = pick_early_question(questions, pages)
    assert chosen is not None and chosen["corpus"] == "postgresql-15"


def test_watch_job_prints_lines_asks_once_and_waits_for_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loop of ``watch_job`` over a scripted job (no services): progress lines, the early
    question after 300 documents while the job runs, its answer before the summary."""
    import ingest.cli
    import ingest.jobs
    import ingest.tasks
    from entry import demo
    from ragstream.settings import Settings

    states = iter(
        [_state(0), _state(100), _state(310), _state(600), _state(1000, status="succeeded")]
    )
    events: list[str] = []
    monkeypatch.setattr(ingest.jobs, "progress", lambda sessions, job_id: next(states))
    monkeypatch.setattr(ingest.tasks, "reap_stale_jobs", lambda settings, sessions: [])
    monkeypatch.setattr(
        ingest.cli, "print_summary", lambda sessions, state, seconds: events.append("summary")
    )
    monkeypatch.setattr(demo, "load_questions", lambda: QUESTIONS)
    monkeypatch.setattr(demo, "indexed_paths", lambda s, j: {str(PG / "app-psql.html")})
    monkeypatch.setattr(demo, "_ask", lambda settings, key, q: events.append(f"ask {q}") or q)
    monkeypatch.setattr(
        demo, "_print_early", lambda q, fut: events.append(f"answer {fut.result()}")
    )
    monkeypatch.setattr(demo.time, "sleep", lambda s: None)
    lines: list[str] = []
    monkeypatch.setattr(demo.console, "print", lambda text="", **kw: lines.append(str(text)))

    final = demo.watch_job(Settings(), None, "j", "key", early_after=300)  # type: ignore[arg-type]
    assert final.status == "succeeded"
    assert events == ["ask port?", "answer port?", "summary"]
    progress = [line for line in lines if " ingest: " in line]
    assert "ingest: running 0/1000" in progress[0]
    assert "ingest: succeeded 1000/1000" in progress[-1]
    assert any(line.startswith("310 pages indexed: asking pg") for line in lines)
