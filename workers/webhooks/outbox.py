"""The webhook outbox: delivery rows written with the fact they announce, then scheduled.

``query.completed`` deliveries are rows of ``webhook_deliveries`` added *in the same SQL
transaction* as the query log's first final response, so a crash between the two cannot lose
or double a webhook. ``ingest.job.completed`` deliveries are added by the Celery task
``ragstream.webhooks.ingest_job_completed`` that the ingest tasks send once a job is final
(``ingest`` does not import the API layer); the task is idempotent, since the webhook ids are
stable. Only after the commit is the Celery task
``ragstream.webhooks.deliver`` sent for each new row (:class:`CeleryScheduler`). If the broker
is unreachable then, the row simply stays ``pending`` with no attempt, and the sweeper
(:func:`sweep_pending`, run by every Celery worker) schedules it later.

Each scheduled delivery is marked in Redis (``ragstream:webhooks:queued:<webhook_id>``, for
``schedule_marker_ttl_s``), so a delivery that waits in a long queue (a bulk ingest job ahead
of it) is not sent again by the sweeper; the marker is claimed with ``SET NX``, so several
workers sweeping at once schedule a delivery once. A task message also names the number of
attempts it expects to find, so a duplicate message that arrives late changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.models import (
    FINAL_JOB_STATUSES,
    IngestJob,
    IngestJobItem,
    WebhookDelivery,
    utcnow,
)
from topics.responses import QueryResponse
from workers.webhooks import events
from workers.webhooks.endpoints import targets_in

log = structlog.get_logger(__name__)

DELIVER_TASK = "ragstream.webhooks.deliver"
MARKER_PREFIX = "ragstream:webhooks:queued:"


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """A delivery to create: stable ``webhook_id``, where to, and the JSON payload;
    ``endpoint_id`` is the registered endpoint (``None``: a ``callback_url``)."""

    webhook_id: str
    tenant: str
    event_type: str
    url: str
    payload: dict[str, Any]
    endpoint_id: str | None = None


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A delivery row to (re)schedule: its primary key and its webhook id."""

    delivery_id: int
    webhook_id: str


def _targets(
    session: Session, tenant: str, event_type: str, callback: str | None
) -> dict[str, str | None]:
    """``{url: endpoint id or None}``: the callback URL (if any) first, then the tenant's
    endpoints for ``event_type``; each URL once, so a callback that is also a registered
    endpoint is posted to once, signed with that endpoint's key."""
    found: dict[str, str | None] = {callback: None} if callback else {}
    for endpoint in targets_in(session, tenant, event_type):
        if found.get(endpoint.url) is None:
            found[endpoint.url] = endpoint.id
    return found


def plan(
    session: Session,
    *,
    event_type: str,
    tenant: str,
    subject: str,
    callback_url: str | None,
    payload: dict[str, Any],
) -> list[NewDelivery]:
    """One :class:`NewDelivery` per target URL of an event (callback and endpoints)."""
    return [
        NewDelivery(
            events.webhook_id(event_type, tenant, subject, url),
            tenant,
            event_type,
            url,
            payload,
            endpoint_id,
        )
        for url, endpoint_id in _targets(session, tenant, event_type, callback_url).items()
    ]


def add_deliveries(session: Session, planned: Sequence[NewDelivery]) -> list[Scheduled]:
    """Insert the planned deliveries whose webhook id is new; return the inserted rows.

    Runs inside the caller's transaction (flushes, never commits). An id that exists already
    (a replay) is skipped, so nothing is delivered twice.
    """
    wanted = {d.webhook_id: d for d in planned}
    if not wanted:
        return []
    existing = set(
        session.scalars(
            select(WebhookDelivery.webhook_id).where(WebhookDelivery.webhook_id.in_(list(wanted)))
        )
    )
    rows = [
        WebhookDelivery(
            webhook_id=d.webhook_id,
            tenant=d.tenant,
            event_type=d.event_type,
            url=d.url,
            endpoint_id=d.endpoint_id,
            payload=d.payload,
        )
        for d in wanted.values()
        if d.webhook_id not in existing
    ]
    session.add_all(rows)
    session.flush()
    return [Scheduled(r.id, r.webhook_id) for r in rows]


def add_query_deliveries(
    session: Session,
    responses: Sequence[QueryResponse],
    questions: Mapping[str, str] | None = None,
) -> list[Scheduled]:
    """Deliveries of ``query.completed`` for responses that just became final.

    Args:
        session: the open transaction that recorded the responses in the query log.
        responses: the first final response of each request id (never a replay).
        questions: the question of each request id, as the query log holds it (carried in
            the payload as ``data.query``; ``""`` where missing).
    """
    questions = questions or {}
    planned: list[NewDelivery] = []
    for r in responses:
        planned += plan(
            session,
            event_type=events.QUERY_COMPLETED,
            tenant=r.tenant,
            subject=r.request_id,
            callback_url=r.callback_url,
            payload=events.query_completed(r, questions.get(r.request_id, "")),
        )
    return add_deliveries(session, planned)


