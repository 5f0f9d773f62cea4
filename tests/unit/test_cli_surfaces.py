"""CLI surfaces: ``ragstream query --api`` passes ``--timeout`` and ``--top-k``; Celery workers
are named after their queues."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

import entry.client
from api.models import QueryResult
from entry.cli import app, worker_argv
from ragstream.settings import Settings


class RecordingClient:
    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self, url: str, key: str, **kwargs: Any) -> None:
        self.calls.append(("init", kwargs))

    def __enter__(self) -> RecordingClient:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def query(self, question: str, **kwargs: Any) -> QueryResult:
        self.calls.append(("query", kwargs))
        return QueryResult(request_id="r1", status="answered", answer="ok")

    def stream(self, question: str, **kwargs: Any) -> Any:
        self.calls.append(("stream", kwargs))
        return iter(())


@pytest.mark.parametrize("stream", [False, True])
def test_query_over_the_api_honours_timeout_and_top_k(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    monkeypatch.setattr(entry.client, "HttpClient", RecordingClient)
    RecordingClient.calls = []
    args = ["query", "q?", "--api", "http://x", "--api-key", "k", "--timeout", "7", "--top-k", "3"]
    result = CliRunner().invoke(app, args + (["--stream"] if stream else []))
    assert result.exit_code in (0, 1), result.output
    (_, init), (_, call) = RecordingClient.calls
    assert call["top_k"] == 3 and call["timeout_s"] == 7.0
    assert init["timeout_s"] > 7.0  # the HTTP client outwaits the server


def test_celery_workers_are_named_after_their_queues() -> None:
    s = Settings()
    assert "--hostname=jobs@%h" in worker_argv(s, "jobs", None, None)
    assert "--hostname=webhooks@%h" in worker_argv(s, "webhooks", None, None)
    assert "--hostname=w1@h" in worker_argv(s, "jobs", None, "w1@h")


def test_the_webhook_worker_runs_threads_so_a_slow_receiver_holds_one() -> None:
    s = Settings()
    hooks = worker_argv(s, "webhooks", None, None)
    assert "--pool=threads" in hooks and f"--concurrency={s.webhooks.concurrency}" in hooks
    assert s.webhooks.concurrency > s.webhooks.per_receiver_concurrency
    assert "--concurrency=3" in worker_argv(s, "webhooks", 3, None)
    for queues in ("jobs", "all"):  # the ingest tasks keep their processes
        argv = worker_argv(s, queues, None, None)
        assert not any(a.startswith("--pool") for a in argv)
        assert f"--concurrency={s.celery.concurrency}" in argv


def test_the_license_is_an_spdx_string_for_setuptools_77() -> None:
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads(Path(__file__).parents[2].joinpath("pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"  # no table: no deprecation warning
    assert "setuptools>=77" in pyproject["build-system"]["requires"]


def test_topics_list_prints_whole_topic_names_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rich.console import Console

    import topics.cli
    from topics.registry import TOPICS, TopicRegistry

    monkeypatch.setattr(topics.cli, "console", Console(width=80, force_terminal=False))
    with topics.cli.console.capture() as captured:
        topics.cli.list_topics()
    out = captured.get()
    reg = TopicRegistry(Settings().kafka.topic_prefix)
    for spec in TOPICS:
        assert reg.name(spec) in out, out
        if spec.consumed:
            assert reg.dlq(spec) in out, out


def test_jobs_show_prints_the_whole_job_id(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    from rich.console import Console

    import ingest.cli
    from ingest import jobs

    job_id = "0b3c8f52-6a4e-4d1e-9c37-2f0d9a1b7e55"
    state = jobs.JobProgress(
        job_id=job_id, tenant="acme", status="running", total=10, done=3, failed=0,
        chunks=40, error=None, created_at=dt.datetime.now(dt.UTC), started_at=None,
        finished_at=None,
    )  # fmt: skip
    monkeypatch.setattr(jobs, "failures", lambda *_: [])
    monkeypatch.setattr(ingest.cli, "console", Console(width=60, force_terminal=False))
    with ingest.cli.console.capture() as captured:
        ingest.cli.print_summary(None, state, 12.0)  # type: ignore[arg-type]
    assert job_id in captured.get()
