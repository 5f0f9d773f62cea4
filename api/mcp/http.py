"""The MCP endpoint of the API: streamable HTTP at ``POST/GET/DELETE /mcp``.

The route is the SDK's streamable-HTTP handler (stateless: every request stands alone, so any
API process serves any request, as the rest of the API does), behind a key check that answers
a request without a valid API key with the API's typed 401 before the MCP server sees it; the
tools authenticate the same key again to learn the tenant (:mod:`api.mcp.server`). The SDK's
DNS-rebinding guard is on while the API listens on loopback (allowed hosts: loopback).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.deps import Services
from api.errors import error_json
from api.mcp.knowledge import KnowledgeBase
from api.mcp.server import build_server

PATH = "/mcp"


def presented_key(headers: dict[str, str]) -> str | None:
    """The API key of ``Authorization: Bearer <key>`` or ``X-API-Key`` (lower-case names)."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return headers.get("x-api-key") or None


def key_from_request(ctx: Context) -> str | None:
    """The key presented with the HTTP request of a tool call."""
    headers = ctx.headers or {}
    return presented_key({k.lower(): v for k, v in headers.items()})


class McpEndpoint:
    """The ASGI endpoint of ``/mcp``: the key check, then the SDK's session manager of the
    running app (made anew at each start of the app, see :func:`mount_mcp`)."""

    def __init__(self, server: MCPServer, services: Services) -> None:
        self.server = server
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        key = presented_key(headers)
        found = await asyncio.to_thread(self.services.authenticate, key) if key else None
        if found is None:
            message = (
                "unknown or revoked API key"
                if key
                else "an API key is required: 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
            )
            response = error_json(401, "UNAUTHENTICATED", message)
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await StreamableHTTPASGIApp(self.server.session_manager)(scope, receive, send)


def mount_mcp(app: FastAPI, services: Services) -> MCPServer:
    """Add ``/mcp`` to ``app``; run :func:`running` in the app's lifespan."""
    server = build_server(KnowledgeBase(services), key_from_request)
    endpoint = McpEndpoint(server, services)
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    return server


@asynccontextmanager
async def running(server: MCPServer, host: str) -> AsyncIterator[None]:
    """The MCP session manager of one run of the app (a manager runs once)."""
    server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, host=host)
    async with server.session_manager.run():
        yield
