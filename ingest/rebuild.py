"""``ragstream index rebuild``: a new physical index from the stored chunk text, then an
atomic alias swap (the elasticsearch-py DSL alias-migration pattern).

Sources are not read again: every chunk's text, title and fields are copied from the current
index and re-embedded with the current model (identical text hits the embedding cache when the
model did not change). Writes that land in the old index while the copy runs are caught up
after the swap: chunks written since the copy started are copied again, and chunks deleted
from the old index meanwhile are deleted from the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from elasticsearch import helpers

from ingest.index import ChunkIndex
from ingest.pipeline import Embeds

COPY_BATCH = 256


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """Old and new physical index, chunks copied, chunks caught up, and seconds taken."""

    old_index: str | None
    new_index: str
    copied: int
    caught_up: int
    deleted_after_swap: int
    seconds: float


def rebuild(
    index: ChunkIndex,
    embedder: Embeds,
    *,
    delete_old: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> RebuildReport:
    """Build ``<alias>-v<N+1>`` from the current index, swap the alias, catch up.

    Raises:
        elasticsearch.ApiError: Elasticsearch refused an operation (nothing is swapped unless
            the copy finished).
        RuntimeError: a chunk could not be written into the new index.
    """
    t0 = time.perf_counter()
    old = index.physical_index()
    new = index.next_physical_name()
    index.create_physical(new)
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1))
    copied = _copy(index, embedder, old, new, since=None, on_progress=on_progress) if old else 0
    index.swap_alias(new)
    caught_up = deleted = 0
    if old is not None:
        caught_up = _copy(index, embedder, old, new, since=started, on_progress=None)
        stale = _ids(index, new) - _ids(index, old)
        if stale:
            index.es.bulk(
                operations=[{"delete": {"_index": new, "_id": i}} for i in sorted(stale)],
                refresh=True,
            )
            deleted = len(stale)
        if delete_old:
            index.es.indices.delete(index=old)
    index.es.indices.refresh(index=new)
    return RebuildReport(old, new, copied, caught_up, deleted, round(time.perf_counter() - t0, 2))


def _copy(
    index: ChunkIndex,
    embedder: Embeds,
    source: str | None,
    target: str,
    *,
    since: str | None,
    on_progress: Callable[[int], None] | None,
) -> int:
    query: dict[str, Any] = {"match_all": {}}
    if since is not None:
        query = {"range": {"indexed_at": {"gte": since}}}
    total = 0
    for batch in _batches(index, source, query):
        texts = [_embed_text(d) for d in batch]
        vectors = embedder.embed(texts)
        for d, v in zip(batch, vectors, strict=True):
            d["embedding"] = [float(x) for x in v]
        report = index.bulk_index(batch, index=target)
        if report.failed:
            first = next(iter(report.failed.items()))
            raise RuntimeError(f"rebuild: {len(report.failed)} chunk(s) not written, e.g. {first}")
        total += len(batch)
        if on_progress is not None:
            on_progress(total)
    return total


def _batches(
    index: ChunkIndex, source: str | None, query: dict[str, Any]
) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    body = {"query": query, "_source": {"excludes": ["embedding"]}}
    for hit in helpers.scan(index.es, index=source, query=body, size=500):
        batch.append(hit["_source"])
        if len(batch) >= COPY_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _embed_text(doc: dict[str, Any]) -> str:
    """The text the chunker embedded: its (token-budgeted) title line and the chunk text."""
    title = str(doc.get("embed_title") or "")
    return f"{title}\n{doc['text']}" if title else str(doc["text"])


def _ids(index: ChunkIndex, name: str) -> set[str]:
    body = {"query": {"match_all": {}}, "_source": False}
    return {h["_id"] for h in helpers.scan(index.es, index=name, query=body, size=1000)}
