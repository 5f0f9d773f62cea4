"""Pool processes on a private topic prefix, and their settings: the shadow pools of a replay
(:mod:`replay.shadow`) and the system under test of the query benchmark (``bench/query/``).

A caller describes its configuration once as *overrides* (``{"section": {"field": value}}``,
nested for ``pools``) and hands the same overrides to its own process
(:func:`apply_overrides`) and to every pool process it starts (:func:`overrides_env`, the
``RAGSTREAM_<SECTION>__<FIELD>`` variables the settings tree reads), so the in-process baseline
and the pools run with identical settings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import structlog
from kafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from ragstream.settings import Settings
from topics.admin import ensure_topics, make_admin
from topics.registry import TopicRegistry

log = structlog.get_logger(__name__)

Overrides = Mapping[str, Any]

#: The consumer group of each pool, without the topic prefix (see ``workers/pools/*.py``).
POOL_GROUPS = {
    "retrieval": "ragstream-retrieval",
    "rerank": "ragstream-rerank",
    "generation-small": "ragstream-generation-small",
    "generation-large": "ragstream-generation-large",
}
#: Prometheus histogram of events per batch (``workers/runtime/metrics.py``).
BATCH_METRIC = "ragstream_batch_size"


def overrides_env(overrides: Overrides, prefix: str = "RAGSTREAM_") -> dict[str, str]:
    """The environment variables that set ``overrides`` in a child process's settings.

    ``{"pools": {"rerank": {"max_batch": 16}}}`` becomes ``RAGSTREAM_POOLS__RERANK__MAX_BATCH=16``;
    booleans are ``true``/``false``, everything else ``str(value)``.
    """
    env: dict[str, str] = {}
    for key, value in overrides.items():
        name = prefix + key.upper()
        if isinstance(value, Mapping):
            env.update(overrides_env(value, name + "__"))
        elif isinstance(value, bool):
            env[name] = "true" if value else "false"
        else:
            env[name] = str(value)
    return env


def apply_overrides(model: Any, overrides: Overrides) -> Any:
    """A copy of a settings model (e.g. :class:`Settings`) with ``overrides`` applied.

    Raises:
        AttributeError: an override names a field the model does not have.
    """
    update: dict[str, Any] = {}
    for key, value in overrides.items():
        current = getattr(model, key)
        if isinstance(value, Mapping) and isinstance(current, BaseModel):
            update[key] = apply_overrides(current, value)
        else:
            update[key] = value
    return model.model_copy(update=update)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free right now (for a pool's metrics endpoint)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def batch_totals(port: int, pool: str) -> tuple[float, float]:
    """``(events, batches)`` a pool process has handled so far, from its Prometheus endpoint
    (``ragstream_batch_size_sum`` and ``_count``); ``(0, 0)`` if it cannot be read."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0, 0.0
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != BATCH_METRIC:
            continue
        for sample in family.samples:
            if sample.labels.get("pool") != pool:
                continue
            if sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_count"):
                count = sample.value
    return total, count


