"""Local single-node services for development and CI: Kafka, Elasticsearch, Redis, PostgreSQL.

``up`` installs what is missing on the first run (jars and the Elasticsearch zip from Maven
Central, Debian packages with apt) and starts every service on loopback, with all data,
logs and PID files under ``settings.infra.local_dir``. ``down`` stops them; ``status``
runs a real health check against each. The typer app in :mod:`infra.cli` wraps the same
functions (``ragstream infra up|down|status`` or ``python -m infra``).

Example:
    >>> from ragstream.settings import get_settings
    >>> import infra
    >>> statuses = infra.up(get_settings(), postgres=True)  # doctest: +SKIP
"""

from infra.errors import (
    InfraError,
    InstallError,
    PortConflictError,
    ServiceStartError,
)
from infra.manager import SERVICE_NAMES, down, status, up
from infra.postgres_service import postgres_url
from infra.service import ServiceStatus

__all__ = [
    "SERVICE_NAMES",
    "InfraError",
    "InstallError",
    "PortConflictError",
    "ServiceStartError",
    "ServiceStatus",
    "down",
    "postgres_url",
    "status",
    "up",
]
