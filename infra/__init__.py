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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from infra.errors import (
    InfraError,
    InstallError,
    PortConflictError,
    ServiceStartError,
)

if TYPE_CHECKING:
    from infra.manager import SERVICE_NAMES, down, status, up
    from infra.postgres_service import postgres_url
    from infra.service import ServiceStatus

#: The names below load their module on first use (PEP 562), so that importing
#: ``infra.cli`` for ``ragstream --help`` does not load every service's module.
_LAZY = {
    "SERVICE_NAMES": "infra.manager",
    "down": "infra.manager",
    "status": "infra.manager",
    "up": "infra.manager",
    "postgres_url": "infra.postgres_service",
    "ServiceStatus": "infra.service",
}

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


def __getattr__(name: str) -> Any:
    """The lazily loaded names of :data:`_LAZY`.

    Raises:
        AttributeError: ``name`` is none of them (nor a submodule imported already).
    """
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
