"""The Kubernetes manifests under ``podman kube play``: ``python -m infra.kube_play render|up|down``
(``make kube-play``; docs/operations/containers.md, issue 38).

``podman kube play`` (podman 4.3) creates Pods, Deployments, ConfigMaps and Secrets, not
Services, Jobs, Namespaces or KEDA objects. :func:`render` takes ``infra/k8s/ragstream.yaml``'s
ConfigMap and the Deployments asked for and points them at services already running on this
host (the single-machine stack: Kafka, Elasticsearch, Redis, PostgreSQL, llama.cpp), with host
networking, since there is no cluster DNS for the Services the ConfigMap names:

- its own Kafka topic prefix (``kafka.topic_prefix``, default ``kubeplay.``): every topic *and*
  every pool's consumer group (``<prefix>ragstream-<pool>``, ``workers/runtime/build.py``) is
  its own, so a played pool never joins a running pool's group nor reads its topics;
- its own Elasticsearch alias, Redis database, Celery queues and PostgreSQL database;
- no pool metrics port (the running pools hold 9101-9107) and the API on ``--api-port``.

:func:`up` creates the database (migrated, one API key), the topics, then plays the manifest;
:func:`down` runs ``podman kube down`` and removes all of it again (topics, index, Redis keys,
database). Jobs the manifest holds (migrations, topics) are done here by the host's CLI.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.images import Engine
from ragstream.settings import PROJECT_ROOT, Settings, get_settings

MANIFEST = PROJECT_ROOT / "infra" / "k8s" / "ragstream.yaml"
#: The Deployments played by default: the API and the pools a question goes through.
DEFAULT_DEPLOYMENTS = (
    "api",
    "worker-ingest",
    "worker-retrieval",
    "worker-rerank",
    "worker-generation-small",
    "worker-delivery",
)
#: Seconds ``podman pod stop`` gives a played process to shut down (the manifest's
#: ``terminationGracePeriodSeconds``, which podman 4.3 does not apply: its stop timeout is 10).
STOP_TIMEOUT_S = 60
POOLS = ("ingest", "retrieval", "rerank", "generation_small", "generation_large", "delivery")


@dataclass(frozen=True)
class Play:
    """What one play is called and where it points.

    Attributes:
        prefix: Kafka topic and consumer-group prefix; also names the index, queue and database.
        api_port: Port the played API binds on the host (not ``settings.api.port``).
        deployments: Names of the manifest's Deployments to play.
        redis_db: The Redis database number of the played processes (not the running stack's).
    """

    prefix: str = "kubeplay."
    api_port: int = 8010
    deployments: tuple[str, ...] = DEFAULT_DEPLOYMENTS
    redis_db: int = 7
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The prefix as a name (``kubeplay``): index alias, database, Celery queue."""
        return self.prefix.strip(".-_") or "kubeplay"

    @property
    def index_alias(self) -> str:
        """The played processes' Elasticsearch alias (``kubeplay-chunks``)."""
        return f"{self.name}-chunks"

    def database_url(self, settings: Settings) -> str:
        """SQLAlchemy URL of the play's own database on the host's PostgreSQL."""
        infra = settings.infra
        return (
            f"postgresql+psycopg://{infra.service_user}@{infra.host}:{infra.postgres_port}"
            f"/{self.name}"
        )

    def config(self, settings: Settings) -> dict[str, str]:
        """The ConfigMap's data: the host's services, and every name of the play its own."""
        infra, host = settings.infra, settings.infra.host
        llm = f"http://{host}:{settings.llm.port}"
        data = {
            "RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
            "RAGSTREAM_KAFKA__TOPIC_PREFIX": self.prefix,
            "RAGSTREAM_KAFKA__CLIENT_ID": f"ragstream-{self.name}",
            "RAGSTREAM_ELASTICSEARCH__URL": settings.elasticsearch.url,
            "RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS": self.index_alias,
            "RAGSTREAM_REDIS__URL": f"redis://{host}:{infra.redis_port}/{self.redis_db}",
            "RAGSTREAM_CELERY__QUEUE": self.name,
            "RAGSTREAM_LOGGING__FORMAT": "json",
            "RAGSTREAM_LLM__HOST": host,
            "RAGSTREAM_LLM__PORT": str(settings.llm.port),
            "RAGSTREAM_GENERATION__SMALL__BASE_URL": llm,
            "RAGSTREAM_GENERATION__LARGE__BASE_URL": llm,
        }
        data |= {f"RAGSTREAM_POOLS__{pool.upper()}__METRICS_PORT": "0" for pool in POOLS}
        return data | self.extra_env


def _api(container: dict[str, Any], host: str, port: int) -> None:
    """Bind the API container on ``host:port`` (args and probes): on the host's network,
    ``0.0.0.0`` would publish it on every interface."""
    args = list(container["args"])
    args[args.index("--host") + 1] = host
    args[args.index("--port") + 1] = str(port)
    container["args"] = args
    for probe in ("livenessProbe", "readinessProbe"):
        if probe in container:
            container[probe]["httpGet"]["port"] = port


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def dump(objects: Sequence[dict[str, Any]]) -> str:
    """The objects as one multi-document YAML file, each Secret written as JSON (valid YAML):
    podman 4.3 stores a played Secret's document as it is and reads it back as JSON (a YAML
    Secret fails with "secret ragstream-db is not valid JSON")."""
    parts = [
        json.dumps(o, indent=2) + "\n"
        if o["kind"] == "Secret"
        else yaml.safe_dump(o, sort_keys=False)
        for o in objects
    ]
    return "---\n".join(parts)


def render(
    play: Play, settings: Settings, documents: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The objects to play: the ConfigMap (:meth:`Play.config`), a Secret with the database URL
    and the Deployments of ``play.deployments`` at one replica on the host's network.

    Args:
        play: The play's names and ports.
        settings: Where the host's services listen.
        documents: The manifest's objects (``yaml.safe_load_all`` of ``ragstream.yaml``).

    Returns:
        Kubernetes objects, ConfigMap and Secret first.

    Raises:
        ValueError: A Deployment of ``play.deployments`` is not in the manifest.
    """
    docs = [copy.deepcopy(d) for d in documents if d]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    missing = sorted(set(play.deployments) - set(deployments))
    if missing:
        raise ValueError(f"no Deployment {', '.join(missing)} in {MANIFEST.name}")
    [config_map] = [d for d in docs if d["kind"] == "ConfigMap"]
    config_map["data"] = play.config(settings)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ragstream-db", "namespace": config_map["metadata"]["namespace"]},
        "data": {"RAGSTREAM_DATABASE__URL": _b64(play.database_url(settings))},
    }
    played = []
    for name in play.deployments:
        deployment = deployments[name]
        deployment["spec"]["replicas"] = 1
        pod = deployment["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        # The uploads PVC (ingest.upload_root) is not played: podman would make a named volume
        # that `kube down` leaves, and the play's ConfigMap sets no upload root.
        claims = {v["name"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}
        pod["volumes"] = [v for v in pod.get("volumes", []) if v["name"] not in claims]
        if not pod["volumes"]:
            del pod["volumes"]
        for container in pod["containers"]:
            # podman 4.3: "PortMappings can only be used with Bridge or slirp4netns networking"
            container.pop("ports", None)
            mounts = [m for m in container.get("volumeMounts", []) if m["name"] not in claims]
            container.pop("volumeMounts", None)
            if mounts:
                container["volumeMounts"] = mounts
        if name == "api":
            _api(pod["containers"][0], settings.infra.host, play.api_port)
        played.append(deployment)
    return [config_map, secret, *played]


def manifest_path(settings: Settings) -> Path:
    """Where :func:`up` writes the rendered manifest (``podman kube down`` reads it back)."""
    return settings.infra.local_dir / "kube-play" / "ragstream.yaml"


@dataclass(frozen=True)
class Host:
    """The host's commands a play runs: ``make image``'s podman and the checkout's CLI.

    Attributes:
        settings: The host's settings (where its services listen).
        engine: ``make image``'s podman (:class:`infra.images.Engine`).
        ragstream: The ``ragstream`` command of this checkout's virtualenv.
    """

    settings: Settings
    engine: Engine
    ragstream: Path = Path(sys.executable).parent / "ragstream"

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run podman; its stdout and stderr as they came, interleaved (the play's record)."""
        done = subprocess.run(
            [*self.engine.argv, *args],
            env=self.engine.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if check and done.returncode:
            raise SystemExit(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}")
        return done

    def cli(self, play: Play, *args: str) -> str:
        """Run ``ragstream ARGS`` with the play's topic prefix and database; return stdout."""
        env = {
            **self.engine.env,
            "RAGSTREAM_KAFKA__TOPIC_PREFIX": play.prefix,
            "RAGSTREAM_DATABASE__URL": play.database_url(self.settings),
        }
        done = subprocess.run(
            [str(self.ragstream), *args], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout

    def psql(self, program: str, *args: str, check: bool = True) -> int:
        """Run PostgreSQL's ``createdb`` / ``dropdb`` against the host's cluster."""
        infra = self.settings.infra
        argv = [program, "-h", infra.host, "-p", str(infra.postgres_port), "-U"]
        return subprocess.run([*argv, infra.service_user, *args], check=check).returncode


def up(play: Play, host: Host) -> str:
    """Create the play's database (migrated, one API key), its topics and the Secret, then
    ``podman kube play`` the rendered manifest.

    Returns:
        ``podman kube play``'s output, then the API key (``kubeplay`` tenant, every document).
    """
    settings = host.settings
    objects = render(play, settings, yaml.safe_load_all(MANIFEST.read_text("utf-8")))
    secret = next(o for o in objects if o["kind"] == "Secret")
    path = manifest_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump([o for o in objects if o["kind"] != "Secret"]), "utf-8")
    host.psql("createdb", play.name)
    host.cli(play, "db", "upgrade")
    key = host.cli(play, "keys", "create", "--tenant", play.name, "-p", "*", "--quiet").strip()
    host.cli(play, "topics", "create")
    # podman 4.3 reads a Secret an envFrom names as a flat JSON map of base64 values, not as the
    # Kubernetes Secret a played file holds (that fails: "secret ... is not valid JSON"), so the
    # Secret is created here in podman's own shape and left out of the played file.
    secret_file = path.with_name("secret.json")
    secret_file.write_text(json.dumps(secret["data"]), "utf-8")
    secret_file.chmod(0o600)
    host.podman("secret", "rm", secret["metadata"]["name"], check=False)
    host.podman("secret", "create", secret["metadata"]["name"], str(secret_file))
    secret_file.unlink()
    output = host.podman("kube", "play", str(path)).stdout
    return f"{output}\nAPI key ({play.name} tenant): {key}"


def _delete_groups(admin: Any, prefix: str, timeout_s: float) -> list[str]:
    """Delete the consumer groups under ``prefix``; return their names.

    A group keeps a stopped pod's member until the session timeout (``NonEmptyGroupError``:
    the members of a played pool were still listed 14 s after ``podman kube down``), so a
    non-empty group is retried every 5 s for up to ``timeout_s`` seconds.

    Raises:
        SystemExit: A group still has members after ``timeout_s``.
    """
    from kafka.errors import NoError

    groups = sorted(g for g, _ in admin.list_consumer_groups() if g.startswith(prefix))
    left, deadline = list(groups), time.monotonic() + timeout_s
    while left:
        left = [g for g, error in admin.delete_consumer_groups(left) if error is not NoError]
        if left and time.monotonic() > deadline:
            raise SystemExit(f"consumer groups still have members: {', '.join(left)}")
        if left:
            time.sleep(5)
    return groups


def down(play: Play, host: Host) -> str:
    """``podman kube down`` the played manifest and remove what :func:`up` created: the Secret,
    the topics and consumer groups under the play's prefix, its Elasticsearch indices, its Redis
    database's keys and its PostgreSQL database.

    Returns:
        ``podman kube down``'s output and a line per thing removed.
    """
    from elasticsearch import Elasticsearch
    from kafka.admin import KafkaAdminClient
    from redis import Redis

    settings = host.settings
    # `podman pod stop` first: each pool gets SIGTERM and leaves its consumer group (exit 0,
    # "pool.stopped"); after `podman kube down` alone (podman 4.3) the members stayed in their
    # groups until the session timeout, as if killed.
    pods = [f"{name}-pod-0" for name in play.deployments]
    lines = [host.podman("pod", "stop", "--time", str(STOP_TIMEOUT_S), *pods, check=False).stdout]
    lines.append(host.podman("kube", "down", str(manifest_path(settings)), check=False).stdout)
    lines.append(host.podman("secret", "rm", "ragstream-db", check=False).stdout.strip())
    admin = KafkaAdminClient(bootstrap_servers=settings.kafka.bootstrap_servers)
    try:
        topics = sorted(t for t in admin.list_topics() if t.startswith(play.prefix))
        if topics:
            admin.delete_topics(topics)
        lines.append(f"topics deleted: {len(topics)} ({play.prefix}*)")
        groups = _delete_groups(admin, play.prefix, settings.kafka.session_timeout_ms / 1000 + 15)
        lines.append(f"consumer groups deleted: {len(groups)} ({play.prefix}*)")
    finally:
        admin.close()
    es = Elasticsearch(settings.elasticsearch.hosts)
    indices = sorted(es.indices.get(index=f"{play.index_alias}*", expand_wildcards="all"))
    for index in indices:
        es.indices.delete(index=index)
    lines.append(f"indices deleted: {', '.join(indices) or 'none'}")
    redis_url = play.config(settings)["RAGSTREAM_REDIS__URL"]
    lines.append(f"redis {redis_url}: {Redis.from_url(redis_url).dbsize()} keys flushed")
    Redis.from_url(redis_url).flushdb()
    host.psql("dropdb", "--if-exists", "--force", play.name)
    lines.append(f"database dropped: {play.name}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m infra.kube_play render|up|down [--prefix P] [--api-port N] [--deployment D]``."""
    parser = argparse.ArgumentParser(prog="python -m infra.kube_play", description=__doc__)
    parser.add_argument("command", choices=["render", "up", "down"])
    parser.add_argument("--prefix", default=Play.prefix, help="topic and group prefix")
    parser.add_argument("--api-port", type=int, default=Play.api_port)
    parser.add_argument(
        "--deployment",
        action="append",
        help="a Deployment to play (repeat); default: " + ", ".join(DEFAULT_DEPLOYMENTS),
    )
    args = parser.parse_args(argv)
    settings = get_settings()
    play = Play(
        prefix=args.prefix,
        api_port=args.api_port,
        deployments=tuple(args.deployment or DEFAULT_DEPLOYMENTS),
    )
    if args.prefix in ("", settings.kafka.topic_prefix):
        parser.error("--prefix must differ from settings.kafka.topic_prefix (the running stack's)")
    if args.command == "render":
        print(dump(render(play, settings, yaml.safe_load_all(MANIFEST.read_text("utf-8")))))
        return 0
    host = Host(settings, Engine.find(settings))
    print(up(play, host) if args.command == "up" else down(play, host))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
