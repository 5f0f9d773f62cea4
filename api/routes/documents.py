"""Documents through the stream path, and bulk ingest jobs through Celery.

- ``POST /v1/documents``: one upsert event on ``rag.ingest`` (keyed by ``doc_id``, so updates of
  a document apply in order); 202 once Kafka acknowledged it. The ingest pool indexes it. The
  body is inline text as JSON, or one file as ``multipart/form-data`` (any format the parsers
  read, sniffed from its bytes and name, checked by parsing it once, kept under the upload
  root: :mod:`ingest.uploads`).
- ``GET /v1/documents``: the tenant's documents, newest first, a cursor-paginated page
  (filters: ``status``, ``source``; :mod:`api.pages`).
- ``GET /v1/documents/{doc_id}``: the registry row (status, version, chunks); for a JSON/JSONL
  records file (whose records are rows ``<doc_id>#<record id>``), the summary of its records.
- ``DELETE /v1/documents/{doc_id}``: one delete event; 202.
- ``POST /v1/ingest/jobs``: a Celery bulk job over server-side paths under the tenant's folder of
  each allowed root (``<root>/<tenant>/``), or over an uploaded zip/tar(.gz) archive, safely
  extracted into the job's own folder (:mod:`ingest.archives`).
- ``GET /v1/ingest/jobs``: the tenant's jobs, newest first, a cursor-paginated page.
- ``GET /v1/ingest/jobs/{job_id}``: progress and per-document failures.
- ``POST /v1/ingest/jobs/{job_id}/retry``: set the job's failed documents back to pending and
  queue the job again (202 with its progress; 409 when none failed).

Every route is scoped to the API key's tenant.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import shutil
import uuid
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.asking import check_callback
from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, ErrorEnvelope
from api.ingesting import DOC_ID, check_doc_id, doc_links, produce_ingest
from api.models import (
    DocumentAccepted,
    DocumentBody,
    DocumentOut,
    JobBody,
    JobFailure,
    JobOut,
    RejectedEvent,
)
from api.pages import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    DocumentPage,
    JobPage,
    JobSummary,
    decode_cursor,
    encode_cursor,
)
from api.uploads import (
    MULTIPART,
    DocumentForm,
    JobForm,
    check_document,
    file_name,
    json_body,
    media_type,
    read_form,
    request_body,
)
from ingest import jobs
from ingest.registry import DocumentRegistry
from ingest.sources import SourceFile
from ragstream.db.acl import from_column
from ragstream.db.models import FINAL_JOB_STATUSES, Document, IngestJob, as_utc
from ragstream.settings import Settings
from topics.acl import may_read, normalise_readers
from topics.ingest import IngestRequest

router = APIRouter(tags=["documents"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 404, 413, 415, 422, 429, 503)
}
MAX_FAILURES_SHOWN = 100


@router.post(
    "/v1/documents", status_code=202, response_model=DocumentAccepted, responses=ERRORS,
    openapi_extra=request_body(DocumentBody, DocumentForm, "file"),
)  # fmt: skip
async def upsert_document(
    request: Request, who: Principal = Depends(principal)
) -> DocumentAccepted:
    """Upsert one document (indexed asynchronously by the ingest pool).

    As JSON: inline ``text``. As ``multipart/form-data``: a ``file`` (text, Markdown, HTML,
    PDF, DOCX, JSON/JSONL records; the format is sniffed from its bytes and name, and the file
    is parsed once here so a corrupt one is refused now, not later); ``doc_id`` defaults to the
    file's name. Both answer 202 with the document id once the event is on Kafka.
    """
    if media_type(request) == MULTIPART:
        event = await _uploaded_document(request, who)
    else:
        body = await json_body(request, DocumentBody, upload_field="file")
        event = IngestRequest(
            tenant=who.tenant,
            doc_id=body.doc_id,
            op="upsert",
            text=body.text,
            content_type=body.content_type,
            title=body.title,
            source=body.source,
            metadata=body.metadata,
            principals=normalise_readers(body.readers),
        )
    await produce_ingest(request, event)
    return DocumentAccepted(
        doc_id=event.doc_id, op="upsert", event_id=event.event_id, links=doc_links(event.doc_id)
    )


async def _uploaded_document(request: Request, who: Principal) -> IngestRequest:
    from ingest.uploads import store_document

    settings = services(request).settings
    form, upload, data = await read_form(request, DocumentForm, "file")
    name = file_name(upload)
    doc_id = form.doc_id or name
    if not doc_id:
        raise ApiError(422, "INVALID_REQUEST", "doc_id: required when the file has no name")
    check_doc_id(doc_id)
    kind, checked = await check_document(settings, who.tenant, doc_id, data, upload)
    path = await asyncio.to_thread(
        store_document, settings.ingest, who.tenant, data, kind, checked.parsed
    )
    return IngestRequest(
        tenant=who.tenant,
        doc_id=doc_id,
        op="upsert",
        source_path=str(path),
        content_type=kind,
        title=form.title,
        source=form.source or name,
        metadata=form.metadata_dict(),
        principals=form.readers_tuple(),
    )


@router.delete(
    "/v1/documents/{doc_id:path}", status_code=202, response_model=DocumentAccepted,
    responses=ERRORS,
)  # fmt: skip
async def delete_document(
    request: Request, doc_id: str = DOC_ID, who: Principal = Depends(principal)
) -> DocumentAccepted:
    """Delete one document and its chunks (asynchronously, by the ingest pool)."""
    check_doc_id(doc_id)
    event = IngestRequest(tenant=who.tenant, doc_id=doc_id, op="delete")
    await produce_ingest(request, event)
    return DocumentAccepted(
        doc_id=doc_id, op="delete", event_id=event.event_id, links=doc_links(doc_id)
    )


@router.get("/v1/documents", response_model=DocumentPage, responses=ERRORS)
async def list_documents(
    request: Request,
    *,
    who: Principal = Depends(principal),
    status: str | None = Query(
        default=None, pattern="^(indexed|deleted|failed)$", description="Only this status."
    ),
    source: str | None = Query(
        default=None, max_length=2048, pattern=r"^[^\x00]*$", description="Only this source."
    ),
    limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(default=None, max_length=512, description="A `next_cursor`."),
) -> DocumentPage:
    """The caller's documents it may read (docs/permissions.md), newest first, one page at a
    time."""
    before = decode_cursor(cursor, (int,))
    registry = DocumentRegistry(services(request).sessions)
    rows = await asyncio.to_thread(
        partial(
            registry.page, who.tenant, limit=limit + 1, status=status, source=source,
            before_id=None if before is None else before[0], principals=who.principals,
        )
    )  # fmt: skip
    items = [_document_out(row) for row in rows[:limit]]
    more = len(rows) > limit
    return DocumentPage(
        items=items, next_cursor=encode_cursor([rows[limit - 1].id]) if more else None
    )


#: ``GET /v1/documents/{doc_id}``'s 404, a deleted document's included (see :func:`get_document`).
GONE = {
    "model": ErrorEnvelope,
    "description": "No such document the caller may read, or a deleted one: its tombstone "
    "(version, sequence, the delete's event id) is in `details` and listed by "
    "`GET /v1/documents?status=deleted`.",
}


@router.get(
    "/v1/documents/{doc_id:path}", response_model=DocumentOut, responses={**ERRORS, 404: GONE}
)
async def get_document(
    request: Request, doc_id: str = DOC_ID, who: Principal = Depends(principal)
) -> DocumentOut:
    """A document of the caller's registry.

    A deleted document is a 404 (``NOT_FOUND``), as after any successful ``DELETE``: the
    registry keeps its row as a tombstone (its version guards against late events, and a
    client learns from it that its delete applied), given in the error's ``details`` as
    ``{status: "deleted", version, sequence, last_event_id, updated_at, last_rejected}`` and
    listed by ``GET /v1/documents?status=deleted``. Until the ingest pool applies a delete,
    the document answers as before.

    ``last_rejected`` is the last ``rag.ingest`` event of the document the write path did not
    apply (``duplicate`` or ``refused``), kept when a later change applies.

    A JSON/JSONL records file answers with its records summed up: ``indexed`` while any
    record is served (``failed`` when none is), the chunks of the served ones, and in
    ``error`` how many records failed and the first one's id and reason (e.g. an id holding
    a lone surrogate), in ``warnings`` the first served record's warnings (e.g. lone
    surrogates in its text replaced by U+FFFD) and how many more records have any; each
    record is ``GET /v1/documents/<doc_id>#<record id>``.
    """
    check_doc_id(doc_id)
    sessions = services(request).sessions
    found = await asyncio.to_thread(_document, sessions, who.tenant, doc_id, who.principals)
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"no document {doc_id!r} for this tenant")
    if found.status == "deleted":
        tombstone = found.model_dump(
            mode="json",
            include={
                "doc_id",
                "status",
                "version",
                "sequence",
                "last_event_id",
                "updated_at",
                "last_rejected",
            },
        )
        raise ApiError(
            404,
            "NOT_FOUND",
            f"document {doc_id!r} was deleted (version {found.version}); "
            "GET /v1/documents?status=deleted lists deleted documents",
            details=[tombstone],
        )
    return found


@router.post(
    "/v1/ingest/jobs", status_code=202, response_model=JobOut, responses=ERRORS,
    openapi_extra=request_body(JobBody, JobForm, "archive"),
)  # fmt: skip
async def create_ingest_job(request: Request, who: Principal = Depends(principal)) -> JSONResponse:
    """Start a bulk ingest job over server-side ``paths`` (JSON) or an uploaded ``archive``
    (``multipart/form-data``: zip, tar or tar.gz).

    A tenant may only read its own folder of each allowed root (``<root>/<tenant>/...``): the
    roots are shared by every tenant, and one must not index another's files. An archive is
    extracted into the job's own folder there (no path traversal, links or devices; member
    count and unpacked size limited); a refused archive leaves nothing behind.
    """
    svc = services(request)
    settings = svc.settings
    job_id = str(uuid.uuid4())
    if media_type(request) == MULTIPART:
        form, upload, data = await read_form(request, JobForm, "archive")
        callback_url, readers = form.callback_url, form.readers_tuple()
        await check_callback(settings, callback_url)
        from ingest.uploads import archive_name

        name = archive_name(upload.filename)
        files, rejected = await _archive_files(settings, who.tenant, job_id, data, name)
    else:
        body = await json_body(request, JobBody, upload_field="archive")
        callback_url, readers = body.callback_url, normalise_readers(body.readers)
        await check_callback(settings, callback_url)
        files, rejected = await _path_files(settings, who.tenant, body.paths), []
    job_id = await asyncio.to_thread(
        partial(
            jobs.create_job, svc.sessions, who.tenant, files, callback_url, job_id,
            rejected=rejected, readers=readers,
        )
    )  # fmt: skip
    return await _submit(request, who, job_id)


async def _path_files(settings: Settings, tenant: str, paths: list[str]) -> list[SourceFile]:
    from ingest.sources import SourceRejectedError, scan

    if any("\x00" in p for p in paths):
        raise ApiError(422, "INVALID_REQUEST", "paths: NUL character")
    try:
        found = await asyncio.to_thread(
            scan,
            paths,
            [root / tenant for root in settings.ingest.allowed_roots],
            settings.ingest.extensions,
            settings.ingest.exclude_dirs,
        )
    except SourceRejectedError as exc:
        raise ApiError(422, "INVALID_REQUEST", str(exc)) from exc
    except (OSError, ValueError) as exc:  # unreadable, or not encodable as a file name
        raise ApiError(422, "INVALID_REQUEST", f"paths: {exc}") from exc
    if not found.files:
        raise ApiError(
            422, "INVALID_REQUEST", f"paths: nothing to ingest: {found.nothing_reason()}"
        )
    return found.files


async def _archive_files(
    settings: Settings, tenant: str, job_id: str, data: bytes, name: str
) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """The archive's files, and ``(member, reason)`` of each member that cannot be read
    (a name that is not UTF-8): it fails alone in the job while the others are ingested.

    A member's document id (and ``source``) is ``<name>/<its path in the archive>``
    (:func:`archive_doc_id`), never the server's folder: the same archive uploaded again
    updates the same documents."""
    from ingest.archives import ArchiveRejectedError
    from ingest.sources import scan
    from ingest.uploads import archive_doc_id, extract_job_archive

    try:
        folder = await asyncio.to_thread(extract_job_archive, settings.ingest, tenant, job_id, data)
    except ArchiveRejectedError as exc:
        raise ApiError(422, "INVALID_REQUEST", f"archive: {exc}") from exc
    found = await asyncio.to_thread(
        scan,
        [folder],
        [root / tenant for root in settings.ingest.allowed_roots],
        settings.ingest.extensions,
        settings.ingest.exclude_dirs,
    )
    if not found.files:
        await asyncio.to_thread(shutil.rmtree, folder, True)
        raise ApiError(
            422, "INVALID_REQUEST", f"archive: nothing to ingest: {found.nothing_reason()}"
        )
    files = [
        dataclasses.replace(f, doc_id=archive_doc_id(name, folder, f.path)) for f in found.files
    ]
    rejected = [
        (archive_doc_id(name, folder, s.path), s.detail.replace(str(folder), name))
        for s in found.skipped
        if s.cause == "unreadable"
    ]
    return files, rejected


async def _submit(request: Request, who: Principal, job_id: str) -> JSONResponse:
    """Queue the created job on Celery and answer 202 with its progress."""
    from ingest.tasks import run_job

    svc = services(request)
    try:
        await asyncio.to_thread(run_job.delay, job_id)
    except Exception as exc:
        reason = f"could not submit to the Celery broker: {type(exc).__name__}: {exc}"
        await asyncio.to_thread(jobs.fail_job, svc.sessions, job_id, reason)
        raise ApiError(503, "UNAVAILABLE", reason) from exc
    out = await asyncio.to_thread(_job, svc.sessions, who.tenant, job_id)
    assert out is not None
    return JSONResponse(out.model_dump(mode="json"), status_code=202)


@router.get("/v1/ingest/jobs", response_model=JobPage, responses=ERRORS)
async def list_ingest_jobs(
    request: Request,
    who: Principal = Depends(principal),
    limit: int = Query(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT),
    cursor: str | None = Query(default=None, max_length=512, description="A `next_cursor`."),
) -> JobPage:
    """The caller's bulk ingest jobs with their progress, newest first, one page at a time."""
    before = decode_cursor(cursor, (dt.datetime, str))
    found = await asyncio.to_thread(
        partial(
            jobs.page_jobs, services(request).sessions, who.tenant, limit=limit + 1,
            before=before,
        )
    )  # fmt: skip
    items = [_job_summary(j) for j in found[:limit]]
    last = found[limit - 1] if len(found) > limit else None
    return JobPage(
        items=items,
        next_cursor=None if last is None else encode_cursor([last.created_at, last.job_id]),
    )


