"""The API's side of the ingest path, shared by the document routes: the document id of a
path, its links, and producing an ingest event to ``rag.ingest`` (acks=all)."""

from __future__ import annotations

import re

from fastapi import Path, Request

from api.deps import query_service
from api.errors import ApiError
from api.querying import send_acked
from topics.ingest import DOC_ID_PATTERN, IngestRequest
from topics.registry import INGEST
from topics.serde import encode

_DOC_ID = re.compile(DOC_ID_PATTERN)
#: A document id in a path: 1-512 characters, no control characters (C0, DEL, C1), as in the
#: bodies (:data:`topics.ingest.DOC_ID_PATTERN`).
DOC_ID = Path(min_length=1, max_length=512, pattern=DOC_ID_PATTERN)


async def produce_ingest(request: Request, event: IngestRequest) -> None:
    """Produce ``event`` to ``rag.ingest`` and await the broker's acknowledgement.

    Raises:
        ApiError: 413 (the event is over the record limit), 503 (Kafka).
    """
    svc = query_service(request)
    producer, _ = await svc.start()
    topic = svc.registry.name(INGEST)
    await send_acked(producer, topic, event.key(), encode(event), svc.settings)


def check_doc_id(doc_id: str) -> None:
    """Raises ApiError 422 unless ``doc_id`` is 1-512 characters without a control character
    (:data:`topics.ingest.DOC_ID_PATTERN`: C0, DEL and C1)."""
    if not 0 < len(doc_id) <= 512 or not _DOC_ID.fullmatch(doc_id):
        raise ApiError(
            422, "INVALID_REQUEST", "doc_id: 1-512 characters, no control character (C0, DEL, C1)"
        )


def doc_links(doc_id: str) -> dict[str, str]:
    """``{"self": "/v1/documents/<doc_id>"}``."""
    return {"self": f"/v1/documents/{doc_id}"}
