"""The Operations page of one tenant: what an ``operator`` key (not a ``cluster-operator``)
sees (``api.ops.OpsService.status`` with a tenant, which calls these).

Kafka topics, pools, processes and the index are shared by every tenant, so a tenant's
operator sees only what is its own, counted from the records themselves
(:func:`topics.scan.record_tenant`):

- **pools**: each pool's *lag for this tenant*, the tenant's records between the pool's
  committed offsets and the end of its input topic (at most the newest
  :data:`topics.scan.MAX_SCAN_PER_PARTITION` of each partition; ``error`` says when a count is a
  lower bound). Per-partition offsets, members, throughput and latency describe everyone's
  traffic and are left out;
- **dlq**: the number of the tenant's dead letters in each DLQ;
- **index**: the tenant's chunk count;
- **processes**: none (the deployment's processes are a cluster operator's);
- **LLM servers**: their health, as for everyone (it says nothing of other tenants).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kafka import TopicPartition

from api.ops_models import DlqOut, IndexOut, PoolOut, ProcessesOut
from ragstream.settings import Settings
from topics.registry import POOL_INPUTS, TOPICS, TopicRegistry
from topics.scan import MAX_SCAN_PER_PARTITION, record_tenant, scan_range
from workers.runtime.build import pool_group

#: What a tenant operator's Operations page says in place of the processes.
PROCESSES_HIDDEN = "the deployment's processes are shown to cluster operators only"
TRUNCATED = (
    f"a lower bound: only the newest {MAX_SCAN_PER_PARTITION} records of a partition are counted"
)


def tenant_counter(tenant: str) -> tuple[Callable[[Any], None], Callable[[], int]]:
    """A record visitor that counts ``tenant``'s records, and a reader of the count."""
    count = 0

    def visit(record: Any) -> None:
        nonlocal count
        if record_tenant(record.value) == tenant:
            count += 1

    return visit, lambda: count


def tenant_pools(
    settings: Settings, registry: TopicRegistry, consumer: Any, admin: Any, tenant: str
) -> list[PoolOut]:
    """Each pool with ``lag`` = the tenant's records its group has not committed yet.

    Raises:
        kafka.errors.KafkaError: Kafka did not answer (the caller shows it).
    """
    from topics.lag import partition_offsets

    out = []
    for pool, spec in POOL_INPUTS.items():
        cfg = getattr(settings.pools, pool.replace("-", "_"))
        topic, group = registry.name(spec), pool_group(settings, pool)
        row = PoolOut(
            name=pool, topic=topic, group=group, max_batch=cfg.max_batch,
            max_wait_ms=cfg.max_wait_ms,
        )  # fmt: skip
        try:
            offsets = partition_offsets(admin, consumer, group, topic)
        except LookupError as exc:
            row.error = str(exc)
            out.append(row)
            continue
        start = {
            TopicPartition(topic, p.partition): p.begin if p.committed is None else p.committed
            for p in offsets
        }
        end = {TopicPartition(topic, p.partition): p.end for p in offsets}
        visit, counted = tenant_counter(tenant)
        if scan_range(consumer, start, end, visit):
            row.error = TRUNCATED
        row.lag = counted()
        out.append(row)
    return out


def tenant_dlq(registry: TopicRegistry, consumer: Any, tenant: str) -> list[DlqOut]:
    """Each DLQ with ``depth`` = the tenant's dead letters in it."""
    out = []
    for spec in TOPICS:
        if not spec.consumed:
            continue
        topic = registry.dlq(spec)
        row = DlqOut(topic=topic, source=registry.name(spec))
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            row.error = "no such topic"
            out.append(row)
            continue
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        visit, counted = tenant_counter(tenant)
        if scan_range(consumer, consumer.beginning_offsets(tps), consumer.end_offsets(tps), visit):
            row.error = TRUNCATED
        row.depth = counted()
        out.append(row)
    return out


def tenant_index(index: IndexOut, es: Any, tenant: str) -> IndexOut:
    """``index`` with ``chunk_count`` = the tenant's chunks (its count of everyone's dropped)."""
    scoped = index.model_copy(update={"chunk_count": None})
    if index.physical is None or es is None:
        return scoped
    try:
        query = {"bool": {"filter": [{"term": {"tenant": tenant}}]}}
        scoped.chunk_count = int(es.count(index=index.alias, query=query).body["count"])
    except Exception as exc:  # shown on the page
        scoped.error = f"{type(exc).__name__}: {exc}"
    return scoped


def hidden_processes() -> ProcessesOut:
    """The processes section of a tenant operator's page."""
    return ProcessesOut(error=PROCESSES_HIDDEN)
