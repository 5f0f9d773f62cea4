"""Operator CLI (issue 16): plain progress lines when not on a terminal, ``jobs list``,
``query get ID`` from the query log, and the LLM server's health probe. The SQL commands run
on a throwaway SQLite store, the store ragstream uses by default."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from entry.cli import app
from ingest import cli as ingest_cli
from ingest import jobs
from ingest.progress import ProgressLines, Snapshot, eta, format_line
from ingest.sources import SourceFile
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.health import probe_llm
from ragstream.settings import get_settings
from topics.queries import QueryRequest
from topics.responses import Citation, QueryResponse
from workers import query_log

runner = CliRunner()


def _snap(finished: int, elapsed_s: float, total: int = 100) -> Snapshot:
    return Snapshot(finished, total, 0, finished * 10, elapsed_s, "running")


def test_progress_lines_every_five_percent_or_thirty_seconds() -> None:
    lines = ProgressLines()
    assert lines.due(_snap(0, 0.0))  # the first observation
    assert not lines.due(_snap(4, 1.0))
    assert lines.due(_snap(5, 2.0))  # 5 %
    assert not lines.due(_snap(6, 20.0))
    assert lines.due(_snap(6, 32.5))  # 30 s since the last line
    assert not lines.due(_snap(7, 40.0))
    assert lines.due(_snap(7, 41.0), final=True)
    assert lines.due(_snap(30, 42.0))  # a jump over several steps: one line


def test_progress_line_says_docs_chunks_rate_and_eta() -> None:
    line = format_line("ingest j1", Snapshot(50, 200, 2, 700, 25.0, "running"))
    assert "ingest j1: running 50/200 docs (25%), 2 failed, 700 chunks, 2.0 docs/s, ETA 1m15s" in (
        line
    )
    assert eta(None) == "-" and eta(3723) == "1h02m03s" and eta(6.4) == "6s"
    assert "ETA -" in format_line("x", Snapshot(0, 10, 0, 0, 3.0, "pending"))


def _state(job_id: str, finished: int, total: int = 100) -> jobs.JobProgress:
    status = "succeeded" if finished == total else "running"
    now = dt.datetime.now(dt.UTC)
    return jobs.JobProgress(
        job_id, "t", status, total, finished, 0, finished * 3, None, now, now, None
    )


class ScriptedWatch:
    """Stands in for ``ingest.cli._Watch``: the job's states in order, without sleeping."""

    def __init__(self, states: list[jobs.JobProgress]) -> None:
        self.job_id = states[0].job_id
        self._states: Iterator[jobs.JobProgress] = iter(states)

    def poll(self, state: jobs.JobProgress | None) -> jobs.JobProgress:
        return next(self._states)


def test_follow_prints_plain_lines_when_not_on_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    states = [_state("job-1", n) for n in range(101)]
    final = ingest_cli._follow_lines(ScriptedWatch(states), 0.0)  # type: ignore[arg-type]
    out = capsys.readouterr().out.splitlines()
    assert final.finished
    assert len(out) == 21  # 0 %, 5 %, ..., 100 % (the last is also the final line)
    assert all("ingest job-1: " in line and " docs (" in line and "ETA" in line for line in out)
    assert "succeeded 100/100 docs (100%)" in out[-1] and "300 chunks" in out[-1]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[sessionmaker[Session]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("RAGSTREAM_DATABASE__URL", url)
    get_settings.cache_clear()
    upgrade_head(url)
    yield make_session_factory(make_engine(url))
    get_settings.cache_clear()


def _files(n: int) -> list[SourceFile]:
    return [SourceFile(path=f"/d/{i}.md", doc_id=f"d{i}", title=f"{i}") for i in range(n)]


def test_jobs_list_newest_first_with_status_filter_and_limit(
    store: sessionmaker[Session],
) -> None:
    first = jobs.create_job(store, "acme", _files(2))
    second = jobs.create_job(store, "acme", _files(3))
    jobs.mark_running(store, first)

    everything = runner.invoke(app, ["jobs", "list"])
    assert everything.exit_code == 0, everything.output
    assert first in everything.output and second in everything.output  # ids never cut
    assert everything.output.index(second) < everything.output.index(first)

    running = runner.invoke(app, ["jobs", "list", "--status", "running"])
    assert first in running.output and second not in running.output

    newest = runner.invoke(app, ["jobs", "list", "--limit", "1"])
    assert second in newest.output and first not in newest.output

    bad = runner.invoke(app, ["jobs", "list", "--status", "done"])
    assert bad.exit_code == 2 and "completed_with_failures" in bad.output
    assert [j.job_id for j in jobs.recent_jobs(store, tenant="other")] == []


def _request() -> QueryRequest:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    return QueryRequest(tenant="acme", query="What does VACUUM do?", deadline=deadline)


def test_query_get_reads_the_query_log(store: sessionmaker[Session]) -> None:
    request = _request()
    query_log.log_pending(store, request)
    pending = runner.invoke(app, ["query", "get", request.request_id])
    assert pending.exit_code == 3 and "no answer yet" in pending.output

    answer = QueryResponse(
        tenant="acme",
        request_id=request.request_id,
        status="answered",
        answer="VACUUM reclaims storage [1].",
        citations=(Citation(n=1, doc_id="vacuum", chunk_id="vacuum#0", title="VACUUM"),),
        tier="evidence",
    )
    with store.begin() as session:
        query_log.record_final(session, [answer])
    got = runner.invoke(app, ["query", "get", request.request_id])
    assert got.exit_code == 0, got.output
    assert "VACUUM reclaims storage [1]." in got.output and "[1] VACUUM" in got.output
    assert "tier evidence" in got.output

    assert (
        runner.invoke(app, ["query", "get", request.request_id, "--tenant", "acme"]).exit_code == 0
    )
    other = runner.invoke(app, ["query", "get", request.request_id, "--tenant", "other"])
    assert other.exit_code == 1 and "no query" in other.output
    assert runner.invoke(app, ["query", "get", "unknown-id"]).exit_code == 1


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        body = json.dumps({"status": "ok" if self.status == 200 else "loading model"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.parametrize("status", [200, 503])
def test_llm_probe_reads_health(status: int) -> None:
    handler = type("H", (_Health,), {"status": status})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        probe = probe_llm("llm", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert probe.healthy is (status == 200)
    assert ("ok" if status == 200 else "HTTP 503") in probe.detail


def test_llm_probe_of_a_closed_port_is_unhealthy() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    port = server.server_address[1]
    server.server_close()
    probe = probe_llm("llm", f"http://127.0.0.1:{port}", timeout_s=2.0)
    assert not probe.healthy and "ConnectError" in probe.detail
