"""Celery tasks of bulk ingestion: thin wrappers that take ids and call the same pipeline as
the stream path.

- ``ragstream.ingest.run_job(job_id)`` fans the job's pending items out into batches;
- ``ragstream.ingest.ingest_batch(job_id, item_ids)`` ingests one batch. It is idempotent
  (items already done are skipped; the pipeline skips unchanged content and writes
  deterministic chunk ids), so it acknowledges late and is redelivered if its worker dies;
- a watchdog thread in every worker resumes running jobs whose heartbeat went stale (their
  workers died) by re-enqueueing their pending items, and fails them with a reason after
  ``ingest.job_max_resumes`` resumes;
- whichever of these moves a job to its final status sends ``jobs.JOB_COMPLETED_TASK`` (by
  name) so the webhook layer announces ``ingest.job.completed`` to the job's callback URL and
  the tenant's endpoints.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import structlog
from celery.signals import worker_ready
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ingest import jobs
from ingest.ops import IngestOp, op_from_item
from ingest.pipeline import IngestPipeline
from ingest.sources import SourceRejectedError
from ragstream.celery_app import RetryingTask, celery_app
from ragstream.db.models import IngestJob, IngestJobItem, utcnow
from ragstream.errors import TransientError
from ragstream.settings import Settings, get_settings

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Context:
    settings: Settings
    sessions: sessionmaker[Session]


@lru_cache(maxsize=1)
def _context() -> _Context:
    from ragstream.db.engine import make_engine, make_session_factory

    settings = get_settings()
    return _Context(settings, make_session_factory(make_engine(settings.database_url)))


@lru_cache(maxsize=1)
def _pipeline() -> IngestPipeline:
    """The worker process's pipeline (model loaded once per process, on first use)."""
    from ingest.factory import build_pipeline

    return build_pipeline(_context().settings)


def enqueue_batches(job_id: str, item_ids: list[int], size: int) -> int:
    """Send ``ingest_batch`` tasks of at most ``size`` items; return how many were sent."""
    n = 0
    for start in range(0, len(item_ids), size):
        ingest_batch.delay(job_id, item_ids[start : start + size])
        n += 1
    return n


def announce_finished(job_id: str) -> None:
    """Ask the webhook layer to announce that job ``job_id`` finished (never raises: a broker
    error is logged; the job's state in SQL is unaffected)."""
    try:
        celery_app.send_task(jobs.JOB_COMPLETED_TASK, args=[job_id])
    except Exception as exc:
        log.error("job.announce_failed", job_id=job_id, error=f"{type(exc).__name__}: {exc}")


@celery_app.task(name="ragstream.ingest.run_job", acks_late=True)  # type: ignore[untyped-decorator]
def run_job(job_id: str) -> dict[str, Any]:
    """Fan a job out into batch tasks. Idempotent: only pending items are sent."""
    ctx = _context()
    jobs.mark_running(ctx.sessions, job_id)
    pending = jobs.pending_item_ids(ctx.sessions, job_id)
    batches = enqueue_batches(job_id, pending, ctx.settings.ingest.job_batch_size)
    if not pending and jobs.refresh_counters(ctx.sessions, job_id).finished_now:
        announce_finished(job_id)
    log.info("job.fanned_out", job_id=job_id, items=len(pending), batches=batches)
    return {"job_id": job_id, "items": len(pending), "batches": batches}


@celery_app.task(  # type: ignore[untyped-decorator]
    name="ragstream.ingest.ingest_batch", base=RetryingTask, autoretry_for=(TransientError,)
)
def ingest_batch(job_id: str, item_ids: list[int]) -> dict[str, Any]:
    """Ingest the still-pending items among ``item_ids`` and update the job's progress."""
    ctx = _context()
    with ctx.sessions() as session:
        job = session.get(IngestJob, job_id)
        if job is None or job.status == "failed":
            return {"job_id": job_id, "skipped": len(item_ids)}
        tenant = job.tenant
        stmt = select(IngestJobItem).where(
            IngestJobItem.id.in_(item_ids), IngestJobItem.status == "pending"
        )
        items = list(session.scalars(stmt))
    stop_beat = _start_heartbeat(ctx, job_id)
    try:
        results = _ingest_items(ctx, tenant, items)
    except Exception as exc:  # kept on the items, so the watchdog's reason names it
        error = f"batch failed: {type(exc).__name__}: {exc}"
        jobs.note_batch_error(ctx.sessions, [item.id for item in items], error)
        raise
    finally:
        stop_beat.set()
    _record(ctx.sessions, results)
    progress = jobs.refresh_counters(ctx.sessions, job_id)
    if progress.finished_now:
        announce_finished(job_id)
    return {"job_id": job_id, "items": len(results), "status": progress.status}


