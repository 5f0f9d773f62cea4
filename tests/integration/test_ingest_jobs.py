"""Celery bulk jobs with a real worker, Redis broker, Elasticsearch and SQL; Flower's API."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from elasticsearch import Elasticsearch
from sqlalchemy import select

from index.schema import CHUNKS_ONLY, DEFINITION_ENTRY
from ingest import jobs
from ingest.sources import SourceFile
from ragstream.celery_app import configure_celery
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import Document, IngestJobItem
from ragstream.settings import PROJECT_ROOT, Settings
from tests.integration.kafkakit import wait_for

PG_HTML = Path("/usr/share/doc/postgresql-doc-15/html")
pytestmark = pytest.mark.skipif(not PG_HTML.is_dir(), reason="postgresql-doc-15 not installed")


@dataclass
class Env:
    settings: Settings
    env: dict[str, str]
    tmp: Path

    def spawn(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        with (self.tmp / log).open("ab") as out:  # the child keeps its own descriptor
            return subprocess.Popen(
                [sys.executable, "-m", "entry.cli", *args],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=out,
                start_new_session=True,  # own process group: SIGKILL takes pool children too
            )

    def log(self, name: str) -> str:
        return (self.tmp / name).read_text(errors="replace")


@pytest.fixture
def env(
    unique_name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    name = unique_name("job")
    values = {
        "RAGSTREAM_DATABASE__URL": f"sqlite:///{tmp_path / 'meta.db'}",
        "RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS": name,
        "RAGSTREAM_CELERY__QUEUE": name,
        "RAGSTREAM_EMBEDDING__CACHE_KEY_PREFIX": f"{name}:emb:",
        "RAGSTREAM_INGEST__JOB_BATCH_SIZE": "4",
        "RAGSTREAM_INGEST__JOB_STALE_AFTER_S": "8",
        "RAGSTREAM_INGEST__JOB_WATCHDOG_INTERVAL_S": "2",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    settings = Settings()
    upgrade_head(settings.database_url)
    configure_celery(settings)
    yield Env(settings, values, tmp_path)
    es = Elasticsearch(settings.elasticsearch.url)
    es.indices.delete(index=f"{name}-v*", allow_no_indices=True)
    es.close()


def _in_flight(log: str) -> bool:
    """Whether a worker's log ends with a batch task received and not finished: the kill landed
    mid-batch. It can land between two batches (the last received one succeeded): then nothing
    was lost and the next worker finishes the queued batches without the watchdog (one CI run in
    several, 2026-12-02)."""
    received = re.findall(r"ingest_batch\[([\w-]+)\] received", log)
    finished = set(re.findall(r"ingest_batch\[([\w-]+)\] (?:succeeded|failed|raised)", log))
    return any(task not in finished for task in received)


def _files(n: int) -> list[SourceFile]:
    pages = sorted(PG_HTML.glob("sql-*.html"))[:n]
    return [SourceFile(str(p), str(p)) for p in pages]


def _submit(env: Env, files: list[SourceFile]) -> tuple[Any, str]:
    from ingest.tasks import run_job

    sessions = make_session_factory(make_engine(env.settings.database_url))
    job_id = jobs.create_job(sessions, "acme", files)
    run_job.delay(job_id)
    return sessions, job_id


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _no_duplicate_chunks(env: Env, sessions: Any) -> int:
    es = Elasticsearch(env.settings.elasticsearch.url)
    alias = env.settings.elasticsearch.index_alias
    es.indices.refresh(index=alias)
    with sessions() as session:
        rows = list(session.scalars(select(Document).where(Document.tenant == "acme")))
    for row in rows:
        res = es.search(
            index=alias,
            query={
                "bool": {"filter": [{"term": {"tenant": "acme"}}, {"term": {"doc_id": row.doc_id}}]}
            },
            size=1000,
            source=["version", "chunk_id", "entry"],
        )
        hits = res["hits"]["hits"]  # its chunks and its definition entries
        chunks = [h for h in hits if h["_source"].get("entry") != DEFINITION_ENTRY]
        assert len(chunks) == row.chunk_count, row.doc_id
        if row.status == "failed":  # recorded with its reason, never indexed: no chunk
            assert hits == [], row.doc_id
            continue
        assert {h["_source"]["version"] for h in hits} == {row.version}
        assert sorted(h["_id"] for h in hits) == sorted(row.chunk_ids)
    total = int(es.count(index=alias, query=CHUNKS_ONLY)["count"])  # chunks, as jobs count
    es.close()
    return total


def test_bulk_job_with_a_corrupt_file_retry_and_flower(
    env: Env, unique_name: Callable[[str], str]
) -> None:
    bad_dir = PROJECT_ROOT / ".local" / "ingest" / unique_name("bad")
    bad_dir.mkdir(parents=True)
    broken = bad_dir / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n this is not a pdf \x00\x01\x02")
    port = 5600 + os.getpid() % 300
    flower = env.spawn("flower", "--port", str(port), log="flower.log")
    worker = env.spawn("celery-worker", log="worker.log")
    try:
        assert wait_for(lambda: "ready" in env.log("worker.log"), 90), env.log("worker.log")
        files = [*_files(10), SourceFile(str(broken), str(broken))]
        sessions, job_id = _submit(env, files)
        assert wait_for(lambda: jobs.progress(sessions, job_id).finished, 240)
        state = jobs.progress(sessions, job_id)
        assert state.status == "completed_with_failures"
        assert (state.total, state.done, state.failed) == (11, 10, 1)
        assert state.chunks > 10
        [(path, error)] = jobs.failures(sessions, job_id)
        assert path == str(broken) and "pdf" in error.lower()
        assert _no_duplicate_chunks(env, sessions) == state.chunks

        # Retry re-runs only the failed document.
        from ingest.tasks import enqueue_batches

        assert jobs.reset_failed(sessions, job_id) == 1
        enqueue_batches(job_id, jobs.pending_item_ids(sessions, job_id), 4)
        assert wait_for(lambda: jobs.progress(sessions, job_id).finished, 60)
        with sessions() as session:
            attempts = {i.path: i.attempts for i in session.scalars(select(IngestJobItem))}
        assert attempts[str(broken)] == 2
        assert all(a == 1 for p, a in attempts.items() if p != str(broken))

        # Flower lists the worker and the job's tasks under their names.
        workers = _get(f"http://127.0.0.1:{port}/api/workers?refresh=1")
        # Named by what it serves (`<queues>@host`), so Flower tells the workers apart.
        assert any(name.startswith("all@") for name in workers), workers
        tasks = _get(f"http://127.0.0.1:{port}/api/tasks")
        names = {t["name"] for t in tasks.values()}
        assert {"ragstream.ingest.run_job", "ragstream.ingest.ingest_batch"} <= names
    finally:
        _stop(worker)
        _stop(flower)


def test_killed_worker_job_finishes_after_restart_without_duplicates(env: Env) -> None:
    worker = env.spawn("celery-worker", log="w1.log")
    try:
        assert wait_for(lambda: "ready" in env.log("w1.log"), 90)
        sessions, job_id = _submit(env, _files(40))
        assert wait_for(lambda: jobs.progress(sessions, job_id).done >= 8, 240)
        _stop(worker, signal.SIGKILL)  # mid-job: a batch task dies unacknowledged
        mid = jobs.progress(sessions, job_id)
        assert mid.status == "running" and mid.done < 40
        time.sleep(3)
        worker = env.spawn("celery-worker", log="w2.log")
        assert wait_for(lambda: jobs.progress(sessions, job_id).finished, 300), env.log("w2.log")
        state = jobs.progress(sessions, job_id)
        assert (state.status, state.done, state.failed) == ("succeeded", 40, 0)
        if _in_flight(env.log("w1.log")):  # a batch died with the worker: only the watchdog
            assert "job.resumed_by_watchdog" in env.log("w2.log")  # could have finished it
        assert _no_duplicate_chunks(env, sessions) == state.chunks
    finally:
        _stop(worker)
