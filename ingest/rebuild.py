"""``ragstream index rebuild``: a new physical index from the stored chunk text, then an
atomic alias swap (the elasticsearch-py DSL alias-migration pattern).

Sources are not read again: every chunk's text, title and fields are copied from the current
index (a scroll) and re-embedded with the configured model (identical text hits the embedding
cache when the model did not change; a source that records the same model has its vectors
copied instead), and its client-stemmed BM25 fields and typed metadata (``topics/metadata.py``,
from the stored text of its ``metadata``) are computed. A model change is therefore
``RAGSTREAM_EMBEDDING__...=<new model> ragstream index rebuild``: queries keep being answered
from the old index until the alias swap. Writes that land in the old index while the copy runs
are caught up after the swap: chunks written since the copy started are copied again
(re-embedded with the new model, unless a newer version of their document is already in the
new index), and chunks copied but deleted from the old index meanwhile are deleted from the
new one.

Running pools and writers follow the alias's model (``ingest/model_follow.py``) within
``grace_s``, and write into the physical index of the model that embedded their vectors: a
writer that has not yet seen the swap still writes into the old index. So the catch-up waits
until ``grace_s`` after the swap, then blocks writes on the old index (a late write fails
there with its reason instead of being lost) and copies what was written: the new index only
ever receives vectors of its own model.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from elasticsearch import helpers

from index.schema import EmbeddingModelMismatchError, index_model
from index.stemming import stemmed_fields
from ingest.index import ChunkIndex
from ingest.pipeline import Embeds
from topics.metadata import BOOL_FIELD, DATE_FIELD, NUM_FIELD, typed_fields

COPY_BATCH = 256


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """Old and new physical index, chunks copied, chunks caught up, seconds taken, and whether
    the stored vectors were copied (``True``) or the chunks embedded again."""

    old_index: str | None
    new_index: str
    copied: int
    caught_up: int
    deleted_after_swap: int
    seconds: float
    reused_vectors: bool = False


def rebuild(
    index: ChunkIndex,
    embedder: Embeds,
    *,
    delete_old: bool = False,
    on_progress: Callable[[int], None] | None = None,
    source: str | None = None,
    target: str | None = None,
    swap: bool = True,
    reuse_vectors: bool | None = None,
    grace_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> RebuildReport:
    """Build ``<alias>-v<N+1>`` (or ``target``) from the current index (or ``source``), swap the
    alias, catch up.

    Every chunk's text, title and fields are read from ``source`` with a scroll, its stemmed
    fields (``index/stemming.py``) computed, its vector re-embedded with ``embedder`` (or
    copied), and the new index records ``index.model_id`` and ``index.dims``.

    Args:
        index: the chunk index (alias, settings, the configured model's id and dims).
        embedder: the configured model (through the embedding cache).
        delete_old: delete the source index after the swap.
        on_progress: called with the number of chunks copied so far.
        source: index or alias to copy from; default: the index behind the alias.
        target: physical index to create; default: ``<alias>-v<N+1>``.
        swap: point the alias at the new index and catch up with writes made meanwhile;
            ``False`` builds a side index (for an evaluation) and leaves the alias alone.
        reuse_vectors: copy the stored vectors instead of embedding again. ``None``: when the
            source records the same model as ``index.model_id``. ``True`` for a source that
            records no model but is known to match (its dimension is still checked).
        grace_s: seconds between the swap and the catch-up, for every process to notice the
            swap (``embedding.model_check_interval_s`` plus a write's duration); the old index
            is write-blocked after it (and deleted after the catch-up with ``delete_old``).
        sleep: waits seconds (a fake in tests).

    Raises:
        elasticsearch.ApiError: Elasticsearch refused an operation (nothing is swapped unless
            the copy finished).
        EmbeddingModelMismatchError: ``reuse_vectors`` with a source of another model or
            dimension.
        RuntimeError: a chunk could not be written into the new index.
    """
    t0 = time.perf_counter()
    # A source alias is resolved now: after the swap the alias means the new index.
    old = _concrete(index, source) if source else index.physical_index()
    new = target or index.next_physical_name()
    reuse = False
    if old is not None:
        recorded, dims = index_model(index.es, old)
        if reuse_vectors is None:
            reuse = recorded is not None and recorded == index.model_id and dims == index.dims
        elif reuse_vectors:
            if dims != index.dims or (recorded is not None and recorded != index.model_id):
                raise EmbeddingModelMismatchError(
                    old, recorded, dims, index.model_id or "unrecorded", index.dims
                )
            reuse = True
    index.create_physical(new)
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1))
    copied_ids: set[str] = set()
    copy = functools.partial(_copy, index, embedder, old, new, reuse=reuse, ids=copied_ids)
    copied = copy(since=None, on_progress=on_progress) if old else 0
    caught_up = deleted = 0
    # Searchable before the swap: a search right after it must not meet unrefreshed segments.
    index.es.indices.refresh(index=new)
    if swap:
        index.swap_alias(new)
        swapped_at = time.monotonic()
        if old is not None:
            wait = grace_s - (time.monotonic() - swapped_at)
            if wait > 0:
                sleep(wait)
            index.es.indices.add_block(index=old, block="write")
            index.es.indices.refresh(index=old)
            caught_up = copy(since=started, on_progress=None)
            # Only chunks that came from the old index: writers write into the new one now.
            stale = copied_ids - _ids(index, old)
            if stale:
                index.es.bulk(
                    operations=[{"delete": {"_index": new, "_id": i}} for i in sorted(stale)],
                    refresh=True,
                )
                deleted = len(stale)
            if delete_old:
                index.es.indices.delete(index=old)
    index.es.indices.refresh(index=new)
    return RebuildReport(
        old, new, copied, caught_up, deleted, round(time.perf_counter() - t0, 2), reuse
    )


def _copy(
    index: ChunkIndex,
    embedder: Embeds,
    source: str | None,
    target: str,
    *,
    reuse: bool,
    since: str | None,
    on_progress: Callable[[int], None] | None,
    ids: set[str],
) -> int:
    query: dict[str, Any] = {"match_all": {}}
    if since is not None:
        query = {"range": {"indexed_at": {"gte": since}}}
    total = 0
    for scanned in _batches(index, source, query, with_vectors=reuse):
        # A catch-up never brings back a version a writer has already replaced in the target.
        batch = scanned if since is None else _not_superseded(index, target, scanned)
        if not batch:
            continue
        if not reuse:
            vectors = embedder.embed([_embed_text(d) for d in batch])
            for d, v in zip(batch, vectors, strict=True):
                d["embedding"] = [float(x) for x in v]
        for d in batch:
            d.update(stemmed_fields(d.get("title"), str(d.get("text") or "")))
            # Typed metadata from the stored text (topics/metadata.py), also for chunks
            # written before there was any.
            for typed in (NUM_FIELD, BOOL_FIELD, DATE_FIELD):
                d.pop(typed, None)
            d.update(typed_fields(d.get("metadata") or {}))
        report = index.bulk_index(batch, index=target)
        if report.failed:
            first = next(iter(report.failed.items()))
            raise RuntimeError(f"rebuild: {len(report.failed)} chunk(s) not written, e.g. {first}")
        total += len(batch)
        ids.update(str(d["chunk_id"]) for d in batch)
        if on_progress is not None:
            on_progress(total)
    return total


def _concrete(index: ChunkIndex, name: str) -> str:
    """The one index ``name`` (an index or an alias) stands for; ``name`` itself when it
    stands for several (a pattern: read as given)."""
    found = sorted(index.es.indices.get(index=name).body)
    return found[0] if len(found) == 1 else name


def _not_superseded(
    index: ChunkIndex, target: str, batch: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The chunks of ``batch`` whose document has no newer version in ``target`` (a writer that
    followed the swap may have written one there already)."""
    newest: dict[tuple[str, str], int] = {}
    query = {"bool": {"filter": [{"terms": {"doc_id": sorted({d["doc_id"] for d in batch})}}]}}
    body = {"query": query, "_source": ["tenant", "doc_id", "version"]}
    for hit in helpers.scan(index.es, index=target, query=body, size=1000):
        src = hit["_source"]
        key = (src["tenant"], src["doc_id"])
        newest[key] = max(newest.get(key, 0), int(src["version"]))
    return [d for d in batch if int(d["version"]) >= newest.get((d["tenant"], d["doc_id"]), 0)]


def _batches(
    index: ChunkIndex, source: str | None, query: dict[str, Any], *, with_vectors: bool
) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    body: dict[str, Any] = {"query": query}
    if not with_vectors:
        body["_source"] = {"excludes": ["embedding"]}
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
