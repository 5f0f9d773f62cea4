"""The SQL side of the vector-store surface: files, stores, their files, and an attached
file's status read from the document registry.

A file attached to a store is the document ``<store id>/<file id>`` of the tenant, ingested by
one ``rag.ingest`` event; its status is that event's outcome:

- ``completed``: the ingest pool applied it (``ingest_events`` holds it: indexed, or unchanged
  when the same content was already indexed);
- ``failed``: the pool recorded a failure of the document after the file was attached
  (``documents.error``), which is ``last_error``;
- ``in_progress``: neither yet.

Every method is synchronous (call it in a thread) and scoped to a tenant: another tenant's id
is not found.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.models import AppliedIngestEvent, Document, as_utc
from ragstream.db.vector_stores import StoredFile, VectorStore, VectorStoreFile

Order = Literal["asc", "desc"]
Status = Literal["in_progress", "completed", "failed"]


def new_file_id() -> str:
    """``file-<32 hex>``."""
    return f"file-{uuid.uuid4().hex}"


def new_store_id() -> str:
    """``vs_<32 hex>``."""
    return f"vs_{uuid.uuid4().hex}"


def doc_id_of(store_id: str, file_id: str) -> str:
    """The document a file of a store is ingested as: ``<store id>/<file id>``."""
    return f"{store_id}/{file_id}"


def file_id_of(doc_id: str) -> str:
    """The file id of a store's document (a JSON records file's record ``...#<id>`` too)."""
    return doc_id.partition("/")[2].partition("#")[0]


@dataclass(frozen=True, slots=True)
class FileState:
    """An attached file's status, ``last_error`` (the ingest path's reason) and bytes."""

    status: Status
    error: str | None
    usage_bytes: int


@dataclass(frozen=True, slots=True)
class Page:
    """Rows of a list, in its order, and whether more follow."""

    rows: list[Any]
    has_more: bool


