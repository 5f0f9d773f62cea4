"""SQLAlchemy 2 models of the metadata store.

Tables: the document registry (one row per ``(tenant, doc_id)``, versioned by content hash),
ingest jobs and their per-document items, the query log (one row per ``request_id``) and
webhook deliveries with every attempt. Every timestamp is timezone-aware UTC.

The schema is owned by Alembic (``ragstream/migrations``); ``Base.metadata`` is only the
autogenerate source and is never used to create tables directly.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from ragstream import job_status

# Re-exported (the ``as`` form): the store's callers import both from here.
from ragstream.clock import as_utc as as_utc  # noqa: PLC0414
from ragstream.clock import utcnow as utcnow  # noqa: PLC0414


class Base(DeclarativeBase):
    """Declarative base; JSON columns map ``dict[str, Any]`` / ``list[Any]``."""

    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        dict[str, Any]: JSON,
        list[Any]: JSON,
        dt.datetime: DateTime(timezone=True),
    }


class Document(Base):
    """A document of the knowledge base, identified by ``(tenant, doc_id)``.

    ``content_hash`` is the SHA-256 (hex) of the normalised text; ``version`` counts indexed
    versions, starting at 1. ``status`` is one of ``indexed``, ``deleted`` or ``failed``.
    """

    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("tenant", "doc_id", name="uq_documents_tenant_doc"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    doc_id: Mapped[str] = mapped_column(String(512))
    content_hash: Mapped[str | None] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(32), default="indexed")
    source: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    chunk_ids: Mapped[list[Any]] = mapped_column(default=list)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    #: What ingest repaired in its input, one line each (lone surrogates replaced by U+FFFD);
    #: NULL: nothing (and rows before revision 0010).
    warnings: Mapped[list[Any] | None] = mapped_column(JSON)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    #: Who may read it (:mod:`ragstream.db.acl`: ``",group:eng,user:ada,"``); NULL: everyone
    #: of the tenant.
    readers: Mapped[str | None] = mapped_column(Text)
    #: When the newest change was applied to it (the write path's clock, UTC; an ingest event's
    #: or a bulk job's). NULL: none recorded (rows before revision 0008).
    last_event_at: Mapped[dt.datetime | None] = mapped_column()
    #: How many changes (ingest events and bulk-job operations) were applied to it: the order
    #: the write path assigns, 1 for the first (:mod:`ingest.order`). 0: none recorded (rows
    #: before revision 0009).
    sequence: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: The ``event_id`` of the newest ``rag.ingest`` event applied to it; NULL for a bulk job's
    #: operation (which has none) or a row before revision 0009.
    last_event_id: Mapped[str | None] = mapped_column(String(128))
    #: The last ``rag.ingest`` event of it the write path did not apply (:mod:`ingest.order`):
    #: its ``event_id``, its outcome (``duplicate`` or ``refused``), the reason and when (the
    #: write path's clock, UTC). Kept when a later change applies; all NULL: none recorded
    #: (and rows before revision 0013). Written by
    #: :meth:`ingest.registry.DocumentRegistry.record_rejections`.
    last_rejected_event_id: Mapped[str | None] = mapped_column(String(128))
    last_rejected_status: Mapped[str | None] = mapped_column(String(32))
    last_rejected_reason: Mapped[str | None] = mapped_column(Text)
    last_rejected_at: Mapped[dt.datetime | None] = mapped_column()
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class AppliedIngestEvent(Base):
    """One ``rag.ingest`` event applied to a document, by ``(tenant, event_id)``: a later copy of
    it (a redelivery, a producer's re-send, a dead-letter replay) is a no-op
    (:mod:`ingest.order`).

    ``sequence`` is the document's :attr:`Document.sequence` the event was applied as;
    ``status`` its outcome (``indexed``, ``unchanged``, ``deleted`` or ``acl``).
    """

    __tablename__ = "ingest_events"
    __table_args__ = (UniqueConstraint("tenant", "event_id", name="uq_ingest_events_tenant_event"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(128))
    event_id: Mapped[str] = mapped_column(String(128))
    doc_id: Mapped[str] = mapped_column(String(512))
    sequence: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(32))
    applied_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)


#: Statuses after which a bulk ingest job changes no more (see :class:`IngestJob`).
FINAL_JOB_STATUSES = job_status.FINAL_JOB_STATUSES


class IngestJob(Base):
    """A bulk ingestion job (Celery).

    ``status``: pending, running, succeeded (every document indexed, unchanged or deleted),
    completed_with_failures (some documents failed; see the items), failed (the job itself).
    """

    __tablename__ = "ingest_jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    status: Mapped[str] = mapped_column(String(32), default="pending", index=True)
    total_documents: Mapped[int] = mapped_column(Integer, default=0)
    done_documents: Mapped[int] = mapped_column(Integer, default=0)
    failed_documents: Mapped[int] = mapped_column(Integer, default=0)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    callback_url: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column()
    finished_at: Mapped[dt.datetime | None] = mapped_column()
    heartbeat_at: Mapped[dt.datetime | None] = mapped_column()
    resumes: Mapped[int] = mapped_column(Integer, default=0)
    #: The readers every document of the job gets (:mod:`ragstream.db.acl`); NULL: everyone.
    readers: Mapped[str | None] = mapped_column(Text)

    items: Mapped[list[IngestJobItem]] = relationship(
        back_populates="job", cascade="all, delete-orphan"
    )


class IngestJobItem(Base):
    """One document of a bulk job. ``status``: pending, indexed, unchanged, deleted, failed."""

    __tablename__ = "ingest_job_items"
    __table_args__ = (UniqueConstraint("job_id", "path", name="uq_job_items_job_path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(
        ForeignKey("ingest_jobs.id", ondelete="CASCADE"), index=True
    )
    path: Mapped[str] = mapped_column(Text)
    doc_id: Mapped[str | None] = mapped_column(String(512))
    title: Mapped[str | None] = mapped_column(Text)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    status: Mapped[str] = mapped_column(String(32), default="pending", index=True)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    job: Mapped[IngestJob] = relationship(back_populates="items")


class QueryLog(Base):
    """One query, keyed by ``request_id`` (idempotent writes de-duplicate replays).

    ``status``: pending, answered, failed. ``result`` holds the whole answer view
    (``topics.answers.Answer`` as JSON: answer, citations, evidence with offsets, tier,
    truncated, error, trace, usage) once the query is final; ``answer``, ``citations``,
    ``trace`` (per-stage timings in ms) and ``error_code``/``error_message`` are columns
    derived from it for SQL readers, and what rows written before revision 0005 hold.
    """

    __tablename__ = "query_log"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    #: The question answered: a follow-up made standalone with its context
    #: (:func:`workers.conversation.question_of`), so that the log replays on its own.
    query: Mapped[str] = mapped_column(Text)
    #: The question as the user typed it (``QueryRequest.query``); NULL: the same as ``query``
    #: (rows before revision 0011, or a response whose request was never logged).
    question: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(32), default="pending", index=True)
    answer: Mapped[str | None] = mapped_column(Text)
    citations: Mapped[list[Any]] = mapped_column(default=list)
    trace: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    completed_at: Mapped[dt.datetime | None] = mapped_column()
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: Who asked (:func:`ragstream.db.acl.asker_column`): ``"*"`` a tenant-wide key, else its
    #: principals; NULL: logged before permissions, or by a producer on the bus.
    asked_as: Mapped[str | None] = mapped_column(Text)


class QueryFeedback(Base):
    """A reader's judgement of a logged answer (``POST /v1/queries/{id}/feedback``): one row per
    ``(request_id, key_id)``, the API key's latest feedback on that query (a key that sends
    feedback again replaces its row; ``created_at`` stays, ``updated_at`` moves).

    ``passage`` is the citation number ``n`` (``[n]`` in the answer) the reader named, and
    ``sentence`` an index into the answer's ``evidence`` list (0 = first span); NULL: not
    named. ``chunk_id``/``doc_id``/``passage_text`` are the passage the label is about, the
    named one or else the one the answer led with, with its text as the index held it when the
    feedback came (NULL: the answer cited nothing, or the chunk was gone); ``sentence_text``
    is the named evidence span's text. Training reads them (:mod:`workers.feedback`).
    """

    __tablename__ = "query_feedback"

    request_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("query_log.request_id", ondelete="CASCADE"), primary_key=True
    )
    #: The API key (``api_keys.id``) that gave it; keys are revoked, never deleted.
    key_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    helpful: Mapped[bool] = mapped_column(Boolean)
    passage: Mapped[int | None] = mapped_column(Integer)
    sentence: Mapped[int | None] = mapped_column(Integer)
    comment: Mapped[str | None] = mapped_column(Text)
    chunk_id: Mapped[str | None] = mapped_column(String(128))
    doc_id: Mapped[str | None] = mapped_column(String(512))
    passage_text: Mapped[str | None] = mapped_column(Text)
    sentence_text: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """One logical webhook delivery; ``webhook_id`` is stable so receivers de-duplicate.

    ``status``: pending, succeeded, failed.
    """

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    webhook_id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(Text)
    #: The registered endpoint it goes to (signed with its key); ``None``: a ``callback_url``
    #: (signed with the tenant's key).
    endpoint_id: Mapped[str | None] = mapped_column(String(36))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(32), default="pending", index=True)
    attempt_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column()

    attempts: Mapped[list[WebhookAttempt]] = relationship(
        back_populates="delivery", cascade="all, delete-orphan"
    )


class WebhookAttempt(Base):
    """One HTTP attempt of a delivery: status code (None on a transport error), error, latency."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[int] = mapped_column(
        ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True
    )
    attempt: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float | None] = mapped_column()
    attempted_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    delivery: Mapped[WebhookDelivery] = relationship(back_populates="attempts")