def announce_job(sessions: sessionmaker[Session], job_id: str) -> list[Scheduled]:
    """Create the ``ingest.job.completed`` deliveries of a finished job (idempotent).

    Returns the new deliveries (none if the job is unknown, not final, or already announced
    with this outcome).
    """
    with sessions.begin() as session:
        job = session.get(IngestJob, job_id)
        if job is None or job.status not in FINAL_JOB_STATUSES:
            return []
        failed = session.execute(
            select(IngestJobItem.path, IngestJobItem.error)
            .where(IngestJobItem.job_id == job_id, IngestJobItem.status == "failed")
            .order_by(IngestJobItem.id)
            .limit(events.MAX_JOB_FAILURES + 1)
        ).all()
        payload = events.ingest_job_completed(job, [(p, e or "") for p, e in failed])
        planned = plan(
            session,
            event_type=events.INGEST_JOB_COMPLETED,
            tenant=job.tenant,
            subject=events.job_subject(job),
            callback_url=job.callback_url,
            payload=payload,
        )
        return add_deliveries(session, planned)


Sender = Callable[[int, int], None]


class CeleryScheduler:
    """Sends ``ragstream.webhooks.deliver(delivery_id, 0)`` and marks the delivery queued.

    Args:
        redis_client: where the queued markers live (the broker's Redis in practice).
        marker_ttl_s: how long a sent task is trusted to be waiting in the queue (seconds);
            after that the sweeper may send it again.
        app: the Celery app to send with (``ragstream.celery_app.celery_app`` by default).
        send: replaces the Celery send (tests); called as ``send(delivery_id, attempts)``.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        *,
        marker_ttl_s: int,
        app: Any = None,
        send: Sender | None = None,
    ) -> None:
        self._redis = redis_client
        self._ttl = max(1, int(marker_ttl_s))
        self._send = send or self._celery_sender(app)

    @staticmethod
    def _celery_sender(app: Any) -> Sender:
        if app is None:
            from ragstream.celery_app import celery_app

            app = celery_app

        def send(delivery_id: int, attempts: int) -> None:
            # No publish retries: a dead broker fails fast and the sweeper takes over.
            app.send_task(DELIVER_TASK, args=[delivery_id, attempts], retry=False)

        return send

    def schedule(self, deliveries: Sequence[Scheduled]) -> list[Scheduled]:
        """Send a task per new delivery; return those sent.

        Stops at the first broker error (logged, not raised): the rest stay ``pending`` for
        the sweeper, and a dead broker costs one failed send per batch, not one per delivery.
        """
        sent: list[Scheduled] = []
        for d in deliveries:
            try:
                self._send(d.delivery_id, 0)
            except Exception as exc:  # kombu/redis errors: the sweeper retries later
                log.warning(
                    "webhook.schedule_failed",
                    pending=len(deliveries) - len(sent),
                    error=f"{type(exc).__name__}: {exc}",
                )
                break
            sent.append(d)
            self._mark(d, nx=False)
        return sent

    def reschedule(self, deliveries: Sequence[Scheduled]) -> list[Scheduled]:
        """Send a task per delivery not marked queued (claiming the marker first)."""
        sent: list[Scheduled] = []
        for d in deliveries:
            if not self._mark(d, nx=True):
                continue
            try:
                self._send(d.delivery_id, 0)
            except Exception as exc:
                self._unmark(d)
                log.warning("webhook.reschedule_failed", error=f"{type(exc).__name__}: {exc}")
                break
            sent.append(d)
        return sent

    def _mark(self, d: Scheduled, *, nx: bool) -> bool:
        try:
            return bool(self._redis.set(MARKER_PREFIX + d.webhook_id, 1, ex=self._ttl, nx=nx))
        except redis.RedisError as exc:
            log.warning("webhook.marker_failed", webhook_id=d.webhook_id, error=str(exc))
            return not nx  # cannot claim: leave it to a later sweep

    def _unmark(self, d: Scheduled) -> None:
        try:
            self._redis.delete(MARKER_PREFIX + d.webhook_id)
        except redis.RedisError as exc:
            log.warning("webhook.marker_failed", webhook_id=d.webhook_id, error=str(exc))


def sweep_pending(
    sessions: sessionmaker[Session],
    scheduler: CeleryScheduler,
    *,
    older_than_s: float,
    limit: int = 500,
) -> list[Scheduled]:
    """Re-schedule ``pending`` deliveries with no attempt, created over ``older_than_s`` ago
    and not marked queued (the broker was down when they were created, or their task was
    lost). Returns those sent, oldest first, at most ``limit``."""
    cutoff = utcnow() - dt.timedelta(seconds=older_than_s)
    with sessions() as session:
        rows = session.execute(
            select(WebhookDelivery.id, WebhookDelivery.webhook_id)
            .where(
                WebhookDelivery.status == "pending",
                WebhookDelivery.attempt_count == 0,
                WebhookDelivery.created_at < cutoff,
            )
            .order_by(WebhookDelivery.id)
            .limit(limit)
        ).all()
    return scheduler.reschedule([Scheduled(i, w) for i, w in rows])