class VectorStoreRegistry:
    """Files, stores and attachments in SQL (:mod:`ragstream.db.vector_stores`)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    # files

    def create_file(self, tenant: str, **fields: Any) -> StoredFile:
        """A new file row (``filename``, ``bytes``, ``purpose``, ``content_type``, ``path``)."""
        with self._sessions.begin() as session:
            row = StoredFile(id=new_file_id(), tenant=tenant, deleted=False, **fields)
            session.add(row)
            session.flush()
            session.expunge(row)
            return row

    def file(self, tenant: str, file_id: str) -> StoredFile | None:
        """The tenant's file ``file_id`` unless deleted."""
        with self._sessions() as session:
            return session.scalars(
                select(StoredFile).where(
                    StoredFile.id == file_id, StoredFile.tenant == tenant, ~StoredFile.deleted
                )
            ).one_or_none()

    def files(
        self,
        tenant: str,
        *,
        purpose: str | None,
        limit: int,
        order: Order,
        after: str | None,
        before: str | None,
    ) -> Page:
        """A page of the tenant's files by upload (``after``/``before``: a file id)."""
        with self._sessions() as session:
            where = [StoredFile.tenant == tenant, ~StoredFile.deleted]
            if purpose is not None:
                where.append(StoredFile.purpose == purpose)
            return _page(
                session, StoredFile, id_column=StoredFile.id, where=where, limit=limit,
                order=order, after=after, before=before,
            )  # fmt: skip

    def delete_file(self, tenant: str, file_id: str) -> list[str] | None:
        """Mark the file deleted and detach it from every store; the documents to delete
        (``None``: no such file)."""
        with self._sessions.begin() as session:
            done = session.execute(
                update(StoredFile)
                .where(StoredFile.id == file_id, StoredFile.tenant == tenant, ~StoredFile.deleted)
                .values(deleted=True)
            )
            if not done.rowcount:  # type: ignore[attr-defined]
                return None
            return self._detach_where(
                session, VectorStoreFile.tenant == tenant, VectorStoreFile.file_id == file_id
            )

    # stores

    def create_store(self, tenant: str, name: str, metadata: dict[str, str]) -> VectorStore:
        """A new, empty store."""
        with self._sessions.begin() as session:
            row = VectorStore(
                id=new_store_id(), tenant=tenant, name=name, metadata_=metadata, deleted=False
            )
            session.add(row)
            session.flush()
            session.expunge(row)
            return row

    def store(self, tenant: str, store_id: str) -> VectorStore | None:
        """The tenant's store ``store_id`` unless deleted."""
        with self._sessions() as session:
            return session.scalars(
                select(VectorStore).where(
                    VectorStore.id == store_id, VectorStore.tenant == tenant, ~VectorStore.deleted
                )
            ).one_or_none()

    def stores(
        self, tenant: str, *, limit: int, order: Order, after: str | None, before: str | None
    ) -> Page:
        """A page of the tenant's stores by creation (``after``/``before``: a store id)."""
        with self._sessions() as session:
            where = [VectorStore.tenant == tenant, ~VectorStore.deleted]
            return _page(
                session, VectorStore, id_column=VectorStore.id, where=where, limit=limit,
                order=order, after=after, before=before,
            )  # fmt: skip

    def update_store(
        self, tenant: str, store_id: str, name: str | None, metadata: dict[str, str] | None
    ) -> VectorStore | None:
        """Rename the store and/or replace its metadata (``None``: keep); the row, or ``None``
        for no such store."""
        with self._sessions.begin() as session:
            row = session.scalars(
                select(VectorStore).where(
                    VectorStore.id == store_id, VectorStore.tenant == tenant, ~VectorStore.deleted
                )
            ).one_or_none()
            if row is None:
                return None
            if name is not None:
                row.name = name
            if metadata is not None:
                row.metadata_ = dict(metadata)
            session.flush()
            session.expunge(row)
            return row

    def delete_store(self, tenant: str, store_id: str) -> list[str] | None:
        """Mark the store deleted and detach its files; the documents to delete (``None``: no
        such store)."""
        with self._sessions.begin() as session:
            done = session.execute(
                update(VectorStore)
                .where(
                    VectorStore.id == store_id, VectorStore.tenant == tenant, ~VectorStore.deleted
                )
                .values(deleted=True)
            )
            if not done.rowcount:  # type: ignore[attr-defined]
                return None
            return self._detach_where(
                session, VectorStoreFile.tenant == tenant, VectorStoreFile.store_id == store_id
            )

    # a store's files

    def attach(
        self, tenant: str, store_id: str, file_id: str, event_id: str, attributes: dict[str, Any]
    ) -> VectorStoreFile:
        """Record ``file_id`` as attached to ``store_id`` by the ingest event ``event_id``
        (again: the new event and attributes replace the old)."""
        with self._sessions.begin() as session:
            row = session.scalars(
                select(VectorStoreFile).where(
                    VectorStoreFile.store_id == store_id, VectorStoreFile.file_id == file_id
                )
            ).one_or_none()
            if row is None:
                row = VectorStoreFile(
                    tenant=tenant, store_id=store_id, file_id=file_id,
                    doc_id=doc_id_of(store_id, file_id),
                )  # fmt: skip
                session.add(row)
            row.event_id = event_id
            row.attributes = dict(attributes)
            row.created_at = dt.datetime.now(dt.UTC)
            session.flush()
            session.expunge(row)
            return row

    def attachment(self, tenant: str, store_id: str, file_id: str) -> VectorStoreFile | None:
        """The attachment of ``file_id`` to ``store_id``, or ``None``."""
        found = self.attachments(tenant, store_id, [file_id])
        return found.get(file_id)

    def attachments(
        self, tenant: str, store_id: str, file_ids: Iterable[str]
    ) -> dict[str, VectorStoreFile]:
        """The attachments of ``file_ids`` to ``store_id`` by file id (absent: not attached)."""
        ids = sorted(set(file_ids))
        if not ids:
            return {}
        with self._sessions() as session:
            rows = session.scalars(
                select(VectorStoreFile).where(
                    VectorStoreFile.tenant == tenant,
                    VectorStoreFile.store_id == store_id,
                    VectorStoreFile.file_id.in_(ids),
                )
            ).all()
            return {r.file_id: r for r in rows}

    def store_files(
        self,
        tenant: str,
        store_id: str,
        *,
        limit: int,
        order: Order,
        after: str | None,
        before: str | None,
    ) -> Page:
        """A page of the store's attachments by attach time (``after``/``before``: a file id)."""
        with self._sessions() as session:
            where = [VectorStoreFile.tenant == tenant, VectorStoreFile.store_id == store_id]
            return _page(
                session, VectorStoreFile, id_column=VectorStoreFile.file_id, where=where,
                limit=limit, order=order, after=after, before=before,
            )  # fmt: skip

    def all_store_files(self, tenant: str, store_id: str) -> list[VectorStoreFile]:
        """Every attachment of the store."""
        with self._sessions() as session:
            return list(
                session.scalars(
                    select(VectorStoreFile).where(
                        VectorStoreFile.tenant == tenant, VectorStoreFile.store_id == store_id
                    )
                ).all()
            )

    def searchable(self, tenant: str, store_id: str) -> bool:
        """Whether any file of the store has been ingested (its event applied): until one
        has, the store has nothing to search (and the tenant may have no index yet)."""
        with self._sessions() as session:
            found = session.execute(
                select(VectorStoreFile.id)
                .join(
                    AppliedIngestEvent,
                    (AppliedIngestEvent.tenant == VectorStoreFile.tenant)
                    & (AppliedIngestEvent.event_id == VectorStoreFile.event_id),
                )
                .where(VectorStoreFile.tenant == tenant, VectorStoreFile.store_id == store_id)
                .limit(1)
            ).first()
            return found is not None

    def detach(self, tenant: str, store_id: str, file_id: str) -> str | None:
        """Remove the attachment; the document to delete (``None``: not attached)."""
        with self._sessions.begin() as session:
            docs = self._detach_where(
                session,
                VectorStoreFile.tenant == tenant,
                VectorStoreFile.store_id == store_id,
                VectorStoreFile.file_id == file_id,
            )
            return docs[0] if docs else None

    def states(self, tenant: str, rows: Sequence[VectorStoreFile]) -> dict[str, FileState]:
        """Each attachment's :class:`FileState` by file id (see the module docstring)."""
        if not rows:
            return {}
        with self._sessions() as session:
            applied = set(
                session.scalars(
                    select(AppliedIngestEvent.event_id).where(
                        AppliedIngestEvent.tenant == tenant,
                        AppliedIngestEvent.event_id.in_([r.event_id for r in rows]),
                    )
                ).all()
            )
            docs = {
                d.doc_id: d
                for d in session.scalars(
                    select(Document).where(
                        Document.tenant == tenant, Document.doc_id.in_([r.doc_id for r in rows])
                    )
                ).all()
            }
            sizes = dict(
                session.execute(
                    select(StoredFile.id, StoredFile.bytes).where(
                        StoredFile.tenant == tenant, StoredFile.id.in_([r.file_id for r in rows])
                    )
                ).all()
            )
        out: dict[str, FileState] = {}
        for r in rows:
            doc = docs.get(r.doc_id)
            if r.event_id in applied:
                out[r.file_id] = FileState("completed", None, int(sizes.get(r.file_id, 0)))
            elif doc is not None and doc.error and as_utc(doc.updated_at) >= as_utc(r.created_at):
                out[r.file_id] = FileState("failed", doc.error, 0)
            else:
                out[r.file_id] = FileState("in_progress", None, 0)
        return out

    @staticmethod
    def _detach_where(session: Session, *where: Any) -> list[str]:
        docs = list(session.scalars(select(VectorStoreFile.doc_id).where(*where)).all())
        if docs:
            session.execute(delete(VectorStoreFile).where(*where))
        return docs


