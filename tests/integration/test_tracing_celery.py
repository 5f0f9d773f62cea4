"""A Celery task runs in the trace of the code that sent it: the ``traceparent`` travels in the
task message's headers through the real Redis broker to a worker (in this process, so the
SDK's ``InMemorySpanExporter`` sees both sides)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from ragstream import celery_app, tracing
from ragstream.settings import Settings

pytestmark = pytest.mark.integration


def test_a_task_continues_the_senders_trace(
    spans: InMemorySpanExporter, settings: Settings, unique_name: Callable[[str], str]
) -> None:
    assert celery_app.TRACE_HEADERS  # the module's signal handlers are connected
    queue = unique_name("celery")
    app = Celery(queue, broker=settings.redis.url, backend=settings.redis.url)
    app.conf.update(task_default_queue=queue, task_serializer="json", accept_content=["json"])

    @app.task(name=f"{queue}.whoami")  # type: ignore[untyped-decorator]
    def whoami() -> str:
        with tracing.span("inside the task"):
            return f"{trace.get_current_span().get_span_context().trace_id:032x}"

    try:
        with start_worker(app, pool="solo", perform_ping_check=False, queues=[queue]):
            with tracing.span("bulk job request") as sender:
                result = whoami.delay()
            trace_id = result.get(timeout=30)
            result.forget()
    finally:
        app.backend.client.connection_pool.disconnect()
        app.close()
    assert trace_id == f"{sender.get_span_context().trace_id:032x}"
    by_name = {s.name: s for s in spans.get_finished_spans()}
    run = by_name[f"run {queue}.whoami"]
    assert run.kind is SpanKind.CONSUMER
    assert run.parent is not None
    assert run.parent.span_id == sender.get_span_context().span_id
    assert by_name["inside the task"].parent.span_id == run.context.span_id  # type: ignore[union-attr]
