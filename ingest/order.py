"""Which change of a document wins: the order the write path applies them in, never a
producer's clock.

The order. Every ``rag.ingest`` event is keyed by ``doc_id``, so one document's events sit in
one partition and the ingest pool applies them in that partition's order; the bulk jobs of the
batch path apply theirs when they run. Each applied change (upsert, delete or ``acl``, whether
it changed the index or not) increments the document's ``sequence`` in the registry
(:attr:`~ragstream.db.models.Document.sequence`, 1 for the first): the version the write path
assigns, beside the content ``version`` that counts indexed texts. A producer's ``created_at``
orders nothing: a producer whose clock is behind loses nothing, one whose clock is ahead
freezes nothing, and a record without ``created_at`` (it gets the Kafka record's timestamp,
which a re-send renews) is ordered like any other.

Copies are no-ops (:func:`duplicate`). A redelivery (the pool crashed before its commit), a
producer's re-send and a dead-letter replay all carry the event's ``event_id``; a record whose
producer left ``event_id`` out is identified by its bytes instead
(:meth:`topics.ingest.IngestRequest.record_defaults`), so the same record produced twice is
one event. The registry keeps the ``(tenant, event_id)`` of every event applied
(``ingest_events``); an event found there is not applied again: its outcome is
``duplicate``, with the sequence it was applied as. So a copy of v2 after "v2, delete" cannot
bring the document back, whatever its timestamps.

Clocks ahead (:func:`too_far_ahead`): an event whose ``created_at`` is more than
``max_clock_skew_s`` ahead of the write path's clock is refused (outcome ``refused``, the
document unchanged, counted and logged): its producer's clock is wrong, and its times would
mislead every reader of the trace.

Neither is silent: the last ``duplicate`` or ``refused`` event of a document with a registry
row is recorded on it (:meth:`~ingest.registry.DocumentRegistry.record_rejections`), and
``GET /v1/documents/{id}`` shows it as ``last_rejected``.
"""

from __future__ import annotations

import datetime as dt

import structlog
from prometheus_client import Counter

from ingest.ops import IngestOp
from ingest.outcome import IngestOutcome
from ragstream.db.models import Document, as_utc

log = structlog.get_logger(__name__)

#: The default bound of a producer's clock ahead of the write path's (``ingest.max_clock_skew_s``):
#: five minutes, the skew Kerberos and AWS request signing tolerate.
MAX_CLOCK_SKEW_S = 300.0

DUPLICATES = Counter(
    "ragstream_ingest_duplicates_total",
    "Ingest events not applied because an event with their (tenant, event_id) was applied "
    "already (a redelivery, a producer's re-send, a dead-letter replay), by op.",
    ["op"],
)
REFUSED = Counter(
    "ragstream_ingest_refused_total",
    "Ingest events refused before they were applied, by reason (clock_ahead: created_at "
    "beyond ingest.max_clock_skew_s in the future).",
    ["reason"],
)


def duplicate(
    op: IngestOp, applied: tuple[int, str] | None, row: Document | None
) -> IngestOutcome | None:
    """The ``duplicate`` outcome of ``op`` when ``applied`` (the change of the document its
    ``(tenant, event_id)`` was applied as, and that change's status; ``None``: never applied)
    shows it was applied already, counted (:data:`DUPLICATES`) and logged; ``None`` when
    ``op`` is to be applied.

    The outcome carries what is served now (``row``, the document's registry row: its version
    and chunk count, 0 when it is not indexed) and, in ``error``, the sequence the event was
    applied as and the document's sequence and status now.
    """
    if applied is None:
        return None
    applied_sequence, applied_status = applied
    DUPLICATES.labels(op.op).inc()
    now_seq = row.sequence if row is not None else 0
    now_status = row.status if row is not None else "unknown"
    log.info(
        "ingest.event_duplicate",
        tenant=op.tenant,
        doc_id=op.doc_id,
        op=op.op,
        event_id=op.event_id,
        applied_sequence=applied_sequence,
        sequence=now_seq,
        status=now_status,
    )
    indexed = row is not None and row.status == "indexed"
    return IngestOutcome(
        op.tenant,
        op.doc_id,
        "duplicate",
        version=row.version if row is not None else 0,
        chunk_count=row.chunk_count if row is not None and indexed else 0,
        error=f"duplicate: event {op.event_id} was applied already as change "
        f"{applied_sequence} of the document ({applied_status}); it is now at change "
        f"{now_seq} ({now_status}); not applied again (give a change of its own a new "
        "event_id)",
    )


def too_far_ahead(
    op: IngestOp,
    row: Document | None,
    now: dt.datetime,
    max_skew_s: float = MAX_CLOCK_SKEW_S,
) -> IngestOutcome | None:
    """The ``refused`` outcome of ``op`` when its producer's ``sent_at`` is more than
    ``max_skew_s`` seconds after ``now`` (the write path's clock, UTC), counted
    (:data:`REFUSED`, reason ``clock_ahead``) and logged; ``None`` otherwise (also for an op
    that carries no producer time, as the batch path's do). The outcome carries what is served
    now (``row``, the document's registry row or ``None``)."""
    if op.sent_at is None:
        return None
    ahead_s = (as_utc(op.sent_at) - as_utc(now)).total_seconds()
    if ahead_s <= max_skew_s:
        return None
    REFUSED.labels("clock_ahead").inc()
    log.warning(
        "ingest.event_refused",
        tenant=op.tenant,
        doc_id=op.doc_id,
        op=op.op,
        event_id=op.event_id,
        reason="clock_ahead",
        ahead_s=round(ahead_s, 3),
    )
    return IngestOutcome(
        op.tenant,
        op.doc_id,
        "refused",
        version=row.version if row is not None else 0,
        chunk_count=row.chunk_count if row is not None and row.status == "indexed" else 0,
        error=f"refused: created_at {as_utc(op.sent_at).isoformat()} is {ahead_s:.0f} s ahead "
        f"of the write path's clock ({as_utc(now).isoformat()}; allowed skew "
        f"{max_skew_s:.0f} s, ingest.max_clock_skew_s); fix the producer's clock or leave "
        "created_at out",
    )
