"""A consumer group's lag on one topic, read from Kafka: the sum over its partitions of the
end offset minus the group's committed offset (a partition without a commit counts from its
first record, as the pools start at ``earliest``).

The same quantity KEDA's Kafka scaler scales on (``lagThreshold``), so the supervisor's
``--autoscale`` (``entry/autoscale.py``) and a Kubernetes deployment agree on when to scale.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from ragstream.settings import KafkaSettings


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """One partition of a topic as a consumer group sees it.

    Attributes:
        partition: the partition number.
        end: the offset the next record will get.
        begin: the first offset still kept.
        committed: the group's committed offset, ``None`` before its first commit.
    """

    partition: int
    end: int
    begin: int
    committed: int | None

    @property
    def lag(self) -> int:
        """Records not committed yet (from ``begin`` without a commit), never negative."""
        return max(0, self.end - (self.begin if self.committed is None else self.committed))


def partition_offsets(
    admin: KafkaAdminClient, consumer: KafkaConsumer, group: str, topic: str
) -> list[PartitionOffsets]:
    """Every partition of ``topic`` with its end, beginning and ``group``'s committed offset.

    Raises:
        LookupError: ``topic`` does not exist (no partitions known).
        kafka.errors.KafkaError: Kafka did not answer.
    """
    partitions = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    if not tps:
        raise LookupError(f"no topic {topic}")
    end = consumer.end_offsets(tps)
    begin = consumer.beginning_offsets(tps)
    committed = {
        tp: meta.offset
        for tp, meta in admin.list_consumer_group_offsets(group, partitions=tps).items()
        if meta is not None and meta.offset is not None and meta.offset >= 0
    }
    return [PartitionOffsets(tp.partition, end[tp], begin[tp], committed.get(tp)) for tp in tps]


class GroupLag:
    """Reads consumer-group lags with one admin client and one (group-less) consumer.

    Args:
        settings: Bootstrap servers and timeouts; clients connect on first use and after a
            failure (a broker restart).
    """

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._admin: KafkaAdminClient | None = None
        self._consumer: KafkaConsumer | None = None

    def _clients(self) -> tuple[KafkaAdminClient, KafkaConsumer]:
        if self._admin is None or self._consumer is None:
            self.close()
            common = {
                "bootstrap_servers": self._settings.bootstrap_servers,
                "request_timeout_ms": self._settings.request_timeout_ms,
            }
            self._admin = KafkaAdminClient(client_id="ragstream-lag", **common)
            self._consumer = KafkaConsumer(
                client_id="ragstream-lag", group_id=None, enable_auto_commit=False, **common
            )
        return self._admin, self._consumer

    def lag(self, group: str, topic: str) -> int:
        """Records of ``topic`` that ``group`` has not committed yet, over all partitions.

        Raises:
            LookupError: ``topic`` does not exist (no partitions known).
            kafka.errors.KafkaError: Kafka did not answer (the clients are rebuilt next time).
        """
        try:
            admin, consumer = self._clients()
            offsets = partition_offsets(admin, consumer, group, topic)
        except LookupError:
            raise
        except Exception:
            self.close()
            raise
        return sum(p.lag for p in offsets)

    def close(self) -> None:
        """Close both clients (safe to call twice)."""
        for client in (self._consumer, self._admin):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        self._admin = self._consumer = None
