"""What happened to one document of an ingest operation (the pipeline's outcome)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: ``acl``: its readers changed (``op="acl"``), nothing re-embedded. ``duplicate``: an event
#: with the same ``(tenant, event_id)`` was applied already, so this copy was not;
#: ``refused``: the event's ``created_at`` is too far in the future (:mod:`ingest.order`).
Status = Literal["indexed", "unchanged", "deleted", "failed", "acl", "duplicate", "refused"]


@dataclass(slots=True)
class IngestOutcome:
    """What happened to one document. ``timings_ms`` are the batch's stage times."""

    tenant: str
    doc_id: str
    status: Status
    version: int = 0
    chunk_count: int = 0
    error: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
