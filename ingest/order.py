"""The version guard of the write path: an ingest event older than the newest event already
applied to its document is dropped (outcome ``superseded``), counted and logged.

What orders the events of one document: the ``created_at`` of its ``rag.ingest`` event, the
producer's clock (UTC), carried in the event's value. A redelivery (the consumer crashed before
its commit) and a dead-letter replay (``ragstream dlq replay`` re-publishes the original bytes)
both keep it, so a late copy of an old event is recognised as old. Nothing else would do: the
Kafka offset changes when a copy is re-published, ``event_id`` is random and the content hash
says what a document holds, not when it was sent. The document registry keeps, per document,
the ``created_at`` of the newest event applied to it (``last_event_at``; a delete keeps its row
as a tombstone, so a deleted document has one too).

The rule (:func:`is_superseded`): an event sent strictly before ``last_event_at`` is dropped;
one sent at the same instant or later is applied. So a re-send of the same event, or of the
same content later, stays harmless: it applies again and the content hash makes it
``unchanged`` (a delete of a deleted document deletes nothing). Operations of the batch path
(Celery bulk jobs) carry no producer time: they are never dropped, and record the time they are
applied as ``last_event_at``, so a stream event sent before a bulk job wrote the document loses
to it.
"""

from __future__ import annotations

import datetime as dt

import structlog
from prometheus_client import Counter

from ingest.ops import IngestOp
from ingest.outcome import IngestOutcome
from ragstream.db.models import Document, as_utc, utcnow

log = structlog.get_logger(__name__)

SUPERSEDED = Counter(
    "ragstream_ingest_superseded_total",
    "Ingest events dropped because a newer event of their document was applied already, by op "
    "(upsert, delete, acl).",
    ["op"],
)


def is_superseded(sent_at: dt.datetime | None, last_event_at: dt.datetime | None) -> bool:
    """Whether an event sent at ``sent_at`` loses against the newest event already applied to
    its document, sent at ``last_event_at``: only when both are known and ``sent_at`` is
    strictly earlier (a timestamp without a timezone is read as UTC)."""
    if sent_at is None or last_event_at is None:
        return False
    return as_utc(sent_at) < as_utc(last_event_at)


def event_time(op: IngestOp) -> dt.datetime:
    """What the registry records as ``last_event_at`` once ``op`` is applied: its producer's
    ``sent_at`` (UTC), or now for an op that carries none (the batch path)."""
    return as_utc(op.sent_at) if op.sent_at is not None else utcnow()


def superseded(op: IngestOp, row: Document | None) -> IngestOutcome | None:
    """The ``superseded`` outcome of ``op`` when ``row`` (its document's registry row, or
    ``None``) records a newer applied event, counted (:data:`SUPERSEDED`) and logged; ``None``
    when ``op`` is to be applied.

    The outcome carries the document's current version and chunk count (what is still served;
    0 for a deleted document) and, in ``error``, why it was dropped.
    """
    latest = row.last_event_at if row is not None else None
    if row is None or latest is None or not is_superseded(op.sent_at, latest):
        return None
    assert op.sent_at is not None  # is_superseded: both are known
    sent, newest = as_utc(op.sent_at).isoformat(), as_utc(latest).isoformat()
    SUPERSEDED.labels(op.op).inc()
    log.info(
        "ingest.event_superseded",
        tenant=op.tenant,
        doc_id=op.doc_id,
        op=op.op,
        sent_at=sent,
        last_event_at=newest,
        status=row.status,
        version=row.version,
    )
    indexed = row.status == "indexed"
    return IngestOutcome(
        op.tenant,
        op.doc_id,
        "superseded",
        version=row.version,
        chunk_count=row.chunk_count if indexed else 0,
        error=f"superseded: sent at {sent}, before the document's newest applied event "
        f"({newest}, now {row.status}); dropped",
    )
