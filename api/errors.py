"""Typed JSON errors of the HTTP API.

Every error body has one shape::

    {"error": {"code": "INVALID_REQUEST", "message": "...", "details": [...]}}

``code`` is stable and machine-readable (the same codes as the event errors where they
overlap); ``message`` is for people; ``details`` lists field errors for validation failures.
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragstream.errors import RagstreamError

log = structlog.get_logger(__name__)

STATUS_CODES = {
    400: "INVALID_REQUEST",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "INVALID_REQUEST",
    429: "RATE_LIMITED",
    503: "UNAVAILABLE",
    504: "TIMEOUT",
}


class ErrorBody(BaseModel):
    """``code``, ``message`` and optional field ``details``."""

    code: str
    message: str
    details: list[dict[str, Any]] = []


class ErrorEnvelope(BaseModel):
    """The body of every non-2xx answer."""

    error: ErrorBody


class ApiError(RagstreamError):
    """Raise in a route to answer ``status`` with a typed error body.

    Args:
        status: HTTP status code.
        code: stable error code, e.g. ``NOT_FOUND``.
        message: human-readable explanation.
        headers: extra response headers (e.g. ``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        details: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.details = details or []


def error_json(
    status: int,
    code: str,
    message: str,
    *,
    headers: dict[str, str] | None = None,
    details: list[dict[str, Any]] | None = None,
) -> JSONResponse:
    """The typed error response."""
    body = ErrorEnvelope(error=ErrorBody(code=code, message=message, details=details or []))
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        out.append({"field": loc, "message": str(err.get("msg", "")), "type": err.get("type")})
    return out


def _unsupported_media_type(request: Request, exc: RequestValidationError) -> JSONResponse | None:
    """415 when a body failed validation because it was not sent as JSON (FastAPI then sees
    no JSON object and would say 422 "Input should be a valid dictionary")."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not media or media == "application/json" or media.endswith("+json"):
        return None
    if not any(err.get("loc", ())[:1] == ("body",) for err in exc.errors()):
        return None
    return error_json(
        415,
        "UNSUPPORTED_MEDIA_TYPE",
        f"Content-Type {media!r} is not supported here: send 'Content-Type: application/json'",
    )


def install_error_handlers(app: FastAPI) -> None:
    """Route validation, HTTP and :class:`ApiError` exceptions to the typed body."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_json(
            exc.status, exc.code, exc.message, headers=exc.headers, details=exc.details
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        unsupported = _unsupported_media_type(request, exc)
        if unsupported is not None:
            return unsupported
        details = _field_errors(exc)
        first = details[0] if details else {"field": "", "message": "invalid request"}
        message = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
        return error_json(422, "INVALID_REQUEST", message, details=details)

    @app.exception_handler(OperationalError)
    async def _store_down(_: Request, exc: OperationalError) -> JSONResponse:
        log.warning("api.store_unavailable", error=str(exc.orig))
        return error_json(503, "UNAVAILABLE", "the metadata store is unreachable")

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("api.internal_error", error=str(exc))
        return error_json(500, "INTERNAL", "internal error; it has been logged")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = STATUS_CODES.get(exc.status_code, "ERROR")
        headers = dict(exc.headers) if exc.headers else None
        return error_json(exc.status_code, code, str(exc.detail), headers=headers)
