"""Trace context in Kafka record headers and Celery task headers (W3C ``traceparent``), the
consumer runtime's spans per record, and tracing off by default (no services needed)."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from ragstream import celery_app, tracing
from ragstream.settings import KafkaSettings, Settings
from topics.queries import QueryRequest
from topics.registry import QUERIES, TopicRegistry, TopicSpec
from topics.serde import encode
from workers.generation.backend import GenerationRequest, generate_concurrently
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import Prompt
from workers.runtime.handler import Emit, Handler, Outcome
from workers.runtime.runner import PoolRunner

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-0[13]$")  # sampled (+ random)
OUT = TopicSpec("rag.echo", QueryRequest, "request_id", consumed=False)


def _header(headers: Sequence[tuple[str, bytes]], name: str) -> str:
    values = [v.decode() for k, v in headers if k == name]
    assert len(values) == 1, headers
    return values[0]


def _query(request_id: str) -> QueryRequest:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    return QueryRequest(tenant="t", query="q", deadline=deadline, request_id=request_id)


def test_tracing_is_off_by_default_and_injects_nothing() -> None:
    assert not tracing.enabled()
    assert Settings().tracing.otlp_endpoint == ""
    assert not tracing.configure_tracing(Settings().tracing, "off")
    with tracing.span("nothing") as span:
        assert not span.is_recording()
        assert tracing.inject_headers([("a", b"1")]) == [("a", b"1")]
    assert not tracing.has_span(tracing.extract_headers([("traceparent", b"00-" + b"1" * 55)]))


def test_kafka_headers_carry_the_current_span(spans: InMemorySpanExporter) -> None:
    with tracing.span("api") as span:
        headers = tracing.inject_headers([("dlq.pool", b"x")])
    ctx = span.get_span_context()
    match = TRACEPARENT.match(_header(headers, "traceparent"))
    assert match is not None
    assert match.group(1) == f"{ctx.trace_id:032x}"
    assert match.group(2) == f"{ctx.span_id:016x}"
    assert ("dlq.pool", b"x") in headers
    extracted = trace.get_current_span(tracing.extract_headers(headers)).get_span_context()
    assert extracted.is_remote
    assert (extracted.trace_id, extracted.span_id) == (ctx.trace_id, ctx.span_id)


def test_inject_replaces_an_existing_traceparent(spans: InMemorySpanExporter) -> None:
    old = [("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"), ("k", b"v")]
    with tracing.span("next") as span:
        headers = tracing.inject_headers(old)
    trace_id = f"{span.get_span_context().trace_id:032x}"
    assert TRACEPARENT.match(_header(headers, "traceparent")).group(1) == trace_id  # type: ignore[union-attr]
    assert ("k", b"v") in headers
    assert old[0][1].startswith(b"00-aaaa")  # the caller's list is not changed


@pytest.mark.parametrize(
    "value", [b"garbage", b"00-" + b"0" * 32 + b"-" + b"1" * 16 + b"-01", b"\xff\xfe"]
)
def test_a_malformed_or_invalid_traceparent_starts_a_new_trace(
    spans: InMemorySpanExporter, value: bytes
) -> None:
    context = tracing.extract_headers([("traceparent", value)])
    assert not tracing.has_span(context)
    with tracing.span_from_headers("process", [("traceparent", value)]) as span:
        assert span.get_span_context().is_valid
    (finished,) = spans.get_finished_spans()
    assert finished.parent is None


def test_celery_task_headers_join_the_publishers_trace(spans: InMemorySpanExporter) -> None:
    headers: dict[str, Any] = {"task": "ragstream.webhooks.deliver"}
    with tracing.span("delivery batch") as publisher:
        celery_app.inject_task_headers(headers=headers)
    assert TRACEPARENT.match(headers["traceparent"])
    # The worker sees the message headers as attributes of ``task.request``.
    task = SimpleNamespace(
        name="ragstream.webhooks.deliver",
        request=SimpleNamespace(traceparent=headers["traceparent"], retries=0),
    )
    celery_app.start_task_span(task_id="t-1", task=task)
    with tracing.span("webhook POST"):  # work inside the task is a child of its span
        pass
    celery_app.fail_task_span(task_id="t-1", exception=RuntimeError("boom"))
    celery_app.end_task_span(task_id="t-1", state="FAILURE")
    by_name = {s.name: s for s in spans.get_finished_spans()}
    run = by_name["run ragstream.webhooks.deliver"]
    assert run.kind is SpanKind.CONSUMER
    assert run.parent is not None and run.parent.span_id == publisher.get_span_context().span_id
    assert run.context.trace_id == publisher.get_span_context().trace_id
    assert run.attributes is not None and run.attributes["celery.state"] == "FAILURE"
    assert not run.status.is_ok
    assert by_name["webhook POST"].parent.span_id == run.context.span_id  # type: ignore[union-attr]
    assert not trace.get_current_span().get_span_context().is_valid  # context restored


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, list[tuple[str, bytes]]]] = []

    def send(self, topic: str, event: Any, headers: Any = None) -> None:
        self.sent.append((topic, event, list(headers or [])))

    def send_raw(self, topic: str, key: Any, value: Any, headers: Any = None) -> None:
        self.sent.append((topic, value, list(headers or [])))

    def flush(self) -> int:
        return len(self.sent)

    def discard_pending(self) -> None:
        pass


class _Consumer:
    def __init__(self) -> None:
        self.commits: list[Any] = []

    def commit(self, offsets: Any) -> None:
        self.commits.append(offsets)

    def assignment(self) -> set[Any]:
        return set()


def _record(offset: int, request_id: str, headers: list[tuple[str, bytes]]) -> Any:
    return SimpleNamespace(
        topic="p.rag.queries",
        partition=0,
        offset=offset,
        key=request_id.encode(),
        value=encode(_query(request_id)),
        headers=headers,
    )


def test_pool_runtime_continues_each_records_trace_and_parents_outputs_by_key(
    spans: InMemorySpanExporter,
) -> None:
    """A batch of two records from two traces: a ``process`` span per record, parented by its
    header; one batch span linking both; each output parented by its own input's span; the
    handler's per-request work (``key=``) in its request's trace."""
    parents = {}
    for rid in ("q1", "q2"):
        with tracing.span(f"api {rid}") as api:
            parents[rid] = (api.get_span_context(), tracing.inject_headers())

    def fn(events: list[QueryRequest]) -> Sequence[Outcome]:
        with tracing.span("msearch"):  # batch-wide work
            pass
        for e in events:
            with tracing.span("llm", key=e.request_id):
                pass
        return [Emit(OUT, e) for e in reversed(events)]

    handler = Handler(name="unit", input=QUERIES, group="g", outputs=(OUT,), fn=fn)
    producer, consumer = _Producer(), _Consumer()
    runner: PoolRunner[QueryRequest] = PoolRunner(
        handler,
        kafka=KafkaSettings(),
        producer=producer,  # type: ignore[arg-type]
        registry=TopicRegistry("p."),
        consumer=consumer,
    )
    runner._handle([_record(0, "q1", parents["q1"][1]), _record(1, "q2", parents["q2"][1])])
    assert consumer.commits, "the batch was committed"

    finished = spans.get_finished_spans()
    process = {
        s.attributes["messaging.kafka.message.key"]: s  # type: ignore[index]
        for s in finished
        if s.name == "process rag.queries"
    }
    assert set(process) == {"q1", "q2"}
    (batch,) = [s for s in finished if s.name == "unit batch"]
    assert {link.context.span_id for link in batch.links} == {
        s.context.span_id for s in process.values()
    }
    for rid, span in process.items():
        api_ctx = parents[rid][0]
        assert span.kind is SpanKind.CONSUMER
        assert span.context.trace_id == api_ctx.trace_id
        assert span.parent is not None and span.parent.span_id == api_ctx.span_id
    (msearch,) = [s for s in finished if s.name == "msearch"]
    assert msearch.parent is not None and msearch.parent.span_id == batch.context.span_id
    for llm in (s for s in finished if s.name == "llm"):
        assert llm.parent is not None
        assert llm.parent.span_id in {s.context.span_id for s in process.values()}
    for topic, event, headers in producer.sent:
        assert topic == "p.rag.echo"
        match = TRACEPARENT.match(_header(headers, "traceparent"))
        assert match is not None
        own = process[event.request_id].context
        assert (match.group(1), match.group(2)) == (f"{own.trace_id:032x}", f"{own.span_id:016x}")


def _runner(fn: Any) -> PoolRunner[QueryRequest]:
    handler = Handler(name="unit", input=QUERIES, group="g", outputs=(OUT,), fn=fn)
    return PoolRunner(
        handler,
        kafka=KafkaSettings(),
        producer=_Producer(),  # type: ignore[arg-type]
        registry=TopicRegistry("p."),
        consumer=_Consumer(),
    )


def test_a_batch_of_one_runs_inside_its_records_span(spans: InMemorySpanExporter) -> None:
    def fn(events: list[QueryRequest]) -> Sequence[Outcome]:
        with tracing.span("rerank"):
            pass
        return []

    _runner(fn)._handle([_record(0, "q1", [])])
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert "unit batch" not in finished
    process = finished["process rag.queries"]
    assert process.parent is None  # no traceparent header: the record starts a trace
    assert finished["rerank"].parent.span_id == process.context.span_id  # type: ignore[union-attr]


def test_a_dead_lettered_records_span_is_marked_failed(spans: InMemorySpanExporter) -> None:
    record = _record(0, "q1", [])
    record.value = b"{not json"
    _runner(lambda events: [])._handle([record])
    (process,) = [s for s in spans.get_finished_spans() if s.name == "process rag.queries"]
    assert not process.status.is_ok
    assert any(e.name == "exception" for e in process.events)


def test_library_tracers_follow_the_process_provider(spans: InMemorySpanExporter) -> None:
    """FastAPI and the Elasticsearch client trace through OpenTelemetry's global provider and
    keep their tracers: they record while tracing is on and stop when it is turned off."""
    library = trace.get_tracer("some.library")
    with library.start_as_current_span("library span") as span:
        assert span.is_recording()
    assert [s.name for s in spans.get_finished_spans()] == ["library span"]
    tracing.reset_tracing()
    with library.start_as_current_span("off") as span:
        assert not span.is_recording()
    assert not tracing.enabled()


def test_one_setting_turns_the_otlp_exporter_on() -> None:
    assert tracing.otlp_traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert tracing.otlp_traces_url("http://c:4318/v1/traces/") == "http://c:4318/v1/traces"
    settings = Settings(tracing={"otlp_endpoint": "http://127.0.0.1:9"})  # type: ignore[arg-type]
    try:
        assert tracing.configure_tracing(settings.tracing, "ragstream-test")
        assert tracing.enabled()
        assert tracing.start_span("never ended, never exported").is_recording()
    finally:
        tracing.reset_tracing()


def test_each_llm_call_lands_in_its_requests_trace(spans: InMemorySpanExporter) -> None:
    """Two requests of one generation batch, generated concurrently on another event loop:
    each LLM client span is a child of its own request's record span (found by key)."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = (
            b'data: {"choices": [{"text": "ok", "finish_reason": null}]}\n\n'
            b'data: {"choices": [{"text": "", "finish_reason": "stop"}], '
            b'"usage": {"prompt_tokens": 3, "completion_tokens": 1}}\n\n'
            b"data: [DONE]\n\n"
        )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    backend = OpenAICompatibleBackend("http://llm", "m", "completion", [], 8, client=client)
    prompt = Prompt(style="completion", passages_used=[], prompt_tokens=3, text="Q")
    records = {rid: tracing.start_span(f"process {rid}") for rid in ("r1", "r2")}
    with tracing.event_contexts({k: tracing.context_with(s) for k, s in records.items()}):
        requests = [GenerationRequest(rid, prompt) for rid in records]
        results = asyncio.run(generate_concurrently(backend, requests))
    assert all(not isinstance(r, Exception) for r in results)
    llm = [s for s in spans.get_finished_spans() if s.name == "text_completion m"]
    assert len(llm) == 2
    for span in llm:
        assert span.kind is SpanKind.CLIENT
        attributes = span.attributes or {}
        own = records[str(attributes["ragstream.request_id"])].get_span_context()
        assert span.parent is not None and span.parent.span_id == own.span_id
        assert attributes["gen_ai.usage.input_tokens"] == 3
        assert attributes["gen_ai.usage.output_tokens"] == 1
