"""Prometheus metrics of a pool process, labelled by pool name (model calls by stage).

Every pool-labelled series is created at 0 when the pool's runner starts (:func:`init_pool`),
so a dashboard's rate over it exists before the first event or error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from topics.base import Event

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
#: Seconds an event waits before a pool picks it up: milliseconds idle, minutes under a backlog.
QUEUE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

EVENTS_IN = Counter("ragstream_events_in_total", "Events consumed.", ["pool"])
EVENTS_OUT = Counter("ragstream_events_out_total", "Events published.", ["pool", "topic"])
BATCH_SIZE = Histogram(
    "ragstream_batch_size", "Events per batch.", ["pool"], buckets=BATCH_SIZE_BUCKETS
)
BATCH_LATENCY = Histogram(
    "ragstream_batch_latency_seconds",
    "Time to process, publish and commit one batch, in seconds.",
    ["pool"],
    buckets=LATENCY_BUCKETS,
)
HANDLER_CALLS = Counter(
    "ragstream_handler_calls_total", "Calls of the pool's handler function.", ["pool"]
)
ERRORS = Counter("ragstream_errors_total", "Handler errors by class.", ["pool", "error_class"])
DEAD_LETTERS = Counter("ragstream_dead_letters_total", "Events sent to the DLQ.", ["pool"])
DEADLINE_EXCEEDED = Counter(
    "ragstream_deadline_exceeded_total", "Events skipped because their deadline passed.", ["pool"]
)
COMMITS = Counter("ragstream_commits_total", "Offset commits.", ["pool"])
BATCH_FAILURES = Counter(
    "ragstream_batch_failures_total",
    "Batches not committed (outage or publish failure) and retried from their first offset.",
    ["pool"],
)
CONSUMER_LAG = Gauge(
    "ragstream_consumer_lag", "Records behind the high watermark.", ["pool", "partition"]
)
IN_FLIGHT = Gauge("ragstream_in_flight_events", "Events fetched but not yet committed.", ["pool"])
MODEL_CALLS = Counter(
    "ragstream_model_calls_total", "Batched model or search calls by stage.", ["stage"]
)
QUEUE_WAIT = Histogram(
    "ragstream_queue_wait_seconds",
    "Time from an input event's creation (the previous stage published it) to this pool "
    "picking it up, in seconds: its wait in the pool's topic.",
    ["pool"],
    buckets=QUEUE_BUCKETS,
)
QUERY_AGE = Histogram(
    "ragstream_query_age_seconds",
    "Time from the query's creation (the API accepted it) to this pool picking up an event "
    "for it, in seconds: every earlier stage and wait included.",
    ["pool"],
    buckets=QUEUE_BUCKETS,
)

_BY_POOL = (
    EVENTS_IN,
    BATCH_SIZE,
    BATCH_LATENCY,
    HANDLER_CALLS,
    DEAD_LETTERS,
    DEADLINE_EXCEEDED,
    COMMITS,
    BATCH_FAILURES,
    IN_FLIGHT,
    QUEUE_WAIT,
    QUERY_AGE,
)


def init_pool(pool: str) -> None:
    """Create every series labelled only by ``pool`` at 0."""
    for metric in _BY_POOL:
        metric.labels(pool)


def observe_pickup(pool: str, events: Iterable[Event], now: dt.datetime | None = None) -> None:
    """Observe the queue wait and query age of ``events`` picked up by ``pool`` at ``now``
    (default: the current UTC time). The query is the event's ``request`` when it carries one
    (retrieved candidates, reranked passages), else the event itself; a clock behind the
    producer's counts as 0 s, never negative."""
    now = now or dt.datetime.now(dt.UTC)
    for event in events:
        QUEUE_WAIT.labels(pool).observe(max(0.0, (now - event.created_at).total_seconds()))
        query = getattr(event, "request", None)
        created = query.created_at if isinstance(query, Event) else event.created_at
        QUERY_AGE.labels(pool).observe(max(0.0, (now - created).total_seconds()))
