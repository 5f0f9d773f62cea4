"""The chunk index in Elasticsearch: mapping, alias over versioned physical indices, bulk writes.

Searches and writes go through an alias (``settings.index_alias``) that points at one physical
index ``<alias>-v<N>``. A model or mapping change builds ``-v<N+1>`` and swaps the alias in
one ``_aliases`` call (the elasticsearch-py DSL "alias migration" pattern), so readers never
see a half-built index.

Every bulk item is accounted for: transient item failures (429, 5xx:
:func:`~ragstream.errors.transient_http_status`) are retried with exponential back-off, by one
layer (:meth:`ChunkIndex._bulk`, under the shared :class:`~ragstream.retry.RetryPolicy`;
``streaming_bulk`` is told not to retry on its own); any other item failure is returned as a
failure of its document. Nothing is silently dropped.
"""

from __future__ import annotations

import math
import time
from collections import Counter as CounterOf
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from elasticsearch import ApiError, Elasticsearch, TransportError, helpers
from prometheus_client import Counter

from index.schema import (
    ACL_FIELDS,
    DEFINITION_FIELDS,
    IGNORE_DYNAMIC_BEYOND_LIMIT,
    STEMMED_FIELDS,
    TYPED_METADATA_FIELDS,
    TYPED_METADATA_TEMPLATES,
    mapping,
)
from ragstream.errors import TransientError, transient_http_status
from ragstream.retry import RetryPolicy
from ragstream.settings import ElasticsearchSettings
from topics.metadata import BOOL_FIELD, DATE_FIELD, NUM_FIELD

