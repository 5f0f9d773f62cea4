"""Prometheus metrics helpers shared by every process (API, pools, Celery workers).

Each process exposes the default registry: the API on ``/metrics``, a worker pool process on
its own port via :func:`serve_metrics`.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest, start_http_server

BUILD_INFO_NAME = "ragstream_build_info"


def serve_metrics(port: int, host: str = "127.0.0.1") -> None:
    """Serve the default registry over HTTP on ``host:port`` from a daemon thread.

    Raises:
        OSError: the port is already in use.
    """
    start_http_server(port, addr=host)


def render_latest() -> tuple[bytes, str]:
    """Return ``(body, content_type)`` of the default registry in the text exposition format."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
