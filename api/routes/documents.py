"""Documents through the stream path, and bulk ingest jobs through Celery.

- ``POST /v1/documents``: one upsert event on ``rag.ingest`` (keyed by ``doc_id``, so updates of
  a document apply in order); 202 once Kafka acknowledged it. The ingest pool indexes it.
- ``GET /v1/documents/{doc_id}``: the registry row (status, version, chunks).
- ``DELETE /v1/documents/{doc_id}``: one delete event; 202.
- ``POST /v1/ingest/jobs``: a Celery bulk job over server-side paths under the tenant's folder of
  each allowed root (``<root>/<tenant>/``).
- ``GET /v1/ingest/jobs/{job_id}``: progress and per-document failures.

Every route is scoped to the API key's tenant.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, ErrorEnvelope
from api.models import DocumentAccepted, DocumentBody, DocumentOut, JobBody, JobFailure, JobOut
from api.querying import send_acked
from api.routes.query import check_callback, query_service
from ingest import jobs
from ragstream.db.models import Document, IngestJob
from topics.ingest import IngestRequest
from topics.registry import INGEST
from topics.serde import encode

router = APIRouter(tags=["documents"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 404, 413, 422, 429, 503)
}
MAX_FAILURES_SHOWN = 100


async def _produce_ingest(request: Request, event: IngestRequest) -> None:
    svc = query_service(request)
    producer, _ = await svc.start()
    topic = svc.registry.name(INGEST)
    await send_acked(producer, topic, event.key(), encode(event), svc.settings)


@router.post("/v1/documents", status_code=202, response_model=DocumentAccepted, responses=ERRORS)
async def upsert_document(
    body: DocumentBody, request: Request, who: Principal = Depends(principal)
) -> DocumentAccepted:
    """Upsert one document from inline text (indexed asynchronously by the ingest pool)."""
    event = IngestRequest(
        tenant=who.tenant,
        doc_id=body.doc_id,
        op="upsert",
        text=body.text,
        content_type=body.content_type,
        title=body.title,
        source=body.source,
        metadata=body.metadata,
    )
    await _produce_ingest(request, event)
    return DocumentAccepted(
        doc_id=body.doc_id, op="upsert", event_id=event.event_id, links=_doc_links(body.doc_id)
    )


@router.delete(
    "/v1/documents/{doc_id:path}", status_code=202, response_model=DocumentAccepted,
    responses=ERRORS,
)  # fmt: skip
async def delete_document(
    doc_id: str, request: Request, who: Principal = Depends(principal)
) -> DocumentAccepted:
    """Delete one document and its chunks (asynchronously, by the ingest pool)."""
    _check_doc_id(doc_id)
    event = IngestRequest(tenant=who.tenant, doc_id=doc_id, op="delete")
    await _produce_ingest(request, event)
    return DocumentAccepted(
        doc_id=doc_id, op="delete", event_id=event.event_id, links=_doc_links(doc_id)
    )


@router.get("/v1/documents/{doc_id:path}", response_model=DocumentOut, responses=ERRORS)
async def get_document(
    doc_id: str, request: Request, who: Principal = Depends(principal)
) -> DocumentOut:
    """A document of the caller's registry."""
    _check_doc_id(doc_id)
    sessions = services(request).sessions
    found = await asyncio.to_thread(_document, sessions, who.tenant, doc_id)
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"no document {doc_id!r} for this tenant")
    return found


@router.post("/v1/ingest/jobs", status_code=202, response_model=JobOut, responses=ERRORS)
async def create_ingest_job(
    body: JobBody, request: Request, who: Principal = Depends(principal)
) -> JSONResponse:
    """Start a bulk ingest job over server-side ``paths``.

    A tenant may only read its own folder of each allowed root (``<root>/<tenant>/...``): the
    roots are shared by every tenant, and one must not index another's files.
    """
    from ingest.sources import SourceRejectedError, discover
    from ingest.tasks import run_job

    svc = services(request)
    settings = svc.settings
    await check_callback(settings, body.callback_url)
    if any("\x00" in p for p in body.paths):
        raise ApiError(422, "INVALID_REQUEST", "paths: NUL character")
    try:
        files = await asyncio.to_thread(
            discover,
            body.paths,
            [root / who.tenant for root in settings.ingest.allowed_roots],
            settings.ingest.extensions,
            settings.ingest.exclude_dirs,
        )
    except SourceRejectedError as exc:
        raise ApiError(422, "INVALID_REQUEST", str(exc)) from exc
    except (OSError, ValueError) as exc:  # unreadable, or not encodable as a file name
        raise ApiError(422, "INVALID_REQUEST", f"paths: {exc}") from exc
    if not files:
        raise ApiError(422, "INVALID_REQUEST", "paths: no file with a known extension")
    job_id = await asyncio.to_thread(
        jobs.create_job, svc.sessions, who.tenant, files, body.callback_url
    )
    try:
        await asyncio.to_thread(run_job.delay, job_id)
    except Exception as exc:
        reason = f"could not submit to the Celery broker: {type(exc).__name__}: {exc}"
        await asyncio.to_thread(jobs.fail_job, svc.sessions, job_id, reason)
        raise ApiError(503, "UNAVAILABLE", reason) from exc
    out = await asyncio.to_thread(_job, svc.sessions, who.tenant, job_id)
    assert out is not None
    return JSONResponse(out.model_dump(mode="json"), status_code=202)


@router.get("/v1/ingest/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
async def get_ingest_job(
    job_id: str, request: Request, who: Principal = Depends(principal)
) -> JobOut:
    """Progress of a bulk job and its failed documents (first 100)."""
    found = await asyncio.to_thread(_job, services(request).sessions, who.tenant, job_id[:64])
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"no ingest job {job_id!r} for this tenant")
    return found


def _check_doc_id(doc_id: str) -> None:
    if not doc_id or len(doc_id) > 512 or any(ord(c) < 0x20 for c in doc_id):
        raise ApiError(422, "INVALID_REQUEST", "doc_id: 1-512 printable characters")


def _doc_links(doc_id: str) -> dict[str, str]:
    return {"self": f"/v1/documents/{doc_id}"}


def _document(sessions: sessionmaker[Session], tenant: str, doc_id: str) -> DocumentOut | None:
    with sessions() as session:
        row = session.scalars(
            select(Document).where(Document.tenant == tenant, Document.doc_id == doc_id)
        ).first()
        if row is None:
            return None
        return DocumentOut(
            doc_id=row.doc_id, status=row.status, version=row.version,
            chunk_count=row.chunk_count, title=row.title, source=row.source, error=row.error,
            updated_at=row.updated_at,
        )  # fmt: skip


def _job(sessions: sessionmaker[Session], tenant: str, job_id: str) -> JobOut | None:
    with sessions() as session:
        job = session.get(IngestJob, job_id)
        if job is None or job.tenant != tenant:
            return None
    state = jobs.progress(sessions, job_id)
    failed = jobs.failures(sessions, job_id)[:MAX_FAILURES_SHOWN]
    return JobOut(
        job_id=job_id, status=state.status, total_documents=state.total,
        done_documents=state.done, failed_documents=state.failed, chunk_count=state.chunks,
        error=state.error, failures=[JobFailure(path=p, error=e) for p, e in failed],
        links={"self": f"/v1/ingest/jobs/{job_id}"},
    )  # fmt: skip
