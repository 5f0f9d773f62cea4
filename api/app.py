"""FastAPI application factory.

Routes: ``GET /healthz`` (the process is up), ``GET /readyz`` (Kafka, Elasticsearch, Redis and
SQL reachable; 503 with the failing probes otherwise) and ``GET /metrics`` (Prometheus).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse

from ragstream import __version__
from ragstream.health import probe_all
from ragstream.metrics import render_latest
from ragstream.settings import Settings


def create_app(settings: Settings) -> FastAPI:
    """Build the gateway for ``settings``; nothing connects until a request needs it."""
    app = FastAPI(title="ragstream", version=__version__)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        probes = await asyncio.to_thread(probe_all, settings)
        body: dict[str, Any] = {
            "status": "ready" if all(p.healthy for p in probes) else "not_ready",
            "checks": {
                p.name: {"healthy": p.healthy, "detail": p.detail, "latency_ms": p.latency_ms}
                for p in probes
            },
        }
        return JSONResponse(body, status_code=200 if body["status"] == "ready" else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        payload, content_type = render_latest()
        return Response(content=payload, media_type=content_type)

    return app
