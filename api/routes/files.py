"""OpenAI's Files API for search: ``POST /v1/files`` (a ``multipart/form-data`` upload with
``purpose`` ``assistants`` or ``user_data``), ``GET /v1/files`` (a ``list``: ``purpose``,
``limit`` (at most 100 served), ``order``, ``after``), ``GET /v1/files/{file_id}`` and
``DELETE /v1/files/{file_id}``.

An uploaded file is sniffed and parsed once, as ``POST /v1/documents`` uploads are (a format no
parser reads is a 415, a file the parser refuses a 400 with its reason), and kept under the
tenant's uploads; it is searched once attached to a vector store
(:mod:`api.routes.vector_stores`). Deleting a file detaches it from every store: their
documents are deleted. Errors have OpenAI's shape (:mod:`api.errors`). See
docs/vector-stores.md.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request

from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, OpenAIErrorEnvelope
from api.uploads import MULTIPART, check_document, file_name, media_type, read_form
from api.vector_stores.protocol import ID_MAX, Deleted, FileList, FileObject, FileUpload, Purpose
from api.vector_stores.registry import Page
from api.vector_stores.serving import file_object, registry, remove_documents

router = APIRouter(tags=["vector stores"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": OpenAIErrorEnvelope} for s in (400, 401, 404, 413, 415, 429, 503)
}
FILE_ID = Path(min_length=1, max_length=ID_MAX, description="A `file-...` id.")
_UPLOAD_SCHEMA = {
    "requestBody": {
        "required": True,
        "content": {
            MULTIPART: {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "The file."},
                        **FileUpload.model_json_schema()["properties"],
                    },
                }
            }
        },
    }
}


@router.post("/v1/files", response_model=FileObject, responses=ERRORS, openapi_extra=_UPLOAD_SCHEMA)
async def create_file(request: Request, who: Principal = Depends(principal)) -> FileObject:
    """Upload a file to attach to vector stores (any format ``POST /v1/documents`` reads)."""
    if media_type(request) != MULTIPART:
        raise ApiError(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            "send the file as multipart/form-data ('file', 'purpose')",
        )
    settings = services(request).settings
    form, upload, data = await read_form(request, FileUpload, "file")
    name = file_name(upload) or "file"
    kind, checked = await check_document(settings, who.tenant, name, data, upload)
    from ingest.uploads import store_document

    path = await asyncio.to_thread(
        store_document, settings.ingest, who.tenant, data, kind, checked.parsed
    )
    row = await asyncio.to_thread(
        registry(request).create_file,
        who.tenant,
        filename=name,
        bytes=len(data),
        purpose=form.purpose,
        content_type=kind,
        path=str(path),
    )
    return file_object(row)


@router.get("/v1/files", response_model=FileList, responses=ERRORS)
async def list_files(
    request: Request,
    *,
    who: Principal = Depends(principal),
    purpose: Purpose | None = Query(default=None, description="Only files of this purpose."),
    limit: int = Query(default=20, ge=1, le=10_000, description="Files per page."),
    order: Literal["asc", "desc"] = Query(default="desc", description="By upload time."),
    after: str | None = Query(default=None, max_length=ID_MAX, description="A `last_id`."),
) -> FileList:
    """The tenant's files, a page at a time."""
    page: Page = await asyncio.to_thread(
        partial(
            registry(request).files, who.tenant, purpose=purpose, limit=min(limit, 100),
            order=order, after=after, before=None,
        )
    )  # fmt: skip
    data = [file_object(r) for r in page.rows]
    return FileList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=page.has_more,
    )


@router.get("/v1/files/{file_id}", response_model=FileObject, responses=ERRORS)
async def retrieve_file(
    request: Request, file_id: str = FILE_ID, who: Principal = Depends(principal)
) -> FileObject:
    """A file of the caller's tenant."""
    row = await asyncio.to_thread(registry(request).file, who.tenant, file_id)
    if row is None:
        raise ApiError(404, "not_found", f"no file {file_id!r}")
    return file_object(row)


@router.delete("/v1/files/{file_id}", response_model=Deleted, responses=ERRORS)
async def delete_file(
    request: Request, file_id: str = FILE_ID, who: Principal = Depends(principal)
) -> Deleted:
    """Delete a file: it leaves every vector store (their documents are deleted)."""
    docs = await asyncio.to_thread(registry(request).delete_file, who.tenant, file_id)
    if docs is None:
        raise ApiError(404, "not_found", f"no file {file_id!r}")
    await remove_documents(request, who.tenant, docs)
    return Deleted(id=file_id, object="file")
