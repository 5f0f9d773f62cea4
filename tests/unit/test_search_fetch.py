"""What a question's searches ask Elasticsearch for, and the vector index they search
(issue 37): no vector and no field only Elasticsearch reads ever comes back in a hit, and the
index's HNSW options are the ones the benchmarks measured (docs/benchmarks/index.md)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from index.schema import mapping
from ragstream.settings import ElasticsearchSettings, RetrievalSettings
from topics.queries import QueryRequest
from workers.retrieval.hybrid import HybridRetriever

#: Fields of a chunk no stage after retrieval reads: the vector, the stemmed copies, metadata.
NEVER_FETCHED = {"embedding", "text_stemmed", "title_stemmed", "metadata"}


def _request(**kw: Any) -> QueryRequest:
    now = dt.datetime.now(dt.UTC)
    return QueryRequest(
        tenant="acme", query="How do I vacuum a table?", deadline=now + dt.timedelta(minutes=1),
        created_at=now, **kw,
    )  # fmt: skip


def test_neither_search_fetches_a_vector_or_a_field_only_elasticsearch_reads() -> None:
    retriever = HybridRetriever(object(), "chunks", RetrievalSettings())  # type: ignore[arg-type]
    vectors = np.zeros((2, 384), dtype=np.float32)
    lines = retriever._searches([_request(), _request(top_n=40)], vectors)
    bodies = lines[1::2]
    assert len(bodies) == 4 and all(h == {"index": "chunks"} for h in lines[0::2])
    for body in bodies:
        source = body["_source"]
        assert set(source) == {"excludes"}, "a search names what it leaves out, never fetches all"
        assert set(source["excludes"]) >= NEVER_FETCHED
        assert "fields" not in body and "docvalue_fields" not in body and "highlight" not in body
    bm25, knn = bodies[0], bodies[1]
    assert "query" in bm25 and "knn" in knn and "query" not in knn
    s = RetrievalSettings()
    assert (bm25["size"], knn["size"], knn["knn"]["k"]) == (s.bm25_size, s.knn_k, s.knn_k)
    assert knn["knn"]["num_candidates"] == s.knn_num_candidates
    assert bodies[3]["knn"]["k"] == 40 and bodies[2]["size"] == 40  # top_n above the lists


def test_the_vector_index_is_float_hnsw_with_the_measured_options() -> None:
    es = ElasticsearchSettings()
    field = mapping(384, es)["mappings"]["properties"]["embedding"]
    assert field["type"] == "dense_vector" and field["dims"] == 384
    assert field["similarity"] == "cosine" and field["index"] is True
    assert field["index_options"] == {"type": "hnsw", "m": 16, "ef_construction": 100}
    assert (es.hnsw_m, es.hnsw_ef_construction) == (16, 100)