def _page(
    session: Session,
    model: Any,
    *,
    id_column: Any,
    where: list[Any],
    limit: int,
    order: Order,
    after: str | None,
    before: str | None,
) -> Page:
    """``limit`` rows of ``model`` by ``(created_at, id)`` in ``order``, after (or before)
    the row whose id is ``after`` (``before``); an unknown cursor id gives an empty page."""
    desc = order == "desc"
    key = (model.created_at, id_column)
    for cursor, forward in ((after, True), (before, False)):
        if cursor is None:
            continue
        anchor = session.execute(
            select(model.created_at, id_column).where(*where, id_column == cursor)
        ).one_or_none()
        if anchor is None:
            return Page([], False)
        later = (model.created_at > anchor[0]) | (
            (model.created_at == anchor[0]) & (id_column > anchor[1])
        )
        earlier = (model.created_at < anchor[0]) | (
            (model.created_at == anchor[0]) & (id_column < anchor[1])
        )
        where = [*where, (earlier if desc == forward else later)]
    backwards = before is not None and after is None
    ascending = desc == backwards
    ordering = [k.asc() if ascending else k.desc() for k in key]
    rows = list(session.scalars(select(model).where(*where).order_by(*ordering).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    if backwards:
        rows.reverse()
    return Page(rows, more)