@router.get("/v1/ingest/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
async def get_ingest_job(
    job_id: str, request: Request, who: Principal = Depends(principal)
) -> JobOut:
    """Progress of a bulk job and its failed documents (first 100)."""
    found = await asyncio.to_thread(_job, services(request).sessions, who.tenant, job_id[:64])
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"no ingest job {job_id!r} for this tenant")
    return found


def _job_summary(j: jobs.JobProgress) -> JobSummary:
    return JobSummary(
        job_id=j.job_id, status=j.status, total_documents=j.total, done_documents=j.done,
        failed_documents=j.failed, chunk_count=j.chunks, error=j.error,
        created_at=as_utc(j.created_at),
        started_at=as_utc(j.started_at) if j.started_at else None,
        finished_at=as_utc(j.finished_at) if j.finished_at else None,
        links={"self": f"/v1/ingest/jobs/{j.job_id}"},
    )  # fmt: skip


@router.post(
    "/v1/ingest/jobs/{job_id}/retry", status_code=202, response_model=JobOut,
    responses={**ERRORS, 409: {"model": ErrorEnvelope}},
)  # fmt: skip
async def retry_ingest_job(
    job_id: str, request: Request, who: Principal = Depends(principal)
) -> JSONResponse:
    """Retry the failed documents of a finished job (the others keep their status)."""
    sessions = services(request).sessions
    found = await asyncio.to_thread(_job, sessions, who.tenant, job_id[:64])
    if found is None:
        raise ApiError(404, "NOT_FOUND", f"no ingest job {job_id!r} for this tenant")
    if found.status not in FINAL_JOB_STATUSES or found.failed_documents == 0:
        raise ApiError(
            409, "CONFLICT", f"job {job_id!r} is {found.status} with no failed documents to retry"
        )
    await asyncio.to_thread(jobs.reset_failed, sessions, found.job_id)
    return await _submit(request, who, found.job_id)


