"""Composition root of the write path: build the pipeline's parts from the settings.

Used by the ingest pool, the Celery worker, the CLI and the benchmark; handlers and tasks are
given what this builds and never construct clients themselves.
"""

from __future__ import annotations

import redis
from elasticsearch import Elasticsearch

from ingest.chunking import Chunker
from ingest.embedding import CachedEmbedder, EmbeddingCache, SentenceTransformerEmbedder
from ingest.index import ChunkIndex, force_merge
from ingest.pipeline import IngestPipeline
from ingest.registry import DocumentRegistry
from ingest.versions import IndexVersions
from ragstream.db.engine import make_engine, make_session_factory
from ragstream.settings import Settings


def build_embedder(settings: Settings, num_threads: int = 0) -> CachedEmbedder:
    """The packaged (or configured) model behind the Redis content-hash cache, warmed up;
    ``num_threads`` torch threads (``0``: torch's default)."""
    inner = SentenceTransformerEmbedder.from_settings(settings.embedding, num_threads=num_threads)
    inner.warm_up()
    return CachedEmbedder(inner, EmbeddingCache.from_settings(settings))


def build_index(settings: Settings, dims: int) -> ChunkIndex:
    """The chunk index behind ``settings.elasticsearch.index_alias`` (created if missing)."""
    es = Elasticsearch(
        settings.elasticsearch.url, request_timeout=settings.elasticsearch.request_timeout_s
    )
    index = ChunkIndex(es, settings.elasticsearch, dims)
    index.ensure()
    return index


def merge_index(
    settings: Settings, max_num_segments: int = 1
) -> tuple[dict[str, int], dict[str, int]]:
    """:func:`ingest.index.force_merge` of the settings' chunk alias (segment stats before and
    after), with a client of its own. Raises as ``force_merge``."""
    es = Elasticsearch(settings.elasticsearch.url, request_timeout=60)
    try:
        return force_merge(es, settings.elasticsearch.index_alias, max_num_segments)
    finally:
        es.close()


def build_index_and_embedder(settings: Settings) -> tuple[ChunkIndex, CachedEmbedder]:
    """Both, sharing the embedder's dimension."""
    embedder = build_embedder(settings)
    return build_index(settings, embedder.dim), embedder


def build_pipeline(settings: Settings, embedder: CachedEmbedder | None = None) -> IngestPipeline:
    """A ready pipeline: chunker, cached embedder, index, SQL registry, version counters.

    The SQL store must be migrated (``ragstream db upgrade``).
    """
    embedder = embedder or build_embedder(settings)
    chunker = Chunker.from_model_path(settings.embedding.model_path, settings.chunking)
    index = build_index(settings, embedder.dim)
    sessions = make_session_factory(make_engine(settings.database_url))
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=5)
    return IngestPipeline(
        chunker, embedder, index, DocumentRegistry(sessions), IndexVersions(client)
    )
