"""Bulk ingestion jobs in SQL: create, progress, per-document status, retry and the watchdog.

A job is a row in ``ingest_jobs`` and one row per document in ``ingest_job_items``. Celery
tasks (:mod:`ingest.tasks`) carry only the job id and item ids. Counters are recomputed from
the items after every batch, so a redelivered task can never double-count.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from ingest.sources import SourceFile
from ragstream.db.acl import from_column, to_column
from ragstream.db.models import FINAL_JOB_STATUSES, IngestJob, IngestJobItem, as_utc, utcnow
from ragstream.db.pages import newest_first
from ragstream.job_status import JOB_STATUSES

DONE_STATUSES = ("indexed", "unchanged", "deleted")
#: Celery task sent (by name, with the job id) when a job reaches a final status; the webhook
#: tasks (``workers.webhooks.tasks``) implement it. Sending by name keeps ``ingest`` free of
#: imports from the layers above it.
JOB_COMPLETED_TASK = "ragstream.webhooks.ingest_job_completed"


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A job's state: document counts, chunks written, and timing."""

    job_id: str
    tenant: str
    status: str
    total: int
    done: int
    failed: int
    chunks: int
    error: str | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    #: True when the call that returned this progress moved the job to its final status.
    finished_now: bool = False

    @property
    def finished(self) -> bool:
        """True once the job reached a final status."""
        return self.status in FINAL_JOB_STATUSES


def create_job(
    sessions: sessionmaker[Session],
    tenant: str,
    files: Sequence[SourceFile],
    callback_url: str | None = None,
    job_id: str | None = None,
    *,
    rejected: Sequence[tuple[str, str]] = (),
    readers: Sequence[str] | None = None,
) -> str:
    """Insert a pending job with one item per file; return the job id (``job_id``, else a new
    UUID4 string). ``readers``: the principals who may read every document of the job
    (normalised, :func:`topics.acl.normalise_readers`); ``None``: everyone of the tenant (a
    document indexed before keeps its readers).

    ``rejected`` holds ``(printable path, reason)`` of files the job was given but cannot
    read (an archive member whose name is not UTF-8): each is an item ``failed`` from the
    start with its reason, so it fails alone and shows in the job's failures."""
    job_id = job_id or str(uuid.uuid4())
    with sessions.begin() as session:
        session.add(
            IngestJob(
                id=job_id,
                tenant=tenant,
                total_documents=len(files) + len(rejected),
                failed_documents=len(rejected),
                callback_url=callback_url,
                readers=to_column(readers),
            )
        )
        session.add_all(
            IngestJobItem(
                job_id=job_id, path=f.path, doc_id=f.doc_id, title=f.title, metadata_=f.metadata
            )
            for f in files
        )
        session.add_all(
            IngestJobItem(job_id=job_id, path=path, status="failed", error=reason, metadata_={})
            for path, reason in rejected
        )
    return job_id


def job_readers(sessions: sessionmaker[Session], job_id: str) -> tuple[str, ...] | None:
    """The readers every document of job ``job_id`` gets (``None``: keep / everyone)."""
    with sessions() as session:
        job = session.get(IngestJob, job_id)
        return None if job is None else from_column(job.readers)


def pending_item_ids(sessions: sessionmaker[Session], job_id: str) -> list[int]:
    """Ids of the job's items still pending, in insertion order."""
    with sessions() as session:
        stmt = (
            select(IngestJobItem.id)
            .where(IngestJobItem.job_id == job_id, IngestJobItem.status == "pending")
            .order_by(IngestJobItem.id)
        )
        return list(session.scalars(stmt))


def note_batch_error(sessions: sessionmaker[Session], item_ids: list[int], error: str) -> None:
    """Keep ``error`` (why their batch task raised) on the items of ``item_ids`` still pending;
    they stay pending, so a resume retries them, and the watchdog can name the cause."""
    with sessions.begin() as session:
        for item in session.scalars(
            select(IngestJobItem).where(
                IngestJobItem.id.in_(item_ids), IngestJobItem.status == "pending"
            )
        ):
            item.error = error[:4000]
            item.attempts += 1


def pending_error(sessions: sessionmaker[Session], job_id: str) -> str | None:
    """The last error kept on a pending item of the job (:func:`note_batch_error`), if any."""
    with sessions() as session:
        return session.scalars(
            select(IngestJobItem.error)
            .where(
                IngestJobItem.job_id == job_id,
                IngestJobItem.status == "pending",
                IngestJobItem.error.is_not(None),
            )
            .order_by(IngestJobItem.updated_at.desc(), IngestJobItem.id.desc())
            .limit(1)
        ).first()


def mark_running(sessions: sessionmaker[Session], job_id: str) -> None:
    """Set the job running (keeping its first ``started_at``) and beat its heartbeat."""
    now = utcnow()
    with sessions.begin() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        job.status = "running"
        job.started_at = job.started_at or now
        job.heartbeat_at = now
        job.finished_at = None


def beat(sessions: sessionmaker[Session], job_id: str) -> None:
    """Record that a worker is alive and working on the job."""
    with sessions.begin() as session:
        job = session.get(IngestJob, job_id)
        if job is not None:
            job.heartbeat_at = utcnow()