class ApiKey(Base):
    """An API key of a tenant, stored as the SHA-256 of the whole key (never the key itself).

    Keys are 256-bit random tokens, so an unsalted fast hash is the right lookup (as GitHub and
    Stripe do for tokens); ``prefix`` (the first 12 characters) identifies a key in listings.
    ``rate_per_minute`` overrides the deployment default when set. ``role``: ``user`` (the
    tenant's data) or ``operator`` (also the deployment's operations: pools, DLQs, index).
    """

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    rate_per_minute: Mapped[int | None] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16), default="user", server_default="user")
    #: The principals the key asks as (:mod:`ragstream.db.acl`); ``",*,"``: every document of
    #: the tenant; NULL: none (only documents without readers).
    principals: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column()


class WebhookEndpoint(Base):
    """A tenant's registered webhook endpoint for some event types (``["*"]`` for all).

    ``secret`` is the endpoint's Standard Webhooks key (``whsec_`` + base64); after a rotation
    ``previous_secret`` signs as well until ``previous_secret_until``.
    """

    __tablename__ = "webhook_endpoints"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    url: Mapped[str] = mapped_column(Text)
    event_types: Mapped[list[Any]] = mapped_column(default=list)
    description: Mapped[str] = mapped_column(String(256), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    disabled_at: Mapped[dt.datetime | None] = mapped_column()
    secret: Mapped[str] = mapped_column(String(128))
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_secret_until: Mapped[dt.datetime | None] = mapped_column()


class WebhookTenantSecret(Base):
    """A tenant's key for deliveries to per-query ``callback_url`` targets (no registered
    endpoint); rotated like an endpoint's (see :class:`WebhookEndpoint`)."""

    __tablename__ = "webhook_tenant_secrets"

    tenant: Mapped[str] = mapped_column(String(128), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128))
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_secret_until: Mapped[dt.datetime | None] = mapped_column()
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
