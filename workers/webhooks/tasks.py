"""Celery side of webhooks: delivery attempts, ingest-job announcements and the sweeper.

- ``ragstream.webhooks.deliver(delivery_id, attempts=None)``: one attempt per run, the next one
  scheduled with exponential back-off while it may still succeed. ``attempts`` is the number
  of attempts the message expects to have been made; a message that finds more (a duplicate
  sent by the sweeper, a redelivery) does nothing.
- ``ragstream.webhooks.ingest_job_completed(job_id)``: sent by the ingest tasks when a job
  reaches a final status; creates its ``ingest.job.completed`` deliveries (idempotent) and
  schedules them.
- the sweeper: like the ingest watchdog, a daemon thread started in every worker on
  ``worker_ready``; every ``webhooks.sweep_interval_s`` it schedules pending deliveries that
  never got a task (see :mod:`workers.webhooks.outbox`).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

import redis
import structlog
from celery.signals import worker_process_init, worker_ready
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from ingest.jobs import JOB_COMPLETED_TASK
from ragstream.celery_app import RetryingTask, celery_app
from ragstream.retry import RetryPolicy
from ragstream.settings import WebhookSettings, get_settings
from workers.webhooks.delivery import attempt_count, run_attempt
from workers.webhooks.outbox import CeleryScheduler, announce_job, sweep_pending
from workers.webhooks.ssrf import parse_networks

log = structlog.get_logger(__name__)


@lru_cache(maxsize=1)
def _sessions() -> sessionmaker[Session]:
    from ragstream.db.engine import make_engine, make_session_factory

    return make_session_factory(make_engine(get_settings().database_url))


@lru_cache(maxsize=1)
def _scheduler() -> CeleryScheduler:
    settings = get_settings()
    return CeleryScheduler(
        redis.Redis.from_url(settings.redis.url),
        marker_ttl_s=settings.webhooks.schedule_marker_ttl_s,
        app=celery_app,
    )


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _forget_parent_clients(**_: object) -> None:
    """In a forked pool process, drop the parent's SQL pool without closing its connections
    (SQLAlchemy's rule for ``fork``) so this process opens its own."""
    if _sessions.cache_info().currsize:
        _sessions().kw["bind"].dispose(close=False)
    _sessions.cache_clear()
    _scheduler.cache_clear()


def retry_policy(cfg: WebhookSettings) -> RetryPolicy:
    """The deliveries' retry policy: ``cfg.max_attempts`` attempts, back-off from
    ``cfg.backoff_base_s`` doubling up to ``cfg.backoff_cap_s``, no jitter."""
    return RetryPolicy(
        max_attempts=cfg.max_attempts,
        base_ms=cfg.backoff_base_s * 1000,
        cap_ms=cfg.backoff_cap_s * 1000,
        jitter=False,
    )


@celery_app.task(name="ragstream.webhooks.deliver", bind=True, acks_late=True, max_retries=None)  # type: ignore[untyped-decorator]
def deliver(self: Any, delivery_id: int, attempts: int | None = None) -> str:
    """Attempt delivery ``delivery_id``; schedule the next attempt if it may succeed later.

    Returns ``succeeded`` or ``failed`` (final), or ``stale`` when the message expected fewer
    attempts than were made (a duplicate). While the delivery may still succeed, the task is
    retried instead, with ``attempts`` set to the attempts made so far.
    """
    cfg = get_settings().webhooks
    sessions = _sessions()
    if attempts is not None and attempt_count(sessions, delivery_id) != attempts:
        return "stale"
    policy = retry_policy(cfg)
    status, _ = run_attempt(
        sessions,
        delivery_id,
        allow=parse_networks(cfg.allow_networks),
        max_attempts=cfg.max_attempts,
        timeout_s=cfg.timeout_s,
    )
    if status == "retry":
        made = attempt_count(sessions, delivery_id) or 1
        raise self.retry(args=[delivery_id, made], countdown=policy.delay_ms(made) / 1000)
    return status


@celery_app.task(  # type: ignore[untyped-decorator]
    name=JOB_COMPLETED_TASK, base=RetryingTask, autoretry_for=(SQLAlchemyError,)
)
def ingest_job_completed(job_id: str) -> int:
    """Create and schedule the ``ingest.job.completed`` deliveries of job ``job_id``.

    Idempotent (stable webhook ids); returns how many deliveries were created.
    """
    created = announce_job(_sessions(), job_id)
    _scheduler().schedule(created)
    return len(created)


def sweep_once() -> int:
    """One sweep with the process settings; returns how many deliveries were scheduled."""
    cfg = get_settings().webhooks
    sent = sweep_pending(_sessions(), _scheduler(), older_than_s=cfg.sweep_after_s)
    if sent:
        log.warning("webhook.swept", scheduled=len(sent))
    return len(sent)


def _sweeper_loop(stop: threading.Event) -> None:
    while True:
        try:
            sweep_once()
        except Exception as exc:  # the sweeper must outlive a database or broker hiccup
            log.error("webhook.sweeper_error", error=f"{type(exc).__name__}: {exc}")
        if stop.wait(get_settings().webhooks.sweep_interval_s):
            return


_SWEEPER_STOP = threading.Event()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _start_sweeper(**_: object) -> None:
    if get_settings().webhooks.sweep_interval_s <= 0:
        return
    threading.Thread(
        target=_sweeper_loop, args=(_SWEEPER_STOP,), name="webhook-sweeper", daemon=True
    ).start()
