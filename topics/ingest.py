"""``rag.ingest`` (upserts, deletes and permission changes, keyed by ``doc_id``) and
``rag.ingest.results``.

Keying by ``doc_id`` puts every update of one document in one partition, so they apply in order:
a permission change (``op="acl"``) is never overtaken by an upsert sent before it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import Field, model_validator

from topics.acl import Readers
from topics.base import Event

DocId = str
#: What a document id may be (1-512 characters, checked apart): no control character, C0
#: (U+0000-U+001F), DEL or C1 (U+007F-U+009F), Unicode's category Cc. An id is shown in logs,
#: the console, the CLI and URIs, where a control character is invisible or acts on the
#: terminal. The HTTP API's bodies, forms and paths and the MCP tools state and check this.
DOC_ID_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"


class IngestRequest(Event):
    """Upsert a document (inline ``text`` or a ``source_path`` under an allowed root), delete
    it, or set who may read it (``op="acl"``, applied to its chunks without re-embedding).

    Exactly one of ``text`` and ``source_path`` is set for an upsert; neither for a delete or
    an ``acl``. ``principals`` (:mod:`topics.acl`): the document's readers; on an upsert,
    ``None`` keeps the readers it has (a new document: everyone of the tenant); on an ``acl``,
    ``None`` makes it readable by everyone of the tenant again; a delete carries none.

    Order (``ingest/order.py``, ``docs/write-path.md``): the events of one document apply in
    the order of their partition (keyed by ``doc_id``); each applied one increments the
    document's ``sequence``, the version the write path assigns. ``created_at`` orders nothing.
    An event whose ``(tenant, event_id)`` was applied already (a redelivery, a producer's
    re-send, a DLQ replay) is not applied again: its result is ``duplicate``. A record without
    ``event_id`` is identified by its content (:meth:`record_defaults`): the same record
    produced twice is one event, so give every change of your own an ``event_id`` (or a
    ``created_at``) to apply the same change twice on purpose. An event whose ``created_at``
    is more than ``ingest.max_clock_skew_s`` (default 300 s) ahead of the write path's clock
    is refused: its result is ``refused`` and the document stays as it is.
    """

    doc_id: DocId = Field(min_length=1, max_length=512, pattern=DOC_ID_PATTERN)
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

    @classmethod
    def record_defaults(
        cls, raw: dict[str, Any], key: bytes | None, timestamp_ms: int | None
    ) -> dict[str, Any]:
        """As :meth:`Event.record_defaults`, and a missing ``event_id`` is taken from the
        record's content: ``sha256-`` and the first 48 hex digits of the SHA-256 of its value as
        produced (canonical JSON: keys sorted, no spaces), so copies of one record are one
        event (``ingest/order.py``) and a timestamp filled from the record changes nothing."""
        if "event_id" not in raw:
            canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
            raw = {**raw, "event_id": f"sha256-{digest[:48]}"}
        return super().record_defaults(raw, key, timestamp_ms)

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
    was), ``duplicate`` (an event with the same ``event_id`` was applied already, so this copy
    was not; ``error`` says as which change) or ``refused`` (its ``created_at`` is more than
    ``ingest.max_clock_skew_s`` in the future; ``error`` says by how much). For ``duplicate``
    and ``refused``, ``version`` and ``chunk_count`` are what is still served (0 for a deleted
    document). ``superseded`` was written before 2026-12-07, when a producer's clock ordered
    events; it is read, never written now.
    """

    doc_id: DocId
    request_event_id: str
    status: Literal[
        "indexed", "unchanged", "deleted", "failed", "acl", "duplicate", "refused", "superseded"
    ]
    version: int = 0
    chunk_count: int = 0
    error: str | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)

    def key(self) -> bytes:
        """Keyed by ``doc_id``."""
        return self.doc_id.encode()
