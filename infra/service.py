"""What every local service has in common: PID file, port checks, start, wait, stop.

A concrete service (:mod:`infra.kafka_service`, ...) says how to install itself, how to
launch its process and how to check its health; :class:`Service` turns that into an
idempotent :meth:`Service.ensure_up`, :meth:`Service.stop` and :meth:`Service.status`.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import structlog

from infra import proc
from infra.errors import PortConflictError, ServiceStartError
from ragstream.settings import Settings

log = structlog.get_logger(__name__)

#: Seconds one health probe may take.
PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ServiceStatus:
    """One service as seen by ``infra status``.

    Attributes:
        name: ``redis``, ``kafka``, ``elasticsearch`` or ``postgres``.
        port: The client port (Kafka: the PLAINTEXT listener; Elasticsearch: HTTP).
        pid: PID of the running server process, ``None`` when it is not running.
        healthy: The real health check passed (Kafka metadata request, ES cluster health
            green or yellow, Redis PING, PostgreSQL ``SELECT 1``).
        detail: One human-readable line: what the check saw or why it failed.
    """

    name: str
    port: int
    pid: int | None
    healthy: bool
    detail: str


class Service(abc.ABC):
    """A single-node server that lives under ``settings.infra.local_dir / name``.

    Args:
        settings: The settings tree; only ``settings.infra`` is read.
    """

    #: Service name; also the folder under ``.local/``.
    name: ClassVar[str]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.infra = settings.infra
        self.home: Path = self.infra.local_dir.resolve() / self.name
        #: Where binaries are installed: ``<install_dir or local_dir>/<name>``; the same as
        #: :attr:`home` unless ``infra.install_dir`` points a private instance at shared ones.
        self.install_home: Path = (self.infra.install_dir or self.infra.local_dir).resolve() / (
            self.name
        )
        #: Set by a node of a cluster (``kafka-2``); see :attr:`label`.
        self._label: str | None = None
        #: Log sizes just before the last launch, so a failure shows only this start's lines.
        self._log_offsets: dict[Path, int] = {}

    # -- what a concrete service provides ---------------------------------------------------

    #: Names of the ``InfraSettings`` fields holding the ports it binds, client port first.
    port_fields: ClassVar[tuple[str, ...]]

    @property
    def label(self) -> str:
        """The name ``status`` and the logs show: :attr:`name`, or ``kafka-2`` for a node of a
        cluster (:mod:`infra.cluster`)."""
        return self._label or self.name

    @property
    def port(self) -> int:
        """The client port."""
        return self.ports[0]

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port the service binds (client port first)."""
        return tuple(int(getattr(self.infra, field)) for field in self.port_fields)

    @property
    def pid_file(self) -> Path:
        """Where the PID of the running server is kept."""
        return self.home / "run" / f"{self.name}.pid"

    @property
    @abc.abstractmethod
    def marker(self) -> str:
        """A substring of the server's command line, unique to this checkout's service."""

    @abc.abstractmethod
    def log_files(self) -> list[Path]:
        """Logs worth showing when the start fails, most useful first."""

    @abc.abstractmethod
    def install(self) -> None:
        """Install binaries and write configuration; cheap when already done."""

    @abc.abstractmethod
    def launch(self) -> int | None:
        """Start the server process without waiting for it to be ready.

        Returns:
            PID of a launcher process whose exit before readiness means failure, or
            ``None`` when :meth:`launch` already waited for the start itself.
        """

    @abc.abstractmethod
    def probe(self, timeout_s: float) -> tuple[bool, str]:
        """Run the real health check.

        Args:
            timeout_s: Upper bound for the check, in seconds.

        Returns:
            ``(healthy, detail)``; never raises for an unreachable server.
        """

    def after_ready(self) -> None:  # noqa: B027 - optional hook, empty on purpose
        """Run once the server answers (create databases, ...). Empty by default."""

    def stop(self) -> None:
        """Stop the running server (SIGTERM, then SIGKILL after 30 s); remove the PID file."""
        pid = self.running_pid()
        if pid is not None:
            proc.terminate(pid, name=self.label)
        self.pid_file.unlink(missing_ok=True)

    # -- shared behaviour -------------------------------------------------------------------

    def running_pid(self) -> int | None:
        """Return the PID from the PID file if that process is alive and ours.

        A PID file whose process is dead (or whose PID now belongs to something else) is
        stale: it is removed and ``None`` is returned.
        """
        pid = proc.read_pid(self.pid_file)
        if pid is None:
            return None
        if proc.is_alive(pid, self.marker):
            return pid
        log.info("removing stale pid file", service=self.label, pid=pid, path=str(self.pid_file))
        self.pid_file.unlink(missing_ok=True)
        return None

    def status(self) -> ServiceStatus:
        """Return the current :class:`ServiceStatus` (PID file + real health check)."""
        pid = self.running_pid()
        healthy, detail = self.probe(PROBE_TIMEOUT_S)
        if pid is None and healthy:
            healthy, detail = False, f"answers, but not started by infra: {detail}"
        elif pid is None:
            detail = "not running"
        return ServiceStatus(self.label, self.port, pid, healthy, detail)

    def check_ports(self) -> None:
        """Fail fast if one of :attr:`ports` is held by a process that is not this service.

        Raises:
            PortConflictError: Naming the service, the port and, when known, the owner.
        """
        ours = self.running_pid()
        for field, port in zip(self.port_fields, self.ports, strict=True):
            if not proc.port_in_use(self.infra.host, port):
                continue
            owners = proc.port_owners(port)
            if ours is not None and (not owners or ours in owners):
                continue
            raise PortConflictError(self.label, self.infra.host, port, owners, field)

    def ensure_up(self) -> ServiceStatus:
        """Install and start the service unless it already runs; wait until healthy.

        Returns:
            The healthy :class:`ServiceStatus`.

        Raises:
            PortConflictError: A port is held by a foreign process.
            ServiceStartError: The process died, or was not healthy within
                ``settings.infra.start_timeout_s``; the message ends with its log tail.
            InstallError: Installing a binary or archive failed.
        """
        pid = self.running_pid()
        if pid is not None:
            healthy, _ = self.probe(PROBE_TIMEOUT_S)
            if not healthy:
                log.info("service running but not ready yet, waiting", service=self.label, pid=pid)
                self._wait_ready(launcher=None)
            log.info("service already running", service=self.label, pid=pid)
            return self.status()
        self.check_ports()
        started = time.monotonic()
        self.install()
        self._log_offsets = {path: proc.file_size(path) for path in self.log_files()}
        launcher = self.launch()
        self._wait_ready(launcher)
        self.after_ready()
        log.info(
            "service started",
            service=self.label,
            pid=self.running_pid(),
            port=self.port,
            seconds=round(time.monotonic() - started, 1),
        )
        return self.status()

    def _wait_ready(self, launcher: int | None) -> None:
        deadline = time.monotonic() + self.infra.start_timeout_s
        detail = "no health check ran"
        while time.monotonic() < deadline:
            healthy, detail = self.probe(PROBE_TIMEOUT_S)
            if healthy and self.running_pid() is not None:
                return
            launcher_gone = launcher is None or not proc.is_alive(launcher)
            if launcher_gone and self.running_pid() is None:
                raise ServiceStartError(self._failure("exited during start-up"))
            time.sleep(0.5)
        raise ServiceStartError(
            self._failure(
                f"not healthy after {self.infra.start_timeout_s:.0f}s ({detail}); it was left "
                "running for inspection, `ragstream infra down` stops it"
            )
        )

    def _failure(self, what: str) -> str:
        parts = [f"{self.label} {what}."]
        for path in self.log_files():
            text = proc.tail(path, start=self._log_offsets.get(path, 0))
            if text:
                parts.append(f"--- last lines of {path} ---\n{text}")
        return "\n".join(parts)
