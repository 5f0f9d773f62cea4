"""Errors raised while installing, starting or stopping the local services."""

from __future__ import annotations

from ragstream.errors import RagstreamError


class InfraError(RagstreamError, RuntimeError):
    """Root of every error :mod:`infra` raises on purpose (a :class:`RuntimeError` too, as
    before it derived from the one root)."""


class InstallError(InfraError):
    """A binary, package or archive could not be installed (apt, Maven, unzip, useradd)."""


class PortConflictError(InfraError):
    """A port a service needs is already bound by a process that is not that service.

    Args:
        service: Name of the service that wanted the port (``"kafka"``, ...).
        host: Address the service binds.
        port: TCP port in use.
        owners: PIDs (with their command lines) that listen on the port, when they
            could be found through ``/proc``; empty when the owner is unknown.
        setting: The ``InfraSettings`` field that holds the port (``"redis_port"``).
    """

    def __init__(
        self, service: str, host: str, port: int, owners: dict[int, str], setting: str
    ) -> None:
        held_by = ", ".join(f"pid {pid} ({cmd})" for pid, cmd in owners.items()) or "unknown"
        super().__init__(
            f"{service}: port {host}:{port} is already in use by another process "
            f"(held by: {held_by}). Stop that process, or move {service} to a free port "
            f"with settings.infra.{setting} (RAGSTREAM_INFRA__{setting.upper()})."
        )
        self.service = service
        self.host = host
        self.port = port
        self.owners = owners


class ServiceStartError(InfraError):
    """A service process exited, or did not become healthy, before the start timeout."""
