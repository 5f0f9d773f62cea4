"""OpenTelemetry tracing: one setting turns it on; W3C ``traceparent`` carried in Kafka record
headers and Celery task headers, so one trace joins the API, every pool and the Celery tasks.

Off by default: until :func:`configure_tracing` installs an SDK tracer provider (because
``settings.tracing.otlp_endpoint`` is set, or a test passes an exporter), the tracer is the
OpenTelemetry API's no-op one: spans are non-recording, nothing is injected into headers, and
the helpers here return at once (:func:`enabled` is false).

Propagation is the OpenTelemetry API's global text-map propagator (W3C Trace Context and
Baggage by default, ``OTEL_PROPAGATORS`` to change it) with carriers for Kafka headers
(``list[tuple[str, bytes]]``, values UTF-8) and for plain ``dict[str, str]`` (Celery task
headers, HTTP headers).

Batches: a pool handles a batch of events in one call, but each event belongs to its own
trace. The consumer runtime starts one span per consumed record (parented by the record's
``traceparent``) and registers it under the record key (:func:`event_contexts`); code inside
the handler that works for one request (an LLM call) opens its span with ``key=request_id``
(:func:`span`) and lands in that request's trace; batch-wide work (one ``_msearch``) lands in
the batch's span, which links every event's span. The runtime parents each output record by its
key the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter, Setter
from opentelemetry.trace import Span, SpanKind, Tracer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from ragstream.settings import TracingSettings

#: Instrumentation scope name of every span ragstream starts.
TRACER_NAME = "ragstream"

#: A Kafka record's headers as kafka-python takes and gives them.
KafkaHeaders = list[tuple[str, bytes]]

Context = otel_context.Context


class _State:
    """This process's tracer provider (``None``: tracing off), set by :func:`configure_tracing`."""

    provider: Any = None
    global_set = False

    @property
    def enabled(self) -> bool:
        return self.provider is not None


_lock = threading.Lock()
_state = _State()


class _ForwardingTracer(trace.Tracer):
    """A tracer that starts its spans with this process's current provider (no-op while off),
    so a library that keeps its tracer (FastAPI, the Elasticsearch client) follows
    :func:`configure_tracing` and :func:`reset_tracing`."""

    def __init__(self, name: str, version: str | None, schema_url: str | None) -> None:
        self._args = (name, version, schema_url)
        self._cached: tuple[Any, Tracer] | None = None

    def _real(self) -> Tracer:
        provider = _state.provider
        if provider is None:
            return _NOOP
        cached = self._cached
        if cached is None or cached[0] is not provider:
            cached = self._cached = (provider, provider.get_tracer(*self._args))
        return cached[1]

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return self._real().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._real().start_as_current_span(*args, **kwargs)


