"""A replicated Kafka and Elasticsearch on loopback, beside the single-node services (issue 26).

``ragstream infra cluster up`` (``make up CLUSTER=1``) and the cluster chaos suite start, from
``settings.infra.cluster`` (:class:`~ragstream.settings.ClusterSettings`):

- Kafka: one KRaft node per port, each ``process.roles=broker,controller`` with
  ``node.id`` 1..N and a static quorum of all of them (``controller.quorum.voters``; three
  voters survive the loss of one), the internal and auto-created topics at the cluster's
  replication factor and ``min.insync.replicas``; formatted once with one shared cluster id
  (kept in ``<dir>/kafka-cluster.id``).
- Elasticsearch: one node per port, the first master-eligible and data, the others data-only,
  so that any data node may leave (its primaries' replicas are promoted) without the cluster
  losing its elected master (two master-eligible nodes could not lose either: a majority of
  two is two).

Each node has its own ports and its own ``local_dir`` (``<dir>/kafka-<n>``,
``<dir>/elasticsearch-<n>``) and shares the installed binaries (``infra.install_dir``). The
clients' view of it (bootstrap servers, the Elasticsearch URLs, topic replication, index
replicas) is :func:`client_settings`, or :func:`client_env` for processes.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import structlog

from infra.elasticsearch_service import ElasticsearchService, EsNode
from infra.errors import InfraError
from infra.kafka_service import KafkaService, new_cluster_id
from infra.service import Service, ServiceStatus
from ragstream.settings import ClusterSettings, Settings

log = structlog.get_logger(__name__)

CLUSTER_ID_FILE = "kafka-cluster.id"

#: The KRaft client's state changes in a node's ``server.log`` (``org.apache.kafka.raft.
#: QuorumState``): ``Completed transition to Leader(localReplicaKey=ReplicaKey(id=2, ...),
#: epoch=3, ...`` or ``... to FollowerState(fetchTimeoutMs=2000, epoch=3, leader=2, ...``.
_TRANSITION = re.compile(r"Completed transition to (\w+)\((.*)")
_EPOCH = re.compile(r"\bepoch=(\d+)")
_LEADER = re.compile(r"\bleader(?:Id)?=(\d+)")


def cluster_dir(settings: Settings) -> Path:
    """``infra.cluster.dir``, or ``<infra.local_dir>/cluster``."""
    return (settings.infra.cluster.dir or settings.infra.local_dir / "cluster").resolve()


def client_settings(settings: Settings) -> Settings:
    """``settings`` pointed at the cluster: every broker as bootstrap server, every node's URL,
    topics at the cluster's replication factor and min ISR, the index at its replica count."""
    cluster, host = settings.infra.cluster, settings.infra.host
    kafka = settings.kafka.model_copy(
        update={
            "bootstrap_servers": ",".join(f"{host}:{p}" for p in cluster.kafka_ports),
            "replication_factor": cluster.replication_factor,
            "min_insync_replicas": cluster.min_insync_replicas,
        }
    )
    es = settings.elasticsearch.model_copy(
        update={
            "url": ",".join(f"http://{host}:{p}" for p in cluster.elasticsearch_ports),
            "replicas": cluster.elasticsearch_replicas,
        }
    )
    return settings.model_copy(update={"kafka": kafka, "elasticsearch": es})


def client_env(settings: Settings) -> dict[str, str]:
    """The ``RAGSTREAM_*`` variables that point a process at the cluster (see
    :func:`client_settings`)."""
    mine = client_settings(settings)
    return {
        "RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS": mine.kafka.bootstrap_servers,
        "RAGSTREAM_KAFKA__REPLICATION_FACTOR": str(mine.kafka.replication_factor),
        "RAGSTREAM_KAFKA__MIN_INSYNC_REPLICAS": str(mine.kafka.min_insync_replicas),
        "RAGSTREAM_ELASTICSEARCH__URL": mine.elasticsearch.url,
        "RAGSTREAM_ELASTICSEARCH__REPLICAS": str(mine.elasticsearch.replicas),
    }


