"""Build a pool from its settings: its handler (:func:`pool_handler`), consumer group
(:func:`pool_group`) and runnable process (:func:`build_runner`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
import structlog

from ragstream import tracing
from ragstream.metrics import serve_metrics
from ragstream.retry import RetryPolicy
from ragstream.settings import PoolSettings, Settings
from topics.base import Event
from topics.producer import EventProducer, make_producer
from topics.registry import TopicRegistry, TopicSpec
from workers.runtime.handler import Emit, Handler, Outcome
from workers.runtime.policy import BatchPolicy
from workers.runtime.pressure import PressureReporter
from workers.runtime.runner import PoolRunner

log = structlog.get_logger(__name__)

E = TypeVar("E", bound=Event)


def batch_policy(pool: PoolSettings) -> BatchPolicy:
    """The :class:`BatchPolicy` a pool's settings describe."""
    return BatchPolicy(
        pool.max_batch, pool.max_wait_ms, pool.max_batch_duration_ms, pool.wait_min_arrivals
    )


def retry_policy(pool: PoolSettings) -> RetryPolicy:
    """The :class:`RetryPolicy` a pool's settings describe."""
    return RetryPolicy(pool.retry_max_attempts, pool.retry_base_ms, pool.retry_cap_ms)


def pool_group(settings: Settings, name: str) -> str:
    """The consumer group of pool ``name``: ``ragstream-<name>`` under the topic prefix, so
    stacks sharing one Kafka cluster never share a group."""
    return f"{settings.kafka.topic_prefix}ragstream-{name}"


def pool_handler(
    name: str,
    *,
    input: TopicSpec,
    outputs: tuple[TopicSpec, ...],
    fn: Callable[[list[E]], Sequence[Outcome]],
    pool: PoolSettings,
    group: str | None = None,
    on_expired: Callable[[E], Sequence[Emit]] | None = None,
    on_dead_letter: Callable[[E, BaseException], Sequence[Emit]] | None = None,
) -> Handler[E]:
    """The :class:`Handler` of pool ``name``: batch and retry policies from its settings
    ``pool``, consumer group ``group`` (default ``ragstream-<name>``; a pool process passes
    :func:`pool_group`), and the other fields as :class:`Handler` documents them."""
    return Handler(
        name=name,
        input=input,
        group=group or f"ragstream-{name}",
        outputs=outputs,
        fn=fn,
        batch=batch_policy(pool),
        retry=retry_policy(pool),
        on_expired=on_expired,
        on_dead_letter=on_dead_letter,
    )


def build_runner(
    handler: Handler[E],
    settings: Settings,
    pool: PoolSettings,
    *,
    registry: TopicRegistry | None = None,
    serve: bool = True,
    producer: EventProducer | None = None,
) -> PoolRunner[E]:
    """A :class:`PoolRunner` with its producer, registry, pressure reporter and metrics port;
    tracing starts here when ``settings.tracing`` turns it on (service ``ragstream-<pool>``)."""
    tracing.configure_tracing(settings.tracing, f"ragstream-{handler.name}")
    registry = registry or TopicRegistry(settings.kafka.topic_prefix)
    producer = producer or EventProducer(make_producer(settings.kafka))
    runner: PoolRunner[E] = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=producer,
        registry=registry,
    )
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    # Namespaced by the topic prefix: stacks sharing one Redis never add into each other's lag.
    pressure_name = settings.kafka.topic_prefix + runner.handler.name
    runner.attach_pressure(PressureReporter(client, pressure_name, runner.member))
    if serve and pool.metrics_port:
        try:
            serve_metrics(pool.metrics_port)
            log.info("pool.metrics", port=pool.metrics_port)
        except OSError as exc:  # a second process of the pool on this host: keep consuming
            log.warning("pool.metrics_port_busy", port=pool.metrics_port, error=str(exc))
    return runner


def until_signalled(
    runner: PoolRunner[Any], cleanup: Callable[[], None] | None = None
) -> Callable[[], None]:
    """The callable a pool factory returns: run ``runner`` until SIGTERM/SIGINT, then
    ``cleanup`` (close model clients and the like)."""

    def run() -> None:
        runner.install_signal_handlers()
        try:
            runner.run()
        finally:
            if cleanup is not None:
                cleanup()
            tracing.flush_tracing()

    return run
