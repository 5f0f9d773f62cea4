"""A model change rolled out by ``index rebuild`` while the retrieval pool answers: the real
retrieval components and a following ingest writer switch from all-MiniLM-L6-v2 to
bge-small-en-v1.5 (both int8 ONNX, both 384-d) within ``model_check_interval_s`` of the swap,
every query is answered meanwhile, and the new index only holds bge vectors."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from elasticsearch import Elasticsearch

from index.schema import index_model
from ingest.embedding import CachedEmbedder, EmbeddingCache
from ingest.factory import build_chunker, build_embedder
from ingest.index import ChunkIndex
from ingest.model_follow import ModelFollower
from ingest.onnx_embedding import OnnxEmbedder, get_onnx_model
from ingest.ops import IngestOp
from ingest.pipeline import IngestPipeline
from ingest.rebuild import rebuild
from ingest.registry import DocumentRegistry
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import Settings
from topics.queries import QueryRequest
from topics.retrieved import RetrievedCandidates
from workers.pools.components import build_retrieval_components
from workers.pools.retrieval import retrieval_handler
from workers.runtime.handler import Emit

MODEL_A, MODEL_B = "all-minilm-l6-v2-q", "bge-small-en-v15-q"
INTERVAL_S = 0.3
DOCS = {
    "locks": "# Locks\n\nA session blocked on a lock waits for deadlock_timeout.",
    "vacuum": "# Vacuum\n\nVACUUM reclaims storage occupied by dead tuples.",
    "paths": "# Paths\n\nos.getcwd returns the current working directory.",
}
QUESTION = "How is the disk space of dead rows given back?"


def _installed(settings: Settings, name: str) -> bool:
    folder = settings.infra.local_dir / "models" / name
    return (folder / "model.onnx").is_file() and (folder / "tokenizer.json").is_file()


@pytest.fixture
def switch_settings(settings: Settings, unique_name: Callable[[str], str]) -> Iterator[Settings]:
    for name in (MODEL_A, MODEL_B):
        if not _installed(settings, name):
            pytest.skip(
                f"ONNX model {name} not installed in {settings.infra.local_dir / 'models'} "
                f"(`ragstream infra models install {name}`)"
            )
    alias = unique_name("switch")
    embedding = settings.embedding.model_copy(
        update={
            "backend": "onnx",
            "onnx_model": MODEL_A,
            "onnx_dir": None,
            "model_check_interval_s": INTERVAL_S,
            "cache_key_prefix": f"{alias}:emb:",
        }
    )
    es_settings = settings.elasticsearch.model_copy(update={"index_alias": alias})
    yield settings.model_copy(update={"embedding": embedding, "elasticsearch": es_settings})
    es = Elasticsearch(settings.elasticsearch.url)
    es.indices.delete(index=f"{alias}-v*", ignore_unavailable=True)
    es.close()


def _writer(
    settings: Settings, es: Elasticsearch, tmp: Path
) -> tuple[IngestPipeline, ModelFollower]:
    """The ingest side as ``build_pipeline`` makes it, over a private SQLite registry."""
    embedder = build_embedder(settings)
    index = ChunkIndex(es, settings.elasticsearch, embedder.dim, embedder.model_id)
    index.ensure()
    follower = ModelFollower.from_settings(settings, embedder, es, role="passage")
    assert follower.start()
    url = f"sqlite:///{tmp / 'meta.db'}"
    upgrade_head(url)
    registry = DocumentRegistry(make_session_factory(make_engine(url)))
    return IngestPipeline(build_chunker(settings), follower, index, registry), follower


def _ingest(pipeline: IngestPipeline, tenant: str, doc_id: str) -> None:
    text = DOCS[doc_id.split("-", maxsplit=1)[0]]
    [[outcome]] = pipeline.apply([IngestOp(tenant, doc_id, data=text.encode(), filename="a.md")])
    assert outcome.status == "indexed", outcome.error


def _cosines(es: Elasticsearch, index: str, model: CachedEmbedder) -> dict[str, float]:
    """Per chunk of ``index``: cosine of its stored vector and ``model``'s vector of its text."""
    hits = es.search(index=index, size=100, query={"match_all": {}})["hits"]["hits"]
    out = {}
    for h in hits:
        src = h["_source"]
        title = src.get("embed_title") or ""
        text = f"{title}\n{src['text']}" if title else src["text"]
        expected = model.embed([text])[0]
        out[src["doc_id"]] = float(np.dot(np.asarray(src["embedding"]), expected))
    return out


