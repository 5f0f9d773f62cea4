"""``POST /v1/dify/retrieval``: ragstream as a Dify external knowledge base.

Register ``http://HOST:PORT/v1/dify`` as the External Knowledge API's endpoint in Dify (it
appends ``/retrieval``), a ragstream key as its API key, and the key's tenant as the External
Knowledge ID. The protocol, the meaning of ``knowledge_id`` and ``score`` and the
``metadata_condition`` mapping are in :mod:`api.dify`; the search is the process's one
:class:`~api.searching.Searcher` (hybrid), with the key's tenant, readers and rate limit.

Every error of this route, the key check's included, is answered in Dify's shape
``{"error_code", "error_msg"}`` (:class:`DifyRoute`): a missing or malformed ``Authorization``
header is 1001 and an unknown or revoked key 1002 (both 403, as Dify's example), an unknown
``knowledge_id`` 2001 (404); other errors keep their HTTP status as ``error_code``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from api.auth import Principal
from api.deps import principal, services
from api.dify import (
    AUTH_FAILED,
    INVALID_AUTH_HEADER,
    NO_SUCH_KNOWLEDGE,
    DifyError,
    DifyErrorBody,
    Record,
    RetrievalBody,
    RetrievalResponse,
    filters_of,
)
from api.errors import ApiError, ErrorEnvelope
from api.searching import Hit, max_rrf_score, shared_searcher

#: ``Authorization: Bearer <key>``, the one header form Dify sends.
BEARER_HEADER = re.compile(r"^\s*[Bb][Ee][Aa][Rr][Ee][Rr] +\S+\s*$")


def dify_json(error: DifyError) -> JSONResponse:
    """The response of ``error`` in Dify's shape."""
    body = DifyErrorBody(error_code=error.code, error_msg=error.message)
    return JSONResponse(body.model_dump(), status_code=error.status, headers=error.headers)


def as_dify(request: Request, exc: ApiError) -> DifyError:
    """``exc`` as Dify's error: a refused key is 1001 when the request has no well-formed
    ``Authorization: Bearer`` header (nor an ``X-API-Key``), else 1002; acting as principals the
    key lacks is 1002; any other error keeps its status as its code."""
    if exc.status == 401:
        header = request.headers.get("authorization", "")
        if BEARER_HEADER.match(header) or (not header and request.headers.get("x-api-key")):
            return DifyError(AUTH_FAILED, f"Authorization failed: {exc.message}")
        return DifyError(
            INVALID_AUTH_HEADER,
            "Invalid Authorization header format. Expected 'Bearer <api-key>' format.",
        )
    if exc.status == 403:
        return DifyError(AUTH_FAILED, f"Authorization failed: {exc.message}")
    return DifyError(exc.status, exc.message, status=exc.status, headers=exc.headers)


class DifyRoute(APIRoute):
    """A route whose errors (the key check, the body's validation, the search) are answered in
    Dify's shape (:func:`as_dify`) instead of ragstream's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except DifyError as exc:
                return dify_json(exc)
            except ApiError as exc:
                return dify_json(as_dify(request, exc))
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {}
                where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
                message = f"{where}: {first.get('msg', 'invalid request')}".lstrip(": ")
                return dify_json(DifyError(422, message))

        return answer


router = APIRouter(tags=["search"], route_class=DifyRoute)

_DIFY = {"model": DifyErrorBody}
ERRORS: dict[int | str, dict[str, Any]] = {
    403: {**_DIFY, "description": "1001: no or a malformed `Authorization: Bearer` header; "
          "1002: an unknown or revoked key."},
    404: {**_DIFY, "description": "2001: `knowledge_id` is not the key's tenant."},
    413: {"model": ErrorEnvelope, "description": "A body over the API's size limit."},
    422: {**_DIFY, "description": "422: a request ragstream cannot run (a field, a filter)."},
    429: {**_DIFY, "description": "429: the key's rate limit (`Retry-After`)."},
    503: {**_DIFY, "description": "503: Elasticsearch unreachable."},
}  # fmt: skip
#: Dify's documented example request (knowledge_id: the tenant of a fresh install's key).
RETRIEVAL_EXAMPLE = {
    "knowledge_id": "default",
    "query": "What does VACUUM do?",
    "retrieval_setting": {"top_k": 5, "score_threshold": 0.0},
}


def record(hit: Hit, top: float) -> Record:
    """The Dify record of ``hit``; ``top``: the highest hybrid score (its score's scale)."""
    c = hit.candidate
    return Record(
        content=c.text,
        score=round(min(1.0, hit.score / top), 6),
        title=c.title or c.source or c.doc_id,
        metadata={
            **c.metadata, "doc_id": c.doc_id, "chunk_id": c.chunk_id, "source": c.source,
            "rrf_score": round(hit.score, 6),
        },
    )  # fmt: skip


@router.post(
    "/v1/dify/retrieval",
    response_model=RetrievalResponse,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {"content": {"application/json": {"example": RETRIEVAL_EXAMPLE}}},
    },
)
async def dify_retrieval(
    body: RetrievalBody, request: Request, who: Principal = Depends(principal)
) -> RetrievalResponse:
    """Dify's External Knowledge API: the passages of the key's knowledge base best matching
    ``query``, as Dify's records (hybrid order; score in (0, 1])."""
    if body.knowledge_id != who.tenant:
        raise DifyError(
            NO_SUCH_KNOWLEDGE,
            f"The knowledge does not exist: {body.knowledge_id!r} is not the knowledge base of "
            "this key (use its tenant's name as the External Knowledge ID).",
        )
    svc = services(request)
    setting = body.retrieval_setting
    found = await shared_searcher(svc).search(
        who, body.query, top_k=setting.top_k, filters=filters_of(body.metadata_condition)
    )
    top = max_rrf_score(svc.settings)
    records = [record(hit, top) for hit in found]
    return RetrievalResponse(records=[r for r in records if r.score >= setting.score_threshold])
