"""A permission change applied to an indexed document: its chunks' ``principals`` field and its
registry row, without parsing or embedding anything (``docs/permissions.md``).

The chunks are updated by id with bulk partial updates (``update`` actions with a ``doc``):
the Elasticsearch distribution here has no ``reindex`` module, so no ``_update_by_query``, and
the ids are known anyway (the registry's, plus any the index still holds for the document).
The pipeline refreshes the index and bumps the tenant's index version after the wave, as for
any write: the next search sees the new readers, and no answer cached before is read again.
"""

from __future__ import annotations

from typing import Any, Protocol

import structlog
from prometheus_client import Counter

from ingest.ops import IngestOp
from ingest.outcome import IngestOutcome
from ingest.registry import DocumentRegistry
from ragstream.db.acl import to_column

log = structlog.get_logger(__name__)

ACL_CHANGES = Counter(
    "ragstream_acl_changes_total",
    "Permission changes applied to documents, by outcome (acl, failed).",
    ["status"],
)


class ReaderIndex(Protocol):
    """The two index operations a permission change needs (:class:`ingest.index.ChunkIndex`)."""

    def chunk_ids_of(self, tenant: str, doc_id: str) -> list[str]: ...

    def set_readers(self, ids: list[str], readers: tuple[str, ...] | None) -> dict[str, str]: ...


#: A registry row to write once the change is searchable: ``(tenant, doc_id, fields)``.
Row = tuple[str, str, dict[str, Any]]


def set_readers(
    index: ReaderIndex,
    registry: DocumentRegistry,
    op: IngestOp,
    touched: set[str],
    rows: list[Row],
) -> list[IngestOutcome]:
    """Give document ``(op.tenant, op.doc_id)``, and each record of it when it is a records
    file, the readers ``op.principals`` (``None``: everyone of the tenant).

    Args:
        index: where its chunks are.
        registry: where its row is read.
        op: an ``acl`` op.
        touched: the tenant is added when something changed (refresh, version bump).
        rows: the registry rows to write (``readers``) are appended here; the pipeline writes
            them after the refresh and the version bump, so once the registry (and
            ``GET /v1/documents``) shows the new readers, every search and cache respects
            them.

    Returns:
        One outcome per document: ``acl`` (with its version and chunk count), or ``failed``
        with the reason: no indexed document of that id (an unknown document), or chunks the
        index refused to update (the row is then left as it was).
    """
    found = registry.get_many([(op.tenant, op.doc_id)])
    docs = [found[(op.tenant, op.doc_id)]] if (op.tenant, op.doc_id) in found else []
    docs = [d for d in docs if d.status == "indexed"]
    docs += [c for c in registry.children(op.tenant, op.doc_id) if c.status == "indexed"]
    if not docs:
        error = f"no indexed document {op.doc_id!r} of tenant {op.tenant!r} to set readers on"
        log.warning("acl.unknown_document", tenant=op.tenant, doc_id=op.doc_id)
        ACL_CHANGES.labels("failed").inc()
        return [IngestOutcome(op.tenant, op.doc_id, "failed", error=error)]
    out: list[IngestOutcome] = []
    for doc in docs:
        ids = sorted(set(doc.chunk_ids or []) | set(index.chunk_ids_of(op.tenant, doc.doc_id)))
        failed = index.set_readers(ids, op.principals)
        if failed:
            reason = next(iter(failed.values()))
            error = f"readers not set on {len(failed)} chunk(s): {reason}"
            out.append(IngestOutcome(op.tenant, doc.doc_id, "failed", error=error))
            ACL_CHANGES.labels("failed").inc()
            continue
        rows.append((op.tenant, doc.doc_id, {"readers": to_column(op.principals)}))
        touched.add(op.tenant)
        ACL_CHANGES.labels("acl").inc()
        log.info("acl.applied", tenant=op.tenant, doc_id=doc.doc_id, chunks=len(ids))
        out.append(IngestOutcome(op.tenant, doc.doc_id, "acl", doc.version, doc.chunk_count))
    return out
