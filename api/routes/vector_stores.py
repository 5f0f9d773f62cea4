"""OpenAI's vector stores over the tenant's documents (docs/vector-stores.md).

- ``POST /v1/vector_stores`` (``name``, ``metadata``, ``file_ids`` attached at once),
  ``GET /v1/vector_stores`` (a ``list``: ``limit``, ``order``, ``after``, ``before``),
  ``GET``/``POST``/``DELETE /v1/vector_stores/{id}`` (read, rename or re-describe, delete: a
  deleted store's documents are deleted);
- ``POST /v1/vector_stores/{id}/files`` attaches an uploaded file: it is ingested as the
  document ``<store id>/<file id>`` through ``rag.ingest`` (the path of ``POST /v1/documents``
  uploads), its ``attributes`` the document's metadata; ``in_progress`` until the ingest pool
  applied it, then ``completed`` or ``failed`` with ``last_error``;
  ``GET .../files/{file_id}``, ``GET .../files``, ``POST .../files/{file_id}`` (new attributes:
  the document is ingested again), ``DELETE .../files/{file_id}`` (the document is deleted, and
  the file leaves the store's search results at once);
- ``POST /v1/vector_stores/{id}/search`` (:mod:`api.vector_stores.search`).

A store is a tenant's: another tenant's id is a 404. Errors have OpenAI's shape.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request

from api.auth import Principal
from api.deps import principal
from api.errors import ApiError, OpenAIErrorEnvelope
from api.vector_stores.protocol import (
    ID_MAX,
    Deleted,
    SearchBody,
    SearchPage,
    VectorStoreCreate,
    VectorStoreFileCreate,
    VectorStoreFileList,
    VectorStoreFileObject,
    VectorStoreFileUpdate,
    VectorStoreList,
    VectorStoreObject,
    VectorStoreUpdate,
)
from api.vector_stores.registry import FileState, Page
from api.vector_stores.search import search_store
from api.vector_stores.serving import (
    attach,
    describe_store,
    registry,
    remove_documents,
    searcher,
    store_file_object,
)
from ragstream.db.vector_stores import VectorStore

router = APIRouter(tags=["vector stores"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": OpenAIErrorEnvelope} for s in (400, 401, 404, 413, 415, 429, 503)
}
STORE_ID = Path(min_length=1, max_length=ID_MAX, description="A `vs_...` id.")
FILE_ID = Path(min_length=1, max_length=ID_MAX, description="A `file-...` id.")
LIMIT = Query(default=20, ge=1, le=100, description="Objects per page.")
ORDER = Query(default="desc", description="By creation time.")
AFTER = Query(default=None, max_length=ID_MAX, description="The `last_id` of the page before.")
BEFORE = Query(default=None, max_length=ID_MAX, description="The `first_id` of the page after.")


async def _store(request: Request, who: Principal, store_id: str) -> VectorStore:
    row = await asyncio.to_thread(registry(request).store, who.tenant, store_id)
    if row is None:
        raise ApiError(404, "not_found", f"no vector store {store_id!r}")
    return row


@router.post(
    "/v1/vector_stores", response_model=VectorStoreObject, responses=ERRORS,
)  # fmt: skip
async def create_vector_store(
    body: VectorStoreCreate, request: Request, who: Principal = Depends(principal)
) -> VectorStoreObject:
    """Create a store, attaching ``file_ids`` (uploaded files) at once."""
    reg = registry(request)
    files = []
    for file_id in dict.fromkeys(body.file_ids):
        found = await asyncio.to_thread(reg.file, who.tenant, file_id)
        if found is None:
            raise ApiError(404, "not_found", f"no file {file_id!r}")
        files.append(found)
    row = await asyncio.to_thread(
        reg.create_store, who.tenant, body.name or "", body.metadata or {}
    )
    for f in files:
        await attach(request, who, row.id, f, {})
    return await describe_store(request, who.tenant, row)


@router.get("/v1/vector_stores", response_model=VectorStoreList, responses=ERRORS)
async def list_vector_stores(
    request: Request,
    *,
    who: Principal = Depends(principal),
    limit: int = LIMIT,
    order: Literal["asc", "desc"] = ORDER,
    after: str | None = AFTER,
    before: str | None = BEFORE,
) -> VectorStoreList:
    """The tenant's stores, a page at a time."""
    page: Page = await asyncio.to_thread(
        registry(request).stores, who.tenant, limit=limit, order=order, after=after,
        before=before,
    )  # fmt: skip
    data = [await describe_store(request, who.tenant, row) for row in page.rows]
    return VectorStoreList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=page.has_more,
    )


@router.get(
    "/v1/vector_stores/{vector_store_id}", response_model=VectorStoreObject, responses=ERRORS
)
async def retrieve_vector_store(
    request: Request, vector_store_id: str = STORE_ID, who: Principal = Depends(principal)
) -> VectorStoreObject:
    """A store with its files' statuses counted."""
    row = await _store(request, who, vector_store_id)
    return await describe_store(request, who.tenant, row)


@router.post(
    "/v1/vector_stores/{vector_store_id}", response_model=VectorStoreObject, responses=ERRORS
)
async def update_vector_store(
    body: VectorStoreUpdate,
    request: Request,
    vector_store_id: str = STORE_ID,
    who: Principal = Depends(principal),
) -> VectorStoreObject:
    """Rename a store or replace its metadata."""
    row = await asyncio.to_thread(
        registry(request).update_store, who.tenant, vector_store_id, body.name, body.metadata
    )
    if row is None:
        raise ApiError(404, "not_found", f"no vector store {vector_store_id!r}")
    return await describe_store(request, who.tenant, row)


