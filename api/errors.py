"""Typed JSON errors of the HTTP API.

Every error body has one shape::

    {"error": {"code": "INVALID_REQUEST", "message": "...", "details": [...]}}

``code`` is stable and machine-readable (the same codes as the event errors where they
overlap); ``message`` is for people; ``details`` lists field errors for validation failures.

The OpenAI-compatible routes (:data:`OPENAI_PATHS`) and any unknown ``/v1/*`` path answer in
OpenAI's error shape instead (https://platform.openai.com/docs/guides/error-codes), which the
``openai`` clients parse into ``APIStatusError.code`` / ``.param`` / ``.type``::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "model",
               "code": "model_not_found"}}

``type`` follows the status (:data:`OPENAI_TYPES`); ``code`` is OpenAI's code where one exists
(``model_not_found``, ``context_length_exceeded``, ``unsupported_parameter``,
``invalid_api_key``, ...), else the ragstream code unchanged (``TIMEOUT``, the codes of the
native routes, so a client's checks keep working); ``param`` names the request field at fault,
or ``null``.

A bad request to an OpenAI route is a 400, as OpenAI answers, never the 422 of the native
routes: ``type`` ``invalid_request_error`` and a lower-case ``code`` saying what is wrong
(:func:`openai_invalid_code`: ``missing_required_parameter``, ``invalid_type``,
``invalid_value``, ``empty_array``, ``string_above_max_length``, ``integer_below_min_value``,
... ; ``invalid_json`` for a body that is not JSON).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from ragstream.errors import RagstreamError
from topics.responses import ErrorCode

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

#: HTTP status of a query that failed in the pipeline, by its error code.
FAILED_STATUS = {
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.PROMPT_TOO_LONG: 422,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.BACKEND_UNAVAILABLE: 503,
    ErrorCode.INTERNAL: 500,
    ErrorCode.CANCELLED: 499,  # "client closed request" (nginx): the client left first
    ErrorCode.EMBEDDING_MODEL_MISMATCH: 503,  # the deployment lacks the index's model
    ErrorCode.UNAVAILABLE: 503,  # the query event could not be produced
    ErrorCode.WITHHELD: 403,  # a recorded answer cites a document the asker may no longer read
}


#: Paths whose errors use OpenAI's error shape (the OpenAI-compatible surface).
OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/models"})
#: Path prefixes of OpenAI's Files and vector-store APIs (docs/vector-stores.md): the prefix
#: itself and every path under it.
OPENAI_PREFIXES = ("/v1/files", "/v1/vector_stores")
#: The endpoints an unknown ``/v1/*`` path's 404 lists.
OPENAI_ENDPOINTS = (
    "GET /v1/models",
    "GET /v1/models/{model}",
    "POST /v1/chat/completions",
    "POST /v1/completions",
)
#: OpenAI's error ``type`` by HTTP status (5xx: ``server_error``).
OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    499: "invalid_request_error",
}
#: OpenAI's ``code`` for a ragstream code where OpenAI has one (``INVALID_REQUEST``: a value
#: the server refuses; a schema-invalid body gets a more precise code, :func:`openai_invalid_code`).
OPENAI_CODES = {
    "UNAUTHENTICATED": "invalid_api_key",
    "RATE_LIMITED": "rate_limit_exceeded",
    "INVALID_REQUEST": "invalid_value",
}
#: OpenAI's ``code`` for a pydantic validation error ``type`` (OpenAI's codes for the same
#: faults: a required field missing, a value of the wrong JSON type, out of range, too long).
OPENAI_INVALID_CODES = {
    "missing": "missing_required_parameter",
    "json_invalid": "invalid_json",
    "string_too_long": "string_above_max_length",
    "string_too_short": "string_below_min_length",
    "too_long": "array_above_max_length",
    "too_short": "array_below_min_length",
    "greater_than": "integer_below_min_value",
    "greater_than_equal": "integer_below_min_value",
    "less_than": "integer_above_max_value",
    "less_than_equal": "integer_above_max_value",
}
#: Pydantic error types that mean "a value of the wrong JSON type" (``int_type``,
#: ``int_parsing``, ``model_attributes_type``...): OpenAI's ``invalid_type``.
_TYPE_SUFFIXES = ("_type", "_parsing")


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


class OpenAIError(ApiError):
    """An error of the OpenAI-compatible routes that names OpenAI's ``code`` and ``param``.

    Args:
        status: HTTP status code.
        code: OpenAI's error code, e.g. ``model_not_found``.
        message: human-readable explanation.
        param: the request field at fault (``model``, ``messages``, ``tools``...), or ``None``.
        headers: extra response headers.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, code, message, headers=headers)
        self.param = param


