"""Composition root of the query path: build each pool's components from the settings."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt
import redis
from elasticsearch import Elasticsearch
from elasticsearch.serializer import OrjsonSerializer
from sqlalchemy.orm import Session, sessionmaker

from index.versions import IndexVersions
from ingest.embedding import CachedEmbedder
from ingest.factory import build_embedder
from ingest.model_follow import ModelFollower
from ragstream.db.acl import CurrentReaders
from ragstream.db.engine import make_engine, make_session_factory
from ragstream.settings import Settings
from topics.queries import QueryRequest
from topics.retrieved import Candidate
from workers.caches import AnswerCache, CacheKeys, answer_config
from workers.conversation import asks_for_a_name, question_of, split_context
from workers.generation.generator import Generator, TokenSink
from workers.retrieval.definitions import DefinitionIndex
from workers.retrieval.hybrid import HybridRetriever
from workers.retrieval.propose import PROPOSALS, NameProposer
from workers.routing import EASY_EXAMPLES, HARD_EXAMPLES, Router


def build_router(embedder: CachedEmbedder) -> Router:
    """A router fitted on the labelled example questions."""
    router = Router()
    router.fit(*_router_examples(embedder))
    return router


def _router_examples(embedder: CachedEmbedder) -> tuple[np.ndarray[Any, Any], ...]:
    return embedder.embed(list(EASY_EXAMPLES)), embedder.embed(list(HARD_EXAMPLES))


def build_answer_cache(
    settings: Settings, sessions: sessionmaker[Session] | None = None
) -> AnswerCache:
    """The Redis answer cache with the settings' TTL and semantic threshold, re-checking every
    hit against the registry's current readers (:class:`~ragstream.db.acl.CurrentReaders` of
    ``sessions``; ``None``: a session factory of ``settings.database_url``, which connects on
    the first hit that needs a check)."""
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    if sessions is None:
        sessions = make_session_factory(make_engine(settings.database_url))
    return AnswerCache(
        client,
        ttl_s=settings.cache.ttl_s,
        threshold=settings.cache.semantic_threshold,
        max_entries=settings.cache.semantic_max_entries,
        config=answer_config(settings),
        enabled=settings.cache.enabled,
        readers=CurrentReaders(sessions),
    )


def build_cache_keys(settings: Settings) -> CacheKeys:
    """The answer-cache keys of the settings' answer configuration (what the answering stages
    put on their responses for the delivery pool to cache them at)."""
    return CacheKeys(answer_config(settings))


def build_retrieval_components(
    settings: Settings,
) -> tuple[ModelFollower, HybridRetriever, AnswerCache, IndexVersions, Router]:
    """Query embedder (``settings.retrieval.embed_threads`` threads) following the model the
    index alias records (:class:`~ingest.model_follow.ModelFollower`, checked at start and every
    ``embedding.model_check_interval_s``), hybrid retriever searching that model's index,
    answer cache, index versions and router (fitted again after a model switch).

    A model the pool cannot build is logged at start and answered per query
    (``EMBEDDING_MODEL_MISMATCH``), not a refusal to start.

    Raises:
        TransientError: Elasticsearch unreachable at start.
    """
    threads = settings.retrieval.embed_threads
    embedder = build_embedder(settings, num_threads=threads, role="query")
    # orjson parses the searches' responses (about 90 kB a question): 1.65 client core-ms a
    # question against the standard library's 1.80, the same objects (docs/benchmarks).
    es = Elasticsearch(
        settings.elasticsearch.hosts,
        request_timeout=settings.elasticsearch.request_timeout_s,
        serializer=OrjsonSerializer(),
    )
    follower = ModelFollower.from_settings(
        settings, embedder, es, role="query", num_threads=threads
    )
    follower.start()  # a model it cannot build: each query is answered with the error
    retriever = HybridRetriever(
        es, settings.elasticsearch.index_alias, settings.retrieval, target=lambda: follower.index
    )
    router = build_router(follower.embedder)
    follower.on_switch.append(lambda new: router.fit(*_router_examples(new)))
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    return (
        follower,
        retriever,
        build_answer_cache(settings),
        IndexVersions(client),
        router,
    )


def build_definition_search(
    settings: Settings, retriever: HybridRetriever
) -> (
    Callable[
        [Sequence[QueryRequest], np.ndarray[Any, Any]], tuple[list[list[Candidate]], list[bool]]
    ]
    | None
):
    """The retrieval pool's definition search (``retrieval.definitions_top`` entries for each
    question that asks for a name or a way) over the index ``retriever`` searches, and for each
    question whether its name proposals were shed (a proposer is set, the question asks for a
    name, and the batch's oldest question waited past ``retrieval.propose_shed_after_s``), or
    ``None`` when ``retrieval.definitions_top`` is 0."""
    r = settings.retrieval
    if r.definitions_top == 0:
        return None
    index = DefinitionIndex(retriever.es, retriever.alias, target=retriever.target)
    proposer = build_proposer(settings)

    def search(
        queries: Sequence[QueryRequest], vectors: np.ndarray[Any, Any]
    ) -> tuple[list[list[Candidate]], list[bool]]:
        waited = (dt.datetime.now(dt.UTC) - min(q.created_at for q in queries)).total_seconds()
        shed = proposer is not None and waited > r.propose_shed_after_s
        found = definition_candidates(
            index, queries, vectors, r.definitions_top, proposer, shed=shed
        )
        return found, [shed and asks_for_a_name(question_of(q)) for q in queries]

    return search


def build_proposer(settings: Settings) -> NameProposer | None:
    """The name proposer of ``retrieval.propose_url`` (``None`` when it is empty)."""
    r = settings.retrieval
    if not r.propose_url:
        return None
    return NameProposer(
        r.propose_url,
        r.propose_model,
        timeout_s=r.propose_timeout_s,
        concurrency=r.propose_concurrency,
    )


def build_generator(settings: Settings, tier: str, tokens: TokenSink | None) -> Generator:
    """The ``tier`` generator: its backend, a prompt builder budgeted in the serving model's
    tokens (``/tokenize`` of the llama.cpp server), the answer-cache keys and the token sink."""
    from workers.cancel import Cancellations
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
        cache_keys=build_cache_keys(settings),
        tier=tier,
        backoff=backoff,
        stop=stop,
        cancelled=Cancellations(
            redis.Redis.from_url(settings.redis.url, socket_timeout=2)
        ).cancelled,
    )


def definition_candidates(
    index: DefinitionIndex,
    queries: Sequence[QueryRequest],
    vectors: npt.NDArray[np.floating[Any]],
    top: int,
    proposer: NameProposer | None = None,
    *,
    shed: bool = False,
) -> list[list[Candidate]]:
    """The definition entries of each query that asks for a name or a way
    (:func:`workers.conversation.asks_for_a_name`), as passages
    (:meth:`workers.retrieval.definitions.DefinitionHit.candidate`): first the entries
    that define a name ``proposer`` proposed (propose-and-verify, ``metadata.proposed``), in
    the order of the names, then the ``top`` entries nearest the question (one ``_msearch`` for
    the batch); an empty list for every other query.

    Args:
        index: the definition index.
        queries: the batch; each is searched within its tenant and the asker's principals.
        vectors: ``(len(queries), dim)`` query embeddings (the index's model).
        top: entries searched per query (0: none, and no proposals either).
        proposer: the name proposer, or ``None``.
        shed: leave the proposer out for this batch (the pool is behind).

    Raises:
        TransientError, PermanentError: as :meth:`DefinitionIndex.search_many`.
    """
    out: list[list[Candidate]] = [[] for _ in queries]
    asking = [i for i, q in enumerate(queries) if top > 0 and asks_for_a_name(question_of(q))]
    if not asking:
        return out
    texts = [split_context(question_of(queries[i]))[0] for i in asking]
    found = index.search_many(
        [
            (queries[i].tenant, text, [float(x) for x in vectors[i]], queries[i].principals)
            for i, text in zip(asking, texts, strict=True)
        ],
        size=top,
    )
    names: list[list[str]] = [[] for _ in asking]
    if proposer is not None and shed:
        PROPOSALS.labels("shed").inc(len(asking))
    elif proposer is not None:
        names = proposer.propose(texts)
    checked = index.verify_many(
        [(queries[i].tenant, names[at], queries[i].principals) for at, i in enumerate(asking)]
    )  # every proposed name of the batch in one _msearch
    for at, (i, hits) in enumerate(zip(asking, found, strict=True)):
        verified = checked[at]
        proposed = [h for name in names[at] for h in verified.get(name, [])]
        seen: set[str] = set()
        for h, was_proposed in [*((h, True) for h in proposed), *((h, False) for h in hits)]:
            if h.entry_id not in seen:
                seen.add(h.entry_id)
                out[i].append(h.candidate(proposed=was_proposed))
    return out