def test_a_rebuild_to_another_model_is_followed_while_every_query_is_answered(
    switch_settings: Settings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    settings = switch_settings
    alias, tenant = settings.elasticsearch.index_alias, unique_name("tenant")
    es = Elasticsearch(settings.elasticsearch.url, request_timeout=60)
    pipeline, writer = _writer(settings, es, tmp_path)
    for doc_id in ("locks", "vacuum", "paths"):
        _ingest(pipeline, tenant, doc_id)
    old = f"{alias}-v1"
    model_a = writer.model_id

    components = build_retrieval_components(settings)
    pool = components[0]
    handler = retrieval_handler(*components, pool=settings.pools.retrieval)
    answers: list[tuple[str, str | None, Any]] = []  # (model id, index searched, outcome)
    stop = threading.Event()

    def ask_forever() -> None:
        while not stop.is_set():
            deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
            request = QueryRequest(tenant=tenant, query=QUESTION, deadline=deadline)
            try:
                [emit] = handler.fn([request])
                assert isinstance(emit, Emit)
                answers.append((pool.model_id, pool.index, emit.event))
            except Exception as exc:  # any failure is a failed query here
                answers.append((pool.model_id, pool.index, exc))
            time.sleep(0.02)

    asker = threading.Thread(target=ask_forever, daemon=True)
    asker.start()
    try:
        # The new model, as `RAGSTREAM_EMBEDDING__ONNX_MODEL=... ragstream index rebuild` runs it.
        b_settings = settings.model_copy(
            update={"embedding": settings.embedding.model_copy(update={"onnx_model": MODEL_B})}
        )
        model_b = build_embedder(b_settings)
        new_index = ChunkIndex(es, settings.elasticsearch, model_b.dim, model_b.model_id)
        written_during: list[int] = []

        def write_during_copy(copied: int) -> None:  # a writer still on model A, old index
            if not written_during:
                written_during.append(copied)
                _ingest(pipeline, tenant, "locks-during")

        report = rebuild(
            new_index, model_b, on_progress=write_during_copy, grace_s=INTERVAL_S + 0.5
        )
        _ingest(pipeline, tenant, "paths-after")  # the writer follows the swap: model B
        deadline = time.monotonic() + 10
        while pool.model_id != model_b.model_id and time.monotonic() < deadline:
            time.sleep(0.05)
        n_before_last = len(answers)
        while len(answers) < n_before_last + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        asker.join(timeout=30)

    new = report.new_index
    assert (report.old_index, new) == (old, f"{alias}-v2") and report.caught_up >= 1
    assert index_model(es, alias) == (model_b.model_id, 384)
    # Every query was answered, from the index of the model that embedded it.
    failed = [a for a in answers if not isinstance(a[2], RetrievedCandidates)]
    assert not failed, failed[:3]
    assert {(m, i) for m, i, _ in answers} <= {(model_a, old), (model_b.model_id, new)}
    assert (model_a, old) in {(m, i) for m, i, _ in answers}
    for _, _, retrieved in answers:
        top = retrieved.candidates[0]
        assert top.doc_id == "vacuum" and top.knn_rank == 1, retrieved.candidates
    # The pool now embeds questions with bge (its query instruction included).
    assert (pool.model_id, pool.index) == (model_b.model_id, new)
    b_query = OnnxEmbedder(
        settings.infra.local_dir / "models" / MODEL_B, get_onnx_model(MODEL_B), role="query"
    )
    assert float(np.dot(pool.embed([QUESTION])[0], b_query.embed([QUESTION])[0])) > 0.99
    assert writer.model_id == model_b.model_id and writer.index == new
    # The new index holds bge vectors only: copied, caught up (written during the copy with
    # MiniLM, re-embedded) and written after the swap by the following writer.
    cos = _cosines(es, new, CachedEmbedder(model_b.inner, EmbeddingCache(None)))
    assert set(cos) == {"locks", "vacuum", "paths", "locks-during", "paths-after"}
    assert min(cos.values()) > 0.99, cos
    settings_old = es.indices.get_settings(index=old)[old]["settings"]["index"]
    assert settings_old["blocks"]["write"] == "true"  # a late old-model write fails, not lands
    es.close()
