"""Apache Kafka 4.x as a KRaft node that is both broker and controller: the single local
broker, or one node of a cluster (:mod:`infra.cluster`).

Install: the ``org.apache.kafka:kafka_2.13`` jars and their runtime dependencies, plus
log4j2 (``infra/kafka/pom.xml``), are copied from Maven Central into
``.local/kafka/libs`` once. Storage is formatted once with
``kafka.tools.StorageTool format --standalone`` (a dynamic controller quorum of one voter,
which needs ``controller.quorum.bootstrap.servers``, not ``controller.quorum.voters``).
A cluster node names every voter (``controller.quorum.voters``, a static quorum) and is
formatted with the cluster's shared id, without ``--standalone``.
Start: ``java -cp 'libs/*' kafka.Kafka server.properties``, detached.
"""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

from infra import proc
from infra.maven import copy_dependencies
from infra.service import Service
from infra.system import run, user_env
from ragstream.settings import Settings

#: Folder with the pom and the log4j2 configuration, next to this module.
ASSETS = Path(__file__).resolve().parent / "kafka"

#: JVM flags of Kafka's own ``kafka-server-start.sh`` / ``kafka-run-class.sh``.
_JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


def new_cluster_id() -> str:
    """Return a random KRaft cluster id: a UUID4 as 22 base64url characters, no padding.

    Same format as ``kafka.tools.StorageTool random-uuid``; like Kafka's ``Uuid`` it never
    starts with ``-`` (which a command line would read as an option).
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaService(Service):
    """A KRaft Kafka node (``process.roles=broker,controller``).

    Args:
        settings: The settings tree; ``settings.infra`` gives ports, heap and folders.
        node_id: ``node.id`` (1 for the single broker).
        voters: ``controller.quorum.voters`` of a cluster (``1@host:port,2@...``); ``None``:
            the single broker's dynamic quorum of itself.
        cluster_id: The cluster's id, the same on every node (required with ``voters``).
        replication: ``(replication factor, min.insync.replicas)`` of the internal topics and
            of auto-created ones; ``(1, 1)`` on one broker.
        label: The name shown by ``status`` (``kafka-2`` for a cluster node).
        extra: More ``server.properties`` lines (``{key: value}``), last.
    """

    name = "kafka"
    port_fields = ("kafka_port", "kafka_controller_port")

    def __init__(
        self,
        settings: Settings,
        *,
        node_id: int = 1,
        voters: str | None = None,
        cluster_id: str | None = None,
        replication: tuple[int, int] = (1, 1),
        label: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        super().__init__(settings)
        if voters is not None and cluster_id is None:
            raise ValueError("a cluster node needs the cluster's id")
        self.node_id = node_id
        self.voters = voters
        self.cluster_id = cluster_id
        self.replication = replication
        self.extra = dict(extra or {})
        self._label = label

    @property
    def libs(self) -> Path:
        """Folder with the Kafka jars (under :attr:`install_home`)."""
        return self.install_home / "libs"

    @property
    def data_dir(self) -> Path:
        """``log.dirs``: topic partitions and the ``__cluster_metadata`` log."""
        return self.home / "data"

    @property
    def logs_dir(self) -> Path:
        """log4j2 output (``server.log``) and the JVM's stdout/stderr (``kafka.out``)."""
        return self.home / "logs"

    @property
    def config_file(self) -> Path:
        """The generated ``server.properties``."""
        return self.home / "server.properties"

    @property
    def marker(self) -> str:
        """The properties path: unique per checkout, and on the JVM's command line."""
        return str(self.config_file)

    def log_files(self) -> list[Path]:
        """``kafka.out`` (JVM errors, WARN and up) then ``server.log`` (INFO and up)."""
        return [self.logs_dir / "kafka.out", self.logs_dir / "server.log"]

    def server_properties(self) -> str:
        """Return the broker+controller configuration for this host and these ports."""
        host = self.infra.host
        client = f"PLAINTEXT://{host}:{self.infra.kafka_port}"
        controller = f"CONTROLLER://{host}:{self.infra.kafka_controller_port}"
        if self.voters is None:
            quorum = (
                f"controller.quorum.bootstrap.servers={host}:{self.infra.kafka_controller_port}"
            )
        else:
            quorum = f"controller.quorum.voters={self.voters}"
        factor, min_isr = self.replication
        lines = [
            "# Written by infra/kafka_service.py on every start; edit the settings instead.",
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            quorum,
            f"listeners={client},{controller}",
            f"advertised.listeners={client},{controller}",
            "inter.broker.listener.name=PLAINTEXT",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.data_dir}",
            "num.partitions=3",
            f"default.replication.factor={factor}",
            f"min.insync.replicas={min_isr}",
            f"offsets.topic.replication.factor={factor}",
            f"transaction.state.log.replication.factor={factor}",
            f"transaction.state.log.min.isr={min_isr}",
            f"share.coordinator.state.topic.replication.factor={factor}",
            f"share.coordinator.state.topic.min.isr={min_isr}",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=true",
            *(f"{key}={value}" for key, value in self.extra.items()),
        ]
        return "\n".join(lines) + "\n"

    def install(self) -> None:
        """Fetch the jars once, write ``server.properties``, format storage once."""
        copy_dependencies(
            ASSETS / "pom.xml", self.libs, {"kafka.version": self.infra.kafka_version}
        )
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self.server_properties())
        if not (self.data_dir / "meta.properties").is_file():
            if self.cluster_id is None:
                quorum = ["--standalone", "-t", new_cluster_id()]
            else:  # a static quorum: every voter is in the config already
                quorum = ["-t", self.cluster_id]
            self._java("kafka.tools.StorageTool", "format", *quorum, "-c", str(self.config_file))

    def launch(self) -> int:
        """Start ``kafka.Kafka`` detached; write and return its PID."""
        heap = f"{self.infra.kafka_heap_mb}m"
        argv = [
            str(self.infra.java_home / "bin" / "java"),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            *_JVM_FLAGS,
            f"-Dkafka.logs.dir={self.logs_dir}",
            f"-Dlog4j2.configurationFile={ASSETS / 'log4j2.xml'}",
            "-cp",
            f"{self.libs}/*",
            "kafka.Kafka",
            str(self.config_file),
        ]
        env = user_env(None, self.home, JAVA_HOME=str(self.infra.java_home))
        pid = proc.spawn_detached(argv, self.logs_dir / "kafka.out", env=env, cwd=self.home)
        proc.write_pid(self.pid_file, pid)
        return pid

    def probe(self, timeout_s: float) -> tuple[bool, str]:
        """Send a metadata request (``DescribeCluster``) with kafka-python."""
        host, port = self.infra.host, self.infra.kafka_port
        if not proc.port_open(host, port, timeout_s):
            return False, f"port {port} closed"
        from kafka import KafkaAdminClient

        timeout_ms = int(timeout_s * 1000)
        try:
            admin = KafkaAdminClient(
                bootstrap_servers=f"{host}:{port}",
                client_id="ragstream-infra-health",
                request_timeout_ms=timeout_ms,
                api_version_auto_timeout_ms=timeout_ms,
            )
            try:
                cluster = admin.describe_cluster()
            finally:
                admin.close()
        except Exception as exc:  # any client failure means "unhealthy"
            return False, f"metadata request failed: {type(exc).__name__}: {exc}"
        brokers = len(cluster.get("brokers", []))
        return brokers > 0, f"cluster {cluster.get('cluster_id')}, {brokers} broker(s)"

    def _java(self, main_class: str, *args: str) -> str:
        return run(
            [
                str(self.infra.java_home / "bin" / "java"),
                f"-Dlog4j2.configurationFile={ASSETS / 'log4j2.xml'}",
                f"-Dkafka.logs.dir={self.logs_dir}",
                "-cp",
                f"{self.libs}/*",
                main_class,
                *args,
            ],
            timeout_s=120.0,
        )
