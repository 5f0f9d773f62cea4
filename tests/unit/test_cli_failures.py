"""The CLI as a user meets it (issue 25, item 7), run in a subprocess at 80 columns off a
terminal: an expected failure is one line on stderr and a non-zero exit, never a traceback;
the API key can come from ``RAGSTREAM_API_KEY``; tables stay readable at 80 columns; a
streamed answer ends with the final answer; logs stay off stdout and quiet by default."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from entry.query import FINAL_ANSWER
from ingest import jobs
from ingest.sources import SourceFile
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import PROJECT_ROOT


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: 80 columns, no key, a private SQLite store and local dir."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    base.pop("COLUMNS", None)
    return base | {
        "COLUMNS": "80",
        "PYTHONPATH": str(PROJECT_ROOT),
        "RAGSTREAM_DATABASE__URL": f"sqlite:///{tmp_path / 'cli.db'}",
        "RAGSTREAM_INFRA__LOCAL_DIR": str(tmp_path / "local"),
    }


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``ragstream ARGS`` as the console script runs it (``entry.cli:main``)."""
    code = "import sys; from entry.cli import main; sys.argv[0] = 'ragstream'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``error: ...`` line on stderr (no traceback, nothing else)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class FakeApi(BaseHTTPRequestHandler):
    """``POST /v1/query``: with ``stream``, SSE tokens of a raw generation, then the final
    answer the check kept (different text); records the Authorization header."""

    seen: list[str | None] = []  # noqa: RUF012 - shared by the handler instances

    def do_POST(self) -> None:
        FakeApi.seen.append(self.headers.get("Authorization"))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        final = {"request_id": "r-1", "status": "answered", "answer": "VACUUM reclaims storage."}
        if not body.get("stream"):
            data = json.dumps(final).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        events = [
            ("accepted", {"request_id": "r-1"}),
            ("token", {"text": "\\gset\nAnswer: "}),
            ("token", {"text": "\\gset\\gset"}),
            ("answer", final),
        ]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for kind, data in events:
            self.wfile.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[str]:
    FakeApi.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_api_down_is_one_line_and_exit_1(env: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = run(env, "query", "--api", url, "--api-key", "k", "What does VACUUM do?")
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"error: cannot reach the API at {url}")
    assert result.stdout == ""


def test_kafka_down_is_one_line_and_exit_1(env: dict[str, str]) -> None:
    servers = f"127.0.0.1:{free_port()}"
    result = run(env | {"RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS": servers}, "query", "hi?")
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"error: cannot reach Kafka at {servers}")


def test_an_empty_question_is_one_line_and_exit_2(env: dict[str, str]) -> None:
    for question in ("", "   "):
        result = run(env, "query", question)
        assert result.returncode == 2
        assert one_error_line(result) == "error: the question is empty"


def test_the_key_comes_from_ragstream_api_key(env: dict[str, str], api: str) -> None:
    result = run(env, "query", "--api", api, "What does VACUUM do?")
    assert result.returncode == 2
    assert "RAGSTREAM_API_KEY" in one_error_line(result)
    result = run(env | {"RAGSTREAM_API_KEY": "from-env"}, "query", "--api", api, "q?")
    assert result.returncode == 0, result.stderr
    assert FakeApi.seen == ["Bearer from-env"]
    assert result.stdout.startswith("VACUUM reclaims storage.")


def test_stream_ends_with_the_final_answer_and_logs_stay_quiet(
    env: dict[str, str], api: str
) -> None:
    result = run(env, "query", "--api", api, "--api-key", "k", "--stream", "What does VACUUM do?")
    assert result.returncode == 0, result.stderr
    streamed, _, rest = result.stdout.partition("\\gset\\gset")
    assert streamed.startswith("\\gset\nAnswer: ")  # the generation, as it came
    note, _, answer = rest.partition(FINAL_ANSWER)
    assert not note.strip()
    assert answer.lstrip().startswith("VACUUM reclaims storage.")  # then the final answer
    assert result.stderr == ""  # no log line, on stderr or stdout


def test_a_missing_file_is_not_outside_the_roots(env: dict[str, str], tmp_path: Path) -> None:
    result = run(env, "ingest", str(tmp_path / "nowhere" / "missing.md"))
    assert result.returncode == 2
    line = one_error_line(result)
    assert line.endswith("missing.md: no such file or directory")
    assert "allowed roots" not in line


def test_a_refused_root_names_the_setting_that_allows_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    outside = tmp_path / "notes.md"
    outside.write_text("# Notes\n")
    result = run(env, "ingest", str(outside))
    assert result.returncode == 2
    line = one_error_line(result)
    assert "outside the allowed roots" in line
    assert "RAGSTREAM_INGEST__ALLOWED_ROOTS" in line


def _readable(stdout: str) -> None:
    assert stdout.strip()
    assert "…" not in stdout  # nothing cut to "t…"
    assert max(len(line.rstrip()) for line in stdout.splitlines()) <= 80


def test_jobs_list_is_readable_at_80_columns_off_a_terminal(
    env: dict[str, str], tmp_path: Path
) -> None:
    url = env["RAGSTREAM_DATABASE__URL"]
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    files = [SourceFile(f"/kb/{n}.md", f"{n}.md") for n in range(3)]
    job_id = jobs.create_job(sessions, "default", files)
    jobs.mark_running(sessions, job_id)
    result = run(env, "jobs", "list")
    assert result.returncode == 0, result.stderr
    _readable(result.stdout)
    text = " ".join(result.stdout.split())
    assert job_id in text
    assert "status running" in text and "documents 3" in text and "failed 0" in text
    assert result.stderr == ""


def test_topics_list_is_readable_at_80_columns(env: dict[str, str]) -> None:
    from topics.registry import TOPICS, TopicRegistry

    result = run(env, "topics", "list")
    assert result.returncode == 0, result.stderr
    _readable(result.stdout)
    registry = TopicRegistry("")
    for spec in TOPICS:
        assert registry.name(spec) in result.stdout.split()
    wide = run(env | {"COLUMNS": "200"}, "topics", "list")
    assert "┃ topic" in wide.stdout  # a table where it fits
