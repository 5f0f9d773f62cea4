"""Prometheus metrics of a pool process, labelled by pool name (model calls by stage)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
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
