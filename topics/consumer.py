"""The consumer factory: every place that consumes builds its kafka-python consumer here.

Auto-commit is always off: offsets are committed by the code that did the work, after it is done
(the consumer runtime, the DLQ replay), or never (readers without a consumer group). The
consumer runtime's pools consume with :func:`make_pool_consumer`; every other reader (the API's
reply router, the DLQ replay, the benchmarks) calls :func:`make_consumer` with its own options.
"""

from __future__ import annotations

from typing import Any

from kafka import KafkaConsumer

from ragstream.settings import KafkaSettings

#: ``fetch.max.wait.ms`` of a pool's consumer: how long the broker holds a fetch that finds no
#: record. The broker answers as soon as one record is there (``fetch.min.bytes`` = 1), so
#: this costs no latency; it sets how often an idle consumer's fetch comes back empty and
#: kafka-python runs another round of its poll loop (10 a second at 100 ms). Kafka's default
#: is 500 ms (Apache Kafka consumer configs); 1 s halves the idle rounds again.
POOL_FETCH_MAX_WAIT_MS = 1000


def make_consumer(
    settings: KafkaSettings, *topics: str, group: str | None, **overrides: Any
) -> KafkaConsumer:
    """A kafka-python consumer of ``topics`` on ``settings.bootstrap_servers``.

    Args:
        settings: Kafka client settings (only the bootstrap servers are taken from here; a
            caller that wants more, e.g. ``request_timeout_ms``, passes it in ``overrides``).
        *topics: topics to subscribe to; none when the caller assigns partitions itself.
        group: the consumer group id; ``None`` for a reader outside any group (no commits).
        **overrides: any other KafkaConsumer config (``auto_offset_reset``, ``client_id``,
            ``fetch_max_wait_ms``, ...).
    """
    config: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "group_id": group,
        "enable_auto_commit": False,
    }
    config.update(overrides)
    return KafkaConsumer(*topics, **config)


def make_pool_consumer(
    settings: KafkaSettings, group: str, client_id: str, max_batch: int
) -> KafkaConsumer:
    """The consumer of one member of a pool's consumer group (the consumer runtime's).

    Earliest reset; at most ``max_batch`` records a poll; ``max.poll.interval.ms`` and the
    session timeout from ``settings``, heartbeats every third of the session timeout (at most
    3 s), a request timeout longer than the session timeout, as kafka-python requires, and
    :data:`POOL_FETCH_MAX_WAIT_MS`.
    """
    return make_consumer(
        settings,
        group=group,
        client_id=client_id,
        auto_offset_reset="earliest",
        max_poll_records=max_batch,
        max_poll_interval_ms=settings.max_poll_interval_ms,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=min(3000, settings.session_timeout_ms // 3),
        request_timeout_ms=max(settings.request_timeout_ms, settings.session_timeout_ms + 5000),
        fetch_max_wait_ms=POOL_FETCH_MAX_WAIT_MS,
    )
