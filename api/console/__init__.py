"""The browser console: plain HTML, CSS and JavaScript shipped in this package (no CDN, no Node,
no build step), served by the API at ``/`` and ``/console/{ask,search,kb,ops}``, assets under
``/console/static/``.

The page signs in with an API key kept in the tab's ``sessionStorage`` and calls the public API
with it (``Authorization: Bearer``): ``POST /v1/query`` (SSE), ``POST /v1/search`` (the Search
page: passages, no answer), ``GET /v1/queries``, ``GET /v1/chunks/{id}``, the document and job
routes, and for operator keys ``/v1/ops/...``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from api.errors import ApiError

STATIC = Path(__file__).parent / "static"
#: The console's pages (one HTML document; the script shows the page its path names).
PAGES = ("ask", "search", "kb", "ops")


def mount_console(app: FastAPI) -> None:
    """Serve the console on ``app``: ``/`` and ``/console/<page>`` answer the page, assets are
    static files (read from the package on each request, cached by the browser)."""
    app.mount("/console/static", StaticFiles(directory=str(STATIC)), name="console-static")
    index = (STATIC / "index.html").read_text(encoding="utf-8")
    headers = {"Cache-Control": "no-cache"}

    @app.get("/", include_in_schema=False)
    async def root() -> HTMLResponse:
        return HTMLResponse(index, headers=headers)

    @app.get("/console", include_in_schema=False)
    async def console() -> RedirectResponse:
        return RedirectResponse("/console/ask")

    @app.get("/console/{page}", include_in_schema=False)
    async def console_page(page: str) -> HTMLResponse:
        if page not in PAGES:
            raise ApiError(404, "NOT_FOUND", f"no console page {page!r}")
        return HTMLResponse(index, headers=headers)
