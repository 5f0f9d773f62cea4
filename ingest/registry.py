"""The document registry in SQL: one row per ``(tenant, doc_id)``, versioned by content hash.

The registry is the source of truth for "unchanged" (same hash: skip) and for which chunk ids
belong to the indexed version (deleted by id when the next version is acknowledged).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_, update
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


@dataclass(frozen=True, slots=True)
class Rejection:
    """One ``rag.ingest`` event of ``(tenant, doc_id)`` the write path did not apply: its
    ``event_id``, its outcome ``status`` (``duplicate`` or ``refused``) and the ``reason`` (the
    outcome's ``error``); see :mod:`ingest.order`."""

    tenant: str
    doc_id: str
    event_id: str
    status: str
    reason: str


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

    def record_rejections(self, rejections: Sequence[Rejection]) -> None:
        """Record on each document's row the last of ``rejections`` (in the order given) as its
        ``last_rejected_*`` columns, stamped with the write path's clock (UTC).

        One ``UPDATE`` per document in one transaction; nothing when ``rejections`` is empty.
        A document without a row (a refused first event of a new ``doc_id``) gets none: it
        does not exist, and ``rag.ingest.results`` alone tells of the event. The row's other
        columns, ``updated_at`` included, stay as they are: the document did not change.
        """
        last = {(r.tenant, r.doc_id): r for r in rejections}
        if not last:
            return
        now = utcnow()
        with self._sessions.begin() as session:
            for r in last.values():
                session.execute(
                    update(Document)
                    .where(Document.tenant == r.tenant, Document.doc_id == r.doc_id)
                    .values(
                        last_rejected_event_id=r.event_id,
                        last_rejected_status=r.status,
                        last_rejected_reason=r.reason[:4000],
                        last_rejected_at=now,
                        updated_at=Document.updated_at,  # not a change of the document
                    )
                    .execution_options(synchronize_session=False)
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
