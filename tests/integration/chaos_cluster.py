"""The chaos suite on a replicated cluster (issue 26, item 2; ``make chaos CLUSTER=1``).

A cluster of the run's own (:mod:`infra.cluster` on free ports, data under
``.local/chaos/<run>/cluster``): 3 KRaft Kafka nodes (topics at replication 3,
``min.insync.replicas=2``) and 2 Elasticsearch nodes (the index at 1 replica). The run's stack
(:func:`tests.integration.chaoskit.rig`) uses every node. Under the bounded HTTP load with
callbacks, one fault after the other, each a *window* whose p99 is reported:

1. ``kill -9`` a broker that is not the active controller; start it again; wait until every
   partition of the run is fully in sync again;
2. ``kill -9`` the active controller (the KRaft leader); wait for another to be elected; start
   it again; in sync again;
3. ``kill -9`` the data-only Elasticsearch node (its primaries' replicas are promoted on the
   other); start it again; wait for green;
4. add two retrieval and one generation process (three rebalances), each awaited until its
   group is stable with one member more;
5. stall a retrieval process (SIGSTOP) past ``max.poll.interval.ms`` and the session timeout:
   its group rebalances without it, and again with it after SIGCONT;
6. remove the three added processes (three rebalances more), awaited the same way.

Per request id as in the single-node suite. Pass: 0 never finished, 0 duplicate deliveries,
0 refused (a quorum stands through every fault: one of three brokers, one data node), and
every rebalance completed (a wait that times out fails the run).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from kafka.admin import KafkaAdminClient

from infra.cluster import Cluster, client_settings, stop_nodes
from infra.cluster import up as cluster_up
from infra.service import Service
from ragstream.settings import ClusterSettings, Settings
from tests.integration.chaoskit import (
    POOLS_CI,
    Counts,
    Rig,
    Size,
    _bindable,
    dead_lettered,
    drain,
    rig,
    service_port,
)
from tests.integration.stack import wait_for
from topics.registry import QUERIES, TopicRegistry

SIZE = Size(
    "cluster",
    rate_qps=3,
    max_in_flight=36,
    pools=(*POOLS_CI, "generation-small"),
    kill=(),
    pause_s=8,
    es_freeze_s=0,
    receiver_away_s=0,
    deadline_s=120,
    drain_s=240,
)
#: The processes added (and removed again) under load.
ADDED = ("retrieval", "retrieval", "generation-small")
MAX_POLL_INTERVAL_MS = 15_000
SESSION_TIMEOUT_MS = 10_000
#: How long the stalled process stays stopped: past both timeouts above.
STALL_S = 25.0
#: The API waits this long for Kafka to take a query (the default, 2 s, is shorter than a
#: partition's leader failover: broker.session.timeout.ms 4 s plus the election).
PRODUCE_TIMEOUT_S = 15.0


@dataclass
class ClusterCounts(Counts):
    """:class:`Counts` plus the fault windows ``(name, start, end)`` (monotonic seconds) and
    the seconds each awaited change took (``rebalances``, ``recoveries``)."""

    windows: list[tuple[str, float, float]] = field(default_factory=list)
    rebalances: list[tuple[str, float]] = field(default_factory=list)
    recoveries: list[tuple[str, float]] = field(default_factory=list)

    @property
    def refused_total(self) -> int:
        return len(self.refused_at)

    @property
    def passed(self) -> bool:
        return super().passed and self.refused_total == 0

    def window_rows(self) -> list[tuple[str, int, float, float, int]]:
        """Per window: name, requests accepted in it, their p50 and p99 latency (s, accepted
        to finished; unfinished ones count as the drain's end) and the refusals in it."""
        rows = []
        for name, start, end in self.windows:
            inside = [r for r in self.requests.values() if start <= r.accepted_at <= end]
            lat = sorted((r.finished_at or float("inf")) - r.accepted_at for r in inside)
            p50 = lat[len(lat) // 2] if lat else 0.0
            p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0
            refused = sum(1 for t in self.refused_at if start <= t <= end)
            rows.append((name, len(inside), p50, p99, refused))
        return rows

    def table(self) -> str:
        lines = [super().table().rstrip()]
        lines.append("fault windows: requests accepted in it, latency p50 / p99 s, refused")
        for name, n, p50, p99, refused in self.window_rows():
            lines.append(f"  {name:<58} {n:4d}  {p50:5.1f} / {p99:5.1f}  {refused}")
        for what, rows in (("rebalance", self.rebalances), ("recovery", self.recoveries)):
            for name, seconds in rows:
                lines.append(f"  {what}: {name} in {seconds:.1f} s")
        verdict = "PASS" if self.passed else "FAIL"
        lines.append(
            f"{verdict} (cluster): never finished {self.never_finished}, duplicates "
            f"{self.duplicates}, refused {self.refused_total}"
        )
        return "\n".join(lines) + "\n"


def cluster_settings(settings: Settings, local_dir: Path) -> Settings:
    """``settings`` with a cluster of its own: free ports below the ephemeral range, data under
    ``local_dir``, the checkout's binaries."""
    local_dir.mkdir(parents=True, exist_ok=True)
    taken: set[int] = set()
    spec = ClusterSettings(
        dir=local_dir / "cluster",
        kafka_ports=[service_port(taken) for _ in range(3)],
        kafka_controller_ports=[service_port(taken) for _ in range(3)],
        elasticsearch_ports=[service_port(taken) for _ in range(2)],
        elasticsearch_transport_ports=[service_port(taken) for _ in range(2)],
    )
    infra = settings.infra.model_copy(
        update={
            "local_dir": local_dir,
            "install_dir": settings.infra.install_dir or settings.infra.local_dir,
            "cluster": spec,
            # A node's (re)start under the run's load on 2 shared cores: Elasticsearch took
            # over 120 s (the default) once, 47 s of it in "Bootstrapping Entitlements".
            "start_timeout_s": 600.0,
        }
    )
    return settings.model_copy(update={"infra": infra})


@contextlib.contextmanager
def private_cluster(settings: Settings, local_dir: Path) -> Iterator[Cluster]:
    """Start a cluster of its own (:func:`cluster_settings`); stop every node on exit."""
    mine = cluster_settings(settings, local_dir)
    cluster = Cluster.from_settings(mine)
    try:
        cluster_up(mine)
        yield cluster
    finally:
        stop_nodes(cluster.services)


def run(tmp: Path, log: Callable[[str], None] = print) -> ClusterCounts:
    """One cluster chaos run under ``tmp``; return the counts (the caller asserts)."""
    counts = ClusterCounts(SIZE.name)
    queue = f"chaos-{os.getpid()}-{int(time.time())}"
    settings = Settings()
    services_dir = settings.infra.local_dir / "chaos" / queue
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, services_dir, ignore_errors=True)
        started = time.monotonic()
        cluster = cleanup.enter_context(private_cluster(settings, services_dir))
        log(f"cluster up in {time.monotonic() - started:.0f} s")
        try:
            _run(tmp, log, counts, queue, cluster)
        except BaseException:
            counts.seconds = counts.seconds or (time.monotonic() - started)
            log("the run stopped early; the counts so far:\n" + counts.table())
            raise
    return counts


class Faults:
    """The fault steps on ``cluster`` while ``rig`` serves; every wait fails the run on timeout."""

    def __init__(self, cluster: Cluster, r: Rig, counts: ClusterCounts, log: Callable[[str], None]):
        self.cluster, self.r, self.counts, self.log = cluster, r, counts, log
        self.services = client_settings(cluster.settings)
        self.admin = KafkaAdminClient(bootstrap_servers=self.services.kafka.bootstrap_servers)
        self.prefix = r.stack.settings.kafka.topic_prefix
        self.t0 = time.monotonic()

    def note(self, text: str) -> None:
        self.counts.faults.append((text, time.monotonic() - self.t0))
        self.log(f"{time.monotonic() - self.t0:6.1f} s  {text}")

    @contextlib.contextmanager
    def window(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        self.note(f"{name}: begins")
        try:
            yield
        finally:
            self.counts.windows.append((name, start, time.monotonic()))
            self.note(f"{name}: over")

    def timed(
        self, rows: list[tuple[str, float]], name: str, check: Callable[[], bool], timeout_s: float
    ) -> None:
        started = time.monotonic()
        wait_for(check, timeout_s, 0.5, name)
        rows.append((name, time.monotonic() - started))

    # -- Kafka -----------------------------------------------------------------------------

    def in_sync(self) -> bool:
        """Every partition of the run's topics and of ``__consumer_offsets`` has all its
        replicas in sync (``False`` while Kafka does not answer)."""
        try:
            return self._in_sync()
        except Exception:
            return False

    def _in_sync(self) -> bool:
        names = [t for t in self.admin.list_topics() if t.startswith(self.prefix)]
        names.append("__consumer_offsets")
        for topic in self.admin.describe_topics(names):
            for p in topic["partitions"]:
                if sorted(p["isr"]) != sorted(p["replicas"]) or p["leader"] < 0:
                    return False
        return True

    def restart(self, node: Service) -> None:
        """Start a killed node again once its ports are free."""
        host = node.infra.host
        wait_for(lambda: node.running_pid() is None, 30, 0.2, f"{node.label} gone")
        wait_for(lambda: all(_bindable(host, p) for p in node.ports), 60, 0.5, "ports free")
        node.ensure_up()

    def kill_broker(self, controller: bool) -> None:
        leader = self.cluster.kafka_leader()
        assert leader is not None, "no KRaft leader found in the nodes' logs"
        node = next(k for k in self.cluster.kafka if (k.node_id == leader) == controller)
        what = "the active controller" if controller else "a broker, not the controller"
        with self.window(f"kill -9 kafka-{node.node_id} ({what})"):
            pid = node.running_pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            if controller:
                self.timed(
                    self.counts.recoveries,
                    f"new controller after kafka-{node.node_id}",
                    lambda: self.cluster.kafka_leader() not in (None, leader),
                    60,
                )
            time.sleep(SIZE.pause_s)
            self.restart(node)
            self.timed(
                self.counts.recoveries, f"kafka-{node.node_id} back in sync", self.in_sync, 180
            )

    # -- Elasticsearch ---------------------------------------------------------------------

    def es_health(self) -> dict[str, object]:
        """``_cluster/health`` as the master node sees it (``{}`` when it does not answer)."""
        port = self.cluster.elasticsearch[0].infra.elasticsearch_port
        try:
            return dict(httpx.get(f"http://127.0.0.1:{port}/_cluster/health", timeout=5).json())
        except (httpx.HTTPError, ValueError):
            return {}

    def kill_es_node(self) -> None:
        node = self.cluster.elasticsearch[-1]  # data-only: the master stays
        with self.window(f"kill -9 {node.label} (data node; replicas promoted)"):
            pid = node.running_pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            self.timed(
                self.counts.recoveries,
                "elasticsearch: 1 node left, no red shard",
                lambda: (
                    (h := self.es_health()).get("number_of_nodes") == 1
                    and h.get("status") in ("yellow", "green")
                ),
                60,
            )
            time.sleep(SIZE.pause_s)
            self.restart(node)
            self.timed(
                self.counts.recoveries,
                f"{node.label} back, green",
                lambda: self.es_health().get("status") == "green",
                180,
            )

    # -- consumer groups -------------------------------------------------------------------

    def members(self, pool: str) -> int:
        """Members of ``pool``'s group when it is stable, else -1 (a rebalance under way, or
        Kafka not answering)."""
        try:
            (group,) = self.admin.describe_consumer_groups([f"{self.prefix}ragstream-{pool}"])
        except Exception:
            return -1
        return len(group.members) if group.state == "Stable" else -1

    def processes_of(self, pool: str) -> int:
        states = self.r.procs.supervisor.states
        return sum(1 for n in list(states) if n == pool or n.startswith(f"{pool}+"))

    def add(self, pools: tuple[str, ...]) -> list[str]:
        names = []
        for i, pool in enumerate(pools, start=1):
            name = f"{pool}+{i}"
            offset = len(self.r.procs.text())
            want = self.processes_of(pool) + 1
            self.r.procs.supervisor.add(name, f"exec {self._command(pool)}")
            self.timed(
                self.counts.rebalances,
                f"{name} joined ({want} in the group)",
                lambda p=pool, n=name, o=offset, w=want: (
                    self.r.procs.ready(n, o) and self.members(p) == w
                ),
                180,
            )
            names.append(name)
        return names

    def remove(self, names: list[str]) -> None:
        for name in names:
            pool = name.split("+")[0]
            want = self.processes_of(pool) - 1
            self.r.procs.supervisor.remove(name)
            self.timed(
                self.counts.rebalances,
                f"{name} left ({want} in the group)",
                lambda p=pool, n=name, w=want: (
                    n not in self.r.procs.supervisor.states and self.members(p) == w
                ),
                120,
            )

    def stall(self, pool: str) -> None:
        state = self.r.procs.supervisor.states[pool]
        pid = state.pid
        assert pid is not None
        n = self.processes_of(pool)
        name = (
            f"SIGSTOP {pool} {STALL_S:.0f} s (max.poll.interval {MAX_POLL_INTERVAL_MS // 1000} s)"
        )
        with self.window(name):
            offset = len(self.r.procs.text())
            os.killpg(pid, signal.SIGSTOP)
            try:
                stopped = time.monotonic()
                self.timed(
                    self.counts.rebalances,
                    f"{pool} group without the stalled one ({n - 1})",
                    lambda: self.members(pool) == n - 1,
                    STALL_S + 60,
                )
                time.sleep(max(0.0, STALL_S - (time.monotonic() - stopped)))
            finally:
                os.killpg(pid, signal.SIGCONT)
            self.timed(
                self.counts.rebalances,
                f"{pool} rejoined after SIGCONT ({n})",
                lambda: self.r.procs.ready(pool, offset) and self.members(pool) == n,
                180,
            )

    def _command(self, pool: str) -> str:
        command = self.r.procs.supervisor.states[pool].command
        return command.removeprefix("exec ")

    def close(self) -> None:
        self.admin.close()


def _run(
    tmp: Path, log: Callable[[str], None], counts: ClusterCounts, queue: str, cluster: Cluster
) -> None:
    services = client_settings(cluster.settings)
    log(f"cluster brokers {services.kafka.bootstrap_servers}, nodes {services.elasticsearch.url}")
    env = {
        "RAGSTREAM_KAFKA__REPLICATION_FACTOR": str(services.kafka.replication_factor),
        "RAGSTREAM_KAFKA__MIN_INSYNC_REPLICAS": str(services.kafka.min_insync_replicas),
        "RAGSTREAM_ELASTICSEARCH__REPLICAS": str(services.elasticsearch.replicas),
        "RAGSTREAM_KAFKA__SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
        "RAGSTREAM_KAFKA__MAX_POLL_INTERVAL_MS": str(MAX_POLL_INTERVAL_MS),
        "RAGSTREAM_API__PRODUCE_TIMEOUT_S": str(PRODUCE_TIMEOUT_S),
    }
    with rig(SIZE, tmp, log, queue, services, **env) as r:
        faults = Faults(cluster, r, counts, log)
        load = r.load(SIZE, counts)
        try:
            assert faults.in_sync(), "topics not at full replication before the faults"
            load.start()
            time.sleep(SIZE.pause_s)
            faults.kill_broker(controller=False)
            time.sleep(SIZE.pause_s)
            faults.kill_broker(controller=True)
            time.sleep(SIZE.pause_s)
            faults.kill_es_node()
            time.sleep(SIZE.pause_s)
            with faults.window("add 2 retrieval + 1 generation-small processes"):
                added = faults.add(ADDED)
            time.sleep(SIZE.pause_s)
            faults.stall("retrieval")
            time.sleep(SIZE.pause_s)
            with faults.window("remove the 3 added processes"):
                faults.remove(added)
            time.sleep(SIZE.pause_s)
            faults.note("load stopped, draining")
            drain(SIZE, load, counts, r.receiver)
            faults.note("drained")
            counts.seconds = time.monotonic() - faults.t0
            r.poison.flush()
            counts.poison_dead_lettered = dead_lettered(
                services, TopicRegistry(r.stack.settings.kafka.topic_prefix).dlq(QUERIES)
            )
            counts.restarts = {n: s.restarts for n, s in r.procs.supervisor.states.items()}
        finally:
            load.close()
            faults.close()
