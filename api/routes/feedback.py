"""``POST /v1/queries/{request_id}/feedback``: a reader says whether a logged answer helped,
and optionally which cited passage or evidence span answered (:mod:`workers.feedback`).

Whoever may read the query may give feedback on it: a key of the query's tenant asking with
the same principals (or a tenant-wide key), any role (``docs/permissions.md``). A query of
another tenant, or one the key may not read, is a 404 like an unknown id (its existence is not
told). A key's feedback replaces its earlier feedback on the same query. The judged passage's
text is copied from the index (the text the reader saw), so training reads SQL only
(:func:`workers.feedback.feedback_pairs`).
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Request

from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, ErrorEnvelope
from api.feedback_models import FeedbackBody, FeedbackOut
from api.passages import read_chunk
from workers import feedback, query_log

router = APIRouter(tags=["query"])

#: The example body (Swagger UI's "Try it out" sends it as is).
FEEDBACK_EXAMPLE = {"helpful": True, "passage": 1, "comment": "the port was in [1]"}


@router.post(
    "/v1/queries/{request_id}/feedback",
    response_model=FeedbackOut,
    responses={
        200: {"description": "Stored (replacing this key's earlier feedback on the query)."},
        404: {
            "model": ErrorEnvelope,
            "description": "No query with this id that this key may read (unknown, another "
            "tenant's, or asked with other principals).",
        },
        409: {"model": ErrorEnvelope, "description": "The query has no answer yet (pending)."},
        422: {
            "model": ErrorEnvelope,
            "description": "An invalid body, or a `passage`/`sentence` the answer does not have "
            "(the message names the citations or spans it has).",
        },
        **{s: {"model": ErrorEnvelope} for s in (401, 413, 415, 429, 503)},
    },
    openapi_extra={
        "requestBody": {"content": {"application/json": {"example": FEEDBACK_EXAMPLE}}},
    },
)
async def give_feedback(
    request_id: str, body: FeedbackBody, request: Request, who: Principal = Depends(principal)
) -> FeedbackOut:
    """Say whether a logged answer helped, and optionally which passage or span answered."""
    svc = services(request)
    if len(request_id) > 128:
        raise ApiError(404, "NOT_FOUND", "no such query")
    answer = await asyncio.to_thread(
        query_log.read, svc.sessions, who.tenant, request_id, who.principals
    )
    if answer is None:
        raise ApiError(404, "NOT_FOUND", f"no query {request_id!r} for this tenant")
    if answer.status == "pending":
        raise ApiError(409, "CONFLICT", f"query {request_id!r} has no answer yet: try once it has")
    try:
        about = feedback.target(answer, body.passage, body.sentence)
    except feedback.FeedbackError as exc:
        raise ApiError(
            422, "INVALID_REQUEST", str(exc), details=[{"field": exc.field, "message": exc.reason}]
        ) from exc
    text: str | None = None
    if about is not None:
        chunk: dict[str, Any] | None = await read_chunk(
            request, who.tenant, about.chunk_id, who.principals
        )
        text = None if chunk is None else str(chunk.get("text") or "") or None
    stored = await asyncio.to_thread(
        partial(
            feedback.record,
            svc.sessions,
            tenant=who.tenant,
            request_id=request_id,
            key_id=who.key_id,
            helpful=body.helpful,
            passage=body.passage,
            sentence=body.sentence,
            comment=body.comment,
            about=about,
            passage_text=text,
        )
    )
    return FeedbackOut.model_validate(stored)
