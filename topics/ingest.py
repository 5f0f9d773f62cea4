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
    """

    doc_id: DocId
    request_event_id: str
    status: Literal["indexed", "unchanged", "deleted", "failed", "acl"]
    version: int = 0
    chunk_count: int = 0
    error: str | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)

    def key(self) -> bytes:
        """Keyed by ``doc_id``."""
        return self.doc_id.encode()