log = structlog.get_logger(__name__)


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

    def __init__(
        self,
        es: Elasticsearch,
        settings: ElasticsearchSettings,
        dims: int,
        model_id: str | None = None,
    ) -> None:
        self.es = es
        self.settings = settings
        self.alias = settings.index_alias
        self.dims = dims
        self.model_id = model_id

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
            self.add_missing_fields(current)
            return current
        name = f"{self.alias}-v1"
        if not self.es.indices.exists(index=name):
            self.create_physical(name)
        self.es.indices.update_aliases(actions=[{"add": {"index": name, "alias": self.alias}}])
        return name

    def create_physical(self, name: str) -> None:
        """Create physical index ``name`` with the current mapping, recording ``model_id`` and
        ``dims`` (400 if it exists)."""
        body = mapping(self.dims, self.settings, self.model_id)
        self.es.indices.create(index=name, settings=body["settings"], mappings=body["mappings"])

    def add_missing_fields(self, name: str) -> list[str]:
        """Add the :data:`STEMMED_FIELDS`, :data:`ACL_FIELDS`, :data:`DEFINITION_FIELDS` and
        :data:`TYPED_METADATA_FIELDS` (with their templates) an older index lacks (a mapping
        addition, allowed on a live index; chunks written before stay without the stemmed
        fields and the typed metadata until ``index rebuild`` (or until their document is
        indexed again), and without readers: readable by the whole tenant; a document gets its
        definition entries when it is next indexed).

        Returns:
            The fields added.
        """
        current = self.es.indices.get_mapping(index=name).body
        mappings = next(iter(current.values()))["mappings"]
        properties = mappings.get("properties", {})
        wanted = {**STEMMED_FIELDS, **ACL_FIELDS, **DEFINITION_FIELDS, **TYPED_METADATA_FIELDS}
        missing = {k: v for k, v in wanted.items() if k not in properties}
        if missing:
            typed = {NUM_FIELD, BOOL_FIELD, DATE_FIELD} & set(missing)
            if typed:
                # Templates first: a chunk written between the two calls must find them.
                have = {n for t in mappings.get("dynamic_templates", []) for n in t}
                templates = [t for t in TYPED_METADATA_TEMPLATES if not set(t) & have]
                self.es.indices.put_settings(
                    index=name, settings={IGNORE_DYNAMIC_BEYOND_LIMIT: True}
                )
                self.es.indices.put_mapping(
                    index=name,
                    dynamic_templates=[*mappings.get("dynamic_templates", []), *templates],
                )
            self.es.indices.put_mapping(index=name, properties=missing)
            log.info("index_fields_added", index=name, fields=sorted(missing))
        return sorted(missing)

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

    def delete_ids(self, ids: Iterable[str], index: str | None = None) -> BulkReport:
        """Delete chunks by ``_id`` from the alias or ``index``; a missing id counts as deleted."""
        target = index or self.alias
        actions = [{"_op_type": "delete", "_index": target, "_id": i} for i in ids]
        return self._bulk(actions)

    def set_readers(self, ids: list[str], readers: tuple[str, ...] | None) -> dict[str, str]:
        """Set ``principals`` of the chunks ``ids`` to ``readers`` (``None``: remove them, so
        everyone of the tenant reads them) with bulk partial updates through the alias; a
        chunk gone meanwhile counts as done. Visible to search after :meth:`refresh`.

        Returns:
            ``{_id: reason}`` of chunks that could not be updated (empty when all were).

        Raises:
            TransientError: Elasticsearch unreachable.
        """
        value = list(readers) if readers is not None else None
        actions = [
            {"_op_type": "update", "_index": self.alias, "_id": i, "doc": {"principals": value}}
            for i in ids
        ]
        return self._bulk(actions).failed

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
        a uniform random time up to ``bulk_initial_backoff_s`` doubled each time ("full
        jitter", :class:`~ragstream.retry.RetryPolicy`), so writers that Elasticsearch pushed
        back together do not all come back at the same instant."""
        return RetryPolicy(
            max_attempts=self.settings.bulk_max_retries + 1,
            base_ms=self.settings.bulk_initial_backoff_s * 1000,
            cap_ms=math.inf,
            jitter=True,
        )

    def _bulk(self, actions: list[dict[str, Any]]) -> BulkReport:
        """Send ``actions``; items failing with a transient status are sent again as the retry
        policy allows. This is the only retry layer: ``streaming_bulk`` runs with
        ``max_retries=0``, so an item is sent at most ``bulk_max_retries + 1`` times."""
        report = BulkReport()
        policy = self._retry_policy()
        pending = actions
        attempts = 0
        while pending and not policy.exhausted(attempts):
            if attempts:
                time.sleep(policy.delay_ms(attempts) / 1000)
            attempts += 1
            retry: list[dict[str, Any]] = []
            statuses: CounterOf[str] = CounterOf()
            by_id = {a["_id"]: a for a in pending}
            try:
                results = helpers.streaming_bulk(
                    self.es,
                    pending,
                    chunk_size=self.settings.bulk_chunk_size,
                    raise_on_error=False,
                    raise_on_exception=False,
                    max_retries=0,  # retried by this loop, never by the helper too
                )
                for ok, item in results:
                    op, info = next(iter(item.items()))
                    _id = str(info.get("_id"))
                    raw_status = info.get("status", 0)
                    status = raw_status if isinstance(raw_status, int) else 0
                    if ok or (op in ("delete", "update") and status == 404):
                        report.succeeded.append(_id)
                    elif status == 0 or transient_http_status(status):
                        retry.append(by_id[_id])
                        statuses[str(status) if status else "none"] += 1
                    else:
                        report.failed[_id] = _reason(info)
            except TransportError as exc:
                raise TransientError(f"elasticsearch bulk failed: {exc}") from exc
            pending = retry
            _note_retries(statuses, attempts, exhausted=policy.exhausted(attempts))
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


BULK_ITEMS_RETRIED = Counter(
    "ragstream_es_bulk_items_retried_total",
    "Bulk items Elasticsearch answered with a transient status (429, 5xx, or none), by status; "
    "each is sent again while ChunkIndex._bulk's retry policy allows.",
    ["status"],
)
BULK_ITEMS_GAVE_UP = Counter(
    "ragstream_es_bulk_items_exhausted_total",
    "Bulk items still failing transiently when the retries ran out (they fail their document).",
)


def _note_retries(statuses: CounterOf[str], attempt: int, *, exhausted: bool) -> None:
    """Count and log the items of one bulk attempt that failed transiently (``statuses``: how
    many per status); ``exhausted``: no retry is left for them."""
    if not statuses:
        return
    for status, n in statuses.items():
        BULK_ITEMS_RETRIED.labels(status).inc(n)
    total = sum(statuses.values())
    if exhausted:
        BULK_ITEMS_GAVE_UP.inc(total)
        log.error("es.bulk_retries_exhausted", attempt=attempt, items=total,
                  statuses=dict(statuses))  # fmt: skip
    else:
        log.warning("es.bulk_items_retried", attempt=attempt, items=total,
                    statuses=dict(statuses))  # fmt: skip
