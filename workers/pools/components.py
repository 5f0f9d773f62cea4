"""Composition root of the query path: build each pool's components from the settings."""

from __future__ import annotations

from dataclasses import replace

import redis
from elasticsearch import Elasticsearch

from ingest.embedding import CachedEmbedder
from ingest.factory import build_embedder
from ingest.versions import IndexVersions
from ragstream.settings import Settings
from workers.caches import AnswerCache, answer_config
from workers.generation.generator import Generator, TokenSink
from workers.retrieval.hybrid import HybridRetriever
from workers.routing import EASY_EXAMPLES, HARD_EXAMPLES, Router


def build_router(embedder: CachedEmbedder) -> Router:
    """A router fitted on the labelled example questions."""
    router = Router()
    router.fit(embedder.embed(list(EASY_EXAMPLES)), embedder.embed(list(HARD_EXAMPLES)))
    return router


def build_answer_cache(settings: Settings) -> AnswerCache:
    """The Redis answer cache with the settings' TTL and semantic threshold."""
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    return AnswerCache(
        client,
        ttl_s=settings.cache.ttl_s,
        threshold=settings.cache.semantic_threshold,
        max_entries=settings.cache.semantic_max_entries,
        config=answer_config(settings),
    )


def build_retrieval_components(
    settings: Settings,
) -> tuple[CachedEmbedder, HybridRetriever, AnswerCache, IndexVersions, Router]:
    """Query embedder (``settings.retrieval.embed_threads`` threads), hybrid retriever, answer
    cache, index versions and router.

    Raises:
        EmbeddingModelMismatchError: the index was built with another embedding model.
    """
    embedder = build_embedder(settings, num_threads=settings.retrieval.embed_threads, role="query")
    es = Elasticsearch(
        settings.elasticsearch.url, request_timeout=settings.elasticsearch.request_timeout_s
    )
    retriever = HybridRetriever(es, settings.elasticsearch.index_alias, settings.retrieval)
    retriever.check_model(embedder.model_id, embedder.dim)
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    return (
        embedder,
        retriever,
        build_answer_cache(settings),
        IndexVersions(client),
        build_router(embedder),
    )


def build_generator(settings: Settings, tier: str, tokens: TokenSink | None) -> Generator:
    """The ``tier`` generator: its backend, a prompt builder budgeted in the serving model's
    tokens (``/tokenize`` of the llama.cpp server), the answer cache and the token sink."""
    from workers.cancel import Cancellations
    from workers.evidence.stage import answer_policy
    from workers.generation.llamacpp_tokens import ServerTokenCounter, n_ctx_per_slot
    from workers.generation.openai_compat import OpenAICompatibleBackend
    from workers.generation.prompt import PromptBuilder
    from workers.runtime.build import retry_policy

    cfg = getattr(settings.generation, tier)
    llm = settings.llm
    base_url = cfg.base_url or llm.base_url
    style = cfg.prompt_style or llm.prompt_style
    max_tokens = cfg.max_tokens or llm.max_tokens
    stop = cfg.stop if cfg.stop is not None else llm.stop
    backend = OpenAICompatibleBackend(
        base_url,
        cfg.model,
        style,
        stop,
        max_tokens,
        temperature=cfg.temperature if cfg.temperature is not None else llm.temperature,
        timeout_s=cfg.timeout_s or llm.request_timeout_s,
        token_gap_s=llm.token_gap_s,
        cache_prompt=llm.cache_prompt,
    )
    per_slot = cfg.n_ctx_per_slot or n_ctx_per_slot(base_url, llm.n_ctx, llm.n_parallel)
    builder = PromptBuilder(ServerTokenCounter(base_url), per_slot, max_tokens, style)
    # An unreachable server is retried until each request's deadline, however many attempts.
    backoff = replace(
        retry_policy(getattr(settings.pools, f"generation_{tier}")), max_attempts=None
    )
    return Generator(
        backend,
        builder,
        tokens=tokens,
        cache=build_answer_cache(settings),
        tier=tier,
        backoff=backoff,
        fallback=answer_policy(settings.evidence),
        stop=stop,
        cancelled=Cancellations(
            redis.Redis.from_url(settings.redis.url, socket_timeout=2)
        ).cancelled,
    )
