"""Start, stop and inspect all local services: the functions behind ``ragstream infra``."""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor

import structlog

from infra import cluster
from infra.elasticsearch_service import ElasticsearchService
from infra.errors import InfraError
from infra.kafka_service import KafkaService
from infra.llm_service import LlmService, extra_services
from infra.postgres_service import PostgresService
from infra.redis_service import RedisService
from infra.service import Service, ServiceStatus
from infra.vllm_service import VllmService
from ragstream.settings import Settings

log = structlog.get_logger(__name__)

#: Every service name, in start order.
SERVICE_NAMES = ("redis", "llm", "kafka", "elasticsearch", "postgres")

_CLASSES: dict[str, type[Service]] = {
    "redis": RedisService,
    "llm": LlmService,
    "kafka": KafkaService,
    "elasticsearch": ElasticsearchService,
    "postgres": PostgresService,
}


def services(
    settings: Settings, postgres: bool | None = None, only: Collection[str] | None = None
) -> list[Service]:
    """Build the service objects to act on, in start order.

    Args:
        settings: The settings tree.
        postgres: Include PostgreSQL; ``None`` means ``settings.infra.postgres``.
        only: Restrict to these names (``postgres`` in ``only`` includes it regardless
            of ``postgres``).

    Returns:
        Service objects (nothing is started or installed).

    Raises:
        InfraError: ``only`` names an unknown service.
    """
    unknown = set(only or ()) - set(SERVICE_NAMES)
    if unknown:
        raise InfraError(f"unknown service(s) {sorted(unknown)}; choose from {SERVICE_NAMES}")
    with_postgres = settings.infra.postgres if postgres is None else postgres
    names = [n for n in SERVICE_NAMES if n != "postgres" or with_postgres]
    if only:
        names = [n for n in SERVICE_NAMES if n in only]
    return [_CLASSES[name](settings) for name in names]


@contextlib.contextmanager
def _exclusive(settings: Settings) -> Iterator[None]:
    """Hold ``.local/infra.lock`` so that concurrent ``up``/``down`` calls take turns."""
    local_dir = settings.infra.local_dir
    local_dir.mkdir(parents=True, exist_ok=True)
    with (local_dir / "infra.lock").open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def up(
    settings: Settings, postgres: bool | None = None, only: Collection[str] | None = None
) -> list[ServiceStatus]:
    """Install (first run) and start the local services; wait until all are healthy.

    Services that already run and answer are left alone, so a second call takes seconds.
    Ports are checked for every service before anything starts; then all services start
    at once and are awaited together (Elasticsearch takes the longest, ~15-40 s).
    Concurrent ``up``/``down`` calls (other processes included) take turns through a lock
    file, ``.local/infra.lock``.

    Args:
        settings: The settings tree (``settings.infra`` holds ports, versions, paths).
        postgres: Also start PostgreSQL; ``None`` means ``settings.infra.postgres``.
        only: Start only these services (``redis``, ``llm``, ``kafka``,
            ``elasticsearch``, ``postgres``).

    Returns:
        One healthy :class:`ServiceStatus` per started service, in start order.

    Raises:
        PortConflictError: A port is held by a foreign process (nothing was started).
        ServiceStartError: A service died or stayed unhealthy past
            ``settings.infra.start_timeout_s``; the others were still awaited.
        InstallError: apt, Maven, unzip or useradd failed.
    """
    chosen = services(settings, postgres, only)
    started = time.monotonic()
    with (
        _exclusive(settings),
        ThreadPoolExecutor(max_workers=len(chosen), thread_name_prefix="infra-up") as pool,
    ):
        for service in chosen:
            service.check_ports()
        futures = [pool.submit(service.ensure_up) for service in chosen]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        first = errors[0]
        if len(errors) == 1 and isinstance(first, InfraError):
            raise first
        raise InfraError("\n\n".join(str(e) for e in errors)) from first
    log.info(
        "infra up", services=[s.name for s in chosen], seconds=round(time.monotonic() - started, 1)
    )
    return [f.result() for f in futures]


def down(settings: Settings) -> None:
    """Stop every local service that runs (PostgreSQL included), in reverse start order.

    The vLLM server (:func:`vllm_up`), extra LLM servers (:func:`llm_up`) and the nodes of
    ``infra cluster up`` (:mod:`infra.cluster`) are stopped first. Each is stopped by PID (SIGTERM,
    SIGKILL after 30 s; PostgreSQL with ``pg_ctl stop -m fast``) and its PID file removed.
    Services that are not running are skipped. Data under ``settings.infra.local_dir`` is kept.

    Args:
        settings: The settings tree.
    """
    with _exclusive(settings):
        cluster.down(settings)
        VllmService(settings).stop()
        for service in [*extra_services(settings), *reversed(services(settings, postgres=True))]:
            service.stop()


