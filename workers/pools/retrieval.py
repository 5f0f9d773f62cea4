"""The retrieval pool: ``rag.queries`` in, fused candidates (or a cached answer) out.

Per batch: exact answer-cache lookups; ONE embedding call for every remaining query (with the
model the index records, followed across alias swaps; a model this pool cannot build answers
each query ``EMBEDDING_MODEL_MISMATCH``, and the pool keeps consuming); semantic
cache lookups; ONE ``_msearch`` with a BM25 and a kNN search per query, fused client-side with
reciprocal rank fusion; the router suggests each query's LLM tier (the rerank pool decides the
answer tier, :mod:`workers.routing`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from index.schema import EmbeddingModelMismatchError
from index.versions import IndexVersions
from ragstream.settings import PoolSettings, Settings
from topics.queries import QueryRequest
from topics.registry import QUERIES, RESPONSES, RETRIEVED
from topics.responses import ErrorCode, QueryResponse
from topics.retrieved import Candidate, RetrievedCandidates
from workers.caches import AnswerCache
from workers.conversation import question_of
from workers.errors import dead_letter_hook, error_response, expired_hook
from workers.registry import register_pool
from workers.retrieval.fit import fit_record
from workers.routing import Router
from workers.runtime.build import pool_handler
from workers.runtime.handler import Emit, Handler, Outcome, derive_event_id
from workers.runtime.metrics import MODEL_CALLS


class Embeds(Protocol):
    """``(n, dim)`` float32 unit vectors for ``n`` texts, from model ``model_id``."""

    @property
    def model_id(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]: ...


#: The definition entries of each query of a batch, as passages
#: (:func:`workers.pools.components.definition_candidates`), and for each query whether its
#: name proposals were shed (the pool was behind).
FindsDefinitions = Callable[
    [Sequence[QueryRequest], np.ndarray[Any, Any]], tuple[list[list[Candidate]], list[bool]]
]


class Retrieves(Protocol):
    """Hybrid search for a batch of queries (:class:`workers.retrieval.hybrid.HybridRetriever`)."""

    def search_batch(
        self, queries: Sequence[QueryRequest], vectors: np.ndarray[Any, Any]
    ) -> list[list[Candidate]]: ...


def model_mismatch(request: QueryRequest, error: EmbeddingModelMismatchError) -> QueryResponse:
    """The typed ``EMBEDDING_MODEL_MISMATCH`` response of a query whose index was built with a
    model this pool cannot embed with (``ingest/model_follow.py``)."""
    return error_response(request, ErrorCode.EMBEDDING_MODEL_MISMATCH, str(error), "retrieval")


def retrieval_handler(
    embedder: Embeds,
    retriever: Retrieves,
    cache: AnswerCache,
    versions: IndexVersions,
    router: Router,
    *,
    pool: PoolSettings,
    group: str | None = None,
    definitions: FindsDefinitions | None = None,
    max_record_bytes: int = 1_048_576,
) -> Handler[QueryRequest]:
    """The retrieval pool's handler (components are given, never built here; ``definitions``:
    the definition entries of each question of a batch, carried on its event, or ``None``;
    ``max_record_bytes``: Kafka's ``max_request_size``, which each ``rag.retrieved`` event is
    made to fit, :func:`workers.retrieval.fit.fit_record`)."""

    def fn(events: list[QueryRequest]) -> Sequence[Outcome]:
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        version = {t: versions.get(t) for t in {e.tenant for e in events}}
        out: list[Outcome] = []
        live = []
        for e in events:
            # The API looked it up already (once per request); other producers' queries are
            # looked up here.
            hit = None if e.exact_cache_checked else cache.get_exact(e, version[e.tenant])
            if hit is not None:
                out.append(Emit(RESPONSES, hit.readdress(e, "retrieval", started)))
            else:
                live.append(e)
        if not live:
            return out
        try:
            vectors = embedder.embed([question_of(e) for e in live])
        except EmbeddingModelMismatchError as exc:  # the index's model is not here: say so
            return [*out, *(Emit(RESPONSES, model_mismatch(e, exc)) for e in live)]
        MODEL_CALLS.labels("embed").inc()
        model_id = embedder.model_id  # the model of these vectors (read after a switch in embed)
        todo: list[int] = []
        for i, e in enumerate(live):
            hit = cache.get_semantic(e, vectors[i], version[e.tenant], model_id)
            if hit is not None:
                out.append(Emit(RESPONSES, hit.readdress(e, "retrieval", started)))
            else:
                todo.append(i)
        if not todo:
            return out
        results = retriever.search_batch([live[i] for i in todo], vectors[todo])
        MODEL_CALLS.labels("msearch").inc()
        entries, shed = (
            definitions([live[i] for i in todo], vectors[todo])
            if definitions is not None
            else ([[] for _ in todo], [False] * len(todo))
        )
        took = (time.perf_counter() - t0) * 1000
        for i, candidates, found, was_shed in zip(todo, results, entries, shed, strict=True):
            e = live[i]
            route = router.route(e, vectors[i])
            cache.remember_query_vector(e, vectors[i], model_id)
            retrieved = RetrievedCandidates(
                event_id=derive_event_id(e.event_id, "retrieval"),
                tenant=e.tenant,
                request=e,
                candidates=tuple(candidates),
                definitions=tuple(found),
                index_version=version[e.tenant],
                tier=route.tier,
                route_reason=route.reason,
                degraded=("propose",) if was_shed else (),
                trace=e.trace,
            ).traced(
                "retrieval",
                started,
                took,
                batch=len(events),
                suggested=route.tier,
                definitions=len(found),
                **({"degraded": "propose"} if was_shed else {}),
            )
            out.append(_fitted(retrieved, max_record_bytes))
        return out

    return pool_handler(
        "retrieval",
        input=QUERIES,
        outputs=(RETRIEVED, RESPONSES),
        fn=fn,
        pool=pool,
        group=group,
        on_expired=expired_hook("retrieval"),
        on_dead_letter=dead_letter_hook("retrieval"),
    )


def _fitted(retrieved: RetrievedCandidates, max_bytes: int) -> Emit:
    """``retrieved`` made to fit one record of ``max_bytes`` (:func:`fit_record`), or the
    error response of its request when even its question does not fit."""
    try:
        return Emit(RETRIEVED, fit_record(retrieved, max_bytes))
    except ValueError as exc:
        error = error_response(retrieved.request, ErrorCode.INVALID_REQUEST, str(exc), "retrieval")
        return Emit(RESPONSES, error)


def run_retrieval_pool(settings: Settings) -> Callable[[], None]:
    """Pool factory of ``ragstream worker retrieval``."""
    from workers.pools.components import build_definition_search, build_retrieval_components
    from workers.runtime.build import build_runner, pool_group, until_signalled

    components = build_retrieval_components(settings)
    handler = retrieval_handler(
        *components,
        pool=settings.pools.retrieval,
        group=pool_group(settings, "retrieval"),
        definitions=build_definition_search(settings, components[1]),
        max_record_bytes=settings.kafka.max_request_size,
    )
    runner = build_runner(handler, settings, settings.pools.retrieval)
    return until_signalled(runner)


register_pool("retrieval", run_retrieval_pool)
