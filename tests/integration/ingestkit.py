"""Fixtures for write-path tests: one real model per session, a private index and store each."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from elasticsearch import Elasticsearch

from index.schema import CHUNKS_ONLY, DEFINITIONS_ONLY
from index.versions import IndexVersions
from ingest.chunking import Chunker
from ingest.embedding import CachedEmbedder, Embedder, EmbeddingCache
from ingest.factory import build_chunker, build_model
from ingest.index import ChunkIndex
from ingest.pipeline import IngestPipeline
from ingest.registry import DocumentRegistry
from ingest.types import ParseOptions
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import Settings


class Counting:
    """Wraps an embedder and records every batch sent to the model."""

    def __init__(self, inner: Embedder | Any) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []

    @property
    def model_id(self) -> str:
        return str(self.inner.model_id)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def warm_up(self) -> None:
        self.inner.warm_up()

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        self.calls.append(list(texts))
        return self.inner.embed(texts)  # type: ignore[no-any-return]

    @property
    def sent(self) -> int:
        """Texts sent to the model so far."""
        return sum(len(c) for c in self.calls)


@pytest.fixture(scope="session")
def model() -> Embedder:
    """The configured passage embedder (``settings.embedding``, as the ingest pool builds it:
    the ONNX default, or sentence-transformers with the torch extra), loaded."""
    m = build_model(Settings())
    m.warm_up()
    return m


@pytest.fixture(scope="session")
def chunker() -> Chunker:
    """The configured model's chunker (its own tokenizer and input length)."""
    return build_chunker(Settings())


class Kit:
    """A pipeline over a private alias, SQLite file and cache prefix, plus handles to inspect."""

    def __init__(
        self,
        settings: Settings,
        model: Embedder,
        chunker: Chunker,
        name: str,
        tmp: Path,
    ) -> None:
        self.es = Elasticsearch(settings.elasticsearch.url, request_timeout=60)
        es_settings = settings.elasticsearch.model_copy(update={"index_alias": name})
        self.index = ChunkIndex(self.es, es_settings, model.dim, model.model_id)
        self.index.ensure()
        url = f"sqlite:///{tmp / 'meta.db'}"
        upgrade_head(url)
        self.sessions = make_session_factory(make_engine(url))
        self.redis = redis.Redis.from_url(settings.redis.url)
        self.counting = Counting(model)
        cache = EmbeddingCache(self.redis, key_prefix=f"{name}:emb:")
        self.embedder = CachedEmbedder(self.counting, cache)
        self.versions = IndexVersions(self.redis)
        self.pipeline = IngestPipeline(
            chunker,
            self.embedder,
            self.index,
            DocumentRegistry(self.sessions),
            self.versions,
            parse_options=ParseOptions.from_settings(settings.ingest),
        )

    def index_total(self) -> int:
        stats = self.es.indices.stats(index=self.index.alias, metric="indexing")
        return int(stats["_all"]["primaries"]["indexing"]["index_total"])

    def chunks(self, tenant: str, doc_id: str) -> list[dict[str, Any]]:
        """The document's chunks in the index (no definition entry)."""
        return self._entries(tenant, doc_id, CHUNKS_ONLY)

    def definitions(self, tenant: str, doc_id: str) -> list[dict[str, Any]]:
        """The document's definition entries in the index."""
        return self._entries(tenant, doc_id, DEFINITIONS_ONLY)

    def _entries(self, tenant: str, doc_id: str, entry: dict[str, Any]) -> list[dict[str, Any]]:
        res = self.es.search(
            index=self.index.alias,
            query={
                "bool": {
                    "filter": [{"term": {"tenant": tenant}}, {"term": {"doc_id": doc_id}}, entry]
                }
            },
            size=1000,
            source_excludes=["embedding"],
        )
        return [h["_source"] for h in res["hits"]["hits"]]

    def close(self) -> None:
        self.es.indices.delete(index=f"{self.index.alias}-v*")
        self.es.close()
        self.redis.close()


@pytest.fixture
def kit(
    settings: Settings,
    model: Embedder,
    chunker: Chunker,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> Iterator[Kit]:
    k = Kit(settings, model, chunker, unique_name("idx"), tmp_path)
    yield k
    k.close()