def refresh_counters(sessions: sessionmaker[Session], job_id: str) -> JobProgress:
    """Recompute the job's counters from its items; finish it when nothing is pending."""
    with sessions.begin() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        counts = dict(
            session.execute(
                select(IngestJobItem.status, func.count())
                .where(IngestJobItem.job_id == job_id)
                .group_by(IngestJobItem.status)
            ).all()
        )
        chunks = session.scalar(
            select(func.coalesce(func.sum(IngestJobItem.chunk_count), 0)).where(
                IngestJobItem.job_id == job_id, IngestJobItem.status == "indexed"
            )
        )
        job.done_documents = sum(counts.get(s, 0) for s in DONE_STATUSES)
        job.failed_documents = counts.get("failed", 0)
        job.chunk_count = int(chunks or 0)
        job.heartbeat_at = utcnow()
        finished_now = counts.get("pending", 0) == 0 and job.status == "running"
        if finished_now:
            job.status = "completed_with_failures" if job.failed_documents else "succeeded"
            job.finished_at = utcnow()
        return _progress(job, finished_now=finished_now)


def progress(sessions: sessionmaker[Session], job_id: str) -> JobProgress:
    """The job's current progress.

    Raises:
        KeyError: no such job.
    """
    with sessions() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        return _progress(job)


def recent_jobs(
    sessions: sessionmaker[Session],
    *,
    limit: int = 20,
    status: str | None = None,
    tenant: str | None = None,
) -> list[JobProgress]:
    """The newest ``limit`` jobs (by ``created_at``, newest first), optionally only those of
    ``status`` and of ``tenant``.

    Raises:
        ValueError: ``status`` is not one of :data:`JOB_STATUSES`, or ``limit`` < 1.
    """
    if status is not None and status not in JOB_STATUSES:
        raise ValueError(f"status must be one of {', '.join(JOB_STATUSES)}, not {status!r}")
    if limit < 1:
        raise ValueError("limit must be at least 1")
    stmt = select(IngestJob).order_by(IngestJob.created_at.desc(), IngestJob.id).limit(limit)
    if status is not None:
        stmt = stmt.where(IngestJob.status == status)
    if tenant is not None:
        stmt = stmt.where(IngestJob.tenant == tenant)
    with sessions() as session:
        return [_progress(job) for job in session.scalars(stmt)]


def page_jobs(
    sessions: sessionmaker[Session],
    tenant: str,
    *,
    limit: int,
    before: tuple[dt.datetime, str] | None = None,
) -> list[JobProgress]:
    """Up to ``limit`` of ``tenant``'s jobs, newest first by ``(created_at, id)``, those
    after the sort key ``before`` of the previous page's last job (keyset pagination)."""
    stmt = newest_first(
        select(IngestJob).where(IngestJob.tenant == tenant),
        IngestJob.created_at,
        IngestJob.id,
        limit=limit,
        before=before,
    )
    with sessions() as session:
        return [_progress(job) for job in session.scalars(stmt)]


def failures(sessions: sessionmaker[Session], job_id: str) -> list[tuple[str, str]]:
    """``(name, error)`` of every failed item of the job: its document id when it has one
    (an archive's member: ``<archive>/<member>``, not the server's folder), else its path."""
    with sessions() as session:
        stmt = select(IngestJobItem.path, IngestJobItem.doc_id, IngestJobItem.error).where(
            IngestJobItem.job_id == job_id, IngestJobItem.status == "failed"
        )
        return [(d or p, e or "") for p, d, e in session.execute(stmt).all()]


def reset_failed(sessions: sessionmaker[Session], job_id: str) -> int:
    """Set the job's failed items back to pending and the job to running; return how many."""
    with sessions.begin() as session:
        n = session.execute(  # an UPDATE returns a CursorResult
            update(IngestJobItem)
            .where(IngestJobItem.job_id == job_id, IngestJobItem.status == "failed")
            .values(status="pending", error=None)
        ).rowcount  # type: ignore[attr-defined]
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        if n:
            job.status = "running"
            job.finished_at = None
            job.heartbeat_at = utcnow()
        return int(n or 0)


def stale_jobs(sessions: sessionmaker[Session], older_than_s: float) -> list[IngestJob]:
    """Running jobs whose heartbeat is older than ``older_than_s`` seconds."""
    cutoff = utcnow() - dt.timedelta(seconds=older_than_s)
    with sessions() as session:
        stmt = select(IngestJob).where(IngestJob.status == "running")
        return [j for j in session.scalars(stmt) if as_utc(j.heartbeat_at or j.created_at) < cutoff]


def record_resume(sessions: sessionmaker[Session], job_id: str) -> int:
    """Count one watchdog resume of the job and beat its heartbeat; return the resume count."""
    with sessions.begin() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        job.resumes += 1
        job.heartbeat_at = utcnow()
        return job.resumes


def fail_job(sessions: sessionmaker[Session], job_id: str, reason: str) -> bool:
    """Mark the job failed with ``reason`` (its items keep their status).

    Returns True if the job was not final before (this call finished it).
    """
    with sessions.begin() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise KeyError(job_id)
        was_final = job.status in FINAL_JOB_STATUSES
        job.status = "failed"
        job.error = reason
        job.finished_at = utcnow()
        return not was_final


#: :func:`ragstream.db.models.as_utc` under the name the CLI (``ingest/cli.py``) and the query log
#: use (defined once, in the kernel; the name stays while other branches still write it).
aware = as_utc


def _progress(job: IngestJob, *, finished_now: bool = False) -> JobProgress:
    return JobProgress(
        job.id,
        job.tenant,
        job.status,
        job.total_documents,
        job.done_documents,
        job.failed_documents,
        job.chunk_count,
        job.error,
        job.created_at,
        job.started_at,
        job.finished_at,
        finished_now,
    )
