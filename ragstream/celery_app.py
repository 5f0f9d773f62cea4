"""The Celery application (Redis broker and result backend) for bulk jobs and webhooks.

Configured for long, idempotent tasks as the Celery documentation recommends for them: JSON
only, prefetch multiplier 1, late acknowledgement is opted into per task (only idempotent tasks
set ``acks_late=True``), and a Redis ``visibility_timeout`` longer than the longest task so an
unacknowledged task is not redelivered while it is still running.

Tracing: a task published while a span is current carries its W3C ``traceparent`` in the
task message's headers (``before_task_publish``); the worker runs the task inside a consumer
span parented by it (``task_prerun``/``task_postrun``), so a bulk job's batches and a webhook's
deliveries join the trace that started them. The worker turns tracing on from the settings
given to :func:`configure_celery` (``worker_init``).
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery, Task, signals
from opentelemetry import context as otel_context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ragstream import tracing
from ragstream.retry import CELERY_TASK_RETRY
from ragstream.settings import Settings, TracingSettings, get_settings

#: Modules whose tasks the worker registers (imported by the worker, not by this module).
TASK_MODULES: list[str] = ["ingest.tasks", "workers.webhooks.tasks"]

celery_app = Celery("ragstream")


class RetryingTask(Task):  # type: ignore[misc]
    """Base of the idempotent tasks that retry their own failures (``base=RetryingTask`` with
    the task's ``autoretry_for``): late acknowledgement, and the back-off and bound of the shared
    :data:`~ragstream.retry.CELERY_TASK_RETRY` policy, applied by Celery's ``retry_backoff``
    (which takes whole seconds)."""

    acks_late = True
    retry_backoff = int(CELERY_TASK_RETRY.base_ms // 1000)
    retry_backoff_max = int(CELERY_TASK_RETRY.cap_ms // 1000)
    retry_jitter = CELERY_TASK_RETRY.jitter
    max_retries = CELERY_TASK_RETRY.retries


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
    _trace_state.settings = settings.tracing
    return app


class _TraceState:
    """The tracing settings the worker starts tracing with (from :func:`configure_celery`)."""

    settings = TracingSettings()


_trace_state = _TraceState()
#: The span and context token of each task running in this process, by task id.
_task_spans: dict[str, tuple[Span, object]] = {}
_task_lock = threading.Lock()
#: Header names the propagator writes (W3C Trace Context and Baggage).
TRACE_HEADERS = ("traceparent", "tracestate", "baggage")


def _start_tracing(**_: object) -> None:
    """Turn tracing on in a worker process when the settings say so."""
    tracing.configure_tracing(_trace_state.settings, "ragstream-celery")


def inject_task_headers(headers: dict[str, Any] | None = None, **_: object) -> None:
    """Carry the current trace context in a task message's headers (nothing while off)."""
    if headers is not None:
        tracing.inject_dict(headers)


def start_task_span(task_id: str = "", task: Any = None, **_: object) -> None:
    """Start the span of a task run, parented by the ``traceparent`` its message carried."""
    if not tracing.enabled() or task is None:
        return
    request = getattr(task, "request", None)
    carrier = {h: getattr(request, h, None) for h in TRACE_HEADERS}
    span = tracing.start_span(
        f"run {task.name}",
        context=tracing.extract_dict({k: v for k, v in carrier.items() if v}),
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "celery",
            "messaging.operation.type": "process",
            "messaging.message.id": task_id,
            "celery.task.name": str(task.name),
            "celery.retries": int(getattr(request, "retries", 0) or 0),
        },
    )
    token = otel_context.attach(tracing.context_with(span))
    with _task_lock:
        _task_spans[task_id] = (span, token)


def fail_task_span(task_id: str = "", exception: BaseException | None = None, **_: object) -> None:
    """Record a task's exception on its span."""
    with _task_lock:
        entry = _task_spans.get(task_id)
    if entry is not None and exception is not None:
        entry[0].record_exception(exception)
        entry[0].set_status(Status(StatusCode.ERROR, f"{type(exception).__name__}: {exception}"))


def end_task_span(task_id: str = "", state: str | None = None, **_: object) -> None:
    """End a task's span (its final state as ``celery.state``) and restore the context."""
    with _task_lock:
        entry = _task_spans.pop(task_id, None)
    if entry is None:
        return
    span, token = entry
    if state:
        span.set_attribute("celery.state", state)
    try:
        otel_context.detach(token)  # type: ignore[arg-type]
    finally:
        span.end()


signals.worker_init.connect(_start_tracing, weak=False)
signals.before_task_publish.connect(inject_task_headers, weak=False)
signals.task_prerun.connect(start_task_span, weak=False)
signals.task_failure.connect(fail_task_span, weak=False)
signals.task_postrun.connect(end_task_span, weak=False)

# Configured from the process's settings at import (cheap: no connection is made), so that
# ``task.delay`` works in any process; tests and tools may reconfigure with other settings.
configure_celery(get_settings())
