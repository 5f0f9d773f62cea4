"""Composition root of the write path: build the pipeline's parts from the settings.

Used by the ingest pool, the Celery worker, the CLI and the benchmark; handlers and tasks are
given what this builds and never construct clients themselves.
"""

from __future__ import annotations

from pathlib import Path

import redis
from elasticsearch import Elasticsearch

from index.schema import check_index_model
from index.versions import IndexVersions
from ingest.chunking import Chunker
from ingest.embedding import (
    CachedEmbedder,
    Embedder,
    EmbeddingCache,
    SentenceTransformerEmbedder,
    resolve_model_path,
)
from ingest.index import ChunkIndex, force_merge
from ingest.model_follow import ModelFollower
from ingest.onnx_embedding import OnnxEmbedder, Role, get_onnx_model
from ingest.pipeline import IngestPipeline
from ingest.registry import DocumentRegistry
from ingest.types import ParseOptions
from ragstream.db.engine import make_engine, make_session_factory
from ragstream.extras import require_torch
from ragstream.settings import Settings


def onnx_model_dir(settings: Settings) -> Path:
    """The folder of the configured ONNX model: ``embedding.onnx_dir``, else
    ``<infra.local_dir>/models/<embedding.onnx_model>`` (where ``infra models install`` puts it)."""
    emb = settings.embedding
    if emb.onnx_dir is not None:
        return emb.onnx_dir
    return settings.infra.local_dir.resolve() / "models" / emb.onnx_model


def build_model(settings: Settings, num_threads: int = 0, role: Role = "passage") -> Embedder:
    """The configured embedding model (``settings.embedding.backend``), not loaded.

    Args:
        settings: the settings tree.
        num_threads: intra-op threads (torch or onnxruntime); ``0``: the runtime's default.
        role: ``passage`` for chunks, ``query`` for questions (the ONNX models' prefixes).

    Raises:
        ConfigurationError: unknown ONNX model name, or the sentence-transformers backend without
            the ``torch`` extra installed (the message names ``pip install -e '.[torch]'``).
    """
    emb = settings.embedding
    if emb.backend == "onnx":
        return OnnxEmbedder(
            onnx_model_dir(settings),
            get_onnx_model(emb.onnx_model),
            role=role,
            batch_size=emb.batch_size,
            num_threads=num_threads,
        )
    require_torch("embedding.backend=sentence-transformers", "embedding.backend=onnx (the default)")
    return SentenceTransformerEmbedder.from_settings(emb, num_threads=num_threads)


def build_vocabulary(settings: Settings) -> frozenset[str]:
    """Common lower-case English words, for :func:`workers.evidence.lexical.uncommon_words`:
    pyspellchecker's English word list (160,572 words with their inflections, from its
    frequency lists) and the whole words of the configured embedding model's word-piece
    vocabulary (``##`` continuations, special tokens, digits and punctuation left out), read
    from its ``tokenizer.json`` (or ``vocab.txt``) without loading the model.

    The model's vocabulary alone (about 22,000 words for BERT's) lacks everyday words such as
    "coworker" and "reorders", which made the gate refuse answerable questions.

    Empty (nothing read) when ``evidence.refuse_uncommon_words`` is off: the gate is then off.

    Raises:
        ValueError: the tokenizer file is not one the ``tokenizers`` package can read.
        ConfigurationError: the sentence-transformers model folder is missing
            (:func:`ingest.embedding.resolve_model_path`).
    """
    if not settings.evidence.refuse_uncommon_words:
        return frozenset()
    from spellchecker import SpellChecker

    english = SpellChecker(language="en", distance=1).word_frequency.dictionary
    return frozenset(english) | _model_words(settings)