def _document(
    sessions: sessionmaker[Session],
    tenant: str,
    doc_id: str,
    principals: tuple[str, ...] | None,
) -> DocumentOut | None:
    """The document, or ``None`` when there is none the caller may read (a document outside
    its principals is answered as missing: its existence is not told)."""
    with sessions() as session:
        row = session.scalars(
            select(Document).where(Document.tenant == tenant, Document.doc_id == doc_id)
        ).first()
    if row is None:
        return _records_file(sessions, tenant, doc_id, principals)
    if not may_read(principals, from_column(row.readers)):
        return None
    return _document_out(row)


def _document_out(row: Document) -> DocumentOut:
    return DocumentOut(
        doc_id=row.doc_id, status=row.status, version=row.version, chunk_count=row.chunk_count,
        title=row.title, source=row.source, error=row.error,
        warnings=[str(w) for w in row.warnings or []],
        updated_at=as_utc(row.updated_at) if row.updated_at else None,
        readers=None if row.readers is None else list(from_column(row.readers) or ()),
        sequence=row.sequence or 0, last_event_id=row.last_event_id,
        last_event_at=as_utc(row.last_event_at) if row.last_event_at else None,
        last_rejected=_last_rejected(row),
    )  # fmt: skip


def _last_rejected(row: Document) -> RejectedEvent | None:
    """The row's last ``rag.ingest`` event not applied, or ``None`` (written by
    :meth:`ingest.registry.DocumentRegistry.record_rejections`)."""
    if row.last_rejected_event_id is None or row.last_rejected_at is None:
        return None
    return RejectedEvent(
        event_id=row.last_rejected_event_id,
        status=row.last_rejected_status or "rejected",
        reason=row.last_rejected_reason or "",
        at=as_utc(row.last_rejected_at),
    )


