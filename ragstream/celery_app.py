"""The Celery application (Redis broker and result backend) for bulk jobs and webhooks.

Configured for long, idempotent tasks as the Celery documentation recommends for them: JSON
only, prefetch multiplier 1, late acknowledgement is opted into per task (only idempotent tasks
set ``acks_late=True``), and a Redis ``visibility_timeout`` longer than the longest task so an
unacknowledged task is not redelivered while it is still running.
"""

from __future__ import annotations

from celery import Celery, Task

from ragstream.settings import Settings, get_settings

#: Modules whose tasks the worker registers (imported by the worker, not by this module).
TASK_MODULES: list[str] = ["ingest.tasks", "workers.webhooks.tasks"]

celery_app = Celery("ragstream")


class RetryingTask(Task):  # type: ignore[misc]
    """Base of the idempotent tasks that retry their own failures (``base=RetryingTask`` with
    the task's ``autoretry_for``): late acknowledgement, exponential back-off from 2 s doubling
    to at most 120 s with full jitter (Celery's ``retry_backoff``), at most 8 retries."""

    acks_late = True
    retry_backoff = 2
    retry_backoff_max = 120
    retry_jitter = True
    max_retries = 8


def configure_celery(settings: Settings, app: Celery = celery_app) -> Celery:
    """Apply ``settings`` to ``app`` and return it.

    Args:
        settings: the settings tree; ``settings.redis.url`` is broker and result backend,
            ``settings.celery`` the worker tuning.
        app: the application to configure (the module-level one by default).
    """
    app.conf.update(
        broker_url=settings.redis.url,
        result_backend=settings.redis.url,
        task_default_queue=settings.celery.queue,
        task_routes={"ragstream.webhooks.*": {"queue": settings.celery.webhook_queue}},
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        timezone="UTC",
        enable_utc=True,
        worker_prefetch_multiplier=1,
        task_acks_late=False,
        task_reject_on_worker_lost=True,
        task_track_started=True,
        broker_transport_options={"visibility_timeout": settings.celery.visibility_timeout_s},
        result_backend_transport_options={
            "visibility_timeout": settings.celery.visibility_timeout_s
        },
        broker_connection_retry_on_startup=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        include=TASK_MODULES,
    )
    return app


# Configured from the process's settings at import (cheap: no connection is made), so that
# ``task.delay`` works in any process; tests and tools may reconfigure with other settings.
configure_celery(get_settings())