@dataclass
class Cluster:
    """The cluster's nodes as :mod:`infra` services (nothing is started by building it).

    Attributes:
        settings: The settings it was built from (``settings.infra.cluster``).
        kafka: Node ``n`` is ``kafka[n - 1]`` (``node.id`` n).
        elasticsearch: The master-eligible node first, then the data-only ones.
    """

    settings: Settings
    kafka: list[KafkaService]
    elasticsearch: list[ElasticsearchService]

    @classmethod
    def from_settings(cls, settings: Settings) -> Cluster:
        """Build the node services of ``settings.infra.cluster``; reads (or, the first time,
        writes) the Kafka cluster id under :func:`cluster_dir`."""
        spec: ClusterSettings = settings.infra.cluster
        base, host = cluster_dir(settings), settings.infra.host
        base.mkdir(parents=True, exist_ok=True)
        id_file = base / CLUSTER_ID_FILE
        if not id_file.is_file():
            id_file.write_text(new_cluster_id())
        cluster_id = id_file.read_text().strip()
        voters = ",".join(
            f"{n}@{host}:{port}" for n, port in enumerate(spec.kafka_controller_ports, start=1)
        )
        kafka = [
            KafkaService(
                _node_settings(
                    settings,
                    base / f"kafka-{n}",
                    kafka_port=port,
                    kafka_controller_port=controller,
                    kafka_heap_mb=spec.kafka_heap_mb,
                ),
                node_id=n,
                voters=voters,
                cluster_id=cluster_id,
                replication=(spec.replication_factor, spec.min_insync_replicas),
                label=f"kafka-{n}",
                extra={
                    "broker.session.timeout.ms": str(spec.broker_session_timeout_ms),
                    "broker.heartbeat.interval.ms": str(
                        max(250, spec.broker_session_timeout_ms // 4)
                    ),
                },
            )
            for n, (port, controller) in enumerate(
                zip(spec.kafka_ports, spec.kafka_controller_ports, strict=True), start=1
            )
        ]
        name = f"ragstream-cluster-{cluster_id[:8].lower()}"
        seeds = tuple(f"{host}:{p}" for p in spec.elasticsearch_transport_ports)
        es = [
            ElasticsearchService(
                _node_settings(
                    settings,
                    base / f"elasticsearch-{n}",
                    elasticsearch_port=port,
                    elasticsearch_transport_port=transport,
                    elasticsearch_heap_mb=spec.elasticsearch_heap_mb,
                ),
                node=EsNode(
                    cluster_name=name,
                    node_name=f"{name}-{n}",
                    seed_hosts=seeds,
                    master_nodes=(f"{name}-1",),
                    roles=("master", "data", "ingest") if n == 1 else ("data", "ingest"),
                ),
                label=f"elasticsearch-{n}",
            )
            for n, (port, transport) in enumerate(
                zip(spec.elasticsearch_ports, spec.elasticsearch_transport_ports, strict=True),
                start=1,
            )
        ]
        return cls(settings, kafka, es)

    @property
    def services(self) -> list[Service]:
        """Every node, Kafka first."""
        return [*self.kafka, *self.elasticsearch]

    def kafka_leader(self) -> int | None:
        """``node.id`` of the active controller (the KRaft quorum's leader), or ``None``.

        Read from the running nodes' ``server.log``: the newest state change of each (its
        epoch, and the leader it names or itself as ``Leader``); the highest epoch wins.
        """
        best: tuple[int, int] | None = None
        for node in self.kafka:
            if node.running_pid() is None:
                continue
            seen = _last_transition(node.logs_dir / "server.log", node.node_id)
            if seen is not None and (best is None or seen[0] > best[0]):
                best = seen
        return None if best is None else best[1]


def _last_transition(path: Path, node_id: int) -> tuple[int, int] | None:
    """``(epoch, leader id)`` of the last raft transition in ``path`` naming a leader."""
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace")
        for line in reversed(text.splitlines()):
            match = _TRANSITION.search(line)
            if not match:
                continue
            epoch = _EPOCH.search(match.group(2))
            if epoch is None:
                continue
            if match.group(1).startswith("Leader"):
                return int(epoch.group(1)), node_id
            leader = _LEADER.search(match.group(2))
            if leader is not None:
                return int(epoch.group(1)), int(leader.group(1))
    return None


def _node_settings(settings: Settings, local_dir: Path, **ports: int) -> Settings:
    infra = settings.infra.model_copy(
        update={
            "local_dir": local_dir,
            "install_dir": settings.infra.install_dir or settings.infra.local_dir,
            **ports,
        }
    )
    return settings.model_copy(update={"infra": infra})


def up(settings: Settings) -> list[ServiceStatus]:
    """Start every node that does not run yet, all at once, and wait until each is healthy.

    Elasticsearch's first master election needs its master-eligible node, and Kafka's quorum a
    majority of voters, so the nodes start together (a node alone never turns healthy).

    Returns:
        One healthy :class:`ServiceStatus` per node.

    Raises:
        PortConflictError: A node's port is held by another process (nothing was started).
        InfraError: A node died or stayed unhealthy (the message gathers every failure).
    """
    cluster = Cluster.from_settings(settings)
    started = time.monotonic()
    for service in cluster.services:
        service.check_ports()
    with ThreadPoolExecutor(len(cluster.services), thread_name_prefix="cluster-up") as pool:
        futures = [pool.submit(service.ensure_up) for service in cluster.services]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise InfraError("\n\n".join(str(e) for e in errors)) from errors[0]
    log.info(
        "cluster up",
        nodes=[s.label for s in cluster.services],
        seconds=round(time.monotonic() - started, 1),
    )
    return [f.result() for f in futures]


def down(settings: Settings) -> None:
    """Stop every node that runs (:func:`stop_nodes`); data is kept."""
    if not cluster_dir(settings).is_dir():
        return
    stop_nodes(Cluster.from_settings(settings).services)


def stop_nodes(nodes: list[Service]) -> None:
    """SIGCONT (a frozen node ignores SIGTERM), then stop every node at once: a KRaft node
    stopped last would wait its whole timeout for a controller quorum already gone."""
    for node in nodes:
        _resume(node)
    with ThreadPoolExecutor(max(1, len(nodes)), thread_name_prefix="cluster-down") as pool:
        for node, future in [(node, pool.submit(node.stop)) for node in nodes]:
            try:
                future.result()
            except Exception as exc:  # one node that does not stop must not keep the others
                log.warning("cluster node did not stop", node=node.label, error=repr(exc))


def status(settings: Settings) -> list[ServiceStatus]:
    """One :class:`ServiceStatus` per node (``kafka-1`` ..., ``elasticsearch-1`` ...)."""
    return [service.status() for service in Cluster.from_settings(settings).services]


@contextlib.contextmanager
def running(settings: Settings) -> Iterator[Cluster]:
    """Start the cluster of ``settings`` (:func:`up`), yield it, stop every node on exit,
    even when the start failed half-way."""
    cluster = Cluster.from_settings(settings)
    try:
        up(settings)
        yield cluster
    finally:
        stop_nodes(cluster.services)


def _resume(service: Service) -> None:
    """SIGCONT a node that may have been frozen (SIGSTOP), so that it can stop."""
    pid = service.running_pid()
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
