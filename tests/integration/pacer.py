"""A pacing proxy in front of the real LLM server: every streamed completion chunk is held
``delay_s`` before it is passed on, so an answer streams slowly enough for a test to drop and
resume its connection mid-answer. Everything else (``/tokenize``, ``/props``, ``/health``) is
forwarded as it is. The tokens are the real model's; only their pace changes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.integration.stack import free_port


class Pacer:
    """Serves on ``127.0.0.1:<port>`` and forwards to ``target`` (``http://host:port``)."""

    def __init__(self, target: str, delay_s: float) -> None:
        self.target = target.rstrip("/")
        self.delay_s = delay_s
        self.port = free_port()
        self.chunks = 0
        app = Starlette(routes=[Route("/{path:path}", self._forward, methods=["GET", "POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Pacer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("pacer did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _forward(self, request: Request) -> Response:
        url = f"{self.target}/{request.path_params['path']}"
        body = await request.body()
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        client = httpx.AsyncClient(timeout=httpx.Timeout(120.0))
        upstream = await client.send(
            client.build_request(request.method, url, content=body, headers=headers), stream=True
        )
        media = upstream.headers.get("content-type", "application/json")
        if not media.startswith("text/event-stream"):
            data = await upstream.aread()
            await upstream.aclose()
            await client.aclose()
            return Response(data, status_code=upstream.status_code, media_type=media)

        async def paced() -> AsyncIterator[bytes]:
            try:
                async for line in upstream.aiter_lines():
                    if line.startswith("data:"):
                        self.chunks += 1
                        await asyncio.sleep(self.delay_s)
                    yield (line + "\n").encode()
            finally:
                await upstream.aclose()
                await client.aclose()

        return StreamingResponse(paced(), status_code=upstream.status_code, media_type=media)
