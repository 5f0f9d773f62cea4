"""The chunk index in Elasticsearch: mapping, alias over versioned physical indices, bulk writes.

Searches and writes go through an alias (``settings.index_alias``) that points at one physical
index ``<alias>-v<N>``. A model or mapping change builds ``-v<N+1>`` and swaps the alias in
one ``_aliases`` call (the elasticsearch-py DSL "alias migration" pattern), so readers never
see a half-built index.

Every bulk item is accounted for: transient item failures (429, 502, 503, 504) are retried
with exponential back-off; any other item failure is returned as a failure of its document.
Nothing is silently dropped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from elasticsearch import ApiError, Elasticsearch, TransportError, helpers

from ragstream.errors import TransientError
from ragstream.retry import RetryPolicy
from ragstream.settings import ElasticsearchSettings

log = structlog.get_logger(__name__)

TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


def mapping(dims: int, settings: ElasticsearchSettings) -> dict[str, Any]:
    """The chunk index body: settings and a strict mapping.

    Fields: ``text`` and ``title`` (BM25, standard analyzer), ``embedding`` (``dense_vector``,
    ``dims`` floats, cosine, HNSW), ids (``tenant``, ``doc_id``, ``chunk_id``), ``chunk_no``,
    ``version``, ``content_hash``, ``source``, ``content_type``, ``metadata`` (flattened, so
    ``metadata.<key>`` term filters work without mapping every key) and ``indexed_at``.
    """
    return {
        "settings": {
            "number_of_shards": settings.shards,
            "number_of_replicas": settings.replicas,
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "tenant": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "chunk_id": {"type": "keyword"},
                "chunk_no": {"type": "integer"},
                "version": {"type": "integer"},
                "content_hash": {"type": "keyword"},
                "title": {
                    "type": "text",
                    "fields": {"raw": {"type": "keyword", "ignore_above": 512}},
                },
                "text": {"type": "text"},
                "embed_title": {"type": "keyword", "index": False, "doc_values": False},
                "source": {"type": "keyword"},
                "content_type": {"type": "keyword"},
                "lang": {"type": "keyword"},
                "metadata": {"type": "flattened"},
                "indexed_at": {"type": "date"},
                "embedding": {
                    "type": "dense_vector",
                    "dims": dims,
                    "index": True,
                    "similarity": "cosine",
                    "index_options": {
                        "type": "hnsw",
                        "m": settings.hnsw_m,
                        "ef_construction": settings.hnsw_ef_construction,
                    },
                },
            },
        },
    }


@dataclass(slots=True)
class BulkReport:
    """Outcome of a bulk call: ids written and ``{_id: reason}`` of items that failed for good."""

    succeeded: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


class ChunkIndex:
    """Chunk index operations behind the alias.

    Args:
        es: an Elasticsearch client.
        settings: index settings (alias name, shards, HNSW, bulk tuning).
        dims: embedding dimension.
    """

    def __init__(self, es: Elasticsearch, settings: ElasticsearchSettings, dims: int) -> None:
        self.es = es
        self.settings = settings
        self.alias = settings.index_alias
        self.dims = dims

    # -- alias and physical indices ------------------------------------------------------------

    def physical_index(self) -> str | None:
        """The physical index the alias points at, or ``None`` if the alias does not exist."""
        try:
            found = self.es.indices.get_alias(name=self.alias)
        except ApiError as exc:
            if exc.meta.status == 404:
                return None
            raise
        names = sorted(found.body)
        return names[-1] if names else None

    def ensure(self) -> str:
        """Create ``<alias>-v1`` and the alias if missing; return the physical index name."""
        current = self.physical_index()
        if current is not None:
            return current
        name = f"{self.alias}-v1"
        if not self.es.indices.exists(index=name):
            self.create_physical(name)
        self.es.indices.update_aliases(actions=[{"add": {"index": name, "alias": self.alias}}])
        return name

    def create_physical(self, name: str) -> None:
        """Create physical index ``name`` with the current mapping (400 if it exists)."""
        body = mapping(self.dims, self.settings)
        self.es.indices.create(index=name, settings=body["settings"], mappings=body["mappings"])

    def next_physical_name(self) -> str:
        """``<alias>-v<N+1>`` where N is the highest existing version."""
        existing = self.es.indices.get(index=f"{self.alias}-v*", allow_no_indices=True)
        versions = [
            int(n.rsplit("-v", 1)[1]) for n in existing.body if n.rsplit("-v", 1)[1].isdigit()
        ]
        return f"{self.alias}-v{max(versions, default=0) + 1}"

    def swap_alias(self, new: str) -> str | None:
        """Point the alias at ``new`` atomically; return the index it pointed at before."""
        old = self.physical_index()
        actions: list[dict[str, Any]] = [{"add": {"index": new, "alias": self.alias}}]
        if old is not None and old != new:
            actions.insert(0, {"remove": {"index": old, "alias": self.alias}})
        self.es.indices.update_aliases(actions=actions)
        return old

    def refresh(self) -> None:
        """Make every acknowledged write visible to search."""
        self.es.indices.refresh(index=self.alias)

    # -- writes --------------------------------------------------------------------------------

    def bulk_index(self, docs: Sequence[dict[str, Any]], index: str | None = None) -> BulkReport:
        """Index ``docs`` (each with ``chunk_id``, used as ``_id``) into the alias or ``index``."""
        target = index or self.alias
        actions = [
            {"_op_type": "index", "_index": target, "_id": d["chunk_id"], "_source": d}
            for d in docs
        ]
        return self._bulk(actions)

    def delete_ids(self, ids: Iterable[str]) -> BulkReport:
        """Delete chunks by ``_id``; a missing id counts as deleted."""
        actions = [{"_op_type": "delete", "_index": self.alias, "_id": i} for i in ids]
        return self._bulk(actions)

    def chunk_ids_of(self, tenant: str, doc_id: str) -> list[str]:
        """Every chunk ``_id`` of ``(tenant, doc_id)`` currently in the index."""
        ids: list[str] = []
        query = {"bool": {"filter": [{"term": {"tenant": tenant}}, {"term": {"doc_id": doc_id}}]}}
        for hit in helpers.scan(
            self.es, index=self.alias, query={"query": query, "_source": False}
        ):
            ids.append(hit["_id"])
        return ids

    def _retry_policy(self) -> RetryPolicy:
        """Item retries of a bulk request: ``bulk_max_retries`` after the first attempt, waiting
        ``bulk_initial_backoff_s`` doubled each time (no cap, no jitter)."""
        return RetryPolicy(
            max_attempts=self.settings.bulk_max_retries + 1,
            base_ms=self.settings.bulk_initial_backoff_s * 1000,
            cap_ms=math.inf,
            jitter=False,
        )

    def _bulk(self, actions: list[dict[str, Any]]) -> BulkReport:
        """Send ``actions``; items failing with a transient status are sent again as the retry
        policy allows (on top of ``streaming_bulk``'s own retries of 429s)."""
        report = BulkReport()
        policy = self._retry_policy()
        pending = actions
        attempts = 0
        while pending and not policy.exhausted(attempts):
            if attempts:
                time.sleep(policy.delay_ms(attempts) / 1000)
            attempts += 1
            retry: list[dict[str, Any]] = []
            by_id = {a["_id"]: a for a in pending}
            try:
                results = helpers.streaming_bulk(
                    self.es,
                    pending,
                    chunk_size=self.settings.bulk_chunk_size,
                    raise_on_error=False,
                    raise_on_exception=False,
                    max_retries=self.settings.bulk_max_retries,
                    initial_backoff=self.settings.bulk_initial_backoff_s,
                )
                for ok, item in results:
                    op, info = next(iter(item.items()))
                    _id = str(info.get("_id"))
                    raw_status = info.get("status", 0)
                    status = raw_status if isinstance(raw_status, int) else 0
                    if ok or (op == "delete" and status == 404):
                        report.succeeded.append(_id)
                    elif status in TRANSIENT_STATUSES or status == 0:
                        retry.append(by_id[_id])
                    else:
                        report.failed[_id] = _reason(info)
            except TransportError as exc:
                raise TransientError(f"elasticsearch bulk failed: {exc}") from exc
            pending = retry
        for action in pending:
            report.failed[action["_id"]] = "transient failure persisted after retries"
        return report


def segment_stats(es: Elasticsearch, alias: str) -> dict[str, int]:
    """``{"segments", "docs", "deleted_docs"}`` of the indices behind ``alias`` (Lucene
    segments and documents deleted but not yet merged away, both of which cost search time);
    empty if the alias does not exist."""
    if not es.indices.exists_alias(name=alias):
        return {}
    body: Any = es.cat.segments(index=alias, format="json", h="docs.count,docs.deleted").body
    rows: list[dict[str, str]] = list(body)
    return {
        "segments": len(rows),
        "docs": sum(int(r["docs.count"]) for r in rows),
        "deleted_docs": sum(int(r["docs.deleted"]) for r in rows),
    }


def force_merge(
    es: Elasticsearch, alias: str, max_num_segments: int = 1
) -> tuple[dict[str, int], dict[str, int]]:
    """Force-merge the index behind ``alias`` to ``max_num_segments`` segments, blocking until
    done, then refresh; returns :func:`segment_stats` before and after.

    Raises:
        ValueError: ``max_num_segments`` below 1, or no index behind ``alias``.
    """
    if max_num_segments < 1:
        raise ValueError(f"max_num_segments must be >= 1, got {max_num_segments}")
    before = segment_stats(es, alias)
    if not before:
        raise ValueError(f"no index behind alias {alias}")
    es.options(request_timeout=3600).indices.forcemerge(
        index=alias, max_num_segments=max_num_segments
    )
    es.indices.refresh(index=alias)  # the merged segment becomes the searched one
    return before, segment_stats(es, alias)


def _reason(info: dict[str, Any]) -> str:
    error = info.get("error")
    if isinstance(error, dict):
        return f"{error.get('type', 'error')}: {error.get('reason', '')}"[:500]
    return f"status {info.get('status')}: {error}"[:500]
