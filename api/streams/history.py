"""Read one request's past replies back from Kafka: its tokens and its final response.

A resumed stream must not depend on the memory of the API process that served the first
connection, so it reads the request's records from the log itself: ``rag.tokens`` and
``rag.responses`` are keyed by ``request_id``, so every record of one request sits in one
partition of each topic (Kafka's default partitioner: murmur2 of the key modulo the partition
count, the one the pools' producers use). The reader is a short-lived consumer outside any
group, assigned those two partitions, positioned by timestamp (``offsets_for_times``) at the
query's creation time less :data:`CLOCK_SKEW_S`, and reads up to the end offsets it saw when
it started; records of other requests are skipped without decoding.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

import structlog
from kafka import KafkaConsumer, TopicPartition
from kafka.partitioner.default import murmur2

from ragstream.settings import Settings
from topics.consumer import make_consumer
from topics.registry import RESPONSES, TOKENS, TopicRegistry
from topics.responses import QueryResponse
from topics.serde import decode
from topics.tokens import AnswerToken

log = structlog.get_logger(__name__)

#: Seconds before the query's logged creation time the read starts, for the clocks of the API
#: (which logs the query) and the pools (whose producers stamp the records) to differ.
CLOCK_SKEW_S = 30.0
#: Records fetched per poll.
MAX_POLL_RECORDS = 2000


class HistoryUnavailableError(Exception):
    """The request's partitions could not be read in time (Kafka unreachable or slow)."""


@dataclass
class History:
    """What the log holds of one request: its tokens in log order (replays included) and its
    first final response, if one was produced; ``scanned`` records read, all requests."""

    tokens: list[AnswerToken] = field(default_factory=list)
    response: QueryResponse | None = None
    scanned: int = 0


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` among ``partitions``
    (murmur2, positive, modulo the count: ``org.apache.kafka.common.utils.Utils``)."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


def read_history(
    settings: Settings, request_id: str, since: dt.datetime, *, timeout_s: float = 10.0
) -> History:
    """The records of ``request_id`` on ``rag.tokens`` and ``rag.responses`` from ``since``.

    Args:
        settings: Kafka settings and the topic prefix.
        request_id: the request (the records' key).
        since: when the query was created (UTC); the read starts :data:`CLOCK_SKEW_S` earlier.
        timeout_s: the longest the whole read may take.

    Raises:
        HistoryUnavailableError: a topic is missing, or the read did not finish in time.
    """
    registry = TopicRegistry(settings.kafka.topic_prefix)
    key = request_id.encode()
    consumer = make_consumer(
        settings.kafka,
        group=None,
        client_id=f"{settings.kafka.client_id}-resume",
        request_timeout_ms=settings.kafka.request_timeout_ms,
        max_poll_records=MAX_POLL_RECORDS,
    )
    deadline = time.monotonic() + timeout_s
    try:
        parts = _partitions(consumer, registry, key)
        consumer.assign(parts)
        ends = consumer.end_offsets(parts)
        start_ms = int((since.timestamp() - CLOCK_SKEW_S) * 1000)
        found = consumer.offsets_for_times(dict.fromkeys(parts, start_ms))
        for tp in parts:
            at = found.get(tp)
            consumer.seek(tp, at.offset if at is not None else ends[tp])
        return _scan(consumer, ends, key, parts[0].topic, deadline)
    except HistoryUnavailableError:
        raise
    except Exception as exc:  # kafka-python's errors, translated at the boundary
        raise HistoryUnavailableError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        consumer.close()


def _partitions(
    consumer: KafkaConsumer, registry: TopicRegistry, key: bytes
) -> list[TopicPartition]:
    """The partitions of ``key`` on ``rag.tokens`` and ``rag.responses``, in that order.

    Raises:
        HistoryUnavailableError: a topic does not exist.
    """
    parts = []
    for spec in (TOKENS, RESPONSES):
        topic = registry.name(spec)
        ids = consumer.partitions_for_topic(topic)
        if not ids:
            raise HistoryUnavailableError(f"topic {topic!r} does not exist")
        parts.append(TopicPartition(topic, partition_of(key, len(ids))))
    return parts


def _scan(
    consumer: KafkaConsumer,
    ends: dict[TopicPartition, int],
    key: bytes,
    tokens_topic: str,
    deadline: float,
) -> History:
    """Read the positioned ``consumer`` up to ``ends``, keeping the records of ``key``.

    Raises:
        HistoryUnavailableError: ``deadline`` (monotonic) passed first.
    """
    history = History()
    open_parts = {tp for tp in ends if consumer.position(tp) < ends[tp]}
    while open_parts:
        if time.monotonic() > deadline:
            raise HistoryUnavailableError(f"the log of {key.decode()} was not read in time")
        for tp, records in consumer.poll(timeout_ms=200).items():
            for record in records:
                if record.offset >= ends[tp]:
                    break
                history.scanned += 1
                if record.key == key:
                    _take(history, record.value, is_token=tp.topic == tokens_topic)
        open_parts = {tp for tp in open_parts if consumer.position(tp) < ends[tp]}
    return history


def _take(history: History, value: bytes, *, is_token: bool) -> None:
    """Add one record of the request to ``history``; an undecodable one is skipped (the live
    reply router skips it too)."""
    try:
        if is_token:
            history.tokens.append(decode(AnswerToken, value))
        elif history.response is None:
            history.response = decode(QueryResponse, value)
    except Exception as exc:
        log.warning("streams.history_undecodable", token=is_token, error=str(exc))
