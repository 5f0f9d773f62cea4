"""``rag.ingest`` (upserts, deletes and permission changes, keyed by ``doc_id``) and
``rag.ingest.results``.

Keying by ``doc_id`` puts every update of one document in one partition, so they apply in order:
a permission change (``op="acl"``) is never overtaken by an upsert sent before it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from topics.acl import Readers
from topics.base import Event

DocId = str


class IngestRequest(Event):
    """Upsert a document (inline ``text`` or a ``source_path`` under an allowed root), delete
    it, or set who may read it (``op="acl"``, applied to its chunks without re-embedding).

    Exactly one of ``text`` and ``source_path`` is set for an upsert; neither for a delete or
    an ``acl``. ``principals`` (:mod:`topics.acl`): the document's readers; on an upsert,
    ``None`` keeps the readers it has (a new document: everyone of the tenant); on an ``acl``,
    ``None`` makes it readable by everyone of the tenant again; a delete carries none.

    Order (the version guard, ``ingest/order.py``, ``docs/write-path.md``): ``created_at`` (the
    producer's clock, UTC) orders the events of one document. An event sent strictly before
    the newest event already applied to its ``(tenant, doc_id)`` (upsert, delete or ``acl``;
    a deleted document keeps a tombstone in the document registry, never purged) is dropped:
    its result is ``superseded`` and the document stays as it is. So a late copy of an old
    event (a redelivery, a DLQ replay: both keep the original value) cannot bring back a
    deleted document or an older version. An event sent at the same instant or later is
    applied; re-sending the same content is harmless (``unchanged``: no new version). A
    producer should therefore leave ``created_at`` to be set when the event is made, not copy
    it from an older event.
    """

    doc_id: DocId = Field(min_length=1, max_length=512)
    op: Literal["upsert", "delete", "acl"]
    text: str | None = Field(default=None, max_length=10_000_000)
    source_path: str | None = Field(default=None, max_length=4096)
    content_type: str | None = Field(default=None, max_length=128)
    title: str | None = Field(default=None, max_length=1024)
    source: str | None = Field(default=None, max_length=2048)
    metadata: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    principals: Readers | None = None

    @model_validator(mode="after")
    def _payload_matches_op(self) -> IngestRequest:
        has_text, has_path = self.text is not None, self.source_path is not None
        if self.op == "upsert" and has_text == has_path:
            raise ValueError("an upsert needs exactly one of text and source_path")
        if self.op in ("delete", "acl") and (has_text or has_path):
            article = "a" if self.op == "delete" else "an"
            raise ValueError(f"{article} {self.op} carries neither text nor source_path")
        if self.op == "delete" and self.principals is not None:
            raise ValueError("a delete carries no principals")
        return self

    def key(self) -> bytes:
        """Keyed by ``doc_id``."""
        return self.doc_id.encode()


class IngestResult(Event):
    """The outcome of one :class:`IngestRequest` (``request_event_id`` is its ``event_id``).

    An output for consumers outside the product: whoever produces to ``rag.ingest`` learns
    here, per document, what became of each request. ragstream itself reads outcomes from the
    document registry (SQL), which the ingest pipeline writes before this event is sent, so no
    pool of its own consumes this topic.

    ``status``: ``indexed`` (a new ``version``), ``unchanged`` (same content hash),
    ``deleted``, ``acl`` (readers set), ``failed`` (``error`` says why; the document stays as it
    was) or ``superseded`` (the request was older than the newest event applied to the
    document and was dropped; ``error`` says when each was sent; ``version`` and
    ``chunk_count`` are what is still served, 0 for a deleted document).
    """

    doc_id: DocId
    request_event_id: str
    status: Literal["indexed", "unchanged", "deleted", "failed", "acl", "superseded"]
    version: int = 0
    chunk_count: int = 0
    error: str | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)

    def key(self) -> bytes:
        """Keyed by ``doc_id``."""
        return self.doc_id.encode()