class _ForwardingProvider(trace.TracerProvider):
    """OpenTelemetry's global provider once tracing was first turned on (it can be set only
    once per process): forwards to this process's current provider."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> Tracer:
        return _ForwardingTracer(
            instrumenting_module_name, instrumenting_library_version, schema_url
        )


_NOOP = trace.NoOpTracer()
#: Span contexts of the events of the batch in progress, by record key (see module docstring).
_event_contexts: dict[str, Context] = {}


class _KafkaGetter(Getter[Sequence[tuple[str, bytes]]]):
    def get(self, carrier: Sequence[tuple[str, bytes]], key: str) -> list[str] | None:
        found = [v.decode("utf-8", "replace") for k, v in carrier if k == key and v is not None]
        return found or None

    def keys(self, carrier: Sequence[tuple[str, bytes]]) -> list[str]:
        return [k for k, _ in carrier]


class _KafkaSetter(Setter[KafkaHeaders]):
    def set(self, carrier: KafkaHeaders, key: str, value: str) -> None:
        carrier[:] = [(k, v) for k, v in carrier if k != key]
        carrier.append((key, value.encode()))


class _DictGetter(Getter[Mapping[str, Any]]):
    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if isinstance(value, str):
            return [value]
        if isinstance(value, bytes):
            return [value.decode("utf-8", "replace")]
        return None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return [str(k) for k in carrier]


_KAFKA_GETTER = _KafkaGetter()
_KAFKA_SETTER = _KafkaSetter()
_DICT_GETTER = _DictGetter()


def configure_tracing(
    settings: TracingSettings, service: str, *, exporter: SpanExporter | None = None
) -> bool:
    """Install the SDK tracer provider when tracing is on; return whether it is on.

    On when ``settings.otlp_endpoint`` is set (spans go in batches over OTLP/HTTP protobuf to
    ``<endpoint>/v1/traces``) or when ``exporter`` is given (each span is exported as it ends:
    tests pass the SDK's ``InMemorySpanExporter``). OpenTelemetry's global provider then
    forwards to it, so the libraries' own spans (FastAPI's server span per request, the
    Elasticsearch client's span per request) join the same traces. Later calls return the
    state of the first until :func:`reset_tracing`.

    Args:
        settings: ``settings.tracing``.
        service: the ``service.name`` resource attribute, e.g. ``ragstream-api``.
        exporter: an exporter to use instead of OTLP (tests).
    """
    with _lock:
        if _state.enabled:
            return True
        if exporter is None and not settings.otlp_endpoint:
            return False
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        provider = TracerProvider(
            resource=Resource.create({"service.name": service}),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
        )
        if exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            otlp = OTLPSpanExporter(
                endpoint=otlp_traces_url(settings.otlp_endpoint),
                timeout=settings.export_timeout_s,
            )
            provider.add_span_processor(BatchSpanProcessor(otlp))
        _state.provider = provider
        if not _state.global_set:
            trace.set_tracer_provider(_ForwardingProvider())
            _state.global_set = True
        return True


def reset_tracing() -> None:
    """Flush and drop this process's provider: tracing is off again (tests)."""
    with _lock:
        provider, _state.provider = _state.provider, None
    if provider is not None:
        provider.shutdown()


def otlp_traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector ``endpoint``: ``http://host:4318`` becomes
    ``http://host:4318/v1/traces`` (the OTLP specification's default path); a URL that already
    ends in ``/v1/traces`` is kept."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


def enabled() -> bool:
    """Whether :func:`configure_tracing` turned tracing on in this process."""
    return _state.enabled


def flush_tracing() -> None:
    """Export the spans still buffered (end of a process; the SDK also shuts down at exit);
    a no-op when tracing is off."""
    provider = _state.provider
    if provider is not None:
        provider.force_flush()


def tracer() -> Tracer:
    """The ragstream tracer (the API's no-op tracer while tracing is off)."""
    provider = _state.provider
    if provider is None:
        return _NOOP
    return provider.get_tracer(TRACER_NAME)  # type: ignore[no-any-return]


# -- propagation -----------------------------------------------------------------------------


def inject_headers(
    headers: Sequence[tuple[str, bytes]] | None = None, context: Context | None = None
) -> KafkaHeaders:
    """Kafka headers ``headers`` plus the ``traceparent`` (and ``tracestate``, baggage) of
    ``context`` (default: the current one), replacing any such header already there.

    Returns a new list; with tracing off, or no valid span in ``context``, a copy of
    ``headers`` unchanged.
    """
    carrier: KafkaHeaders = list(headers or [])
    if _state.enabled:
        propagate.inject(carrier, context=context, setter=_KAFKA_SETTER)
    return carrier


def extract_headers(headers: Sequence[tuple[str, bytes]] | None) -> Context:
    """The context a Kafka record's headers carry (an empty context when none, or when tracing
    is off). Malformed ``traceparent`` values are ignored, as W3C Trace Context requires."""
    if not _state.enabled or not headers:
        return Context()
    return propagate.extract(headers, context=Context(), getter=_KAFKA_GETTER)


def inject_dict(carrier: MutableMapping[str, Any], context: Context | None = None) -> None:
    """Write the context's ``traceparent`` (and ``tracestate``, baggage) into ``carrier`` (Celery
    task headers, HTTP headers); nothing when tracing is off."""
    if _state.enabled:
        propagate.inject(carrier, context=context)


def extract_dict(carrier: Mapping[str, Any] | None) -> Context:
    """The context a ``dict`` carrier holds (keys as written by :func:`inject_dict`; HTTP
    header names lower-case); an empty context when none or when tracing is off."""
    if not _state.enabled or not carrier:
        return Context()
    return propagate.extract(carrier, context=Context(), getter=_DICT_GETTER)


def has_span(context: Context) -> bool:
    """Whether ``context`` holds a valid (remote or local) span context."""
    return trace.get_current_span(context).get_span_context().is_valid


# -- batches ---------------------------------------------------------------------------------


@contextmanager
def event_contexts(contexts: Mapping[str, Context]) -> Iterator[None]:
    """Register the span contexts of the batch's events by record key while the batch runs
    (the consumer runtime calls this); :func:`context_for` and :func:`span` find them."""
    _event_contexts.update(contexts)
    try:
        yield
    finally:
        for key in contexts:
            _event_contexts.pop(key, None)


def context_for(key: str | None) -> Context | None:
    """The registered span context of the event with record key ``key``, else ``None``."""
    if key is None or not _state.enabled:
        return None
    return _event_contexts.get(key)


@contextmanager
def span(
    name: str,
    *,
    key: str | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> Iterator[Span]:
    """Start ``name`` as the current span until the block ends.

    Its parent is the span of the batch's event with record key ``key`` when one is registered
    (:func:`event_contexts`), else the current span. An exception leaving the block is recorded
    on the span and sets its status to error (the OpenTelemetry SDK's default), then re-raised.
    """
    if not _state.enabled:
        yield trace.INVALID_SPAN
        return
    parent = context_for(key)
    with tracer().start_as_current_span(
        name, context=parent, kind=kind, attributes=attributes
    ) as current:
        yield current


@contextmanager
def span_from_headers(
    name: str,
    headers: Sequence[tuple[str, bytes]] | None,
    *,
    kind: SpanKind = SpanKind.CONSUMER,
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> Iterator[Span]:
    """Start ``name`` as the current span, parented by the context of Kafka record ``headers``
    (a new trace when they carry none)."""
    if not _state.enabled:
        yield trace.INVALID_SPAN
        return
    with tracer().start_as_current_span(
        name, context=extract_headers(headers), kind=kind, attributes=attributes
    ) as current:
        yield current


def start_span(
    name: str,
    *,
    context: Context | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, str | int | float | bool] | None = None,
    links: Sequence[trace.Link] = (),
) -> Span:
    """Start (not activate) a span; the caller ends it. ``context``: its parent (default: the
    current context)."""
    return tracer().start_span(name, context=context, kind=kind, attributes=attributes, links=links)


def link(span_: Span) -> trace.Link:
    """A link to ``span_`` (a batch span links the spans of its events)."""
    return trace.Link(span_.get_span_context())


def context_with(span_: Span) -> Context:
    """A context whose current span is ``span_`` (the parent for spans and injected headers)."""
    return trace.set_span_in_context(span_, Context())


@contextmanager
def activated(context: Context | None) -> Iterator[None]:
    """Make ``context`` current until the block ends (``None``: leave the current one)."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)
