"""Elasticsearch 8.x from the official integ-test distribution zip on Maven Central.

The zip bundles no JDK (``ES_JAVA_HOME`` points at ``settings.infra.java_home``) and only
the ``apm``, ``transport-netty4``, ``x-pack-core`` and ``x-pack-security`` modules: no
``analysis-common``, painless, ``reindex`` or RRF (see DESIGN.md). Elasticsearch refuses
to run as root, so it runs as ``settings.infra.service_user``, which owns the unzipped
tree and the config, data, log and tmp folders under ``.local/elasticsearch``.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from infra import proc
from infra.errors import InstallError
from infra.maven import copy_dependencies
from infra.service import Service
from infra.system import chown_tree, ensure_reachable, owned_dirs, service_user, user_env
from ragstream.settings import Settings

#: Folder with the pom that names the distribution zip, next to this module.
ASSETS = Path(__file__).resolve().parent / "elasticsearch"

CLUSTER_NAME = "ragstream-local"


@dataclass(frozen=True)
class EsNode:
    """One node of a multi-node cluster (:mod:`infra.cluster`).

    Attributes:
        cluster_name: ``cluster.name``, the same on every node.
        node_name: ``node.name``, unique in the cluster.
        seed_hosts: ``host:transport_port`` of every node (``discovery.seed_hosts``).
        master_nodes: ``cluster.initial_master_nodes``: the master-eligible node names.
        roles: ``node.roles`` (``["master", "data"]``, ``["data"]``, ...).
    """

    cluster_name: str
    node_name: str
    seed_hosts: tuple[str, ...]
    master_nodes: tuple[str, ...]
    roles: tuple[str, ...]


class ElasticsearchService(Service):
    """Elasticsearch, security off, HTTP on ``host:elasticsearch_port``: a single-node
    cluster, or one node of a multi-node one when ``node`` is given.

    Args:
        settings: The settings tree; ``settings.infra`` gives ports, heap and folders.
        node: The cluster this node belongs to; ``None``: ``discovery.type: single-node``.
        label: The name shown by ``status`` (``elasticsearch-2`` for a cluster node).
    """

    name = "elasticsearch"
    port_fields = ("elasticsearch_port", "elasticsearch_transport_port")

    def __init__(
        self, settings: Settings, *, node: EsNode | None = None, label: str | None = None
    ) -> None:
        """Remember the settings; nothing is installed or started here."""
        super().__init__(settings)
        self._user: str | None = None
        self.node = node
        self._label = label
        self.cluster_name = node.cluster_name if node else CLUSTER_NAME

    @property
    def es_home(self) -> Path:
        """The unzipped distribution (``ES_HOME``, under :attr:`install_home`)."""
        return self.install_home / f"elasticsearch-{self.infra.elasticsearch_version}"

    @property
    def config_dir(self) -> Path:
        """``ES_PATH_CONF``: a copy of the distribution's config plus our elasticsearch.yml."""
        return self.home / "config"

    @property
    def logs_dir(self) -> Path:
        """``path.logs``, plus ``launcher.out`` (the start script's output)."""
        return self.home / "logs"

    @property
    def marker(self) -> str:
        """The ES home path, which is on the server JVM's command line."""
        return str(self.es_home)

    def log_files(self) -> list[Path]:
        """The launcher output, then the cluster log."""
        return [self.logs_dir / "launcher.out", self.logs_dir / f"{self.cluster_name}.log"]

    def elasticsearch_yml(self) -> str:
        """Return ``elasticsearch.yml`` for a loopback single-node dev cluster, or for one
        node of :attr:`node`'s cluster (seed hosts, initial master nodes, roles)."""
        discovery: dict[str, object] = {"discovery.type": "single-node"}
        if self.node is not None:
            discovery = {
                "discovery.seed_hosts": list(self.node.seed_hosts),
                "cluster.initial_master_nodes": list(self.node.master_nodes),
                "node.roles": list(self.node.roles),
            }
        settings = {
            "cluster.name": self.cluster_name,
            "node.name": self.node.node_name if self.node else f"{CLUSTER_NAME}-1",
            "network.host": self.infra.host,
            "http.port": self.infra.elasticsearch_port,
            "transport.port": self.infra.elasticsearch_transport_port,
            **discovery,
            "path.data": str(self.home / "data"),
            "path.logs": str(self.logs_dir),
            "xpack.security.enabled": False,
            "xpack.security.http.ssl.enabled": False,
            "xpack.security.transport.ssl.enabled": False,
            # Dev disks are often nearly full; do not turn indices read-only.
            "cluster.routing.allocation.disk.threshold_enabled": False,
            # Tests clean up with wildcard index deletes.
            "action.destructive_requires_name": False,
        }
        lines = ["# Written by infra/elasticsearch_service.py on every start."]
        lines += [f"{key}: {json.dumps(value)}" for key, value in settings.items()]
        return "\n".join(lines) + "\n"

    def install(self) -> None:
        """Fetch and unzip the distribution once; write the config; fix ownership."""
        self._user = service_user(self.infra.service_user)
        self.home.mkdir(parents=True, exist_ok=True)
        self.install_home.mkdir(parents=True, exist_ok=True)
        ensure_reachable(self._user, self.home)
        ensure_reachable(self._user, self.install_home)
        if not (self.es_home / "bin" / "elasticsearch").is_file():
            dist = copy_dependencies(
                ASSETS / "pom.xml",
                self.install_home / "dist",
                {"elasticsearch.version": self.infra.elasticsearch_version},
            )
            self._unzip(dist / f"elasticsearch-{self.infra.elasticsearch_version}.zip")
        owned_dirs(
            self._user,
            self.home,
            self.config_dir,
            self.home / "data",
            self.logs_dir,
            self.home / "tmp",
            self.pid_file.parent,
        )
        for item in (self.es_home / "config").iterdir():
            target = self.config_dir / item.name
            if not target.exists():
                if item.is_dir():
                    shutil.copytree(item, target)
                else:
                    shutil.copy2(item, target)
                chown_tree(self._user, target)
        (self.config_dir / "elasticsearch.yml").write_text(self.elasticsearch_yml())

    def launch(self) -> int:
        """Run ``bin/elasticsearch -d -p PIDFILE`` as the service user.

        Returns:
            PID of the start script; it exits 0 once the node is up, non-zero if not.
        """
        self.pid_file.unlink(missing_ok=True)
        heap = f"{self.infra.elasticsearch_heap_mb}m"
        env = user_env(
            self._user,
            self.home / "tmp",
            ES_JAVA_HOME=str(self.infra.java_home),
            ES_PATH_CONF=str(self.config_dir),
            ES_TMPDIR=str(self.home / "tmp"),
            ES_JAVA_OPTS=f"-Xms{heap} -Xmx{heap}",
        )
        argv = [str(self.es_home / "bin" / "elasticsearch"), "-d", "-p", str(self.pid_file)]
        launch_log = self.logs_dir / "launcher.out"
        launch_log.touch()
        chown_tree(self._user, launch_log)
        return proc.spawn_detached(argv, launch_log, env=env, cwd=self.home, user=self._user)

    def probe(self, timeout_s: float) -> tuple[bool, str]:
        """``GET /_cluster/health``: green or yellow is healthy."""
        url = f"http://{self.infra.host}:{self.infra.elasticsearch_port}/_cluster/health"
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                health = json.load(response)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            return False, f"GET _cluster/health failed: {exc}"
        status = str(health.get("status"))
        nodes = health.get("number_of_nodes")
        return status in ("green", "yellow"), f"cluster {status}, {nodes} node(s)"

    def _unzip(self, archive: Path) -> None:
        if not archive.is_file():
            raise InstallError(f"{archive} is missing after the Maven download")
        staging = self.install_home / "unzip.partial"
        shutil.rmtree(staging, ignore_errors=True)
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                path = Path(zf.extract(info, staging))
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    path.chmod(mode)
        (top,) = staging.iterdir()
        chown_tree(self._user, top)
        shutil.rmtree(self.es_home, ignore_errors=True)
        top.rename(self.es_home)
        staging.rmdir()
