"""The document registry in SQL: one row per ``(tenant, doc_id)``, versioned by content hash.

The registry is the source of truth for "unchanged" (same hash: skip) and for which chunk ids
belong to the indexed version (deleted by id when the next version is acknowledged).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.acl import readable_by
from ragstream.db.models import AppliedIngestEvent, Document, utcnow


@dataclass(frozen=True, slots=True)
class Change:
    """One change applied to ``(tenant, doc_id)``: its outcome ``status`` (``indexed``,
    ``unchanged``, ``deleted`` or ``acl``) and the ``rag.ingest`` ``event_id`` it came from
    (``None``: a bulk job's operation)."""

    tenant: str
    doc_id: str
    status: str
    event_id: str | None = None


class DocumentRegistry:
    """Reads and writes :class:`~ragstream.db.models.Document` rows."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Document]:
        """Rows for ``(tenant, doc_id)`` keys that exist (detached, read-only use)."""
        wanted = list(set(keys))
        found: dict[tuple[str, str], Document] = {}
        with self._sessions() as session:
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                stmt = select(Document).where(tuple_(Document.tenant, Document.doc_id).in_(part))
                for row in session.scalars(stmt):
                    found[(row.tenant, row.doc_id)] = row
        return found

    def applied_events(
        self, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], AppliedIngestEvent]:
        """The applied ``rag.ingest`` events among ``(tenant, event_id)`` keys (detached,
        read-only use); see :mod:`ingest.order`."""
        wanted = list(set(keys))
        found: dict[tuple[str, str], AppliedIngestEvent] = {}
        with self._sessions() as session:
            for start in range(0, len(wanted), 500):
                part = wanted[start : start + 500]
                stmt = select(AppliedIngestEvent).where(
                    tuple_(AppliedIngestEvent.tenant, AppliedIngestEvent.event_id).in_(part)
                )
                for row in session.scalars(stmt):
                    found[(row.tenant, row.event_id)] = row
        return found

    def page(
        self,
        tenant: str,
        *,
        limit: int,
        before_id: int | None = None,
        status: str | None = None,
        source: str | None = None,
        principals: Sequence[str] | None = None,
    ) -> list[Document]:
        """Up to ``limit`` of ``tenant``'s rows, newest first (by row id, below ``before_id``
        when given: keyset pagination), optionally only those of ``status`` and ``source``
        (exact match), and only those an asker with ``principals`` may read (``None``: all;
        :func:`ragstream.db.acl.readable_by`). Detached, read-only use."""
        stmt = select(Document).where(
            Document.tenant == tenant, readable_by(Document.readers, principals)
        )
        if before_id is not None:
            stmt = stmt.where(Document.id < before_id)
        if status is not None:
            stmt = stmt.where(Document.status == status)
        if source is not None:
            stmt = stmt.where(Document.source == source)
        with self._sessions() as session:
            return list(session.scalars(stmt.order_by(Document.id.desc()).limit(limit)))

    def children(self, tenant: str, parent: str) -> list[Document]:
        """Live records ``<parent>#<id>`` of a JSON/JSONL document (status not ``deleted``)."""
        escaped = parent.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        with self._sessions() as session:
            stmt = select(Document).where(
                Document.tenant == tenant,
                Document.doc_id.like(f"{escaped}#%", escape="\\"),
                Document.status != "deleted",
            )
            return list(session.scalars(stmt))

    def record(self, tenant: str, doc_id: str, **fields: Any) -> Document:
        """Insert or update the row of ``(tenant, doc_id)`` with ``fields``; return it."""
        with self._sessions.begin() as session:
            row = session.scalars(
                select(Document).where(Document.tenant == tenant, Document.doc_id == doc_id)
            ).one_or_none()
            if row is None:
                row = Document(tenant=tenant, doc_id=doc_id, version=0, chunk_ids=[], metadata_={})
                session.add(row)
            for name, value in fields.items():
                setattr(row, name, value)
            row.updated_at = utcnow()
        return row

    def record_many(
        self,
        rows: list[tuple[str, str, dict[str, Any]]],
        changes: Sequence[Change] = (),
    ) -> None:
        """:meth:`record` for many rows, and the applied ``changes``, in one transaction.

        Each :class:`Change` increments its document's ``sequence`` (in the order given),
        sets ``last_event_at`` to now and ``last_event_id`` to its event id, and, when it has
        an event id, records the event in ``ingest_events`` (:mod:`ingest.order`).
        """
        if not rows and not changes:
            return
        rows = rows + [(c.tenant, c.doc_id, {}) for c in changes]
        keys = [(t, d) for t, d, _ in rows]
        with self._sessions.begin() as session:
            existing = {
                (r.tenant, r.doc_id): r
                for start in range(0, len(keys), 500)
                for r in session.scalars(
                    select(Document).where(
                        tuple_(Document.tenant, Document.doc_id).in_(keys[start : start + 500])
                    )
                )
            }
            now = utcnow()
            for tenant, doc_id, fields in rows:
                row = existing.get((tenant, doc_id))
                if row is None:
                    row = Document(
                        tenant=tenant, doc_id=doc_id, version=0, chunk_ids=[], metadata_={}
                    )
                    session.add(row)
                    existing[(tenant, doc_id)] = row
                for name, value in fields.items():
                    setattr(row, name, value)
                row.updated_at = now
            events: set[tuple[str, str]] = set()  # a records file's event: its first row
            for change in changes:
                row = existing[(change.tenant, change.doc_id)]
                row.sequence = (row.sequence or 0) + 1
                row.last_event_at = now
                row.last_event_id = change.event_id
                if change.event_id is not None and (change.tenant, change.event_id) not in events:
                    events.add((change.tenant, change.event_id))
                    session.add(
                        AppliedIngestEvent(
                            tenant=change.tenant,
                            event_id=change.event_id,
                            doc_id=change.doc_id,
                            sequence=row.sequence,
                            status=change.status,
                            applied_at=now,
                        )
                    )

    def record_failures(self, failures: list[tuple[str, str, str]]) -> None:
        """Record ``(tenant, doc_id, error)`` of documents whose upsert failed.

        A document never indexed gets (or keeps) a ``failed`` row with the error, so that
        ``GET /v1/documents/{id}`` can say why; an indexed document keeps its status and
        version (that version is still served) and gets the error of its failed update.
        """
        if not failures:
            return
        with self._sessions.begin() as session:
            now = utcnow()
            for tenant, doc_id, error in failures:
                row = session.scalars(
                    select(Document).where(Document.tenant == tenant, Document.doc_id == doc_id)
                ).one_or_none()
                if row is None:
                    row = Document(
                        tenant=tenant, doc_id=doc_id, version=0, chunk_ids=[], metadata_={}
                    )
                    session.add(row)
                if row.status != "indexed":
                    row.status = "failed"
                row.error = error[:4000]
                row.updated_at = now