def status(settings: Settings) -> list[ServiceStatus]:
    """Return the status of each service (PID file plus the real health check).

    PostgreSQL is listed when ``settings.infra.postgres`` is set or when it runs; extra LLM
    servers (``llm:<port>``) and the vLLM server (``vllm``) when they run.

    Args:
        settings: The settings tree.

    Returns:
        One :class:`ServiceStatus` per service, in start order.
    """
    result = []
    for service in services(settings, postgres=True):
        state = service.status()
        if service.name == "postgres" and not settings.infra.postgres and state.pid is None:
            continue
        result.append(state)
    result.extend(service.status() for service in extra_services(settings))
    vllm = VllmService(settings)
    if vllm.running_pid() is not None:
        result.append(vllm.status())
    return result


def llm_up(
    settings: Settings,
    model: str,
    port: int,
    *,
    n_parallel: int | None = None,
    n_ctx: int | None = None,
    n_threads: int | None = None,
) -> ServiceStatus:
    """Start an extra LLM server for catalog model ``model`` on ``port``; wait until healthy.

    It runs beside the main server (``settings.llm``), under ``.local/llm-<port>/``, and is
    stopped by :func:`llm_down` or :func:`down`. A server already running on that port with
    that model is left alone; one with another model is refused (stop it first).

    Args:
        settings: The settings tree (the host comes from ``settings.llm``).
        model: A name of :data:`infra.models.CATALOG`; installed first if needed.
        port: TCP port, not ``settings.llm.port``.
        n_parallel: Slots; default ``settings.llm.n_parallel``.
        n_ctx: Context tokens over all slots; default ``settings.llm.n_ctx``.
        n_threads: CPU threads; default ``settings.llm.n_threads``.

    Returns:
        The healthy :class:`ServiceStatus` (named ``llm:<port>``).

    Raises:
        InfraError: Unknown model, the main server's port, or another model already there.
        PortConflictError: The port is held by another process.
        ServiceStartError: The server died or stayed unhealthy.
        InstallError: Downloading or assembling the model failed.
    """
    service = LlmService.for_model(
        settings, model, port, n_parallel=n_parallel, n_ctx=n_ctx, n_threads=n_threads
    )
    with _exclusive(settings):
        for running in extra_services(settings):
            if running.llm.port == port and running.llm.model != model:
                if running.running_pid() is None:
                    continue
                raise InfraError(
                    f"llm:{port} already serves {running.llm.model}; stop it first with "
                    f"`ragstream infra llm down --port {port}`"
                )
        return service.ensure_up()


def llm_down(settings: Settings, port: int | None = None) -> list[int]:
    """Stop the extra LLM server on ``port`` (every extra server when ``None``).

    The main server (``settings.llm.port``) is not touched: ``infra down`` stops it.

    Returns:
        The ports of the servers that were running and are now stopped.
    """
    stopped = []
    with _exclusive(settings):
        for service in extra_services(settings):
            if port is not None and service.llm.port != port:
                continue
            if service.running_pid() is not None:
                stopped.append(service.llm.port)
            service.stop()
    return stopped


def vllm_up(settings: Settings) -> ServiceStatus:
    """Start the vLLM server of ``settings.vllm``; wait (up to its ``start_timeout_s``) for
    ``GET /health``. One already running is left alone. ``.local/infra.lock`` is held for the
    launch only, not for the minutes of vLLM's start-up, so other ``infra up`` calls go on.

    Raises:
        InstallError: The vLLM venv or the converted model is missing (``make vllm``).
        PortConflictError: ``settings.vllm.port`` is held by another process.
        ServiceStartError: The server died or stayed unhealthy.
    """
    service = VllmService(settings)
    with _exclusive(settings):
        launcher = service.start()
    return service.wait_healthy(launcher)


def vllm_down(settings: Settings) -> bool:
    """Stop the vLLM server (SIGTERM, SIGKILL after 30 s).

    Returns:
        Whether it was running.
    """
    with _exclusive(settings):
        service = VllmService(settings)
        was_running = service.running_pid() is not None
        service.stop()
    return was_running
