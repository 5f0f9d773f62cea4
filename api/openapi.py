"""The OpenAPI document, completed where FastAPI's generation stops short of the server.

FastAPI documents the statuses routes declare; on top of that, :func:`build_openapi`

- drops FastAPI's ``422`` from the OpenAI-compatible routes (:data:`api.errors.OPENAI_PATHS`),
  which answer every bad request with a 400 in OpenAI's shape, as OpenAI does;
- documents ``400`` on every operation with a request body: a body that cannot be read at
  all (not UTF-8, a broken multipart stream) is refused by Starlette before validation with
  ``{"error": {"code": "INVALID_REQUEST", "message": "There was an error parsing the body"}}``;
- states parameters (path, query, header, cookie) and ``multipart/form-data`` fields as what
  they are on the wire: absent or a string. FastAPI writes an optional one as ``anyOf:
  [<schema>, {"type": "null"}]``, which tells a client (and Schemathesis) that ``null`` may be
  sent; HTTP has no null, so a header ``Last-Event-ID: null`` is the four characters, which the
  pattern refuses. The ``null`` branch is dropped (:func:`without_null`);
- adds OpenAPI links (https://spec.openapis.org/oas/v3.1.0#link-object) from each operation
  that creates a resource to the operations that read, change or delete it
  (:data:`LINKS`), so clients and Schemathesis's stateful phase can follow them.

The document is built once per app and cached, as FastAPI's own ``app.openapi()`` is.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.errors import ErrorEnvelope, is_openai_path

#: ``(method, path, status)`` of a creating operation -> ``{link name: (method, path,
#: {parameter: runtime expression})}`` of the operations its response leads to.
_RID = {"request_id": "$response.body#/request_id"}
_QUERY = {
    "GetQuery": ("get", "/v1/queries/{request_id}", _RID),
    "GiveFeedback": ("post", "/v1/queries/{request_id}/feedback", _RID),
}
_HOOK = {"endpoint_id": "$response.body#/id"}
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {
    ("post", "/v1/query", "202"): _QUERY,
    ("post", "/v1/query", "200"): _QUERY,
    ("post", "/v1/documents", "202"): {
        "GetDocument": ("get", "/v1/documents/{doc_id}", {"doc_id": "$response.body#/doc_id"}),
        "DeleteDocument": (
            "delete", "/v1/documents/{doc_id}", {"doc_id": "$response.body#/doc_id"},
        ),
    },
    ("post", "/v1/ingest/jobs", "202"): {
        "GetJob": ("get", "/v1/ingest/jobs/{job_id}", {"job_id": "$response.body#/job_id"}),
        "RetryJob": (
            "post", "/v1/ingest/jobs/{job_id}/retry", {"job_id": "$response.body#/job_id"},
        ),
    },
    ("post", "/v1/webhooks", "201"): {
        "GetWebhook": ("get", "/v1/webhooks/{endpoint_id}", _HOOK),
        "RotateWebhookSecret": ("post", "/v1/webhooks/{endpoint_id}/rotate-secret", _HOOK),
        "DeleteWebhook": ("delete", "/v1/webhooks/{endpoint_id}", _HOOK),
    },
}  # fmt: skip

UNREADABLE_BODY = {
    "description": "The body could not be read at all (not UTF-8, a broken multipart stream): "
    '`{"error": {"code": "INVALID_REQUEST", "message": "There was an error parsing the body"}}`.',
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}},
}


def without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without its ``{"type": "null"}`` branch: ``anyOf: [X, null]`` becomes ``X``
    (its annotations kept: ``description``, ``title``); any other schema is returned as is."""
    branches = schema.get("anyOf")
    if not isinstance(branches, list):
        return schema
    kept = [b for b in branches if b != {"type": "null"}]
    if len(kept) == len(branches):
        return schema
    rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    if len(kept) == 1:
        return {**kept[0], **rest}
    return {**rest, "anyOf": kept}


def _wire_values(op: dict[str, Any]) -> None:
    """Parameters and form fields of ``op`` as absent-or-string (see the module docstring)."""
    for param in op.get("parameters", []):
        if "schema" in param:
            param["schema"] = without_null(param["schema"])
    form = op.get("requestBody", {}).get("content", {}).get("multipart/form-data", {})
    properties = form.get("schema", {}).get("properties", {})
    for name, prop in properties.items():
        properties[name] = without_null(prop)


def _operation_ids(paths: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {
        (method, path): op["operationId"]
        for path, item in paths.items()
        for method, op in item.items()
        if isinstance(op, dict) and "operationId" in op
    }


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (3.1) with the additions of the module docstring.

    Raises:
        KeyError: a link of :data:`LINKS` names an operation or response the app lacks (a
            renamed route must rename its links).
    """
    if app.openapi_schema is not None:
        return app.openapi_schema
    spec = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
    )
    paths: dict[str, Any] = spec["paths"]
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas.setdefault("ErrorEnvelope", ErrorEnvelope.model_json_schema(
        ref_template="#/components/schemas/{model}"
    ))  # fmt: skip
    for path, item in paths.items():
        for op in item.values():
            if isinstance(op, dict) and is_openai_path(path):
                op["responses"].pop("422", None)
            if isinstance(op, dict) and "requestBody" in op:
                op["responses"].setdefault("400", UNREADABLE_BODY)
            if isinstance(op, dict):
                _wire_values(op)
    ids = _operation_ids(paths)
    for (method, path, status), links in LINKS.items():
        response = paths[path][method]["responses"][status]
        response["links"] = {
            name: {"operationId": ids[(to_method, to_path)], "parameters": params}
            for name, (to_method, to_path, params) in links.items()
        }
    app.openapi_schema = spec
    return spec
