"""``ragstream index rebuild`` with a model change, a side index, and the stemmed BM25 fields."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from index.schema import EmbeddingModelMismatchError, check_index_model, index_model
from ingest.index import ChunkIndex
from ingest.ops import IngestOp
from ingest.rebuild import rebuild
from ragstream.settings import Settings
from tests.integration.ingestkit import Kit
from workers.retrieval.query import Bm25Boosts, bm25_query, es_filters

DOCS = (
    "# Locks\n\nA session blocked on a lock waits for deadlock_timeout.",
    "# Vacuum\n\nVACUUM reclaims storage occupied by dead tuples.",
    "# Paths\n\nos.getcwd returns the current working directory.",
)


class OtherModel:
    """A second "model": the kit's vectors negated (still unit length), under its own id."""

    model_id = "other-model@1"

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts = 0

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        self.texts += len(texts)
        return -np.asarray(self.inner.embed(texts), dtype=np.float32)


def _load(kit: Kit) -> int:
    kit.pipeline.apply(
        [
            IngestOp("acme", f"d{i}", data=text.encode(), content_type="markdown")
            for i, text in enumerate(DOCS)
        ]
    )
    kit.index.refresh()
    return int(kit.es.count(index=kit.index.alias)["count"])


def _hits(es: Elasticsearch, index: str, body: dict[str, Any]) -> list[str]:
    """The doc ids a search body finds, through ``_msearch`` as the retriever sends it."""
    resp = es.msearch(searches=[{"index": index}, body])["responses"][0]
    return [h["_source"]["doc_id"] for h in resp["hits"]["hits"]]


def _search_forever(es: Elasticsearch, alias: str, stop: threading.Event, out: list[int]) -> None:
    while not stop.is_set():
        out.append(len(es.search(index=alias, query={"match": {"text": "vacuum"}})["hits"]["hits"]))


def test_a_model_change_reembeds_into_the_next_version_and_swaps_while_queries_answer(
    kit: Kit, settings: Settings
) -> None:
    before = _load(kit)
    old = kit.index.physical_index()
    assert index_model(kit.es, kit.index.alias) == (kit.embedder.model_id, kit.index.dims)
    other = OtherModel(kit.embedder)
    new_index = ChunkIndex(kit.es, kit.index.settings, other.dim, other.model_id)
    stop, answered = threading.Event(), []
    reader = Elasticsearch(settings.elasticsearch.url)
    searcher = threading.Thread(
        target=_search_forever, args=(reader, kit.index.alias, stop, answered)
    )
    searcher.start()
    try:
        report = rebuild(new_index, other)
    finally:
        stop.set()
        searcher.join(timeout=30)
        reader.close()
    assert answered and all(n == 1 for n in answered)  # every search before/after found it
    assert report.old_index == old and report.new_index == f"{kit.index.alias}-v2"
    assert not report.reused_vectors and report.copied == before
    # chunks written in the second before the copy started are copied again after the swap
    assert other.texts == before + report.caught_up
    assert kit.index.physical_index() == report.new_index
    assert index_model(kit.es, kit.index.alias) == ("other-model@1", other.dim)
    check_index_model(kit.es, kit.index.alias, "other-model@1", other.dim)
    with pytest.raises(EmbeddingModelMismatchError, match="other-model@1"):
        check_index_model(kit.es, kit.index.alias, kit.embedder.model_id, kit.index.dims)
    doc = kit.chunks("acme", "d0")[0]
    assert doc["text_stemmed"] == "session block lock wait deadlock timeout"
    assert doc["title_stemmed"] == "lock"


def test_a_side_index_copies_the_vectors_and_leaves_the_alias(
    kit: Kit, unique_name: Callable[[str], str]
) -> None:
    before = _load(kit)
    old = kit.index.physical_index()
    sent = kit.counting.sent
    target = unique_name("side")
    try:
        report = rebuild(kit.index, kit.embedder, source=kit.index.alias, target=target, swap=False)
        assert report.reused_vectors and kit.counting.sent == sent  # nothing embedded again
        assert kit.index.physical_index() == old
        assert int(kit.es.count(index=target)["count"]) == before
        assert index_model(kit.es, target) == (kit.embedder.model_id, kit.index.dims)
        # "blocking" finds "blocked" only through the stemmed field
        filters = es_filters("acme", [])
        stem, plain = Bm25Boosts(), Bm25Boosts(title=2.0, stemmed=0.0)
        assert _hits(kit.es, target, bm25_query("blocking", filters, 5, plain)) == []
        assert _hits(kit.es, target, bm25_query("blocking", filters, 5, stem)) == ["d0"]
        assert _hits(kit.es, target, bm25_query("os.getcwd", filters, 5, stem))[0] == "d2"
    finally:
        kit.es.indices.delete(index=target, ignore_unavailable=True)


def test_the_catch_up_never_brings_back_a_version_replaced_after_the_swap(kit: Kit) -> None:
    """d0 is updated in the old index during the copy (v2), then again after the swap, in the
    new index (v3, as a writer that followed the swap writes): the catch-up copies what changed
    in the old index but not v2, and the copied v1 is deleted; the old index is write-blocked."""
    _load(kit)
    old = kit.index.physical_index()
    assert old is not None

    def update(text: str) -> None:
        op = IngestOp("acme", "d0", data=text.encode(), content_type="markdown")
        [[outcome]] = kit.pipeline.apply([op])
        assert outcome.status == "indexed"

    def during_copy(copied: int) -> None:
        update("# Locks\n\nLock waits end after lock_timeout.")  # v2, into the old index

    waited: list[float] = []

    def after_swap(seconds: float) -> None:  # the grace: writers now write into the new index
        waited.append(seconds)
        update("# Locks\n\nAdvisory locks are held until released.")  # v3

    report = rebuild(kit.index, kit.embedder, on_progress=during_copy, grace_s=5, sleep=after_swap)
    assert waited and 0 < waited[0] <= 5
    kit.index.refresh()
    chunks = kit.chunks("acme", "d0")
    assert {c["version"] for c in chunks} == {3}, chunks
    assert "Advisory" in chunks[0]["text"]
    assert report.deleted_after_swap >= 1  # v1, copied before the update deleted it
    blocks = kit.es.indices.get_settings(index=old)[old]["settings"]["index"]["blocks"]
    assert blocks["write"] == "true"