class PoolProcesses:
    """``ragstream worker POOL`` subprocesses on the topic prefix of ``overrides``.

    Each pool process gets every field of its ``pools`` settings from ``settings`` plus a free
    metrics port of its own (setting one field of a pool by environment variable would reset
    the others to the class defaults). A pool may run as several processes (``replicas``):
    they share its consumer group, so the input topic's partitions are split between them.
    Topics and DLQs are created on :meth:`start`; the processes, their consumer groups and
    topics are removed on :meth:`close`.

    Args:
        settings: the caller's settings, overrides already applied.
        overrides: what the children must see (topic prefix, index alias, Redis URL, ...).
        pools: pool names, e.g. ``("retrieval", "rerank")``.
        log_dir: where each process's stdout and stderr go (``<pool>.log``, ``<pool>.2.log``).
        replicas: processes per pool (default 1 each).
        nice: the processes' scheduling priority (``nice -n``; 0: this process's).

    Raises:
        ValueError: a replica count below 1, or one for a pool not in ``pools``.
    """

    def __init__(
        self,
        settings: Settings,
        overrides: Overrides,
        pools: Sequence[str],
        log_dir: Path,
        replicas: Mapping[str, int] | None = None,
        *,
        nice: int = 0,
    ) -> None:
        replicas = dict(replicas or {})
        unknown = set(replicas) - set(pools)
        if unknown or any(n < 1 for n in replicas.values()):
            raise ValueError(f"replicas must be >= 1 and name pools of {list(pools)}: {replicas}")
        self.settings = settings
        self.pools = tuple(pools)
        self.prefix = settings.kafka.topic_prefix
        self.log_dir = log_dir
        self.overrides = overrides
        self.nice = nice
        #: ``{pool: [metrics port of each process]}``.
        self.ports = {
            pool: [free_port() for _ in range(replicas.get(pool, 1))] for pool in self.pools
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _env(self, pool: str, port: int) -> dict[str, str]:
        name = pool.replace("-", "_")
        fields = {**getattr(self.settings.pools, name).model_dump(), "metrics_port": port}
        return {**overrides_env(self.overrides), **overrides_env({"pools": {name: fields}})}

    def start(self) -> None:
        """Create the prefixed topics and start every pool process."""
        admin = make_admin(self.settings.kafka)
        try:
            ensure_topics(admin, TopicRegistry(self.prefix).physical_topics())
        finally:
            admin.close()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for pool, ports in self.ports.items():
            for i, port in enumerate(ports, start=1):
                key = pool if i == 1 else f"{pool}.{i}"
                with (self.log_dir / f"{key}.log").open("ab") as out:
                    self.procs[key] = subprocess.Popen(
                        self.command(pool),
                        env={**os.environ, **self._env(pool, port)},
                        stdout=out,
                        stderr=out,
                        start_new_session=True,
                    )

    def command(self, pool: str) -> list[str]:
        """The command line of one process of ``pool`` (under ``nice -n`` when ``nice``)."""
        niced = ["nice", "-n", str(self.nice)] if self.nice else []
        return [*niced, sys.executable, "-m", "entry.cli", "worker", pool]

    def check_alive(self) -> None:
        """Raise ``RuntimeError`` naming the log of any pool process that has exited."""
        for key, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"pool {key} exited with {proc.returncode}; see {self.log_dir / key}.log"
                )

    def batch_totals(self) -> dict[str, tuple[float, float]]:
        """``{pool: (events, batches)}`` so far, summed over the pool's processes (see
        :func:`batch_totals`)."""
        totals = {}
        for pool, ports in self.ports.items():
            each = [batch_totals(port, pool) for port in ports]
            totals[pool] = (sum(e for e, _ in each), sum(b for _, b in each))
        return totals

    def close(self, timeout_s: float = 60.0) -> None:
        """SIGTERM every pool (they finish their batch and commit), wait, then delete the
        consumer groups and topics. A pool still running after ``timeout_s`` is killed."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    os.killpg(proc.pid, signal.SIGTERM)
        for key, proc in self.procs.items():
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("pool_processes.killed", pool=key)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self._delete_kafka_state()

    def _delete_kafka_state(self) -> None:
        admin = make_admin(self.settings.kafka)
        try:
            groups = [self.prefix + POOL_GROUPS[p] for p in self.pools if p in POOL_GROUPS]
            try:
                admin.delete_consumer_groups(groups)
            except KafkaError as exc:
                log.warning("pool_processes.delete_groups_failed", error=str(exc))
            names = [t.name for t in TopicRegistry(self.prefix).physical_topics()]
            try:
                admin.delete_topics(names)
            except KafkaError as exc:
                log.warning("pool_processes.delete_topics_failed", error=str(exc))
        finally:
            admin.close()
