"""CPU time of the processes that serve a query, by process (psutil), beside the machine's.

The machine's busy cores (:class:`bench.stats.CpuSample`, ``/proc/stat``) count every process
on the host, including work that has nothing to do with the benchmark (an ingest, another
user's tests). The numbers here count only named processes: this benchmark process, the pool
processes it started, and the services the query path uses (Elasticsearch, Redis, Kafka, the
LLM server), each found by the TCP port it listens on. A service's own background (Kafka's
and Elasticsearch's housekeeping, other clients' requests) is measured in an idle window and
subtracted (:func:`attributed_ms`), so what remains is what the measured work added.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from ragstream.settings import Settings

#: This process's name in the by-process numbers.
SELF = "bench"


def _port(url: str, default: int) -> int:
    parts = urlsplit(url if "//" in url else f"//{url}")
    return parts.port or default


def service_ports(settings: Settings) -> dict[str, int]:
    """``{service: TCP port}`` of the services the query path uses, from the settings."""
    first = settings.kafka.bootstrap_servers.split(",")[0]
    return {
        "elasticsearch": _port(settings.elasticsearch.url, 9200),
        "redis": _port(settings.redis.url, 6379),
        "kafka": _port(first, 9092),
        "llm": _port(settings.llm.base_url, 8081),
    }


def listening_pids(ports: Mapping[str, int]) -> dict[str, int]:
    """``{name: pid}`` of the process listening on each TCP port of ``ports``; a port whose
    owner cannot be seen (nothing listens, or another user's process without the right to
    read its sockets) is left out."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return {}
    by_port = {
        c.laddr.port: c.pid
        for c in connections
        if c.status == psutil.CONN_LISTEN and c.pid is not None and c.laddr
    }
    return {name: by_port[port] for name, port in ports.items() if port in by_port}


def cpu_seconds(pid: int, descendants: bool = False) -> float | None:
    """User + system CPU seconds of process ``pid`` (every thread), plus those of its live
    descendants when ``descendants``; ``None`` if it is gone or unreadable."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *(proc.children(recursive=True) if descendants else [])]
        total = 0.0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):  # a child that just exited
                t = p.cpu_times()
                total += t.user + t.system
        return total
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


@dataclass(frozen=True)
class ProcessSet:
    """Named processes whose CPU time is sampled together.

    Attributes:
        services: ``{name: pid}`` of services (counted alone, background subtracted).
        pools: ``{name: pid}`` of processes the benchmark started (counted with their
            descendants, no background: they do nothing but the benchmark's work).
    """

    services: Mapping[str, int]
    pools: Mapping[str, int]

    def sample(self) -> dict[str, float]:
        """``{name: CPU seconds so far}``, this process as :data:`SELF`; processes that
        cannot be read are left out."""
        out = {SELF: _self_seconds()}
        for name, pid in self.services.items():
            s = cpu_seconds(pid)
            if s is not None:
                out[name] = s
        for name, pid in self.pools.items():
            s = cpu_seconds(pid, descendants=True)
            if s is not None:
                out[name] = s
        return out

    def with_pools(self, pools: Mapping[str, int]) -> ProcessSet:
        """The same services with ``pools`` as the benchmark's processes."""
        return ProcessSet(self.services, dict(pools))


def _self_seconds() -> float:
    # CLOCK_PROCESS_CPUTIME_ID: every thread of this process, to the nanosecond (a pool or a
    # service is read from /proc in clock ticks, 10 ms, which the many calls of a stage absorb)
    return time.process_time()


def background(processes: ProcessSet, seconds: float) -> dict[str, float]:
    """Each service's CPU use while nothing of the benchmark runs, in cores (CPU seconds per
    second), over an idle window of ``seconds``."""
    start, t0 = processes.sample(), time.monotonic()
    time.sleep(seconds)
    end, elapsed = processes.sample(), time.monotonic() - t0
    return {
        name: round(max(0.0, end[name] - start[name]) / elapsed, 4)
        for name in processes.services
        if name in start and name in end
    }


def attributed_ms(
    start: Mapping[str, float],
    end: Mapping[str, float],
    wall_s: float,
    idle_cores: Mapping[str, float],
) -> dict[str, float]:
    """CPU milliseconds each process spent between two samples, less its idle background.

    Args:
        start: ``{name: CPU seconds}`` before (:meth:`ProcessSet.sample`).
        end: the same after.
        wall_s: the wall time between the samples (s).
        idle_cores: ``{name: cores}`` of background (:func:`background`); names not in it
            have none.

    Returns:
        ``{name: core-ms}`` for every name in both samples, never below 0.
    """
    return {
        name: round(max(0.0, (end[name] - start[name]) - idle_cores.get(name, 0.0) * wall_s)
                    * 1000, 3)
        for name in start
        if name in end
    }  # fmt: skip


def total(values: Iterable[float]) -> float:
    """Sum rounded to 0.1."""
    return round(sum(values), 1)


def stack_process_name(cmdline: Sequence[str]) -> str | None:
    """The name a running stack's process goes by in the by-process numbers, from its command
    line (``python .../ragstream worker retrieval`` → ``retrieval``; ``... api`` → ``api``;
    ``... celery-worker --queues jobs ...`` → ``celery jobs``; ``... flower`` → ``flower``), or
    ``None`` for anything else (a shell wrapper, the supervisor, a client, this benchmark)."""
    if not cmdline or not Path(cmdline[0]).name.startswith("python"):
        return None
    script = next((i for i, a in enumerate(cmdline) if Path(a).name == "ragstream"), None)
    if script is None or script + 1 >= len(cmdline):
        return None
    command, rest = cmdline[script + 1], cmdline[script + 2 :]
    if command == "worker" and rest:
        return rest[0]
    if command in {"api", "flower"}:
        return command
    if command == "celery-worker":
        queues = rest[rest.index("--queues") + 1] if "--queues" in rest[:-1] else "default"
        return f"celery {queues}"
    return None


def stack_processes(settings: Settings) -> ProcessSet:
    """The services the query path uses (by TCP port, :func:`service_ports`) and the processes
    of a running stack (``ragstream demo run``'s Procfile, or any ``ragstream api`` /
    ``ragstream worker POOL`` of this machine, by command line: :func:`stack_process_name`;
    a second process of one name is ``NAME-2``), as :attr:`ProcessSet.pools` counted with
    their descendants (a Celery worker's forked children are not counted again)."""
    found: dict[int, str] = {}
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        name = stack_process_name(proc.info.get("cmdline") or [])
        if name is not None:
            found[proc.info["pid"]] = name
    pools: dict[str, int] = {}
    for pid, name in sorted(found.items()):
        with contextlib.suppress(psutil.Error):  # a descendant of one found: counted with it
            if any(parent.pid in found for parent in psutil.Process(pid).parents()):
                continue
        n, key = 1, name
        while key in pools:
            n += 1
            key = f"{name}-{n}"
        pools[key] = pid
    return ProcessSet(listening_pids(service_ports(settings)), pools)


def background_all(processes: ProcessSet, seconds: float) -> dict[str, float]:
    """Like :func:`background`, for every process of ``processes`` (services and pools): a
    running stack's pools poll Kafka and report metrics while idle."""
    start, t0 = processes.sample(), time.monotonic()
    time.sleep(seconds)
    end, elapsed = processes.sample(), time.monotonic() - t0
    return {
        name: round(max(0.0, end[name] - start[name]) / elapsed, 4)
        for name in start
        if name in end and name != SELF
    }
