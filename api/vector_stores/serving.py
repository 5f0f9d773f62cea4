"""What the files and vector-store routes share: the registry and searcher of the process,
rows as OpenAI's objects, and attaching or removing a file's document through ``rag.ingest``
(the path ``POST /v1/documents`` uploads take: same parsers, content-hash skips, deletes)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from fastapi import Request

from api.auth import Principal
from api.deps import services
from api.ingesting import produce_ingest
from api.searching import Searcher, shared_searcher
from api.vector_stores.protocol import (
    FileCounts,
    FileObject,
    LastError,
    VectorStoreFileObject,
    VectorStoreObject,
)
from api.vector_stores.registry import FileState, VectorStoreRegistry, doc_id_of
from ragstream.db.models import as_utc
from ragstream.db.vector_stores import StoredFile, VectorStore, VectorStoreFile
from topics.ingest import IngestRequest


def registry(request: Request) -> VectorStoreRegistry:
    """The process's registry over its SQL sessions."""
    return VectorStoreRegistry(services(request).sessions)


def searcher(request: Request) -> Searcher:
    """The process's one :class:`~api.searching.Searcher` (shared with every search surface)."""
    return shared_searcher(services(request))


def _seconds(row: StoredFile | VectorStore | VectorStoreFile) -> int:
    return int(as_utc(row.created_at).timestamp())


def file_object(row: StoredFile) -> FileObject:
    """A ``file``."""
    return FileObject(
        id=row.id, bytes=row.bytes, created_at=_seconds(row), filename=row.filename,
        purpose=row.purpose,
    )  # fmt: skip


def store_file_object(row: VectorStoreFile, state: FileState) -> VectorStoreFileObject:
    """A ``vector_store.file`` in ``state``."""
    error = LastError(code="server_error", message=state.error) if state.error else None
    return VectorStoreFileObject(
        id=row.file_id,
        created_at=_seconds(row),
        vector_store_id=row.store_id,
        status=state.status,
        usage_bytes=state.usage_bytes,
        last_error=error,
        attributes=dict(row.attributes or {}),
    )


def store_object(row: VectorStore, states: Iterable[FileState]) -> VectorStoreObject:
    """A ``vector_store`` whose files are in ``states``."""
    counts = FileCounts()
    usage = 0
    for s in states:
        setattr(counts, s.status, getattr(counts, s.status) + 1)
        counts.total += 1
        usage += s.usage_bytes
    return VectorStoreObject(
        id=row.id,
        created_at=_seconds(row),
        name=row.name,
        usage_bytes=usage,
        file_counts=counts,
        status="in_progress" if counts.in_progress else "completed",
        metadata=dict(row.metadata_ or {}),
    )


async def describe_store(request: Request, tenant: str, row: VectorStore) -> VectorStoreObject:
    """``row`` with its files' statuses counted."""
    reg = registry(request)
    files = await asyncio.to_thread(reg.all_store_files, tenant, row.id)
    states = await asyncio.to_thread(reg.states, tenant, files)
    return store_object(row, states.values())


async def attach(
    request: Request,
    who: Principal,
    store_id: str,
    file: StoredFile,
    attributes: dict[str, str | bool | int | float],
) -> VectorStoreFileObject:
    """Ingest ``file`` as the store's document ``<store id>/<file id>`` (its attributes the
    document's metadata, its name the source) and record the attachment; ``in_progress``
    until the ingest pool applies the event.

    Raises:
        ApiError: as :func:`api.ingesting.produce_ingest` (413, 503).
    """
    event = IngestRequest(
        tenant=who.tenant,
        doc_id=doc_id_of(store_id, file.id),
        op="upsert",
        source_path=file.path,
        content_type=file.content_type,
        source=file.filename,
        metadata=dict(attributes),
    )
    await produce_ingest(request, event)
    row = await asyncio.to_thread(
        registry(request).attach, who.tenant, store_id, file.id, event.event_id, attributes
    )
    return store_file_object(row, FileState("in_progress", None, 0))


async def remove_documents(request: Request, tenant: str, doc_ids: Iterable[str]) -> None:
    """Delete each document (a ``rag.ingest`` delete event each, in order)."""
    for doc_id in doc_ids:
        await produce_ingest(request, IngestRequest(tenant=tenant, doc_id=doc_id, op="delete"))