def _model_words(settings: Settings) -> frozenset[str]:
    """The embedding model's whole lower-case words (see :func:`build_vocabulary`); empty when
    its folder holds neither ``tokenizer.json`` nor ``vocab.txt``."""
    emb = settings.embedding
    onnx = emb.backend == "onnx"
    folder = onnx_model_dir(settings) if onnx else resolve_model_path(emb.model_path)
    if (folder / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            words: list[str] = list(Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab())
        except Exception as exc:  # the Rust tokenizer raises a plain Exception
            raise ValueError(f"cannot read {folder / 'tokenizer.json'}: {exc}") from exc
    elif (folder / "vocab.txt").is_file():
        words = (folder / "vocab.txt").read_text(encoding="utf-8").split()
    else:
        return frozenset()
    return frozenset(w for w in words if w.isalpha() and w.islower())


def build_embedder(
    settings: Settings, num_threads: int = 0, role: Role = "passage"
) -> CachedEmbedder:
    """The configured model (:func:`build_model`) behind the Redis content-hash cache, warmed
    up; ``num_threads`` intra-op threads (``0``: the runtime's default)."""
    inner = build_model(settings, num_threads=num_threads, role=role)
    inner.warm_up()
    return CachedEmbedder(inner, EmbeddingCache.from_settings(settings))


def build_chunker(settings: Settings) -> Chunker:
    """The chunker of the configured model: its own tokenizer and input length."""
    if settings.embedding.backend == "onnx":
        model = build_model(settings)
        assert isinstance(model, OnnxEmbedder)
        return Chunker(model.tokenizer(), settings.chunking, max_seq_length=model.max_seq_length)
    return Chunker.from_model_path(settings.embedding.model_path, settings.chunking)


def build_index(settings: Settings, dims: int, model_id: str | None = None) -> ChunkIndex:
    """The chunk index behind ``settings.elasticsearch.index_alias`` (created if missing,
    recording ``model_id`` and ``dims``).

    Raises:
        EmbeddingModelMismatchError: the existing index records another model or dimension.
    """
    es = Elasticsearch(
        settings.elasticsearch.hosts, request_timeout=settings.elasticsearch.request_timeout_s
    )
    index = ChunkIndex(es, settings.elasticsearch, dims, model_id=model_id)
    index.ensure()
    if model_id is not None:
        check_index_model(es, index.alias, model_id, dims)
    return index


def merge_index(
    settings: Settings, max_num_segments: int = 1
) -> tuple[dict[str, int], dict[str, int]]:
    """:func:`ingest.index.force_merge` of the settings' chunk alias (segment stats before and
    after), with a client of its own. Raises as ``force_merge``."""
    es = Elasticsearch(settings.elasticsearch.hosts, request_timeout=60)
    try:
        return force_merge(es, settings.elasticsearch.index_alias, max_num_segments)
    finally:
        es.close()


def build_index_and_embedder(
    settings: Settings, *, for_rebuild: bool = False
) -> tuple[ChunkIndex, CachedEmbedder]:
    """Both, sharing the embedder's model id and dimension.

    ``for_rebuild=True`` leaves the existing index alone: no creation, no field added, no
    check that it was built with the configured model (a rebuild reads an index of another
    model on purpose).
    """
    embedder = build_embedder(settings)
    if for_rebuild:
        es = Elasticsearch(
            settings.elasticsearch.hosts, request_timeout=settings.elasticsearch.request_timeout_s
        )
        index = ChunkIndex(es, settings.elasticsearch, embedder.dim, embedder.model_id)
        return index, embedder
    return build_index(settings, embedder.dim, embedder.model_id), embedder


def build_pipeline(settings: Settings, embedder: CachedEmbedder | None = None) -> IngestPipeline:
    """A ready pipeline: chunker, cached embedder (following the model the index alias
    records, :class:`~ingest.model_follow.ModelFollower`), index, SQL registry, version counters.

    The SQL store must be migrated (``ragstream db upgrade``).
    """
    embedder = embedder or build_embedder(settings)
    chunker = build_chunker(settings)
    es = Elasticsearch(
        settings.elasticsearch.hosts, request_timeout=settings.elasticsearch.request_timeout_s
    )
    index = ChunkIndex(es, settings.elasticsearch, embedder.dim, model_id=embedder.model_id)
    index.ensure()
    # Embed with the model the alias records, whichever was configured (ingest/model_follow.py).
    follower = ModelFollower.from_settings(settings, embedder, es, role="passage")
    follower.start()  # a model it cannot build: every document fails with the reason
    sessions = make_session_factory(make_engine(settings.database_url))
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=5)
    return IngestPipeline(
        chunker,
        follower,
        index,
        DocumentRegistry(sessions),
        IndexVersions(client),
        parse_options=ParseOptions.from_settings(settings.ingest),
        definitions=settings.ingest.definitions,
        max_clock_skew_s=settings.ingest.max_clock_skew_s,
    )
