"""Shared fixtures: the settings tree and per-test unique names for topics, groups and indices."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragstream.settings import Settings


@pytest.fixture
def settings() -> Settings:
    """Settings built from the environment, as every process builds them."""
    return Settings()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Return ``f(prefix)`` giving a name unique to this test, valid as topic and index name."""
    test = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40]
    token = uuid.uuid4().hex[:8]

    def make(prefix: str) -> str:
        return f"t-{prefix}-{test}-{token}"

    return make


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process for one test; every ended span lands in the returned
    OpenTelemetry SDK ``InMemorySpanExporter`` (``spans.get_finished_spans()``)."""
    from ragstream import tracing
    from ragstream.settings import TracingSettings

    exporter = InMemorySpanExporter()
    tracing.reset_tracing()
    tracing.configure_tracing(TracingSettings(), "ragstream-test", exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.reset_tracing()
