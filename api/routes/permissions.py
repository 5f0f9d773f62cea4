"""``PUT /v1/readers/{doc_id}``: change who may read a document (docs/permissions.md).

The change is an event: an ``acl`` op on ``rag.ingest``, keyed by ``doc_id`` like the document's
upserts and deletes, so it applies in order with them; the ingest pool sets the chunks'
``principals`` by bulk partial update (no re-embedding), refreshes the index, records the
readers in the document registry and bumps the tenant's index version (cached answers are
not read again). Only a tenant-wide key (``--principal '*'``) may change readers: a key
limited to some principals could otherwise grant itself any document.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from api.auth import Principal
from api.deps import principal
from api.errors import ApiError, ErrorEnvelope
from api.ingesting import DOC_ID, check_doc_id, doc_links, produce_ingest
from api.models import DocumentAccepted, ReadersBody
from api.uploads import json_body
from topics.acl import normalise_readers
from topics.ingest import IngestRequest

router = APIRouter(tags=["documents"])
#: 404: a ``doc_id`` with a control character matches no route at all (Starlette's ``path``
#: convertor stops at a newline), as for ``/v1/documents/{doc_id}``.
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 403, 404, 415, 422, 429, 503)
}


@router.put(
    "/v1/readers/{doc_id:path}", status_code=202, response_model=DocumentAccepted,
    responses=ERRORS,
)  # fmt: skip
async def set_document_readers(
    request: Request, doc_id: str = DOC_ID, who: Principal = Depends(principal)
) -> DocumentAccepted:
    """Set who may read document ``doc_id`` (and each record of a records file): ``readers``,
    a list of ``user:<id>``/``group:<id>``, or ``null`` for everyone of the tenant. Answers
    202 once the event is on Kafka; the change is searchable within about a second
    (docs/permissions.md). A document that does not exist fails in the ingest pool (its
    ``rag.ingest.results`` event says so)."""
    check_doc_id(doc_id)
    if who.principals is not None:
        raise ApiError(
            403,
            "FORBIDDEN",
            "only a tenant-wide key (created with --principal '*') may change who reads a document",
        )
    body = await json_body(request, ReadersBody, upload_field="file")
    event = IngestRequest(
        tenant=who.tenant, doc_id=doc_id, op="acl", principals=normalise_readers(body.readers)
    )
    await produce_ingest(request, event)
    return DocumentAccepted(
        doc_id=doc_id, op="acl", event_id=event.event_id, links=doc_links(doc_id)
    )