def _start_heartbeat(ctx: _Context, job_id: str) -> threading.Event:
    """Beat the job's heartbeat every third of the stale limit while a batch runs, so the
    watchdog never mistakes a long batch for a dead worker."""
    stop = threading.Event()
    interval = max(1.0, ctx.settings.ingest.job_stale_after_s / 3)

    def beat() -> None:
        while not stop.wait(interval):
            try:
                jobs.beat(ctx.sessions, job_id)
            except Exception as exc:  # a missed beat is not fatal
                log.warning("job.heartbeat_failed", job_id=job_id, error=str(exc))

    jobs.beat(ctx.sessions, job_id)
    threading.Thread(target=beat, name=f"heartbeat-{job_id[:8]}", daemon=True).start()
    return stop


def _ingest_items(
    ctx: _Context, tenant: str, items: list[IngestJobItem]
) -> dict[int, tuple[str, int, str | None]]:
    """Read and ingest ``items``; ``{item id: (status, chunks, error)}``."""
    results: dict[int, tuple[str, int, str | None]] = {}
    ops: list[tuple[int, IngestOp]] = []
    readers = jobs.job_readers(ctx.sessions, items[0].job_id) if items else None
    for item in items:
        try:
            ops.append((item.id, op_from_item(tenant, item, ctx.settings.ingest, readers)))
        except SourceRejectedError as exc:
            results[item.id] = ("failed", 0, _as_filed(str(exc), item))
    if ops:
        by_id = {item.id: item for item in items}
        outcomes = _pipeline().apply([op for _, op in ops])
        for (item_id, _), outs in zip(ops, outcomes, strict=True):
            failed = [o for o in outs if o.status == "failed"]
            status = "failed" if failed else (outs[0].status if len(outs) == 1 else "indexed")
            error = "; ".join(o.error or "" for o in failed) or None
            if error is not None:
                error = _as_filed(error, by_id[item_id])
            results[item_id] = (status, sum(o.chunk_count for o in outs), error)
    return results


def _as_filed(error: str, item: IngestJobItem) -> str:
    """``error`` with the item's server path written as its document id (an archive's member:
    ``<archive>/<member>``; no message shows the server's folder)."""
    if item.doc_id and item.doc_id != item.path:
        return error.replace(item.path, item.doc_id)
    return error


def _record(
    sessions: sessionmaker[Session], results: dict[int, tuple[str, int, str | None]]
) -> None:
    with sessions.begin() as session:
        for item_id, (status, chunks, error) in results.items():
            item = session.get(IngestJobItem, item_id)
            if item is None:
                continue
            item.status = status
            item.chunk_count = chunks
            item.error = error
            item.attempts += 1
            item.updated_at = utcnow()


def reap_stale_jobs(settings: Settings, sessions: sessionmaker[Session]) -> list[str]:
    """Resume (or fail, after ``job_max_resumes``) running jobs with a stale heartbeat.

    Returns the ids of the jobs it acted on.
    """
    acted = []
    for job in jobs.stale_jobs(sessions, settings.ingest.job_stale_after_s):
        pending = jobs.pending_item_ids(sessions, job.id)
        if not pending:
            if jobs.refresh_counters(sessions, job.id).finished_now:
                announce_finished(job.id)
            acted.append(job.id)
            continue
        if job.resumes >= settings.ingest.job_max_resumes:
            cause = jobs.pending_error(sessions, job.id)
            reason = (
                f"no progress for {settings.ingest.job_stale_after_s}s after "
                f"{job.resumes} resume(s); {len(pending)} document(s) never finished"
                + (
                    f"; their last {cause}"
                    if cause
                    else " and no batch task reported an error (are the Celery workers running?)"
                )
            )
            if jobs.fail_job(sessions, job.id, reason):
                announce_finished(job.id)
            log.error("job.failed_by_watchdog", job_id=job.id, pending=len(pending))
        else:
            resumes = jobs.record_resume(sessions, job.id)
            enqueue_batches(job.id, pending, settings.ingest.job_batch_size)
            log.warning(
                "job.resumed_by_watchdog", job_id=job.id, pending=len(pending), resumes=resumes
            )
        acted.append(job.id)
    return acted


def _watchdog_loop(stop: threading.Event) -> None:
    ctx = _context()
    while True:
        try:
            reap_stale_jobs(ctx.settings, ctx.sessions)
        except Exception as exc:  # the watchdog must outlive a database hiccup
            log.error("job.watchdog_error", error=f"{type(exc).__name__}: {exc}")
        if stop.wait(ctx.settings.ingest.job_watchdog_interval_s):
            return


_WATCHDOG_STOP = threading.Event()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _start_watchdog(**_: object) -> None:
    threading.Thread(
        target=_watchdog_loop, args=(_WATCHDOG_STOP,), name="job-watchdog", daemon=True
    ).start()
