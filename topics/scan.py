"""Reading a range of a topic's records without consuming them, and the tenant of a record.

Operations scoped to one tenant (the console's Operations page for a tenant's ``operator``
key: its dead letters, their replay, its lag) read records of topics every tenant shares and
keep only the tenant's: :func:`record_tenant` reads the ``tenant`` field of a record's value (every
event has one, :class:`topics.base.Event`), and :func:`scan_range` visits the records between two
offsets of each partition, assigned by hand, with no group and no commit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from kafka import KafkaConsumer, TopicPartition

#: How many records of one partition a scoped read looks at, at most (the newest ones).
MAX_SCAN_PER_PARTITION = 20_000


def record_tenant(value: bytes | None) -> str | None:
    """The ``tenant`` of a record value (an event's JSON), or ``None`` when the value is not a
    JSON object with a string ``tenant`` (an undecodable poison record has no tenant: only a
    cluster operator sees it)."""
    if not value or b'"tenant"' not in value:
        return None
    try:
        raw = json.loads(value)
    except (UnicodeDecodeError, ValueError):
        return None
    tenant = raw.get("tenant") if isinstance(raw, dict) else None
    return tenant if isinstance(tenant, str) else None


def scan_range(
    consumer: KafkaConsumer,
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    visit: Callable[[Any], None],
    *,
    max_per_partition: int = MAX_SCAN_PER_PARTITION,
    timeout_ms: int = 10_000,
) -> bool:
    """Call ``visit(record)`` for each record of each partition from ``start`` up to (not
    including) ``end``, at most the newest ``max_per_partition`` of each; return whether a
    partition held more (the count is then a lower bound).

    ``consumer`` belongs to no group; the partitions are assigned here and nothing is
    committed.

    Raises:
        TimeoutError: the records up to ``end`` did not arrive in ``timeout_ms``.
    """
    tps = [tp for tp in end if end[tp] > start.get(tp, 0)]
    truncated = False
    consumer.assign(list(end))
    for tp in tps:
        first = max(start.get(tp, 0), end[tp] - max_per_partition)
        truncated = truncated or first > start.get(tp, 0)
        consumer.seek(tp, first)
    waited_ms = 0
    while any(consumer.position(tp) < end[tp] for tp in tps):
        if waited_ms >= timeout_ms:
            raise TimeoutError(f"records up to the end offsets did not arrive in {timeout_ms} ms")
        batch = consumer.poll(timeout_ms=500, max_records=1000)
        waited_ms += 0 if batch else 500
        for tp, records in batch.items():
            for record in records:
                if record.offset < end.get(tp, 0):
                    visit(record)
    return truncated
