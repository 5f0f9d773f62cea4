"""What the console's Operations page shows, collected in the API process (operator keys only;
this is a ``cluster-operator``'s view of the whole deployment, :mod:`api.ops_tenant` a tenant
``operator``'s).

- **Processes**: the supervisor's ``supervisor.json`` (:mod:`entry.supervisor` writes it under
  ``<infra.local_dir>/demo/``; ``ragstream demo status`` prints the same file): each Procfile
  process with its state, pid, restarts and last exit. Read as a file, so ``api`` imports
  nothing of ``entry``. A supervisor whose pid is gone is reported as not running.
- **Pools**: per pool, the consumer lag of each partition of its input topic, from Kafka itself
  (the group's committed offsets against the partitions' end offsets, the numbers behind the
  pools' ``ragstream_consumer_lag`` gauge), its live members (the pools' pressure reports in
  Redis), and from the pool processes' own Prometheus endpoints (the ``metrics_port`` of each
  pool's settings, plus the ports the supervisor's commands set, e.g. ``retrieval-2``): batch
  size, batch (stage) latency p50/p95, throughput and error counts *over the last
  :data:`WINDOW_S` seconds*, from the difference between the newest scrape and the oldest one in
  that window (histogram quantiles interpolated within buckets as Prometheus'
  ``histogram_quantile`` does); until this process has scraped a pool for a whole window, batch
  size, p50/p95 and errors are the totals since the pool started (``since_start``). A short
  history of throughput and lag feeds the page's chart.
- **DLQ depth** per consumed topic (records between the DLQ partitions' start and end offsets,
  as :func:`topics.dlq.inspect` counts them).
- **LLM servers**: :func:`ragstream.health.probe_llm_servers`.
- **Index**: the alias, the physical index behind it, the embedding model it records and its
  chunk count.

Each section fails on its own (its ``error`` says why); a snapshot is cached
:data:`CACHE_S` seconds, so many open consoles cost one collection.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
import structlog
from prometheus_client.parser import text_string_to_metric_families

from api import ops_tenant
from api.ops_models import (
    DlqOut,
    IndexOut,
    OpsStatus,
    PartitionLag,
    PoolOut,
    ProbeOut,
    ProcessesOut,
    ProcessOut,
)
from ragstream.health import probe_llm_servers
from ragstream.settings import Settings
from topics.registry import POOL_INPUTS, TOPICS, TopicRegistry
from workers.runtime.build import pool_group
from workers.runtime.pressure import read_pressure

log = structlog.get_logger(__name__)

SUPERVISOR_STATE = Path("demo") / "supervisor.json"
#: Seconds of scrapes the windowed numbers (throughput, p50/p95, errors) span.
WINDOW_S = 300.0
#: Samples of throughput and lag kept per pool for the chart.
HISTORY = 120
CACHE_S = 2.0
LLM_CACHE_S = 10.0
SCRAPE_TIMEOUT_S = 1.0
PORT_IN_COMMAND = re.compile(r"RAGSTREAM_POOLS__(\w+?)__METRICS_PORT=(\d+)")
WORKER_COMMAND = re.compile(r"\bragstream\s+worker\s+([\w-]+)")


# -- Prometheus text -> per-pool numbers --------------------------------------------------------


@dataclass
class PoolScrape:
    """One pool's series summed over the processes scraped at ``at`` (UNIX s)."""

    at: float
    events_in: float = 0.0
    errors: float = 0.0
    dead_letters: float = 0.0
    in_flight: float = 0.0
    batch_count: float = 0.0
    batch_sum: float = 0.0
    latency: dict[float, float] = field(default_factory=dict)  # le (s) -> cumulative count


def parse_pool_metrics(texts: list[str], at: float) -> dict[str, PoolScrape]:
    """Sum the ``ragstream_*`` pool series of several processes' exposition ``texts`` by their
    ``pool`` label.

    Raises:
        ValueError: a text that is not the Prometheus exposition format.
    """
    found: dict[str, PoolScrape] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                pool = sample.labels.get("pool")
                if pool is None:
                    continue
                s = found.setdefault(pool, PoolScrape(at))
                _add(s, sample.name, sample.labels, sample.value)
    return found


def _add(s: PoolScrape, name: str, labels: dict[str, str], value: float) -> None:
    if name == "ragstream_events_in_total":
        s.events_in += value
    elif name == "ragstream_errors_total":
        s.errors += value
    elif name == "ragstream_dead_letters_total":
        s.dead_letters += value
    elif name == "ragstream_in_flight_events":
        s.in_flight += value
    elif name == "ragstream_batch_size_count":
        s.batch_count += value
    elif name == "ragstream_batch_size_sum":
        s.batch_sum += value
    elif name == "ragstream_batch_latency_seconds_bucket":
        le = float(labels["le"])
        s.latency[le] = s.latency.get(le, 0.0) + value


