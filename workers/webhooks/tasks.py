"""Celery side of webhooks: delivery attempts, ingest-job announcements and the sweeper.

- ``ragstream.webhooks.deliver(delivery_id, attempts=None)``: one attempt per run, the next one
  scheduled with exponential back-off while it may still succeed. ``attempts`` is the number
  of attempts the message expects to have been made; a message that finds more (a duplicate
  sent by the sweeper, a redelivery) does nothing. An attempt first takes a slot of its
  receiver (:mod:`workers.webhooks.slots`, ``webhooks.per_receiver_concurrency``); when the
  receiver has none free the task waits ``webhooks.receiver_busy_retry_s`` (0.5 s), or, when
  the receiver is slow, until its oldest attempt in flight must have ended (plus a jitter of
  up to ``receiver_busy_retry_s``), and tries again,
  without counting an attempt, so a slow or dead receiver holds few of the worker's threads
  and its waiting deliveries do not spin.
- ``ragstream.webhooks.ingest_job_completed(job_id)``: sent by the ingest tasks when a job
  reaches a final status; creates its ``ingest.job.completed`` deliveries (idempotent) and
  schedules them.
- the sweeper: like the ingest watchdog, a daemon thread started in every worker on
  ``worker_ready``; every ``webhooks.sweep_interval_s`` it schedules pending deliveries that
  never got a task (see :mod:`workers.webhooks.outbox`).
"""

from __future__ import annotations

import random
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
from workers.webhooks.delivery import attempt_count, delivery_url, run_attempt
from workers.webhooks.outbox import CeleryScheduler, announce_job, sweep_pending
from workers.webhooks.slots import LEASE_MARGIN_S, ReceiverSlots
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


@lru_cache(maxsize=1)
def _slots() -> ReceiverSlots:
    settings = get_settings()
    cfg = settings.webhooks
    return ReceiverSlots(
        redis.Redis.from_url(settings.redis.url, socket_timeout=5),
        limit=cfg.per_receiver_concurrency,
        lease_s=cfg.timeout_s + LEASE_MARGIN_S,
    )


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _forget_parent_clients(**_: object) -> None:
    """In a forked pool process, drop the parent's SQL pool without closing its connections
    (SQLAlchemy's rule for ``fork``) so this process opens its own."""
    if _sessions.cache_info().currsize:
        _sessions().kw["bind"].dispose(close=False)
    _sessions.cache_clear()
    _scheduler.cache_clear()
    _slots.cache_clear()


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
    url = delivery_url(sessions, delivery_id)
    slots = _slots()
    token, wait_s = (None, 0.0) if url is None else slots.acquire(url)
    if url is not None and token is None:  # the receiver is busy: wait, no attempt made
        jitter = random.uniform(0, cfg.receiver_busy_retry_s)
        countdown = max(cfg.receiver_busy_retry_s, wait_s) + jitter
        raise self.retry(args=[delivery_id, attempts], countdown=countdown)
    try:
        status, _ = run_attempt(
            sessions,
            delivery_id,
            allow=parse_networks(cfg.allow_networks),
            max_attempts=cfg.max_attempts,
            timeout_s=cfg.timeout_s,
        )
    finally:
        if url is not None and token is not None:
            slots.release(url, token)
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
