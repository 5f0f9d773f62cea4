"""Following the embedding model the index alias records (``ingest/model_follow.py``): a fake
clock and a fake alias drive re-reads, switches, a model that cannot be built, and what the
retrieval pool and the ingest pipeline make of each."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from index.schema import EmbeddingModelMismatchError, EmbeddingModelUnavailableError
from ingest.embedding import CachedEmbedder, Embedder, EmbeddingCache
from ingest.index import BulkReport
from ingest.model_follow import AliasModel, ModelFollower, model_builder
from ingest.onnx_embedding import ONNX_MODELS
from ingest.ops import IngestOp
from ingest.pipeline import IngestPipeline
from ingest.types import Chunk, ParsedDocument
from ragstream.settings import PoolSettings, Settings
from topics.queries import QueryRequest
from topics.responses import ErrorCode, QueryResponse
from workers.errors import code_of
from workers.pools.retrieval import retrieval_handler
from workers.runtime.handler import Emit

A, B = "model-a@1", "model-b@2"


class FakeModel:
    """A model whose vectors say which model made them: row ``[k, 0, 0, 0]`` (unit length)
    with ``k`` its ``sign``; counts the texts it embedded."""

    def __init__(self, model_id: str, sign: float, dim: int = 4) -> None:
        self.model_id = model_id
        self.sign = sign
        self.dim = dim
        self.texts = 0
        self.warmed = False

    def warm_up(self) -> None:
        self.warmed = True

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        self.texts += len(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = self.sign
        return out


class Alias:
    """The alias as the follower reads it; counts the reads."""

    def __init__(self, index: str | None, model_id: str | None, dims: int | None = 4) -> None:
        self.now = AliasModel(index, model_id, dims)
        self.reads = 0

    def set(self, index: str | None, model_id: str | None, dims: int | None = 4) -> None:
        self.now = AliasModel(index, model_id, dims)

    def __call__(self) -> AliasModel:
        self.reads += 1
        return self.now


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _follower(
    alias: Alias, models: dict[str, FakeModel], clock: Clock, interval_s: float = 10.0
) -> ModelFollower:
    first = CachedEmbedder(models[A], EmbeddingCache(None, lru_size=100))

    def build(model_id: str) -> Embedder | None:
        return models.get(model_id)

    return ModelFollower(
        first,
        read=alias,
        build=build,
        alias="chunks",
        interval_s=interval_s,
        role="query",
        clock=clock,
    )


def _switches(outcome: str) -> float:
    labels = {"role": "query", "outcome": outcome}
    return REGISTRY.get_sample_value("ragstream_embedding_model_switches_total", labels) or 0.0


def test_the_alias_is_read_at_most_once_per_interval() -> None:
    alias, clock = Alias("chunks-v1", A), Clock()
    follower = _follower(alias, {A: FakeModel(A, 1.0)}, clock)
    follower.embed(["x"])
    clock.t += 9.9
    follower.embed(["y"])
    assert alias.reads == 1
    clock.t += 0.1
    follower.embed(["z"])
    assert alias.reads == 2
    assert follower.index == "chunks-v1" and follower.model_id == A


@pytest.fixture
def fresh_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """structlog as a test that captures logs needs it, whatever an earlier test configured:
    an in-process CLI run sets a WARNING-filtering logger class and caches the loggers it
    used, and ``capture_logs`` would see no info event."""
    import ingest.model_follow as model_follow

    saved = structlog.get_config()
    structlog.reset_defaults()
    monkeypatch.setattr(model_follow, "log", structlog.get_logger(model_follow.__name__))
    yield
    structlog.configure(**saved)


@pytest.mark.usefixtures("fresh_logs")
def test_a_swap_to_a_buildable_model_switches_within_the_interval() -> None:
    alias, clock = Alias("chunks-v1", A), Clock()
    a, b = FakeModel(A, 1.0), FakeModel(B, -1.0)
    follower = _follower(alias, {A: a, B: b}, clock)
    switched: list[str] = []
    follower.on_switch.append(lambda e: switched.append(e.model_id))
    assert follower.embed(["q"])[0, 0] == 1.0
    alias.set("chunks-v2", B)  # `index rebuild` swapped the alias
    assert follower.embed(["q"])[0, 0] == 1.0  # not yet re-read: still A, still A's index
    assert follower.index == "chunks-v1"
    before = _switches("switched")
    clock.t += 10
    with capture_logs() as logs:
        vectors, model_id, index = follower.embed_for_index(["q"])
    assert vectors[0, 0] == -1.0 and (model_id, index) == (B, "chunks-v2")
    assert b.warmed and b.texts == 1  # the cached A vector of "q" was not served for B
    assert switched == [B] and _switches("switched") == before + 1
    [event] = [e for e in logs if e["event"] == "embedding.model_switched"]
    assert (event["from"], event["to"], event["index"]) == (A, B, "chunks-v2")


def test_a_model_that_cannot_be_built_fails_every_embed_until_the_alias_changes_back() -> None:
    alias, clock = Alias("chunks-v1", A), Clock()
    follower = _follower(alias, {A: FakeModel(A, 1.0)}, clock)
    follower.embed(["q"])
    alias.set("chunks-v2", "bge-small-en-v15-q@cafe")
    clock.t += 10
    before = _switches("unavailable")
    for _ in range(2):
        with pytest.raises(EmbeddingModelUnavailableError) as info:
            follower.embed(["q"])
        clock.t += 10
    err = info.value
    assert code_of(err) == ErrorCode.EMBEDDING_MODEL_MISMATCH
    assert "bge-small-en-v15-q@cafe" in str(err) and A in str(err)
    assert "ragstream infra models install bge-small-en-v15-q" in str(err)
    assert _switches("unavailable") == before + 1  # counted (and logged) once, not per call
    assert follower.index is None
    alias.set("chunks-v3", A)  # rebuilt with a model this process has
    assert follower.embed(["q"])[0, 0] == 1.0 and follower.index == "chunks-v3"


def test_an_unrecorded_index_is_followed_on_its_dimension_and_no_index_is_no_error() -> None:
    alias, clock = Alias(None, None, None), Clock()
    follower = _follower(alias, {A: FakeModel(A, 1.0)}, clock)
    _, model_id, index = follower.embed_for_index(["q"])
    assert (model_id, index) == (A, None)
    assert follower.write_index(A) == "chunks"  # no index yet: write through the alias
    alias.set("old-v1", None, 4)
    assert follower.start() and follower.index == "old-v1"
    alias.set("old-v1", None, 768)
    assert not follower.start()
    with pytest.raises(EmbeddingModelMismatchError, match="768-d"):
        follower.embed(["q"])


def test_a_swap_between_embedding_and_the_write_embeds_again() -> None:
    alias, clock = Alias("chunks-v1", A), Clock()
    a, b = FakeModel(A, 1.0), FakeModel(B, -1.0)
    follower = _follower(alias, {A: a, B: b}, clock, interval_s=1.0)
    _, model_id, _ = follower.embed_for_index(["q"])
    assert follower.write_index(model_id) == "chunks-v1"
    alias.set("chunks-v2", B)
    clock.t += 1
    assert follower.write_index(model_id) is None  # A's vectors must not go to B's index
    _, model_id, _ = follower.embed_for_index(["q"])
    assert follower.write_index(model_id) == "chunks-v2" and model_id == B


# -- the ingest pipeline ---------------------------------------------------------------------


class RecordingIndex:
    """A chunk index that records where each bulk write went and what vectors it held."""

    alias = "chunks"

    def __init__(self) -> None:
        self.writes: list[tuple[str | None, list[float]]] = []

    def bulk_index(self, docs: Sequence[dict[str, Any]], index: str | None = None) -> BulkReport:
        self.writes.extend((index, d["embedding"]) for d in docs)
        return BulkReport(succeeded=[d["chunk_id"] for d in docs])

    def refresh(self) -> None:
        pass

    def delete_ids(self, ids: Iterable[str], index: str | None = None) -> BulkReport:
        return BulkReport(succeeded=list(ids))

    def chunk_ids_of(self, tenant: str, doc_id: str) -> list[str]:
        return []


class Registry:
    def __init__(self) -> None:
        self.failures: list[tuple[str, str, str]] = []

    def get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Any]:
        return {}

    def children(self, tenant: str, parent: str) -> list[Any]:
        return []

    def applied_events(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Any]:
        return {}

    def record_many(
        self, rows: list[tuple[str, str, dict[str, Any]]], changes: Sequence[Any] = ()
    ) -> None:
        pass

    def record_failures(self, failures: list[tuple[str, str, str]]) -> None:
        self.failures.extend(failures)

    def record_rejections(self, rejections: Sequence[Any]) -> None:
        pass


class OneChunk:
    def chunk(self, parsed: ParsedDocument) -> list[Chunk]:
        return [Chunk(0, parsed.title, parsed.text, parsed.text, 5)]


def test_ingest_writes_each_models_vectors_into_that_models_index() -> None:
    alias, clock = Alias("chunks-v1", A), Clock()
    follower = _follower(alias, {A: FakeModel(A, 1.0), B: FakeModel(B, -1.0)}, clock)
    index, registry = RecordingIndex(), Registry()
    pipeline = IngestPipeline(OneChunk(), follower, index, registry)  # type: ignore[arg-type]
    pipeline.apply([IngestOp("t", "d1", data=b"one", filename="a.txt")])
    alias.set("chunks-v2", B)
    clock.t += 10
    pipeline.apply([IngestOp("t", "d2", data=b"two", filename="b.txt")])
    assert [(i, v[0]) for i, v in index.writes] == [("chunks-v1", 1.0), ("chunks-v2", -1.0)]


def test_ingest_records_documents_failed_with_the_reason_when_the_model_is_missing() -> None:
    alias, clock = Alias("chunks-v2", "e5-small-v2-q@beef"), Clock()
    follower = _follower(alias, {A: FakeModel(A, 1.0)}, clock)
    index, registry = RecordingIndex(), Registry()
    pipeline = IngestPipeline(OneChunk(), follower, index, registry)  # type: ignore[arg-type]
    [[outcome]] = pipeline.apply([IngestOp("t", "d1", data=b"one", filename="a.txt")])
    assert outcome.status == "failed" and "embedding model mismatch" in (outcome.error or "")
    assert "e5-small-v2-q@beef" in (outcome.error or "")
    assert registry.failures == [("t", "d1", outcome.error)]
    assert index.writes == []


# -- the retrieval pool ----------------------------------------------------------------------


class NoCache:
    def get_exact(self, request: QueryRequest, version: int) -> None:
        return None

    def get_semantic(self, request: QueryRequest, vector: Any, version: int, model: str) -> None:
        return None

    def remember_query_vector(self, request: QueryRequest, vector: Any, model: str) -> None:
        pass


class Versions:
    def get(self, tenant: str) -> int:
        return 0


class NoSearch:
    def search_batch(self, queries: Sequence[QueryRequest], vectors: Any) -> list[list[Any]]:
        raise AssertionError("nothing may be searched with vectors of another model")


def test_the_retrieval_pool_answers_a_model_it_cannot_build_with_a_typed_error() -> None:
    alias, clock = Alias("chunks-v2", "e5-small-v2-q@beef"), Clock()
    follower = _follower(alias, {A: FakeModel(A, 1.0)}, clock)
    handler = retrieval_handler(
        follower,
        NoSearch(),
        NoCache(),  # type: ignore[arg-type]
        Versions(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        pool=PoolSettings(),
    )
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    queries = [QueryRequest(tenant="acme", query=q, deadline=deadline) for q in ("a?", "b?")]
    out = handler.fn(queries)  # no exception: the pool keeps consuming
    responses = [o.event for o in out if isinstance(o, Emit)]
    assert len(responses) == 2
    for response, query in zip(responses, queries, strict=True):
        assert isinstance(response, QueryResponse) and response.request_id == query.request_id
        assert response.status == "failed" and response.error is not None
        assert response.error.code == ErrorCode.EMBEDDING_MODEL_MISMATCH
        assert "e5-small-v2-q@beef" in response.error.message


# -- what this deployment can build ------------------------------------------------------------


def test_the_builder_builds_an_installed_catalog_model_only_under_its_recorded_id(
    tmp_path: Path,
) -> None:
    settings = Settings()
    models = settings.infra.local_dir / "models" / "all-minilm-l6-v2-q"
    if not (models / "model.onnx").is_file():
        pytest.skip(f"ONNX model all-minilm-l6-v2-q not installed in {models.parent}")
    build = model_builder(settings, role="query")
    found = build("all-minilm-l6-v2-q@0000000000000000")
    assert found is None  # same name, other weights
    real = build(f"all-minilm-l6-v2-q@{_digest(models)}")
    assert real is not None and real.dim == ONNX_MODELS["all-minilm-l6-v2-q"].dim
    elsewhere = settings.model_copy(
        update={"infra": settings.infra.model_copy(update={"local_dir": tmp_path})}
    )
    assert model_builder(elsewhere)(real.model_id) is None  # not installed there


def _digest(folder: Path) -> str:
    from ingest.onnx_embedding import MODEL_FILE, TOKENIZER_FILE, digest_files

    return digest_files([folder / MODEL_FILE, folder / TOKENIZER_FILE])[:16]