def histogram_quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The ``q`` quantile (0-1) of cumulative ``{le: count}`` buckets, interpolated linearly
    within the bucket it falls in (Prometheus' ``histogram_quantile``); ``None`` without
    observations. A quantile in the ``+Inf`` bucket is the highest finite bound."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            inside = count - below
            return le if inside <= 0 else lower + (le - lower) * (rank - below) / inside
        lower, below = le, count
    return lower


def window_numbers(old: PoolScrape, new: PoolScrape) -> dict[str, float | None]:
    """Throughput, mean batch size, batch latency p50/p95 (ms) and errors between two scrapes
    (``old`` is ``new`` itself for the first: then they are the totals since start)."""
    span = new.at - old.at
    events = max(0.0, new.events_in - old.events_in)
    batches = max(0.0, new.batch_count - old.batch_count)
    if old is new:
        batches, events = new.batch_count, new.events_in
    latency = {
        le: max(0.0, c - (0.0 if old is new else old.latency.get(le, 0.0)))
        for le, c in new.latency.items()
    }
    p50 = histogram_quantile(0.5, latency)
    p95 = histogram_quantile(0.95, latency)
    summed = new.batch_sum - (0.0 if old is new else old.batch_sum)
    return {
        "throughput_per_s": events / span if span > 0 else None,
        "batch_size_mean": summed / batches if batches else None,
        "batch_p50_ms": None if p50 is None else p50 * 1000,
        "batch_p95_ms": None if p95 is None else p95 * 1000,
        "errors": max(0.0, new.errors - (0.0 if old is new else old.errors)),
    }


# -- the collector ------------------------------------------------------------------------------


def supervisor_file(settings: Settings) -> Path:
    """Where the demo supervisor writes its state."""
    return settings.infra.local_dir / SUPERVISOR_STATE


def read_processes(path: Path) -> ProcessesOut:
    """The supervisor's processes from its state file at ``path``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return ProcessesOut(error=f"no supervisor state at {path}: {type(exc).__name__}")
    pid = data.get("supervisor_pid")
    running = isinstance(pid, int) and _alive(pid)
    out = []
    for name, proc in (data.get("processes") or {}).items():
        command = str(proc.get("command", ""))
        worker = WORKER_COMMAND.search(command)
        out.append(
            ProcessOut(
                name=name, command=command, pool=worker.group(1) if worker else None,
                state=str(proc.get("state")) if running else "not running",
                pid=proc.get("pid") if running else None, restarts=int(proc.get("restarts", 0)),
                started_at=proc.get("started_at"), last_exit_code=proc.get("last_exit_code"),
                last_exit_at=proc.get("last_exit_at"),
            )
        )  # fmt: skip
    return ProcessesOut(
        supervisor_pid=pid if isinstance(pid, int) else None,
        running=running,
        updated_at=data.get("updated_at"),
        processes=out,
        error=None if running else "the supervisor is not running",
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def metrics_ports(settings: Settings, processes: ProcessesOut) -> dict[str, list[int]]:
    """``{pool: [port, ...]}``: each pool's configured ``metrics_port`` (0: none) and the
    ports the supervisor's commands set for more processes of a pool."""
    ports: dict[str, list[int]] = {}
    for pool in POOL_INPUTS:
        port = getattr(settings.pools, pool.replace("-", "_")).metrics_port
        ports[pool] = [port] if port else []
    for proc in processes.processes:
        for attr, port in PORT_IN_COMMAND.findall(proc.command):
            pool = attr.lower().replace("_", "-")
            if pool in ports and int(port) not in ports[pool]:
                ports[pool].append(int(port))
    return ports


class OpsService:
    """Collects :class:`OpsStatus` for one API process (thread-safe; one collection at a time).

    Args:
        settings: the deployment's settings.
        client: Redis (the pools' pressure reports).
    """

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self.settings = settings
        self.redis = client
        self.registry = TopicRegistry(settings.kafka.topic_prefix)
        self._lock = threading.Lock()
        self._cached: tuple[float, OpsStatus] | None = None
        self._tenant_cache: dict[str, tuple[float, OpsStatus]] = {}
        self._llm: tuple[float, list[ProbeOut]] | None = None
        self._scrapes: dict[str, deque[PoolScrape]] = {}
        self._history: dict[str, deque[list[float]]] = {}
        self._first_scrape: dict[str, float] = {}
        self._consumer: Any = None
        self._admin: Any = None
        self._es: Any = None

    def status(self, tenant: str | None = None) -> OpsStatus:
        """The current snapshot (at most :data:`CACHE_S` old): the whole deployment's, or with
        ``tenant`` only what is that tenant's (:mod:`api.ops_tenant`)."""
        if tenant is not None:
            return self._tenant_status(tenant)
        with self._lock:
            now = time.time()
            if self._cached is not None and now - self._cached[0] < CACHE_S:
                return self._cached[1]
            processes = read_processes(supervisor_file(self.settings))
            snapshot = OpsStatus(
                collected_at=now,
                processes=processes,
                pools=self._pools(processes, now),
                dlq=self._dlq(),
                llm=self._llm_health(now),
                index=self._index(),
            )
            self._cached = (now, snapshot)
            return snapshot

    def _tenant_status(self, tenant: str) -> OpsStatus:
        with self._lock:
            now = time.time()
            cached = self._tenant_cache.get(tenant)
            if cached is not None and now - cached[0] < CACHE_S:
                return cached[1]
            pools: list[PoolOut] = []
            dlq: list[DlqOut] = []
            try:
                consumer, admin = self._kafka()
                pools = ops_tenant.tenant_pools(
                    self.settings, self.registry, consumer, admin, tenant
                )
                dlq = ops_tenant.tenant_dlq(self.registry, consumer, tenant)
            except Exception as exc:  # shown on the page
                error = f"{type(exc).__name__}: {exc}"
                dlq = [DlqOut(topic="", source="", error=error)]
                self._reset_kafka()
            snapshot = OpsStatus(
                collected_at=now,
                scope="tenant",
                tenant=tenant,
                processes=ops_tenant.hidden_processes(),
                pools=pools,
                dlq=dlq,
                llm=self._llm_health(now),
                index=ops_tenant.tenant_index(self._index(), self._es, tenant),
            )
            if len(self._tenant_cache) > 1000:
                self._tenant_cache.clear()
            self._tenant_cache[tenant] = (now, snapshot)
            return snapshot

    def close(self) -> None:
        """Close the Kafka and Elasticsearch clients."""
        with self._lock:
            self._reset_kafka()
            if self._es is not None:
                self._es.close()
                self._es = None

    # -- Kafka ------------------------------------------------------------------------------

    def _kafka(self) -> tuple[Any, Any]:
        from topics.admin import make_admin
        from topics.consumer import make_consumer

        if self._consumer is None:
            self._consumer = make_consumer(
                self.settings.kafka, group=None, client_id="ragstream-console",
                request_timeout_ms=10_000,
            )  # fmt: skip
        if self._admin is None:
            self._admin = make_admin(self.settings.kafka)
        return self._consumer, self._admin

    def _reset_kafka(self) -> None:
        for client in (self._consumer, self._admin):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        self._consumer = self._admin = None

    def _partition_lags(self, topic: str, group: str) -> list[PartitionLag]:
        from topics.lag import partition_offsets

        consumer, admin = self._kafka()
        return [
            PartitionLag(partition=p.partition, lag=p.lag, end=p.end, committed=p.committed)
            for p in partition_offsets(admin, consumer, group, topic)
        ]

    # -- sections ---------------------------------------------------------------------------

    def _pools(self, processes: ProcessesOut, now: float) -> list[PoolOut]:
        ports = metrics_ports(self.settings, processes)
        scraped = self._scrape(ports, now)
        out = []
        for pool, spec in POOL_INPUTS.items():
            cfg = getattr(self.settings.pools, pool.replace("-", "_"))
            topic, group = self.registry.name(spec), pool_group(self.settings, pool)
            row = PoolOut(
                name=pool, topic=topic, group=group, max_batch=cfg.max_batch,
                max_wait_ms=cfg.max_wait_ms, metrics_endpoints=ports[pool],
            )  # fmt: skip
            try:
                row.partitions = self._partition_lags(topic, group)
                row.lag = sum(p.lag for p in row.partitions)
            except Exception as exc:  # one section's failure is shown, not raised
                row.error = f"lag: {type(exc).__name__}: {exc}"
                self._reset_kafka()
            with contextlib.suppress(redis.RedisError, ValueError, KeyError, TypeError):
                row.members = read_pressure(
                    self.redis, self.settings.kafka.topic_prefix + pool
                ).members
            self._windowed(row, scraped.get(pool), now)
            out.append(row)
        return out

    def _scrape(self, ports: dict[str, list[int]], now: float) -> dict[str, PoolScrape]:
        texts: dict[str, list[str]] = {}
        for pool, pool_ports in ports.items():
            for port in pool_ports:
                try:
                    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=SCRAPE_TIMEOUT_S)
                    r.raise_for_status()
                    texts.setdefault(pool, []).append(r.text)
                except httpx.HTTPError as exc:
                    log.debug("ops.scrape_failed", pool=pool, port=port, error=str(exc))
        found: dict[str, PoolScrape] = {}
        for pool, pool_texts in texts.items():
            try:
                parsed = parse_pool_metrics(pool_texts, now)
            except ValueError as exc:
                log.warning("ops.scrape_unparsable", pool=pool, error=str(exc))
                continue
            found[pool] = parsed.get(pool, PoolScrape(now))
        return found

    def _windowed(self, row: PoolOut, scrape: PoolScrape | None, now: float) -> None:
        history = self._history.setdefault(row.name, deque(maxlen=HISTORY))
        if scrape is None:
            history.append([now, 0.0, float(row.lag or 0)])
            row.history = list(history)
            return
        scrapes = self._scrapes.setdefault(row.name, deque())
        scrapes.append(scrape)
        # The baseline is the newest scrape at least a window old (or the oldest there is).
        while len(scrapes) > 2 and now - scrapes[1].at >= WINDOW_S:
            scrapes.popleft()
        oldest = scrapes[0]
        numbers = window_numbers(oldest, scrape)
        if scrape.at - self._first_scrape.setdefault(row.name, oldest.at) < WINDOW_S:
            # Scraped for less than a window yet: the totals since the pool started say more
            # than the few seconds seen (throughput stays the rate between the scrapes seen).
            rate_seen = numbers["throughput_per_s"]
            numbers = window_numbers(scrape, scrape) | {"throughput_per_s": rate_seen}
            row.since_start = True
        previous = scrapes[-2] if len(scrapes) > 1 else None
        rate = window_numbers(previous, scrape)["throughput_per_s"] if previous else 0.0
        history.append([now, rate or 0.0, float(row.lag or 0)])
        row.window_s = scrape.at - oldest.at
        row.throughput_per_s = numbers["throughput_per_s"]
        row.batch_size_mean = numbers["batch_size_mean"]
        row.batch_p50_ms = numbers["batch_p50_ms"]
        row.batch_p95_ms = numbers["batch_p95_ms"]
        row.errors = numbers["errors"]
        row.errors_total = scrape.errors
        row.dead_letters_total = scrape.dead_letters
        row.in_flight = scrape.in_flight
        row.history = list(history)

    def dlq_topics(self) -> set[str]:
        """The physical dead-letter topics of the consumed topics (no broker call)."""
        return {self.registry.dlq(spec) for spec in TOPICS if spec.consumed}

    def _dlq(self) -> list[DlqOut]:
        from kafka import TopicPartition

        out = []
        for spec in TOPICS:
            if not spec.consumed:
                continue
            topic = self.registry.dlq(spec)
            row = DlqOut(topic=topic, source=self.registry.name(spec))
            try:
                consumer, _ = self._kafka()
                partitions = consumer.partitions_for_topic(topic)
                if not partitions:
                    row.error = "no such topic"
                else:
                    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
                    end, begin = consumer.end_offsets(tps), consumer.beginning_offsets(tps)
                    row.depth = sum(end[tp] - begin[tp] for tp in tps)
            except Exception as exc:  # shown on the page
                row.error = f"{type(exc).__name__}: {exc}"
                self._reset_kafka()
            out.append(row)
        return out

    def _llm_health(self, now: float) -> list[ProbeOut]:
        if self._llm is None or now - self._llm[0] > LLM_CACHE_S:
            probes = [
                ProbeOut(name=p.name, healthy=p.healthy, detail=p.detail, latency_ms=p.latency_ms)
                for p in probe_llm_servers(self.settings)
            ]
            self._llm = (now, probes)
        return self._llm[1]

    def _index(self) -> IndexOut:
        from elasticsearch import Elasticsearch

        from index.schema import index_model

        alias = self.settings.elasticsearch.index_alias
        emb = self.settings.embedding
        configured = emb.onnx_model if emb.backend == "onnx" else (emb.model_path or "")
        row = IndexOut(alias=alias, configured_model=configured)
        try:
            if self._es is None:
                self._es = Elasticsearch(self.settings.elasticsearch.hosts, request_timeout=5)
            es = self._es
            found = es.options(ignore_status=404).indices.get_alias(name=alias).body
            names = sorted(n for n in found if isinstance(found.get(n), dict))
            if not names:
                row.error = "the alias does not exist yet (nothing indexed)"
                return row
            row.physical = names[-1]
            row.model_id, row.dims = index_model(es, row.physical)
            row.chunk_count = int(es.count(index=alias).body["count"])
        except Exception as exc:  # shown on the page
            row.error = f"{type(exc).__name__}: {exc}"
        return row
