"""The demo's ingest record tells the truth (issue 53, item 4): after a real Celery bulk job, its
chunks and definition entries are what the index holds, and a second job over the same pages
(every page unchanged) is no full ingest for the summary."""

from __future__ import annotations

import pytest
from elasticsearch import Elasticsearch

from bench.demo_ingest import build_record, format_line, job_counts, job_seconds
from index.schema import CHUNKS_ONLY, DEFINITIONS_ONLY
from ingest import jobs
from tests.integration.kafkakit import wait_for
from tests.integration.test_ingest_jobs import PG_HTML, Env, _files, _stop, _submit
from tests.integration.test_ingest_jobs import env as env  # noqa: PLC0414 - the fixture

pytestmark = pytest.mark.skipif(not PG_HTML.is_dir(), reason="postgresql-doc-15 not installed")


def _count(env: Env, query: dict[str, object]) -> int:
    es = Elasticsearch(env.settings.elasticsearch.url)
    try:
        alias = env.settings.elasticsearch.index_alias
        es.indices.refresh(index=alias)
        tenant = {"bool": {"filter": [query, {"term": {"tenant": "acme"}}]}}
        return int(es.count(index=alias, query=tenant)["count"])
    finally:
        es.close()


def test_the_record_counts_what_the_index_holds_and_a_rerun_is_not_full(env: Env) -> None:
    worker = env.spawn("celery-worker", log="worker.log")
    try:
        assert wait_for(lambda: "ready" in env.log("worker.log"), 90), env.log("worker.log")
        files = _files(6)
        sessions, job_id = _submit(env, files)
        assert wait_for(lambda: jobs.progress(sessions, job_id).finished, 240)
        seconds = job_seconds(sessions, job_id)
        assert seconds is not None and seconds > 0
        record = build_record(
            job_counts(sessions, job_id), seconds, job_id=job_id, status="succeeded"
        )
        assert (record["pages"], record["indexed"], record["unchanged"]) == (6, 6, 0)
        assert record["chunks"] == _count(env, CHUNKS_ONLY) > 6
        assert record["definition_entries"] == _count(env, DEFINITIONS_ONLY) > 0
        assert record["full"] and f"{record['entries']} entries" in format_line(record)

        sessions, again = _submit(env, files)
        assert wait_for(lambda: jobs.progress(sessions, again).finished, 120)
        rerun = job_counts(sessions, again)
        assert (rerun["unchanged"], rerun["chunks"], rerun["definition_entries"]) == (6, 0, 0)
        assert not build_record(rerun, 1.0, job_id=again, status="succeeded")["full"]
    finally:
        _stop(worker)