class OpenAIErrorBody(BaseModel):
    """OpenAI's error object: ``message``, ``type``, ``param``, ``code``."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorEnvelope(BaseModel):
    """The body of every non-2xx answer of the OpenAI-compatible routes."""

    error: OpenAIErrorBody


def is_openai_path(path: str) -> bool:
    """True for the OpenAI-compatible routes and for ``/v1/*`` paths no route serves."""
    return (
        path in OPENAI_PATHS
        or path.startswith("/v1/models/")
        or any(path == p or path.startswith(p + "/") for p in OPENAI_PREFIXES)
    )


def openai_error_object(
    status: int, code: str, message: str, param: str | None = None
) -> dict[str, Any]:
    """``{"message", "type", "param", "code"}`` (OpenAI's error object) of an error.

    ``code``: an OpenAI code, or a ragstream code (mapped by :data:`OPENAI_CODES` where OpenAI
    has one, else kept)."""
    code = OPENAI_CODES.get(code, code)
    kind = OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return OpenAIErrorBody(message=message, type=kind, param=param, code=code).model_dump()


def openai_error_json(
    status: int,
    code: str,
    message: str,
    *,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The error response in OpenAI's shape (see the module docstring)."""
    body = {"error": openai_error_object(status, code, message, param)}
    return JSONResponse(body, status_code=status, headers=headers)


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


def _unsupported_media_type(request: Request, exc: RequestValidationError) -> str | None:
    """415 when a body failed validation because it was not sent as JSON (FastAPI then sees
    no JSON object and would say 422 "Input should be a valid dictionary")."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if not media or media == "application/json" or media.endswith("+json"):
        return None
    if not any(err.get("loc", ())[:1] == ("body",) for err in exc.errors()):
        return None
    return f"Content-Type {media!r} is not supported here: send 'Content-Type: application/json'"


def openai_invalid_code(error: dict[str, Any]) -> str:
    """OpenAI's lower-case ``code`` for one pydantic validation error (``exc.errors()[i]``):
    :data:`OPENAI_INVALID_CODES` by its ``type``, ``empty_array`` for an empty list under a
    minimum length, ``invalid_type`` for a value of the wrong type, else ``invalid_value``."""
    kind = str(error.get("type", ""))
    if kind == "too_short" and error.get("input") == []:
        return "empty_array"
    if kind in OPENAI_INVALID_CODES:
        return OPENAI_INVALID_CODES[kind]
    if kind.endswith(_TYPE_SUFFIXES):
        return "invalid_type"
    return "invalid_value"


def _openai_invalid(exc: RequestValidationError, message: str) -> JSONResponse:
    """A schema-invalid body of an OpenAI route: 400 ``invalid_request_error`` (as OpenAI
    answers) with the code of :func:`openai_invalid_code`, naming the top-level field (``null``
    for a body that is not JSON)."""
    errors: list[dict[str, Any]] = list(exc.errors())
    first = errors[0] if errors else {}
    loc = tuple(first.get("loc", ()))
    code = openai_invalid_code(first)
    if code == "invalid_json":
        return openai_error_json(400, code, f"the body is not valid JSON: {message}")
    param = str(loc[1]) if len(loc) > 1 and loc[0] == "body" else None
    return openai_error_json(400, code, message, param=param)


def _api_error_response(request: Request, exc: ApiError) -> JSONResponse:
    if isinstance(exc, OpenAIError) or is_openai_path(request.url.path):
        param = exc.param if isinstance(exc, OpenAIError) else None
        status = 400 if exc.status == 422 else exc.status  # OpenAI: a bad request is a 400
        return openai_error_json(status, exc.code, exc.message, param=param, headers=exc.headers)
    return error_json(exc.status, exc.code, exc.message, headers=exc.headers, details=exc.details)


def _invalid_response(request: Request, exc: RequestValidationError) -> JSONResponse:
    openai = is_openai_path(request.url.path)
    unsupported = _unsupported_media_type(request, exc)
    if unsupported is not None:
        render = openai_error_json if openai else error_json
        return render(415, "UNSUPPORTED_MEDIA_TYPE", unsupported)
    details = _field_errors(exc)
    first = details[0] if details else {"field": "", "message": "invalid request"}
    message = f"{first['field']}: {first['message']}" if first["field"] else first["message"]
    if openai:
        return _openai_invalid(exc, message)
    return error_json(422, "INVALID_REQUEST", message, details=details)


def allowed_methods(request: Request) -> list[str]:
    """Every method the request path's resource serves (Starlette's 405 names only the first
    route that matches the path, though a path has one route per method): the methods of the
    routes with the path template of the first matching route, in the order of the routes;
    ``HEAD`` (implied by ``GET``) is left out, as the spec has it."""
    scope = {**request.scope, "method": "GET"}
    matching = [
        route
        for route in _leaf_routes(request.app.router.routes)
        if getattr(route, "methods", None) and route.matches(scope)[0] != Match.NONE
    ]
    if not matching:
        return []
    # The path's resource is the template of the first route that matches it (the one the
    # router tries first: /v1/webhooks/callback-secret, not /v1/webhooks/{endpoint_id}).
    template = matching[0].path_format
    found: dict[str, None] = {}
    for route in matching:
        if route.path_format == template:
            found.update(dict.fromkeys(sorted(m for m in route.methods if m != "HEAD")))
    return list(found)


def _leaf_routes(routes: Sequence[Any]) -> Iterator[Any]:
    """The routes of ``routes`` with those of included routers (FastAPI keeps an included
    router as one ``_IncludedRouter`` entry over its ``original_router``)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _leaf_routes(inner.routes)
        else:
            yield route


def _http_response(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = STATUS_CODES.get(exc.status_code, "ERROR")
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
    path = request.url.path
    if exc.status_code == 404 and path.startswith("/v1/") and exc.detail == "Not Found":
        # No route serves the path: say which OpenAI endpoints exist (a client library that
        # defaults to one this server lacks learns what to configure).
        endpoints = ", ".join(OPENAI_ENDPOINTS)
        message = f"no endpoint {path}; the OpenAI-compatible endpoints are {endpoints}"
        return openai_error_json(404, "unknown_url", message, headers=headers)
    if is_openai_path(path):
        if exc.status_code == 400:  # Starlette could not read the body at all
            code = "invalid_json"
        return openai_error_json(exc.status_code, code, str(exc.detail), headers=headers)
    return error_json(exc.status_code, code, str(exc.detail), headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Route validation, HTTP and :class:`ApiError` exceptions to the typed body (OpenAI's
    shape on the OpenAI routes, see the module docstring)."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _api_error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _invalid_response(request, exc)

    @app.exception_handler(OperationalError)
    async def _store_down(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("api.store_unavailable", error=str(exc.orig))
        render = openai_error_json if is_openai_path(request.url.path) else error_json
        return render(503, "UNAVAILABLE", "the metadata store is unreachable")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("api.internal_error", error=str(exc))
        render = openai_error_json if is_openai_path(request.url.path) else error_json
        return render(500, "INTERNAL", "internal error; it has been logged")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _http_response(request, exc)
