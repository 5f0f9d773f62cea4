"""FastAPI application factory: the HTTP gateway of ragstream.

Routes:

- ``POST /v1/query``, ``GET /v1/queries/{id}`` (:mod:`api.routes.query`);
- ``POST /v1/queries/{id}/feedback`` (:mod:`api.routes.feedback`);
- ``POST /v1/chat/completions``, OpenAI-compatible (:mod:`api.routes.openai_compat`);
- ``POST /v1/search``, the passages of a query without an answer (:mod:`api.routes.search`);
- ``POST /v1/dify/retrieval``, Dify's External Knowledge API (:mod:`api.routes.dify`);
- ``POST|GET|DELETE /v1/documents/...``, ``POST|GET /v1/ingest/jobs/...``
  (:mod:`api.routes.documents`);
- ``/v1/webhooks...`` (:mod:`api.routes.webhooks`);
- ``/v1/files...``, ``/v1/vector_stores...``, OpenAI's vector-store search
  (:mod:`api.routes.files`, :mod:`api.routes.vector_stores`);
- ``GET /healthz`` (the process is up), ``GET /readyz`` (Kafka, Elasticsearch, Redis and SQL
  reachable; 503 with the failing probes otherwise), ``GET /metrics`` (Prometheus);
- ``GET /``, ``/console/...``: the browser console (:mod:`api.console`);
- ``GET /v1/ops/...``: the console's operations data, operator keys only (:mod:`api.routes.ops`);
- ``POST|GET|DELETE /mcp``: the MCP server over streamable HTTP (:mod:`api.mcp`);
- ``GET /docs``: Swagger UI served from the app (assets of the ``swagger-ui-bundle-v2``
  package under ``/docs/assets``, no CDN), ``GET /openapi.json``: the spec.

Every ``/v1`` route needs an API key. Bodies over ``api.max_body_bytes`` get 413 before they
are read; every error is the typed JSON body of :mod:`api.errors`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import redis
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.console import mount_console
from api.deps import Services
from api.errors import error_json, install_error_handlers
from api.mcp.http import mount_mcp
from api.mcp.http import running as running_mcp
from api.openapi import build_openapi
from api.querying import QueryService
from ragstream import __version__, tracing
from ragstream.health import probe_all
from ragstream.metrics import render_latest
from ragstream.settings import Settings, get_settings

REQUESTS = Counter(
    "ragstream_api_requests_total", "HTTP requests by route and status.", ["route", "status"]
)
LATENCY = Histogram(
    "ragstream_api_request_seconds",
    "HTTP request latency by route (to the response start; streams excluded).",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


class BodyLimit:
    """Pure ASGI middleware: a typed 413 for a body over ``limit`` bytes, declared
    (``Content-Length``) or streamed (chunked: read here, at most ``limit`` bytes are held,
    then replayed to the app)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None:
            if declared.strip().isdigit() and int(declared) > self.limit:
                await self._too_large(scope, receive, send)
                return
            await self.app(scope, receive, send)  # the server enforces the declared length
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_json(413, "PAYLOAD_TOO_LARGE", f"request body over {self.limit} bytes")
        await response(scope, receive, send)


class RequestMetrics:
    """Pure ASGI middleware: each HTTP request counted by route and status
    (``REQUESTS``) and timed (``LATENCY``, seconds to the end of its response).

    Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``, which hides the client's
    disconnect from the endpoint: a sync ``POST /v1/query`` could not notice that its client
    had gone (``request.is_disconnected()`` stayed false) and kept its LLM slot busy."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            name = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(name, str(status)).inc()
            LATENCY.labels(name).observe(time.perf_counter() - started)


def build_services(settings: Settings) -> Services:
    """SQL sessions, Redis client and the query service of one API process."""
    from ragstream.db.engine import make_engine, make_session_factory

    sessions = make_session_factory(make_engine(settings.database_url))
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    svc = Services(settings=settings, sessions=sessions, redis=client)
    svc.extras["queries"] = QueryService(settings, sessions, client)
    return svc


def create_app(settings: Settings) -> FastAPI:
    """Build the gateway for ``settings``; Kafka connects on the first request that needs it.

    Tracing starts here when ``settings.tracing`` turns it on (service ``ragstream-api``):
    FastAPI's own OpenTelemetry support then opens a server span per request, continuing a
    caller's ``traceparent``, and the route's Kafka records carry its context on."""
    tracing.configure_tracing(settings.tracing, "ragstream-api")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Waiting requests each hold a thread briefly (SQL, Redis, produce): more than the
        # default min(32, cores + 4) threads.
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=64, thread_name_prefix="api")
        )
        app.state.services.listen_for_revocations()
        async with running_mcp(app.state.mcp, settings.api.host):
            yield
        app.state.services.close()
        app.state.services.extras["queries"].close()
        extras = app.state.services.extras
        for name in ("ops", "es"):  # built on first use; built again if the app restarts
            if name in extras:
                await asyncio.to_thread(extras.pop(name).close)

    app = FastAPI(
        title="ragstream",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        description="Event-driven retrieval-augmented generation. Authenticate with "
        "`Authorization: Bearer <key>` (create one with `ragstream keys create`).",
    )
    app.state.services = build_services(settings)
    app.openapi = partial(build_openapi, app)  # type: ignore[method-assign]
    install_error_handlers(app)
    _mount_routes(app)
    app.state.mcp = mount_mcp(app, app.state.services)
    _mount_docs(app)
    mount_console(app)
    app.add_middleware(BodyLimit, limit=settings.api.max_body_bytes)

    app.add_middleware(RequestMetrics)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"])
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

    @app.get(
        "/metrics",
        tags=["ops"],
        response_class=PlainTextResponse,
        responses={
            200: {
                "description": "Prometheus text exposition format 0.0.4.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    )
    async def metrics() -> PlainTextResponse:
        """Every metric of this process, as Prometheus scrapes it."""
        payload, content_type = render_latest()
        return PlainTextResponse(content=payload, media_type=content_type)

    return app


def _mount_routes(app: FastAPI) -> None:
    from api.routes import (
        chunks,
        dify,
        documents,
        feedback,
        files,
        openai_compat,
        ops,
        permissions,
        query,
        search,
        vector_stores,
        webhooks,
    )

    app.include_router(query.router)
    app.include_router(feedback.router)
    app.include_router(openai_compat.router)
    app.include_router(permissions.router)
    app.include_router(documents.router)
    app.include_router(webhooks.router)
    app.include_router(chunks.router)
    app.include_router(search.router)
    app.include_router(dify.router)
    app.include_router(ops.router)
    app.include_router(files.router)
    app.include_router(vector_stores.router)


def _mount_docs(app: FastAPI) -> None:
    from swagger_ui_bundle import swagger_ui_path

    app.mount("/docs/assets", StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True},
        )


def app_from_environment() -> FastAPI:
    """Factory for ``uvicorn --factory`` (multi-process: each worker builds its own app)."""
    return create_app(get_settings())
