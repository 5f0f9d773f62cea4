"""``ragstream bench retrieval-stage``: the query side's retrieval stage, one query at a time.

The retrieval pool's work for one query that misses the answer caches: embed the question (the
query embedder behind the embedding cache, on the pool's ``retrieval.embed_threads`` threads),
one ``_msearch`` with its BM25 and kNN searches, and reciprocal rank fusion. Each stage is
timed per query, in this process, on the components the pool builds
(:func:`workers.pools.components.build_retrieval_components`), against the configured alias
(read-only). Each query is a sample question made unique (an opaque tag,
:func:`bench.query.questions.unique_query`), so its embedding is never cached; the embedding
cache writes go to a key prefix of the run's own, deleted at the end. No Kafka, no batching:
this is the stage's latency, not the pool's throughput (``bench query`` measures that).
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from ragstream.settings import Settings
from replay.measures import percentiles

#: Stages in order; ``total`` is their sum per query.
STAGES = ("embed", "msearch", "fusion", "preceding", "total")


@dataclass
class StageLatency:
    """Per-query wall times (ms) of each stage, in call order."""

    samples: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STAGES})

    def add(
        self, embed_ms: float, msearch_ms: float, fusion_ms: float, preceding_ms: float = 0.0
    ) -> None:
        """Record one query's stage times; ``total`` is their sum."""
        times = (embed_ms, msearch_ms, fusion_ms, preceding_ms)
        for stage, ms in zip(STAGES, (*times, sum(times)), strict=True):
            self.samples[stage].append(ms)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per stage: p50/p95/p99/max (nearest rank, :func:`bench.stats.percentiles`) and the
        mean, in ms."""
        out = {}
        for stage, values in self.samples.items():
            stats = percentiles(values)
            if values:
                stats["mean"] = round(sum(values) / len(values), 2)
            out[stage] = stats
        return out


def time_queries(
    queries: Sequence[Any],
    embed: Callable[[Any], Any],
    search: Callable[[Any, Any], Any],
    fuse: Callable[[Any, Any], Any],
    *,
    clock: Callable[[], float] = time.perf_counter,
    expand: Callable[[Any, Any], Any] | None = None,
) -> StageLatency:
    """Run ``embed``, ``search``, ``fuse`` and ``expand`` for each query in turn, timing each
    call.

    ``embed(query) -> vectors``, ``search(query, vectors) -> responses``,
    ``fuse(query, responses) -> candidates``, ``expand(responses, candidates)`` (the chunks
    before, :meth:`workers.retrieval.hybrid.HybridRetriever.with_preceding`; ``None``: 0 ms);
    ``clock`` returns seconds.
    """
    out = StageLatency()
    for q in queries:
        t0 = clock()
        vectors = embed(q)
        t1 = clock()
        responses = search(q, vectors)
        t2 = clock()
        candidates = fuse(q, responses)
        t3 = clock()
        if expand is not None:
            expand(responses, candidates)
        t4 = clock() if expand is not None else t3
        out.add(*((b - a) * 1000 for a, b in itertools.pairwise((t0, t1, t2, t3, t4))))
    return out


def measure_retrieval_stage(
    settings: Settings,
    questions: Sequence[str],
    *,
    n: int,
    warmup: int = 5,
    tenant: str = "default",
    seed: int = 0,
) -> dict[str, Any]:
    """Time ``n`` queries (after ``warmup`` untimed ones) through the retrieval stage.

    Returns:
        ``{"stages": {stage: {p50, p95, p99, max, mean}}, "queries": n, "index_alias",
        "backend", "model", "embed_threads", "top_n", "bm25_size", "knn_k",
        "knn_num_candidates"}`` (ms).

    Raises:
        ValueError: ``n`` < 1 or no questions.
        EmbeddingModelMismatchError: the alias's index was built with another model.
    """
    import datetime as dt

    import redis

    from bench.query.questions import unique_query
    from topics.queries import QueryRequest
    from workers.pools.components import build_retrieval_components
    from workers.retrieval.hybrid import hits, sources_of

    if n < 1 or not questions:
        raise ValueError(f"need n >= 1 and questions (n={n}, {len(questions)} questions)")
    run = uuid.uuid4().hex[:6]
    prefix = f"bench:retrieval-stage:{run}:emb:"
    emb = settings.embedding.model_copy(update={"cache_key_prefix": prefix})
    settings = settings.model_copy(update={"embedding": emb})
    embedder, retriever, *_ = build_retrieval_components(settings)
    rng = random.Random(seed)

    def request(i: int) -> QueryRequest:
        now = dt.datetime.now(dt.UTC)
        return QueryRequest(
            tenant=tenant,
            query=unique_query(rng.choice(list(questions)), run, i),
            deadline=now + dt.timedelta(seconds=60),
            created_at=now,
        )

    def embed(q: QueryRequest) -> Any:
        return embedder.embed([q.query])

    def search(q: QueryRequest, vectors: Any) -> Any:
        return retriever.search_pairs([q], vectors)[0]

    def fuse(q: QueryRequest, pair: Any) -> Any:
        return retriever.fuse(q, hits(pair[0]), hits(pair[1]))

    def expand(pair: Any, candidates: Any) -> Any:
        return retriever.with_preceding([candidates], sources_of([pair]))

    requests = [request(i) for i in range(warmup + n)]
    try:
        time_queries(requests[:warmup], embed, search, fuse, expand=expand)
        timed = time_queries(requests[warmup:], embed, search, fuse, expand=expand)
    finally:
        client = redis.Redis.from_url(settings.redis.url, socket_timeout=5)
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
    r = settings.retrieval
    return {
        "stages": timed.summary(),
        "queries": n,
        "warmup": warmup,
        "index_alias": settings.elasticsearch.index_alias,
        "backend": settings.embedding.backend,
        "model": embedder.model_id,
        "embed_threads": r.embed_threads,
        "top_n": r.top_n,
        "bm25_size": r.bm25_size,
        "knn_k": r.knn_k,
        "knn_num_candidates": r.knn_num_candidates,
    }


def render(payload: dict[str, Any]) -> Table:
    """A rich table of :func:`measure_retrieval_stage`'s result (ms per stage)."""
    load = payload.get("load_avg_1m") or {}
    table = Table(
        title=f"retrieval stage, one query at a time: {payload['queries']} queries, "
        f"{payload['backend']} ({payload['model']}), {payload['index_alias']}, "
        f"load {load.get('start')}-{load.get('end')}"
    )
    for col in ("stage", "p50 ms", "p95 ms", "p99 ms", "max ms", "mean ms"):
        table.add_column(col)
    for stage, stats in payload["stages"].items():
        table.add_row(stage, *(f"{stats.get(k, float('nan')):g}"
                               for k in ("p50", "p95", "p99", "max", "mean")))  # fmt: skip
    return table
