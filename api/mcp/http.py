"""The MCP endpoint of the API: streamable HTTP at ``POST/GET/DELETE /mcp``.

The route is the SDK's streamable-HTTP handler (stateless: every request stands alone, so any
API process serves any request, as the rest of the API does), behind a key check that answers
a request without a valid API key with a 401 before the MCP server sees it, its body a JSON-RPC
error saying which header to send (:func:`unauthenticated`: the SDK's client shows that, not a
bare status); the tools authenticate the same key again to learn the tenant
(:mod:`api.mcp.server`). The SDK's
DNS-rebinding guard is on while the API listens on loopback (allowed hosts: loopback).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from api.deps import Services
from api.mcp.knowledge import KnowledgeBase
from api.mcp.server import build_server

PATH = "/mcp"
#: The 401's JSON-RPC error code (JSON-RPC 2.0 leaves -32000..-32099 to servers; MCP defines
#: none for authentication) and what it tells a client to send.
UNAUTHENTICATED_RPC_CODE = -32001
UNAUTHENTICATED = "UNAUTHENTICATED"
SEND = "Authorization: Bearer <key>"
SEND_OTHER = "X-API-Key: <key>"
REALM = "ragstream"


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
            request_id = await _request_id(receive) if scope.get("method") == "POST" else None
            response = unauthenticated(request_id, presented=key is not None)
            await response(scope, receive, send)
            return
        await StreamableHTTPASGIApp(self.server.session_manager)(scope, receive, send)


def unauthenticated(request_id: str | int | None, *, presented: bool) -> JSONResponse:
    """The 401 of a request without a valid key: a JSON-RPC error response, the one error
    body the MCP SDK's client shows for a failed HTTP status (it raises ``MCPError`` with this
    ``message`` and ``data``; any other body becomes "Server returned an error response").

    ``error``: ``{code: -32001, message: "UNAUTHENTICATED: <reason>; send ...", data: {status:
    401, code: "UNAUTHENTICATED", message: <reason>, header: "Authorization: Bearer <key>",
    alternative: "X-API-Key: <key>"}}``; ``id``: the request's id (``null`` when the body has
    none). ``WWW-Authenticate`` says the same for HTTP clients (RFC 6750: ``Bearer realm``,
    with ``error="invalid_token"`` when a key was presented).
    """
    reason = "unknown or revoked API key" if presented else "an API key is required"
    message = f"{UNAUTHENTICATED}: {reason}; send the header '{SEND}' (or '{SEND_OTHER}')"
    data = {
        "status": 401, "code": UNAUTHENTICATED, "message": reason, "header": SEND,
        "alternative": SEND_OTHER,
    }  # fmt: skip
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": UNAUTHENTICATED_RPC_CODE, "message": message, "data": data},
    }
    challenge = f'Bearer realm="{REALM}"'
    if presented:
        challenge += f', error="invalid_token", error_description="{reason}"'
    return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": challenge})


async def _request_id(receive: Receive) -> str | int | None:
    """The JSON-RPC id of the request body (already bounded by the API's body limit), or
    ``None`` for a body that is not one JSON-RPC request."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    try:
        request_id = json.loads(b"".join(chunks)).get("id")
    except (ValueError, AttributeError):
        return None
    return request_id if type(request_id) in (str, int) else None


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