@router.delete("/v1/vector_stores/{vector_store_id}", response_model=Deleted, responses=ERRORS)
async def delete_vector_store(
    request: Request, vector_store_id: str = STORE_ID, who: Principal = Depends(principal)
) -> Deleted:
    """Delete a store: its files' documents are deleted (the files stay)."""
    docs = await asyncio.to_thread(registry(request).delete_store, who.tenant, vector_store_id)
    if docs is None:
        raise ApiError(404, "not_found", f"no vector store {vector_store_id!r}")
    await remove_documents(request, who.tenant, docs)
    return Deleted(id=vector_store_id, object="vector_store.deleted")


@router.post(
    "/v1/vector_stores/{vector_store_id}/files", response_model=VectorStoreFileObject,
    responses=ERRORS,
)  # fmt: skip
async def create_vector_store_file(
    body: VectorStoreFileCreate,
    request: Request,
    vector_store_id: str = STORE_ID,
    who: Principal = Depends(principal),
) -> VectorStoreFileObject:
    """Attach an uploaded file (ingested through ``rag.ingest``; ``in_progress`` until then)."""
    await _store(request, who, vector_store_id)
    found = await asyncio.to_thread(registry(request).file, who.tenant, body.file_id)
    if found is None:
        raise ApiError(404, "not_found", f"no file {body.file_id!r}")
    return await attach(request, who, vector_store_id, found, dict(body.attributes or {}))


@router.get(
    "/v1/vector_stores/{vector_store_id}/files", response_model=VectorStoreFileList,
    responses=ERRORS,
)  # fmt: skip
async def list_vector_store_files(
    request: Request,
    *,
    vector_store_id: str = STORE_ID,
    who: Principal = Depends(principal),
    limit: int = LIMIT,
    order: Literal["asc", "desc"] = ORDER,
    after: str | None = AFTER,
    before: str | None = BEFORE,
    status: Literal["in_progress", "completed", "failed", "cancelled"] | None = Query(
        default=None, alias="filter", description="Only files in this status (on this page)."
    ),
) -> VectorStoreFileList:
    """The store's files, a page at a time, with their statuses."""
    await _store(request, who, vector_store_id)
    reg = registry(request)
    page: Page = await asyncio.to_thread(
        reg.store_files, who.tenant, vector_store_id, limit=limit, order=order, after=after,
        before=before,
    )  # fmt: skip
    states = await asyncio.to_thread(reg.states, who.tenant, page.rows)
    data = [store_file_object(r, states[r.file_id]) for r in page.rows]
    if status is not None:
        data = [d for d in data if d.status == status]
    return VectorStoreFileList(
        data=data,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
        has_more=page.has_more,
    )


@router.get(
    "/v1/vector_stores/{vector_store_id}/files/{file_id}", response_model=VectorStoreFileObject,
    responses=ERRORS,
)  # fmt: skip
async def retrieve_vector_store_file(
    request: Request,
    vector_store_id: str = STORE_ID,
    file_id: str = FILE_ID,
    who: Principal = Depends(principal),
) -> VectorStoreFileObject:
    """A file of the store with its status (``failed``: ``last_error`` says why)."""
    await _store(request, who, vector_store_id)
    reg = registry(request)
    row = await asyncio.to_thread(reg.attachment, who.tenant, vector_store_id, file_id)
    if row is None:
        raise ApiError(404, "not_found", f"no file {file_id!r} in vector store {vector_store_id!r}")
    states: dict[str, FileState] = await asyncio.to_thread(reg.states, who.tenant, [row])
    return store_file_object(row, states[file_id])


@router.post(
    "/v1/vector_stores/{vector_store_id}/files/{file_id}", response_model=VectorStoreFileObject,
    responses=ERRORS,
)  # fmt: skip
async def update_vector_store_file(
    body: VectorStoreFileUpdate,
    request: Request,
    vector_store_id: str = STORE_ID,
    file_id: str = FILE_ID,
    who: Principal = Depends(principal),
) -> VectorStoreFileObject:
    """Replace an attached file's attributes: its document is ingested again with them
    (``in_progress`` until the ingest pool applied it)."""
    await _store(request, who, vector_store_id)
    reg = registry(request)
    row = await asyncio.to_thread(reg.attachment, who.tenant, vector_store_id, file_id)
    found = await asyncio.to_thread(reg.file, who.tenant, file_id)
    if row is None or found is None:
        raise ApiError(404, "not_found", f"no file {file_id!r} in vector store {vector_store_id!r}")
    return await attach(request, who, vector_store_id, found, dict(body.attributes or {}))


@router.delete(
    "/v1/vector_stores/{vector_store_id}/files/{file_id}", response_model=Deleted,
    responses=ERRORS,
)  # fmt: skip
async def delete_vector_store_file(
    request: Request,
    vector_store_id: str = STORE_ID,
    file_id: str = FILE_ID,
    who: Principal = Depends(principal),
) -> Deleted:
    """Detach a file: its document is deleted and it leaves the store's results at once."""
    await _store(request, who, vector_store_id)
    doc_id = await asyncio.to_thread(registry(request).detach, who.tenant, vector_store_id, file_id)
    if doc_id is None:
        raise ApiError(404, "not_found", f"no file {file_id!r} in vector store {vector_store_id!r}")
    await remove_documents(request, who.tenant, [doc_id])
    return Deleted(id=file_id, object="vector_store.file.deleted")


@router.post(
    "/v1/vector_stores/{vector_store_id}/search", response_model=SearchPage, responses=ERRORS,
)  # fmt: skip
async def search_vector_store(
    body: SearchBody,
    request: Request,
    vector_store_id: str = STORE_ID,
    who: Principal = Depends(principal),
) -> SearchPage:
    """The store's passages for ``query``, best first, a page at a time."""
    await _store(request, who, vector_store_id)
    return await search_store(searcher(request), registry(request), who, vector_store_id, body)