def _records_file(
    sessions: sessionmaker[Session],
    tenant: str,
    doc_id: str,
    principals: tuple[str, ...] | None,
) -> DocumentOut | None:
    """The summary of records file ``doc_id``'s live records the caller may read, or ``None``
    when it has none."""
    from ingest.registry import DocumentRegistry

    records = sorted(
        (
            r
            for r in DocumentRegistry(sessions).children(tenant, doc_id)
            if may_read(principals, from_column(r.readers))
        ),
        key=lambda r: r.doc_id,
    )
    if not records:
        return None
    served = [r for r in records if r.status == "indexed"]
    failed = [r for r in records if r.status == "failed"]
    error = None
    if failed:
        first = failed[0]
        error = (
            f"{len(failed)} of {len(records)} records failed; first: "
            f"{first.doc_id}: {first.error or 'failed'}"
        )[:4000]
    warned = [r for r in served if r.warnings]
    warnings = [f"{r.doc_id}: {w}" for r in warned[:1] for w in r.warnings or []]
    if len(warned) > 1:
        warnings.append(f"{len(warned) - 1} more record(s) with warnings: GET each record")
    return DocumentOut(
        doc_id=doc_id,
        status="indexed" if served else "failed",
        version=max(r.version for r in records),
        chunk_count=sum(r.chunk_count for r in served),
        source=records[0].source,
        error=error,
        warnings=warnings,
        updated_at=as_utc(max(r.updated_at for r in records)),
    )


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
